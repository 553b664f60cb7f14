//! An A2A client that traces its calls, as an instrumented agent would: the official
//! A2A Python SDK (`a2a-sdk`, the version `sdk` pins) beside OpenTelemetry's Python SDK
//! and its OTLP/HTTP exporter (the versions Phoenix's virtualenv pins, see `phoenix`),
//! installed once per repository into the virtualenv `target/otel/venv` the way the
//! SDKs are, and a client script run with it.
//!
//! An install that cannot happen skips the tests that need it, printing why, unless
//! `MUR_REQUIRE_SDKS` is set: then it fails them.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use super::repo;
use super::sdk::{Lock, REQUIRED, Snippet, required, run_within, venv_install};

/// The A2A SDK as `sdk` installs it (its client is all a caller needs), and the
/// OpenTelemetry packages at the versions `phoenix` lists.
const PACKAGES: &[&str] = &[
    "a2a-sdk==1.3.0",
    "httpx==0.29.0",
    "protobuf==7.36.2",
    "opentelemetry-api==1.45.2",
    "opentelemetry-sdk==1.45.2",
    "opentelemetry-semantic-conventions==0.66b2",
    "opentelemetry-proto==1.45.2",
    "opentelemetry-exporter-otlp-proto-common==1.45.2",
    "opentelemetry-exporter-otlp-common==0.66b2",
    "opentelemetry-exporter-http-transport==0.66b2",
    "opentelemetry-exporter-otlp-proto-http==1.45.2",
];

/// How long one client script may run.
const SCRIPT_LIMIT: Duration = Duration::from_secs(90);

/// The virtualenv's `python`, with both SDKs installed; `None`, with the reason
/// printed, when they cannot be (a failure instead under `MUR_REQUIRE_SDKS`).
pub fn python() -> Option<PathBuf> {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match PYTHON.get_or_init(install) {
        Ok(python) => Some(python.clone()),
        Err(reason) if required() => {
            panic!("the traced A2A client could not be installed and {REQUIRED} is set: {reason}")
        }
        Err(reason) => {
            println!("skipped: the traced A2A client is not installed: {reason}");
            None
        }
    }
}

fn install() -> Result<PathBuf, String> {
    let home = repo().join("target").join("otel");
    std::fs::create_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
    let _lock = Lock::take(&home.join("python.lock"))?;
    venv_install(&home.join("venv"), PACKAGES)
}

/// Runs Python `code` (`python -c`, `args` after it) in the virtualenv, with no
/// `OTEL_*` variable of the test's own environment, within [`SCRIPT_LIMIT`].
pub fn run(python: &PathBuf, code: &str, args: &[&str]) -> Snippet {
    let mut cmd = Command::new(python);
    cmd.arg("-c").arg(code).args(args);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("OTEL_") {
            cmd.env_remove(&key);
        }
    }
    cmd.env("PYTHONDONTWRITEBYTECODE", "1");
    let out = run_within(&mut cmd, SCRIPT_LIMIT).unwrap_or_else(|e| panic!("the A2A client: {e}"));
    Snippet {
        status: out.status,
        stdout: out.stdout,
        stderr: out.stderr,
    }
}
