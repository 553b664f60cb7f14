//! Whether the host's own work waited for a processor lately: the time the threads
//! that serve the wire (the main runtime's workers) spent runnable and not running,
//! from the scheduler's statistics (`/proc/self/task/<tid>/schedstat`). Where the
//! kernel keeps none, the machine's pressure stall information (`/proc/pressure/cpu`)
//! stands in, else a count of runnable tasks against the processors.

use std::collections::HashMap;
use std::io::Read;
use std::time::Duration;

/// More than this fraction of the window spent waiting means the host's work wants
/// the processors a guest is using. A quiet host stays far below it.
const WAITING: f64 = 0.15;

/// How the main runtime's worker threads are named (tokio's default, cut to the 15
/// bytes the kernel keeps); the guests' threads are `mur-guest`.
const HOST_THREAD: &str = "tokio-runtime-w";

pub struct Pressure {
    cores: u32,
    /// Each host thread's wait total last read, in nanoseconds.
    host_waits: HashMap<u64, u64>,
    /// The machine's stall total last read, in microseconds.
    last_stall_us: Option<u64>,
    source: &'static str,
}

impl Pressure {
    pub fn new(cores: u32) -> Pressure {
        let host_waits = host_waits().unwrap_or_default();
        let last_stall_us = stall_us();
        let source = if !host_waits.is_empty() {
            "the host's threads' run-queue waits"
        } else if last_stall_us.is_some() {
            "the machine's pressure stall information"
        } else {
            "the machine's runnable tasks"
        };
        Pressure {
            cores,
            host_waits,
            last_stall_us,
            source,
        }
    }

    /// Where the answer comes from, as the start line says.
    pub fn source(&self) -> &'static str {
        self.source
    }

    /// Whether the host's work waited for a processor for much of the `window` just
    /// past.
    pub fn host_waited(&mut self, window: Duration) -> bool {
        let limit = window.as_secs_f64() * WAITING;
        if let Some(now) = host_waits().filter(|w| !w.is_empty()) {
            let waited: u64 = now
                .iter()
                .map(|(tid, total)| {
                    total.saturating_sub(self.host_waits.get(tid).copied().unwrap_or(*total))
                })
                .sum();
            self.host_waits = now;
            return waited as f64 / 1e9 > limit;
        }
        if let (Some(last), Some(now)) = (self.last_stall_us, stall_us()) {
            self.last_stall_us = Some(now);
            return now.saturating_sub(last) as f64 / 1e6 > limit;
        }
        runnable().is_some_and(|r| r > u64::from(self.cores) + 1)
    }
}

/// Each host thread's total wait, by thread id; `None` where the kernel keeps none.
fn host_waits() -> Option<HashMap<u64, u64>> {
    let mut waits = HashMap::new();
    for entry in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let dir = entry.path();
        let is_host = std::fs::read_to_string(dir.join("comm"))
            .is_ok_and(|name| name.trim_end() == HOST_THREAD);
        if !is_host {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("schedstat")).ok()?;
        waits.insert(tid, parse_wait(&stat)?);
    }
    Some(waits)
}

/// `<ran ns> <waited ns> <slices>` → the waited nanoseconds.
fn parse_wait(text: &str) -> Option<u64> {
    text.split_whitespace().nth(1)?.parse().ok()
}

/// Reads at most `limit` bytes of a small kernel file.
fn small_file(path: &str, limit: u64) -> Option<String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(limit)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

fn stall_us() -> Option<u64> {
    parse_stall(&small_file("/proc/pressure/cpu", 4096)?)
}

fn runnable() -> Option<u64> {
    parse_running(&small_file("/proc/stat", 1 << 20)?)
}

/// `some avg10=0.00 avg60=0.00 avg300=0.00 total=123` → 123.
fn parse_stall(text: &str) -> Option<u64> {
    let some = text.lines().find(|l| l.starts_with("some "))?;
    some.split_whitespace()
        .find_map(|field| field.strip_prefix("total="))?
        .parse()
        .ok()
}

/// The `procs_running N` line, which counts the reader itself.
fn parse_running(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("procs_running "))?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stall_total_is_read_from_the_some_line() {
        let text = "some avg10=1.50 avg60=0.68 avg300=5.21 total=1603353473\n\
                    full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(parse_stall(text), Some(1_603_353_473));
        assert_eq!(parse_stall("full total=3\n"), None);
        assert_eq!(parse_stall("some total=x\n"), None);
    }

    #[test]
    fn a_threads_wait_is_the_second_schedstat_field() {
        assert_eq!(parse_wait("3395227 48110 28\n"), Some(48_110));
        assert_eq!(parse_wait("3395227\n"), None);
    }

    #[test]
    fn the_runnable_count_is_read_from_proc_stat() {
        let text = "cpu  1 2 3\nctxt 9\nprocs_running 3\nprocs_blocked 0\n";
        assert_eq!(parse_running(text), Some(3));
        assert_eq!(parse_running("cpu 1\n"), None);
    }
}
