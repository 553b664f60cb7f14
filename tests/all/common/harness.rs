//! The harness CLIs of the process transport's tests: Claude Code and Codex from npm,
//! at the versions `tests/harness/package.json` pins, installed once per repository
//! under `target/harness/` (the first test installs, the others wait on its lock).
//!
//! An install that cannot happen skips the tests with the reason printed, unless
//! `MUR_REQUIRE_SDKS` is set (CI), where it fails them.

use std::path::PathBuf;
use std::sync::OnceLock;

use super::repo;
use super::sdk::{Lock, REQUIRED, npm_install, required};

/// The installed programs, by the names their packages give them on `PATH`.
pub struct Harnesses {
    pub claude: PathBuf,
    pub codex: PathBuf,
}

/// The harnesses, installed on first use; `None` (a skip, reason printed) when they
/// cannot be.
pub fn installed() -> Option<&'static Harnesses> {
    static CELL: OnceLock<Result<Harnesses, String>> = OnceLock::new();
    match CELL.get_or_init(install) {
        Ok(harnesses) => Some(harnesses),
        Err(reason) if required() => {
            panic!("the harness CLIs could not be installed and {REQUIRED} is set: {reason}")
        }
        Err(reason) => {
            println!("skipped: the harness CLIs are not installed: {reason}");
            None
        }
    }
}

fn install() -> Result<Harnesses, String> {
    let home = repo().join("target").join("harness");
    std::fs::create_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
    let _lock = Lock::take(&home.join("npm.lock"))?;
    let npm = home.join("npm");
    npm_install(
        &npm,
        &repo().join("tests").join("harness"),
        "the harness CLIs",
    )?;
    let bin = npm.join("node_modules").join(".bin");
    let found = |name: &str| {
        let path = bin.join(name);
        path.exists()
            .then_some(path.clone())
            .ok_or_else(|| format!("{} is missing after the install", path.display()))
    };
    Ok(Harnesses {
        claude: found("claude")?,
        codex: found("codex")?,
    })
}
