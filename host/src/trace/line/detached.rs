//! Detached shell commands' lines: one taken over after its grace period, how it
//! ended, one still running at the session's end, and one a killed runtime lost.

use std::path::Path;

use serde_json::json;

use super::Line;

/// A shell command that outlived its grace period.
pub struct Detached<'a> {
    pub turn: u64,
    pub task_id: &'a str,
    pub context_id: &'a str,
    pub work_id: &'a str,
    pub binary: &'a str,
    pub command: &'a str,
    pub grace_ms: u64,
    pub output_path: &'a Path,
    pub pid: u32,
}

pub fn shell_detached(d: &Detached<'_>) -> Line {
    Line::new(
        "shell_detached",
        json!({
            "turn": d.turn,
            "task_id": d.task_id,
            "context_id": d.context_id,
            "work_id": d.work_id,
            "binary": d.binary,
            "command": d.command,
            "grace_ms": d.grace_ms,
            "output_path": d.output_path,
            "pid": d.pid,
        }),
    )
}

/// A detached command as it was started.
pub struct Work<'a> {
    pub work_id: &'a str,
    pub binary: &'a str,
    pub command: &'a str,
}

/// How a detached command ended.
pub struct Completed<'a> {
    pub exit_code: i32,
    pub duration_ms: u64,
    pub output_path: &'a Path,
    pub output_bytes: u64,
    pub ok: bool,
    pub completion_task_id: &'a str,
    pub resource_limit: Option<&'static str>,
}

pub fn shell_completed(w: &Work<'_>, c: &Completed<'_>) -> Line {
    Line::new(
        "shell_completed",
        json!({
            "work_id": w.work_id,
            "binary": w.binary,
            "command": w.command,
            "exit_code": c.exit_code,
            "duration_ms": c.duration_ms,
            "output_path": c.output_path,
            "output_bytes": c.output_bytes,
            "status": if c.ok { "ok" } else { "failed" },
            "completion_task_id": c.completion_task_id,
        }),
    )
    .with_some("resource_limit", c.resource_limit)
}

/// A detached command still running when the session ended.
pub fn shell_abandoned(w: &Work<'_>, running_ms: u64) -> Line {
    Line::new(
        "shell_abandoned",
        json!({
            "work_id": w.work_id,
            "binary": w.binary,
            "command": w.command,
            "running_ms": running_ms,
        }),
    )
}

/// A command a killed runtime detached, marked in its old trace by the session that
/// reports it.
pub struct Lost<'a> {
    pub work: Work<'a>,
    pub detached_at_ms: u64,
    pub by_session: &'a str,
    pub task_id: &'a str,
}

pub fn shell_lost(l: &Lost<'_>) -> Line {
    Line::new(
        "shell_lost",
        json!({
            "work_id": l.work.work_id,
            "binary": l.work.binary,
            "command": l.work.command,
            "detached_at_ms": l.detached_at_ms,
            "reconciled_by_session": l.by_session,
            "reconciled_task_id": l.task_id,
        }),
    )
}
