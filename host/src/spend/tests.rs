use std::sync::Arc;

use super::*;

fn day(s: &str) -> NaiveDate {
    NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mur-spend-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn refusal(stop: Stop) -> Refusal {
    match stop {
        Stop::Ceiling(r) => r,
        Stop::Unusable(e) => panic!("a ceiling, not {e}"),
    }
}

const D1: &str = "2026-05-01";

#[test]
fn the_messages_are_upstreams_words() {
    let r = |limit, requested| Refusal {
        limit,
        ceiling: 1000,
        used: 990,
        requested,
    };
    assert_eq!(
        r(Limit::Session, 300).message(),
        "spend ceiling reached: inference.max_session_tokens is 1000 and this session has \
         used 990; the next call could use up to 300 more. The operator set this limit; \
         retrying will not get past it."
    );
    assert_eq!(
        r(Limit::Session, 0).message(),
        "spend ceiling reached: inference.max_session_tokens is 1000 and this session has \
         used 990, which is at or past it. The operator set this limit; retrying will not \
         get past it."
    );
    assert_eq!(
        r(Limit::Machine, 300).message(),
        "spend ceiling reached: spend.machine_tokens_per_day is 1000 and capsules on this \
         machine have used 990 today (UTC); the next call could use up to 300 more. The \
         operator set this limit; retrying will not get past it before it resets at 00:00 UTC."
    );
    assert_eq!(
        r(Limit::Capsule, 300).message(),
        "spend ceiling reached: limits.tokens_per_day is 1000 and this capsule has used 990 \
         today (UTC); the next call could use up to 300 more. The operator set this limit; \
         retrying will not get past it before it resets at 00:00 UTC."
    );
}

#[test]
fn the_session_ceiling_counts_what_was_used_and_refuses_what_could_pass_it() {
    let spend = Spend::new(Some(1000), None, None);
    let first = spend.reserve_on(day(D1), 600).unwrap();
    // The provider reported less than the call could have used.
    spend.settle(first, 300, 100).unwrap();
    let second = spend.reserve_on(day(D1), 600).unwrap();
    spend.settle(second, 400, 150).unwrap();
    let r = refusal(spend.reserve_on(day(D1), 200).unwrap_err());
    assert_eq!(
        r,
        Refusal {
            limit: Limit::Session,
            ceiling: 1000,
            used: 950,
            requested: 200
        }
    );
    // A call that fits still goes.
    let fits = spend.reserve_on(day(D1), 50).unwrap();
    // More than was reserved (a provider may report more): at or past the ceiling now.
    spend.settle(fits, 60, 0).unwrap();
    let r = refusal(spend.reserve_on(day(D1), 1).unwrap_err());
    assert_eq!((r.used, r.requested), (1010, 0));
}

#[test]
fn a_call_never_settled_keeps_its_whole_reservation() {
    let spend = Spend::new(Some(1000), None, None);
    let _dropped = spend.reserve_on(day(D1), 700).unwrap();
    let r = refusal(spend.reserve_on(day(D1), 301).unwrap_err());
    assert_eq!(r.used, 700);
}

#[test]
fn the_lowest_binding_ceiling_is_the_one_named() {
    let dir = scratch("lowest");
    let machine = dir.join("machine-day");
    let capsule = Capsule {
        tokens_per_day: Some(5000),
        ledger: dir.join("capsule-day"),
    };
    let spend = Spend::new(Some(10_000), Some(capsule), Some((2000, machine.clone())));
    let r = spend.reserve_on(day(D1), 1500).unwrap();
    spend.settle(r, 1500, 0).unwrap();
    // The machine (500 left) binds before the capsule (3500 left) and the session.
    let r = refusal(spend.reserve_on(day(D1), 600).unwrap_err());
    assert_eq!(
        (r.limit, r.ceiling, r.used, r.requested),
        (Limit::Machine, 2000, 1500, 600)
    );
    // Nothing was reserved by the refused call.
    assert_eq!(Ledger::new(machine).used_on(day(D1)).unwrap(), 1500);
    assert_eq!(
        Ledger::new(dir.join("capsule-day"))
            .used_on(day(D1))
            .unwrap(),
        1500
    );
}

#[test]
fn a_capsule_without_a_ceiling_is_still_counted() {
    let dir = scratch("count-only");
    let ledger = dir.join("capsule-day");
    let capsule = Capsule {
        tokens_per_day: None,
        ledger: ledger.clone(),
    };
    let spend = Spend::new(None, Some(capsule), None);
    let r = spend.reserve_on(day(D1), u64::MAX).unwrap();
    spend.settle(r, 40, 2).unwrap();
    assert_eq!(Ledger::new(ledger).used_on(day(D1)).unwrap(), 42);
}

/// The machine's day is shared by every session (here two, as two processes would
/// have), survives them, and starts from 0 on the next UTC day; a call reserved on one
/// day and settled on the next leaves the new day alone.
#[test]
fn the_machine_day_is_shared_kept_and_rolls_over_at_midnight() {
    let dir = scratch("rollover");
    let ledger = dir.join("machine-day");
    let a = Spend::new(None, None, Some((1000, ledger.clone())));
    let b = Spend::new(None, None, Some((1000, ledger.clone())));
    let r = a.reserve_on(day(D1), 600).unwrap();
    let late = b.reserve_on(day(D1), 300).unwrap();
    let r2 = refusal(b.reserve_on(day(D1), 200).unwrap_err());
    assert_eq!((r2.used, r2.requested), (900, 200));
    a.settle(r, 500, 0).unwrap();
    drop((a, b));
    let c = Spend::new(None, None, Some((1000, ledger.clone())));
    let r3 = refusal(c.reserve_on(day(D1), 201).unwrap_err());
    assert_eq!(r3.used, 800);
    let next = c.reserve_on(day("2026-05-02"), 1000).unwrap();
    assert_eq!(
        Ledger::new(ledger.clone())
            .used_on(day("2026-05-02"))
            .unwrap(),
        1000
    );
    // Yesterday's call settles now: today's count is untouched.
    c.settle(late, 10, 10).unwrap();
    assert_eq!(
        Ledger::new(ledger.clone())
            .used_on(day("2026-05-02"))
            .unwrap(),
        1000
    );
    c.settle(next, 1, 1).unwrap();
    assert_eq!(Ledger::new(ledger).used_on(day("2026-05-02")).unwrap(), 2);
}

/// Sessions racing for the last tokens of the day, each on its own open file (as
/// processes are): together they never reserve past the ceiling, and every token
/// settled is in the ledger.
#[test]
fn racing_sessions_never_pass_the_machine_ceiling_together() {
    let dir = scratch("race");
    let ledger = dir.join("machine-day");
    const CEILING: u64 = 10_000;
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let ledger = ledger.clone();
            std::thread::spawn(move || {
                let spend = Spend::new(None, None, Some((CEILING, ledger)));
                let mut spent = 0;
                let ask = 97 + i;
                while let Ok(r) = spend.reserve_on(day(D1), ask) {
                    spend.settle(r, ask - 7, 7).unwrap();
                    spent += ask;
                }
                spent
            })
        })
        .collect();
    let spent: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(spent <= CEILING, "{spent}");
    assert!(spent > CEILING - 2 * 104, "the day was used up: {spent}");
    assert_eq!(Ledger::new(ledger).used_on(day(D1)).unwrap(), spent);
}

#[test]
fn a_broken_ledger_refuses_the_call_naming_it() {
    let dir = scratch("broken");
    let ledger = dir.join("machine-day");
    std::fs::write(&ledger, "0\n").unwrap();
    let spend = Spend::new(Some(1000), None, Some((1000, ledger)));
    match spend.reserve_on(day(D1), 10) {
        Err(Stop::Unusable(e)) => assert_eq!(e.code, "E-SPEND-001"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn settle_adds_to_the_process_totals() {
    let before = totals();
    let spend = Arc::new(Spend::new(None, None, None));
    let r = spend.reserve_on(day(D1), 10).unwrap();
    spend.settle(r, 3, 4).unwrap();
    let after = totals();
    assert!(after.input_tokens >= before.input_tokens + 3);
    assert!(after.output_tokens >= before.output_tokens + 4);
}
