//! The execution: the usual tool loop (infer, run the calls the model asks for, go on
//! until it ends its turn), offering only the tools the plan named.

use crate::messages::{request, tool_results};
use crate::murmur::message::types::Message;
use crate::murmur::session::host;
use crate::murmur::session::types::{StopReason, TaskOutcome};

/// Runs turns until the model ends its turn; its answer is the last message of
/// `messages`. `Err` is how the task ended instead.
pub fn run(messages: &mut Vec<Message>, tools: &[String]) -> Result<(), TaskOutcome> {
    loop {
        // `Some(subset)`: the host offers these tools and no other, and refuses a
        // name the capsule does not have. An empty subset offers none.
        let asked = host::infer(&request(messages, None, Some(tools.to_vec())));
        let reply = asked.map_err(TaskOutcome::InferenceFailed)?;
        // The provider needs to see its own tool calls before the results that answer them.
        messages.push(reply.message);
        match reply.stop_reason {
            StopReason::EndTurn | StopReason::MaxTokens => return Ok(()),
            StopReason::ToolCall => {
                // The host runs them (up to `lifecycle.parallel_tools` at once) and
                // answers in call order.
                let results = host::call_tools(&reply.tool_calls);
                messages.push(tool_results(results.map_err(TaskOutcome::Failed)?));
            }
        }
    }
}
