//! The MCP servers the MCP tests run confined: the official `server-everything` (npm,
//! pinned in `tests/mcp/npm/package.json`, installed once under `target/mcp/npm`), a
//! server written with the official Python SDK (`tests/mcp/python_server.py`), and the
//! hostile stdio server of `tests/mcp/hostile_server.py`.
//!
//! As for the A2A SDKs, an install that cannot happen skips the tests with the reason
//! printed, unless `MUR_REQUIRE_SDKS` is set (CI), where it fails them.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::repo;
use super::sdk::{Lock, REQUIRED, npm_install, required, run_bounded};

/// How long the Python server may take to print its port.
const STARTS_WITHIN: Duration = Duration::from_secs(30);

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
        let home = repo().join("target").join("mcp");
        std::fs::create_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
        let _lock = Lock::take(&home.join("npm.lock"))?;
        run_bounded(Command::new("node").arg("--version"), "node --version")?;
        let npm = home.join("npm");
        npm_install(&npm, &repo().join("tests/mcp/npm"), "server-everything")?;
        let node_modules = npm.join("node_modules");
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
