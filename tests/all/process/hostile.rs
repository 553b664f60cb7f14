//! Harnesses that misbehave, and the limits a harness cannot pass: each is contained
//! with a clear error, nothing of the harness is left running, and `mur` carries on.
//! The stand-ins are shell scripts of `tests/fixtures/harness`, run by the built-in
//! `claude-code` driver; the limits are checked on Claude Code itself.

use std::time::{Duration, Instant};

use super::{ONE_TASK, Setup, run_task};
use crate::common::harness;
use crate::common::mock_model::{MockModel, Reply, anthropic};
use crate::common::{Capsule, Run, Session, marker, pids_running, repo};

/// A capsule whose harness is the stand-in `script`, with `extra` manifest lines.
fn stand_in(name: &str, script: &str, extra: &str) -> Capsule {
    let command = repo().join("tests/fixtures/harness").join(script);
    let manifest = format!(
        "name: stand-in\nversion: \"0.1.0\"\n{extra}inference:\n  transport: process\n  \
         driver: claude-code\n  command: {}\n  home: ./harness-home\n  max_turns: 1\n{ONE_TASK}",
        command.display()
    );
    let capsule = Capsule::new(name, &manifest, "");
    std::fs::create_dir_all(capsule.dir.join("harness-home")).unwrap();
    capsule
}

fn failed_with(session: &Session, run: &Run, words: &str) {
    assert_eq!(run.status, 1, "stderr:\n{}", run.stderr);
    assert!(
        run.stderr
            .contains("error[E-RUN-040]: the task did not complete"),
        "{}",
        run.stderr
    );
    let result = session.read("out/result.txt");
    assert!(result.contains(words), "{result}");
}

/// A harness that dies at once: the task fails naming its exit code and its last
/// words on stderr, which are in its log.
#[test]
fn a_harness_that_exits_early_fails_the_task_with_its_words() {
    let capsule = stand_in("hx-early", "exits-early.sh", "");
    let (session, run) = run_task(&capsule, "anything");
    failed_with(&session, &run, "exited with code 3");
    failed_with(&session, &run, "the harness could not start its engine");
    let exit = &session.events("harness_exit")[0];
    assert_eq!(exit["exit_code"], 3);
    assert!(
        session
            .record("logs/harness.log")
            .contains("could not start its engine")
    );
}

/// A harness that prints garbage (binary, a terminal escape, a 5 MB line) and no
/// result: each unreadable line is a note in the trace, never a frame or a terminal
/// escape on mur's stderr, and the task fails saying no result came.
#[test]
fn a_harness_that_prints_garbage_is_read_within_bounds() {
    let capsule = stand_in("hx-garbage", "prints-garbage.sh", "");
    let (session, run) = run_task(&capsule, "anything");
    failed_with(&session, &run, "without a result");
    let notes: Vec<String> = session
        .events("harness_note")
        .iter()
        .map(|n| n["note"].as_str().unwrap().to_string())
        .collect();
    assert!(notes.iter().any(|n| n.contains("not UTF-8")), "{notes:?}");
    assert!(
        notes.iter().any(|n| n.contains("5000000 bytes")),
        "{notes:?}"
    );
    assert!(
        !run.stderr.contains('\u{1b}'),
        "a terminal escape reached stderr"
    );
    let trace = std::fs::read_to_string(session.records.join("trace.jsonl")).unwrap();
    assert!(
        trace.len() < 200_000,
        "the trace kept the flood: {} bytes",
        trace.len()
    );
}

/// A harness that never stops (and ignores SIGINT) is stopped at the run's deadline
/// (`deadline_seconds` for each of its `max_turns`), killed with its child, and the
/// task fails saying so.
#[test]
fn a_harness_that_never_stops_is_killed_at_its_deadline() {
    let limits = "capabilities:\n  limits:\n    deadline_seconds: 2\n";
    let capsule = stand_in("hx-forever", "never-stops.sh", limits);
    let task = marker(0);
    let _cleanup = crate::common::KillOnDrop(task.clone());
    let started = Instant::now();
    let (session, run) = run_task(&capsule, &task);
    failed_with(&session, &run, "deadline exceeded");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!(session.events("harness_exit")[0]["stopped"], "deadline");
    assert!(
        pids_running(&task).is_empty(),
        "the harness outlived its run"
    );
}

/// The turn limit applies to the harness's own model calls: past `max_turns` it is
/// stopped and the task ends `max_turns_reached`.
#[test]
fn a_harness_past_max_turns_is_stopped() {
    let Some(h) = harness::installed() else {
        return;
    };
    let tool = anthropic::Stream::new(40)
        .tool_use_block(
            "toolu_01",
            "mcp__mur__wordcount",
            &[r#"{"path": "task.md"}"#],
        )
        .message_delta("tool_use", 12)
        .stop();
    let mock = MockModel::with(vec![
        Reply::sse(tool.events()),
        Reply::sse(
            anthropic::Stream::new(5)
                .text_block(&["never"])
                .stop()
                .events(),
        ),
    ]);
    let setup = Setup {
        max_turns: 1,
        ..super::claude::setup(h, &mock, ONE_TASK)
    };
    let capsule = setup.capsule("hx-max-turns");
    let (session, run) = run_task(&capsule, "Count the words of task.md");
    assert_eq!(run.status, 1, "stderr:\n{}", run.stderr);
    let end = &session.events("task_end")[0];
    assert_eq!(end["exit_status"], "max_turns_reached", "{end}");
    assert_eq!(session.events("inference").len(), 1);
    assert_eq!(session.events("harness_exit")[0]["stopped"], "max_turns");
}

/// A spend ceiling applies to what the harness reports using: past it, the harness is
/// stopped and the task ends `spend_ceiling_reached`.
#[test]
fn a_harness_past_the_spend_ceiling_is_stopped() {
    let Some(h) = harness::installed() else {
        return;
    };
    let big = anthropic::Stream::new(5_000)
        .text_block(&["expensive"])
        .message_delta("end_turn", 10)
        .stop();
    let mock = MockModel::with(vec![Reply::sse(big.events())]);
    let setup = Setup {
        max_turns: 4,
        extra_inference: "  max_tokens: 100\n  max_session_tokens: 1000\n",
        ..super::claude::setup(h, &mock, ONE_TASK)
    };
    let capsule = setup.capsule("hx-spend");
    let (session, run) = run_task(&capsule, "Spend");
    assert_eq!(run.status, 1, "stderr:\n{}", run.stderr);
    assert_eq!(
        session.events("task_end")[0]["exit_status"],
        "spend_ceiling_reached"
    );
    assert_eq!(session.events("spend_ceiling_reached").len(), 1);
}

/// A harness that is not installed stops the launch, naming what to do.
#[test]
fn a_missing_harness_stops_the_launch() {
    let capsule = stand_in("hx-missing", "no-such-harness.sh", "");
    let run = capsule.run(&["--task", "anything"]);
    run.assert_error("error[E-RUN-071]: the harness program of built-in claude-code process driver cannot be run");
    assert!(run.stderr.contains("hint: install it"), "{}", run.stderr);
}

/// The loop's deadline holds for the whole run: a harness that calls a capsule tool
/// and then thinks past `deadline_seconds` (well inside the run's own bound, one such
/// span per turn) still answers.
#[test]
fn a_run_longer_than_the_loops_deadline_after_a_tool_call_still_answers() {
    let Some(h) = harness::installed() else {
        return;
    };
    let tool = anthropic::Stream::new(40)
        .tool_use_block(
            "toolu_01",
            "mcp__mur__wordcount",
            &[r#"{"path": "task.md"}"#],
        )
        .message_delta("tool_use", 12)
        .stop();
    let slow = anthropic::Stream::new(50)
        .text_block(&["Counted", " slowly."])
        .message_delta("end_turn", 4)
        .stop();
    let mock = MockModel::with(vec![
        Reply::sse(tool.events()),
        Reply::sse(slow.events()).with_delay(Duration::from_millis(1500)),
    ]);
    let setup = Setup {
        max_turns: 4,
        extra_capabilities: "  limits:\n    deadline_seconds: 3\n",
        ..super::claude::setup(h, &mock, ONE_TASK)
    };
    let (session, run) = run_task(&setup.capsule("hx-held"), "Count the words of task.md");
    assert_eq!(run.status, 0, "stderr:\n{}", run.stderr);
    assert_eq!(session.read("out/result.txt"), "Counted slowly.");
}

/// A harness that calls a capsule tool before the line that opens its model call is
/// read: the call opens the turn, the late line is that same turn, and the tool's line
/// hangs under it.
#[test]
fn a_tool_called_before_its_turn_line_is_in_that_turn() {
    let artifacts = format!(
        "artifacts:\n  - name: wordcount\n    runtime: tool\n    source: {}\n",
        crate::common::guest(crate::common::MUR_TOOL_WORDCOUNT).display()
    );
    let capsule = stand_in("hx-early-call", "calls-before-it-says.sh", &artifacts);
    let (session, run) = run_task(&capsule, "Count the words of task.md");
    assert_eq!(run.status, 0, "stderr:\n{}", run.stderr);
    assert_eq!(session.read("out/result.txt"), "counted");
    let turns = session.events("inference");
    assert_eq!(turns.len(), 1, "{turns:?}");
    assert_eq!(turns[0]["decision"], "tool_call");
    assert_eq!(turns[0]["tool_name"], "wordcount");
    let call = &session.events("tool_call")[0];
    assert_eq!(call["parent_id"], turns[0]["event_id"]);
}
