//! `mur component check` on drivers and hooks, as an author runs it: the real binary on
//! a built component, judged by its stdout lines, its totals line and its exit status.
//! The built-in drivers and the example hooks pass; the deliberately broken fixtures
//! (`components/broken-driver`, `components/broken-hook`) fail with the scenario that
//! catches each, and exit 1. The check runs its own loopback provider and capsules, so
//! these tests need nothing beside the binary and the component.

use std::time::Duration;

use crate::common::*;

/// One check runs a handful of capsules; a hang must fail the test, not CI.
const WAIT: Duration = Duration::from_secs(300);

/// `mur component check <guest>.wasm`, to its end.
fn check(name: &str) -> Run {
    let mut cmd = mur();
    cmd.args(["component", "check"]).arg(guest(name));
    finish_within(&mut cmd, WAIT)
}

impl Run {
    /// The stdout line starting with `prefix`; it must be there.
    fn line(&self, prefix: &str) -> &str {
        self.stdout
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line {prefix:?} in:\n{}\n{}", self.stdout, self.stderr))
    }

    /// The last stdout line: the totals.
    fn totals(&self) -> &str {
        self.stdout.lines().last().unwrap_or_default()
    }
}

/// Every scenario of a provider wire passes, each named with the wire it was checked in.
fn assert_driver_passes(run: &Run, wire: &str) {
    assert_eq!(run.status, 0, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(
        run.totals(),
        "10 passed, 0 failed, 0 skipped",
        "{}",
        run.stdout
    );
    for scenario in [
        "streamed chunks reach the wire as text frames",
        "stop reason end-turn",
        "a tool call round-trips",
        "stop reason tool-call",
        "stop reason max-tokens",
        "a provider error (HTTP 400) fails the task, not a trap",
        "a provider error (HTTP 500) after retries fails the task, not a trap",
        "the network allow-list is honoured",
    ] {
        run.line(&format!("PASS driver: {scenario} ({wire}) ("));
    }
}

#[test]
fn the_openai_driver_passes_in_the_openai_wire() {
    let run = check(MUR_DRIVER_OPENAI);
    run.line("world: driver (exports murmur:driver/inference@0.2.0;");
    run.line("PASS driver: configure and infer answer (");
    assert_driver_passes(&run, "OpenAI chat-completions");
}

#[test]
fn the_anthropic_driver_passes_in_the_anthropic_wire() {
    let run = check(MUR_DRIVER_ANTHROPIC);
    assert_driver_passes(&run, "Anthropic messages");
}

/// The scripted driver sends no request: it answers from its configuration, and every
/// provider scenario is skipped saying why.
#[test]
fn the_scripted_driver_answers_and_skips_the_provider_scenarios() {
    let run = check(MUR_DRIVER_SCRIPTED);
    assert_eq!(run.status, 0, "{}\n{}", run.stdout, run.stderr);
    run.line("PASS driver: configure and infer answer (");
    assert_eq!(
        run.line("SKIP driver: a tool call round-trips"),
        "SKIP driver: a tool call round-trips: the driver sent no request to a provider: it speaks no provider wire"
    );
    assert_eq!(run.totals(), "2 passed, 0 failed, 8 skipped");
}

/// The broken driver traps when the provider answers an error: the error scenarios
/// fail naming the trap, everything else passes, and the check exits 1.
#[test]
pub(crate) fn a_driver_that_traps_on_a_provider_error_fails_the_check() {
    let run = check(MUR_BROKEN_DRIVER);
    assert_eq!(run.status, 1, "{}\n{}", run.stdout, run.stderr);
    let wire = "(OpenAI chat-completions)";
    let failed = run.line(&format!(
        "FAIL driver: a provider error (HTTP 400) fails the task, not a trap {wire}: "
    ));
    assert!(
        failed.contains(
            ": the driver trapped on the provider's HTTP 400 instead of returning infer-error: wasm trap: "
        ),
        "{failed}"
    );
    run.line(&format!(
        "FAIL driver: a provider error (HTTP 500) after retries fails the task, not a trap {wire}: the driver trapped on the provider's HTTP 500"
    ));
    // Its answers, streams and tool calls are the built-in driver's: they pass.
    run.line(&format!("PASS driver: a tool call round-trips {wire} ("));
    run.line(&format!("PASS driver: stop reason max-tokens {wire} ("));
    assert_eq!(run.totals(), "7 passed, 3 failed, 0 skipped");
}

/// Every binding answered within the deadline and no verdict refused, at each of them.
fn assert_hook_passes(name: &str) {
    let run = check(name);
    assert_eq!(run.status, 0, "{name}:\n{}\n{}", run.stdout, run.stderr);
    run.line("world: hook (exports murmur:hook/lifecycle@0.2.0;");
    for binding in [
        "on-stage",
        "on-session-start",
        "on-task-start",
        "on-inference",
        "on-tool-call",
        "on-shell",
        "on-compaction",
        "on-task-end",
        "on-session-end",
    ] {
        run.line(&format!(
            "PASS hook: answers {binding} events within its deadline ("
        ));
    }
    run.line("PASS hook: verdicts at on-task-end follow commit_policy reopen-task (");
    assert_eq!(
        run.totals(),
        "16 passed, 0 failed, 0 skipped",
        "{name}:\n{}",
        run.stdout
    );
}

/// The three example hooks, and the recorder (a test fixture that answers `none`
/// unless scripted).
#[test]
fn the_example_hooks_pass() {
    for name in [
        MUR_HOOK_GATEKEEPER,
        MUR_HOOK_MEMORY,
        MUR_HOOK_DENY_LIST,
        MUR_HOOK_RECORDER,
    ] {
        assert_hook_passes(name);
    }
}

/// The broken hook spins at on-task-end: that binding's scenario fails with the host's
/// own timeout message, the others pass, and the check exits 1.
#[test]
pub(crate) fn a_hook_that_overruns_its_deadline_fails_the_check() {
    let run = check(MUR_BROKEN_HOOK);
    assert_eq!(run.status, 1, "{}\n{}", run.stdout, run.stderr);
    run.line(
        "FAIL hook: answers on-task-end events within its deadline: on-task-end: timed out: deadline exceeded: the component ran for more than 3 s without returning (",
    );
    run.line("PASS hook: answers on-task-start events within its deadline (");
    assert_eq!(run.totals(), "15 passed, 1 failed, 0 skipped");
}

/// `mur component check` on one of upstream Murmur's vendored components.
fn check_upstream(file: &str) -> Run {
    let mut cmd = mur();
    cmd.args(["component", "check"])
        .arg(repo().join("tests/fixtures/upstream").join(file));
    finish_within(&mut cmd, WAIT)
}

/// Upstream's drivers export `murmur:tool/run@0.1.0` and reach `wasi:http`: the check
/// names them drivers, links them through the adapter, and they pass every scenario of
/// their wire. Its OpenAI driver streams unasked and refuses a `stream` key, so it is
/// checked without one.
#[test]
fn upstreams_drivers_are_checked_as_drivers_and_pass() {
    for (file, wire) in [
        ("murmur-driver-openai.wasm", "OpenAI chat-completions"),
        ("murmur-driver-anthropic.wasm", "Anthropic messages"),
    ] {
        let run = check_upstream(file);
        assert_eq!(
            run.stdout.lines().next(),
            Some(
                "world: driver (exports murmur:tool/run@0.1.0; imports murmur:stream/events@0.1.0)"
            ),
            "{file}: {}",
            run.stdout
        );
        run.line("PASS links against the driver world (");
        assert_driver_passes(&run, wire);
    }
}

/// Upstream's records-hook (`murmur:hook/lifecycle@0.9.0`) answers every binding within
/// its deadline and returns no verdict the host refuses.
#[test]
fn upstreams_records_hook_passes_as_a_hook() {
    let run = check_upstream("records-hook.wasm");
    assert_eq!(run.status, 0, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(
        run.totals(),
        "16 passed, 0 failed, 0 skipped",
        "{}",
        run.stdout
    );
    run.line("PASS hook: answers on-session-end events within its deadline (");
}
