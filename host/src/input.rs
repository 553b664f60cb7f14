//! `request-input`: a tool of an A2A task asks the person behind it a question and
//! waits for the reply. The open wait is a slot the server looks in: the next
//! `message/stream` in the task's context answers it instead of becoming a new task.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::error::Error;
use crate::frames::State;
use crate::queue::{Pending, Source};
use crate::trace::line::{self, Input};
use crate::trace::{Place, SessionTrace};
use crate::wire::{InputWait, Wire};

/// The capsule's open `request-input` wait, if any. One task runs at a time and its
/// tool calls run one after another, so there is never more than one.
pub struct Inbox {
    timeout: Option<Duration>,
    waiting: Mutex<Option<Waiting>>,
    tickets: AtomicU64,
}

struct Waiting {
    ticket: u64,
    context_id: String,
    reply: oneshot::Sender<String>,
}

/// An open wait. Dropping it closes the slot, so a call that is canceled (its future
/// dropped) leaves no wait behind to swallow the next message.
struct Open<'a> {
    inbox: &'a Inbox,
    ticket: u64,
    reply: oneshot::Receiver<String>,
}

impl Open<'_> {
    /// Closes the slot, then takes a reply that was delivered just before: once the
    /// slot is empty no reply can arrive, and none that the server accepted is lost.
    fn close(mut self) -> Option<String> {
        self.inbox.clear(self.ticket);
        self.reply.try_recv().ok()
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.inbox.clear(self.ticket);
    }
}

impl Inbox {
    pub fn new(timeout: Option<Duration>) -> Self {
        Inbox {
            timeout,
            waiting: Mutex::new(None),
            tickets: AtomicU64::new(0),
        }
    }

    fn slot(&self) -> MutexGuard<'_, Option<Waiting>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn open(&self, context_id: &str) -> Option<Open<'_>> {
        let mut slot = self.slot();
        if slot.is_some() {
            return None;
        }
        let ticket = self.tickets.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        *slot = Some(Waiting {
            ticket,
            context_id: context_id.to_string(),
            reply: tx,
        });
        Some(Open {
            inbox: self,
            ticket,
            reply: rx,
        })
    }

    fn clear(&self, ticket: u64) {
        let mut slot = self.slot();
        if slot.as_ref().is_some_and(|w| w.ticket == ticket) {
            *slot = None;
        }
    }

    /// Hands `text` to the wait in `context_id`. Gives the text back when no tool waits
    /// in that context, and the message becomes a task as usual.
    pub fn deliver(&self, context_id: &str, text: String) -> Result<(), String> {
        let mut slot = self.slot();
        match slot.take_if(|w| w.context_id == context_id) {
            Some(waiting) => waiting.reply.send(text),
            None => Err(text),
        }
    }
}

/// What a tool call needs to ask for input; only the calls of an A2A task get one.
pub struct Port {
    inbox: Arc<Inbox>,
    wire: Arc<Wire>,
    trace: Arc<SessionTrace>,
    task_id: String,
    context_id: String,
    /// The trace line the wait's events hang from (the turn that made the call).
    parent: String,
}

impl Port {
    /// A port for a call of `task`, or `None` when the task did not come over A2A
    /// (the launch task has nobody on a stream to answer it).
    /// The wait is answered through `inbox` and reported on `wire` and in `trace`,
    /// under `parent`.
    pub fn of(
        inbox: &Arc<Inbox>,
        wire: &Arc<Wire>,
        trace: &Arc<SessionTrace>,
        task: &Pending,
        parent: &str,
    ) -> Option<Port> {
        (task.source == Source::A2a).then(|| Port {
            inbox: inbox.clone(),
            wire: wire.clone(),
            trace: trace.clone(),
            task_id: task.id.clone(),
            context_id: task.context_id.clone(),
            parent: parent.to_string(),
        })
    }

    /// Streams the prompt and waits for the reply, the timeout or the call's end.
    pub async fn ask(&self, prompt: &str) -> Result<String, String> {
        let inbox = &self.inbox;
        let Some(mut open) = inbox.open(&self.context_id) else {
            return Err(already_waiting());
        };
        let mut wait = InputWait::default();
        self.wire
            .input_wait(&mut wait, State::InputRequired, prompt);
        self.trace(Input::Requested {
            prompt_bytes: prompt.len(),
        });
        let replied = match inbox.timeout {
            Some(limit) => tokio::time::timeout(limit, &mut open.reply).await.ok(),
            None => Some((&mut open.reply).await),
        };
        match replied {
            Some(Ok(text)) => Ok(self.resumed(&mut wait, text)),
            // Both ends are ours and the slot is only cleared by `open` itself, so the
            // sender cannot go away first; if it ever does, the wait simply ends.
            Some(Err(_)) | None => match open.close() {
                Some(text) => Ok(self.resumed(&mut wait, text)),
                None => Err(self.timed_out(&mut wait, inbox.timeout)),
            },
        }
    }

    fn resumed(&self, wait: &mut InputWait, text: String) -> String {
        self.wire.input_wait(wait, State::Working, "resumed");
        self.trace(Input::Received {
            reply_bytes: text.len(),
        });
        text
    }

    fn timed_out(&self, wait: &mut InputWait, limit: Option<Duration>) -> String {
        self.wire.input_wait(wait, State::Failed, "input-timeout");
        let secs = limit.map(|d| d.as_secs()).unwrap_or(0);
        self.trace(Input::TimedOut { secs });
        Error::new(
            "E-RUN-051",
            format!("request-input timed out: no reply within {secs} s"),
        )
        .hint("raise lifecycle.input_timeout_secs, or remove it to wait without a limit")
        .to_string()
    }

    /// A trace line of the wait. A failed write does not fail the tool call: the trace
    /// keeps the failure, and the loop's next step ends the task with it.
    fn trace(&self, event: Input) {
        let place = Place {
            parent: Some(&self.parent),
            task: Some(&self.task_id),
        };
        let _ = self.trace.write(place, line::input(&self.task_id, event));
    }
}

/// The answer to `request-input` outside an A2A task.
pub fn no_a2a_task() -> String {
    Error::new(
        "E-RUN-050",
        "request-input is only available while a task submitted over A2A runs",
    )
    .hint("submit the task with message/stream; the launch task (--task) cannot ask for input")
    .to_string()
}

fn already_waiting() -> String {
    Error::new(
        "E-RUN-052",
        "request-input was called while another request-input wait is open",
    )
    .hint("ask one question at a time")
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_reply_reaches_only_the_wait_of_its_context() {
        let inbox = Inbox::new(None);
        assert_eq!(inbox.deliver("ctx_a", "early".into()), Err("early".into()));
        let mut open = inbox.open("ctx_a").unwrap();
        assert!(inbox.open("ctx_a").is_none(), "one wait at a time");
        assert_eq!(inbox.deliver("ctx_b", "other".into()), Err("other".into()));
        inbox.deliver("ctx_a", "yes".into()).unwrap();
        assert_eq!((&mut open.reply).await.unwrap(), "yes");
        assert_eq!(inbox.deliver("ctx_a", "again".into()), Err("again".into()));
    }

    #[test]
    fn a_dropped_wait_frees_the_slot() {
        let inbox = Inbox::new(None);
        let open = inbox.open("ctx_a").unwrap();
        drop(open);
        assert_eq!(inbox.deliver("ctx_a", "late".into()), Err("late".into()));
        assert!(inbox.open("ctx_a").is_some());
    }

    #[test]
    fn a_reply_delivered_as_the_wait_closes_is_kept() {
        let inbox = Inbox::new(None);
        let open = inbox.open("ctx_a").unwrap();
        inbox.deliver("ctx_a", "just in time".into()).unwrap();
        assert_eq!(open.close().as_deref(), Some("just in time"));
    }
}
