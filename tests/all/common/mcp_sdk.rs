//! The official MCP Python SDK (`mcp` 2.3.0) as a client of a capsule's MCP door,
//! installed once per repository into the virtualenv `target/mcp-sdk/venv`, every
//! package it pulls in pinned, so a run today and a run next year install the same.
//!
//! ```ignore
//! let Some(python) = python_mcp() else { return };   // a skip, reason printed
//! ```
//!
//! An install that cannot happen (no `python3`, no index) skips the tests that need
//! it, printing why, unless `MUR_REQUIRE_SDKS` is set: then it fails them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use super::repo;
use super::sdk::{Lock, REQUIRED, required, run_within, venv_install};

/// How long one client script may run: its own deadline is shorter, so this only
/// catches one that hangs past it.
const SCRIPT_LIMIT: Duration = Duration::from_secs(90);

/// `mcp` and everything it needs, as `pip freeze` listed them for `mcp==2.3.0` on
/// Python 3.11.
const PACKAGES: &[&str] = &[
    "mcp==2.3.0",
    "mcp-types==2.3.0",
    "annotated-types==0.8.0",
    "anyio==4.16.0",
    "attrs==26.1.0",
    "cffi==2.1.1",
    "click==8.5.1",
    "cryptography==51.0.1",
    "h11==0.16.0",
    "httpcore2==2.17.0",
    "httpx2==2.17.0",
    "idna==3.21",
    "jsonschema==4.26.0",
    "jsonschema-specifications==2025.9.1",
    "opentelemetry-api==1.45.3",
    "pycparser==3.12",
    "pydantic==2.14.4",
    "pydantic_core==2.50.5",
    "PyJWT==2.15.1",
    "python-multipart==0.0.34",
    "referencing==0.37.0",
    "rpds-py==2026.9.1",
    "sse-starlette==3.7.1",
    "starlette==1.10.0",
    "truststore==0.10.5",
    "typing-inspection==0.4.5",
    "typing_extensions==4.16.0",
    "uvicorn==0.55.0",
];

/// The virtualenv's `python`, with `mcp` installed; `None`, with the reason printed,
/// when it cannot be (a failure instead under `MUR_REQUIRE_SDKS`).
pub fn python_mcp() -> Option<PathBuf> {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match PYTHON.get_or_init(install) {
        Ok(python) => Some(python.clone()),
        Err(reason) if required() => {
            panic!("the MCP Python SDK could not be installed and {REQUIRED} is set: {reason}")
        }
        Err(reason) => {
            println!("skipped: the MCP Python SDK is not installed: {reason}");
            None
        }
    }
}

fn install() -> Result<PathBuf, String> {
    let home = repo().join("target").join("mcp-sdk");
    std::fs::create_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
    // Test binaries run side by side: the first installs, the others wait here and
    // then find its marker.
    let _lock = Lock::take(&home.join("python.lock"))?;
    let python = venv_install(&home.join("venv"), PACKAGES)?;
    Ok(python)
}

/// What a client script printed, and how it exited.
pub struct Ran {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `script` with the virtualenv's `python`, `args` after it and `env` set, to its
/// exit within [`SCRIPT_LIMIT`] (else the test fails).
pub fn run(python: &Path, script: &Path, args: &[&str], env: &[(&str, &str)]) -> Ran {
    let mut cmd = Command::new(python);
    cmd.arg(script)
        .args(args)
        .envs(env.iter().copied())
        // Python would otherwise write `__pycache__` beside the script.
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let out =
        run_within(&mut cmd, SCRIPT_LIMIT).unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    Ran {
        status: out.status,
        stdout: out.stdout,
        stderr: out.stderr,
    }
}
