//! The official A2A SDKs as clients of a capsule (issue 15): Python's `a2a-sdk` and
//! JS's `@a2a-js/sdk`, installed once per repository into scratch folders under
//! `target/a2a-sdk/` (a virtualenv, an npm folder), and the scenario scripts of
//! `tests/sdk/` run with them against a capsule's address.
//!
//! ```ignore
//! let Some(client) = Sdk::Python.client() else { return };  // a skip, reason printed
//! let seen = client.scenario("send", &url, token);          // one JSON line, checked
//! ```
//!
//! An install that cannot happen (no `python3`, no `npm`, no registry) makes the tests
//! of that SDK skip with the reason printed, never fail: the scenarios are about the
//! door, not the machine. Once installed, a scenario's failure fails its test.

use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::repo;

/// What the Python scenarios run with: the SDK version issue 15 names, pinned, with the
/// server side issue 30's SDK peer (`tests/sdk/peer_server.py`) needs: the SDK's
/// Starlette routes (its `http-server` extra) and uvicorn to serve them.
const PYTHON_PACKAGES: &[&str] = &["a2a-sdk[http-server]==1.3.0", "uvicorn==0.55.0"];
/// How long the SDK peer server may take to print its port.
const PEER_STARTS_WITHIN: Duration = Duration::from_secs(30);
/// How long one install (a virtualenv and pip, or npm) may take before it counts as
/// failed: generous for a cold cache on CI, bounded so that a registry that never
/// answers skips the tests instead of hanging them.
pub(super) const INSTALL_LIMIT: Duration = Duration::from_secs(300);
/// How long one scenario process may run. The scripts stop themselves at 25 s (their
/// own deadline, reporting what they saw); this only catches a process that hangs
/// past that.
const SCENARIO_LIMIT: Duration = Duration::from_secs(60);

/// Set (to anything but empty) where a skip would hide a failure: CI, whose machines
/// have Python, Node and the registries, sets it so the SDK scenarios must run.
pub(super) const REQUIRED: &str = "MUR_REQUIRE_SDKS";

pub(super) fn required() -> bool {
    std::env::var_os(REQUIRED).is_some_and(|v| !v.is_empty())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sdk {
    Python,
    Js,
}

/// An installed SDK: how to run its scenario script.
#[derive(Debug)]
pub struct Client {
    sdk: Sdk,
    program: PathBuf,
    args: Vec<String>,
}

impl Sdk {
    fn name(self) -> &'static str {
        match self {
            Sdk::Python => "python",
            Sdk::Js => "js",
        }
    }

    /// The SDK, installed on first use (once per test process, and once per target
    /// folder across processes); `None`, with the reason printed, when it cannot be.
    pub fn client(self) -> Option<&'static Client> {
        static PYTHON: OnceLock<Result<Client, String>> = OnceLock::new();
        static JS: OnceLock<Result<Client, String>> = OnceLock::new();
        let cell = match self {
            Sdk::Python => &PYTHON,
            Sdk::Js => &JS,
        };
        match cell.get_or_init(|| self.install()) {
            Ok(client) => Some(client),
            Err(reason) if required() => {
                panic!(
                    "the {} A2A SDK could not be installed and {REQUIRED} is set: {reason}",
                    self.name()
                )
            }
            Err(reason) => {
                println!(
                    "skipped: the {} A2A SDK is not installed: {reason}",
                    self.name()
                );
                None
            }
        }
    }

    fn install(self) -> Result<Client, String> {
        let home = repo().join("target").join("a2a-sdk");
        std::fs::create_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
        // Test binaries run side by side (and `cargo test` runs more than one): the
        // first installs, the others wait here and then find its marker.
        let _lock = Lock::take(&home.join(format!("{}.lock", self.name())))?;
        match self {
            Sdk::Python => install_python(&home),
            Sdk::Js => install_js(&home),
        }
    }
}

/// The virtualenv `target/a2a-sdk/venv` with the pinned `a2a-sdk` (and what it pulls
/// in: httpx, protobuf, starlette, sse-starlette) and uvicorn.
fn install_python(home: &Path) -> Result<Client, String> {
    let python = venv_install(&home.join("venv"), PYTHON_PACKAGES)?;
    Ok(Client {
        sdk: Sdk::Python,
        program: python,
        args: vec![script(&repo().join("tests/sdk/python/scenarios.py"))?],
    })
}

/// The virtualenv `venv` with `packages` pip-installed (again only when they changed);
/// its python, returned.
pub(super) fn venv_install(venv: &Path, packages: &[&str]) -> Result<PathBuf, String> {
    let python = venv.join("bin").join("python");
    let marker = venv.join(".mur-installed");
    let listed = packages.join(" ");
    if std::fs::read_to_string(&marker).ok().as_deref() != Some(listed.as_str()) {
        let mut create = Command::new("python3");
        create.args(["-m", "venv", "--clear"]).arg(venv);
        run_bounded(&mut create, "python3 -m venv")?;
        let mut pip = Command::new(&python);
        pip.args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(["--no-input", "--retries", "2", "--timeout", "30"])
        .args(packages);
        run_bounded(&mut pip, &format!("pip install {listed}"))?;
        write(&marker, &listed)?;
    }
    Ok(python)
}

/// The npm folder `target/a2a-sdk/npm`: `tests/sdk/js/package.json` (the pinned
/// `@a2a-js/sdk`) installed, and a link `scripts` to `tests/sdk/js` inside it, so the
/// scripts run from there and `import '@a2a-js/sdk'` resolves to its `node_modules` as in
/// a user's project, without a `node_modules` in the source tree.
fn install_js(home: &Path) -> Result<Client, String> {
    let sources = repo().join("tests/sdk/js");
    run_bounded(Command::new("node").arg("--version"), "node --version")?;
    let link = npm_install(&home.join("npm"), &sources, "@a2a-js/sdk")?;
    Ok(Client {
        sdk: Sdk::Js,
        program: PathBuf::from("node"),
        // Node resolves imports from where a file really is unless told to keep the
        // link's path; the link is what puts the scripts beside `node_modules`.
        args: vec![
            "--preserve-symlinks".into(),
            "--preserve-symlinks-main".into(),
            script(&link.join("scenarios.mjs"))?,
        ],
    })
}

impl Client {
    pub fn sdk(&self) -> Sdk {
        self.sdk
    }

    /// Runs `scenario` against the capsule at `url` (its address, ending in `/`),
    /// with `token` when the address wants one, and returns the JSON line the script
    /// printed. A scenario that reports an error, exits non-zero or prints no JSON
    /// fails the test with all it said.
    pub fn scenario(&self, scenario: &str, url: &str, token: Option<&str>) -> Value {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .args([scenario, url])
            // Python would otherwise write `__pycache__` into the source tree.
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env_remove("A2A_TOKEN");
        if let Some(token) = token {
            cmd.env("A2A_TOKEN", token);
        }
        let started = Instant::now();
        let out = run_within(&mut cmd, SCENARIO_LIMIT)
            .unwrap_or_else(|e| panic!("{:?} {scenario}: {e}", self.sdk));
        let line = out.stdout.lines().last().unwrap_or_default();
        let seen: Value = serde_json::from_str(line).unwrap_or_else(|e| {
            panic!(
                "{:?} {scenario}: no JSON line ({e}); exit {}\nstdout:\n{}\nstderr:\n{}",
                self.sdk, out.status, out.stdout, out.stderr
            )
        });
        assert!(
            out.status == 0 && seen.get("error").is_none(),
            "{:?} {scenario} failed (exit {}) after {:?}: {}\nwhat it saw:\n{}\nstderr:\n{}",
            self.sdk,
            out.status,
            started.elapsed(),
            seen["error"],
            serde_json::to_string_pretty(&without_traces(&seen)).unwrap(),
            out.stderr
        );
        seen
    }
}

/// `tests/sdk/peer_server.py` running: a remote A2A agent served by the Python SDK on a
/// loopback port of its own, for a capsule to call (issue 30). Killed when dropped.
///
/// ```ignore
/// let Some(client) = Sdk::Python.client() else { return };
/// let peer = client.peer_server("hang");     // answer | input | drop | hang | token
/// // a manifest's peers[].card = peer.card_url(), network.allow its port …
/// assert_eq!(peer.next_line(Duration::from_secs(10)).unwrap()["canceled"], task_id);
/// ```
pub struct PeerServer {
    child: Child,
    port: u16,
    /// What it printed after its port, a line at a time.
    lines: std::sync::mpsc::Receiver<String>,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Client {
    /// Starts the SDK peer server doing `behaviour` (`answer`, `input`, `drop`, `hang`
    /// or `token`; see the script) and waits for the port it printed.
    pub fn peer_server(&self, behaviour: &str) -> PeerServer {
        assert_eq!(
            self.sdk,
            Sdk::Python,
            "the peer server runs on the Python SDK"
        );
        let script = repo().join("tests/sdk/peer_server.py");
        let mut child = Command::new(&self.program)
            .arg(&script)
            .arg(behaviour)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", script.display()));
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let said = stderr.clone();
        let mut pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                said.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&chunk[..n]));
            }
        });
        let (send, lines) = std::sync::mpsc::channel();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in stdout.lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let mut server = PeerServer {
            child,
            port: 0,
            lines,
            stderr,
        };
        let first = server.lines.recv_timeout(PEER_STARTS_WITHIN);
        let port = first
            .ok()
            .and_then(|line| serde_json::from_str::<Value>(&line).ok())
            .and_then(|v| v["port"].as_u64())
            .and_then(|p| u16::try_from(p).ok());
        match port {
            Some(port) => server.port = port,
            None => panic!(
                "the SDK peer server ({behaviour}) printed no port within {PEER_STARTS_WITHIN:?}; stderr:\n{}",
                server.stderr()
            ),
        }
        server
    }
}

impl PeerServer {
    /// Its agent card's URL, as a manifest's `peers[].card` names it.
    pub fn card_url(&self) -> String {
        format!("http://127.0.0.1:{}/.well-known/agent-card.json", self.port)
    }

    /// The next JSON line it printed (`{"canceled": "<task id>"}` when a task of
    /// `hang` is canceled), waiting at most `within`.
    pub fn next_line(&self, within: Duration) -> Option<Value> {
        let line = self.lines.recv_timeout(within).ok()?;
        serde_json::from_str(&line).ok()
    }

    /// What it wrote to stderr so far (uvicorn's and the SDK's logs), for a failure.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for PeerServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a snippet run printed.
pub struct Snippet {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Client {
    /// Runs Python `code` as a user would paste it (`python -c` in the virtualenv),
    /// within the scenario bound.
    pub fn python(&self, code: &str) -> Snippet {
        assert_eq!(
            self.sdk,
            Sdk::Python,
            "a Python snippet needs the Python SDK"
        );
        let mut cmd = Command::new(&self.program);
        cmd.args(["-c", code]).env("PYTHONDONTWRITEBYTECODE", "1");
        let out = run_within(&mut cmd, SCENARIO_LIMIT)
            .unwrap_or_else(|e| panic!("a Python snippet: {e}"));
        Snippet {
            status: out.status,
            stdout: out.stdout,
            stderr: out.stderr,
        }
    }
}

/// `seen` without its traceback, which is printed after it.
fn without_traces(seen: &Value) -> Value {
    let mut seen = seen.clone();
    if let Some(map) = seen.as_object_mut() {
        for key in ["traceback", "stack"] {
            if let Some(Value::String(trace)) = map.remove(key) {
                map.insert(format!("{key} (below)"), Value::Null);
                eprintln!("{key}:\n{trace}");
            }
        }
    }
    seen
}

fn script(path: &Path) -> Result<String, String> {
    path.to_str()
        .map(str::to_string)
        .ok_or_else(|| format!("{}: not UTF-8", path.display()))
}

/// `sources/package.json` installed with npm into `npm` (again only when it changed),
/// and a link `npm/scripts` to `sources`, returned: scripts run through it sit beside
/// `node_modules`, so their imports resolve as in a user's project, without a
/// `node_modules` in the source tree. `what` names the install in errors.
pub(super) fn npm_install(npm: &Path, sources: &Path, what: &str) -> Result<PathBuf, String> {
    let manifest = std::fs::read_to_string(sources.join("package.json"))
        .map_err(|e| format!("{}: {e}", sources.join("package.json").display()))?;
    let marker = npm.join(".mur-installed");
    if std::fs::read_to_string(&marker).ok().as_deref() != Some(manifest.as_str()) {
        std::fs::create_dir_all(npm).map_err(|e| format!("{}: {e}", npm.display()))?;
        write(&npm.join("package.json"), &manifest)?;
        let mut install = Command::new("npm");
        install
            .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(npm);
        run_bounded(&mut install, &format!("npm install {what}"))?;
        write(&marker, &manifest)?;
    }
    let link = npm.join("scripts");
    if std::fs::read_link(&link).ok().as_deref() != Some(sources) {
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(sources, &link)
            .map_err(|e| format!("{}: {e}", link.display()))?;
    }
    Ok(link)
}

pub(super) fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// An exclusive `flock` on a file, released when dropped (or when the process dies, so
/// a killed install never leaves the others waiting).
pub(super) struct Lock(File);

impl Lock {
    /// Waits for the lock as long as the holder's install may take (its two steps,
    /// each bounded), then gives up.
    pub(super) fn take(path: &Path) -> Result<Lock, String> {
        let file = File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let deadline = Instant::now() + 2 * INSTALL_LIMIT + Duration::from_secs(30);
        loop {
            // SAFETY: flock takes a descriptor this function owns, open until the drop.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(Lock(file));
            }
            let error = std::io::Error::last_os_error();
            if error.kind() != std::io::ErrorKind::WouldBlock {
                return Err(format!("{}: {error}", path.display()));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{} is still held by another install",
                    path.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        // SAFETY: as in `take`; the descriptor is still open.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

pub(super) struct Output {
    pub(super) status: i32,
    pub(super) stdout: String,
    pub(super) stderr: String,
}

/// An install step, to its end within [`INSTALL_LIMIT`]; its failure is a reason to
/// skip, with the tail of what it said.
pub(super) fn run_bounded(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = run_within(cmd, INSTALL_LIMIT).map_err(|e| format!("{what}: {e}"))?;
    if out.status == 0 {
        return Ok(());
    }
    // The first lines name the cause (npm's error code), the last pip's verdict.
    let said = format!("{}{}", out.stdout, out.stderr);
    let lines: Vec<&str> = said.lines().filter(|l| !l.trim().is_empty()).collect();
    let shown: Vec<&str> = if lines.len() <= 6 {
        lines
    } else {
        [&lines[..3], &["..."], &lines[lines.len() - 3..]].concat()
    };
    Err(format!(
        "{what} exited {}: {}",
        out.status,
        shown.join(" | ")
    ))
}

/// Runs `cmd` to its exit, killed at `limit`: an error (not a panic) when it cannot
/// start or does not end, so an install can turn it into a skip.
pub(super) fn run_within(cmd: &mut Command, limit: Duration) -> Result<Output, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A group of its own, so a kill at the limit reaches what it started too (pip's
        // and npm's helpers), and no helper keeps the pipes open after it.
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))?;
    let stdout = drain(child.stdout.take().unwrap());
    let stderr = drain(child.stderr.take().unwrap());
    let status = wait_until(&mut child, Instant::now() + limit);
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    match status {
        Some(status) => Ok(Output {
            status,
            stdout,
            stderr,
        }),
        None => Err(format!(
            "did not end within {limit:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
        )),
    }
}

/// The exit code, or `None` (the child's group killed, the child reaped) at
/// `deadline`.
fn wait_until(child: &mut Child, deadline: Instant) -> Option<i32> {
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status.code().unwrap_or(-1));
        }
        if Instant::now() > deadline {
            // SAFETY: kill only sends a signal, to the group this child leads (not yet
            // reaped, so its id is still its own).
            unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads a pipe to its end on a thread of its own, so neither pipe can fill and stall
/// the process.
fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}
