//! A real browser for the web view's tests: Debian's headless Chromium
//! (`/usr/bin/chromium`), driven by `playwright-core` from npm, which is installed once
//! per repository into `target/browser/npm` the way the A2A SDKs are (see `sdk`), and
//! the scenario script `tests/browser/webview.mjs` run with it.
//!
//! Without node, npm, the registry or Chromium the tests print why and skip; with
//! `MUR_REQUIRE_SDKS` set (CI) they fail instead. Once installed, a scenario's failure
//! fails its test.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

use super::repo;
use super::sdk::{Lock, REQUIRED, npm_install, required, run_bounded, run_within};

/// The browser Debian's `chromium` package installs.
const CHROMIUM: &str = "/usr/bin/chromium";
/// How long one scenario may run; the script stops itself at 90 s.
const SCENARIO_LIMIT: Duration = Duration::from_secs(120);

/// Chromium and playwright-core, ready to run a scenario.
#[derive(Debug)]
pub struct Browser {
    script: PathBuf,
}

impl Browser {
    /// The browser, installed on first use; `None`, with the reason printed, when it
    /// cannot be (and `MUR_REQUIRE_SDKS` is not set).
    pub fn get() -> Option<&'static Browser> {
        static BROWSER: OnceLock<Result<Browser, String>> = OnceLock::new();
        match BROWSER.get_or_init(install) {
            Ok(browser) => Some(browser),
            Err(reason) if required() => {
                panic!("the browser test cannot run and {REQUIRED} is set: {reason}")
            }
            Err(reason) => {
                println!("skipped: no browser to drive the web view: {reason}");
                None
            }
        }
    }

    /// Runs `scenario` of `tests/browser/webview.mjs` with `args` and `env`, and returns
    /// the JSON line it printed; a scenario that fails fails the test with all it said.
    pub fn scenario(&self, scenario: &str, args: &[&str], env: &[(&str, &str)]) -> Value {
        self.scenario_of("webview.mjs", scenario, args, env)
    }

    /// [`Browser::scenario`] of another script of `tests/browser/` (`phoenix.mjs`, ...).
    pub fn scenario_of(
        &self,
        file: &str,
        scenario: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Value {
        let mut cmd = Command::new("node");
        cmd.args(["--preserve-symlinks", "--preserve-symlinks-main"])
            .arg(self.script.with_file_name(file))
            .arg(scenario)
            .args(args)
            .env("MUR_CHROMIUM", CHROMIUM)
            .envs(env.iter().copied());
        let out = run_within(&mut cmd, SCENARIO_LIMIT)
            .unwrap_or_else(|e| panic!("browser scenario {scenario}: {e}"));
        let line = out.stdout.lines().last().unwrap_or_default();
        let seen: Value = serde_json::from_str(line).unwrap_or_else(|e| {
            panic!(
                "browser scenario {scenario}: no JSON line ({e}); exit {}\nstdout:\n{}\nstderr:\n{}",
                out.status, out.stdout, out.stderr
            )
        });
        assert!(
            out.status == 0 && seen.get("error").is_none(),
            "browser scenario {scenario} failed (exit {}): {}\n{}\nwhat it saw:\n{}\nstderr:\n{}",
            out.status,
            seen["error"],
            seen["stack"].as_str().unwrap_or_default(),
            serde_json::to_string_pretty(&seen["seen"]).unwrap(),
            out.stderr
        );
        seen
    }
}

fn install() -> Result<Browser, String> {
    if !Path::new(CHROMIUM).exists() {
        return Err(format!("{CHROMIUM} is missing (apt-get install chromium)"));
    }
    run_bounded(
        Command::new(CHROMIUM).arg("--version"),
        "chromium --version",
    )?;
    run_bounded(Command::new("node").arg("--version"), "node --version")?;
    let home = repo().join("target").join("browser");
    let npm = home.join("npm");
    std::fs::create_dir_all(&npm).map_err(|e| format!("{}: {e}", npm.display()))?;
    let _lock = Lock::take(&home.join("npm.lock"))?;
    let link = npm_install(&npm, &repo().join("tests/browser"), "playwright-core")?;
    Ok(Browser {
        script: link.join("webview.mjs"),
    })
}

/// Where a test leaves what the browser saw (screenshots): `target/browser/`.
pub fn output(name: &str) -> PathBuf {
    let dir = repo().join("target").join("browser");
    let _ = std::fs::create_dir_all(&dir);
    dir.join(name)
}
