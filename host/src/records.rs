//! The records budget (`capabilities.limits.max_records_bytes`): what the stores a
//! guest fills may hold in the host's records, apart from the trace (which has
//! `max_trace_bytes`) and the logs (each capped on its own). They are the threaded
//! conversations and the A2A task store's journal: a loop that chains tasks with huge
//! answers grows both. Every write there asks first; the one that would pass the budget
//! is not made, and the first refusal is kept so the session's next step ends it, as a
//! failed trace write does.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

pub struct Budget {
    limit: u64,
    /// What the covered files hold now, as their writers report it.
    used: AtomicU64,
    failure: Mutex<Option<String>>,
}

impl Budget {
    /// A budget of `limit` bytes, of which the covered files already hold `used`.
    pub fn new(limit: u64, used: u64) -> Self {
        Budget {
            limit,
            used: AtomicU64::new(used),
            failure: Mutex::new(None),
        }
    }

    /// A budget no write passes: for stores kept where no capsule's limits apply.
    pub fn unlimited() -> Self {
        Budget::new(u64::MAX, 0)
    }

    /// A file the budget covers goes from `old` to `new` bytes. `Err` (kept as the
    /// session's failure) when the growth would pass the limit: the caller must not
    /// write.
    pub fn resize(&self, what: &str, old: u64, new: u64) -> Result<(), String> {
        let grown = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                let after = used.saturating_sub(old).saturating_add(new);
                (new <= old || after <= self.limit).then_some(after)
            });
        match grown {
            Ok(_) => Ok(()),
            Err(used) => {
                let why = format!(
                    "{what} would take the capsule's records to {} bytes, over \
                     capabilities.limits.max_records_bytes ({})",
                    used.saturating_sub(old).saturating_add(new),
                    self.limit
                );
                let mut failure = self.failure.lock().unwrap_or_else(|p| p.into_inner());
                failure.get_or_insert_with(|| why.clone());
                Err(why)
            }
        }
    }

    /// A covered file found already on disk: it counts, whatever its size.
    pub fn add_existing(&self, bytes: u64) {
        self.used.fetch_add(bytes, Ordering::AcqRel);
    }

    /// The first refusal, once there was one.
    pub fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    #[cfg(test)]
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }
}

/// The bytes under `path` (a file or a folder), links not followed: what a covered store
/// holds when the session starts.
pub fn size_on_disk(path: &Path) -> u64 {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => crate::quota::measure(path, u64::MAX).bytes,
        Ok(meta) => meta.len(),
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_past_the_limit_is_refused_and_kept_shrinking_never_is() {
        let budget = Budget::new(100, 40);
        assert_eq!(budget.resize("a", 0, 60), Ok(()));
        assert_eq!(budget.used(), 100);
        assert_eq!(
            budget
                .resize("the conversation of context c", 10, 20)
                .unwrap_err(),
            "the conversation of context c would take the capsule's records to 110 bytes, \
             over capabilities.limits.max_records_bytes (100)"
        );
        assert_eq!(budget.used(), 100, "a refused write takes nothing");
        assert_eq!(budget.resize("b", 60, 0), Ok(()));
        assert_eq!(budget.used(), 40);
        assert!(budget.failure().unwrap().contains("context c"));
    }
}
