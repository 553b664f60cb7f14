//! Hooks' lines: each blocking hook's answer, and what went wrong dispatching one.

use serde_json::json;

use super::Line;

/// A blocking hook's answer: which hook, at which event, what it decided (its
/// verdict's arm, or `error` with why), and how long it took.
pub struct Hook<'a> {
    pub hook: &'a str,
    pub event: &'a str,
    pub verdict: &'a str,
    pub error: Option<&'a str>,
    pub duration_us: u64,
}

pub fn hook(h: &Hook<'_>) -> Line {
    Line::new(
        "hook",
        json!({
            "hook": h.hook,
            "event": h.event,
            "verdict": h.verdict,
            "duration_ms": h.duration_us / 1000,
            "duration_us": h.duration_us,
        }),
    )
    .with_some("error", h.error)
}

/// A hook verdict not committed, or an async hook's failure.
pub fn hook_dispatch_error(hook: &str, event: &str, arm: &str) -> Line {
    Line::new(
        "hook_dispatch_error",
        json!({"hook_name": hook, "event": event, "arm": arm}),
    )
}
