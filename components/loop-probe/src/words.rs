//! What the host answered, in plain words a test can compare exactly: `ok` or
//! `ok: <detail>`, `err: <the host's text>`, and for an inference error its kind and
//! text (`refused: <text>`, `turns-exhausted: <limit>`, ...).

use crate::murmur::session::types::{InferenceError, InferenceReply, TaskBudget};

pub fn inference(answer: &Result<InferenceReply, InferenceError>) -> String {
    match answer {
        Ok(reply) => format!("ok: {}", reply.text),
        Err(InferenceError::Invocation(text)) => format!("invocation: {text}"),
        Err(InferenceError::Failed(text)) => format!("failed: {text}"),
        Err(InferenceError::Malformed(text)) => format!("malformed: {text}"),
        Err(InferenceError::TurnsExhausted(limit)) => format!("turns-exhausted: {limit}"),
        Err(InferenceError::Refused(text)) => format!("refused: {text}"),
    }
}

/// An answer whose `ok` carries nothing worth showing (or nothing at all).
pub fn plain<T>(answer: &Result<T, String>) -> String {
    match answer {
        Ok(_) => "ok".into(),
        Err(text) => format!("err: {text}"),
    }
}

pub fn budget(answer: &Result<TaskBudget, String>) -> String {
    let b = match answer {
        Ok(b) => b,
        Err(text) => return format!("err: {text}"),
    };
    let window = b.window.map_or("none".into(), |w| w.to_string());
    format!(
        "ok: turns-used {}, turns-left {}, tokens {}, window {window}, threshold {}",
        b.turns_used, b.turns_left, b.tokens, b.threshold
    )
}
