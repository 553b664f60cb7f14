//! Which trace lines are spans. A session and a task are spans from their `_start` line
//! to their `_end` line; a turn, a tool call, a shell command, a hook, a compaction and
//! a call to another agent are each one line that says how long it took; every other
//! line is an event on the span it happened in.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Opens a span that a later line of kind `closer` ends.
    Opens { closer: &'static str },
    /// Ends the span an `Opens` line began.
    Closes,
    /// A whole span: it ended when the line was written, after its duration.
    Whole,
    /// An event on the span it happened in.
    Event,
}

pub fn of(kind: &str) -> Shape {
    match kind {
        "session_start" => Shape::Opens {
            closer: "session_end",
        },
        "task_start" => Shape::Opens { closer: "task_end" },
        "session_end" | "task_end" => Shape::Closes,
        "inference" | "tool_call" | "skill_call" | "shell" | "compaction" | "hook"
        | "member_call" => Shape::Whole,
        _ => Shape::Event,
    }
}

/// Whether a line of this kind carries its span's parent.
pub fn has_parent(kind: &str) -> bool {
    matches!(of(kind), Shape::Opens { .. } | Shape::Whole)
}
