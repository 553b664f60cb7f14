//! The workdir quota (`capabilities.limits.workdir_bytes`): how much a session may add
//! to its workdir, measured after each tool call against what the workdir held when the
//! session started (a `--workdir` may already hold a large project). The walk never follows a symlink (a
//! link counts as itself, wherever it points) and stops as soon as the quota is passed,
//! so a hostile tree costs at most one quota's worth of entries to measure.

use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, MetadataExt};

/// Every entry costs at least one filesystem block, so a million empty files breach
/// the quota like the disk space they take, and the walk is bounded by
/// `quota / MIN_ENTRY_BYTES` entries.
const MIN_ENTRY_BYTES: u64 = 4096;

/// What the walk found: the bytes counted, and whether it stopped past `quota`.
#[derive(Debug, PartialEq, Eq)]
pub struct Measured {
    pub bytes: u64,
    pub over: bool,
}

/// Measures `root` against `quota`. An entry that cannot be read (removed while the walk
/// runs, or unreadable) counts as one block and is not descended into. Every folder is
/// opened beneath the one above it, so a folder a guest swaps for a link while the walk
/// runs cannot lead it out of the workdir.
pub fn measure(root: &Path, quota: u64) -> Measured {
    let mut bytes = 0u64;
    let Ok(top) = Dir::open_ambient_dir(root, ambient_authority()) else {
        return Measured { bytes, over: false };
    };
    let mut pending = vec![top];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = dir.entries() else {
            continue;
        };
        for entry in entries {
            // The entry's own metadata: a link is measured as the link, never its target.
            match entry.and_then(|e| e.metadata().map(|m| (e, m))) {
                Ok((entry, meta)) => {
                    bytes = bytes.saturating_add(cost(&meta));
                    if meta.is_dir() {
                        match entry.open_dir() {
                            Ok(sub) => pending.push(sub),
                            Err(_) => bytes += MIN_ENTRY_BYTES,
                        }
                    }
                }
                Err(_) => bytes += MIN_ENTRY_BYTES,
            }
            if bytes > quota {
                return Measured { bytes, over: true };
            }
        }
    }
    Measured { bytes, over: false }
}

/// A session's workdir quota: the workdir, what it held when the session started, and
/// how much it may grow past that.
#[derive(Clone, Debug)]
pub struct Quota {
    pub root: PathBuf,
    pub baseline: u64,
    /// `capabilities.limits.workdir_bytes`.
    pub limit: u64,
}

impl Quota {
    /// Measures the workdir off the async threads: `Some` past the quota. A walk that
    /// failed reports nothing.
    pub async fn exceeded(&self) -> Option<Measured> {
        let root = self.root.clone();
        let allowed = self.baseline.saturating_add(self.limit);
        tokio::task::spawn_blocking(move || measure(&root, allowed))
            .await
            .ok()
            .filter(|m| m.over)
    }

    /// Whether the host may write `new_bytes` at `rel` in the workdir, replacing what is
    /// there (`old_bytes`): the host's own files count against the quota like any
    /// other, so a loop cannot grow the workdir through the answers it makes the host
    /// write. Measured now, on the caller's thread: the walk stops past the quota.
    pub fn admit(&self, rel: &str, old_bytes: u64, new_bytes: u64) -> Result<(), String> {
        let allowed = self.baseline.saturating_add(self.limit);
        let measured = measure(&self.root, allowed);
        let after = measured
            .bytes
            .saturating_sub(old_bytes)
            .saturating_add(new_bytes.max(MIN_ENTRY_BYTES));
        if measured.over || after > allowed {
            return Err(format!(
                "writing {rel} ({new_bytes} bytes) would take the session workdir past \
                 capabilities.limits.workdir_bytes ({}): it would grow by at least {} bytes",
                self.limit,
                after.saturating_sub(self.baseline)
            ));
        }
        Ok(())
    }

    /// What a breach is reported as: see `breach_text`.
    pub fn breach_text(&self, measured: &Measured) -> String {
        breach_text(measured, self.baseline, self.limit)
    }
}

/// The larger of the apparent size and the blocks on disk, at least one block: a sparse
/// file counts what it claims, a small file what it occupies.
fn cost(meta: &cap_std::fs::Metadata) -> u64 {
    meta.len()
        .max(meta.blocks().saturating_mul(512))
        .max(MIN_ENTRY_BYTES)
}

/// The text a breaching call's result becomes and the task's final status carries.
pub fn breach_text(measured: &Measured, baseline: u64, quota: u64) -> String {
    format!(
        "workdir size breach: the session workdir grew by at least {} bytes, over \
         capabilities.limits.workdir_bytes ({quota})",
        measured.bytes.saturating_sub(baseline)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn scratch() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mur-quota-{}", crate::ids::event()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn counts_files_and_dirs_at_least_a_block_each() {
        let dir = scratch();
        std::fs::create_dir(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/a"), vec![1u8; 10_000]).unwrap();
        std::fs::write(dir.join("b"), "x").unwrap();
        let m = measure(&dir, u64::MAX);
        assert!(!m.over);
        // sub (a block), a (10,000 bytes, 12,288 on disk at most), b (a block).
        assert!(m.bytes >= 10_000 + 2 * MIN_ENTRY_BYTES, "{m:?}");
        assert!(m.bytes <= 12_288 + 2 * MIN_ENTRY_BYTES, "{m:?}");
    }

    #[test]
    fn a_host_write_is_admitted_only_within_the_quota() {
        let dir = scratch();
        std::fs::write(dir.join("a"), vec![0u8; 8192]).unwrap();
        let quota = Quota {
            root: dir.clone(),
            baseline: 0,
            limit: 5 * MIN_ENTRY_BYTES,
        };
        assert_eq!(quota.admit("out/r.txt", 0, 100), Ok(()));
        // Replacing a file gives its bytes back.
        assert_eq!(quota.admit("a", 8192, 12_000), Ok(()));
        assert_eq!(
            quota.admit("out/r.txt", 0, 20_000).unwrap_err(),
            "writing out/r.txt (20000 bytes) would take the session workdir past \
             capabilities.limits.workdir_bytes (20480): it would grow by at least 28192 bytes"
        );
    }

    #[test]
    fn does_not_follow_symlinks_and_stops_past_the_quota() {
        let dir = scratch();
        let outside = scratch();
        std::fs::write(outside.join("big"), vec![0u8; 1 << 20]).unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("link")).unwrap();
        std::os::unix::fs::symlink(outside.join("big"), dir.join("file-link")).unwrap();
        let m = measure(&dir, u64::MAX);
        assert_eq!(m.bytes, 2 * MIN_ENTRY_BYTES, "links count as themselves");
        for n in 0..10 {
            std::fs::write(dir.join(format!("f{n}")), "").unwrap();
        }
        let m = measure(&dir, 3 * MIN_ENTRY_BYTES);
        assert_eq!(
            m,
            Measured {
                bytes: 4 * MIN_ENTRY_BYTES,
                over: true
            }
        );
        assert_eq!(
            breach_text(&m, MIN_ENTRY_BYTES, 2 * MIN_ENTRY_BYTES),
            "workdir size breach: the session workdir grew by at least 12288 bytes, over \
             capabilities.limits.workdir_bytes (8192)"
        );
    }
}
