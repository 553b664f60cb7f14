//! The built-in shell tool: runs one allowed binary for the capsule and reports its output.
//!
//! The result text is returned unfenced; fencing it as `tool:<binary>` is the caller's job.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, Command};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::confine::{self, Confined, Jail};

/// Binaries that get the command as one script (`<binary> -c <command>`) instead of split argv.
pub const INTERPRETERS: &[&str] = &["bash", "sh", "zsh", "fish", "dash", "ksh"];

/// Bytes of each stream kept for the result text; the rest only reaches the log file.
const STREAM_CAP: usize = 16 * 1024;
const READ_CHUNK: usize = 8 * 1024;
/// After the group is killed, a pipe can still be held open by a process that left the group
/// (e.g. via `setsid`); these bound how long we wait on such stragglers.
const KILL_DRAIN: Duration = Duration::from_secs(2);
const KILL_REAP: Duration = Duration::from_secs(5);
/// How many later millisecond stamps to try when a log name is taken by a concurrent command.
const LOG_NAME_ATTEMPTS: u64 = 1000;

const INPUT_SCHEMA: &str =
    r#"{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}"#;
const MISSING_COMMAND: &str = "shell tool input must include a non-empty 'command' string";

/// Input schema of every shell tool (one tool per allowed binary).
pub fn input_schema() -> &'static str {
    INPUT_SCHEMA
}

/// Extracts the `command` string from a shell tool call's JSON input.
///
/// # Errors
///
/// The exact tool-error texts: `shell tool input must be valid JSON: <serde error>`, or
/// `shell tool input must include a non-empty 'command' string` when `command` is missing,
/// blank or not a string.
pub fn parse_input(input: &str) -> Result<String, String> {
    let value: serde_json::Value = serde_json::from_str(input)
        .map_err(|e| format!("shell tool input must be valid JSON: {e}"))?;
    match value.get("command").and_then(serde_json::Value::as_str) {
        Some(command) if !command.trim().is_empty() => Ok(command.to_string()),
        _ => Err(MISSING_COMMAND.to_string()),
    }
}

/// Splits `command` into argv the way a POSIX shell would, without any expansion.
///
/// Single quotes keep everything literally; inside double quotes a backslash escapes only
/// `"`, `\`, `$`, `` ` `` and newline (and is kept otherwise); outside quotes a backslash
/// escapes any character. An unterminated quote or a trailing backslash is an error rather than
/// a guess, because a guessed argv could run something the model did not mean.
///
/// # Errors
///
/// `unterminated single quote in command`, `unterminated double quote in command` or
/// `trailing backslash in command`.
pub fn split_args(command: &str) -> Result<Vec<String>, String> {
    let mut args = Vec::new();
    let mut current = String::new();
    // Separate from `current.is_empty()` so that `''` still yields an (empty) argument.
    let mut in_word = false;
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                read_single_quoted(&mut chars, &mut current)?;
            }
            '"' => {
                in_word = true;
                read_double_quoted(&mut chars, &mut current)?;
            }
            '\\' => {
                in_word = true;
                let escaped = chars
                    .next()
                    .ok_or_else(|| "trailing backslash in command".to_string())?;
                current.push(escaped);
            }
            c if c.is_ascii_whitespace() => {
                if in_word {
                    args.push(std::mem::take(&mut current));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                current.push(c);
            }
        }
    }
    if in_word {
        args.push(current);
    }
    Ok(args)
}

fn read_single_quoted(chars: &mut std::str::Chars<'_>, out: &mut String) -> Result<(), String> {
    for c in chars.by_ref() {
        if c == '\'' {
            return Ok(());
        }
        out.push(c);
    }
    Err("unterminated single quote in command".to_string())
}

fn read_double_quoted(chars: &mut std::str::Chars<'_>, out: &mut String) -> Result<(), String> {
    let unterminated = || "unterminated double quote in command".to_string();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Ok(()),
            '\\' => {
                let next = chars.next().ok_or_else(unterminated)?;
                if !matches!(next, '"' | '\\' | '$' | '`' | '\n') {
                    out.push('\\');
                }
                out.push(next);
            }
            c => out.push(c),
        }
    }
    Err(unterminated())
}

/// The absolute path of `name` in the first `PATH` directory holding an executable file of
/// that name; `name` itself when it contains a `/` or is not found.
///
/// Relative `PATH` entries (including the empty one, meaning the current directory) are
/// skipped: a binary resolved against the capsule's own workdir would let it substitute an
/// allowed binary with a file it wrote.
pub fn resolve_binary(name: &str, path_env: &str) -> String {
    if name.is_empty() || name.contains('/') {
        return name.to_string();
    }
    path_env
        .split(':')
        .map(Path::new)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable_file(candidate))
        .map_or_else(
            || name.to_string(),
            |found| found.to_string_lossy().into_owned(),
        )
}

fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

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

/// Runs `req` to completion (or until its timeout) and reports the result.
///
/// # Errors
///
/// The command could not be started (binary not on PATH, bad quoting for a non-interpreter,
/// missing workdir, home not creatable, …) or its output could not be read; the caller reports
/// the text as a tool error. A non-zero exit, a signal death and a timeout are `Ok` outcomes.
///
/// Dropping the returned future kills the command's whole process group.
#[cfg_attr(not(test), allow(dead_code))]
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

/// Like [`run`], but a command still running after `grace` (when given and shorter than
/// the timeout) moves to the background instead of holding the turn.
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
    let mut out = Capture::new(req, "stdout");
    let mut err = Capture::new(req, "stderr");
    let detach_after = grace.filter(|g| *g < req.timeout);

    // `collect` only ever awaits cancel-safe reads and records each chunk before the next
    // await, so when the timeout drops it, `out`/`err` hold everything read so far.
    let collect = collect(&mut child, &mut stdout, &mut stderr, &mut out, &mut err);
    let within = tokio::time::timeout(detach_after.unwrap_or(req.timeout), collect).await;
    let (status, timed_out) = match within {
        Ok(status) => (Some(status?), false),
        Err(_) if detach_after.is_some() => {
            let live = Live {
                child,
                stdout,
                stderr,
                group,
                out,
                err,
                started,
                _slot: slot,
                _confined: confined,
            };
            return detach(req, &plan, detach_after.unwrap_or_default(), live)
                .await
                .map(Ran::Detached);
        }
        Err(_) => {
            group.kill();
            let status =
                drain_after_kill(&mut child, &mut stdout, &mut stderr, &mut out, &mut err).await;
            (status, true)
        }
    };
    if status.is_some() {
        // Only once the leader is reaped may its pid (= the group id) be reused.
        group.disarm();
    }
    let exit_code = status.map_or(128 + libc::SIGKILL, exit_code);
    let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    Ok(Ran::Done(
        finish(req, &plan, exit_code, duration_ms, timed_out, &out, &err).await,
    ))
}

/// A running command and everything read from it so far.
struct Live {
    child: Proc,
    stdout: Stream,
    stderr: Stream,
    group: GroupGuard,
    out: Capture,
    err: Capture,
    started: Instant,
    /// Held until the command ends, in the background too.
    _slot: OwnedSemaphorePermit,
    _confined: Option<Confined>,
}

/// Moves a running command to the background: what it printed so far starts its log, and a
/// task of its own copies the rest there until it exits or its timeout kills it.
async fn detach(
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

fn detached_text(display: &str, grace: Duration, work_id: &str, log_path: &Path) -> String {
    format!(
        "$ {display}\nStill running after {} seconds: moved to the background as {work_id}.\n\
         Its stdout and stderr, including what it printed so far, go to {} instead of this \
         conversation.\nWhen it ends, its exit code and the tail of its output arrive as a new \
         task in this conversation. Nothing accepts the work id, so there is nothing to poll.",
        grace.as_secs_f64(),
        log_path.display()
    )
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
    let ran = async {
        copy_streams(&mut live.stdout, &mut live.stderr, &mut log, &mut copied).await;
        live.child.wait().await
    };
    let (status, timed_out) = match tokio::time::timeout(left, ran).await {
        Ok(status) => (
            status.map_err(|e| format!("failed to wait for the command: {e}")),
            false,
        ),
        Err(_) => {
            live.group.kill();
            let drain = copy_streams(&mut live.stdout, &mut live.stderr, &mut log, &mut copied);
            let _ = tokio::time::timeout(KILL_DRAIN, drain).await;
            let reaped = tokio::time::timeout(KILL_REAP, live.child.wait()).await;
            let status = reaped
                .map_err(|_| "the killed command could not be reaped".to_string())
                .and_then(|r| r.map_err(|e| format!("failed to wait for the command: {e}")));
            (status, true)
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
        duration_ms: u64::try_from(live.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        output_bytes,
        timed_out,
        error,
        tail,
        resource_limit: jail.resource_limit(exit_code),
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

/// How a request turns into a process: program, argv and the result's first line.
struct Plan {
    program: String,
    args: Vec<String>,
    /// The command line as reported: `$ ` + this is the first line, `Command: ` + this the log's.
    display: String,
}

impl Plan {
    fn new(req: &ShellRequest) -> Result<Self, String> {
        let program = resolve_binary(&req.binary, &child_path(req));
        // Spawning a bare name would let the OS fall back to its default search path, which
        // is not the PATH the capsule was given.
        if !program.contains('/') {
            return Err(format!(
                "failed to start '{}': not found on PATH",
                req.binary
            ));
        }
        if is_interpreter(&req.binary) {
            let args = vec!["-c".to_string(), req.command.clone()];
            return Ok(Self {
                program,
                args,
                display: req.command.clone(),
            });
        }
        let args = split_args(&req.command)?;
        let display = format!("{} {}", req.binary, req.command);
        Ok(Self {
            program,
            args,
            display,
        })
    }
}

fn is_interpreter(binary: &str) -> bool {
    let name = Path::new(binary)
        .file_name()
        .map_or(binary.into(), |n| n.to_string_lossy());
    INTERPRETERS.contains(&name.as_ref())
}

/// The PATH the binary is looked up on: the child's own, else the host's.
fn child_path(req: &ShellRequest) -> String {
    req.env
        .iter()
        .rev()
        .find(|(key, _)| key == "PATH")
        .map(|(_, value)| value.clone())
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_default()
}

/// A command's output stream, whichever way it was started.
type Stream = Box<dyn AsyncRead + Send + Sync + Unpin>;

/// A started command: a plain child (`advisory`), or one cloned into its sandbox.
enum Proc {
    Plain(Child),
    Confined(confine::spawn::Process),
}

impl Proc {
    fn id(&self) -> Option<u32> {
        match self {
            Proc::Plain(child) => child.id(),
            Proc::Confined(process) => Some(process.id()),
        }
    }

    async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        match self {
            Proc::Plain(child) => child.wait().await,
            Proc::Confined(process) => process.wait().await,
        }
    }
}

async fn spawn(
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

/// The command's whole environment: what it was granted, and `HOME`.
fn child_env(req: &ShellRequest) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = req
        .env
        .iter()
        .filter(|(k, _)| k != "HOME")
        .cloned()
        .collect();
    env.push(("HOME".into(), req.home.to_string_lossy().into_owned()));
    env
}

/// Kills the command's process group unless disarmed, including when `run` is dropped.
struct GroupGuard {
    pgid: Option<libc::pid_t>,
}

impl GroupGuard {
    fn for_child(child: &Proc) -> Result<Self, String> {
        let pid = child
            .id()
            .ok_or("child exited before its process group was known")?;
        let pgid = libc::pid_t::try_from(pid).map_err(|e| format!("child pid {pid}: {e}"))?;
        Ok(Self { pgid: Some(pgid) })
    }

    fn kill(&self) {
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

    fn disarm(&mut self) {
        self.pgid = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn collect<O, E>(
    child: &mut Proc,
    stdout: &mut O,
    stderr: &mut E,
    out: &mut Capture,
    err: &mut Capture,
) -> Result<ExitStatus, String>
where
    O: AsyncRead + Unpin,
    E: AsyncRead + Unpin,
{
    let (read_out, read_err) = tokio::join!(pump(stdout, out), pump(stderr, err));
    read_out.map_err(|e| format!("failed to read stdout: {e}"))?;
    read_err.map_err(|e| format!("failed to read stderr: {e}"))?;
    child
        .wait()
        .await
        .map_err(|e| format!("failed to wait for the command: {e}"))
}

/// Reads what the killed group left in the pipes, then reaps the leader; both bounded.
/// `None` when the leader could not be reaped in time.
async fn drain_after_kill<O, E>(
    child: &mut Proc,
    stdout: &mut O,
    stderr: &mut E,
    out: &mut Capture,
    err: &mut Capture,
) -> Option<ExitStatus>
where
    O: AsyncRead + Unpin,
    E: AsyncRead + Unpin,
{
    let drain = async { tokio::join!(pump(stdout, out), pump(stderr, err)) };
    // Output lost here only shortens the report; the kill already happened.
    let _ = tokio::time::timeout(KILL_DRAIN, drain).await;
    tokio::time::timeout(KILL_REAP, child.wait())
        .await
        .ok()
        .and_then(Result::ok)
}

async fn pump<R: AsyncRead + Unpin>(reader: &mut R, capture: &mut Capture) -> std::io::Result<()> {
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let n = reader.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        capture.push(&buf[..n]);
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .unwrap_or(-1)
}

/// One output stream: the first [`STREAM_CAP`] bytes in memory, and once the stream passes
/// the cap, all of it in a spill file so memory stays bounded whatever the command prints.
struct Capture {
    head: Vec<u8>,
    total: u64,
    spill: Option<Spill>,
    /// A spill write failed, so no complete copy of the stream exists for the log.
    spill_failed: bool,
    workdir: PathBuf,
    logs_dir: PathBuf,
    label: &'static str,
}

impl Capture {
    fn new(req: &ShellRequest, label: &'static str) -> Self {
        Self {
            head: Vec::new(),
            total: 0,
            spill: None,
            spill_failed: false,
            workdir: req.workdir.clone(),
            logs_dir: req.logs_dir.clone(),
            label,
        }
    }

    /// Synchronous on purpose: nothing awaits between a chunk being read and recorded, which
    /// is what makes `collect` safe to cancel at its timeout.
    fn push(&mut self, chunk: &[u8]) {
        let room = STREAM_CAP.saturating_sub(self.head.len());
        let kept = room.min(chunk.len());
        self.head.extend_from_slice(&chunk[..kept]);
        self.total = self.total.saturating_add(chunk.len() as u64);
        if !self.over_cap() || self.spill_failed {
            return;
        }
        if self.spill.is_none() {
            // The head already holds this chunk's first `kept` bytes.
            self.spill = Spill::create(&self.workdir, &self.logs_dir, self.label, &self.head);
        }
        let written = self
            .spill
            .as_mut()
            .is_some_and(|spill| spill.file.write_all(&chunk[kept..]).is_ok());
        if !written {
            self.spill = None;
            self.spill_failed = true;
        }
    }

    fn over_cap(&self) -> bool {
        self.total > STREAM_CAP as u64
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.head).into_owned()
    }

    /// Appends the whole stream to `log`. `false` when no complete copy exists or writing fails.
    async fn copy_into(&self, log: &mut tokio::fs::File) -> bool {
        if self.spill_failed {
            return false;
        }
        match &self.spill {
            None => log.write_all(&self.head).await.is_ok(),
            // Through the handle that wrote it: the name may since have become a link.
            Some(spill) => match spill.file.try_clone() {
                Ok(file) => {
                    use tokio::io::AsyncSeekExt as _;
                    let mut file = tokio::fs::File::from_std(file);
                    file.seek(std::io::SeekFrom::Start(0)).await.is_ok()
                        && tokio::io::copy(&mut file, log).await.is_ok()
                }
                Err(_) => false,
            },
        }
    }
}

/// A temp file in the logs dir holding one stream's full output; removed when dropped, so an
/// abandoned or finished run leaves only the assembled log behind.
struct Spill {
    workdir: PathBuf,
    path: PathBuf,
    file: std::fs::File,
}

static SPILL_SEQ: AtomicU64 = AtomicU64::new(0);

impl Spill {
    fn create(workdir: &Path, logs_dir: &Path, label: &str, head: &[u8]) -> Option<Self> {
        let seq = SPILL_SEQ.fetch_add(1, Ordering::Relaxed);
        let name = format!(
            ".shell-{}-{}-{seq}-{label}.tmp",
            unix_ms(),
            std::process::id()
        );
        let (path, file) = create_log(workdir, logs_dir, &name).ok()?;
        let mut spill = Self {
            workdir: workdir.to_path_buf(),
            path,
            file,
        };
        spill.file.write_all(head).ok()?;
        Some(spill)
    }
}

impl Drop for Spill {
    fn drop(&mut self) {
        // Best effort: a leftover temp file is harmless, and there is no one to report to.
        remove_log(&self.workdir, &self.path);
    }
}

async fn finish(
    req: &ShellRequest,
    plan: &Plan,
    exit_code: i32,
    duration_ms: u64,
    timed_out: bool,
    out: &Capture,
    err: &Capture,
) -> ShellOutcome {
    let truncated = out.over_cap() || err.over_cap();
    let log_path = if truncated {
        write_log(req, &plan.display, exit_code, out, err).await
    } else {
        None
    };
    let mut text = format!(
        "$ {}\nExit code: {exit_code}\nStdout:\n{}\nStderr:\n{}",
        plan.display,
        out.text(),
        err.text()
    );
    if truncated {
        text.push_str(&truncation_note(log_path.as_deref()));
    }
    if timed_out {
        text.push_str(&timeout_note(req.timeout));
    }
    let resource_limit = req.jail.resource_limit(exit_code);
    if let Some(limit) = resource_limit {
        text.push_str(&format!("\n(killed by the sandbox: it passed {limit})"));
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

fn truncation_note(log_path: Option<&Path>) -> String {
    match log_path {
        Some(path) => format!(
            "\n\nOutput truncated. Full output written to {}",
            path.display()
        ),
        None => "\n\nOutput truncated.".to_string(),
    }
}

fn timeout_note(timeout: Duration) -> String {
    format!(
        "\n\nCommand timed out: stopped after {} seconds.",
        timeout.as_secs_f64()
    )
}

/// Writes `logs_dir/shell-<unix-ms>.log`; `None` (and no partial file) when that fails.
async fn write_log(
    req: &ShellRequest,
    display: &str,
    exit_code: i32,
    out: &Capture,
    err: &Capture,
) -> Option<PathBuf> {
    let (path, mut file) = create_log_file(&req.workdir, &req.logs_dir)?;
    let header = format!("Command: {display}\nExit code: {exit_code}\n\nStdout:\n");
    let written = file.write_all(header.as_bytes()).await.is_ok()
        && out.copy_into(&mut file).await
        && file.write_all(b"\n\nStderr:\n").await.is_ok()
        && err.copy_into(&mut file).await
        && file.write_all(b"\n").await.is_ok()
        && file.flush().await.is_ok();
    if written {
        Some(path)
    } else {
        drop(file);
        remove_log(&req.workdir, &path);
        None
    }
}

/// Creates a fresh `shell-<unix-ms>.log`, stepping the stamp forward when two commands finish
/// in the same millisecond, so neither overwrites the other.
fn create_log_file(workdir: &Path, logs_dir: &Path) -> Option<(PathBuf, tokio::fs::File)> {
    let base = unix_ms();
    for offset in 0..LOG_NAME_ATTEMPTS {
        let name = format!("shell-{}.log", base.saturating_add(offset));
        match create_log(workdir, logs_dir, &name) {
            Ok((path, file)) => return Some((path, tokio::fs::File::from_std(file))),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(_) => return None,
        }
    }
    None
}

/// Removes a log the host created, beneath the workdir: a folder on the way may since
/// have become a link. Best effort.
fn remove_log(workdir: &Path, path: &Path) {
    let workdir = std::path::absolute(workdir).unwrap_or_else(|_| workdir.to_path_buf());
    if let Ok(rel) = path.strip_prefix(&workdir) {
        let _ = crate::rooted::Rooted::open(&workdir)
            .and_then(|view| view.remove_file(&rel.to_string_lossy()));
    }
}

/// `$HOME` for the command, created beneath the workdir (a link there leading out is
/// refused rather than followed to make a folder elsewhere).
fn create_home(req: &ShellRequest) -> std::io::Result<()> {
    let inside = req.home.strip_prefix(&req.workdir).map_err(|_| {
        std::io::Error::other(format!(
            "it is not inside the workdir {}",
            req.workdir.display()
        ))
    })?;
    let view = crate::rooted::Rooted::open(&req.workdir)?;
    view.create_dir_all(&inside.to_string_lossy())?;
    // A confined command's TMPDIR is inside the workdir too.
    let tmp = req.env.iter().rev().find(|(k, _)| k == "TMPDIR");
    if let Some(inside) = tmp.and_then(|(_, v)| Path::new(v).strip_prefix(&req.workdir).ok()) {
        view.create_dir_all(&inside.to_string_lossy())?;
    }
    Ok(())
}

/// A new file `name` in `logs_dir`, created beneath `workdir` (never through a link that
/// leads out, never over anything already there), and its absolute path.
fn create_log(
    workdir: &Path,
    logs_dir: &Path,
    name: &str,
) -> std::io::Result<(PathBuf, std::fs::File)> {
    let inside = logs_dir.strip_prefix(workdir).map_err(|_| {
        std::io::Error::other(format!(
            "{} is not inside the workdir {}",
            logs_dir.display(),
            workdir.display()
        ))
    })?;
    let rel = inside.join(name);
    let file = crate::rooted::Rooted::open(workdir)?.create_new(&rel.to_string_lossy())?;
    let dir = std::path::absolute(logs_dir).unwrap_or_else(|_| logs_dir.to_path_buf());
    Ok((dir.join(name), file))
}

fn unix_ms() -> u64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    static DIR_SEQ: AtomicU64 = AtomicU64::new(0);

    /// Removes a test's scratch directory when the test ends, pass or fail.
    struct Scratch(PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A fresh, canonical scratch directory (canonical so `pwd` output compares equal).
    fn scratch_dir() -> Scratch {
        let seq = DIR_SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "mur-shell-test-{}-{}-{seq}",
            std::process::id(),
            unix_ms()
        ));
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Scratch(dir.canonicalize().expect("canonicalize scratch dir"))
    }

    fn host_path() -> String {
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_string())
    }

    fn request(binary: &str, command: &str) -> (Scratch, ShellRequest) {
        let scratch = scratch_dir();
        let root = scratch.0.clone();
        let workdir = root.join("work");
        std::fs::create_dir_all(&workdir).expect("create workdir");
        let req = ShellRequest {
            binary: binary.to_string(),
            command: command.to_string(),
            home: workdir.join(".capsule-home"),
            logs_dir: workdir.join("logs"),
            workdir,
            timeout: Duration::from_secs(20),
            env: vec![("PATH".to_string(), host_path())],
            jail: Arc::new(Jail::advisory(&root)),
            slots: Arc::new(Semaphore::new(8)),
        };
        (scratch, req)
    }

    async fn run_ok(req: &ShellRequest) -> ShellOutcome {
        run(req).await.expect("command should start")
    }

    /// A process counts as gone once it no longer exists or is a zombie nobody reaped yet
    /// (a container's pid 1 may never reap), since a zombie runs nothing.
    fn process_gone(pid: &str) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        }
    }

    async fn wait_gone(pids: &[String]) -> bool {
        for _ in 0..50 {
            if pids.iter().all(|pid| process_gone(pid)) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    async fn read_pids(path: &Path, expected: usize) -> Vec<String> {
        for _ in 0..100 {
            let pids: Vec<String> = std::fs::read_to_string(path)
                .unwrap_or_default()
                .lines()
                .map(str::to_string)
                .collect();
            if pids.len() >= expected {
                return pids;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("pid file {} never got {expected} lines", path.display());
    }

    #[test]
    fn schema_is_exact() {
        assert_eq!(
            input_schema(),
            r#"{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}"#
        );
        let parsed: serde_json::Value = serde_json::from_str(input_schema()).expect("valid JSON");
        assert_eq!(parsed["required"][0], "command");
    }

    #[test]
    fn parse_input_accepts_command() {
        assert_eq!(
            parse_input(r#"{"command":"echo hi"}"#),
            Ok("echo hi".to_string())
        );
    }

    #[test]
    fn parse_input_rejects_bad_json_with_exact_text() {
        let expected_err = serde_json::from_str::<serde_json::Value>("{not json")
            .expect_err("invalid")
            .to_string();
        assert_eq!(
            parse_input("{not json"),
            Err(format!(
                "shell tool input must be valid JSON: {expected_err}"
            ))
        );
        assert_eq!(
            parse_input("{not json"),
            Err(
                "shell tool input must be valid JSON: key must be a string at line 1 column 2"
                    .to_string()
            )
        );
    }

    #[test]
    fn parse_input_rejects_missing_blank_or_non_string_command() {
        let expected = Err(MISSING_COMMAND.to_string());
        assert_eq!(
            MISSING_COMMAND,
            "shell tool input must include a non-empty 'command' string"
        );
        for input in [
            "{}",
            r#"{"command":""}"#,
            r#"{"command":"  \n\t"}"#,
            r#"{"command":42}"#,
            r#"{"command":null}"#,
            r#"{"cmd":"ls"}"#,
            r#""ls""#,
            "[]",
        ] {
            assert_eq!(parse_input(input), expected, "input {input}");
        }
    }

    #[test]
    fn split_args_groups_quotes_and_escapes() {
        let cases: &[(&str, &[&str])] = &[
            ("", &[]),
            ("   ", &[]),
            ("-la /tmp", &["-la", "/tmp"]),
            ("  a \t b\nc  ", &["a", "b", "c"]),
            ("'a b' \"c d\"", &["a b", "c d"]),
            ("pre'mid dle'post", &["premid dlepost"]),
            ("'' \"\"", &["", ""]),
            (r"a\ b", &["a b"]),
            (r"\'x\'", &["'x'"]),
            (r#"'no \escape here'"#, &[r"no \escape here"]),
            (
                r#""q\"uote" "back\\slash" "keep\n""#,
                &["q\"uote", r"back\slash", r"keep\n"],
            ),
            ("'$HOME' \"$HOME\" *.rs", &["$HOME", "$HOME", "*.rs"]),
            ("\"it's\" 'say \"hi\"'", &["it's", "say \"hi\""]),
            ("ünï 'cödé 🚀'", &["ünï", "cödé 🚀"]),
        ];
        for (input, expected) in cases {
            let expected: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
            assert_eq!(split_args(input), Ok(expected), "input {input:?}");
        }
    }

    #[test]
    fn split_args_rejects_unterminated_input() {
        assert_eq!(
            split_args("'open"),
            Err("unterminated single quote in command".to_string())
        );
        assert_eq!(
            split_args("a \"open"),
            Err("unterminated double quote in command".to_string())
        );
        assert_eq!(
            split_args("\"ends in escape\\"),
            Err("unterminated double quote in command".to_string())
        );
        assert_eq!(
            split_args("trailing\\"),
            Err("trailing backslash in command".to_string())
        );
    }

    #[test]
    fn resolve_binary_finds_absolute_path() {
        let resolved = resolve_binary("sh", &host_path());
        assert!(resolved.starts_with('/'), "{resolved}");
        assert!(resolved.ends_with("/sh"), "{resolved}");
        assert_eq!(resolve_binary("sh", "relative/dir::/nonexistent"), "sh");
        assert_eq!(
            resolve_binary("no-such-binary-mur", &host_path()),
            "no-such-binary-mur"
        );
        assert_eq!(resolve_binary("/bin/sh", ""), "/bin/sh");
    }

    #[test]
    fn resolve_binary_skips_non_executable_files() {
        let scratch = scratch_dir();
        let dir = &scratch.0;
        let file = dir.join("tool");
        std::fs::write(&file, "#!/bin/sh\n").expect("write");
        let path_env = dir.to_string_lossy().into_owned();
        assert_eq!(resolve_binary("tool", &path_env), "tool");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert_eq!(resolve_binary("tool", &path_env), file.to_string_lossy());
    }

    #[test]
    fn interpreters_are_recognised_by_file_name() {
        for name in INTERPRETERS {
            assert!(is_interpreter(name));
        }
        assert!(is_interpreter("/usr/bin/bash"));
        assert!(!is_interpreter("ls"));
        assert!(!is_interpreter("bash5"));
    }

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
    async fn signal_death_is_128_plus_signal() {
        let outcome = run_ok(&request("bash", "kill -TERM $$").1).await;
        assert_eq!(outcome.exit_code, 128 + libc::SIGTERM);
        assert!(!outcome.timed_out);
    }

    #[tokio::test]
    async fn non_interpreter_args_are_split() {
        let (_scratch, req) = request("ls", "-1 \"a b\" 'c'");
        std::fs::write(req.workdir.join("a b"), "").expect("write");
        std::fs::write(req.workdir.join("c"), "").expect("write");
        std::fs::write(req.workdir.join("a"), "").expect("write");
        let outcome = run_ok(&req).await;
        assert_eq!(
            outcome.text,
            "$ ls -1 \"a b\" 'c'\nExit code: 0\nStdout:\na b\nc\n\nStderr:\n"
        );
        assert!(outcome.resolved_binary.ends_with("/ls"));
    }

    #[tokio::test]
    async fn non_interpreter_with_bad_quotes_errors() {
        assert_eq!(
            run(&request("ls", "'open").1).await,
            Err("unterminated single quote in command".to_string())
        );
    }

    #[tokio::test]
    async fn large_output_is_truncated_and_logged() {
        let command = "head -c 102400 /dev/zero | tr '\\0' a; echo tail >&2";
        let (_scratch, req) = request("bash", command);
        let outcome = run_ok(&req).await;
        assert!(outcome.truncated);
        assert_eq!(outcome.stdout_bytes, 102_400);
        assert_eq!(outcome.stderr_bytes, 5);
        let log_path = outcome.log_path.clone().expect("log written");
        assert!(log_path.is_absolute());
        assert_eq!(log_path.parent(), Some(req.logs_dir.as_path()));
        let name = log_path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let stamp = name
            .strip_prefix("shell-")
            .and_then(|rest| rest.strip_suffix(".log"))
            .expect("shell-<ms>.log");
        assert!(stamp.parse::<u64>().is_ok(), "{name}");

        let log = std::fs::read(&log_path).expect("read log");
        let mut expected = format!("Command: {command}\nExit code: 0\n\nStdout:\n").into_bytes();
        expected.extend(std::iter::repeat_n(b'a', 102_400));
        expected.extend_from_slice(b"\n\nStderr:\ntail\n\n");
        assert!(log == expected, "log content differs ({} bytes)", log.len());

        let head = "a".repeat(STREAM_CAP);
        let expected_text = format!(
            "$ {command}\nExit code: 0\nStdout:\n{head}\nStderr:\ntail\n\n\nOutput truncated. Full output written to {}",
            log_path.display()
        );
        assert_eq!(outcome.text, expected_text);

        let leftovers: Vec<_> = std::fs::read_dir(&req.logs_dir)
            .expect("logs dir")
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect();
        assert_eq!(
            leftovers.len(),
            1,
            "temp spill files removed: {leftovers:?}"
        );
    }

    #[tokio::test]
    async fn exactly_cap_bytes_is_not_truncated() {
        let outcome = run_ok(&request("bash", "head -c 16384 /dev/zero").1).await;
        assert!(!outcome.truncated);
        assert_eq!(outcome.stdout_bytes, 16_384);
        assert_eq!(outcome.log_path, None);
    }

    #[tokio::test]
    async fn both_streams_large_do_not_deadlock() {
        // Writing all of stderr before any stdout blocks forever if the pipes were read in turn.
        let command = "head -c 1048576 /dev/zero >&2; head -c 1048576 /dev/zero";
        let (_scratch, req) = request("bash", command);
        let outcome = run_ok(&req).await;
        assert_eq!(outcome.stdout_bytes, 1_048_576);
        assert_eq!(outcome.stderr_bytes, 1_048_576);
        assert!(outcome.truncated);
        let log = std::fs::metadata(outcome.log_path.expect("log")).expect("stat");
        let header = format!("Command: {command}\nExit code: 0\n\nStdout:\n").len() as u64;
        assert_eq!(
            log.len(),
            header + 2 * 1_048_576 + "\n\nStderr:\n\n".len() as u64
        );
    }

    #[tokio::test]
    async fn truncation_without_log_says_so() {
        let (_scratch, mut req) = request("bash", "head -c 20000 /dev/zero");
        let blocker = req.logs_dir.clone();
        // A regular file where the logs dir should be makes every log write fail.
        std::fs::write(&blocker, "").expect("write blocker");
        req.logs_dir = blocker.join("logs");
        let outcome = run_ok(&req).await;
        assert!(outcome.truncated);
        assert_eq!(outcome.log_path, None);
        assert!(outcome.text.ends_with("\nStderr:\n\n\nOutput truncated."));
    }

    #[tokio::test]
    async fn invalid_utf8_is_decoded_lossily() {
        let outcome = run_ok(&request("bash", "printf 'a\\377b'").1).await;
        assert!(outcome.text.contains("Stdout:\na\u{FFFD}b\nStderr:"));
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
    async fn env_is_only_what_was_passed_plus_home() {
        let (_scratch, mut req) = request("env", "");
        req.env
            .push(("MUR_TEST_VAR".to_string(), "x y".to_string()));
        req.env
            .push(("HOME".to_string(), "/overridden".to_string()));
        let outcome = run_ok(&req).await;
        let stdout = outcome
            .text
            .strip_prefix("$ env \nExit code: 0\nStdout:\n")
            .and_then(|rest| rest.strip_suffix("\nStderr:\n"))
            .expect("shape");
        let mut lines: Vec<&str> = stdout.lines().collect();
        lines.sort_unstable();
        let home = format!("HOME={}", req.home.display());
        let path = format!("PATH={}", host_path());
        let mut expected = vec![home.as_str(), "MUR_TEST_VAR=x y", path.as_str()];
        expected.sort_unstable();
        assert_eq!(lines, expected);
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

    #[tokio::test]
    async fn missing_binary_errors() {
        let result = run(&request("no-such-binary-mur", "--help").1).await;
        assert_eq!(
            result,
            Err("failed to start 'no-such-binary-mur': not found on PATH".to_string())
        );
    }

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
    async fn a_command_inside_its_grace_period_stays_in_the_foreground() {
        let (_scratch, req) = request("bash", "echo hi");
        match run_with_grace(&req, Some(Duration::from_secs(10))).await {
            Ok(Ran::Done(outcome)) => assert_eq!(outcome.exit_code, 0),
            _ => panic!("should have finished in the foreground"),
        }
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

    #[tokio::test]
    async fn missing_workdir_errors() {
        let (_scratch, mut req) = request("bash", "true");
        req.workdir = req.workdir.join("does-not-exist");
        req.home = req.workdir.join(".capsule-home");
        let err = run(&req).await.expect_err("spawn must fail");
        assert!(err.starts_with("failed to create home '"), "{err}");
        assert!(
            err.ends_with("No such file or directory (os error 2)"),
            "{err}"
        );
    }
}
