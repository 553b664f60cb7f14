//! The frames of the streaming protocol, encoded once and shared by every connection.
//!
//! Key order and the presence of `null` keys are part of the wire contract, so each
//! frame's data is built here and nowhere else (serde_json keeps insertion order).

use bytes::Bytes;
use serde_json::{Value, json};

/// The heartbeat comment: not a frame, never buffered.
pub const HEARTBEAT: &[u8] = b":heartbeat\n\n";

/// A frame ready for the wire. `id` is kept apart so the replay ring can compare it.
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    pub id: Option<u64>,
    pub bytes: Bytes,
    /// A `status` frame with `"final":true`: where a `message/stream` connection ends.
    pub ends_stream: bool,
}

impl Frame {
    fn new(id: Option<u64>, event: &str, data: &Value) -> Self {
        // serde_json never emits a raw newline, so `data` is always exactly one line.
        let data = data.to_string();
        let data = crate::secret::scrub(&data);
        let text = match id {
            Some(id) => format!("id: {id}\nevent: {event}\ndata: {data}\n\n"),
            None => format!("event: {event}\ndata: {data}\n\n"),
        };
        Frame {
            id,
            bytes: Bytes::from(text),
            ends_stream: false,
        }
    }
}

/// The states a task's `status` frame can carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Working,
    /// A tool waits in `request-input` for the person's reply.
    InputRequired,
    Completed,
    Failed,
    Canceled,
}

impl State {
    fn as_str(self) -> &'static str {
        match self {
            State::Working => "working",
            State::InputRequired => "input-required",
            State::Completed => "completed",
            State::Failed => "failed",
            State::Canceled => "canceled",
        }
    }

    pub fn is_final(self) -> bool {
        !matches!(self, State::Working | State::InputRequired)
    }
}

/// A task `status` frame. `response` is written on `completed` only, as the seed says.
pub fn status(
    id: u64,
    task: &str,
    context: &str,
    state: State,
    message: &str,
    response: Option<&str>,
) -> Frame {
    let status = match (state, response) {
        (State::Completed, Some(response)) => {
            json!({"state": state.as_str(), "message": message, "response": response})
        }
        _ => json!({"state": state.as_str(), "message": message}),
    };
    let data =
        json!({"id": task, "context_id": context, "status": status, "final": state.is_final()});
    let mut frame = Frame::new(Some(id), "status", &data);
    frame.ends_stream = state.is_final();
    frame
}

/// A `status` frame of a `request-input` wait (`input-required`, `working` `resumed`,
/// `failed` `input-timeout`): the seed writes these without a `context_id` key.
pub fn input_status(id: u64, task: &str, state: State, message: &str) -> Frame {
    let data = json!({
        "id": task,
        "status": {"state": state.as_str(), "message": message},
        "final": state.is_final(),
    });
    let mut frame = Frame::new(Some(id), "status", &data);
    frame.ends_stream = state.is_final();
    frame
}

/// The answer to a task the capsule cannot take: id 0, only on the submitting connection.
pub fn rejected(task: &str, context: &str) -> Frame {
    let data = json!({
        "id": task,
        "context_id": context,
        "status": {"state": "rejected", "message": "task rejected: capsule is busy"},
        "final": true,
    });
    Frame::new(Some(0), "status", &data)
}

/// Everything an `artifact` frame reports about one tool call or hook artifact.
#[derive(Clone, Debug, PartialEq)]
pub struct ArtifactFrame<'a> {
    pub tool_name: &'a str,
    pub content: &'a str,
    pub fence_source: Option<&'a str>,
    pub tool_call_id: Option<&'a str>,
    pub is_error: bool,
    pub duration_ms: Option<u64>,
    pub exit_code: Option<i32>,
    pub truncated: bool,
}

pub fn artifact(id: u64, task: &str, a: &ArtifactFrame<'_>) -> Frame {
    let data = json!({
        "id": task,
        "artifact": {
            "tool_name": a.tool_name,
            "content": a.content,
            "fence_source": a.fence_source,
            "tool_call_id": a.tool_call_id,
            "is_error": a.is_error,
            "duration_ms": a.duration_ms,
            "exit_code": a.exit_code,
            "truncated": a.truncated,
        }
    });
    Frame::new(Some(id), "artifact", &data)
}

pub fn text(id: u64, task: &str, text: &str, is_final: bool) -> Frame {
    Frame::new(
        Some(id),
        "text",
        &json!({"id": task, "text": text, "final": is_final}),
    )
}

pub fn thinking(id: u64, task: &str, text: &str) -> Frame {
    Frame::new(
        Some(id),
        "thinking",
        &json!({"id": task, "text": text, "final": false}),
    )
}

pub fn gap(first_available_id: u64) -> Frame {
    Frame::new(
        None,
        "gap",
        &json!({"first_available_id": first_available_id}),
    )
}

pub fn connection_ack(conversation_mode: &str) -> Frame {
    Frame::new(
        None,
        "connection-ack",
        &json!({"role": "observer", "conversation_mode": conversation_mode}),
    )
}

pub fn capsule_closed() -> Frame {
    Frame::new(None, "capsule-closed", &json!({}))
}

/// Unlike the seed, the message is escaped by serde_json, so `data` stays valid JSON.
pub fn error(message: &str) -> Frame {
    Frame::new(None, "error", &json!({"error": message}))
}

/// Our addition: where a slow connection's queue dropped frames.
pub fn lagged(missed: u64) -> Frame {
    Frame::new(None, "lagged", &json!({"missed": missed}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(f: &Frame) -> &str {
        std::str::from_utf8(&f.bytes).unwrap()
    }

    #[test]
    fn status_working_matches_the_seed_example() {
        let f = status(
            3,
            "tsk_0199c4e2f1b7712a9d3e4f5061728394",
            "ctx_0199c4e2f1b7712a9d3e4f50617283a1",
            State::Working,
            "inference turn 2",
            None,
        );
        assert_eq!(
            wire(&f),
            "id: 3\nevent: status\ndata: {\"id\":\"tsk_0199c4e2f1b7712a9d3e4f5061728394\",\"context_id\":\"ctx_0199c4e2f1b7712a9d3e4f50617283a1\",\"status\":{\"state\":\"working\",\"message\":\"inference turn 2\"},\"final\":false}\n\n"
        );
    }

    #[test]
    fn input_wait_statuses_have_no_context_id() {
        let f = input_status(
            9_223_372_036_854_775_807,
            "tsk_a",
            State::InputRequired,
            "Which file?",
        );
        assert_eq!(
            wire(&f),
            "id: 9223372036854775807\nevent: status\ndata: {\"id\":\"tsk_a\",\"status\":{\"state\":\"input-required\",\"message\":\"Which file?\"},\"final\":false}\n\n"
        );
        assert!(!f.ends_stream);
        let f = input_status(
            9_223_372_036_854_775_808,
            "tsk_a",
            State::Failed,
            "input-timeout",
        );
        assert!(f.ends_stream);
        assert!(wire(&f).ends_with("\"final\":true}\n\n"));
    }

    #[test]
    fn completed_carries_the_response() {
        let f = status(
            7,
            "tsk_a",
            "ctx_b",
            State::Completed,
            "session ended",
            Some("done"),
        );
        assert!(wire(&f).contains(
            "\"status\":{\"state\":\"completed\",\"message\":\"session ended\",\"response\":\"done\"},\"final\":true"
        ));
    }

    #[test]
    fn artifact_keys_in_seed_order_with_nulls() {
        let a = ArtifactFrame {
            tool_name: "no-such-tool",
            content: "tool 'no-such-tool' is not declared in manifest allowlist",
            fence_source: None,
            tool_call_id: Some("toolu_03"),
            is_error: true,
            duration_ms: Some(0),
            exit_code: None,
            truncated: false,
        };
        let f = artifact(1, "tsk_0199c4e2f1b7712a9d3e4f5061728394", &a);
        assert_eq!(
            wire(&f),
            "id: 1\nevent: artifact\ndata: {\"id\":\"tsk_0199c4e2f1b7712a9d3e4f5061728394\",\"artifact\":{\"tool_name\":\"no-such-tool\",\"content\":\"tool 'no-such-tool' is not declared in manifest allowlist\",\"fence_source\":null,\"tool_call_id\":\"toolu_03\",\"is_error\":true,\"duration_ms\":0,\"exit_code\":null,\"truncated\":false}}\n\n"
        );
    }

    #[test]
    fn frames_without_id_have_no_id_line() {
        assert_eq!(
            wire(&gap(37)),
            "event: gap\ndata: {\"first_available_id\":37}\n\n"
        );
        assert_eq!(
            wire(&connection_ack("stateless")),
            "event: connection-ack\ndata: {\"role\":\"observer\",\"conversation_mode\":\"stateless\"}\n\n"
        );
        assert_eq!(
            wire(&capsule_closed()),
            "event: capsule-closed\ndata: {}\n\n"
        );
        assert_eq!(wire(&lagged(5)), "event: lagged\ndata: {\"missed\":5}\n\n");
    }

    #[test]
    fn error_data_stays_valid_json_whatever_it_quotes() {
        let f = error("Invalid params: invalid type: string \"x\", expected a sequence\nline");
        let line = wire(&f).lines().nth(1).unwrap();
        let data: Value = serde_json::from_str(line.strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(
            data["error"],
            "Invalid params: invalid type: string \"x\", expected a sequence\nline"
        );
    }

    #[test]
    fn text_and_thinking_frames() {
        assert_eq!(
            wire(&text(
                4611686018427387903,
                "tsk_a",
                "README.md describes",
                false
            )),
            "id: 4611686018427387903\nevent: text\ndata: {\"id\":\"tsk_a\",\"text\":\"README.md describes\",\"final\":false}\n\n"
        );
        assert_eq!(
            wire(&thinking(2, "tsk_a", "hm")),
            "id: 2\nevent: thinking\ndata: {\"id\":\"tsk_a\",\"text\":\"hm\",\"final\":false}\n\n"
        );
    }
}
