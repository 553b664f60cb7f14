//! What a capsule idling between tasks gives back: the pages of `mur`'s own code and
//! constants that only its launch touched (the command line, the manifest, the
//! engine's set-up, loading and linking the components), and the heap the launch freed.
//!
//! The code and constants are never written, so dropping them from the process's page
//! tables loses nothing: the kernel keeps them in its page cache, shared with every
//! other `mur` on the machine, and a page the next task runs faults back in from there
//! (a minor fault, no disk read while the page stays cached). Only the segments the
//! program maps without write permission are touched: the relocated ones (the GOT,
//! vtables) hold this process's own copies and are left alone.

use std::time::Duration;

/// How long a capsule waits with nothing to do before it gives its pages back: a task
/// sent right after the last one ends finds them still mapped.
pub const AFTER: Duration = Duration::from_secs(1);

/// What one shedding gave back, for the log.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Shed {
    /// Bytes of the program's read-only and executable segments unmapped.
    pub unmapped: usize,
    /// Whether the allocator returned free heap to the kernel.
    pub trimmed: bool,
    /// The process's resident memory (`VmRSS`, KiB) before and after, when readable.
    pub resident_kib: Option<(u64, u64)>,
}

impl std::fmt::Display for Shed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "idle: gave back the pages only the launch used")?;
        if let Some((before, after)) = self.resident_kib {
            write!(f, ": resident memory {before} KiB -> {after} KiB")?;
        }
        Ok(())
    }
}

/// Waits for `waiting`; once it has waited [`AFTER`], sheds, tells `shed_done` what it
/// gave back, and waits on.
pub async fn shedding<T>(waiting: impl Future<Output = T>, shed_done: impl FnOnce(Shed)) -> T {
    let mut waiting = std::pin::pin!(waiting);
    tokio::select! {
        done = &mut waiting => return done,
        () = tokio::time::sleep(AFTER) => {}
    }
    shed_done(shed());
    waiting.await
}

/// Gives back what an idle capsule does not need. Safe at any time: the pages come back
/// on their next use.
pub fn shed() -> Shed {
    let before = resident_kib();
    let unmapped = read_only_segments()
        .into_iter()
        .filter(|&(start, len)| {
            // SAFETY: each range is whole pages of a segment the program maps without
            // write permission (never written, by the loader or anyone), so its pages
            // equal the file's and MADV_DONTNEED only drops the mappings.
            unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_DONTNEED) == 0 }
        })
        .map(|(_, len)| len)
        .sum();
    let trimmed = trim_heap();
    Shed {
        unmapped,
        trimmed,
        resident_kib: before.zip(resident_kib()),
    }
}

/// `VmRSS` of this process, in KiB.
fn resident_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_heap() -> bool {
    // SAFETY: malloc_trim only returns free memory of the allocator's arenas.
    unsafe { libc::malloc_trim(0) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_heap() -> bool {
    false
}

/// The main program's loaded segments without write permission, as whole pages:
/// (start address, length).
fn read_only_segments() -> Vec<(usize, usize)> {
    let mut found: Vec<(usize, usize)> = Vec::new();
    // SAFETY: the callback only reads the headers the loader hands it, and stops after
    // the first object, which is the main program.
    unsafe {
        libc::dl_iterate_phdr(Some(first_object), (&raw mut found).cast::<libc::c_void>());
    }
    found
}

unsafe extern "C" fn first_object(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: `data` is the Vec `read_only_segments` passed; `info` and its headers are
    // valid for this call, per dl_iterate_phdr.
    let (found, info) = unsafe { (&mut *data.cast::<Vec<(usize, usize)>>(), &*info) };
    let headers = if info.dlpi_phdr.is_null() {
        &[][..]
    } else {
        // SAFETY: dlpi_phdr points at dlpi_phnum headers.
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
    };
    let page = page_size();
    for header in headers {
        if header.p_type != libc::PT_LOAD || header.p_flags & libc::PF_W != 0 {
            continue;
        }
        let start = (info.dlpi_addr as usize).wrapping_add(header.p_vaddr as usize);
        if let Some(range) = whole_pages(start, header.p_memsz as usize, page) {
            found.push(range);
        }
    }
    // Non-zero stops the walk: the first object is the main program.
    1
}

/// The whole pages inside [start, start + len).
fn whole_pages(start: usize, len: usize, page: usize) -> Option<(usize, usize)> {
    let first = start.checked_add(page - 1)? / page * page;
    let end = start.checked_add(len)? / page * page;
    (end > first).then(|| (first, end - first))
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|&s| s > 0)
        .unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resident_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("RssFile:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .unwrap()
    }

    #[test]
    fn only_whole_pages_inside_a_segment_are_given_back() {
        assert_eq!(whole_pages(4096, 8192, 4096), Some((4096, 8192)));
        assert_eq!(whole_pages(100, 8192, 4096), Some((4096, 4096)));
        assert_eq!(whole_pages(100, 4000, 4096), None);
        assert_eq!(whole_pages(usize::MAX - 10, 100, 4096), None);
    }

    #[test]
    fn shedding_gives_back_the_programs_pages_and_the_program_runs_on() {
        let segments = read_only_segments();
        assert!(!segments.is_empty(), "the program has read-only segments");
        let before = resident_kib();
        let shed = shed();
        let after = resident_kib();
        assert!(shed.unmapped > 0, "{shed:?}");
        assert!(
            after < before,
            "file-backed RSS went from {before} to {after} KiB"
        );
        // The code and constants come back as they are used.
        let text = format!("{:?}", serde_json::json!({"still": ["here", 1]}));
        assert!(text.contains("still"));
    }
}
