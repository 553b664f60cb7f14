//! What the spend check costs per inference call (`cargo bench -p mur --bench spend`):
//! the reservation before the call and the settlement after it (`mur::spend`), each
//! ledger opened, locked (`flock`), read and written every time, as a session does.
//! Four setups, each timed call by call after a warm-up; the figures are the median
//! and the 99th percentile of one call's check, in microseconds:
//!
//! - `session`: `inference.max_session_tokens` alone, counted in memory;
//! - `machine`: with `spend.machine_tokens_per_day`, one ledger (`mur run`);
//! - `capsule+machine`: a capsule's `tokens_per_day` too, two ledgers (`mur serve`);
//! - `machine, 4 at once`: four sessions checking the same machine ledger at once, as
//!   four processes would, each call timed in its own thread.
//!
//! The ledgers are in `target/bench-spend/` (the disk `$MURMUR_HOME` is usually on);
//! their size is one line, so the page cache holds them.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mur::spend::{Capsule, Spend};

const WARM: usize = 2_000;
const CALLS: usize = 20_000;
/// What every call could use and what it then used: never near the ceilings.
const ASK: u64 = 1_500;
const USED: (u64, u64) = (900, 300);

fn dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("target")
        .join("bench-spend");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// One call's check, `n` times after the warm-up: each one's duration.
fn time(spend: &Spend, n: usize) -> Vec<Duration> {
    for _ in 0..WARM {
        let r = spend.reserve(ASK).unwrap();
        spend.settle(r, USED.0, USED.1).unwrap();
    }
    (0..n)
        .map(|_| {
            let started = Instant::now();
            let r = spend.reserve(ASK).unwrap();
            spend.settle(r, USED.0, USED.1).unwrap();
            started.elapsed()
        })
        .collect()
}

fn report(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    println!(
        "{what:<20} median {:>6.1} µs   p99 {:>6.1} µs   ({} calls)",
        at(0.5),
        at(0.99),
        samples.len()
    );
}

fn main() {
    let dir = dir();
    let lots = u64::MAX / 4;
    let session = Spend::new(Some(lots), None, None);
    report("session", time(&session, CALLS));

    let machine = Spend::new(Some(lots), None, Some((lots, dir.join("machine-day"))));
    report("machine", time(&machine, CALLS));

    let capsule = Capsule {
        tokens_per_day: Some(lots),
        ledger: dir.join("capsule-day"),
    };
    let both = Spend::new(
        Some(lots),
        Some(capsule),
        Some((lots, dir.join("machine-day"))),
    );
    report("capsule+machine", time(&both, CALLS));

    let shared = dir.join("shared-day");
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let spend = Spend::new(None, None, Some((lots, shared)));
                time(&spend, CALLS / 4)
            })
        })
        .collect();
    let samples = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    report("machine, 4 at once", samples);
}
