//! The process limit when mur runs as root. The kernel exempts the real root user from
//! `RLIMIT_NPROC`, user namespace or not, so for root each command gets a pids cgroup
//! of its own (`pids.max`), made under mur's own cgroup and removed when the command
//! ends. Any other user gets `RLIMIT_NPROC` in the command's user namespace, which
//! counts that namespace's processes only.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::Error;

/// The session's folder in the pids hierarchy; each command gets a child of it.
pub struct Pids {
    session: PathBuf,
    /// Processes per command.
    max: u64,
    next: AtomicU64,
}

/// One command's cgroup, removed when dropped (the command has ended by then).
pub struct Group {
    dir: PathBuf,
    procs: CString,
}

impl Group {
    /// `cgroup.procs`, which the child writes its pid to before it unshares.
    pub fn procs(&self) -> &std::ffi::CStr {
        &self.procs
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // The kernel empties the group as the command's last process is reaped; a
        // process still exiting keeps it busy a moment.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
}

impl Drop for Pids {
    fn drop(&mut self) {
        self.release();
    }
}

/// Removes `dir`'s command groups, then `dir`: a cgroup goes with `rmdir` once it holds
/// no process, and not before.
fn remove_session(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name.to_string_lossy().starts_with('c') && entry.path().is_dir() {
                let _ = std::fs::remove_dir(entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// The session folders of mur processes that are gone (killed outright, say).
fn sweep_stale(own: &Path) {
    let Ok(entries) = std::fs::read_dir(own) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        // `mur-<pid>-<session>`, or `mur-<pid>` as older versions named it.
        let pid = name
            .to_str()
            .and_then(|n| n.strip_prefix("mur-"))
            .map(|n| n.split_once('-').map_or(n, |(pid, _)| pid));
        if let Some(pid) = pid.filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
            && !Path::new("/proc").join(pid).exists()
        {
            remove_session(&entry.path());
        }
    }
}

impl Pids {
    /// For root: the session's pids cgroup. `None` for any other user.
    ///
    /// # Errors
    ///
    /// `E-CAP-015` when mur runs as root and no pids cgroup can be made.
    pub fn open(processes: u64) -> Result<Option<Pids>, Error> {
        // SAFETY: geteuid cannot fail and takes no arguments.
        if unsafe { libc::geteuid() } != 0 {
            return Ok(None);
        }
        let refuse = |why: String| {
            Error::new(
                "E-CAP-015",
                format!(
                    "running as root, shell commands need a pids cgroup to bound their \
                     processes (root ignores RLIMIT_NPROC), and {why}"
                ),
            )
            .hint(
                "run mur as an ordinary user, or mount the cgroup pids controller writable; \
                 or declare 'capabilities.containment: advisory' to run shell commands unconfined",
            )
        };
        let own =
            own_pids_cgroup().ok_or_else(|| refuse("no pids controller is mounted".into()))?;
        sweep_stale(&own);
        // One folder per session, not per process: `mur serve` runs many sessions, and
        // each numbers its commands' groups from zero and removes its folder at its end.
        static SESSIONS: AtomicU64 = AtomicU64::new(0);
        let n = SESSIONS.fetch_add(1, Ordering::Relaxed);
        let session = own.join(format!("mur-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&session)
            .map_err(|e| refuse(format!("{} could not be made: {e}", session.display())))?;
        Ok(Some(Pids {
            session,
            max: processes,
            next: AtomicU64::new(0),
        }))
    }

    /// Removes the session's folder; idempotent.
    pub fn release(&self) {
        remove_session(&self.session);
    }

    /// A fresh cgroup for one command.
    pub fn group(&self) -> std::io::Result<Group> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let dir = self.session.join(format!("c{n}"));
        std::fs::create_dir(&dir)?;
        let group = Group {
            procs: CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
                .map_err(std::io::Error::other)?,
            dir,
        };
        std::fs::write(group.dir.join("pids.max"), self.max.to_string())?;
        Ok(group)
    }
}

/// mur's own folder in the hierarchy that has the pids controller (cgroup v1's `pids`,
/// or v2's unified hierarchy where `pids` is enabled).
fn own_pids_cgroup() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    for line in mounts.lines() {
        let (left, right) = line.split_once(" - ")?;
        let point = left.split(' ').nth(4)?;
        let mut right = right.split(' ');
        let (kind, _source, options) = (right.next()?, right.next()?, right.next()?);
        let path = match kind {
            "cgroup" if options.split(',').any(|o| o == "pids") => own_path(&cgroups, "pids"),
            "cgroup2" => own_path(&cgroups, ""),
            _ => None,
        };
        let Some(path) = path else {
            continue;
        };
        let dir = Path::new(point).join(path.trim_start_matches('/'));
        let usable = kind == "cgroup" || v2_has_pids(&dir);
        if usable {
            return Some(dir);
        }
    }
    None
}

/// The path of `/proc/self/cgroup`'s line for `controller` (`""` = the v2 line).
fn own_path(cgroups: &str, controller: &str) -> Option<String> {
    cgroups.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let matches = if controller.is_empty() {
            controllers.is_empty()
        } else {
            controllers.split(',').any(|c| c == controller)
        };
        matches.then(|| path.to_string())
    })
}

fn v2_has_pids(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.subtree_control"))
        .is_ok_and(|enabled| enabled.split_whitespace().any(|c| c == "pids"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_own_path_is_read_per_controller() {
        let cgroups = "9:name=systemd:/\n8:pids:/user/7\n4:memory:/x\n0::/unified/me\n";
        assert_eq!(own_path(cgroups, "pids").as_deref(), Some("/user/7"));
        assert_eq!(own_path(cgroups, "").as_deref(), Some("/unified/me"));
        assert_eq!(own_path(cgroups, "cpu"), None);
    }
}
