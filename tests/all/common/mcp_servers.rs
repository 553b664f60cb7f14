//! The MCP servers the MCP tests run confined: the official `server-everything` (npm,
//! pinned in `tests/mcp/npm/package.json`, installed once under `target/mcp/npm`), a
//! server written with the official Python SDK (`tests/mcp/python_server.py`), and the
//! hostile stdio server of `tests/mcp/hostile_server.py`. And, from the same npm
//! folder, the official TypeScript SDK (`@modelcontextprotocol/sdk`) as a client of a
//! capsule's MCP door: `tests/mcp/npm/door_client.mjs`, run by [`door_client`].
//!
//! As for the A2A SDKs, an install that cannot happen skips the tests with the reason
//! printed, unless `MUR_REQUIRE_SDKS` is set (CI), where it fails them.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::repo;
use super::sdk::{Lock, REQUIRED, npm_install, required, run_bounded, run_within};

/// How long the Python server may take to print its port.
const STARTS_WITHIN: Duration = Duration::from_secs(30);
/// How long the TypeScript door client may run: it stops itself at 25 s, reporting
/// what it saw, so this only catches a process that hangs past that.
const CLIENT_LIMIT: Duration = Duration::from_secs(60);

/// The npm folder `target/mcp/npm` with `tests/mcp/npm/package.json` installed in it
/// (once per test process, and once per target folder across processes), and its link
/// `scripts` to `tests/mcp/npm`.
fn npm() -> &'static Result<PathBuf, String> {
    static CELL: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    CELL.get_or_init(|| {
        let home = repo().join("target").join("mcp");
        std::fs::create_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
        let _lock = Lock::take(&home.join("npm.lock"))?;
        run_bounded(Command::new("node").arg("--version"), "node --version")?;
        let npm = home.join("npm");
        npm_install(
            &npm,
            &repo().join("tests/mcp/npm"),
            "the MCP servers and SDK",
        )?;
        Ok(npm)
    })
}

/// The folder `server-everything` was installed in: its `node_modules` and the
/// server's entry point.
pub struct Everything {
    pub node_modules: PathBuf,
    pub entry: PathBuf,
}

/// `@modelcontextprotocol/server-everything`, installed on first use.
pub fn everything() -> Option<&'static Everything> {
    static CELL: OnceLock<Result<Everything, String>> = OnceLock::new();
    let installed = CELL.get_or_init(|| {
        let node_modules = npm().as_ref()?.join("node_modules");
        let entry = node_modules.join("@modelcontextprotocol/server-everything/dist/index.js");
        if !entry.exists() {
            return Err(format!("{} is missing after npm install", entry.display()));
        }
        Ok(Everything {
            node_modules,
            entry,
        })
    });
    skip_unless_installed(installed, "server-everything")
}

/// The TypeScript SDK's door client, `tests/mcp/npm/door_client.mjs`, run through the
/// link beside `node_modules` (so `@modelcontextprotocol/sdk` resolves as in a user's
/// project): `node` and its arguments.
fn ts_client() -> Option<&'static [String]> {
    static CELL: OnceLock<Result<Vec<String>, String>> = OnceLock::new();
    let installed = CELL.get_or_init(|| {
        let npm = npm().as_ref()?;
        let sdk = npm.join("node_modules/@modelcontextprotocol/sdk/package.json");
        if !sdk.exists() {
            return Err(format!("{} is missing after npm install", sdk.display()));
        }
        let script = npm.join("scripts").join("door_client.mjs");
        let script = script
            .to_str()
            .ok_or_else(|| format!("{}: not UTF-8", script.display()))?;
        // Node resolves imports from where a file really is unless told to keep the
        // link's path; the link is what puts the script beside `node_modules`.
        Ok(vec![
            "--preserve-symlinks".into(),
            "--preserve-symlinks-main".into(),
            script.into(),
        ])
    });
    skip_unless_installed(installed, "the MCP TypeScript SDK").map(Vec::as_slice)
}

/// The official TypeScript SDK's `Client` over `StreamableHTTPClientTransport`, as a
/// user writes one, against the MCP door at `url`: it lists the tools and calls the
/// first with `task` and a progress callback, sending `token` as a bearer when given.
/// What it saw, the one JSON line it printed: `tools` (names), `answer`, `isError`,
/// `progress` (`{progress, total, message}` each), `protocol`, `server`, `content`
/// (the types), `terminated` (its session ended with `DELETE`), `transportErrors`; or,
/// when it failed (exit 1), `error` and `code` with what it saw so far.
///
/// `None` (a skip, the reason printed) without node or npm, unless `MUR_REQUIRE_SDKS`
/// is set. A client that prints no JSON, or exits otherwise than its line says, fails
/// the test with all it said.
pub fn door_client(url: &str, task: &str, token: Option<&str>) -> Option<Value> {
    let args = ts_client()?;
    let mut cmd = Command::new("node");
    cmd.args(args).args([url, task]).env_remove("MCP_TOKEN");
    if let Some(token) = token {
        cmd.env("MCP_TOKEN", token);
    }
    let out = run_within(&mut cmd, CLIENT_LIMIT)
        .unwrap_or_else(|e| panic!("the TypeScript MCP client: {e}"));
    let line = out.stdout.lines().last().unwrap_or_default();
    let seen: Value = serde_json::from_str(line).unwrap_or_else(|e| {
        panic!(
            "the TypeScript MCP client printed no JSON line ({e}); exit {}\nstdout:\n{}\nstderr:\n{}",
            out.status, out.stdout, out.stderr
        )
    });
    let failed = seen.get("error").is_some();
    assert_eq!(
        out.status,
        i32::from(failed),
        "the TypeScript MCP client's exit disagrees with its line: {seen}\nstderr:\n{}",
        out.stderr
    );
    Some(seen)
}

/// The hostile server's folder (its installation) and script.
pub fn hostile() -> (PathBuf, PathBuf) {
    let dir = repo().join("tests/mcp");
    (dir.clone(), dir.join("hostile_server.py"))
}

fn skip_unless_installed<'a, T>(installed: &'a Result<T, String>, what: &str) -> Option<&'a T> {
    match installed {
        Ok(it) => Some(it),
        Err(reason) if required() => {
            panic!("{what} could not be installed and {REQUIRED} is set: {reason}")
        }
        Err(reason) => {
            println!("skipped: {what} is not installed: {reason}");
            None
        }
    }
}

/// The Python SDK server, listening on 127.0.0.1 behind `token`; killed when dropped.
pub struct PythonServer {
    child: Child,
    pub port: u16,
}

impl PythonServer {
    /// Starts it with the Python SDK's interpreter; `None` (a skip) without the SDK.
    pub fn start(token: &str) -> Option<PythonServer> {
        let python = super::mcp_sdk::python_mcp()?;
        let mut child = Command::new(python)
            .arg(repo().join("tests/mcp/python_server.py"))
            .arg(token)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the Python MCP server starts");
        let stdout = child.stdout.take().expect("its stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(port) = line.strip_prefix("PORT ") {
                    let _ = tx.send(port.trim().parse::<u16>().ok());
                }
            }
        });
        let deadline = Instant::now() + STARTS_WITHIN;
        let port = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .ok()
            .flatten();
        let Some(port) = port else {
            let _ = child.kill();
            panic!("the Python MCP server did not print its port within {STARTS_WITHIN:?}");
        };
        Some(PythonServer { child, port })
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}

impl Drop for PythonServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
