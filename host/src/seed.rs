//! Context seeding: what the host does with a `seed-context` proposal, checked in the
//! order of the seed's decision table. A seed that cannot be committed never fails a
//! task; the task runs without it.

use crate::bindings::message::{Block, Message, Role};

/// Why a proposal was refused, in the trace's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    UnsupportedTransport,
    NoBudget,
    MessageOverBudget,
    OverflowOverLimit,
}

impl Rejected {
    pub fn as_str(self) -> &'static str {
        match self {
            Rejected::UnsupportedTransport => "unsupported_transport",
            Rejected::NoBudget => "no_budget",
            Rejected::MessageOverBudget => "message_over_budget",
            Rejected::OverflowOverLimit => "overflow_over_limit",
        }
    }
}

/// What the table decided before any summary was asked for.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Rejected(Rejected),
    /// All of it fits.
    Seeded,
    /// Drop the oldest messages until the rest fits: `keep` newest messages remain.
    Trimmed {
        keep: usize,
    },
    /// Over by more than the margin: a compaction hook may summarize the first `front`
    /// messages; without one, the seed is trimmed to the newest `keep`.
    Summarize {
        front: usize,
        keep: usize,
    },
}

/// The limits a proposal is held to.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// floor(`context.max_tokens` x `seed_budget`); 0 without `context.max_tokens`.
    pub tokens: u64,
    /// `context.seed_overflow_margin`, a fraction of the budget.
    pub margin: f64,
    /// `inference.transport: process`: that transport's CLI owns its conversation.
    pub process_transport: bool,
}

/// The seed's table, rows 1 to 6 and the fork of 7/8. `sizes` are the messages' token
/// counts, oldest first.
pub fn decide(sizes: &[u64], budget: Budget) -> Decision {
    let b = budget.tokens;
    if budget.process_transport {
        return Decision::Rejected(Rejected::UnsupportedTransport);
    }
    if b == 0 {
        return Decision::Rejected(Rejected::NoBudget);
    }
    if sizes.iter().any(|&n| n > b) {
        return Decision::Rejected(Rejected::MessageOverBudget);
    }
    let total: u64 = sizes.iter().sum();
    let overflow = total.saturating_sub(b);
    if overflow > b.saturating_mul(3) {
        return Decision::Rejected(Rejected::OverflowOverLimit);
    }
    if overflow == 0 {
        return Decision::Seeded;
    }
    let keep = newest_that_fit(sizes, b);
    if overflow as f64 <= budget.margin * b as f64 {
        return Decision::Trimmed { keep };
    }
    Decision::Summarize {
        front: sizes.len() - keep,
        keep,
    }
}

/// How many of the newest messages fit in `room` tokens together.
pub fn newest_that_fit(sizes: &[u64], room: u64) -> usize {
    let mut used = 0u64;
    let mut kept = 0;
    for &n in sizes.iter().rev() {
        if used + n > room {
            break;
        }
        used += n;
        kept += 1;
    }
    kept
}

/// A proposed seed message as it is committed: only a user or an assistant speaks in a
/// seed (anything else is read as the user), and only its text is kept.
pub fn seed_message(message: &Message) -> Message {
    let role = if message.role == Role::Assistant {
        Role::Assistant
    } else {
        Role::User
    };
    let content = message
        .content
        .iter()
        .filter(|b| matches!(b, Block::Text(_)))
        .cloned()
        .collect();
    Message { role, content }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(tokens: u64) -> Budget {
        Budget {
            tokens,
            margin: 0.10,
            process_transport: false,
        }
    }

    #[test]
    fn rows_are_checked_in_the_seeds_order() {
        let process = Budget {
            process_transport: true,
            ..budget(0)
        };
        // Row 1 wins even over a missing budget.
        assert_eq!(
            decide(&[1], process),
            Decision::Rejected(Rejected::UnsupportedTransport)
        );
        assert_eq!(
            decide(&[1], budget(0)),
            Decision::Rejected(Rejected::NoBudget)
        );
        // Row 3 before row 4: one message wider than the ceiling.
        assert_eq!(
            decide(&[101, 1], budget(100)),
            Decision::Rejected(Rejected::MessageOverBudget)
        );
        assert_eq!(
            decide(&[100, 100, 100, 100, 1], budget(100)),
            Decision::Rejected(Rejected::OverflowOverLimit)
        );
        assert_eq!(decide(&[50, 50], budget(100)), Decision::Seeded);
        assert_eq!(
            decide(&[5, 50, 50], budget(100)),
            Decision::Trimmed { keep: 2 }
        );
        assert_eq!(
            decide(&[60, 60, 60], budget(100)),
            Decision::Summarize { front: 2, keep: 1 }
        );
    }

    #[test]
    fn exactly_three_times_over_is_still_considered() {
        assert_eq!(
            decide(&[100, 100, 100, 100], budget(100)),
            Decision::Summarize { front: 3, keep: 1 }
        );
    }

    #[test]
    fn the_margin_is_a_fraction_of_the_ceiling() {
        // 10 over a ceiling of 100 with a 10% margin: trimmed, not summarized.
        assert_eq!(
            decide(&[10, 50, 50], budget(100)),
            Decision::Trimmed { keep: 2 }
        );
        assert_eq!(
            decide(&[11, 50, 50], budget(100)),
            Decision::Summarize { front: 1, keep: 2 }
        );
    }
}
