//! The capsule's side of the wire: the id counters of the seed and the frames a task
//! writes, published on the bus. Components report typed events; only this module
//! decides which frame and which id they become.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::bus::Bus;
use crate::frames::{self, ArtifactFrame, State};
use crate::task_store::Tasks;

/// The chunk counter's value at launch (2^62 - 1).
pub const CHUNK_COUNTER_START: u64 = 4_611_686_018_427_387_903;

/// A connection queue this full makes a streaming component wait (briefly) before its
/// next chunk, so readers that keep up get their frames before the queue of 128 starts
/// dropping them. A reader that does not drain within `PATIENCE` is not waited for
/// again until it catches up: a stalled client never holds the capsule.
const CROWDED: usize = crate::bus::QUEUE_CAPACITY / 2;
const PATIENCE: std::time::Duration = std::time::Duration::from_millis(5);

/// The queued-cancel counter's value at launch (2^61 - 1), once per session.
pub const QUEUED_CANCEL_COUNTER_START: u64 = 2_305_843_009_213_693_951;

/// The input-wait counter's value at the start of every `request-input` call (2^63 - 1).
pub const INPUT_WAIT_COUNTER_START: u64 = 9_223_372_036_854_775_807;

/// The message of a task canceled while it waited in the queue.
const QUEUED_CANCELED: &str = "task canceled before it started";

/// The input-wait counter of one `request-input` call: a fresh one per call, as the
/// seed numbers every wait from the same value.
pub struct InputWait {
    next_id: u64,
}

impl Default for InputWait {
    fn default() -> Self {
        InputWait {
            next_id: INPUT_WAIT_COUNTER_START,
        }
    }
}

pub struct Wire {
    bus: Arc<Bus>,
    /// The same events, kept per task for the A2A v1.0 door.
    tasks: Arc<Tasks>,
    counters: Mutex<Counters>,
    /// `capabilities.limits.max_chunk_bytes`.
    max_chunk_bytes: u64,
}

struct Counters {
    task: Option<TaskIds>,
    /// The task's counter: from 0 for every task and every reopened attempt.
    next_id: u64,
    /// The chunk counter: synchronised with the task's counter around inference calls.
    next_chunk: u64,
    chunked_this_call: bool,
    chunked_last_call: bool,
    /// Between `before_inference` and `after_inference`.
    in_call: bool,
    next_queued_cancel: u64,
}

struct TaskIds {
    task: String,
    context: String,
}

impl Wire {
    pub fn new(bus: Arc<Bus>) -> Self {
        Wire {
            bus,
            tasks: Arc::new(Tasks::default()),
            counters: Mutex::new(Counters {
                task: None,
                next_id: 0,
                next_chunk: CHUNK_COUNTER_START,
                chunked_this_call: false,
                chunked_last_call: false,
                in_call: false,
                next_queued_cancel: QUEUED_CANCEL_COUNTER_START,
            }),
            max_chunk_bytes: crate::limits::Limits::default().max_chunk_bytes,
        }
    }

    pub fn with_max_chunk_bytes(self, max_chunk_bytes: u64) -> Self {
        Wire {
            max_chunk_bytes,
            ..self
        }
    }

    /// The store keeps the `keep` most recent tasks.
    pub fn keeping(self, keep: usize) -> Self {
        Wire {
            tasks: Arc::new(Tasks::new(keep)),
            ..self
        }
    }

    pub fn bus(&self) -> &Arc<Bus> {
        &self.bus
    }

    pub fn tasks(&self) -> &Arc<Tasks> {
        &self.tasks
    }

    fn counters(&self) -> MutexGuard<'_, Counters> {
        self.counters.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn begin_task(&self, task: &str, context: &str) {
        let mut c = self.counters();
        c.task = Some(TaskIds {
            task: task.to_string(),
            context: context.to_string(),
        });
        c.next_id = 0;
        c.chunked_this_call = false;
        c.chunked_last_call = false;
        self.tasks.begin(task, context);
    }

    pub fn end_task(&self) {
        self.counters().task = None;
        self.tasks.end();
    }

    pub fn status(&self, state: State, message: &str, response: Option<&str>) {
        let mut c = self.counters();
        let Some(ids) = &c.task else { return };
        let frame = frames::status(c.next_id, &ids.task, &ids.context, state, message, response);
        self.tasks.status(&ids.task, state, message, response);
        c.next_id += 1;
        self.bus.publish(frame);
    }

    pub fn artifact(&self, artifact: &ArtifactFrame<'_>) {
        let mut c = self.counters();
        let Some(ids) = &c.task else { return };
        let frame = frames::artifact(c.next_id, &ids.task, artifact);
        self.tasks.artifact(&ids.task, artifact);
        c.next_id += 1;
        self.bus.publish(frame);
    }

    /// A `status` frame of a `request-input` wait, numbered by the wait's own counter.
    pub fn input_wait(&self, wait: &mut InputWait, state: State, message: &str) {
        let c = self.counters();
        let Some(ids) = &c.task else { return };
        let frame = frames::input_status(wait.next_id, &ids.task, state, message);
        wait.next_id = wait.next_id.wrapping_add(1);
        self.bus.publish(frame);
        self.tasks.input(&ids.task, state, message);
    }

    /// A task canceled while it waited in the queue: its only frame.
    pub fn queued_canceled(&self, task: &str, context: &str) {
        let mut c = self.counters();
        let frame = frames::status(
            c.next_queued_cancel,
            task,
            context,
            State::Canceled,
            QUEUED_CANCELED,
            None,
        );
        c.next_queued_cancel += 1;
        self.bus.publish(frame);
        self.tasks.canceled_queued(task, context, QUEUED_CANCELED);
    }

    /// A piece of reply text from a driver or a tool; outside a task it goes nowhere.
    /// Returns whether a connection's queue is filling up (see `CROWDED`).
    pub fn text_chunk(&self, text: &str) -> bool {
        let mut c = self.counters();
        let Some(ids) = &c.task else { return false };
        let frame = frames::text(c.next_chunk, &ids.task, text, false);
        self.tasks.chunk(&ids.task, text);
        c.next_chunk += 1;
        c.chunked_this_call = true;
        self.bus.publish(frame) >= CROWDED
    }

    pub fn thinking_chunk(&self, text: &str) -> bool {
        let mut c = self.counters();
        let Some(ids) = &c.task else { return false };
        let frame = frames::thinking(c.next_chunk, &ids.task, text);
        c.next_chunk += 1;
        self.bus.publish(frame) >= CROWDED
    }

    /// Before each inference call the chunk counter takes the task's counter's value.
    pub fn before_inference(&self) {
        let mut c = self.counters();
        if let Some(ids) = &c.task {
            // A reply a tool streamed is complete when the next call begins.
            self.tasks.reply_end(&ids.task);
        }
        c.next_chunk = c.next_id;
        c.chunked_this_call = false;
        c.in_call = true;
    }

    /// After it: the end-of-chunks marker when text was streamed, then the task's
    /// counter takes the chunk counter's value.
    pub fn after_inference(&self) {
        let mut c = self.counters();
        if !std::mem::take(&mut c.in_call) {
            // A canceled turn may end before its call began: nothing to close.
            return;
        }
        if c.chunked_this_call
            && let Some(ids) = &c.task
        {
            let frame = frames::text(c.next_chunk, &ids.task, "", true);
            self.tasks.reply_end(&ids.task);
            c.next_chunk += 1;
            self.bus.publish(frame);
        }
        c.next_id = c.next_chunk;
        c.chunked_last_call = c.chunked_this_call;
    }

    /// The whole reply as one `text` frame, when the last call streamed none of it.
    pub fn whole_reply(&self, reply: &str) {
        let mut c = self.counters();
        if c.chunked_last_call || reply.is_empty() {
            return;
        }
        let Some(ids) = &c.task else { return };
        let frame = frames::text(c.next_chunk, &ids.task, reply, true);
        c.next_chunk += 1;
        self.bus.publish(frame);
    }
}

/// A chunk over the limit fails the component's call (the host function's error traps
/// it), so the tool's result or the inference error names the limit; nothing of it is
/// framed or kept.
fn refuse_oversized(kind: &str, chunk: String, limit: u64) -> wasmtime::Result<String> {
    match crate::limits::chunk_refusal(kind, &chunk, limit) {
        Some(why) => Err(wasmtime::Error::msg(why)),
        None => Ok(chunk),
    }
}

/// What a driver, a tool or the session loop streams through `murmur:text/chunks` goes straight to the
/// wire; both worlds link this one implementation.
impl crate::bindings::chunks::Host for Arc<Wire> {
    async fn text(&mut self, chunk: String) -> wasmtime::Result<()> {
        let chunk = refuse_oversized("text", chunk, self.max_chunk_bytes)?;
        if self.text_chunk(&chunk) {
            self.bus.make_room(CROWDED, PATIENCE).await;
        }
        Ok(())
    }

    async fn thinking(&mut self, chunk: String) -> wasmtime::Result<()> {
        let chunk = refuse_oversized("thinking", chunk, self.max_chunk_bytes)?;
        if self.thinking_chunk(&chunk) {
            self.bus.make_room(CROWDED, PATIENCE).await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(conn: &crate::bus::Connection) -> Vec<(Option<u64>, String)> {
        let mut out = Vec::new();
        while let Some(crate::bus::Next::Frame(f)) = conn.try_next() {
            let text = String::from_utf8(f.bytes.to_vec()).unwrap();
            let event = text
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .unwrap()
                .to_string();
            out.push((f.id, event));
        }
        out
    }

    #[test]
    fn a_streamed_turn_shares_one_run_of_ids() {
        let bus = Bus::new();
        let (_, conn) = bus.subscribe(None);
        let wire = Wire::new(bus.clone());
        wire.begin_task("tsk_a", "ctx_a");
        wire.status(State::Working, "inference turn 1", None);
        wire.before_inference();
        wire.text_chunk("Hel");
        wire.text_chunk("lo");
        wire.after_inference();
        wire.whole_reply("Hello");
        wire.status(State::Completed, "session ended", Some("Hello"));
        assert_eq!(
            drain(&conn),
            vec![
                (Some(0), "status".into()),
                (Some(1), "text".into()),
                (Some(2), "text".into()),
                (Some(3), "text".into()),
                (Some(4), "status".into()),
            ]
        );
    }

    #[test]
    fn unstreamed_reply_is_written_whole_with_the_chunk_counter() {
        let bus = Bus::new();
        let (_, conn) = bus.subscribe(None);
        let wire = Wire::new(bus.clone());
        for _ in 0..2 {
            wire.begin_task("tsk_a", "ctx_a");
            wire.status(State::Working, "inference turn 1", None);
            wire.before_inference();
            wire.after_inference();
            wire.whole_reply("Hi");
            wire.status(State::Completed, "session ended", Some("Hi"));
            wire.end_task();
        }
        let got = drain(&conn);
        let ids: Vec<Option<u64>> = got.iter().map(|(id, _)| *id).collect();
        assert_eq!(
            ids,
            vec![Some(0), Some(1), Some(1), Some(0), Some(1), Some(1)]
        );
    }
}
