//! Guest memory: the cap on each instance (`capabilities.memory_bytes`) and, under
//! `mur serve`, the budget all of one capsule's instances share, so a tenant that
//! spreads a balloon over its loop, driver, tools and hooks is refused at its own
//! ceiling and never takes memory its neighbours were promised.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};

/// How much memory an instance may have.
#[derive(Clone)]
pub struct Cap {
    /// Each instance's own linear memory, at most.
    pub each: u64,
    /// What every instance of the capsule draws from together.
    pub shared: Option<Arc<Budget>>,
    /// What one call may hand the host (wasmtime's hostcall fuel: the bytes of the host
    /// structures a guest's strings and lists become), from the capsule's limits.
    pub hostcall_bytes: u64,
}

impl Cap {
    /// Charges `bytes` of host memory a guest made the host hold to the capsule's
    /// shared budget (under `mur serve`), for as long as the charge lives. `Err` when
    /// the budget cannot hold them: the tenant fails alone, its neighbours keep theirs.
    pub fn charge(&self, bytes: u64, what: &str) -> Result<Charge, String> {
        let Some(shared) = &self.shared else {
            return Ok(Charge::default());
        };
        if shared.take(bytes) {
            return Ok(Charge {
                budget: Some(shared.clone()),
                bytes,
            });
        }
        Err(format!(
            "{what} of {bytes} bytes does not fit in the capsule's memory budget ({} of {} \
             bytes in use)",
            shared.used(),
            shared.limit
        ))
    }
}

/// Host memory charged to a capsule's budget, given back when dropped.
#[derive(Default, Debug)]
pub struct Charge {
    budget: Option<Arc<Budget>>,
    bytes: u64,
}

impl Drop for Charge {
    fn drop(&mut self) {
        if let Some(budget) = &self.budget {
            budget.give_back(self.bytes);
        }
    }
}

/// One capsule's memory across its instances: what they hold now, and the ceiling.
#[derive(Debug)]
pub struct Budget {
    limit: u64,
    used: AtomicU64,
}

impl Budget {
    pub fn new(limit: u64) -> Arc<Self> {
        Arc::new(Budget {
            limit,
            used: AtomicU64::new(0),
        })
    }

    /// The linear memory the capsule's live instances hold.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Takes `bytes` if they fit under the ceiling.
    fn take(&self, bytes: u64) -> bool {
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|total| *total <= self.limit)
            })
            .is_ok()
    }

    fn give_back(&self, bytes: u64) {
        let _ = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                Some(used.saturating_sub(bytes))
            });
    }
}

/// A store's limiter: its own cap first, then the capsule's shared budget. What the
/// store took goes back to the budget when the store is dropped.
pub struct Limiter {
    own: StoreLimits,
    shared: Option<Arc<Budget>>,
    taken: u64,
    /// The size a refused growth asked for, the first time one was refused: a guest's
    /// allocator usually traps right after (`unreachable`), and this tells that trap
    /// from any other.
    refused: Option<u64>,
    /// `Cap::hostcall_bytes`, for `sandbox::limit` to hand wasmtime.
    pub hostcall_bytes: u64,
}

impl Limiter {
    pub fn new(cap: &Cap) -> Self {
        Limiter {
            own: StoreLimitsBuilder::new()
                .memory_size(usize::try_from(cap.each).unwrap_or(usize::MAX))
                .instances(64)
                .build(),
            shared: cap.shared.clone(),
            taken: 0,
            refused: None,
            hostcall_bytes: cap.hostcall_bytes,
        }
    }

    /// The linear memory size the first refused growth asked for, if one was refused.
    pub fn refused(&self) -> Option<u64> {
        self.refused
    }

    fn refuse(&mut self, desired: usize) -> wasmtime::Result<bool> {
        self.refused.get_or_insert(desired as u64);
        Ok(false)
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if !self.own.memory_growing(current, desired, maximum)? {
            return self.refuse(desired);
        }
        let Some(shared) = &self.shared else {
            return Ok(true);
        };
        let more = desired.saturating_sub(current) as u64;
        if !shared.take(more) {
            return self.refuse(desired);
        }
        self.taken += more;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.own.table_growing(current, desired, maximum)
    }

    fn instances(&self) -> usize {
        self.own.instances()
    }

    fn tables(&self) -> usize {
        self.own.tables()
    }

    fn memories(&self) -> usize {
        self.own.memories()
    }
}

impl Drop for Limiter {
    fn drop(&mut self) {
        if let Some(shared) = &self.shared {
            shared.give_back(self.taken);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_share_the_budget_and_return_it_when_dropped() {
        let budget = Budget::new(3 << 16);
        let cap = Cap {
            each: 2 << 16,
            shared: Some(budget.clone()),
            hostcall_bytes: 1 << 20,
        };
        let mut a = Limiter::new(&cap);
        let mut b = Limiter::new(&cap);
        assert!(a.memory_growing(0, 2 << 16, None).unwrap());
        assert_eq!(a.refused(), None);
        // Its own cap refuses more, whatever the budget holds.
        assert!(!a.memory_growing(2 << 16, 3 << 16, None).unwrap());
        assert_eq!(a.refused(), Some(3 << 16), "the refusal is remembered");
        assert!(b.memory_growing(0, 1 << 16, None).unwrap());
        // The budget refuses what each cap would allow.
        assert!(!b.memory_growing(1 << 16, 2 << 16, None).unwrap());
        assert_eq!(budget.used(), 3 << 16);
        drop(a);
        assert_eq!(budget.used(), 1 << 16);
        assert!(b.memory_growing(1 << 16, 2 << 16, None).unwrap());
    }

    #[test]
    fn host_memory_is_charged_until_the_charge_goes() {
        let budget = Budget::new(100);
        let cap = Cap {
            each: 1,
            shared: Some(budget.clone()),
            hostcall_bytes: 1,
        };
        let held = cap.charge(60, "artifact").unwrap();
        assert_eq!(budget.used(), 60);
        assert_eq!(
            cap.charge(41, "answer").unwrap_err(),
            "answer of 41 bytes does not fit in the capsule's memory budget (60 of 100 bytes \
             in use)"
        );
        drop(held);
        assert_eq!(budget.used(), 0);
        let alone = Cap {
            shared: None,
            ..cap
        };
        assert!(
            alone.charge(u64::MAX, "x").is_ok(),
            "mur run has no shared budget"
        );
    }
}
