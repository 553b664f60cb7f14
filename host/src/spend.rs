//! Spend ceilings: how many tokens inference may use, counted by the host before every
//! call, so a session loop of any make cannot pass them (the loop calls `infer`; the
//! host decides whether the driver is called).
//!
//! Three ceilings, each optional; every one that is set must hold, so the lowest that
//! binds is the one that stops a call:
//!
//! - `inference.max_session_tokens` (the manifest): one session's tokens, kept in
//!   memory, since a session lives in one process;
//! - `limits.tokens_per_day` (a capsule under `mur serve`): one capsule's tokens on the
//!   UTC day, in a ledger in its records, so a restart of the server does not reset it;
//! - `spend.machine_tokens_per_day` (`$MURMUR_HOME/config.yaml`): every capsule the user
//!   runs on this machine, on the UTC day, in a ledger under `$MURMUR_HOME/spend/` that
//!   every `mur` process shares under a lock.
//!
//! A call may go ahead only when what is counted plus what it could use (its estimated
//! input and its `max_tokens`) stays within every ceiling; that amount is reserved
//! before the call (under the ledgers' locks, so two processes cannot both take the
//! last tokens) and settled with what the provider reported after it (the host's
//! estimate where it reported nothing). A call that never settles (canceled mid-way,
//! or a process killed) keeps its whole reservation: a ceiling errs on the side of
//! counting.

use crate::home_config as config;
mod ledger;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::NaiveDate;

use crate::error::Error;
pub use ledger::{Ledger, today};

/// Which ceiling, by the key that sets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    Session,
    Capsule,
    Machine,
}

impl Limit {
    pub fn key(self) -> &'static str {
        match self {
            Limit::Session => "inference.max_session_tokens",
            Limit::Capsule => "limits.tokens_per_day",
            Limit::Machine => "spend.machine_tokens_per_day",
        }
    }
}

/// A call a ceiling stops: the limit, its value, what was counted before the call and
/// what the call could have used (0 when the ceiling was already reached).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub limit: Limit,
    pub ceiling: u64,
    pub used: u64,
    pub requested: u64,
}

impl Refusal {
    /// Upstream's words (Murmur 0.8.0), so a reader of either says the same.
    pub fn message(&self) -> String {
        let Refusal {
            limit,
            ceiling,
            used,
            requested,
        } = self;
        let key = limit.key();
        let daily = |who: &str| {
            format!(
                "spend ceiling reached: {key} is {ceiling} and {who} used {used} today (UTC); \
                 the next call could use up to {requested} more. The operator set this limit; \
                 retrying will not get past it before it resets at 00:00 UTC."
            )
        };
        match limit {
            Limit::Session if *requested == 0 => format!(
                "spend ceiling reached: {key} is {ceiling} and this session has used {used}, \
                 which is at or past it. The operator set this limit; retrying will not get \
                 past it."
            ),
            Limit::Session => format!(
                "spend ceiling reached: {key} is {ceiling} and this session has used {used}; \
                 the next call could use up to {requested} more. The operator set this limit; \
                 retrying will not get past it."
            ),
            Limit::Capsule => daily("this capsule has"),
            Limit::Machine => daily("capsules on this machine have"),
        }
    }

    /// How much of the ceiling was left: the binding limit is the one with the least.
    fn room(&self) -> u64 {
        self.ceiling.saturating_sub(self.used)
    }
}

/// Why a call may not go ahead.
#[derive(Debug)]
pub enum Stop {
    Ceiling(Refusal),
    /// A ledger could not be read or written: the call is refused rather than made
    /// uncounted.
    Unusable(Error),
}

/// A capsule's own day under `mur serve`: its ceiling (none only counts) and its ledger.
#[derive(Clone, Debug)]
pub struct Capsule {
    pub tokens_per_day: Option<u64>,
    pub ledger: PathBuf,
}

/// A daily ceiling counted in a ledger file.
struct Daily {
    limit: Limit,
    ceiling: Option<u64>,
    ledger: Ledger,
}

/// One session's ceilings and its own count.
#[derive(Default)]
pub struct Spend {
    session: Option<u64>,
    /// Counted against `session`: settled calls, and the reservation of one running.
    session_used: AtomicU64,
    capsule: Option<Daily>,
    machine: Option<Daily>,
}

/// What a call reserved, to settle once it returns.
#[derive(Debug)]
#[must_use = "a reservation not settled keeps the whole amount counted"]
pub struct Reservation {
    requested: u64,
    day: NaiveDate,
}

impl Spend {
    /// The ceilings of a capsule about to start: the manifest's, the capsule's own
    /// under `mur serve`, and the machine's from `$MURMUR_HOME/config.yaml`. Each
    /// ledger is opened once now, so a broken one stops the launch rather than its
    /// first task.
    pub fn for_capsule(session: Option<u64>, capsule: Option<Capsule>) -> Result<Spend, Error> {
        let home = crate::workdir::murmur_home();
        let config = config::load(&home)?;
        let spend = Spend::new(
            session,
            capsule,
            config
                .machine_tokens_per_day
                .map(|ceiling| (ceiling, machine_ledger(&home))),
        );
        spend.check()?;
        Ok(spend)
    }

    /// `machine` is the machine's ceiling and its ledger.
    pub fn new(
        session: Option<u64>,
        capsule: Option<Capsule>,
        machine: Option<(u64, PathBuf)>,
    ) -> Spend {
        Spend {
            session,
            session_used: AtomicU64::new(0),
            capsule: capsule.map(|c| Daily {
                limit: Limit::Capsule,
                ceiling: c.tokens_per_day,
                ledger: Ledger::new(c.ledger),
            }),
            machine: machine.map(|(ceiling, path)| Daily {
                limit: Limit::Machine,
                ceiling: Some(ceiling),
                ledger: Ledger::new(path),
            }),
        }
    }

    fn dailies(&self) -> impl Iterator<Item = &Daily> {
        // Always the capsule's before the machine's: every process locks in one order.
        self.capsule.iter().chain(&self.machine)
    }

    fn check(&self) -> Result<(), Error> {
        let day = today();
        for daily in self.dailies() {
            daily.ledger.lock()?.used_on(day)?;
        }
        Ok(())
    }

    /// Before a call that could use `requested` tokens: reserves them against every
    /// ceiling, or says which one stops the call.
    pub fn reserve(&self, requested: u64) -> Result<Reservation, Stop> {
        self.reserve_on(today(), requested)
    }

    pub(crate) fn reserve_on(&self, day: NaiveDate, requested: u64) -> Result<Reservation, Stop> {
        let mut stopped: Option<Refusal> = None;
        let mut stop = |r: Refusal| {
            if stopped.as_ref().is_none_or(|s| r.room() < s.room()) {
                stopped = Some(r);
            }
        };
        let session_used = self.session_used.load(Ordering::Acquire);
        if let Some(ceiling) = self.session {
            if session_used >= ceiling {
                stop(Refusal {
                    limit: Limit::Session,
                    ceiling,
                    used: session_used,
                    requested: 0,
                });
            } else if session_used.saturating_add(requested) > ceiling {
                stop(Refusal {
                    limit: Limit::Session,
                    ceiling,
                    used: session_used,
                    requested,
                });
            }
        }
        // Every ledger stays locked from its read to its write, all of them at once,
        // so no other process reserves in between.
        let mut held = Vec::new();
        for daily in self.dailies() {
            let locked = daily.ledger.lock().map_err(Stop::Unusable)?;
            let used = locked.used_on(day).map_err(Stop::Unusable)?;
            if let Some(ceiling) = daily.ceiling
                && used.saturating_add(requested) > ceiling
            {
                stop(Refusal {
                    limit: daily.limit,
                    ceiling,
                    used,
                    requested,
                });
            }
            held.push((locked, used));
        }
        if let Some(refusal) = stopped {
            REFUSALS.fetch_add(1, Ordering::Relaxed);
            return Err(Stop::Ceiling(refusal));
        }
        for (locked, used) in &held {
            locked
                .set(day, used.saturating_add(requested))
                .map_err(Stop::Unusable)?;
        }
        self.session_used.fetch_add(requested, Ordering::AcqRel);
        Ok(Reservation { requested, day })
    }

    /// After the call: what it used replaces what it reserved. A ledger now on another
    /// day keeps the reservation in the day that made it.
    pub fn settle(&self, reserved: Reservation, input: u64, output: u64) -> Result<(), Error> {
        let used = input.saturating_add(output);
        TOKENS_IN.fetch_add(input, Ordering::Relaxed);
        TOKENS_OUT.fetch_add(output, Ordering::Relaxed);
        let swap = |counted: u64| {
            counted
                .saturating_sub(reserved.requested)
                .saturating_add(used)
        };
        let _ = self
            .session_used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| Some(swap(n)));
        for daily in self.dailies() {
            let locked = daily.ledger.lock()?;
            if let Some((day, counted)) = locked.record()?
                && day == reserved.day
            {
                locked.set(day, swap(counted))?;
            }
        }
        Ok(())
    }
}

/// `$MURMUR_HOME/spend/machine-day`.
fn machine_ledger(home: &Path) -> PathBuf {
    home.join("spend").join("machine-day")
}

/// The machine's ceiling as `$MURMUR_HOME/config.yaml` sets it, checked: for `mur
/// serve`, which reads it once at start so an error is seen before any capsule starts.
pub fn machine_ceiling() -> Result<Option<u64>, Error> {
    config::load(&crate::workdir::murmur_home()).map(|c| c.machine_tokens_per_day)
}

static TOKENS_IN: AtomicU64 = AtomicU64::new(0);
static TOKENS_OUT: AtomicU64 = AtomicU64::new(0);
static REFUSALS: AtomicU64 = AtomicU64::new(0);

/// What inference used in this process, and the calls a ceiling stopped, for `mur
/// serve`'s `/metrics` (totals only: no capsule is named).
#[derive(Clone, Copy, Debug, Default)]
pub struct Totals {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub refusals: u64,
}

pub fn totals() -> Totals {
    Totals {
        input_tokens: TOKENS_IN.load(Ordering::Relaxed),
        output_tokens: TOKENS_OUT.load(Ordering::Relaxed),
        refusals: REFUSALS.load(Ordering::Relaxed),
    }
}

#[cfg(test)]
mod tests;
