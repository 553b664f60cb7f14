//! Long-running servers (MCP over stdio), started into the sandbox a shell command gets
//! (its class, namespaces, limits, seccomp programs, cgroups and room under the quota)
//! with a standard input mur writes to, plus read and execute beneath the places the
//! server is made of: its installation. Never write: a server that could rewrite its
//! own code could plant what the next session runs.
//!
//! A Landlock ruleset cannot grow once a process has restricted itself with it, and the
//! session's is shared by every command, so each server gets a ruleset of its own (and
//! under `sealed`, a root of its own that holds its installation).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::filesystem::{self, Installed};
use super::{Class, Confined, Jail, Limits, Own, child, sealed, spawn};

/// What a server is made of, beyond what a shell command may reach: read + execute,
/// never write.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Installation {
    /// Absolute: its command's resolved path, and the folders its configuration names
    /// (a `node_modules`, say).
    pub paths: Vec<PathBuf>,
    /// A folder it keeps its own state in (a harness's home, its login and sessions):
    /// read and write, never execute. Checked as the paths are.
    pub state: Option<PathBuf>,
    /// A `/proc` of its own, readable: a program that reads its own `/proc/self` (a
    /// Bun or Node executable finding its code) gets one that lists only the
    /// processes of its PID namespace.
    pub own_proc: bool,
}

/// Kernel views of the host: beneath them a path reaches what no file rule can narrow
/// (`/proc/<pid>/environ` holds mur's own secrets).
const KERNEL_VIEWS: &[&str] = &["/proc", "/sys", "/dev"];

/// The least address space a server gets, whatever `capabilities.limits.memory_bytes`
/// says: a JIT runtime reserves far more address space than it uses (Node's V8 will
/// not start in 512 MiB of it), and an address-space limit is all rlimits can bound.
pub const SERVER_ADDRESS_SPACE: u64 = 4 * 1024 * 1024 * 1024;

/// A server's limits: a command's, with at least [`SERVER_ADDRESS_SPACE`].
fn server_limits(limits: Limits) -> Limits {
    Limits {
        memory_bytes: limits.memory_bytes.max(SERVER_ADDRESS_SPACE),
        ..limits
    }
}

impl Jail {
    /// Starts a server: confined as a command is, its standard input a pipe, and its
    /// `installation` readable and executable. Under `advisory`, a plain process in a
    /// group of its own that dies with mur. Keep the [`Confined`] as long as it runs.
    ///
    /// # Errors
    ///
    /// An installation path is unusable (not absolute, missing, `/`, the workdir or
    /// around it, inside it, in the records or a kernel view), the sandbox was never
    /// armed, or the server could not be started.
    pub async fn spawn_server(
        self: &Arc<Self>,
        req: &spawn::Request<'_>,
        installation: &Installation,
    ) -> Result<(spawn::Served, Confined), String> {
        let installed = self.installed(installation)?;
        if self.class == Class::Advisory {
            return serve_unconfined(req).await;
        }
        if !self.armed {
            return Err("the shell sandbox was not set up; the server was not started".into());
        }
        let own = self.own(installed, installation.own_proc).await?;
        let (launched, confined) = self.launch(req, spawn::Stdin::Piped, Some(own)).await?;
        let served = launched.served().map_err(|e| e.to_string())?;
        Ok((served, confined))
    }

    /// The server's own ruleset, and under `sealed` its own root. Built on a blocking
    /// thread: the rules for `/etc` may need a fresh walk.
    async fn own(&self, installed: Vec<Installed>, own_proc: bool) -> Result<Own, String> {
        let root = match (self.class, &self.scratch) {
            (Class::Sealed, Some(scratch)) => Some(scratch.clone()),
            (Class::Sealed, None) => {
                return Err(
                    "the sealed root has no scratch folder; the server was not started".into(),
                );
            }
            _ => None,
        };
        let kernel = self.kernel;
        let workdir = self.workdir.clone();
        let workdir_exec = self.workdir_exec;
        let proxy_port = self.proxy_port();
        let limits = server_limits(self.limits);

        let built = tokio::task::spawn_blocking(move || {
            let rules = filesystem::Rules {
                workdir: &workdir,
                workdir_exec,
                proxy_port,
            };
            let ruleset = filesystem::server_ruleset(&kernel, &rules, &installed)
                .map_err(|e| format!("the server's Landlock ruleset could not be built: {e}"))?;
            let root = match root {
                Some(scratch) => {
                    let root = sealed::Root::plan_with(&workdir, &scratch, &installed);
                    let root = match own_proc {
                        true => root.and_then(|r| r.with_proc(&scratch)),
                        false => root,
                    };
                    Some(root.map_err(|e| e.message)?)
                }
                None => None,
            };
            let steps = child::Steps::new(&limits, root);
            let steps = Some(if own_proc {
                steps.with_own_proc()
            } else {
                steps
            });
            Ok(Own { ruleset, steps })
        });
        built
            .await
            .map_err(|e| format!("the server's sandbox could not be built: {e}"))?
    }

    /// Each installation path checked and made canonical.
    fn installed(&self, installation: &Installation) -> Result<Vec<Installed>, String> {
        let workdir = real_or_same(&self.workdir);
        let records: Vec<PathBuf> = self.records.iter().map(|r| real_or_same(r)).collect();
        let mut installed = installation
            .paths
            .iter()
            .map(|path| checked(path, &workdir, &records))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(state) = &installation.state {
            let mut place = checked(state, &workdir, &records)?;
            if !place.dir {
                return Err(format!(
                    "the server's state folder {} is not a folder",
                    state.display()
                ));
            }
            place.writable = true;
            installed.push(place);
        }
        Ok(installed)
    }

    /// The program a server's `command` names: an absolute path that must exist and be
    /// executable, or a bare name looked up on the PATH the server gets ([`Jail::path`]
    /// of `env_path`), then in its installation's folders. A program that lies outside
    /// the system directories is named by its real path, which is what the sandbox
    /// grants (and all the sealed root holds); one inside keeps the name it was found by,
    /// since a multi-call binary reads it.
    ///
    /// # Errors
    ///
    /// A relative path, or nothing executable by that name.
    pub fn resolve_command(
        &self,
        command: &str,
        env_path: &str,
        installation: &Installation,
    ) -> Result<PathBuf, String> {
        if command.is_empty() {
            return Err("the server's command is empty".into());
        }
        if command.contains('/') {
            let path = Path::new(command);
            if !path.is_absolute() {
                return Err(format!(
                    "the server's command '{command}' is a relative path; name it by its \
                     absolute path, or by a bare name looked up on PATH"
                ));
            }
            executable(path).map_err(|why| format!("the server's command {command} {why}"))?;
            return Ok(runnable(path));
        }
        let path = self.path(env_path);
        let on_path = path
            .split(':')
            .filter(|d| d.starts_with('/'))
            .map(PathBuf::from);
        let folders: Vec<PathBuf> = on_path.chain(folders(installation)).collect();
        folders
            .iter()
            .map(|folder| folder.join(command))
            .find(|candidate| executable(candidate).is_ok())
            .map(|found| runnable(&found))
            .ok_or_else(|| {
                format!(
                    "the server's command '{command}' was not found on the PATH it gets \
                     ({path}) nor in its installation's folders; name it by its absolute \
                     path, or list its folder under install"
                )
            })
    }

    /// A server's environment: a command's ([`Jail::environment`]), with its
    /// installation's folders after the PATH's own, so that what the server starts by
    /// name (`#!/usr/bin/env node`) is found where it was.
    pub fn server_environment(
        &self,
        base: &[(String, String)],
        home: &Path,
        installation: &Installation,
    ) -> Vec<(String, String)> {
        let mut env = self.environment(base, home);
        if self.class == Class::Advisory {
            return env;
        }
        if let Some((_, path)) = env.iter_mut().rev().find(|(k, _)| k == "PATH") {
            for folder in folders(installation) {
                let folder = folder.to_string_lossy();
                if !path.split(':').any(|entry| entry == folder) {
                    path.push(':');
                    path.push_str(&folder);
                }
            }
        }
        env
    }
}

/// Starts a server as the user who started mur (`advisory`): a process group of its own,
/// which dropping the process kills, and death with mur.
async fn serve_unconfined(req: &spawn::Request<'_>) -> Result<(spawn::Served, Confined), String> {
    let enter: spawn::Enter = Box::new(|| {
        // SAFETY: prctl takes plain integers; the child only makes system calls.
        if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    });
    let launched = spawn::launch(req, spawn::Stdin::Piped, 0, enter)
        .await
        .map_err(|e| format!("failed to start '{}': {e}", req.program))?;
    let served = launched.served().map_err(|e| e.to_string())?;
    Ok((served, Confined { _cgroup: None }))
}

/// One installation path, refused unless it is absolute, exists and stays clear of
/// everything a server must not read or run from.
fn checked(path: &Path, workdir: &Path, records: &[PathBuf]) -> Result<Installed, String> {
    let refuse = |why: String| {
        Err(format!(
            "the server's installation path {} {why}",
            path.display()
        ))
    };
    if !path.is_absolute() {
        return refuse("is not absolute".into());
    }
    let real = match path.canonicalize() {
        Ok(real) => real,
        Err(e) => return refuse(format!("cannot be used: {e}")),
    };
    if real.parent().is_none() {
        return refuse("is the root directory, which would let the server read everything".into());
    }
    if workdir.starts_with(&real) {
        return refuse(format!(
            "is or holds the workdir ({}), which a server reaches as its workdir only",
            workdir.display()
        ));
    }
    if real.starts_with(workdir) {
        return refuse(format!(
            "lies inside the workdir ({}), where the capsule writes: what it wrote must not \
             become executable",
            workdir.display()
        ));
    }
    if let Some(kept) = records
        .iter()
        .find(|r| real.starts_with(r) || r.starts_with(&real))
    {
        return refuse(format!(
            "reaches the host's records ({}), which no guest may read",
            kept.display()
        ));
    }
    if let Some(view) = KERNEL_VIEWS.iter().find(|v| real.starts_with(v)) {
        return refuse(format!("lies in {view}, a kernel view of the host"));
    }
    match std::fs::metadata(&real) {
        Ok(meta) if meta.is_dir() || meta.is_file() => Ok(Installed {
            path: real,
            dir: meta.is_dir(),
            writable: false,
        }),
        Ok(_) => refuse("is neither a file nor a folder".into()),
        Err(e) => refuse(format!("cannot be used: {e}")),
    }
}

/// The folders an installation adds to where a server's programs are found: each
/// folder, and the folder of each file.
fn folders(installation: &Installation) -> Vec<PathBuf> {
    let mut folders: Vec<PathBuf> = Vec::new();
    for path in &installation.paths {
        let folder = if path.is_dir() {
            Some(path.as_path())
        } else {
            path.parent()
        };
        if let Some(folder) = folder.filter(|f| f.is_absolute())
            && !folders.iter().any(|f| f == folder)
        {
            folders.push(folder.to_path_buf());
        }
    }
    folders
}

/// `Ok` when `path` is a file someone may execute; else why not.
fn executable(path: &Path) -> Result<(), &'static str> {
    match std::fs::metadata(path) {
        Err(_) => Err("does not exist"),
        Ok(meta) if !meta.is_file() => Err("is not a file"),
        Ok(meta) if meta.permissions().mode() & 0o111 == 0 => Err("is not executable"),
        Ok(_) => Ok(()),
    }
}

/// The path to start a found program by (see [`Jail::resolve_command`]).
fn runnable(found: &Path) -> PathBuf {
    let Ok(real) = found.canonicalize() else {
        return found.to_path_buf();
    };
    let in_system = real.parent().is_some_and(filesystem::executable_dir);
    if in_system { found.to_path_buf() } else { real }
}

fn real_or_same(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests;
