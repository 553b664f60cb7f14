//! Progress of a long transfer on stderr: on a terminal one line redrawn in place at
//! most five times a second; elsewhere (a log, CI) a line at each quarter, so a log is
//! not flooded. Transfers under a megabyte say nothing until they are done.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

const QUIET_BELOW: u64 = 1024 * 1024;
const REDRAW: Duration = Duration::from_millis(200);

pub struct Progress {
    what: String,
    total: u64,
    done: u64,
    terminal: bool,
    drawn: Option<Instant>,
    quarter: u64,
}

impl Progress {
    /// A transfer of `total` bytes, called `what` in every line.
    pub fn new(what: String, total: u64) -> Progress {
        Progress {
            what,
            total,
            done: 0,
            terminal: std::io::stderr().is_terminal(),
            drawn: None,
            quarter: 0,
        }
    }

    pub fn what(&self) -> &str {
        &self.what
    }

    pub fn advance(&mut self, bytes: u64) {
        self.done += bytes;
        if self.total < QUIET_BELOW {
            return;
        }
        if self.terminal {
            if self.drawn.is_none_or(|at| at.elapsed() >= REDRAW) {
                self.drawn = Some(Instant::now());
                eprint!("\r{}", self.line());
                let _ = std::io::stderr().flush();
            }
            return;
        }
        let quarter = self.done.saturating_mul(4) / self.total.max(1);
        if quarter > self.quarter && quarter < 4 {
            self.quarter = quarter;
            eprintln!("{}", self.line());
        }
    }

    pub fn done(&mut self) {
        if self.terminal && self.total >= QUIET_BELOW {
            eprint!("\r\x1b[2K");
        }
    }

    fn line(&self) -> String {
        format!(
            "  pulling {}: {} of {} ({}%)",
            self.what,
            mib(self.done),
            mib(self.total),
            self.done.saturating_mul(100) / self.total.max(1)
        )
    }
}

/// `1.2 MiB`, `340 KiB`.
pub fn mib(bytes: u64) -> String {
    if bytes >= 1024 * 1024 {
        format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
    } else {
        format!("{} KiB", bytes.div_ceil(1024))
    }
}
