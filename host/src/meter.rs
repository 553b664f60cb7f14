//! The workdir quota (`capabilities.limits.workdir_bytes`) while a WASM guest runs: its
//! writes are counted as they happen, and the one that would take the workdir past the
//! quota fails with an error the guest sees (`files` and `stream` are the metered
//! WASI). The check after each tool call (`Quota::exceeded`) stays: it also covers the
//! shell.
//!
//! A session has one `Meter`; each guest instance writes through an `Account` of it.
//! The meter keeps a mark: guests' writes may add up to it before the host must look
//! at the workdir again. A write within the mark costs one compare-and-swap. A write
//! past it makes the host measure the workdir (`quota::measure`, bounded by the quota)
//! and set the mark from what it found, so a guest that overwrites its own files is
//! not refused for bytes it never added; only a write that still does not fit fails.
//!
//! Marks count in bytes ever taken (`taken`), and a measurement's mark adds the bytes
//! whose writes had finished (`landed`) when its walk began: a write still in flight
//! then, whether the walk saw it or not, is counted again. So guests writing side by
//! side cannot pass the quota together between two looks (at worst a write is
//! refused that would have fitted, and the next look corrects it).
//!
//! What the meter does not see (the shell, the host's own files, a folder's or an
//! extent tree's blocks the filesystem adds) it learns at its next measurement: each
//! tool call starts with one (`Meter::account`), and `Meter::recount` asks for one.

mod files;
mod stream;

pub use files::FsView;
pub use files::add_to_linker;

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::quota::{self, Quota};

/// What a new file, directory or link costs: `quota::measure` counts every entry at
/// least one 4 KiB block.
pub const ENTRY_BYTES: u64 = 4096;

/// One session's count of what its WASM guests add to the workdir.
pub struct Meter {
    root: PathBuf,
    baseline: u64,
    limit: u64,
    /// `baseline + limit`: what the workdir may hold.
    allowed: u64,
    /// Bytes granted to guests' writes since the session started.
    taken: AtomicU64,
    /// Of those, the bytes whose write has finished (or failed).
    landed: AtomicU64,
    /// `taken` may grow to this before the host measures again. Zero until the first
    /// write: the first look is the first measurement.
    mark: AtomicU64,
    /// Counts what may have freed space (a file removed or truncated, a new call).
    freed: AtomicU64,
    /// One measurement at a time; holds `(freed, landed)` as they were when a
    /// measurement last refused a write: until either moves, the next refusal needs no
    /// walk, so a guest repeating a refused write costs no walk each time.
    look: Mutex<Option<(u64, u64)>>,
}

/// What a guest's operation costs, and how its refusal names it.
#[derive(Clone, Copy, Debug)]
pub struct Cost {
    pub bytes: u64,
    pub what: What,
}

#[derive(Clone, Copy, Debug)]
pub enum What {
    /// A write of this many bytes (what it costs may be less: see `files`).
    Write(u64),
    /// A file made larger without writing (`set-size`, a stream past the file's end).
    Grow,
    /// A new entry: "file", "directory" or "link".
    New(&'static str),
}

impl Cost {
    pub fn write(bytes: u64) -> Self {
        Cost {
            bytes,
            what: What::Write(bytes),
        }
    }

    pub fn grow(bytes: u64) -> Self {
        Cost {
            bytes,
            what: What::Grow,
        }
    }

    pub fn new_entry(kind: &'static str, bytes: u64) -> Self {
        Cost {
            bytes: bytes.max(ENTRY_BYTES),
            what: What::New(kind),
        }
    }
}

impl fmt::Display for Cost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.what {
            What::Write(n) => write!(f, "a write of {n} bytes"),
            What::Grow => write!(f, "growing a file by {} bytes", self.bytes),
            What::New(kind) => write!(f, "a new {kind}"),
        }
    }
}

/// A refused operation: the text the guest's error and the task's end carry, and what
/// the workdir would have held with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub text: String,
    pub bytes: u64,
}

impl Meter {
    pub fn new(quota: &Quota) -> Arc<Self> {
        Arc::new(Meter {
            root: quota.root.clone(),
            baseline: quota.baseline,
            limit: quota.limit,
            allowed: quota.baseline.saturating_add(quota.limit),
            taken: AtomicU64::new(0),
            landed: AtomicU64::new(0),
            mark: AtomicU64::new(0),
            freed: AtomicU64::new(0),
            look: Mutex::new(None),
        })
    }

    /// An account for one guest instance. A new call is also when the host looks
    /// again: since the last one, the shell (which writes past the meter) may have
    /// grown or emptied the workdir.
    pub fn account(self: &Arc<Self>) -> Account {
        self.recount();
        Account {
            meter: self.clone(),
            refused: Arc::new(OnceLock::new()),
        }
    }

    /// Something besides the guests changed the workdir (the host's own files, the
    /// shell): their next write that is not free measures it again.
    pub fn recount(&self) {
        self.mark.store(0, SeqCst);
        self.freed.fetch_add(1, SeqCst);
    }

    fn try_take(&self, n: u64) -> bool {
        let mark = self.mark.load(SeqCst);
        self.taken
            .fetch_update(SeqCst, SeqCst, |t| t.checked_add(n).filter(|&t| t <= mark))
            .is_ok()
    }

    /// The slow path: measures the workdir (on the caller's thread; the walk stops
    /// past the quota), moves the mark, and takes `cost` if it now fits.
    fn settle(&self, cost: Cost) -> Result<(), Refused> {
        let mut look = self.look.lock().unwrap_or_else(PoisonError::into_inner);
        // Another guest's measurement may have made room while this one waited.
        if self.try_take(cost.bytes) {
            return Ok(());
        }
        // Read before the walk: a write landing during it is counted twice, never none.
        let state = (self.freed.load(SeqCst), self.landed.load(SeqCst));
        if *look != Some(state) {
            let measured = quota::measure(&self.root, self.allowed);
            let mark = self
                .allowed
                .saturating_sub(measured.bytes)
                .saturating_add(state.1);
            self.mark.store(mark, SeqCst);
            if self.try_take(cost.bytes) {
                *look = None;
                return Ok(());
            }
        }
        *look = Some(state);
        Err(self.refusal(cost))
    }

    fn refusal(&self, cost: Cost) -> Refused {
        // What the workdir holds as counted (writes in flight included), with `cost`.
        let holds = self
            .allowed
            .saturating_add(self.taken.load(SeqCst))
            .saturating_sub(self.mark.load(SeqCst));
        let bytes = holds.saturating_add(cost.bytes);
        Refused {
            text: format!(
                "workdir size breach: {cost} was refused: the session workdir would grow by \
                 {} bytes, over capabilities.limits.workdir_bytes ({})",
                bytes.saturating_sub(self.baseline),
                self.limit
            ),
            bytes,
        }
    }
}

/// One guest instance's writes: the session's meter, and the first refusal the guest
/// met, which the host reports after the call even when the guest swallowed the error.
#[derive(Clone)]
pub struct Account {
    meter: Arc<Meter>,
    refused: Arc<OnceLock<Refused>>,
}

/// Bytes taken for a write: they count as landed when this goes, once the write has
/// finished (or failed, or was dropped).
#[must_use]
pub struct Landing<'a> {
    meter: &'a Meter,
    bytes: u64,
}

impl Landing<'_> {
    /// The write finishes later, out of sight of this guard: the caller lands them.
    fn defer(mut self) -> u64 {
        std::mem::take(&mut self.bytes)
    }
}

impl Drop for Landing<'_> {
    fn drop(&mut self) {
        self.meter.landed.fetch_add(self.bytes, SeqCst);
    }
}

impl Account {
    /// Takes `cost` for an operation about to run, measuring off the async threads
    /// when the mark does not cover it.
    pub async fn take(&self, cost: Cost) -> Result<Landing<'_>, Refused> {
        if cost.bytes == 0 || self.meter.try_take(cost.bytes) {
            return Ok(self.landing(cost.bytes));
        }
        let meter = self.meter.clone();
        let settled = tokio::task::spawn_blocking(move || meter.settle(cost))
            .await
            .unwrap_or_else(|e| {
                Err(Refused {
                    text: format!(
                        "workdir size breach: {cost} was refused: the workdir could not be \
                         measured ({e})"
                    ),
                    bytes: 0,
                })
            });
        self.settled(cost, settled)
    }

    /// `take` for a caller that cannot wait (a stream's `write`): a measurement runs
    /// on this thread.
    pub fn take_now(&self, cost: Cost) -> Result<Landing<'_>, Refused> {
        if cost.bytes == 0 || self.meter.try_take(cost.bytes) {
            return Ok(self.landing(cost.bytes));
        }
        let settled = self.meter.settle(cost);
        self.settled(cost, settled)
    }

    fn settled(&self, cost: Cost, settled: Result<(), Refused>) -> Result<Landing<'_>, Refused> {
        match settled {
            Ok(()) => Ok(self.landing(cost.bytes)),
            Err(refused) => {
                self.refused.get_or_init(|| refused.clone());
                Err(refused)
            }
        }
    }

    fn landing(&self, bytes: u64) -> Landing<'_> {
        Landing {
            meter: &self.meter,
            bytes,
        }
    }

    /// Bytes of writes `Landing::defer` handed over have finished.
    pub fn land(&self, bytes: u64) {
        self.meter.landed.fetch_add(bytes, SeqCst);
    }

    /// The guest removed, truncated or replaced something: a refusal may be lifted by
    /// measuring again.
    pub fn freed(&self) {
        self.meter.freed.fetch_add(1, SeqCst);
    }

    /// The first operation refused through this account.
    pub fn refusal(&self) -> Option<Refused> {
        self.refused.get().cloned()
    }
}

#[cfg(test)]
mod tests;
