//! CPU: what each capsule's guests use, and the share they are held to when something
//! else waits for a processor.
//!
//! Guest code yields to the runtime at every epoch tick, so a spinning guest never
//! holds a runtime thread. Each store's [`Meter`] charges its capsule's [`Account`]
//! with the thread CPU time its guest code used, measured at the edges of guest code
//! (entering and leaving it, calling the host, each tick). Under `mur serve`, the
//! [`Scheduler`] gives each account an allotment every sampling window, and a guest
//! past its allotment sleeps at its next tick, holding no thread, until its capsule is
//! back within it. Only the capsule over its share is slowed.

mod account;
mod clock;
mod meter;
mod pressure;
mod scheduler;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use account::Account;
pub use meter::Meter;
pub use scheduler::Scheduler;

/// How often guest code yields, and how often its CPU time is read: 10 ms, as Spin
/// ticks. `MUR_TICK_MS` sets another period, for the benchmark that measures what the
/// yields cost.
pub fn tick() -> Duration {
    static TICK: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *TICK.get_or_init(|| {
        let ms = std::env::var("MUR_TICK_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|ms| (1..=3_600_000).contains(ms))
            .unwrap_or(10);
        Duration::from_millis(ms)
    })
}

/// Epoch ticks so far: the meters tell from it whether a guest waited between two
/// readings.
static TICKS: AtomicU64 = AtomicU64::new(0);

/// Called by the engine's epoch thread at each tick.
pub fn ticked() {
    TICKS.fetch_add(1, Ordering::Relaxed);
}

fn ticks() -> u64 {
    TICKS.load(Ordering::Relaxed)
}

/// Millicores: thousandths of one processor, the unit of shares and allotments.
pub type Millicores = u32;

/// An allotment no capsule is held to.
pub const UNLIMITED: Millicores = u32::MAX;

/// The `nice` value that gives a confined command of a capsule with `share`
/// millicores, on a machine of `cores`, the kernel weight of that share against the
/// host's own threads: each step of `nice` is a factor of 1.25 in CFS weight.
pub fn nice_for(share: Millicores, cores: u32) -> i32 {
    if share == UNLIMITED || share == 0 {
        return if share == 0 { 19 } else { 0 };
    }
    let machine = f64::from(cores.max(1)) * 1000.0;
    let ratio = machine / f64::from(share);
    if ratio <= 1.0 {
        return 0;
    }
    let steps = (ratio.ln() / 1.25f64.ln()).round();
    // Bounded to nice's range; the cast cannot truncate past it.
    steps.clamp(0.0, 19.0) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_of_the_whole_machine_keeps_the_host_priority() {
        assert_eq!(nice_for(2000, 2), 0);
        assert_eq!(nice_for(4000, 2), 0);
        assert_eq!(nice_for(UNLIMITED, 2), 0);
    }

    #[test]
    fn a_small_share_maps_to_a_matching_kernel_weight() {
        // 100 millicores of 2 cores is a twentieth: 1.25^13 ≈ 18.2.
        assert_eq!(nice_for(100, 2), 13);
        // Half the machine: 1.25^3 ≈ 1.95.
        assert_eq!(nice_for(1000, 2), 3);
        assert_eq!(nice_for(1, 64), 19);
        assert_eq!(nice_for(0, 2), 19);
    }
}
