//! Running one command: a slot, a spawn, its output read until it ends, times out or
//! outlives its grace period, and the outcome the model is shown.

use std::time::{Duration, Instant};

use tokio::sync::OwnedSemaphorePermit;

use super::background::{Background, detach};
use super::capture::{Capture, collect, drain_after_kill};
use super::environment::create_home;
use super::logs::write_log;
use super::plan::Plan;
use super::process::{GroupGuard, Proc, Stream, exit_code, spawn};
use super::texts;
use super::{ShellOutcome, ShellRequest};
use crate::confine::watch::{self, Watched};
use crate::confine::{Confined, Jail};

/// Runs `req` to completion (or until its timeout) and reports the result.
///
/// # Errors
///
/// The command could not be started (binary not on PATH, bad quoting for a non-interpreter,
/// missing workdir, home not creatable, …) or its output could not be read; the caller reports
/// the text as a tool error. A non-zero exit, a signal death and a timeout are `Ok` outcomes.
///
/// Dropping the returned future kills the command's whole process group. The host runs
/// every command with its grace period; this form is the tests'.
#[cfg(test)]
pub async fn run(req: &ShellRequest) -> Result<ShellOutcome, String> {
    match run_with_grace(req, None).await? {
        Ran::Done(outcome) => Ok(outcome),
        // Without a grace period nothing detaches; kept total rather than panicking.
        Ran::Detached(background) => Err(background.text),
    }
}

/// What a started command did within its grace period.
pub enum Ran {
    /// It ended (or hit its timeout) in the foreground.
    Done(ShellOutcome),
    /// It outlived the grace period and now runs in the background.
    Detached(Background),
}

/// Runs `req` to completion, except that a command still running after `grace` (when
/// given and shorter than the timeout) moves to the background instead of holding the turn.
///
/// # Errors
///
/// As [`run`]; also when the background log cannot be created (the command is killed).
pub async fn run_with_grace(req: &ShellRequest, grace: Option<Duration>) -> Result<Ran, String> {
    let plan = Plan::new(req)?;
    create_home(req).map_err(|e| format!("failed to create home '{}': {e}", req.home.display()))?;
    let slot = req
        .slots
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| "the session is ending; the command was not run".to_string())?;
    let started = Instant::now();
    let (mut child, mut stdout, mut stderr, confined) = spawn(req, &plan).await?;
    let mut group = GroupGuard::for_child(&child)?;
    let watched = req.jail.watch().enter();
    let mut out = Capture::new(req, "stdout");
    let mut err = Capture::new(req, "stderr");
    let detach_after = grace.filter(|g| *g < req.timeout);

    // `collect` only ever awaits cancel-safe reads and records each chunk before the next
    // await, so when the timeout drops it, `out`/`err` hold everything read so far.
    let collect = collect(&mut child, &mut stdout, &mut stderr, &mut out, &mut err);
    let within = tokio::select! {
        within = tokio::time::timeout(detach_after.unwrap_or(req.timeout), collect) => {
            within.map_err(|_| Killed::Deadline)
        }
        () = watched.stopped() => Err(Killed::Quota),
    };
    let (status, killed) = match within {
        Ok(status) => (Some(status?), Killed::Not),
        // Not the deadline: the grace period ran out, and the command goes on.
        Err(Killed::Deadline) if detach_after.is_some() => {
            let live = Live {
                child,
                stdout,
                stderr,
                group,
                out,
                err,
                started,
                watched,
                _slot: slot,
                _confined: confined,
            };
            return detach(req, &plan, detach_after.unwrap_or_default(), live)
                .await
                .map(Ran::Detached);
        }
        Err(killed) => {
            group.kill();
            let status =
                drain_after_kill(&mut child, &mut stdout, &mut stderr, &mut out, &mut err).await;
            (status, killed)
        }
    };
    if status.is_some() {
        // Only once the leader is reaped may its pid (= the group id) be reused.
        group.disarm();
    }
    let exit_code = status.map_or(128 + libc::SIGKILL, exit_code);
    let duration_ms = elapsed_ms(started);
    Ok(Ran::Done(
        finish(req, &plan, exit_code, duration_ms, killed, &out, &err).await,
    ))
}

/// What the host killed a command for, if anything.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Killed {
    Not,
    Deadline,
    Quota,
}

impl Killed {
    /// The sandbox limit the command was killed for: the quota when the watcher stopped
    /// it (whatever the class: the quota is the session's), else what its exit proves.
    pub(super) fn resource_limit(self, jail: &Jail, exit_code: i32) -> Option<&'static str> {
        match self {
            Killed::Quota => Some(watch::LIMIT),
            Killed::Not | Killed::Deadline => jail.resource_limit(exit_code),
        }
    }
}

/// A running command and everything read from it so far.
pub(super) struct Live {
    pub(super) child: Proc,
    pub(super) stdout: Stream,
    pub(super) stderr: Stream,
    pub(super) group: GroupGuard,
    pub(super) out: Capture,
    pub(super) err: Capture,
    pub(super) started: Instant,
    /// Its place under the workdir quota's watch, in the background too.
    pub(super) watched: Watched,
    /// Held until the command ends, in the background too.
    pub(super) _slot: OwnedSemaphorePermit,
    pub(super) _confined: Option<Confined>,
}

/// Milliseconds since `started`, saturating.
pub(super) fn elapsed_ms(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The outcome of a command that ended in the foreground, its full output logged when
/// either stream passed the cap.
async fn finish(
    req: &ShellRequest,
    plan: &Plan,
    exit_code: i32,
    duration_ms: u64,
    killed: Killed,
    out: &Capture,
    err: &Capture,
) -> ShellOutcome {
    let timed_out = killed == Killed::Deadline;
    let truncated = out.over_cap() || err.over_cap();
    let log_path = if truncated {
        write_log(req, &plan.display, exit_code, out, err).await
    } else {
        None
    };
    let mut text = texts::result(&plan.display, exit_code, &out.text(), &err.text());
    if truncated {
        text.push_str(&texts::truncation_note(log_path.as_deref()));
    }
    if timed_out {
        text.push_str(&texts::timeout_note(req.timeout));
    }
    let resource_limit = killed.resource_limit(&req.jail, exit_code);
    if let Some(limit) = resource_limit {
        text.push_str(&texts::sandbox_note(limit));
    }
    ShellOutcome {
        resource_limit,
        text,
        exit_code,
        stdout_bytes: out.total,
        stderr_bytes: err.total,
        duration_ms,
        truncated,
        log_path,
        resolved_binary: plan.program.clone(),
        timed_out,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::shell::test_support::{FILLS_THE_DISK, request, run_ok, with_quota};

    #[tokio::test]
    async fn echo_hello_text_is_exact() {
        let (_scratch, req) = request("bash", "echo hello");
        let outcome = run_ok(&req).await;
        assert_eq!(
            outcome.text,
            "$ echo hello\nExit code: 0\nStdout:\nhello\n\nStderr:\n"
        );
        assert_eq!(outcome.exit_code, 0);
        assert_eq!(outcome.stdout_bytes, 6);
        assert_eq!(outcome.stderr_bytes, 0);
        assert!(!outcome.truncated);
        assert!(!outcome.timed_out);
        assert_eq!(outcome.log_path, None);
        assert!(outcome.resolved_binary.starts_with('/'));
        assert!(outcome.resolved_binary.ends_with("/bash"));
        assert!(req.home.is_dir(), "home is created on first use");
    }

    #[tokio::test]
    async fn nonzero_exit_is_an_outcome() {
        let outcome = run_ok(&request("bash", "exit 3").1).await;
        assert_eq!(outcome.exit_code, 3);
        assert_eq!(outcome.text, "$ exit 3\nExit code: 3\nStdout:\n\nStderr:\n");
    }

    #[tokio::test]
    async fn stderr_is_captured() {
        let outcome = run_ok(&request("sh", "echo out; echo oops >&2; exit 1").1).await;
        assert_eq!(
            outcome.text,
            "$ echo out; echo oops >&2; exit 1\nExit code: 1\nStdout:\nout\n\nStderr:\noops\n"
        );
        assert_eq!(outcome.stderr_bytes, 5);
    }

    #[tokio::test]
    async fn timeout_keeps_output_read_so_far() {
        let (_scratch, mut req) = request("bash", "echo before; sleep 30");
        req.timeout = Duration::from_millis(1500);
        let outcome = run_ok(&req).await;
        assert!(outcome.timed_out);
        assert!(
            outcome.text.starts_with(
                "$ echo before; sleep 30\nExit code: 137\nStdout:\nbefore\n\nStderr:\n\n\n"
            ),
            "{}",
            outcome.text
        );
        assert!(outcome.text.ends_with("stopped after 1.5 seconds."));
    }

    #[tokio::test]
    async fn a_command_past_the_workdir_quota_is_stopped_while_it_runs() {
        let (_scratch, req) = request("bash", FILLS_THE_DISK);
        let allowed = with_quota(&req, 4 << 20);
        let outcome = run_ok(&req).await;
        assert_eq!(outcome.exit_code, 137, "{}", outcome.text);
        assert!(!outcome.timed_out);
        assert_eq!(
            outcome.resource_limit,
            Some("capabilities.limits.workdir_bytes")
        );
        assert!(
            outcome
                .text
                .ends_with("(killed by the sandbox: it passed capabilities.limits.workdir_bytes)"),
            "{}",
            outcome.text
        );
        let held = crate::quota::measure(&req.workdir, u64::MAX).bytes;
        assert!(held > allowed, "stopped only past the quota: {held}");
        assert!(held <= allowed + (4 << 20), "{held} is far past {allowed}");
    }

    #[tokio::test]
    async fn a_command_inside_its_grace_period_stays_in_the_foreground() {
        let (_scratch, req) = request("bash", "echo hi");
        match run_with_grace(&req, Some(Duration::from_secs(10))).await {
            Ok(Ran::Done(outcome)) => assert_eq!(outcome.exit_code, 0),
            _ => panic!("should have finished in the foreground"),
        }
    }
}
