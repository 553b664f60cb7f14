//! A capsule's CPU weight for its shell commands, where the kernel offers a cgroup CPU
//! controller. A group weighs as one, however many processes its commands start, where
//! `nice` weighs each process alone; so a command that forks a hundred spinners still
//! gets only its capsule's weight. Where no controller can be had, `nice` alone is in
//! force (every process of a command runs at its capsule's `nice` either way).
//!
//! - cgroup v1: a group of the `cpu` hierarchy per session, under mur's own, with the
//!   weight as `cpu.shares`; each command joins it as it joins its pids group.
//! - cgroup v2: `cpu.weight` on the session's folder that holds every command's pids
//!   group (mur as root), where `cpu` is enabled for mur's own folder's children.

use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::pids;

/// The session's CPU group.
pub struct CpuGroup {
    dir: PathBuf,
    /// The file a command writes `0` to, to join (v1); v2 commands are in it already.
    join: Option<CString>,
}

impl CpuGroup {
    /// The group for commands at `nice`, or `None` where none can be had (or none is
    /// needed: a share of the whole machine keeps the host's weight).
    pub fn open(nice: i32, pids_session: Option<&Path>) -> Option<CpuGroup> {
        if nice <= 0 {
            return None;
        }
        match own_cpu_cgroup()? {
            (own, Version::V1) => v1(&own, nice),
            (own, Version::V2) => v2(&own, pids_session?, nice),
        }
    }

    pub fn join(&self) -> Option<&CStr> {
        self.join.as_deref()
    }
}

impl Drop for CpuGroup {
    fn drop(&mut self) {
        if self.join.is_some() {
            pids::remove_session(&self.dir);
        }
    }
}

/// What is in force here for a share below the whole machine, as the start line says.
pub fn in_force() -> &'static str {
    match own_cpu_cgroup() {
        Some((_, Version::V1)) => "a cgroup v1 cpu group per capsule (cpu.shares) and nice",
        // SAFETY: geteuid cannot fail and takes no arguments.
        Some((_, Version::V2)) if unsafe { libc::geteuid() } == 0 => {
            "a cgroup v2 group per capsule (cpu.weight) and nice"
        }
        _ => "nice (no cgroup CPU controller can be had here)",
    }
}

/// The CFS weight of `nice` against a process at 0, as the controller writes it:
/// `scale` is its weight for nice 0 (1024 for `cpu.shares`, 100 for `cpu.weight`).
fn weight(nice: i32, scale: f64, least: u64) -> u64 {
    let w = (scale / 1.25f64.powi(nice)).round();
    // Positive and at most `scale`, so the cast is exact.
    (w as u64).max(least)
}

fn v1(own: &Path, nice: i32) -> Option<CpuGroup> {
    pids::sweep_stale(own);
    static SESSIONS: AtomicU64 = AtomicU64::new(0);
    let n = SESSIONS.fetch_add(1, Ordering::Relaxed);
    let dir = own.join(format!("mur-{}-{n}", std::process::id()));
    std::fs::create_dir(&dir).ok()?;
    let group = CpuGroup {
        join: Some(CString::new(dir.join("tasks").as_os_str().as_bytes()).ok()?),
        dir,
    };
    let shares = weight(nice, 1024.0, 2);
    std::fs::write(group.dir.join("cpu.shares"), shares.to_string()).ok()?;
    Some(group)
}

fn v2(own: &Path, session: &Path, nice: i32) -> Option<CpuGroup> {
    let enabled = std::fs::read_to_string(own.join("cgroup.subtree_control")).ok()?;
    if !enabled.split_whitespace().any(|c| c == "cpu") {
        return None;
    }
    std::fs::write(
        session.join("cpu.weight"),
        weight(nice, 100.0, 1).to_string(),
    )
    .ok()?;
    Some(CpuGroup {
        dir: session.to_path_buf(),
        join: None,
    })
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Version {
    V1,
    V2,
}

/// mur's own folder in the hierarchy with the `cpu` controller.
fn own_cpu_cgroup() -> Option<(PathBuf, Version)> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    find_cpu(&mounts, &cgroups)
}

fn find_cpu(mounts: &str, cgroups: &str) -> Option<(PathBuf, Version)> {
    for line in mounts.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let Some(point) = left.split(' ').nth(4) else {
            continue;
        };
        let mut right = right.split(' ');
        let (Some(kind), Some(_source), Some(options)) = (right.next(), right.next(), right.next())
        else {
            continue;
        };
        let (path, version) = match kind {
            "cgroup" if options.split(',').any(|o| o == "cpu") => {
                (pids::own_path(cgroups, "cpu"), Version::V1)
            }
            "cgroup2" => (pids::own_path(cgroups, ""), Version::V2),
            _ => continue,
        };
        let Some(path) = path else {
            continue;
        };
        let dir = Path::new(point).join(path.trim_start_matches('/'));
        let writable = std::fs::metadata(&dir).is_ok_and(|m| !m.permissions().readonly());
        if writable {
            return Some((dir, version));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_weight_follows_the_kernels_nice_table() {
        assert_eq!(weight(0, 1024.0, 2), 1024);
        // nice 13: 1024 / 18.2.
        assert_eq!(weight(13, 1024.0, 2), 56);
        assert_eq!(weight(19, 1024.0, 2), 15);
        assert_eq!(weight(13, 100.0, 1), 5);
        assert_eq!(weight(19, 100.0, 1), 1);
    }

    #[test]
    fn the_cpu_hierarchy_is_found_for_v1_and_v2() {
        let cgroups = "2:cpuacct:/\n1:cpu:/me\n0::/unified\n";
        let v1 = "30 25 0:27 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n\
                  31 25 0:28 / /tmp rw - cgroup cgroup rw,cpu\n";
        let found = find_cpu(v1, cgroups);
        // The cpuacct line is passed over; /tmp/me does not exist, so nothing is found.
        assert_eq!(found, None);
        let v1 = "31 25 0:28 / /tmp rw - cgroup cgroup rw,cpu\n";
        assert_eq!(
            find_cpu(v1, "1:cpu:/\n"),
            Some((PathBuf::from("/tmp"), Version::V1))
        );
        let v2 = "40 25 0:30 / /tmp rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            find_cpu(v2, "0::/\n"),
            Some((PathBuf::from("/tmp"), Version::V2))
        );
    }

    #[test]
    fn a_command_joining_the_group_runs_under_its_weight() {
        // SAFETY: geteuid cannot fail and takes no arguments.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: only root makes cpu groups here");
            return;
        }
        let Some(group) = CpuGroup::open(13, None) else {
            eprintln!("skipped: no writable cgroup v1 cpu controller here");
            return;
        };
        let Some(join) = group.join().and_then(|j| j.to_str().ok()) else {
            return;
        };
        let shares = std::fs::read_to_string(group.dir.join("cpu.shares")).unwrap();
        assert_eq!(shares.trim(), "56");
        let script = format!("echo 0 > {join} && cat /proc/self/cgroup");
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", &script])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let name = group
            .dir
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(
            stdout
                .lines()
                .any(|l| l.contains(":cpu") && l.ends_with(&format!("/{name}"))),
            "{stdout}"
        );
        let dir = group.dir.clone();
        drop(group);
        assert!(!dir.exists());
    }
}
