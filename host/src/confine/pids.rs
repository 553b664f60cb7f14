//! The process limit when mur runs as root. The kernel exempts the real root user from
//! `RLIMIT_NPROC`, user namespace or not, so for root each command gets a pids cgroup
//! of its own (`pids.max`), made under mur's own cgroup and removed when the command
//! ends. Any other user gets `RLIMIT_NPROC` in the command's user namespace, which
//! counts that namespace's processes only.
//!
//! The command joins its group itself, before it execs, as a single thread: on cgroup
//! v1 by writing `0` to `tasks`. Writing to `cgroup.procs` moves a whole thread group,
//! which takes a global lock whose writer waits for an RCU grace period (8–15 ms on a
//! quiet machine, for every command spaced more than a few ms from the last); moving
//! the calling thread alone skips that lock, and a process that has one thread (as the
//! child has, between clone and exec) is wholly moved by it. Cgroup v2 refuses to move
//! a single thread out of its domain, so there the command writes `cgroup.procs`.

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
    /// The file a process writes `0` to to join a group of this hierarchy.
    join: &'static str,
}

/// One command's cgroup, removed when dropped (the command has ended by then).
pub struct Group {
    dir: PathBuf,
    join: CString,
}

impl Group {
    /// The file the child writes `0` to to join the group, before it execs.
    pub fn join(&self) -> &std::ffi::CStr {
        &self.join
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
pub(super) fn remove_session(dir: &Path) {
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
pub(super) fn sweep_stale(own: &Path) {
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
        let (own, v1) =
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
            join: if v1 { "tasks" } else { "cgroup.procs" },
        }))
    }

    /// The session's folder, which holds every command's group.
    pub fn session_dir(&self) -> &Path {
        &self.session
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
            join: CString::new(dir.join(self.join).as_os_str().as_bytes())
                .map_err(std::io::Error::other)?,
            dir,
        };
        std::fs::write(group.dir.join("pids.max"), self.max.to_string())?;
        Ok(group)
    }
}

/// mur's own folder in the hierarchy that has the pids controller (cgroup v1's `pids`,
/// or v2's unified hierarchy where `pids` is enabled), and whether that is v1.
fn own_pids_cgroup() -> Option<(PathBuf, bool)> {
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
        let v1 = kind == "cgroup";
        if v1 || v2_has_pids(&dir) {
            return Some((dir, v1));
        }
    }
    None
}

/// The path of `/proc/self/cgroup`'s line for `controller` (`""` = the v2 line).
pub(super) fn own_path(cgroups: &str, controller: &str) -> Option<String> {
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

    #[test]
    fn a_process_writing_0_is_in_its_group_with_its_children_and_the_limit_holds() {
        // SAFETY: geteuid cannot fail and takes no arguments.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: only root gets a pids cgroup");
            return;
        }
        let Ok(Some(pids)) = Pids::open(3) else {
            eprintln!("skipped: no writable pids cgroup here");
            return;
        };
        let group = pids.group().unwrap();
        let join = group.join().to_str().unwrap().to_string();
        // The shell joins, then its children show where they are and four more try to
        // start: with the shell, one past the limit of three.
        let script = format!(
            "echo 0 > {join} && cat /proc/self/cgroup && \
             for i in 1 2 3 4; do sleep 0.3 & done; wait"
        );
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", &script])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        // `<own>/mur-<pid>-<n>/c<m>`, as /proc shows it: from the hierarchy's root.
        let session = pids.session.file_name().unwrap().to_string_lossy();
        let tail = format!(
            "/{session}/{}",
            group.dir.file_name().unwrap().to_string_lossy()
        );
        let pids_line = |l: &&str| l.contains(":pids:") || l.starts_with("0::");
        assert!(
            stdout.lines().filter(pids_line).any(|l| l.ends_with(&tail)),
            "{stdout} lacks {tail}"
        );
        assert!(!stderr.is_empty(), "a fork past the limit fails: {stdout}");
        drop(group);
        pids.release();
    }
}
