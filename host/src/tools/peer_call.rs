//! `call-member`'s dispatch: a call to a peer becomes what the model reads, the answer
//! fenced as the peer's and cut to the caller's limit, or the tool error why not.

use std::sync::Arc;

use super::{Dispatched, TaskInfo, Tools, peer_tool};
use crate::input::Port;
use crate::wire::Wire;

impl Tools {
    /// A `call-member` call: its answer fenced as the peer's, or the tool error why not.
    pub(super) async fn run_peer(
        &self,
        desk: &crate::peer::desk::Desk,
        input: &str,
        task: &TaskInfo,
        wire: &Arc<Wire>,
        (port, traceparent): (Option<Port>, Option<String>),
    ) -> Dispatched {
        let (peer, text) = match peer_tool::parse(desk, input) {
            Ok(parsed) => parsed,
            Err(told) => return Dispatched::not_reached(told),
        };
        let max = usize::try_from(self.grants.max_result_bytes).unwrap_or(usize::MAX);
        // The call's own span, else the context the task arrived with.
        let traceparent = traceparent.or_else(|| desk.traceparent_of(&task.id));
        let ask = peer_tool::Outgoing {
            text,
            task: &task.id,
            traceparent,
            max_answer_bytes: max,
            deadline: self.grants.deadline,
        };
        let called = peer_tool::call(desk, peer, ask, wire, port.as_ref()).await;
        let source = peer_tool::source(&called.peer);
        let (text, is_error, truncated) = match &called.outcome {
            Ok(answer) if answer.truncated => {
                let limit = self.grants.max_result_bytes;
                let note = format!(
                    "[the answer was cut at capabilities.limits.max_tool_result_bytes ({limit} bytes)]"
                );
                (format!("{}\n{note}", answer.text), false, true)
            }
            Ok(answer) => (answer.text.clone(), false, false),
            Err(failure) => (failure.message.clone(), true, false),
        };
        let mut out = Dispatched::fenced_as(&source, &text, is_error);
        out.truncated = truncated;
        out.peer = Some(called);
        out
    }
}
