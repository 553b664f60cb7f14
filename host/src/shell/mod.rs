//! The built-in shell tool: runs one allowed binary for the capsule and reports its output.
//!
//! The result text is returned unfenced; fencing it as `tool:<binary>` is the caller's job.
//!
//! A call goes `input` (the model's `command`) → `plan` (binary, argv) → `runner` (slot,
//! `process` spawn in its `environment`, `capture` of both streams) → the outcome in `texts`,
//! or, past its grace period, `background` with its output in `logs`.

mod background;
mod capture;
mod environment;
mod input;
mod logs;
mod plan;
mod process;
mod runner;
#[cfg(test)]
mod test_support;
mod texts;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::confine::Jail;

pub use background::{Background, Ended};
pub use input::{input_schema, parse_input};
pub use plan::{INTERPRETERS, argv, resolve_binary};
#[cfg(test)]
pub use runner::run;
pub use runner::{Ran, run_with_grace};

/// One shell tool call, as the host decided to run it.
#[derive(Clone)]
pub struct ShellRequest {
    /// The allowed binary, as named in `capabilities.shell.allow`.
    pub binary: String,
    /// The model's `command` string.
    pub command: String,
    /// The child's current directory.
    pub workdir: PathBuf,
    /// `$HOME` for the child, created on first use.
    pub home: PathBuf,
    /// Where `shell-<unix-ms>.log` goes when output passes the cap: a folder inside
    /// `workdir`, written beneath it so a link planted there cannot lead outside.
    pub logs_dir: PathBuf,
    /// Hard limit: the whole process group is killed when it passes.
    pub timeout: Duration,
    /// The only environment the child gets, besides `HOME`.
    pub env: Vec<(String, String)>,
    /// The sandbox the command starts in.
    pub jail: Arc<Jail>,
    /// Shared by every command of the session: one is taken while a command runs,
    /// foreground or background, so at most so many run at once.
    pub slots: Arc<Semaphore>,
}

/// What a command that was started did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellOutcome {
    /// The result text, unfenced.
    pub text: String,
    /// The exit code, or `128 + signal` for a command killed by a signal.
    pub exit_code: i32,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub duration_ms: u64,
    /// Whether either stream passed the per-stream cap.
    pub truncated: bool,
    /// The full-output log, when one was written.
    pub log_path: Option<PathBuf>,
    /// The absolute path found on `PATH`, else the bare name.
    pub resolved_binary: String,
    pub timed_out: bool,
    /// The sandbox limit the command was killed for, when its exit proves one.
    pub resource_limit: Option<&'static str>,
}
