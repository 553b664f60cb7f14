//! The task store's book: a record per kept task, in the order they came, and what
//! each change the wire reports does to a task's state, artifacts and history.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use ::a2a::{
    Artifact, Message, StreamResponse, Task, TaskArtifactUpdateEvent, TaskState,
    TaskStatusUpdateEvent,
};

use super::artifacts::{
    RESPONSE, cut_to, keep_piece, reply_artifact, response_artifact, text_size,
};
use super::cap::Cap;
use super::event_log::Event;
use super::events::with_seq;
use super::journal::Journal;
use super::messages::{agent_message, joined, status_now};
use crate::frames::State;

pub(super) struct Book {
    pub(super) records: HashMap<String, Record>,
    /// Task ids, oldest first: what falls off the end when the store is full.
    pub(super) order: VecDeque<String>,
    keep: usize,
    pub(super) cap: Cap,
    /// The text the kept tasks hold, in bytes (see [`Cap::store_text`]).
    kept: usize,
    /// The task the wire is on.
    pub(super) current: Option<String>,
    pub(super) journal: Option<Journal>,
}

pub(super) struct Record {
    pub(super) task: Task,
    pub(super) seq: u64,
    pub(super) log: VecDeque<Event>,
    pub(super) log_bytes: usize,
    /// The last event each connection following the task has read.
    pub(super) followers: Vec<Arc<AtomicU64>>,
    /// The text this task holds, in bytes, and of it its tool results'.
    pub(super) kept: usize,
    pub(super) results_kept: usize,
    /// The artifact a streamed reply is being appended to.
    pub(super) reply: Option<String>,
    pub(super) replies_made: u64,
    /// A final status the wire wrote, held until the task really ends: an
    /// `on-task-end` hook may still reopen it, and v1 states never leave a terminal one.
    pub(super) held: Option<Held>,
    pub(super) artifacts_made: u64,
}

pub(super) struct Held {
    pub(super) state: State,
    pub(super) message: String,
    pub(super) response: Option<String>,
}

impl Record {
    pub(super) fn new(task: Task) -> Record {
        Record {
            task,
            seq: 0,
            log: VecDeque::new(),
            log_bytes: 0,
            followers: Vec::new(),
            kept: 0,
            results_kept: 0,
            reply: None,
            replies_made: 0,
            held: None,
            artifacts_made: 0,
        }
    }
}

impl Book {
    pub(super) fn new(keep: usize, cap: Cap) -> Book {
        Book {
            records: HashMap::new(),
            order: VecDeque::new(),
            keep: keep.max(1),
            cap,
            kept: 0,
            current: None,
            journal: None,
        }
    }

    /// Every task kept, oldest first, as the journal keeps them.
    pub(super) fn kept(&self) -> Vec<Task> {
        self.order
            .iter()
            .filter_map(|id| {
                self.records
                    .get(id)
                    .map(|r| with_seq(r.task.clone(), r.seq))
            })
            .collect()
    }

    pub(super) fn create(&mut self, id: &str, context: &str, message: Option<Message>) {
        if self.records.contains_key(id) {
            return;
        }
        let history: Option<Vec<Message>> = message.map(|m| vec![joined(m, id, context)]);
        let held = history
            .as_deref()
            .map_or(0, |h| h.iter().map(|m| text_size(&m.parts)).sum());
        let task = Task {
            id: id.to_string(),
            context_id: context.to_string(),
            status: status_now(TaskState::Submitted, None),
            artifacts: None,
            history,
            metadata: None,
        };
        self.insert(Record::new(task));
        self.hold(id, held);
        let snapshot = self.records.get(id).map(|r| r.task.clone());
        if let Some(task) = snapshot {
            self.log(id, StreamResponse::Task(task));
        }
    }

    /// Adds a record, dropping the oldest ended task (else the oldest) when full.
    pub(super) fn insert(&mut self, record: Record) {
        while self.records.len() >= self.keep {
            let victim = self
                .order
                .iter()
                .position(|id| {
                    self.records
                        .get(id)
                        .is_none_or(|r| r.task.status.state.is_terminal())
                })
                .unwrap_or(0);
            let Some(id) = self.order.get(victim).cloned() else {
                break;
            };
            self.forget(&id);
        }
        let id = record.task.id.clone();
        self.order.push_back(id.clone());
        self.records.insert(id, record);
    }

    /// Counts `bytes` more text held by `id`, then sheds the oldest ended tasks while
    /// the store holds more than [`Cap::store_text`].
    pub(super) fn hold(&mut self, id: &str, bytes: usize) {
        if let Some(record) = self.records.get_mut(id) {
            record.kept += bytes;
            self.kept += bytes;
        }
        while self.kept > self.cap.store_text {
            let current = self.current.as_deref();
            let oldest_ended = self.order.iter().find(|t| {
                Some(t.as_str()) != current
                    && t.as_str() != id
                    && self
                        .records
                        .get(*t)
                        .is_some_and(|r| r.task.status.state.is_terminal())
            });
            let Some(victim) = oldest_ended.cloned() else {
                break;
            };
            self.forget(&victim);
        }
    }

    pub(super) fn forget(&mut self, id: &str) {
        if let Some(record) = self.records.remove(id) {
            self.kept -= record.kept;
        }
        self.order.retain(|t| t != id);
    }

    pub(super) fn update(&mut self, id: &str, state: TaskState, message: Message) {
        let Some(record) = self.records.get_mut(id) else {
            return;
        };
        record.task.status = status_now(state, Some(message));
        let event = TaskStatusUpdateEvent {
            task_id: id.to_string(),
            context_id: record.task.context_id.clone(),
            status: record.task.status.clone(),
            metadata: None,
        };
        self.log(id, StreamResponse::StatusUpdate(event));
    }

    /// A terminal state: the event, then the journal.
    pub(super) fn finish(&mut self, id: &str, state: TaskState, message: Message) {
        self.update(id, state, message);
        self.save(id);
    }

    /// The final status the wire held: the answer first (an artifact, and the agent's
    /// last message), then the state.
    pub(super) fn commit(&mut self, id: &str, held: Held) {
        let Some(context) = self.records.get(id).map(|r| r.task.context_id.clone()) else {
            return;
        };
        let (state, text) = match held.state {
            State::Completed => (TaskState::Completed, held.response.unwrap_or(held.message)),
            State::Canceled => (TaskState::Canceled, held.message),
            _ => (TaskState::Failed, held.message),
        };
        let message = agent_message(id, &context, &text);
        if state == TaskState::Completed {
            self.add_artifact(id, response_artifact(&text));
            self.push_history(id, message.clone());
        }
        self.finish(id, state, message);
    }

    pub(super) fn add_artifact(&mut self, id: &str, artifact: Artifact) {
        let Some(record) = self.records.get_mut(id) else {
            return;
        };
        let mut kept = artifact.clone();
        if artifact.artifact_id != RESPONSE {
            let room = self.cap.task_results.saturating_sub(record.results_kept);
            cut_to(&mut kept, room);
            record.results_kept += text_size(&kept.parts);
        }
        let held = text_size(&kept.parts);
        record
            .task
            .artifacts
            .get_or_insert_with(Vec::new)
            .push(kept);
        let event = TaskArtifactUpdateEvent {
            task_id: id.to_string(),
            context_id: record.task.context_id.clone(),
            artifact,
            append: Some(false),
            last_chunk: Some(true),
            metadata: None,
        };
        self.log(id, StreamResponse::ArtifactUpdate(event));
        self.hold(id, held);
    }

    pub(super) fn chunk(&mut self, id: &str, text: &str) {
        let Some(record) = self.records.get_mut(id) else {
            return;
        };
        let artifacts = record.task.artifacts.get_or_insert_with(Vec::new);
        let mut held = 0;
        let (artifact_id, append) = match &record.reply {
            Some(open) => {
                if let Some(artifact) = artifacts.iter_mut().find(|a| &a.artifact_id == open) {
                    held = keep_piece(artifact, text);
                }
                (open.clone(), true)
            }
            None => {
                record.replies_made += 1;
                let open = format!("reply-{}", record.replies_made);
                let mut artifact = reply_artifact(&open, "");
                held = keep_piece(&mut artifact, text);
                artifacts.push(artifact);
                record.reply = Some(open.clone());
                (open, false)
            }
        };
        let event = self.reply_event(id, &artifact_id, text, append, false);
        self.log(id, event);
        self.hold(id, held);
    }

    /// Closes the open reply, if there is one; says whether there was.
    pub(super) fn reply_end(&mut self, id: &str) -> bool {
        let Some(open) = self.records.get_mut(id).and_then(|r| r.reply.take()) else {
            return false;
        };
        let event = self.reply_event(id, &open, "", true, true);
        self.log(id, event);
        true
    }

    /// One piece of a streamed reply, as its artifact update says it.
    fn reply_event(
        &self,
        id: &str,
        artifact: &str,
        text: &str,
        append: bool,
        last: bool,
    ) -> StreamResponse {
        let context = self.records.get(id).map(|r| r.task.context_id.clone());
        StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
            task_id: id.to_string(),
            context_id: context.unwrap_or_default(),
            artifact: reply_artifact(artifact, text),
            append: Some(append),
            last_chunk: Some(last),
            metadata: None,
        })
    }

    pub(super) fn push_history(&mut self, id: &str, message: Message) {
        let held = text_size(&message.parts);
        if let Some(record) = self.records.get_mut(id) {
            let context = record.task.context_id.clone();
            record
                .task
                .history
                .get_or_insert_with(Vec::new)
                .push(joined(message, id, &context));
        }
        self.hold(id, held);
    }

    /// Writes the task as it stands to the journal, if the store has one.
    pub(super) fn save(&mut self, id: &str) {
        if self.journal.is_none() {
            return;
        }
        let Some(task) = self
            .records
            .get(id)
            .map(|r| with_seq(r.task.clone(), r.seq))
        else {
            return;
        };
        // Taken out for the call, so the journal can ask for the kept tasks only when it
        // rewrites its file.
        if let Some(mut journal) = self.journal.take() {
            journal.append(&task, || self.kept());
            self.journal = Some(journal);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::super::testing::{run_to_completion, user};
    use super::super::{META, Tasks};
    use super::*;
    use crate::frames::ArtifactFrame;

    #[test]
    fn a_streamed_reply_is_one_artifact_in_pieces() {
        let tasks = Tasks::new(10);
        tasks.submitted("tsk_1", "ctx_1", None);
        tasks.begin("tsk_1", "ctx_1");
        tasks.chunk("tsk_1", "Hel");
        tasks.chunk("tsk_1", "lo");
        tasks.reply_end("tsk_1");
        let (events, _) = tasks.events_after("tsk_1", 1).unwrap();
        let updates: Vec<Value> = events
            .iter()
            .map(|e| serde_json::from_slice::<Value>(&e.json).unwrap()["artifactUpdate"].clone())
            .collect();
        let shape: Vec<(bool, bool, &str)> = updates
            .iter()
            .map(|u| {
                (
                    u["append"].as_bool().unwrap(),
                    u["lastChunk"].as_bool().unwrap(),
                    u["artifact"]["parts"][0]["text"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            [(false, false, "Hel"), (true, false, "lo"), (true, true, "")]
        );
        let (task, _) = tasks.snapshot("tsk_1").unwrap();
        let artifact = &task.artifacts.unwrap()[0];
        assert_eq!(artifact.artifact_id, "reply-1");
        assert_eq!(artifact.parts[0].as_text(), Some("Hello"));
    }

    #[test]
    fn a_task_keeps_its_tool_results_up_to_its_share_and_the_store_its_text() {
        let cap = Cap {
            task_results: 10,
            store_text: 40,
            ..Cap::default()
        };
        let tasks = Tasks::with_cap(10, cap);
        let result = |content: &'static str| ArtifactFrame {
            tool_name: "bash",
            content,
            fence_source: None,
            tool_call_id: None,
            is_error: false,
            duration_ms: None,
            exit_code: None,
            truncated: false,
        };
        tasks.submitted("tsk_1", "ctx_1", None);
        tasks.begin("tsk_1", "ctx_1");
        tasks.artifact("tsk_1", &result("123456"));
        tasks.artifact("tsk_1", &result("abcdef"));
        let (task, _) = tasks.snapshot("tsk_1").unwrap();
        let kept = task.artifacts.unwrap();
        assert_eq!(
            kept[1].parts[0].as_text(),
            Some("abcd"),
            "cut to the task's share"
        );
        assert_eq!(
            kept[1].metadata.as_ref().unwrap()[META]["keptTruncated"],
            true
        );
        let (events, _) = tasks.events_after("tsk_1", 2).unwrap();
        let streamed: Value = serde_json::from_slice(&events[0].json).unwrap();
        assert_eq!(
            streamed["artifactUpdate"]["artifact"]["parts"][0]["text"],
            "abcdef"
        );
        tasks.status("tsk_1", State::Completed, "session ended", Some("x"));
        tasks.end();

        // Three more tasks of 12 bytes each: past 40 bytes in all, the oldest ended goes.
        for n in 2..=4 {
            let id = format!("tsk_{n}");
            tasks.submitted(&id, "ctx_1", Some(user("twelve bytes")));
            run_to_completion(&tasks, &id, "");
        }
        assert!(
            tasks.snapshot("tsk_1").is_none(),
            "the oldest ended task was shed"
        );
        assert!(tasks.snapshot("tsk_4").is_some());
    }

    #[test]
    fn a_full_store_drops_its_oldest_ended_task_first() {
        let tasks = Tasks::new(2);
        tasks.submitted("tsk_running", "ctx_1", None);
        tasks.submitted("tsk_done", "ctx_1", None);
        run_to_completion(&tasks, "tsk_done", "ok");
        tasks.submitted("tsk_new", "ctx_1", None);
        assert!(tasks.snapshot("tsk_done").is_none());
        assert!(tasks.snapshot("tsk_running").is_some());
        assert!(tasks.snapshot("tsk_new").is_some());
    }
}
