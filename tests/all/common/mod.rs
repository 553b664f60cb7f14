//! Shared helpers for the end-to-end tests: a capsule in a temporary directory, the
//! real `mur` binary, and readers for what it leaves behind.

pub mod browser;
pub mod harness;
pub mod host;
pub mod mcp_sdk;
pub mod mcp_servers;
pub mod mock_model;
pub mod mock_responses;
pub mod otel_client;
pub mod phoenix;
pub mod registry;
pub mod sdk;
pub mod served;
pub mod sse_frames;
mod watch;

pub use watch::Watch;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use serde_json::Value;

pub const MUR: &str = env!("CARGO_BIN_EXE_mur");

// Every guest of the workspace, as `MUR_TOOL_PROBE` and so on, and `for_each_guest!`.
include!(concat!(env!("OUT_DIR"), "/guests.rs"));

/// Where the build put the guest components (test fixtures among them); `name` is one of
/// the constants above.
pub fn guest(name: &str) -> PathBuf {
    Path::new(env!("MUR_GUEST_DIR")).join(format!("{name}.wasm"))
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A fresh directory under the target dir (kept for inspection after a failure).
pub fn scratch(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    let dir = repo()
        .join("target")
        .join("e2e")
        .join(format!("{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The line that makes a script play once across the session rather than per task.
pub const SPAN_SESSION: &str = "span: session\n";

/// A capsule directory: `murmur.yaml`, `script.yaml` and any other files.
pub struct Capsule {
    pub dir: PathBuf,
}

impl Capsule {
    /// `script` (the scripted driver's turns) plays across the session, as the tests'
    /// scripts are written: each task goes on with the next turns.
    pub fn new(name: &str, manifest: &str, script: &str) -> Self {
        let dir = scratch(name);
        std::fs::write(dir.join("murmur.yaml"), manifest).unwrap();
        std::fs::write(dir.join("script.yaml"), format!("{SPAN_SESSION}{script}")).unwrap();
        Capsule { dir }
    }

    pub fn file(&self, rel: &str, text: &str) -> &Self {
        let path = self.dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        self
    }

    pub fn manifest(&self) -> PathBuf {
        self.dir.join("murmur.yaml")
    }

    /// `mur run --manifest <this> --json --port 0 <args>`, to completion (bounded).
    pub fn run(&self, args: &[&str]) -> Run {
        let mut cmd = mur();
        cmd.args(["run", "--json", "--port", "0", "--manifest"])
            .arg(self.manifest())
            .args(args);
        finish(&mut cmd)
    }

    /// Like `spawn`, with extra environment variables for the `mur` process.
    pub fn spawn_env(&self, args: &[&str], env: &[(&str, &str)]) -> Running {
        let mut cmd = mur();
        cmd.args(["run", "--json", "--port", "0", "--manifest"])
            .arg(self.manifest())
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Running::start(cmd)
    }

    pub fn spawn(&self, args: &[&str]) -> Running {
        let mut cmd = mur();
        cmd.args(["run", "--json", "--port", "0", "--manifest"])
            .arg(self.manifest())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Running::start(cmd)
    }
}

/// A capsule whose driver is the probe driver (`components/driver-probe`) in `mode`,
/// with a 1 s deadline and the variable `MUR_TEST_GRANTED` granted.
pub fn probe_driver(name: &str, mode: &str) -> Capsule {
    let manifest = driver_manifest(
        "probe-driver",
        "probe-driver",
        MUR_DRIVER_PROBE,
        &format!("{{mode: {mode}}}"),
        "  env:\n    allow: [MUR_TEST_GRANTED]\n  limits:\n    deadline_seconds: 1\n",
        "  task_acceptance: none\n",
    );
    Capsule::new(name, &manifest, "")
}

/// A manifest whose driver is the guest `driver` (`MUR_DRIVER_PROBE`, ...) as the
/// artifact `artifact`, with `config`, an endpoint that cannot resolve and the network
/// grant to it; `capabilities` and `lifecycle` are the further lines of those blocks,
/// as written.
pub fn driver_manifest(
    name: &str,
    artifact: &str,
    driver: &str,
    config: &str,
    capabilities: &str,
    lifecycle: &str,
) -> String {
    format!(
        r#"name: {name}
version: "0.1.0"
artifacts:
  - name: {artifact}
    runtime: driver
    source: {source}
inference:
  driver:
    artifact: {artifact}
    config: {config}
  endpoint: https://models.invalid/v1
  model: m
capabilities:
  network:
    allow: [https://models.invalid]
{capabilities}lifecycle:
{lifecycle}"#,
        source = guest(driver).display(),
    )
}

/// A manifest for the hostile session loop (`components/loop-hostile`) under the
/// scripted driver, its mode read from `MUR_HOSTILE` (granted), under a deadline of
/// `deadline` seconds; `artifacts` is its `artifacts:` block, if any (`mur run --loop`
/// can name the loop instead).
pub fn hostile_loop_manifest(name: &str, artifacts: &str, script: &str, deadline: u64) -> String {
    format!(
        r#"name: {name}
version: "0.1.0"
{artifacts}inference:
  driver: scripted
  script: {script}
  model: scripted-test
capabilities:
  env:
    allow: [MUR_HOSTILE]
  limits:
    deadline_seconds: {deadline}
"#
    )
}

/// A scripted turn that runs `command` with the bash tool.
pub fn bash_turn(command: &str) -> String {
    format!(
        "  - tool_calls: [{{id: t1, name: bash, input: {{command: {}}}}}]\n",
        serde_json::json!(command)
    )
}

/// A scripted turn that answers `text`.
pub fn text_turn(text: &str) -> String {
    format!("  - text: {}\n", serde_json::json!(text))
}

/// Whether `id` is `prefix` and then `hex` lowercase hex digits, as mur mints ids and
/// tokens.
pub fn is_minted(id: &str, prefix: &str, hex: usize) -> bool {
    id.strip_prefix(prefix).is_some_and(|rest| {
        rest.len() == hex
            && rest
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// The host pids of live processes with `marker` as one of their arguments. A confined
/// command runs in a PID namespace of its own, so the pid it sees (`$$`) is not one the
/// test can use; a unique argument (`sleep 30.<marker>`) finds it from outside.
pub fn pids_running(marker: &str) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat
                .rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z'));
            let args = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            !zombie && args.split(|b| *b == 0).any(|a| a == marker.as_bytes())
        })
        .collect()
}

/// SIGKILLs what [`pids_running`] finds: the cleanup of a test that failed midway.
pub fn kill_running(marker: &str) {
    for pid in pids_running(marker) {
        // SAFETY: kill takes plain integers; the pid runs the test's own marker.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

/// Kills what a test started under a marker if the test fails before it is gone.
pub struct KillOnDrop(pub String);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        kill_running(&self.0);
    }
}

/// A marker no other test's process carries: `<number>.<test pid><n>`.
pub fn marker(seconds: u32) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{seconds}.{}{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// The flags that keep a capsule serving after its task (`queue` + `sleep`).
pub const QUEUE: &[&str] = &[
    "--lifecycle-task-acceptance",
    "queue",
    "--lifecycle-after-task",
    "sleep",
];

/// The body of a whole plain-JSON answer, after checking its head to the byte: `200`,
/// JSON, its length, and the connection closed after it.
pub fn json_body(reply: &str) -> &str {
    let (head, body) = reply
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no head: {reply:?}"));
    assert_eq!(
        head,
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close",
            body.len()
        )
    );
    body
}

/// The exact head of every event-stream response.
pub const SSE_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: keep-alive\r\n\r\n";

/// How long any `mur` a test starts may run, and any wait for its output may take:
/// far above what a test needs, so that only a hang reaches it, and then fails the
/// test instead of hanging CI.
pub const LIMIT: Duration = Duration::from_secs(180);

/// Polls `check` until it holds, for at most `within`; the test fails naming `what`
/// otherwise.
pub fn eventually(within: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let until = Instant::now() + within;
    while !check() {
        assert!(Instant::now() < until, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `cmd` to its exit, at most [`LIMIT`]: the bounded form of `Command::output`.
pub fn finish(cmd: &mut Command) -> Run {
    finish_within(cmd, LIMIT)
}

/// [`finish`] with another bound; a process still running at `limit` is killed and
/// the test fails.
pub fn finish_within(cmd: &mut Command, limit: Duration) -> Run {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mur starts");
    let stdout = drain(child.stdout.take().unwrap());
    let stderr = drain(child.stderr.take().unwrap());
    let status = wait_bounded(&mut child, limit);
    Run {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

/// Reads a pipe to its end on a thread of its own, so neither pipe can fill and stall
/// the process while the other is read.
fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// The exit code of `child`, which must exit within `limit`; otherwise it is killed
/// and the test fails. A watchdog waits beside it, so the exit is seen the moment it
/// happens rather than at the next poll.
pub fn wait_bounded(child: &mut Child, limit: Duration) -> i32 {
    let pid = child.id() as libc::pid_t;
    let (exited, watch) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        let hung = watch.recv_timeout(limit) == Err(RecvTimeoutError::Timeout);
        if hung {
            // SAFETY: kill only sends a signal, to a child that has not exited (else
            // the wait below would have returned and said so), so not reaped either.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        hung
    });
    let status = child.wait().unwrap();
    let _ = exited.send(());
    if watchdog.join().unwrap() {
        panic!("the process did not exit within {limit:?}");
    }
    status.code().unwrap_or(-1)
}

/// The JSON lines of a file a finished process wrote (the trace, a hook's events): a
/// missing file or a line that is not JSON fails the test, so a check that something
/// is absent cannot pass on a trace that is corrupt or was never written.
pub fn json_lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .enumerate()
        .map(|(n, line)| {
            serde_json::from_str(line).unwrap_or_else(|e| {
                panic!("{}:{}: not JSON ({e}): {line:?}", path.display(), n + 1)
            })
        })
        .collect()
}

/// The JSON lines a running process has written so far: the file may not exist yet
/// and its last line may be half written, but every finished line must be JSON.
pub fn json_lines_so_far(path: &Path) -> Vec<Value> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let finished = text.rsplit_once('\n').map_or("", |(done, _)| done);
    finished
        .lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}: not JSON ({e}): {line:?}", path.display()))
        })
        .collect()
}

/// A log file a finished process wrote; a missing one fails the test.
pub fn log_file(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The binary with a shared component cache, so tests compile each component once.
pub fn mur() -> Command {
    let mut cmd = Command::new(MUR);
    cmd.env("MUR_CACHE_DIR", repo().join("target").join("e2e-cache"));
    cmd.env("MURMUR_A2A_TIMEOUT_SECS", "5");
    // Records of runs with --workdir and no --records go here, never to ~/.murmur.
    cmd.env("MURMUR_HOME", repo().join("target").join("e2e-home"));
    cmd
}

pub struct Run {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(out: Output) -> Self {
        Run {
            status: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Run {
    /// The launch line of `--json`.
    pub fn launch(&self) -> Value {
        let line = self
            .stdout
            .lines()
            .next()
            .unwrap_or_else(|| panic!("no launch line; stderr:\n{}", self.stderr));
        serde_json::from_str(line).unwrap()
    }

    pub fn session(&self) -> Session {
        Session::from_launch(&self.launch())
    }

    /// Exit status 1, and stderr starting with `prefix` (an `error[E-...]` line).
    pub fn assert_error(&self, prefix: &str) -> &Self {
        assert_eq!(
            self.status, 1,
            "stdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        assert!(
            self.stderr.starts_with(prefix),
            "expected {prefix:?}, stderr:\n{}",
            self.stderr
        );
        self
    }

    pub fn assert_ok(&self) -> &Self {
        assert_eq!(
            self.status, 0,
            "stdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }
}

/// What a session left in its workdir.
#[derive(Clone, Debug)]
pub struct Session {
    pub id: String,
    /// What the capsule sees.
    pub workdir: PathBuf,
    /// The host's records of the session, outside the capsule's view.
    pub records: PathBuf,
}

impl Session {
    pub fn from_launch(launch: &Value) -> Self {
        Session {
            id: launch["session_id"].as_str().unwrap().to_string(),
            workdir: PathBuf::from(launch["workdir"].as_str().unwrap()),
            records: PathBuf::from(launch["records_dir"].as_str().unwrap()),
        }
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.workdir.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }

    /// A file of the host's own records (the trace, `logs/`): kept apart from what the
    /// capsule sees, so tests name them through this and never by joining paths.
    pub fn record(&self, rel: &str) -> String {
        std::fs::read_to_string(self.records.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }

    /// The trace of a session whose process has exited: strict, see [`json_lines`].
    pub fn trace(&self) -> Vec<Value> {
        json_lines(&self.records.join("trace.jsonl"))
    }

    /// The trace while the session runs: see [`json_lines_so_far`].
    pub fn trace_so_far(&self) -> Vec<Value> {
        json_lines_so_far(&self.records.join("trace.jsonl"))
    }

    /// [`Session::events`] while the session runs: its last line may be half written.
    pub fn events_so_far(&self, kind: &str) -> Vec<Value> {
        self.trace_so_far()
            .into_iter()
            .filter(|e| e["event_type"] == kind)
            .collect()
    }

    pub fn events(&self, kind: &str) -> Vec<Value> {
        self.trace()
            .into_iter()
            .filter(|e| e["event_type"] == kind)
            .collect()
    }
}

/// A capsule running in the background.
pub struct Running {
    pub child: Child,
    pub launch: Value,
    pub address: String,
}

impl Running {
    /// A `mur` command already given its arguments and piped stdout and stderr.
    pub fn start_command(cmd: Command) -> Self {
        Self::start(cmd)
    }

    fn start(mut cmd: Command) -> Self {
        let mut child = cmd.spawn().expect("mur starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let Ok(line) = rx.recv_timeout(LIMIT) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("mur printed no launch line within {LIMIT:?}");
        };
        if line.is_empty() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("mur printed no launch line; stderr:\n{err}");
        }
        let launch: Value = serde_json::from_str(&line).unwrap();
        let address = launch["address"]
            .as_str()
            .unwrap()
            .trim_start_matches("http://")
            .to_string();
        Running {
            child,
            launch,
            address,
        }
    }

    pub fn session(&self) -> Session {
        Session::from_launch(&self.launch)
    }

    /// Waits for the process, with a bound so a hang fails the test instead of CI.
    pub fn wait(mut self, limit: Duration) -> Run {
        let stderr = self.child.stderr.take().map(drain);
        let status = wait_bounded(&mut self.child, limit);
        Run {
            status,
            // The launch line's reader took stdout; what followed it went unread.
            stdout: String::new(),
            stderr: stderr.map_or_else(String::new, |t| t.join().unwrap()),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A connection to `address` (`HOST:PORT`), its writes bounded.
pub fn connect(address: &str) -> TcpStream {
    let socket = TcpStream::connect(address).unwrap_or_else(|e| panic!("{address}: {e}"));
    socket.set_write_timeout(Some(LIMIT)).unwrap();
    socket
}

/// The bytes of a request as a client writes them: the request line, `host`,
/// `content-length` (left out of a `GET` without a body, as clients do), `headers` in
/// their order, the blank line and `body`.
pub fn raw_request(
    address: &str,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> String {
    let mut request = format!("{method} {target} HTTP/1.1\r\nhost: {address}\r\n");
    if method != "GET" || !body.is_empty() {
        request.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    request
}

/// Sends `request` as written to `address` and reads the whole answer, to close.
pub fn exchange(address: &str, request: &str) -> String {
    let mut socket = connect(address);
    socket.write_all(request.as_bytes()).unwrap();
    read_to_close(socket)
}

/// A raw HTTP exchange: a `POST /` as written; the socket to read the answer from.
pub fn post(address: &str, headers: &[(&str, &str)], body: &str) -> TcpStream {
    let mut socket = connect(address);
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    socket
        .write_all(raw_request(address, "POST", "/", headers, body).as_bytes())
        .unwrap();
    socket
}

/// The response bytes until the server closes, within [`LIMIT`] in all (a stream that
/// keeps sending heartbeats and never closes fails the test too).
pub fn read_to_close(mut socket: TcpStream) -> String {
    let deadline = Instant::now() + LIMIT;
    let mut out = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "the connection did not close within {LIMIT:?}; read:\n{}",
            String::from_utf8_lossy(&out)
        );
        // Thirty seconds of silence fail it too, as they always did.
        socket
            .set_read_timeout(Some(left.min(Duration::from_secs(30))))
            .unwrap();
        match socket.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!(
                "reading until close: {e}; read:\n{}",
                String::from_utf8_lossy(&out)
            ),
        }
    }
    String::from_utf8(out).unwrap()
}

/// The SSE frames of a body: (id, event, data) for each frame, skipping comments.
pub fn frames(body: &str) -> Vec<(Option<u64>, String, Value)> {
    mur::sse::FrameReader::default()
        .feed(body.as_bytes())
        .into_iter()
        .map(|e| {
            let data = serde_json::from_str(&e.data)
                .unwrap_or_else(|err| panic!("frame data is not JSON ({err}): {:?}", e.data));
            (e.id, e.event, data)
        })
        .collect()
}

pub fn message_stream_body(text: &str) -> String {
    serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "message/stream",
        "params": {"message": {"messageId": "msg-1", "role": "user", "parts": [{"text": text}]}}
    })
    .to_string()
}

/// A `message/stream` body for a message in the given context.
pub fn message_stream_body_in(text: &str, context_id: &str) -> String {
    serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "message/stream",
        "params": {"message": {
            "messageId": "msg-1", "role": "user", "contextId": context_id,
            "parts": [{"text": text}]
        }}
    })
    .to_string()
}
