//! The process transport (`inference.transport: process`): a coding-agent CLI (a
//! "harness": Claude Code, Codex) is the capsule's engine. The harness owns its
//! conversation and its loop of model calls; the host runs it confined and keeps the
//! seed's wire, the limits and the trace.
//!
//! - `component`: the process driver, a WASM component granted nothing, which plans
//!   each run's command line and reads the harness's output as typed events;
//! - `process`: the harness as a confined process, its output read within bounds;
//! - `bridge`: the capsule's tools, offered to the harness as an MCP server on loopback;
//! - `sessions`: the harness's own session of each threaded context.
//!
//! The session loop still owns the task: under this transport its `infer` runs the
//! harness once (`session::process`), and what the harness answered is the reply.

pub mod bridge;
pub mod component;
pub mod open;
pub mod process;
pub mod sessions;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::bindings::process::exports::murmur::process::harness::{
    Description, HomeFile, LaunchPlan,
};
use crate::confine::{Installation, Jail};
use crate::error::Error;

/// What the manifest fixes for every run.
pub struct Settings {
    pub model: String,
    pub endpoint: Option<String>,
    pub system_prompt: Option<String>,
    /// `inference.driver.config`, as JSON text.
    pub config: String,
    /// `inference.api_key`, set for the harness only, under the driver's `key-env`.
    pub api_key: Option<String>,
    pub max_turns: u32,
    /// `inference.max_tokens`: what a turn could use, reserved against the spend
    /// ceilings before the run starts.
    pub max_tokens: u32,
}

/// A capsule's harness: its driver, its program, its home, and the bridge to its tools.
pub struct Harness {
    pub driver: component::ProcessDriver,
    pub description: Description,
    /// The program, resolved.
    pub program: PathBuf,
    pub installation: Installation,
    pub home: PathBuf,
    /// What it printed for its version, if it could be read.
    pub version: Option<String>,
    pub bridge: bridge::Bridge,
    pub sessions: sessions::Sessions,
    pub settings: Settings,
    pub jail: Arc<Jail>,
    /// The environment the shell's commands get (`capabilities.env.allow`), which the
    /// harness's own commands get too.
    pub base_env: Vec<(String, String)>,
    pub logs_dir: PathBuf,
    /// The billing warning is given once a session.
    warned: AtomicBool,
}

/// Names the host sets in the harness's environment itself; a plan may not.
const HOST_SET: &[&str] = &[
    "HOME",
    "PATH",
    "TMPDIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
];

/// Whether a plan may not set `name`: the host sets it itself, or it is no name at all.
pub fn reserved_env(name: &str) -> bool {
    HOST_SET.contains(&name)
        || name == bridge::TOKEN_ENV
        || name.is_empty()
        || name.contains('=')
        || name.contains('\0')
}

/// Whether a plan's file path stays in the home: relative, plain names only.
pub fn inside_home(path: &str) -> bool {
    !path.is_empty()
        && Path::new(path)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
}

impl Harness {
    pub fn name(&self) -> &str {
        &self.description.harness
    }

    /// Whether the billing warning is still to be given (true once).
    pub fn first_warning(&self) -> bool {
        !self.warned.swap(true, Ordering::AcqRel)
    }

    /// The harness's environment for one run: the shell's, made confined (PATH, TMPDIR,
    /// the proxy), then `HOME`, the bridge's token, the key, and the plan's own.
    ///
    /// # Errors
    ///
    /// The plan sets a name the host sets itself.
    pub fn environment(&self, plan: &LaunchPlan) -> Result<Vec<(String, String)>, String> {
        let key_env = self.description.key_env.as_str();
        for (name, _) in &plan.env {
            if reserved_env(name) || name == key_env {
                return Err(format!(
                    "{} planned the variable '{}', which only the host sets",
                    self.driver.label,
                    crate::escape::cut(name, 64)
                ));
            }
        }
        // Its temporary files (`TMPDIR`, `<home>/tmp`) stay in its home, which it may
        // write; a program that cannot make one fails in odd ways (SQLite's migrations).
        crate::rooted::Rooted::open(&self.home)
            .and_then(|home| home.create_dir_all("tmp"))
            .map_err(|e| format!("the harness home's tmp folder cannot be made: {e}"))?;
        let mut env = self
            .jail
            .server_environment(&self.base_env, &self.home, &self.installation);
        env.retain(|(k, _)| k != "HOME" && k != key_env && k != bridge::TOKEN_ENV);
        env.push(("HOME".into(), self.home.to_string_lossy().into_owned()));
        env.push((bridge::TOKEN_ENV.into(), self.bridge.token().to_string()));
        if let Some(key) = &self.settings.api_key
            && !key_env.is_empty()
        {
            env.push((key_env.to_string(), key.clone()));
        }
        env.extend(plan.env.iter().cloned());
        Ok(env)
    }

    /// Writes the plan's files into the home, each through the home's own descriptor
    /// (a link planted there by an earlier run is replaced, never followed).
    ///
    /// # Errors
    ///
    /// A path leaves the home, or a file could not be written.
    pub fn write_files(&self, files: &[HomeFile]) -> Result<(), String> {
        let home = crate::rooted::Rooted::open(&self.home).map_err(|e| {
            format!(
                "the harness home {} cannot be opened: {e}",
                self.home.display()
            )
        })?;
        for file in files {
            let path = Path::new(&file.path);
            if !inside_home(&file.path) {
                return Err(format!(
                    "{} planned a file outside the harness home: '{}'",
                    self.driver.label,
                    crate::escape::cut(&file.path, 200)
                ));
            }
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                home.create_dir_all(&parent.to_string_lossy())
                    .map_err(|e| {
                        format!(
                            "could not create {} in the harness home: {e}",
                            parent.display()
                        )
                    })?;
            }
            home.write(&file.path, file.contents.as_bytes())
                .map_err(|e| format!("could not write {} in the harness home: {e}", file.path))?;
        }
        Ok(())
    }
}

/// The harness home: `inference.home`, or a folder of the capsule's own under the mur
/// home, made if missing and private to the user.
///
/// # Errors
///
/// `E-RUN-070`: it could not be made.
pub fn home(named: Option<&Path>, own: &Path) -> Result<PathBuf, Error> {
    // The folder itself is the operator's (or mur's own under its home): the harness
    // writes only beneath it, through the host's rooted handle (`write_files`), so
    // making and naming the folder itself meets no link of the harness's.
    let home = named.unwrap_or(own).to_path_buf();
    std::fs::create_dir_all(&home)
        .and_then(|()| {
            use std::os::unix::fs::PermissionsExt;
            if named.is_none() {
                std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700))?;
            }
            home.canonicalize()
        })
        .map_err(|e| {
            Error::new(
                "E-RUN-070",
                format!("the harness home {} cannot be made: {e}", home.display()),
            )
            .hint("name a folder the harness may keep its login and sessions in: inference.home")
        })
}

/// The program to run: `inference.command`, or the driver's binary on `PATH`, and what
/// it is made of (for an npm package, its `node_modules`), which the sandbox lets it
/// read and execute.
///
/// # Errors
///
/// `E-RUN-071`: nothing runnable by that name.
pub fn program(
    jail: &Jail,
    command: Option<&str>,
    binary: &str,
    host_path: &str,
    label: &str,
) -> Result<(PathBuf, Installation), Error> {
    let named = command.unwrap_or(binary);
    let not_found = |why: String| {
        Error::new("E-RUN-071", format!("the harness program of {label} cannot be run: {why}"))
            .hint(format!(
                "install it (npm install -g …) so '{binary}' is on PATH, or name it by its absolute path: inference.command"
            ))
    };
    let found = if named.contains('/') {
        PathBuf::from(named)
    } else {
        host_path
            .split(':')
            .filter(|d| d.starts_with('/'))
            .map(|d| Path::new(d).join(named))
            .find(|p| p.is_file())
            .ok_or_else(|| not_found(format!("'{named}' is not on PATH")))?
    };
    let real = found
        .canonicalize()
        .map_err(|e| not_found(format!("{}: {e}", found.display())))?;
    let mut paths = vec![real.clone()];
    // An npm package is run from its package folder, with its dependencies beside it.
    if let Some(modules) = real
        .ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "node_modules"))
    {
        paths = vec![modules.to_path_buf()];
    }
    let installation = Installation {
        paths,
        state: None,
        own_proc: true,
    };
    let program = jail
        .resolve_command(&real.to_string_lossy(), host_path, &installation)
        .map_err(not_found)?;
    Ok((program, installation))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_sets_no_name_the_host_sets_and_writes_only_in_the_home() {
        for name in [
            "HOME",
            "PATH",
            "TMPDIR",
            "HTTPS_PROXY",
            "no_proxy",
            "MUR_BRIDGE_TOKEN",
            "",
            "A=B",
        ] {
            assert!(reserved_env(name), "{name:?}");
        }
        for name in [
            "CODEX_HOME",
            "CLAUDE_CODE_MAX_RETRIES",
            "ANTHROPIC_BASE_URL",
        ] {
            assert!(!reserved_env(name), "{name}");
        }
        for path in ["config.toml", ".mur/mcp.json"] {
            assert!(inside_home(path), "{path}");
        }
        for path in ["", "/etc/passwd", "../escape", ".mur/../../x", "./x"] {
            assert!(!inside_home(path), "{path}");
        }
    }
}
