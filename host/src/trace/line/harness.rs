//! The process transport's lines: the harness's session, each of its own tools' calls
//! (its shell, its file edits: the capsule's tools it calls through the bridge are
//! `tool_call` lines like any), what its driver noted, and how the harness ended.

use serde_json::json;

use super::Line;

/// The harness's session began (or was resumed): how it bills, which model it runs.
pub fn harness_session(
    harness: &str,
    session: &str,
    auth: &str,
    model: Option<&str>,
    resumed: bool,
) -> Line {
    Line::new(
        "harness_session",
        json!({
            "harness": harness,
            "harness_session_id": session,
            "auth": auth,
            "model": model,
            "resumed": resumed,
        }),
    )
}

/// One call of one of the harness's own tools, ran inside the capsule's sandbox.
pub struct OwnTool<'a> {
    pub turn: u64,
    pub tool: &'a str,
    pub call_id: &'a str,
    pub input_bytes: usize,
    pub output_bytes: usize,
    pub is_error: bool,
    pub duration_ms: u64,
}

pub fn harness_tool(t: &OwnTool<'_>) -> Line {
    Line::new(
        "harness_tool",
        json!({
            "turn": t.turn,
            "tool": t.tool,
            "call_id": t.call_id,
            "input_bytes": t.input_bytes,
            "output_bytes": t.output_bytes,
            "is_error": t.is_error,
            "duration_ms": t.duration_ms,
        }),
    )
}

/// Something the driver noted about the harness's output (a line it could not read).
pub fn harness_note(note: &str) -> Line {
    Line::new("harness_note", json!({"note": note}))
}

/// How the harness process ended.
pub fn harness_exit(
    code: Option<i32>,
    signal: Option<i32>,
    stopped: Option<&str>,
    duration_ms: u64,
) -> Line {
    Line::new(
        "harness_exit",
        json!({
            "exit_code": code,
            "signal": signal,
            "stopped": stopped,
            "duration_ms": duration_ms,
        }),
    )
}
