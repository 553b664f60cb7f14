//! Upstream's capsule world (`murmur:capsule/run@0.1.0`, WIT in `wit/upstream/capsule`):
//! a whole capsule as one component, with no model. A manifest without `inference`
//! runs it (`manifest::capsule` finds it), and `session::capsule` runs it in place of a
//! session loop, so the wire, the trace, the hooks and the limits are the session's own.
//! What an upstream capsule meets here, and where upstream's host differs:
//!
//! | Upstream (murmur-cli 0.8.0) | Here |
//! |---|---|
//! | `run()` once per `mur run` | once per task, in a fresh instance; a task reopened by an `on-task-end` hook runs it again |
//! | task text at `murmur-runtime/task.md` (read-only) | the same, and `task.md` in the workdir as for any capsule |
//! | the workdir preopened as `.` | the workdir preopened as `/` (relative paths land in it the same way) |
//! | `invoke(name, input)`, the tool named without its scope | a tool call of the running task, through the host's tool path: call bounds, `on-tool-call` hooks, the tool's own sandbox, deadline and result limit, its `artifact` frame, `tool_call` line and observation hooks |
//! | `tool-input.data` | the call's input: handed to an upstream tool as it is; another tool needs a JSON object; no data is `{}` |
//! | `ok(tool-result)` | the call ran: an upstream tool's result as it returned it, another tool's text as `data` with `passed` or `error` |
//! | `err(text)` | the call did not run: `tool 'NAME' is not declared in manifest allowlist`, a refusal, a trap, a deadline |
//! | `run` returns: `status: ok` | the task `completed`; its answer is what the component left in `out/result.txt` (none: empty) |
//! | a trap, the deadline, the memory cap: `error[E-RUN-001]` | the task `failed`, the session ends with `error[E-RUN-001]` (trap, memory) or `error[E-RUN-060]` (deadline) and a hint |
//! | `wasi:http` to `capabilities.network.allow` | the same policy as the driver's, each request sent once; a refusal is `http-request-denied` and an `http_denied` trace line |

use crate::bindings::upstream::exports::murmur::tool::run::{Status, ToolInput, ToolResult};
use crate::error::Error;
use crate::limits::{Limits, over};
use crate::rooted::Rooted;
use crate::tools::Plain;

/// The one interface the host serves a capsule component.
pub const REGISTRY: &str = "murmur:tool-registry/invoke@0.1.0";
/// Where the component finds its runtime directory, as upstream names it.
pub const RUNTIME_DIR: &str = "/murmur-runtime";
/// The component's answer, in the workdir.
pub const RESULT_FILE: &str = "out/result.txt";

/// The input of the call a component's `invoke` makes.
pub fn call_input(input: &ToolInput) -> String {
    input.data.clone().unwrap_or_else(|| "{}".to_string())
}

/// What the component is handed of a call that ran.
pub fn handed(plain: Plain, is_error: bool, truncated: bool) -> ToolResult {
    match plain {
        Plain::Upstream(result) => result,
        Plain::Text(text) => ToolResult {
            status: if is_error {
                Status::Error
            } else {
                Status::Passed
            },
            summary: None,
            data: Some(text),
            data_path: None,
            truncated,
            metadata: Vec::new(),
        },
    }
}

/// Removes the answer an earlier task (or attempt) left, so that only what this run
/// writes is its answer. Through the rooted view: a link there is removed, not followed.
pub fn clear_answer(view: &Rooted) {
    let _ = view.remove_file(RESULT_FILE);
}

/// The task's answer: `out/result.txt` as the component left it, read beneath the
/// workdir and no further than `max_answer_bytes`; empty when it wrote none. `Err`
/// says why the task fails instead.
pub fn answer(view: &Rooted, limits: &Limits) -> Result<String, String> {
    let limit = limits.max_answer_bytes;
    match view.read_bounded(RESULT_FILE, limit) {
        Ok((bytes, false)) => {
            String::from_utf8(bytes).map_err(|_| format!("{RESULT_FILE} is not UTF-8 text"))
        }
        Ok((_, true)) => Err(over(
            &format!("the task's answer ({RESULT_FILE})"),
            view.size_of(RESULT_FILE),
            "max_answer_bytes",
            limit,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(format!("{RESULT_FILE} could not be read: {e}")),
    }
}

/// How a run that did not return ended: what the task's result says, and the error
/// that ends the session.
pub struct Failure {
    pub reason: String,
    pub error: Error,
}

/// `label` trapped on task `task`; its own output (a panic's message) is in `log`.
pub fn trapped(label: &str, task: &str, trap: &str, log: &std::path::Path) -> Failure {
    Failure {
        reason: format!("the capsule component trapped: {trap}"),
        error: Error::new(
            "E-RUN-001",
            format!("{label} trapped on task {task}: {trap}"),
        )
        .hint(format!(
            "a capsule component must return from run; what it printed before it \
                 trapped is in {}",
            log.display()
        )),
    }
}

/// `label` asked for `asked` bytes of linear memory, past its cap of `cap`.
pub fn out_of_memory(label: &str, task: &str, asked: u64, cap: u64) -> Failure {
    let why = format!(
        "it asked for {asked} bytes of linear memory, over capabilities.limits.memory_bytes \
         ({cap})"
    );
    Failure {
        reason: format!("the capsule component ran out of memory: {why}"),
        error: Error::new(
            "E-RUN-001",
            format!("{label} exceeded its memory cap on task {task}: {why}"),
        )
        .hint(
            "raise capabilities.limits.memory_bytes in murmur.yaml if the capsule legitimately \
             needs more",
        ),
    }
}

/// `label` ran past its deadline of `seconds` on task `task`.
pub fn past_deadline(label: &str, task: &str, seconds: f64) -> Failure {
    let why = format!(
        "ran for more than {seconds} s, not counting its tool calls \
         (capabilities.limits.deadline_seconds)"
    );
    Failure {
        reason: format!("deadline exceeded: the capsule component {why}"),
        error: Error::new(
            crate::session::DEADLINE_CODE,
            format!("{label} stopped at its deadline on task {task}: it {why}"),
        )
        .hint(
            "raise capabilities.limits.deadline_seconds in murmur.yaml if the capsule \
             legitimately needs longer, or fix a component that spins or waits",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh folder, removed when dropped.
    struct Scratch(std::path::PathBuf);
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn scratch() -> Scratch {
        let dir = std::env::temp_dir().join(format!("mur-capsule-{}", crate::ids::event()));
        std::fs::create_dir_all(dir.join("out")).unwrap();
        Scratch(dir)
    }

    #[test]
    fn the_answer_is_the_result_file_bounded_and_beneath_the_workdir() {
        let dir = scratch();
        let view = Rooted::open(&dir.0).unwrap();
        let limits = Limits {
            max_answer_bytes: 8,
            ..Limits::default()
        };
        assert_eq!(answer(&view, &limits), Ok(String::new()), "none written");
        std::fs::write(dir.0.join(RESULT_FILE), "5").unwrap();
        assert_eq!(answer(&view, &limits), Ok("5".into()));
        std::fs::write(dir.0.join(RESULT_FILE), "123456789").unwrap();
        assert_eq!(
            answer(&view, &limits),
            Err("the task's answer (out/result.txt) of 9 bytes is over \
                 capabilities.limits.max_answer_bytes (8)"
                .into())
        );
        std::fs::write(dir.0.join(RESULT_FILE), [0xff, 0xfe]).unwrap();
        assert_eq!(
            answer(&view, &limits),
            Err("out/result.txt is not UTF-8 text".into())
        );
        clear_answer(&view);
        assert!(!dir.0.join(RESULT_FILE).exists());
        // A link out of the workdir is neither read nor followed when cleared.
        let outside = scratch();
        std::fs::write(outside.0.join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.0.join("secret"), dir.0.join(RESULT_FILE)).unwrap();
        assert!(
            answer(&view, &limits)
                .unwrap_err()
                .starts_with("out/result.txt could not be read")
        );
        clear_answer(&view);
        assert!(outside.0.join("secret").exists());
    }

    #[test]
    fn a_tool_s_text_is_handed_as_data_and_an_upstream_result_as_it_is() {
        let text = handed(Plain::Text("hi".into()), true, true);
        assert_eq!(
            (text.status, text.data.as_deref(), text.truncated),
            (Status::Error, Some("hi"), true)
        );
        let own = ToolResult {
            status: Status::Failed,
            summary: Some("s".into()),
            data: None,
            data_path: Some("p".into()),
            truncated: false,
            metadata: vec![("k".into(), "v".into())],
        };
        let kept = handed(Plain::Upstream(own), false, false);
        assert_eq!(
            (kept.status, kept.data_path.as_deref(), kept.metadata.len()),
            (Status::Failed, Some("p"), 1),
            "an upstream tool's own result, whatever the host read of it"
        );
        let none = ToolInput {
            data: None,
            log_path: Some("x".into()),
        };
        assert_eq!(call_input(&none), "{}");
    }
}
