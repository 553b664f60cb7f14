//! Scratch capsules: a check writes a capsule (manifest, script, workdir files) into a
//! temporary directory and runs this same `mur` on it, as a user would, under a
//! wall-clock limit that kills the process: a component that hangs or spins cannot
//! hang the check. What a scenario judges is what a user sees: the exit status, the
//! `--json` launch line, the session's trace and files, the frames over HTTP.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::report::{Outcome, fail, skip};

/// Set to keep the scratch capsules of a check (to read them after a failure).
pub const KEEP_ENV: &str = "MUR_CHECK_KEEP";

/// A capsule directory that is removed when dropped (unless [`KEEP_ENV`] is set).
pub struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    /// A fresh, empty directory for the scenario `label`.
    pub fn new(label: &str) -> Result<Scratch, Outcome> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let safe: String = label
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let dir = std::env::temp_dir().join(format!("mur-check-{}-{n}-{safe}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| skip(format!("could not make {}: {e}", dir.display())))?;
        Ok(Scratch { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes `bytes` at `rel` (made by the check, never by a component, so plain
    /// std::fs is safe here).
    pub fn write(&self, rel: &str, bytes: impl AsRef<[u8]>) -> Result<PathBuf, Outcome> {
        let path = self.dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| skip(format!("could not make {}: {e}", parent.display())))?;
        }
        std::fs::write(&path, bytes)
            .map_err(|e| skip(format!("could not write {}: {e}", path.display())))?;
        Ok(path)
    }

    /// Writes `murmur.yaml`.
    pub fn manifest(&self, yaml: &str) -> Result<PathBuf, Outcome> {
        self.write("murmur.yaml", yaml)
    }

    /// Writes `script.yaml`, the scripted driver's turns (name it in the manifest as
    /// `script: ./script.yaml`).
    pub fn script(&self, yaml: &str) -> Result<PathBuf, Outcome> {
        self.write("script.yaml", yaml)
    }

    /// `mur run --json --port 0 --manifest <dir>/murmur.yaml <args>` to its exit,
    /// killed at `limit`.
    pub fn run(&self, args: &[&str], env: &[(&str, &str)], limit: Duration) -> Finished {
        match self
            .command(args, env)
            .and_then(|cmd| Child2::spawn(cmd, limit))
        {
            Ok(child) => child.finish(),
            Err(outcome) => Finished::not_started(outcome),
        }
    }

    /// Like [`Scratch::run`], but returns once the launch line is out: for a capsule
    /// that takes tasks over HTTP (`--lifecycle-task-acceptance queue`). It is killed
    /// at `limit` after it started, or when dropped.
    pub fn spawn(
        &self,
        args: &[&str],
        env: &[(&str, &str)],
        limit: Duration,
    ) -> Result<Served, Outcome> {
        let mut child = Child2::spawn(self.command(args, env)?, limit)?;
        let line = child.launch_line(limit)?;
        let launch = Launch::parse(&line)
            .ok_or_else(|| fail(format!("mur printed no launch line: {line:?}")))?;
        Ok(Served {
            child: Some(child),
            launch,
        })
    }

    fn command(&self, args: &[&str], env: &[(&str, &str)]) -> Result<Command, Outcome> {
        let exe = std::env::current_exe()
            .map_err(|e| skip(format!("cannot find this mur binary: {e}")))?;
        let mut cmd = Command::new(exe);
        cmd.args(["run", "--json", "--port", "0", "--manifest"])
            .arg(self.dir.join("murmur.yaml"))
            .args(args)
            // Records of a run with --workdir stay in the scratch directory.
            .env("MURMUR_HOME", self.dir.join(".home"))
            .envs(env.iter().copied())
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        die_with_the_check(&mut cmd);
        Ok(cmd)
    }
}

/// A check killed outright (Ctrl-C twice, a CI timeout) takes its capsules with it:
/// each is SIGKILLed when the thread that started it ends.
fn die_with_the_check(cmd: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: between fork and exec only async-signal-safe calls are allowed;
        // prctl is one, and nothing here allocates.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::env::var_os(KEEP_ENV).is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A `mur` process with a watchdog that SIGKILLs it at its limit.
struct Child2 {
    child: Child,
    deadline: Instant,
    stdout: Option<mpsc::Receiver<String>>,
    stdout_rest: Option<Pipe>,
    stderr: Option<Pipe>,
}

/// A pipe read to its end on a thread of its own. A process the capsule left behind
/// (a shell command of a killed `mur`) may hold it open, so what was read is taken
/// with a bound rather than by joining the thread.
struct Pipe(mpsc::Receiver<String>);

impl Pipe {
    fn text(self) -> String {
        self.0
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or_default()
    }
}

impl Child2 {
    fn spawn(mut cmd: Command, limit: Duration) -> Result<Child2, Outcome> {
        let mut child = cmd
            .spawn()
            .map_err(|e| skip(format!("could not start mur: {e}")))?;
        let stderr = child.stderr.take().map(drain);
        // stdout line by line: the launch line comes first, the rest is kept.
        let (lines, rx) = mpsc::channel();
        let stdout_rest = child.stdout.take().map(|out| {
            let (done, text) = mpsc::channel();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(out);
                let mut first = String::new();
                let _ = reader.read_line(&mut first);
                let _ = lines.send(first.clone());
                let mut rest = Vec::new();
                let mut capped = reader.take(OUTPUT_CAP);
                let _ = capped.read_to_end(&mut rest);
                let _ = std::io::copy(&mut capped.into_inner(), &mut std::io::sink());
                let _ = done.send(first + &String::from_utf8_lossy(&rest));
            });
            Pipe(text)
        });
        Ok(Child2 {
            child,
            deadline: Instant::now() + limit,
            stdout: Some(rx),
            stdout_rest,
            stderr,
        })
    }

    fn launch_line(&mut self, limit: Duration) -> Result<String, Outcome> {
        let Some(rx) = self.stdout.take() else {
            return Err(fail("the launch line was already read"));
        };
        match rx.recv_timeout(limit) {
            Ok(line) if !line.trim().is_empty() => Ok(line),
            _ => {
                self.kill();
                let stderr = self.stderr.take().map(Pipe::text).unwrap_or_default();
                Err(fail(format!(
                    "mur printed no launch line: {}",
                    first_error(&stderr)
                )))
            }
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the exit, killing the process at its deadline.
    fn finish(mut self) -> Finished {
        let mut timed_out = false;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status.code(),
                Ok(None) if Instant::now() >= self.deadline => {
                    timed_out = true;
                    self.kill();
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(_) => {
                    self.kill();
                    break None;
                }
            }
        };
        let stdout = self.stdout_rest.take().map(Pipe::text).unwrap_or_default();
        let stderr = self.stderr.take().map(Pipe::text).unwrap_or_default();
        let launch = stdout.lines().next().and_then(Launch::parse);
        Finished {
            status,
            timed_out,
            stdout,
            stderr,
            launch,
            not_started: None,
        }
    }
}

impl Drop for Child2 {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill();
        }
    }
}

/// What a check keeps of a capsule's stdout or stderr: enough for its error line,
/// bounded against a component that floods it.
const OUTPUT_CAP: u64 = 1 << 20;

fn drain(pipe: impl Read + Send + 'static) -> Pipe {
    let (done, text) = mpsc::channel();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let mut pipe = pipe.take(OUTPUT_CAP);
        let _ = pipe.read_to_end(&mut bytes);
        // Read on past the cap, so the process never blocks on a full pipe.
        let _ = std::io::copy(&mut pipe.into_inner(), &mut std::io::sink());
        let _ = done.send(String::from_utf8_lossy(&bytes).into_owned());
    });
    Pipe(text)
}

/// The `error[...]` line of what mur wrote to stderr, else its last line.
pub fn first_error(stderr: &str) -> String {
    let mut lines = stderr.lines();
    match lines.clone().position(|l| l.starts_with("error[")) {
        Some(i) => {
            let mut text = lines.nth(i).unwrap_or_default().to_string();
            if let Some(hint) = stderr
                .lines()
                .nth(i + 1)
                .filter(|l| l.trim_start().starts_with("hint:"))
            {
                text.push(' ');
                text.push_str(hint.trim());
            }
            text
        }
        None => stderr
            .lines()
            .last()
            .unwrap_or("(nothing on stderr)")
            .to_string(),
    }
}

/// A `mur run` that ended (or was killed).
#[derive(Debug)]
pub struct Finished {
    /// The exit code; `None` when it was killed (at its limit or by a signal).
    pub status: Option<i32>,
    /// Killed at its wall-clock limit.
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
    /// The `--json` launch line, when it printed one.
    pub launch: Option<Launch>,
    not_started: Option<Outcome>,
}

impl Finished {
    fn not_started(outcome: Outcome) -> Finished {
        Finished {
            status: None,
            timed_out: false,
            stdout: String::new(),
            stderr: String::new(),
            launch: None,
            not_started: Some(outcome),
        }
    }

    /// The launch line, or the outcome that says why there is none (a hang, a start
    /// refused with its `error[...]`).
    pub fn launched(&self) -> Result<&Launch, Outcome> {
        if let Some(outcome) = &self.not_started {
            return Err(outcome.clone());
        }
        if self.timed_out && self.launch.is_none() {
            return Err(fail("mur did not start within the scenario's limit"));
        }
        self.launch.as_ref().ok_or_else(|| {
            fail(format!(
                "mur did not start the capsule: {}",
                first_error(&self.stderr)
            ))
        })
    }

    /// Exited 0 within its limit, else a failure saying how it ended.
    pub fn ok(&self) -> Result<&Launch, Outcome> {
        let launch = self.launched()?;
        match (self.timed_out, self.status) {
            (true, _) => Err(fail(
                "the capsule did not finish within the scenario's limit",
            )),
            (false, Some(0)) => Ok(launch),
            (false, Some(code)) => Err(fail(format!(
                "the capsule exited {code}: {}",
                first_error(&self.stderr)
            ))),
            (false, None) => Err(fail("the capsule was killed by a signal")),
        }
    }
}

/// The `--json` launch line of a capsule: where its session lives.
#[derive(Debug, Clone)]
pub struct Launch {
    pub session_id: String,
    /// `127.0.0.1:PORT`.
    pub address: String,
    /// What the capsule's tools see.
    pub workdir: PathBuf,
    /// The host's records: trace.jsonl, logs/.
    pub records: PathBuf,
    pub raw: Value,
}

impl Launch {
    fn parse(line: &str) -> Option<Launch> {
        let raw: Value = serde_json::from_str(line.trim()).ok()?;
        Some(Launch {
            session_id: raw["session_id"].as_str()?.to_string(),
            address: raw["address"]
                .as_str()?
                .trim_start_matches("http://")
                .to_string(),
            workdir: PathBuf::from(raw["workdir"].as_str()?),
            records: PathBuf::from(raw["records_dir"].as_str()?),
            raw,
        })
    }

    /// Every event of the session's trace; lines that are not JSON are left out (a
    /// trace cut short by a kill ends in half a line).
    pub fn trace(&self) -> Vec<Value> {
        std::fs::read_to_string(self.records.join("trace.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The trace's events of `event_type`.
    pub fn events(&self, kind: &str) -> Vec<Value> {
        self.trace()
            .into_iter()
            .filter(|e| e["event_type"] == kind)
            .collect()
    }

    /// A file of the workdir as text, if it is there: read beneath the workdir, never
    /// through a link the component planted, and at most 1 MiB of it.
    pub fn read(&self, rel: &str) -> Option<String> {
        let root = crate::rooted::Rooted::open(&self.workdir).ok()?;
        let (bytes, _) = root.read_bounded(rel, 1 << 20).ok()?;
        Some(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// A capsule that serves its address until stopped; killed when dropped.
pub struct Served {
    child: Option<Child2>,
    pub launch: Launch,
}

impl Served {
    /// POSTs a JSON-RPC body to `/` and returns the whole reply (head and body, an
    /// event stream read to its close), or a failure after `limit`.
    pub fn rpc(&self, body: &Value, limit: Duration) -> Result<String, Outcome> {
        post(&self.launch.address, "/", &body.to_string(), limit)
    }

    /// `message/stream` with `text` (in `context`, when given): the task's frames,
    /// as `(event, data)`, to the end of the stream.
    pub fn send(
        &self,
        id: u64,
        text: &str,
        context: Option<&str>,
        limit: Duration,
    ) -> Result<Vec<(String, Value)>, Outcome> {
        let mut message = serde_json::json!({
            "messageId": format!("check-{id}"), "role": "user", "parts": [{"text": text}]
        });
        if let Some(context) = context {
            message["contextId"] = context.into();
        }
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": id, "method": "message/stream",
            "params": {"message": message}
        });
        let raw = self.rpc(&body, limit)?;
        let (_, body) = raw
            .split_once("\r\n\r\n")
            .ok_or_else(|| fail(format!("the capsule's reply had no HTTP head: {raw:.200}")))?;
        Ok(frames(body))
    }

    /// `murmur/stop`, then the exit (killed at the capsule's limit).
    pub fn stop(self, limit: Duration) -> Finished {
        let body =
            serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "murmur/stop", "params": {}});
        let _ = self.rpc(&body, limit);
        self.finish()
    }

    /// Waits for the exit (killed at the capsule's limit).
    pub fn finish(mut self) -> Finished {
        let Some(child) = self.child.take() else {
            return Finished::not_started(fail("the capsule was already finished"));
        };
        let mut finished = child.finish();
        // The launch line was read before; keep it.
        finished.launch = Some(self.launch.clone());
        finished
    }
}

/// One HTTP/1.1 POST on a fresh connection, read to its close.
pub fn post(address: &str, path: &str, body: &str, limit: Duration) -> Result<String, Outcome> {
    let mut stream = TcpStream::connect(address).map_err(|e| {
        fail(format!(
            "could not connect to the capsule at {address}: {e}"
        ))
    })?;
    let _ = stream.set_read_timeout(Some(limit));
    let _ = stream.set_write_timeout(Some(limit));
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| fail(format!("could not send to the capsule: {e}")))?;
    // One deadline for the whole reply: a stream that trickles forever is cut at it.
    let until = Instant::now() + limit;
    let mut bytes = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || bytes.len() as u64 > REPLY_CAP {
            return Err(fail(format!(
                "the capsule's reply did not end within {limit:?} (or passed {REPLY_CAP} bytes)"
            )));
        }
        let _ = stream.set_read_timeout(Some(left));
        match stream.read(&mut buf) {
            Ok(0) => return Ok(String::from_utf8_lossy(&bytes).into_owned()),
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) => {
                return Err(fail(format!(
                    "the capsule's reply did not end within {limit:?}: {e}"
                )));
            }
        }
    }
}

/// The most of one reply a check reads.
const REPLY_CAP: u64 = 64 << 20;

/// The frames of a server-sent event stream, as `(event, data)`, read with the
/// host's own frame reader; a frame whose data is not JSON is left out.
pub fn frames(body: &str) -> Vec<(String, Value)> {
    crate::sse::FrameReader::default()
        .feed(body.as_bytes())
        .into_iter()
        .filter_map(|e| Some((e.event, serde_json::from_str(&e.data).ok()?)))
        .collect()
}

/// A path as a YAML double-quoted string, for a scratch manifest.
pub fn yaml_str(path: &Path) -> String {
    serde_json::json!(path.display().to_string()).to_string()
}
