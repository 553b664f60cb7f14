//! A command that outlived its grace period: moved to the background, its output copied to
//! `logs/<work-id>.log` until it ends, and how it ended.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};

use super::ShellRequest;
use super::capture::READ_CHUNK;
use super::logs::create_log;
use super::plan::Plan;
use super::process::{KILL_DRAIN, KILL_REAP, exit_code, wait_failed};
use super::runner::{Killed, Live, elapsed_ms};
use super::texts::detached_text;
use crate::confine::Jail;

/// A command that moved to the background: its output goes to `log_path`, and `task`
/// ends with how the command ended. Aborting `task` kills the command's process group.
pub struct Background {
    pub work_id: String,
    /// Absolute path of `logs/<work-id>.log`.
    pub log_path: PathBuf,
    /// The process group leader (= the group id).
    pub pid: u32,
    pub resolved_binary: String,
    /// The model's `command` string.
    pub command: String,
    /// The command line as the log and the result text show it.
    pub display: String,
    /// How long it ran in the foreground.
    pub grace: Duration,
    /// When it was spawned.
    pub started: Instant,
    /// What the model is told instead of the command's output.
    pub text: String,
    pub task: tokio::task::JoinHandle<Ended>,
}

/// How a background command ended.
#[derive(Debug, Clone)]
pub struct Ended {
    /// The exit code, `128 + signal` for a signal death (137 when killed at its timeout).
    pub exit_code: i32,
    /// From spawn.
    pub duration_ms: u64,
    /// Both streams, before and after detaching.
    pub output_bytes: u64,
    pub timed_out: bool,
    /// Reading, waiting or logging went wrong; the log may be incomplete.
    pub error: Option<String>,
    /// The last bytes of its output, as the log holds them.
    pub tail: String,
    /// The sandbox limit it was killed for, when its exit proves one.
    pub resource_limit: Option<&'static str>,
}

/// How much of a background command's output its completion report repeats.
const TAIL_BYTES: u64 = 2048;

/// Moves a running command to the background: what it printed so far starts its log, and a
/// task of its own copies the rest there until it exits or its timeout kills it.
pub(super) async fn detach(
    req: &ShellRequest,
    plan: &Plan,
    grace: Duration,
    live: Live,
) -> Result<Background, String> {
    let work_id = crate::ids::work();
    let killed = |e: String| {
        format!(
            "the command outlived its {}s grace period and could not be moved to the background ({e}); it was killed",
            grace.as_secs_f64()
        )
    };
    let (log_path, log) =
        open_detached_log(&req.workdir, &req.logs_dir, &work_id, &plan.display, &live)
            .await
            .map_err(killed)?;
    let pid = live
        .child
        .id()
        .ok_or_else(|| killed("its pid is gone".into()))?;
    let before = live.out.total.saturating_add(live.err.total);
    let text = detached_text(&plan.display, grace, &work_id, &log_path);
    let started = live.started;
    let task = tokio::spawn(run_in_background(
        live,
        log,
        before,
        req.timeout,
        req.jail.clone(),
    ));
    Ok(Background {
        work_id,
        log_path,
        pid,
        resolved_binary: plan.program.clone(),
        command: req.command.clone(),
        display: plan.display.clone(),
        grace,
        started,
        text,
        task,
    })
}

/// `logs/<work-id>.log`: `Command: …`, a blank line, then both streams as read so far.
async fn open_detached_log(
    workdir: &Path,
    logs_dir: &Path,
    work_id: &str,
    display: &str,
    live: &Live,
) -> Result<(PathBuf, tokio::fs::File), String> {
    let name = format!("{work_id}.log");
    let (path, log) = create_log(workdir, logs_dir, &name)
        .map_err(|e| format!("{}: {e}", logs_dir.join(&name).display()))?;
    let mut log = tokio::fs::File::from_std(log);
    let header = format!("Command: {display}\n\n");
    let written = log.write_all(header.as_bytes()).await.is_ok()
        && live.out.copy_into(&mut log).await
        && live.err.copy_into(&mut log).await;
    if !written {
        return Err(format!("could not write {}", path.display()));
    }
    Ok((path, log))
}

/// The background half of a detached command. Dropping it (an aborted task) kills the group.
async fn run_in_background(
    mut live: Live,
    mut log: tokio::fs::File,
    before: u64,
    timeout: Duration,
    jail: Arc<Jail>,
) -> Ended {
    let left = timeout.saturating_sub(live.started.elapsed());
    let mut copied = Copied::default();
    let (child, stdout, stderr) = (&mut live.child, &mut live.stdout, &mut live.stderr);
    let ran = async {
        copy_streams(stdout, stderr, &mut log, &mut copied).await;
        child.wait().await
    };
    let within = tokio::select! {
        within = tokio::time::timeout(left, ran) => within.map_err(|_| Killed::Deadline),
        () = live.watched.stopped() => Err(Killed::Quota),
    };
    let (status, killed) = match within {
        Ok(status) => (status.map_err(wait_failed), Killed::Not),
        Err(killed) => {
            live.group.kill();
            let drain = copy_streams(&mut live.stdout, &mut live.stderr, &mut log, &mut copied);
            let _ = tokio::time::timeout(KILL_DRAIN, drain).await;
            let reaped = tokio::time::timeout(KILL_REAP, live.child.wait()).await;
            let status = reaped
                .map_err(|_| "the killed command could not be reaped".to_string())
                .and_then(|r| r.map_err(wait_failed));
            (status, killed)
        }
    };
    if status.is_ok() {
        // Only once the leader is reaped may its pid (= the group id) be reused.
        live.group.disarm();
    }
    let exit_code = status
        .as_ref()
        .map_or(128 + libc::SIGKILL, |s| exit_code(*s));
    let output_bytes = before.saturating_add(copied.bytes);
    // tokio hands writes to a blocking thread: flush so the tail read below sees them.
    let _ = log.flush().await;
    let tail = read_tail(&log, output_bytes.min(TAIL_BYTES)).await;
    let footer = format!("\n\nExit code: {exit_code}\n");
    let logged = log
        .write_all(footer.as_bytes())
        .await
        .and(log.flush().await);
    let error = status.err().or(copied.error).or_else(|| {
        logged
            .err()
            .map(|e| format!("could not write the log: {e}"))
    });
    Ended {
        exit_code,
        duration_ms: elapsed_ms(live.started),
        output_bytes,
        timed_out: killed == Killed::Deadline,
        error,
        tail,
        resource_limit: killed.resource_limit(&jail, exit_code),
    }
}

#[derive(Default)]
struct Copied {
    bytes: u64,
    error: Option<String>,
}

/// Copies both pipes into the log in the order chunks arrive, until both close. Each chunk
/// is counted before the next await, so a timeout that drops this loses nothing counted.
async fn copy_streams<O, E>(
    stdout: &mut O,
    stderr: &mut E,
    log: &mut tokio::fs::File,
    copied: &mut Copied,
) where
    O: AsyncRead + Unpin,
    E: AsyncRead + Unpin,
{
    let (mut out_buf, mut err_buf) = (vec![0u8; READ_CHUNK], vec![0u8; READ_CHUNK]);
    let (mut out_open, mut err_open) = (true, true);
    while out_open || err_open {
        let (read, from_out) = tokio::select! {
            r = stdout.read(&mut out_buf), if out_open => (r, true),
            r = stderr.read(&mut err_buf), if err_open => (r, false),
        };
        let n = match read {
            Ok(n) => n,
            Err(e) => {
                copied.error = Some(format!("failed to read the command's output: {e}"));
                0
            }
        };
        if n == 0 {
            if from_out {
                out_open = false
            } else {
                err_open = false
            }
            continue;
        }
        let chunk = if from_out {
            &out_buf[..n]
        } else {
            &err_buf[..n]
        };
        copied.bytes = copied.bytes.saturating_add(n as u64);
        // Reading goes on after a failed write, so a full disk never blocks the command.
        if let Err(e) = log.write_all(chunk).await {
            copied
                .error
                .get_or_insert(format!("could not write the log: {e}"));
        }
    }
}

/// The last `n` bytes of the log (the output's tail, before the footer is appended),
/// read through the handle the host wrote it with: its name may since have become a
/// link to anything.
async fn read_tail(log: &tokio::fs::File, n: u64) -> String {
    use tokio::io::AsyncSeekExt as _;
    let Ok(mut file) = log.try_clone().await else {
        return String::new();
    };
    if file
        .seek(std::io::SeekFrom::End(-(n as i64)))
        .await
        .is_err()
    {
        return String::new();
    }
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes).await;
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shell::runner::{Ran, run_with_grace};
    use crate::shell::test_support::{FILLS_THE_DISK, read_pids, request, wait_gone, with_quota};

    async fn detached(req: &ShellRequest, grace: Duration) -> Background {
        match run_with_grace(req, Some(grace)).await.expect("starts") {
            Ran::Detached(background) => background,
            Ran::Done(outcome) => panic!("finished in the foreground: {}", outcome.text),
        }
    }

    #[tokio::test]
    async fn grace_zero_detaches_and_the_log_gets_all_output() {
        let (_scratch, req) = request("bash", "echo early; sleep 1; echo late >&2; exit 4");
        let background = detached(&req, Duration::ZERO).await;
        assert!(background.work_id.starts_with("wrk_"));
        assert_eq!(
            background.log_path,
            req.logs_dir.join(format!("{}.log", background.work_id))
        );
        assert!(background.text.contains(&background.work_id));
        let ended = background.task.await.expect("task ends");
        assert_eq!(ended.exit_code, 4);
        assert!(!ended.timed_out);
        assert_eq!(ended.error, None);
        assert_eq!(ended.output_bytes, 11);
        assert_eq!(ended.tail, "early\nlate\n");
        let log = std::fs::read_to_string(&background.log_path).expect("log");
        assert_eq!(
            log,
            "Command: echo early; sleep 1; echo late >&2; exit 4\n\nearly\nlate\n\n\nExit code: 4\n"
        );
    }

    #[tokio::test]
    async fn a_detached_command_still_meets_its_timeout() {
        let (_scratch, mut req) = request("bash", "echo $$ > pids; sleep 30");
        req.timeout = Duration::from_millis(1500);
        let background = detached(&req, Duration::from_millis(200)).await;
        let ended = background.task.await.expect("task ends");
        assert!(ended.timed_out);
        assert_eq!(ended.exit_code, 137);
        let pids = read_pids(&req.workdir.join("pids"), 1).await;
        assert!(wait_gone(&pids).await, "processes survived: {pids:?}");
    }

    #[tokio::test]
    async fn a_detached_command_past_the_workdir_quota_is_stopped() {
        let (_scratch, req) = request("bash", FILLS_THE_DISK);
        let allowed = with_quota(&req, 4 << 20);
        let background = detached(&req, Duration::ZERO).await;
        let ended = background.task.await.expect("task ends");
        assert_eq!(ended.exit_code, 137);
        assert!(!ended.timed_out);
        assert_eq!(
            ended.resource_limit,
            Some("capabilities.limits.workdir_bytes")
        );
        let held = crate::quota::measure(&req.workdir, u64::MAX).bytes;
        assert!(held <= allowed + (4 << 20), "{held} is far past {allowed}");
    }

    #[tokio::test]
    async fn aborting_a_background_command_kills_its_group() {
        let (_scratch, req) = request(
            "bash",
            "echo $$ > pids; sleep 30 & echo $! >> pids; sleep 30",
        );
        let background = detached(&req, Duration::from_millis(200)).await;
        let pids = read_pids(&req.workdir.join("pids"), 2).await;
        background.task.abort();
        assert!(background.task.await.is_err());
        assert!(wait_gone(&pids).await, "processes survived: {pids:?}");
    }
}
