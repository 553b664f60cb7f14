//! A started command: a plain child (`advisory`) or one cloned into its sandbox, its
//! process group (killed as one), and how its exit reads as a code.

use std::os::unix::process::ExitStatusExt as _;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::AsyncRead;
use tokio::process::{Child, Command};

use super::ShellRequest;
use super::environment::child_env;
use super::plan::Plan;
use crate::confine::{self, Confined};

/// After the group is killed, a pipe can still be held open by a process that left the group
/// (e.g. via `setsid`); these bound how long we wait on such stragglers.
pub(super) const KILL_DRAIN: Duration = Duration::from_secs(2);
pub(super) const KILL_REAP: Duration = Duration::from_secs(5);

/// A command's output stream, whichever way it was started.
pub(super) type Stream = Box<dyn AsyncRead + Send + Sync + Unpin>;

/// A started command: a plain child (`advisory`), or one cloned into its sandbox.
pub(super) enum Proc {
    Plain(Child),
    Confined(confine::spawn::Process),
}

impl Proc {
    pub(super) fn id(&self) -> Option<u32> {
        match self {
            Proc::Plain(child) => child.id(),
            Proc::Confined(process) => Some(process.id()),
        }
    }

    pub(super) async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        match self {
            Proc::Plain(child) => child.wait().await,
            Proc::Confined(process) => process.wait().await,
        }
    }
}

/// Starts the command: cloned into its sandbox, or as a plain child in a process group of
/// its own when the jail is advisory.
pub(super) async fn spawn(
    req: &ShellRequest,
    plan: &Plan,
) -> Result<(Proc, Stream, Stream, Option<Confined>), String> {
    if !req.jail.unconfined() {
        let (started, confined) = req
            .jail
            .spawn(&confine::spawn::Request {
                program: &plan.program,
                args: &plan.args,
                env: &child_env(req),
                cwd: &req.workdir,
            })
            .await?;
        return Ok((
            Proc::Confined(started.process),
            Box::new(started.stdout),
            Box::new(started.stderr),
            Some(confined),
        ));
    }
    let mut cmd = Command::new(&plan.program);
    cmd.args(&plan.args)
        .env_clear()
        .envs(child_env(req))
        .current_dir(&req.workdir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A group of its own lets one killpg reach everything the command started, and keeps
        // a terminal's signals meant for the host away from it. std's `process_group(0)` is
        // used instead of a `pre_exec` setpgid so spawning stays on the posix_spawn fast path.
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("failed to start '{}': {e}", req.binary))?;
    let stdout = child.stdout.take().ok_or("child stdout pipe missing")?;
    let stderr = child.stderr.take().ok_or("child stderr pipe missing")?;
    Ok((Proc::Plain(child), Box::new(stdout), Box::new(stderr), None))
}

/// Kills the command's process group unless disarmed, including when `run` is dropped.
pub(super) struct GroupGuard {
    pgid: Option<libc::pid_t>,
}

impl GroupGuard {
    pub(super) fn for_child(child: &Proc) -> Result<Self, String> {
        let pid = child
            .id()
            .ok_or("child exited before its process group was known")?;
        let pgid = libc::pid_t::try_from(pid).map_err(|e| format!("child pid {pid}: {e}"))?;
        Ok(Self { pgid: Some(pgid) })
    }

    pub(super) fn kill(&self) {
        if let Some(pgid) = self.pgid {
            // libc is used because std and tokio only signal single processes, and a command's
            // children (`sleep 30 & …`) must die with it.
            // SAFETY: killpg takes plain integers and touches no memory of ours; an
            // already-empty group just yields ESRCH.
            unsafe {
                libc::killpg(pgid, libc::SIGKILL);
            }
        }
    }

    pub(super) fn disarm(&mut self) {
        self.pgid = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The exit code, or `128 + signal` for a command killed by a signal.
pub(super) fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .unwrap_or(-1)
}

pub(super) fn wait_failed(e: std::io::Error) -> String {
    format!("failed to wait for the command: {e}")
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use crate::shell::run;
    use crate::shell::test_support::{read_pids, request, run_ok, wait_gone};

    #[tokio::test]
    async fn signal_death_is_128_plus_signal() {
        let outcome = run_ok(&request("bash", "kill -TERM $$").1).await;
        assert_eq!(outcome.exit_code, 128 + libc::SIGTERM);
        assert!(!outcome.timed_out);
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let (_scratch, mut req) = request(
            "bash",
            "echo $$ > pids; sleep 30 & echo $! >> pids; sleep 30",
        );
        req.timeout = Duration::from_secs(1);
        let started = Instant::now();
        let outcome = run_ok(&req).await;
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(outcome.timed_out);
        assert_eq!(outcome.exit_code, 137);
        assert!(
            outcome
                .text
                .ends_with("\n\nCommand timed out: stopped after 1 seconds."),
            "{}",
            outcome.text
        );
        let pids = read_pids(&req.workdir.join("pids"), 2).await;
        assert!(wait_gone(&pids).await, "processes survived: {pids:?}");
    }

    #[tokio::test]
    async fn dropping_the_future_kills_the_group() {
        let (_scratch, req) = request(
            "bash",
            "echo $$ > pids; sleep 30 & echo $! >> pids; sleep 30",
        );
        let dropped = tokio::time::timeout(Duration::from_millis(1000), run(&req)).await;
        assert!(dropped.is_err(), "run should still have been running");
        let pids = read_pids(&req.workdir.join("pids"), 2).await;
        assert!(wait_gone(&pids).await, "processes survived: {pids:?}");
    }

    #[tokio::test]
    async fn cwd_is_the_workdir() {
        let (_scratch, req) = request("bash", "pwd");
        let outcome = run_ok(&req).await;
        assert_eq!(
            outcome.text,
            format!(
                "$ pwd\nExit code: 0\nStdout:\n{}\n\nStderr:\n",
                req.workdir.display()
            )
        );
    }

    #[tokio::test]
    async fn stdin_is_empty() {
        let (_scratch, mut req) = request("bash", "cat; echo done");
        req.timeout = Duration::from_secs(10);
        let outcome = run_ok(&req).await;
        assert!(!outcome.timed_out);
        assert!(outcome.duration_ms < 5000);
        assert_eq!(
            outcome.text,
            "$ cat; echo done\nExit code: 0\nStdout:\ndone\n\nStderr:\n"
        );
    }
}
