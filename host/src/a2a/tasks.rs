//! The task store behind the A2A v1.0 door: every task's state, artifacts and messages,
//! and each task's numbered events for streams and resubscription.
//!
//! The wire reports what a task does (the same typed calls that become the seed's
//! frames); this store turns them into v1 events. Each task numbers its events from 1,
//! so a client that lost its connection names the last one it read and gets exactly
//! the rest, or is told plainly that they are gone. The store is bounded: it keeps the
//! manifest's `lifecycle.task_history` most recent tasks; each task keeps its latest
//! events up to [`Cap`] while it runs, and fewer once it has ended.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ::a2a::{
    Artifact, Message, Part, Role, StreamResponse, Task, TaskArtifactUpdateEvent, TaskState,
    TaskStatus, TaskStatusUpdateEvent,
};
use bytes::Bytes;
use chrono::Utc;
use tokio::sync::watch;

use super::artifacts::{
    RESPONSE, cut_to, keep_piece, reply_artifact, response_artifact, text_size, tool_artifact,
};
use super::events::{encode_event, ends_stream, numbered, with_seq};
use super::journal::Journal;
use crate::frames::{ArtifactFrame, State};

mod restart;

/// How many of a task's events are kept for resubscription. While it runs, its latest
/// `events` (and `bytes`); once it has ended, its latest `ended`, when a late reader can
/// read the whole task with `GetTask`. Those trims never take an event a connection
/// following the task has not read yet: a live stream is never cut because its task
/// raced ahead. Only past `hard_events` or `hard_bytes` is a follower that far behind
/// left behind (and told so), so one stalled client cannot hold a task's log unbounded.
#[derive(Clone, Copy, Debug)]
pub struct Cap {
    pub events: usize,
    pub bytes: usize,
    pub ended: usize,
    pub hard_events: usize,
    pub hard_bytes: usize,
    /// How much of its tool results one task keeps (the stream carries each whole): a
    /// model may call a tool a thousand times for megabytes each.
    pub task_results: usize,
    /// How much text the whole store keeps (messages and artifacts, all tasks). Past
    /// it the oldest ended tasks go first, whatever `lifecycle.task_history` allows.
    pub store_text: usize,
}

impl Default for Cap {
    fn default() -> Self {
        Cap {
            events: 4096,
            bytes: 4 * 1024 * 1024,
            ended: 256,
            hard_events: 16_384,
            // A task's answer is logged up to three times (its chunks, the `response`
            // artifact, the final status), and a driver's reply may be 16 MiB.
            hard_bytes: 64 * 1024 * 1024,
            task_results: 16 * 1024 * 1024,
            store_text: 256 * 1024 * 1024,
        }
    }
}

/// Why a task the journal holds unended failed, when nothing says more.
pub const STOPPED_BEFORE_END: &str = "the capsule stopped before the task ended";

/// The key under which mur's own facts ride in v1 `metadata` objects.
pub const META: &str = "murmur";

/// One numbered event of a task, encoded once for every connection that reads it.
#[derive(Clone, Debug)]
pub struct Event {
    pub seq: u64,
    /// The `StreamResponse` JSON.
    pub json: Bytes,
    /// A terminal or interrupted state: where a stream of the task ends.
    pub ends: bool,
}

/// What a reader asked for past what is kept.
#[derive(Debug, PartialEq, Eq)]
pub enum Missed {
    UnknownTask,
    /// The events after the reader's are no longer buffered; this is the first that is.
    Gone {
        first_available: u64,
    },
}

pub struct Tasks {
    book: Mutex<Book>,
    /// Bumped on every event, so waiters re-read the book.
    changed: watch::Sender<u64>,
}

struct Book {
    records: HashMap<String, Record>,
    /// Task ids, oldest first: what falls off the end when the store is full.
    order: VecDeque<String>,
    keep: usize,
    cap: Cap,
    /// The text the kept tasks hold, in bytes (see [`Cap::store_text`]).
    kept: usize,
    /// The task the wire is on.
    current: Option<String>,
    journal: Option<Journal>,
}

struct Record {
    task: Task,
    seq: u64,
    log: VecDeque<Event>,
    log_bytes: usize,
    /// The last event each connection following the task has read.
    followers: Vec<Arc<AtomicU64>>,
    /// The text this task holds, in bytes, and of it its tool results'.
    kept: usize,
    results_kept: usize,
    /// The artifact a streamed reply is being appended to.
    reply: Option<String>,
    replies_made: u64,
    /// A final status the wire wrote, held until the task really ends: an
    /// `on-task-end` hook may still reopen it, and v1 states never leave a terminal one.
    held: Option<Held>,
    artifacts_made: u64,
}

struct Held {
    state: State,
    message: String,
    response: Option<String>,
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
            book: Mutex::new(Book {
                records: HashMap::new(),
                order: VecDeque::new(),
                keep: keep.max(1),
                cap,
                kept: 0,
                current: None,
                journal: None,
            }),
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

    /// A connection following `id` from after `after`: what it has not read is kept
    /// for it (see [`Cap`]) until it is dropped.
    pub fn follow(&self, id: &str, after: u64) -> Follower<'_> {
        let cursor = Arc::new(AtomicU64::new(after));
        if let Some(record) = self.book().records.get_mut(id) {
            record.followers.push(cursor.clone());
        }
        Follower {
            tasks: self,
            id: id.to_string(),
            cursor,
        }
    }

    /// The task's state and its last event's number, without copying the task.
    pub fn state(&self, id: &str) -> Option<(TaskState, u64)> {
        let book = self.book();
        book.records
            .get(id)
            .map(|r| (r.task.status.state.clone(), r.seq))
    }

    /// The events of `id` after `after`, and whether the task has ended. `Err` when the
    /// task is unknown or the first of them is no longer kept.
    pub fn events_after(&self, id: &str, after: u64) -> Result<(Vec<Event>, bool), Missed> {
        let book = self.book();
        let record = book.records.get(id).ok_or(Missed::UnknownTask)?;
        let first = record.log.front().map_or(record.seq + 1, |e| e.seq);
        if after.saturating_add(1) < first && after < record.seq {
            return Err(Missed::Gone {
                first_available: first,
            });
        }
        // The log holds consecutive numbers from `first`: the reader's place is an
        // index, so a reader that keeps up pays for what it reads, not for the log.
        let skip = usize::try_from(after.saturating_add(1).saturating_sub(first))
            .unwrap_or(usize::MAX)
            .min(record.log.len());
        let events = record.log.range(skip..).cloned().collect();
        Ok((events, record.task.status.state.is_terminal()))
    }
}

/// A connection following a task; see [`Tasks::follow`].
pub struct Follower<'t> {
    tasks: &'t Tasks,
    id: String,
    cursor: Arc<AtomicU64>,
}

impl Follower<'_> {
    /// The events it has not read yet (now counted as read), and whether the task ended.
    pub fn next(&self) -> Result<(Vec<Event>, bool), Missed> {
        let after = self.cursor.load(Ordering::Acquire);
        let read = self.tasks.events_after(&self.id, after)?;
        if let Some(last) = read.0.last() {
            self.cursor.store(last.seq, Ordering::Release);
        }
        Ok(read)
    }

    pub fn after(&self) -> u64 {
        self.cursor.load(Ordering::Acquire)
    }
}

impl Drop for Follower<'_> {
    /// What only this connection was keeping can go now.
    fn drop(&mut self) {
        let mut book = self.tasks.book();
        let cap = book.cap;
        if let Some(record) = book.records.get_mut(&self.id) {
            record.followers.retain(|f| !Arc::ptr_eq(f, &self.cursor));
            let events = record.kept_events(&cap);
            record.trim(events, &cap);
        }
    }
}

impl Record {
    fn new(task: Task) -> Record {
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

    /// Drops the oldest events past `events` or `bytes` that every follower has read,
    /// then, whoever has read them, those past the hard caps (always keeping the newest).
    fn trim(&mut self, events: usize, cap: &Cap) {
        let read_by_all = self
            .followers
            .iter()
            .map(|f| f.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX);
        let over = |r: &Record, events: usize, bytes: usize| {
            r.log.len() > events.max(1) || (r.log_bytes > bytes && r.log.len() > 1)
        };
        while over(self, events, cap.bytes)
            && self.log.front().is_some_and(|e| e.seq <= read_by_all)
        {
            self.pop();
        }
        while over(self, cap.hard_events, cap.hard_bytes) {
            self.pop();
        }
    }

    fn pop(&mut self) {
        if let Some(gone) = self.log.pop_front() {
            self.log_bytes -= gone.json.len();
        }
    }

    /// How many events the task keeps now: fewer once it has ended.
    fn kept_events(&self, cap: &Cap) -> usize {
        if self.task.status.state.is_terminal() {
            cap.ended
        } else {
            cap.events
        }
    }
}

impl Book {
    /// Every task kept, oldest first, as the journal keeps them.
    fn kept(&self) -> Vec<Task> {
        self.order
            .iter()
            .filter_map(|id| {
                self.records
                    .get(id)
                    .map(|r| with_seq(r.task.clone(), r.seq))
            })
            .collect()
    }

    fn create(&mut self, id: &str, context: &str, message: Option<Message>) {
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
    fn insert(&mut self, record: Record) {
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
    fn hold(&mut self, id: &str, bytes: usize) {
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

    fn forget(&mut self, id: &str) {
        if let Some(record) = self.records.remove(id) {
            self.kept -= record.kept;
        }
        self.order.retain(|t| t != id);
    }

    /// Numbers `event` for its task and keeps it.
    fn log(&mut self, id: &str, event: StreamResponse) {
        let cap = self.cap;
        let Some(record) = self.records.get_mut(id) else {
            return;
        };
        record.seq += 1;
        let seq = record.seq;
        let ends = ends_stream(&event);
        let json = encode_event(numbered(event, seq));
        record.log_bytes += json.len();
        record.log.push_back(Event { seq, json, ends });
        let events = record.kept_events(&cap);
        record.trim(events, &cap);
    }

    fn update(&mut self, id: &str, state: TaskState, message: Message) {
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
    fn finish(&mut self, id: &str, state: TaskState, message: Message) {
        self.update(id, state, message);
        self.save(id);
    }

    /// The final status the wire held: the answer first (an artifact, and the agent's
    /// last message), then the state.
    fn commit(&mut self, id: &str, held: Held) {
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

    fn add_artifact(&mut self, id: &str, artifact: Artifact) {
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

    fn chunk(&mut self, id: &str, text: &str) {
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
    fn reply_end(&mut self, id: &str) -> bool {
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

    fn push_history(&mut self, id: &str, message: Message) {
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
    fn save(&mut self, id: &str) {
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

/// A message stamped with the task and context it belongs to.
fn joined(mut message: Message, id: &str, context: &str) -> Message {
    message.task_id = Some(id.to_string());
    message.context_id = Some(context.to_string());
    message
}

/// A message from the agent: one text part.
pub fn agent_message(id: &str, context: &str, text: &str) -> Message {
    let mut message = Message::new(Role::Agent, vec![Part::text(text)]);
    message.message_id = crate::ids::message();
    joined(message, id, context)
}

fn status_now(state: TaskState, message: Option<Message>) -> TaskStatus {
    TaskStatus {
        state,
        message,
        timestamp: Some(Utc::now()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::a2a::artifacts::REPLY_KEEP;
    use serde_json::{Value, json};

    fn user(text: &str) -> Message {
        Message::new(Role::User, vec![Part::text(text)])
    }

    /// Each event's kind and state (or artifact id), in order.
    fn kinds(tasks: &Tasks, id: &str) -> Vec<String> {
        let (events, _) = tasks.events_after(id, 0).unwrap();
        events
            .iter()
            .map(|e| {
                let v: Value = serde_json::from_slice(&e.json).unwrap();
                let (kind, body) = v.as_object().unwrap().iter().next().unwrap();
                let what = body
                    .pointer("/status/state")
                    .or_else(|| body.pointer("/artifact/artifactId"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                assert_eq!(
                    body.pointer(&format!("/metadata/{META}/seq")),
                    Some(&json!(e.seq))
                );
                format!("{}:{kind}:{what}", e.seq)
            })
            .collect()
    }

    /// A log of 4 events while running, 2 once ended, 8 past any follower.
    fn short_log() -> Cap {
        Cap {
            events: 4,
            bytes: usize::MAX,
            ended: 2,
            hard_events: 8,
            hard_bytes: usize::MAX,
            ..Cap::default()
        }
    }

    fn run_to_completion(tasks: &Tasks, id: &str, answer: &str) {
        tasks.begin(id, "ctx_1");
        tasks.status(id, State::Working, "inference turn 1", None);
        tasks.status(id, State::Completed, "session ended", Some(answer));
        tasks.end();
    }

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
    fn a_reply_streamed_without_end_is_kept_up_to_its_ceiling() {
        let tasks = Tasks::new(10);
        tasks.submitted("tsk_1", "ctx_1", None);
        tasks.begin("tsk_1", "ctx_1");
        let piece = "é".repeat(100_000);
        for _ in 0..10 {
            tasks.chunk("tsk_1", &piece);
        }
        let (task, seq) = tasks.snapshot("tsk_1").unwrap();
        assert_eq!(seq, 11, "every piece is an event");
        let artifact = &task.artifacts.unwrap()[0];
        let kept = artifact.parts[0].as_text().unwrap();
        assert!(
            kept.len() <= REPLY_KEEP && kept.len() > REPLY_KEEP - 2,
            "{}",
            kept.len()
        );
        assert_eq!(
            artifact.metadata,
            Some(HashMap::from([(
                META.to_string(),
                json!({"truncated": true})
            )]))
        );
    }

    #[test]
    fn a_reader_past_the_kept_events_is_told_which_is_first() {
        let tasks = Tasks::with_cap(10, short_log());
        tasks.submitted("tsk_1", "ctx_1", None);
        tasks.begin("tsk_1", "ctx_1");
        for n in 1..=5 {
            tasks.status(
                "tsk_1",
                State::Working,
                &format!("inference turn {n}"),
                None,
            );
        }
        // Six events written, the last four kept: 3, 4, 5, 6.
        assert_eq!(
            tasks.events_after("tsk_1", 1).unwrap_err(),
            Missed::Gone { first_available: 3 }
        );
        assert_eq!(tasks.events_after("tsk_1", 2).unwrap().0.len(), 4);
        tasks.status("tsk_1", State::Completed, "session ended", Some("done"));
        tasks.end();
        // Ended: only the last two are kept (the answer and the end).
        assert_eq!(
            tasks.events_after("tsk_1", 5).unwrap_err(),
            Missed::Gone { first_available: 7 }
        );
        assert_eq!(tasks.events_after("tsk_1", 6).unwrap().0.len(), 2);
        assert_eq!(
            tasks.events_after("tsk_9", 0).unwrap_err(),
            Missed::UnknownTask
        );
    }

    #[test]
    fn a_follower_keeps_what_it_has_not_read_up_to_the_hard_cap() {
        let tasks = Tasks::with_cap(10, short_log());
        tasks.submitted("tsk_1", "ctx_1", None);
        let follower = tasks.follow("tsk_1", 0);
        assert_eq!(follower.next().unwrap().0.len(), 1);
        tasks.begin("tsk_1", "ctx_1");
        for n in 1..=5 {
            tasks.status(
                "tsk_1",
                State::Working,
                &format!("inference turn {n}"),
                None,
            );
        }
        tasks.status("tsk_1", State::Completed, "session ended", Some("done"));
        tasks.end();
        // Eight events; past the running and the ended caps, but the follower has read
        // only the first, so the seven after it stay for it.
        let (events, ended) = follower.next().unwrap();
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [2, 3, 4, 5, 6, 7, 8]);
        assert!(ended);
        drop(follower);
        // Once it is gone, the ended cap applies.
        assert_eq!(
            tasks.events_after("tsk_1", 5).unwrap_err(),
            Missed::Gone { first_available: 7 }
        );

        // A follower that stalls is not waited for past the hard cap.
        tasks.submitted("tsk_2", "ctx_1", None);
        let stalled = tasks.follow("tsk_2", 0);
        tasks.begin("tsk_2", "ctx_1");
        for n in 1..=9 {
            tasks.status(
                "tsk_2",
                State::Working,
                &format!("inference turn {n}"),
                None,
            );
        }
        assert_eq!(
            stalled.next().unwrap_err(),
            Missed::Gone { first_available: 3 }
        );
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

    #[test]
    fn the_journal_stops_at_the_records_budget_and_says_so() {
        let dir = std::env::temp_dir().join(format!("mur-a2a-budget-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join(super::super::journal::FILE);
        let budget = std::sync::Arc::new(crate::records::Budget::new(4096, 0));
        let tasks = Tasks::new(10);
        let (journal, earlier) = Journal::open(&path, 10);
        tasks.keep_in(journal.within(budget.clone()), earlier);
        for n in 0..20 {
            let id = format!("tsk_{n}");
            tasks.submitted(&id, "ctx_1", Some(user("one")));
            run_to_completion(&tasks, &id, &"x".repeat(500));
        }
        let size = std::fs::metadata(&path).map_or(0, |m| m.len());
        assert!(size <= 4096, "the journal holds {size} bytes");
        let why = budget.failure().expect("the refusal is kept");
        assert!(
            why.starts_with(
                "writing the A2A task store's journal would take the capsule's records"
            ) && why.ends_with("over capabilities.limits.max_records_bytes (4096)"),
            "{why}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_new_session_writes_its_journal_with_its_first_task_not_at_launch() {
        let dir = std::env::temp_dir().join(format!("mur-a2a-lazy-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join(super::super::journal::FILE);
        let tasks = Tasks::new(10);
        let (journal, earlier) = Journal::open(&path, 10);
        tasks.keep_in(journal, earlier);
        assert!(!dir.exists(), "nothing is written before a task");
        tasks.submitted("tsk_1", "ctx_1", Some(user("one")));
        let text = std::fs::read_to_string(&path).expect("the first task made the file");
        assert!(text.contains("\"tsk_1\""), "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_journal_brings_tasks_back_and_fails_the_unfinished() {
        let dir = std::env::temp_dir().join(format!("mur-a2a-journal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join(super::super::journal::FILE);
        let first = Tasks::new(10);
        let (journal, earlier) = Journal::open(&path, 10);
        first.keep_in(journal, earlier);
        first.submitted("tsk_done", "ctx_1", Some(user("one")));
        run_to_completion(&first, "tsk_done", "answer one");
        first.submitted("tsk_cut", "ctx_1", Some(user("two")));
        drop(first);

        let again = Tasks::new(10);
        let (journal, earlier) = Journal::open(&path, 10);
        again.keep_in(journal, earlier);
        let (done, seq) = again.snapshot("tsk_done").unwrap();
        assert_eq!(done.status.state, TaskState::Completed);
        assert_eq!(seq, 4, "its numbering goes on where it was");
        assert!(done.metadata.is_none());
        let (cut, seq) = again.snapshot("tsk_cut").unwrap();
        assert_eq!(cut.status.state, TaskState::Failed);
        assert_eq!(
            cut.status.message.unwrap().text(),
            Some("the capsule stopped before the task ended")
        );
        assert_eq!(seq, 2, "its failure counts as an event it never streamed");
        assert_eq!(
            again.events_after("tsk_cut", 0).unwrap_err(),
            Missed::Gone { first_available: 3 }
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
