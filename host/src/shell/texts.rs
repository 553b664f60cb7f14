//! The words the model reads about a command: its result, and the notes on truncation,
//! a timeout, a sandbox kill and a move to the background.

use std::path::Path;
use std::time::Duration;

/// The result of a command that ended in the foreground, before any note.
pub(super) fn result(display: &str, exit_code: i32, stdout: &str, stderr: &str) -> String {
    format!("$ {display}\nExit code: {exit_code}\nStdout:\n{stdout}\nStderr:\n{stderr}")
}

pub(super) fn truncation_note(log_path: Option<&Path>) -> String {
    match log_path {
        Some(path) => format!(
            "\n\nOutput truncated. Full output written to {}",
            path.display()
        ),
        None => "\n\nOutput truncated.".to_string(),
    }
}

pub(super) fn timeout_note(timeout: Duration) -> String {
    format!(
        "\n\nCommand timed out: stopped after {} seconds.",
        timeout.as_secs_f64()
    )
}

pub(super) fn sandbox_note(limit: &str) -> String {
    format!("\n(killed by the sandbox: it passed {limit})")
}

/// What the model is told instead of the output of a command moved to the background.
pub(super) fn detached_text(
    display: &str,
    grace: Duration,
    work_id: &str,
    log_path: &Path,
) -> String {
    format!(
        "$ {display}\nStill running after {} seconds: moved to the background as {work_id}.\n\
         Its stdout and stderr, including what it printed so far, go to {} instead of this \
         conversation.\nWhen it ends, its exit code and the tail of its output arrive as a new \
         task in this conversation. Nothing accepts the work id, so there is nothing to poll.",
        grace.as_secs_f64(),
        log_path.display()
    )
}
