//! The A2A task store: every task's state, artifacts and messages, and each task's
//! numbered events for streams and resubscription. It sits below both doors: the wire
//! reports into it, and the seed's wire and the A2A v1.0 door answer from it.
//!
//! The wire reports what a task does (the same typed calls that become the seed's
//! frames); this store turns them into v1 events. Each task numbers its events from 1,
//! so a client that lost its connection names the last one it read and gets exactly
//! the rest, or is told plainly that they are gone. The store is bounded: it keeps the
//! manifest's `lifecycle.task_history` most recent tasks; each task keeps its latest
//! events up to [`Cap`] while it runs, and fewer once it has ended.

mod artifacts;
mod book;
mod cap;
mod event_log;
mod events;
mod journal;
mod messages;
mod restart;
#[cfg(test)]
mod testing;

use std::sync::{Mutex, MutexGuard};

use ::a2a::{Message, Task, TaskState};
use tokio::sync::watch;

use crate::frames::{ArtifactFrame, State};
use artifacts::tool_artifact;
use book::{Book, Held};
use cap::Cap;
pub use event_log::{Event, Follower, Missed};
pub use events::{numbered, with_seq};
pub use journal::{FILE as JOURNAL_FILE, Journal, read as read_journal};
use messages::agent_message;

/// Why a task the journal holds unended failed, when nothing says more.
pub const STOPPED_BEFORE_END: &str = "the capsule stopped before the task ended";

/// The key under which mur's own facts ride in v1 `metadata` objects.
pub const META: &str = "murmur";

pub struct Tasks {
    book: Mutex<Book>,
    /// Bumped on every event, so waiters re-read the book.
    changed: watch::Sender<u64>,
}

impl Default for Tasks {
    fn default() -> Self {
        Tasks::new(100)
    }
}

impl Tasks {
    pub fn new(keep: usize) -> Self {
        Tasks::with_cap(keep, Cap::default())
    }

    pub fn with_cap(keep: usize, cap: Cap) -> Self {
        Tasks {
            book: Mutex::new(Book::new(keep, cap)),
            changed: watch::channel(0).0,
        }
    }

    fn book(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for the next change after `seen`; the receiver says when.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A message became a task: state `SUBMITTED`, its message the first of its history.
    pub fn submitted(&self, id: &str, context: &str, message: Option<Message>) {
        let mut book = self.book();
        book.create(id, context, message);
        book.save(id);
        drop(book);
        self.bump();
    }

    /// A task the capsule could not take: it ends `REJECTED` at once.
    pub fn rejected(&self, id: &str, context: &str, message: Option<Message>, why: &str) {
        let mut book = self.book();
        book.create(id, context, message);
        book.finish(id, TaskState::Rejected, agent_message(id, context, why));
        drop(book);
        self.bump();
    }

    /// The wire began a task (or a reopened attempt of it).
    pub fn begin(&self, id: &str, context: &str) {
        let mut book = self.book();
        if !book.records.contains_key(id) {
            // A task from `task.md`, a finished shell command or a resume's report:
            // it never passed the door, but it is the capsule's task all the same.
            book.create(id, context, None);
        }
        if let Some(record) = book.records.get_mut(id) {
            // A held final status followed by a new attempt: a hook reopened the task,
            // so the attempt's end was not the task's.
            record.held = None;
        }
        book.current = Some(id.to_string());
        drop(book);
        self.bump();
    }

    /// The wire ended the task it was on: its held final status becomes its state.
    pub fn end(&self) {
        let mut book = self.book();
        let Some(id) = book.current.take() else {
            return;
        };
        book.reply_end(&id);
        let held = book.records.get_mut(&id).and_then(|r| r.held.take());
        if let Some(held) = held {
            book.commit(&id, held);
        }
        drop(book);
        self.bump();
    }

    /// A `status` the wire wrote for `id`.
    pub fn status(&self, id: &str, state: State, message: &str, response: Option<&str>) {
        let mut book = self.book();
        let Some(record) = book.records.get_mut(id) else {
            return;
        };
        if state.is_final() {
            record.held = Some(Held {
                state,
                message: message.to_string(),
                response: response.map(str::to_string),
            });
            return;
        }
        let context = record.task.context_id.clone();
        book.update(id, TaskState::Working, agent_message(id, &context, message));
        drop(book);
        self.bump();
    }

    /// A `status` of a `request-input` wait. The seed's `failed` `input-timeout` is not
    /// the task's end (the tool fails and the task goes on), so v1 reads it as working.
    pub fn input(&self, id: &str, state: State, message: &str) {
        let mut book = self.book();
        let Some(context) = book.records.get(id).map(|r| r.task.context_id.clone()) else {
            return;
        };
        let text = agent_message(id, &context, message);
        match state {
            State::InputRequired => {
                book.push_history(id, text.clone());
                book.update(id, TaskState::InputRequired, text);
                book.save(id);
            }
            _ => book.update(id, TaskState::Working, text),
        }
        drop(book);
        self.bump();
    }

    /// The person's answer to a task waiting for input joins its history.
    pub fn answered(&self, id: &str, message: Message) {
        let mut book = self.book();
        book.push_history(id, message);
        drop(book);
        self.bump();
    }

    /// A queued task canceled before it started.
    pub fn canceled_queued(&self, id: &str, context: &str, why: &str) {
        let mut book = self.book();
        if !book.records.contains_key(id) {
            book.create(id, context, None);
        }
        book.finish(id, TaskState::Canceled, agent_message(id, context, why));
        drop(book);
        self.bump();
    }

    /// One tool call's result (or a hook's artifact).
    pub fn artifact(&self, id: &str, frame: &ArtifactFrame<'_>) {
        let mut book = self.book();
        let Some(record) = book.records.get_mut(id) else {
            return;
        };
        record.artifacts_made += 1;
        let artifact = tool_artifact(record.artifacts_made, frame);
        book.add_artifact(id, artifact);
        drop(book);
        self.bump();
    }

    /// A piece of the model's reply, streamed by a driver or a tool: appended to the
    /// turn's `reply-<n>` artifact, as v1 streams text.
    pub fn chunk(&self, id: &str, text: &str) {
        let mut book = self.book();
        book.chunk(id, text);
        drop(book);
        self.bump();
    }

    /// The inference call that streamed a reply returned: its artifact is complete.
    pub fn reply_end(&self, id: &str) {
        let mut book = self.book();
        let ended = book.reply_end(id);
        drop(book);
        // Called before every inference call: only a reply that was open is news.
        if ended {
            self.bump();
        }
    }

    /// The task as it stands, with the sequence number of the last event it includes.
    pub fn snapshot(&self, id: &str) -> Option<(Task, u64)> {
        let book = self.book();
        book.records.get(id).map(|r| (r.task.clone(), r.seq))
    }

    /// Every task kept, oldest first, each with its last event's sequence number.
    pub fn all(&self) -> Vec<(Task, u64)> {
        let book = self.book();
        book.order
            .iter()
            .filter_map(|id| book.records.get(id).map(|r| (r.task.clone(), r.seq)))
            .collect()
    }

    /// The task of `context` that waits for input, if one does.
    pub fn waiting_in(&self, context: &str) -> Option<String> {
        let book = self.book();
        book.records
            .values()
            .find(|r| {
                r.task.context_id == context && r.task.status.state == TaskState::InputRequired
            })
            .map(|r| r.task.id.clone())
    }

    /// The task's state and its last event's number, without copying the task.
    pub fn state(&self, id: &str) -> Option<(TaskState, u64)> {
        let book = self.book();
        book.records
            .get(id)
            .map(|r| (r.task.status.state.clone(), r.seq))
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{kinds, run_to_completion, user};
    use super::*;

    #[test]
    fn a_task_numbers_its_events_and_its_answer_comes_before_its_end() {
        let tasks = Tasks::new(10);
        tasks.submitted("tsk_1", "ctx_1", Some(user("hi")));
        run_to_completion(&tasks, "tsk_1", "hello");
        assert_eq!(
            kinds(&tasks, "tsk_1"),
            [
                "1:task:TASK_STATE_SUBMITTED",
                "2:statusUpdate:TASK_STATE_WORKING",
                "3:artifactUpdate:response",
                "4:statusUpdate:TASK_STATE_COMPLETED",
            ]
        );
        let (task, seq) = tasks.snapshot("tsk_1").unwrap();
        assert_eq!(seq, 4);
        let history = task.history.unwrap();
        assert_eq!(history.len(), 2, "the question and the answer");
        assert_eq!(history[1].text(), Some("hello"));
        assert_eq!(history[0].task_id.as_deref(), Some("tsk_1"));
    }

    #[test]
    fn a_reopened_attempt_is_not_the_tasks_end() {
        let tasks = Tasks::new(10);
        tasks.submitted("tsk_1", "ctx_1", None);
        tasks.begin("tsk_1", "ctx_1");
        tasks.status(
            "tsk_1",
            State::Completed,
            "session ended",
            Some("first try"),
        );
        tasks.begin("tsk_1", "ctx_1");
        tasks.status("tsk_1", State::Working, "inference turn 1", None);
        assert_eq!(
            tasks.snapshot("tsk_1").unwrap().0.status.state,
            TaskState::Working
        );
        tasks.status(
            "tsk_1",
            State::Completed,
            "session ended",
            Some("second try"),
        );
        tasks.end();
        let (task, _) = tasks.snapshot("tsk_1").unwrap();
        assert_eq!(task.status.state, TaskState::Completed);
        assert_eq!(task.status.message.unwrap().text(), Some("second try"));
        let terminal = kinds(&tasks, "tsk_1")
            .iter()
            .filter(|k| k.ends_with("COMPLETED"))
            .count();
        assert_eq!(terminal, 1, "one terminal state, the last attempt's");
    }

    #[test]
    fn input_required_ends_a_stream_and_a_timeout_is_not_the_end() {
        let tasks = Tasks::new(10);
        tasks.submitted("tsk_1", "ctx_1", None);
        tasks.begin("tsk_1", "ctx_1");
        tasks.input("tsk_1", State::InputRequired, "Which file?");
        let (events, ended) = tasks.events_after("tsk_1", 1).unwrap();
        assert!(events[0].ends && !ended);
        assert_eq!(tasks.waiting_in("ctx_1").as_deref(), Some("tsk_1"));
        tasks.input("tsk_1", State::Failed, "input-timeout");
        let (task, _) = tasks.snapshot("tsk_1").unwrap();
        assert_eq!(task.status.state, TaskState::Working);
        assert_eq!(task.status.message.unwrap().text(), Some("input-timeout"));
    }
}
