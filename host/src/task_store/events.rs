//! How the task store numbers and encodes the events it keeps and streams: the
//! sequence number in each event's (and saved task's) `metadata.murmur`, and the bytes
//! the wire carries, secrets redacted.

use std::collections::HashMap;

use ::a2a::{StreamResponse, Task, TaskState};
use bytes::Bytes;
use serde_json::{Value, json};

use super::META;

/// The task with the sequence number of its last event in its metadata, as the
/// journal keeps it and `GetTask` answers it.
pub fn with_seq(mut task: Task, seq: u64) -> Task {
    task.metadata = Some(HashMap::from([(META.to_string(), json!({"seq": seq}))]));
    task
}

pub(super) fn saved_seq(task: &Task) -> u64 {
    task.metadata
        .as_ref()
        .and_then(|m| m.get(META))
        .and_then(|m| m.get("seq"))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// An event as the wire carries it, secrets redacted. Sized up front: a streamed piece
/// may be a megabyte, and growing its buffer by doubling, then copying it to redact,
/// churns the allocator for every piece.
pub(super) fn encode_event(event: StreamResponse) -> Bytes {
    let mut json = Vec::with_capacity(encoded_hint(&event));
    if serde_json::to_writer(&mut json, &event).is_err() {
        return Bytes::new();
    }
    let Ok(json) = String::from_utf8(json) else {
        return Bytes::new();
    };
    match crate::secret::scrub(&json) {
        std::borrow::Cow::Borrowed(_) => Bytes::from(json),
        std::borrow::Cow::Owned(redacted) => Bytes::from(redacted),
    }
}

/// About the size of `event` encoded: its text, and room for the rest.
pub(super) fn encoded_hint(event: &StreamResponse) -> usize {
    let text = match event {
        StreamResponse::ArtifactUpdate(update) => update
            .artifact
            .parts
            .iter()
            .filter_map(|p| p.as_text())
            .map(str::len)
            .sum(),
        _ => 0,
    };
    text + text / 8 + 1024
}

/// Where a stream of the task ends: a terminal state, or one that waits on the client.
pub(super) fn ends_stream(event: &StreamResponse) -> bool {
    let state = match event {
        StreamResponse::StatusUpdate(update) => &update.status.state,
        StreamResponse::Task(task) => &task.status.state,
        _ => return false,
    };
    state.is_terminal() || *state == TaskState::InputRequired
}

/// `event` carrying its sequence number in its metadata.
pub fn numbered(event: StreamResponse, seq: u64) -> StreamResponse {
    let meta = Some(seq_meta(seq));
    match event {
        StreamResponse::Task(mut task) => {
            task.metadata = meta;
            StreamResponse::Task(task)
        }
        StreamResponse::StatusUpdate(mut update) => {
            update.metadata = meta;
            StreamResponse::StatusUpdate(update)
        }
        StreamResponse::ArtifactUpdate(mut update) => {
            update.metadata = meta;
            StreamResponse::ArtifactUpdate(update)
        }
        other => other,
    }
}

/// `{"murmur": {"seq": n}}`.
pub(super) fn seq_meta(seq: u64) -> HashMap<String, Value> {
    let mut inner = serde_json::Map::with_capacity(1);
    inner.insert("seq".into(), Value::from(seq));
    HashMap::from([(META.to_string(), Value::Object(inner))])
}
