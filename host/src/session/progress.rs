//! What a loop reports and reads about its own progress: a `working` status of its
//! own, the task's budget (turns and the size of a conversation), and follow-up tasks
//! it queues for the capsule.

use super::current::Current;
use super::{LoopState, trace_failed};
use crate::bindings::message::Message;
use crate::bindings::session_loop::murmur::session::types::TaskBudget;
use crate::conversation;
use crate::frames::State;
use crate::queue::{Origin, Pending, Refusal, Source};
use crate::trace::line;

/// The longest status message a loop may write: statuses are frames every client
/// receives and the replay ring keeps.
const MAX_STATUS_BYTES: usize = 4096;

/// The longest follow-up task a loop may queue, as the longest a client may send.
const MAX_FOLLOW_UP_BYTES: usize = 1 << 20;

impl Current<'_> {
    /// `status`: a `working` status with the loop's own message, numbered by the
    /// task's counter like every status.
    pub fn loop_status(&self, message: &str) -> Result<(), String> {
        // A canceled task's next status is its final one; nothing may claim it works on.
        if self.session.running.is_canceled() {
            return Err(super::CANCELED.into());
        }
        if message.len() > MAX_STATUS_BYTES {
            return Err(format!(
                "a status message holds at most {MAX_STATUS_BYTES} bytes; the loop sent {}",
                message.len()
            ));
        }
        let message = crate::secret::scrub(message);
        self.session.wire.status(State::Working, &message, None);
        Ok(())
    }

    /// `budget`: the task's turns, and `messages` measured as the host measures a
    /// conversation.
    pub fn budget(&self, messages: &[Message]) -> TaskBudget {
        let settings = &self.session.settings;
        let used = u32::try_from(self.run.counts.turns).unwrap_or(u32::MAX);
        TaskBudget {
            turns_used: used,
            turns_left: settings.max_turns.saturating_sub(used),
            tokens: conversation::tokens_all(messages),
            window: settings.context.window,
            threshold: settings.context.compaction.threshold,
        }
    }
}

impl LoopState {
    /// `enqueue`: a follow-up task, origin `system`, in the `bg` lane, in the given
    /// context, the running task's, or a new one.
    pub(super) fn follow_up(
        &mut self,
        text: String,
        context_id: Option<String>,
    ) -> wasmtime::Result<Result<String, String>> {
        if text.trim().is_empty() {
            return Ok(Err("a follow-up task needs text".into()));
        }
        if text.len() > MAX_FOLLOW_UP_BYTES {
            return Ok(Err(format!(
                "a follow-up task holds at most {MAX_FOLLOW_UP_BYTES} bytes; the loop sent {}",
                text.len()
            )));
        }
        let by_task = self.running.as_ref().map(|r| r.task.id.clone());
        let context_id = context_id
            .or_else(|| self.running.as_ref().map(|r| r.task.context_id.clone()))
            .unwrap_or_else(crate::ids::context);
        let task = Pending {
            id: crate::ids::task(),
            context_id,
            text,
            origin: Origin::System,
            source: Source::Loop,
            message_id: None,
            breach: None,
            traceparent: None,
        };
        let session = &self.session;
        if let Err(refusal) = session.queue.push_follow_up(task.clone()) {
            return Ok(Err(match refusal {
                Refusal::Busy => format!(
                    "the queue is full (lifecycle.queue_depth {}): the follow-up task was not queued",
                    session.queue.policy().depth
                ),
                Refusal::Closed => {
                    "the session is ending: the follow-up task was not queued".into()
                }
            }));
        }
        session
            .trace
            .under_session(
                Some(&task.id),
                line::task_enqueued(&task, by_task.as_deref()),
            )
            .map_err(trace_failed)?;
        Ok(Ok(task.id))
    }
}
