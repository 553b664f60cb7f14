//! The door's side of peer tasks: the desk's admission of a task marked `peer`, the
//! fixed answer to one it refuses, and the same door taking a task from another member
//! of its formation without a socket ([`Callee`]).

use ::a2a::{Message, Part, Role, TaskState};
use futures_util::future::BoxFuture;

use super::{Arrived, Served};
use crate::http1::{Reply, Request};
use crate::peer::desk::{Admitted, Call, Desk, Refusal as PeerRefusal};
use crate::peer::member::{Callee, Progress};
use crate::peer::{self, Ask, Chain, Failure, FailureKind};
use crate::queue::{Acceptance, Origin, Refusal};
use crate::trace::line;

/// A peer task's facts, as the door read them, until the task has an id.
pub struct Sent {
    pub call_id: Option<String>,
    pub caller_task: Option<String>,
    pub admitted: Admitted,
}

/// Whether `request` is a peer task the desk takes, and how.
pub fn admitted(desk: &Desk, request: &Request) -> Result<Admitted, PeerRefusal> {
    let chain = request.header(peer::CHAIN_HEADER).unwrap_or_default();
    let chain = Chain::parse(chain).map_err(PeerRefusal::Chain)?;
    desk.admit(bearer(request), chain)
}

/// The refusal of a request marked `peer` that the desk does not take; `None` for every
/// other request.
pub fn refused(desk: &Desk, request: &Request) -> Option<Reply> {
    let origin = Origin::claimed(request.header(peer::ORIGIN_HEADER));
    if origin != Origin::Peer {
        return None;
    }
    let refusal = admitted(desk, request).err()?;
    let (status, body) = refusal.answer();
    Some(Reply::json(status, &body))
}

/// Whether a peer task presents the credential of a roster edge into this member: the
/// door lets it in as it lets in its own token holders.
pub fn edge_admits(desk: &Desk, request: &Request) -> bool {
    Origin::claimed(request.header(peer::ORIGIN_HEADER)) == Origin::Peer
        && admitted(desk, request).is_ok_and(|a| a.caller.is_some())
}

fn bearer(request: &Request) -> Option<&str> {
    let value = request.header("authorization")?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// A taken peer task: its chain held for the calls it makes, its arrival traced.
pub fn hold(served: &Served, task: &str, sent: Sent, traceparent: Option<&str>) {
    let chain = sent.admitted.chain.header();
    let received = line::peer_task_received(&line::PeerTask {
        call_id: sent.call_id.as_deref().filter(|c| word(c)),
        caller: sent.admitted.caller.as_deref(),
        caller_task_id: sent.caller_task.as_deref().filter(|c| word(c)),
        chain: &chain,
    });
    let _ = served.trace.under_session(Some(task), received);
    let call = Call {
        call_id: sent.call_id.filter(|c| word(c)),
        caller_task: sent.caller_task.filter(|c| word(c)),
    };
    served
        .desk
        .arrived(task, Some((sent.admitted, call)), traceparent);
}

/// An id a header may carry into a trace line: nothing else gets there.
fn word(s: &str) -> bool {
    s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

impl Callee for Served {
    fn take(&self, ask: &Ask, credential: &str) -> Result<String, Failure> {
        let name = self.desk.me().name.clone();
        let refused = |text: String| Failure::new(FailureKind::Refused, text);
        let admitted = self
            .desk
            .admit(Some(credential), ask.chain.clone())
            .map_err(|r| refused(r.told(&name)))?;
        if self.queue.policy().acceptance == Acceptance::None {
            return Err(refused(format!(
                "{name} takes no tasks (lifecycle.task_acceptance: none)"
            )));
        }
        let mut message = Message::new(Role::User, vec![Part::text(ask.text.clone())]);
        message.message_id = format!("msg_{}", ask.call_id);
        let arrived = Arrived {
            message_id: message.message_id.clone(),
            context_id: None,
            text: ask.text.clone(),
            v1: message,
        };
        let sent = Sent {
            call_id: Some(ask.call_id.clone()),
            caller_task: Some(ask.caller_task.clone()),
            admitted,
        };
        let (task, _, taken) = self.enter(
            arrived,
            Origin::Peer,
            ask.traceparent.as_deref(),
            Some(sent),
        );
        match taken {
            Ok(()) => Ok(task),
            Err(Refusal::Busy) => Err(Failure::new(
                FailureKind::Busy,
                format!("{name} is busy with other work and did not take the task"),
            )
            .of_task(&task)),
            Err(Refusal::Closed) => Err(Failure::new(
                FailureKind::Unreachable,
                format!("{name} is stopping and takes no more tasks"),
            )
            .of_task(&task)),
        }
    }

    fn next<'a>(&'a self, task: &'a str, after: u64) -> BoxFuture<'a, Progress> {
        Box::pin(async move {
            let tasks = self.wire.tasks();
            let mut changes = tasks.watch();
            loop {
                if let Some(progress) = progress(self, task, after) {
                    return progress;
                }
                if changes.changed().await.is_err() {
                    return Progress::Gone;
                }
            }
        })
    }

    fn reply(&self, task: &str, text: String) -> Result<(), String> {
        let tasks = self.wire.tasks();
        let (snapshot, _) = tasks.snapshot(task).ok_or("its task is gone")?;
        if snapshot.status.state != TaskState::InputRequired {
            return Err("its task no longer waits for input".into());
        }
        let mut message = Message::new(Role::User, vec![Part::text(text.clone())]);
        message.message_id = crate::ids::message();
        message.task_id = Some(task.to_string());
        message.context_id = Some(snapshot.context_id.clone());
        self.inbox
            .deliver(&snapshot.context_id, text)
            .map_err(|_| "its task no longer waits for input".to_string())?;
        tasks.answered(task, message);
        Ok(())
    }

    fn cancel(&self, task: &str) {
        let _ = self.control.cancel(task);
    }

    fn page(&self) -> Option<String> {
        Some(self.address.clone())
    }
}

/// Where a followed task stands, if past `after` there is news.
fn progress(served: &Served, task: &str, after: u64) -> Option<Progress> {
    let Some((snapshot, seq)) = served.wire.tasks().snapshot(task) else {
        return Some(Progress::Gone);
    };
    let text = status_text(&snapshot.status.message);
    match snapshot.status.state {
        TaskState::Completed => Some(Progress::Completed(text)),
        TaskState::InputRequired if seq > after => Some(Progress::Input { prompt: text, seq }),
        state if state.is_terminal() => Some(Progress::Ended {
            state: state_word(&state).to_string(),
            message: text,
        }),
        _ => None,
    }
}

fn status_text(message: &Option<Message>) -> String {
    let Some(message) = message else {
        return String::new();
    };
    let texts: Vec<&str> = message
        .parts
        .iter()
        .filter_map(|p| match &p.content {
            ::a2a::PartContent::Text(text) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    texts.join("\n")
}

fn state_word(state: &TaskState) -> &'static str {
    match state {
        TaskState::Failed => "failed",
        TaskState::Canceled => "canceled",
        TaskState::Rejected => "rejected",
        _ => "without an answer",
    }
}
