//! What the task store's tests share: a user's message, a task run to its end, a short
//! event log, and a task's events read back as their kinds.

use ::a2a::{Message, Part, Role};
use serde_json::{Value, json};

use super::cap::Cap;
use super::{META, Tasks};
use crate::frames::State;

pub(super) fn user(text: &str) -> Message {
    Message::new(Role::User, vec![Part::text(text)])
}

/// Each event's kind and state (or artifact id), in order.
pub(super) fn kinds(tasks: &Tasks, id: &str) -> Vec<String> {
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
pub(super) fn short_log() -> Cap {
    Cap {
        events: 4,
        bytes: usize::MAX,
        ended: 2,
        hard_events: 8,
        hard_bytes: usize::MAX,
        ..Cap::default()
    }
}

pub(super) fn run_to_completion(tasks: &Tasks, id: &str, answer: &str) {
    tasks.begin(id, "ctx_1");
    tasks.status(id, State::Working, "inference turn 1", None);
    tasks.status(id, State::Completed, "session ended", Some(answer));
    tasks.end();
}
