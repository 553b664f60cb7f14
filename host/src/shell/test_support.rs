//! Scratch workdirs, requests and process checks for the shell's unit tests.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Semaphore;

use super::logs::unix_ms;
use super::{ShellOutcome, ShellRequest, run};
use crate::confine::Jail;

static DIR_SEQ: AtomicU64 = AtomicU64::new(0);

/// Removes a test's scratch directory when the test ends, pass or fail.
pub(super) struct Scratch(pub(super) PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh, canonical scratch directory (canonical so `pwd` output compares equal).
pub(super) fn scratch_dir() -> Scratch {
    let seq = DIR_SEQ.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "mur-shell-test-{}-{}-{seq}",
        std::process::id(),
        unix_ms()
    ));
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    Scratch(dir.canonicalize().expect("canonicalize scratch dir"))
}

pub(super) fn host_path() -> String {
    std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_string())
}

pub(super) fn request(binary: &str, command: &str) -> (Scratch, ShellRequest) {
    let scratch = scratch_dir();
    let root = scratch.0.clone();
    let workdir = root.join("work");
    std::fs::create_dir_all(&workdir).expect("create workdir");
    let req = ShellRequest {
        binary: binary.to_string(),
        command: command.to_string(),
        home: workdir.join(".capsule-home"),
        logs_dir: workdir.join("logs"),
        workdir,
        timeout: Duration::from_secs(20),
        env: vec![("PATH".to_string(), host_path())],
        jail: Arc::new(Jail::advisory(&root)),
        slots: Arc::new(Semaphore::new(8)),
    };
    (scratch, req)
}

/// Puts `req`'s workdir under a quota of `limit` bytes past what it holds now; returns
/// the most the workdir may then hold.
pub(super) fn with_quota(req: &ShellRequest, limit: u64) -> u64 {
    let baseline = crate::quota::measure(&req.workdir, u64::MAX).bytes;
    req.jail.watch().set_quota(crate::quota::Quota {
        root: req.workdir.clone(),
        baseline,
        limit,
    });
    baseline + limit
}

/// A command that writes a 1 MiB file every 50 ms, 200 of them unless stopped.
pub(super) const FILLS_THE_DISK: &str =
    "for i in $(seq 200); do head -c 1048576 /dev/zero > f$i; sleep 0.05; done";

pub(super) async fn run_ok(req: &ShellRequest) -> ShellOutcome {
    run(req).await.expect("command should start")
}

/// A process counts as gone once it no longer exists or is a zombie nobody reaped yet
/// (a container's pid 1 may never reap), since a zombie runs nothing.
fn process_gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

pub(super) async fn wait_gone(pids: &[String]) -> bool {
    for _ in 0..50 {
        if pids.iter().all(|pid| process_gone(pid)) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

pub(super) async fn read_pids(path: &Path, expected: usize) -> Vec<String> {
    for _ in 0..100 {
        let pids: Vec<String> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        if pids.len() >= expected {
            return pids;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("pid file {} never got {expected} lines", path.display());
}
