//! Spend ceilings end to end (`host/src/spend.rs`): the built-in `openai` driver against
//! a loopback mock model that reports each call's usage, so every figure the host
//! counts is one the test set. A ceiling stops the call before the driver runs: the
//! mock's request count says whether the model was reached.
//!
//! - `inference.max_session_tokens`: the task ends `spend_ceiling_reached`, with
//!   upstream's words, a trace line and `stopped: …` in `out/result.txt`; every later
//!   task of the session too, without calling the model.
//! - `spend.machine_tokens_per_day` (`$MURMUR_HOME/config.yaml`): kept on disk, shared
//!   by every `mur` of the user (two at once never pass it together), carried to the
//!   next process.
//! - `limits.tokens_per_day` under `mur serve`: one tenant stopped, its neighbour not;
//!   its day survives a restart of the server.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::mock_model::{MockModel, Reply, openai};
use crate::common::served::{Create, Served};
use crate::common::*;

const WAIT: Duration = Duration::from_secs(90);
const JSON_CT: (&str, &str) = ("content-type", "application/json");
/// `inference.max_tokens` of every capsule here: what a call could use besides its
/// input.
const MAX_TOKENS: u64 = 100;

/// A capsule of the `openai` driver against `mock`; `inference` and `lifecycle` are
/// further lines of those blocks.
fn manifest(mock: &MockModel, inference: &str, lifecycle: &str) -> String {
    format!(
        r#"name: spender
version: "0.1.0"
capabilities:
  network:
    allow: [{origin}]
inference:
  driver: openai
  endpoint: {origin}/v1
  model: test-model
  api_key: none-needed
  stream: false
  max_tokens: {MAX_TOKENS}
  max_turns: 60
  retry: {{max_attempts: 1, initial_backoff_ms: 10, max_backoff_ms: 10}}
  timeouts: {{connect_secs: 5, read_secs: 20}}
{inference}lifecycle:
{lifecycle}"#,
        origin = mock.origin()
    )
}

const ONE_TASK: &str = "  task_acceptance: none\n";
const QUEUED: &str = "  task_acceptance: queue\n  after_task: sleep\n";

/// A reply asking for a tool the capsule does not have: the loop goes on to the next
/// turn (with the error as the call's result), so only a ceiling ends the task.
fn tool_reply(usage: (u64, u64)) -> Reply {
    let call = openai::tool_call("c1", "nope", "{}");
    Reply::json(200, openai::completion(None, &[call], "tool_calls", usage))
}

fn text_reply(text: &str, usage: (u64, u64)) -> Reply {
    Reply::json(200, openai::completion(Some(text), &[], "stop", usage))
}

fn events(trace: &[Value], kind: &str) -> Vec<Value> {
    trace
        .iter()
        .filter(|e| e["event_type"] == kind)
        .cloned()
        .collect()
}

/// The one `spend_ceiling_reached` line of the task `task_id`.
fn refusal_of(trace: &[Value], task_id: &str) -> Value {
    let lines: Vec<Value> = events(trace, "spend_ceiling_reached")
        .into_iter()
        .filter(|e| e["task_id"] == task_id)
        .collect();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    lines[0].clone()
}

/// Upstream's message for a refusal line, by its fields.
fn message_of(line: &Value) -> String {
    let (limit, ceiling, used, requested) = (
        line["limit"].as_str().unwrap(),
        line["ceiling"].as_u64().unwrap(),
        line["used"].as_u64().unwrap(),
        line["requested"].as_u64().unwrap(),
    );
    let daily = |who: &str| {
        format!(
            "spend ceiling reached: {limit} is {ceiling} and {who} used {used} today (UTC); \
             the next call could use up to {requested} more. The operator set this limit; \
             retrying will not get past it before it resets at 00:00 UTC."
        )
    };
    match (limit, requested) {
        ("inference.max_session_tokens", 0) => format!(
            "spend ceiling reached: inference.max_session_tokens is {ceiling} and this \
             session has used {used}, which is at or past it. The operator set this limit; \
             retrying will not get past it."
        ),
        ("inference.max_session_tokens", _) => format!(
            "spend ceiling reached: inference.max_session_tokens is {ceiling} and this \
             session has used {used}; the next call could use up to {requested} more. The \
             operator set this limit; retrying will not get past it."
        ),
        ("spend.machine_tokens_per_day", _) => daily("capsules on this machine have"),
        ("limits.tokens_per_day", _) => daily("this capsule has"),
        other => panic!("no such limit: {other:?}"),
    }
}

/// A refusal's `requested` is what the next call could have used: its estimated input
/// and the whole `max_tokens`.
fn assert_requested_a_whole_call(line: &Value) {
    let requested = line["requested"].as_u64().unwrap();
    assert!(requested > MAX_TOKENS, "{line}");
    assert!(
        line["used"].as_u64().unwrap() + requested > line["ceiling"].as_u64().unwrap(),
        "{line}"
    );
}

fn task_end(trace: &[Value], task_id: &str) -> Value {
    events(trace, "task_end")
        .into_iter()
        .find(|e| e["task_id"] == task_id)
        .unwrap_or_else(|| panic!("no task_end of {task_id}"))
}

/// What the provider reported for each of the session's calls, summed.
fn reported_usage(trace: &[Value]) -> u64 {
    events(trace, "inference")
        .iter()
        .map(|e| {
            e["input_tokens_actual"].as_u64().unwrap() + e["output_tokens_actual"].as_u64().unwrap()
        })
        .sum()
}

fn sigterm(running: &Running) {
    // SAFETY: kill only sends a signal, to a child that has not been waited for.
    unsafe { libc::kill(running.child.id() as libc::pid_t, libc::SIGTERM) };
}

/// A `MURMUR_HOME` of the test's own with `spend.machine_tokens_per_day` set.
fn home_with_ceiling(name: &str, tokens: u64) -> PathBuf {
    let home = scratch(name).join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("config.yaml"),
        format!("spend:\n  machine_tokens_per_day: {tokens}\n"),
    )
    .unwrap();
    home
}

/// The machine's ledger: the UTC day it counts and its tokens.
fn ledger(home: &Path) -> (String, u64) {
    let text = std::fs::read_to_string(home.join("spend").join("machine-day")).unwrap();
    let fields: Vec<&str> = text.trim_end().split(' ').collect();
    assert_eq!(fields[..2], ["murmur-spend", "1"], "{text:?}");
    (fields[2].to_string(), fields[3].parse().unwrap())
}

fn utc_today() -> String {
    chrono::Utc::now()
        .date_naive()
        .format("%Y-%m-%d")
        .to_string()
}

// =================================================================================
// The session's ceiling.

/// Two calls report 4999 tokens each; the third could pass 10000 and is refused before
/// the driver runs. The task ends `spend_ceiling_reached`: upstream's message on the
/// wire and in `stopped: …`, a trace line naming the limit, and no turn counted. The
/// next task of the session is refused the same way without reaching the model, and
/// the session ends `spend_ceiling_reached`.
#[test]
fn the_session_ceiling_ends_the_task_and_later_tasks_without_calling_the_model() {
    let mock = MockModel::with(vec![
        tool_reply((4000, 999)),
        tool_reply((4000, 999)),
        text_reply("never sent", (1, 1)),
    ]);
    let capsule = Capsule::new(
        "spend-session",
        &manifest(&mock, "  max_session_tokens: 10000\n", QUEUED),
        "",
    );
    let running = capsule.spawn(&["--task", "spend the session"]);
    let session = running.session();
    eventually(WAIT, "the first task ends", || {
        !events(&session.trace_so_far(), "task_end").is_empty()
    });
    assert_eq!(mock.requests().len(), 2);

    let trace = session.trace_so_far();
    let first = events(&trace, "task_start")[0]["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let line = refusal_of(&trace, &first);
    assert_eq!(
        (&line["limit"], &line["ceiling"], &line["used"]),
        (
            &json!("inference.max_session_tokens"),
            &json!(10000),
            &json!(9998)
        ),
        "{line}"
    );
    assert_eq!(
        reported_usage(&trace),
        9998,
        "what the provider reported is counted"
    );
    assert_requested_a_whole_call(&line);
    let message = message_of(&line);
    assert_eq!(
        session.read("out/result.txt"),
        format!("stopped: {message}")
    );
    let end = task_end(&trace, &first);
    assert_eq!(
        (&end["exit_status"], &end["turns"]),
        (&json!("spend_ceiling_reached"), &json!(2)),
        "the refused call is no turn: {end}"
    );
    // The refusal hangs under the task; no inference line was written for it.
    assert_eq!(events(&trace, "inference").len(), 2);

    // A second task: refused at its first call, the model never asked.
    let raw = read_to_close(post(
        &running.address,
        &[JSON_CT],
        &message_stream_body("and now this"),
    ));
    let body = raw.split_once("\r\n\r\n").unwrap().1;
    let frames = frames(body);
    let (_, _, last) = frames.last().unwrap();
    assert_eq!(last["status"]["state"], "failed", "{frames:#?}");
    let second = last["id"].as_str().unwrap().to_string();
    // The final status goes out before `task_end` is written.
    eventually(WAIT, "the second task's task_end", || {
        events(&session.trace_so_far(), "task_end").len() == 2
    });
    let trace = session.trace_so_far();
    let again = refusal_of(&trace, &second);
    assert_eq!(
        (&again["used"], &again["ceiling"]),
        (&json!(9998), &json!(10000))
    );
    assert_eq!(last["status"]["message"], message_of(&again));
    assert_eq!(mock.requests().len(), 2, "the model was not called again");
    assert_eq!(
        task_end(&trace, &second)["exit_status"],
        "spend_ceiling_reached"
    );

    sigterm(&running);
    let run = running.wait(WAIT);
    assert_eq!(run.status, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "error[E-RUN-040]: the task did not complete: spend_ceiling_reached (stopped: spend ceiling reached:"
        ),
        "{}",
        run.stderr
    );
    let end = session.events("session_end");
    assert_eq!(end[0]["exit_status"], "spend_ceiling_reached", "{end:?}");
    assert_eq!(mock.unused(), 1);
}

/// The provider reported more than the call could have used (2500 against 1000): the
/// next call finds the session at or past its ceiling and is refused with nothing
/// asked. `mur run` prints the result and `status:  spend_ceiling_reached`.
#[test]
fn a_session_past_its_ceiling_refuses_with_nothing_asked_and_mur_run_says_so() {
    let mock = MockModel::with(vec![tool_reply((2000, 500)), text_reply("unused", (1, 1))]);
    let capsule = Capsule::new(
        "spend-past",
        &manifest(&mock, "  max_session_tokens: 1000\n", ONE_TASK),
        "",
    );
    let mut cmd = mur();
    cmd.args(["run", "--port", "0", "--task", "go", "--manifest"])
        .arg(capsule.manifest());
    let run = finish(&mut cmd);
    assert_eq!(run.status, 1, "{}", run.stderr);
    let session_id = run
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("session: "))
        .unwrap_or_else(|| panic!("no session line: {}", run.stdout))
        .to_string();
    let session = Session {
        workdir: capsule.dir.join("workdir").join(&session_id),
        records: capsule
            .dir
            .join("workdir")
            .join(".murmur")
            .join(&session_id),
        id: session_id,
    };
    let trace = session.trace();
    let task = events(&trace, "task_start")[0]["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let line = refusal_of(&trace, &task);
    assert_eq!(
        line,
        json!({
            "event_type": "spend_ceiling_reached",
            "event_id": line["event_id"],
            "parent_id": events(&trace, "task_start")[0]["event_id"],
            "session_id": session.id,
            "timestamp": line["timestamp"],
            "task_id": task,
            // An event on the task's span.
            "trace_id": session.id.strip_prefix("ses_").unwrap(),
            "span_id": events(&trace, "task_start")[0]["span_id"],
            "limit": "inference.max_session_tokens",
            "ceiling": 1000,
            "used": 2500,
            "requested": 0,
        })
    );
    let message = "spend ceiling reached: inference.max_session_tokens is 1000 and this \
                   session has used 2500, which is at or past it. The operator set this \
                   limit; retrying will not get past it.";
    assert_eq!(message_of(&line), message);
    let result = format!("stopped: {message}");
    assert_eq!(session.read("out/result.txt"), result);
    let tail: Vec<&str> = run.stdout.lines().rev().take(2).collect();
    assert_eq!(tail, ["status:  spend_ceiling_reached", result.as_str()]);
    assert_eq!(
        events(&trace, "session_end")[0]["exit_status"],
        "spend_ceiling_reached"
    );
    assert_eq!(mock.requests().len(), 1);

    // `mur trace steps` shows the refusal under its task.
    let mut steps = mur();
    steps
        .args(["trace", "steps", "--manifest"])
        .arg(capsule.manifest());
    let steps = finish(&mut steps);
    steps.assert_ok();
    assert!(
        steps.stdout.lines().any(|l| l.trim_start()
            == "spend_ceiling_reached inference.max_session_tokens  2,500 of 1,000 used, 0 more asked"),
        "{}",
        steps.stdout
    );
}

/// `inference.max_session_tokens: 0` is refused at launch, naming the key.
#[test]
fn a_zero_session_ceiling_is_refused_at_launch() {
    let mock = MockModel::start();
    let capsule = Capsule::new(
        "spend-zero",
        &manifest(&mock, "  max_session_tokens: 0\n", ONE_TASK),
        "",
    );
    let run = capsule.run(&["--task", "go"]);
    run.assert_error("error[E-MAN-003]: ");
    assert!(
        run.stderr.contains("inference.max_session_tokens")
            && run.stderr.contains("must be at least 1, found 0"),
        "{}",
        run.stderr
    );
    assert_eq!(mock.requests().len(), 0);
}

// =================================================================================
// The machine's ceiling.

/// `spend.machine_tokens_per_day: 10000`: the day's count is on disk; the third call
/// is refused, and the next `mur run` of the user (same `MURMUR_HOME`) is refused at
/// its first call, the model never reached.
#[test]
fn the_machine_ceiling_is_kept_on_disk_and_holds_for_the_next_process() {
    let home = home_with_ceiling("spend-machine", 10_000);
    let env = [("MURMUR_HOME", home.to_str().unwrap())];
    let mock = MockModel::with(vec![
        tool_reply((4000, 999)),
        tool_reply((4000, 999)),
        text_reply("never sent", (1, 1)),
    ]);
    let capsule = Capsule::new("spend-machine", &manifest(&mock, "", ONE_TASK), "");
    let running = capsule.spawn_env(&["--task", "spend the day"], &env);
    let session = running.session();
    let run = running.wait(WAIT);
    assert_eq!(run.status, 1, "{}", run.stderr);
    assert_eq!(mock.requests().len(), 2);
    assert_eq!(ledger(&home), (utc_today(), 9998));

    let trace = session.trace();
    let task = events(&trace, "task_start")[0]["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let line = refusal_of(&trace, &task);
    assert_eq!(
        (&line["limit"], &line["ceiling"], &line["used"]),
        (
            &json!("spend.machine_tokens_per_day"),
            &json!(10000),
            &json!(9998)
        ),
    );
    assert_requested_a_whole_call(&line);
    let message = message_of(&line);
    assert!(
        message.ends_with("before it resets at 00:00 UTC."),
        "{message}"
    );
    assert_eq!(
        session.read("out/result.txt"),
        format!("stopped: {message}")
    );
    assert_eq!(
        task_end(&trace, &task)["exit_status"],
        "spend_ceiling_reached"
    );

    // Another process of the same user, a new session: the day is already spent.
    let next = capsule.spawn_env(&["--task", "anything left?"], &env);
    let next_session = next.session();
    let run = next.wait(WAIT);
    assert_eq!(run.status, 1, "{}", run.stderr);
    let trace = next_session.trace();
    let task = events(&trace, "task_start")[0]["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let line = refusal_of(&trace, &task);
    assert_eq!(line["used"], 9998);
    assert_eq!(events(&trace, "inference").len(), 0);
    assert_eq!(mock.requests().len(), 2, "the model was not called");
    assert_eq!(ledger(&home), (utc_today(), 9998));
}

/// Two `mur run` started at once share the day: each call reserves what it could use
/// under the ledger's lock, so together they never pass the ceiling, and the ledger
/// holds exactly what the provider reported for all their calls.
#[test]
fn two_processes_at_once_never_pass_the_machine_ceiling_together() {
    const CEILING: u64 = 4000;
    // Each call's reported usage stays within what it reserved (its input estimate,
    // checked below to be at least 100, and the whole max_tokens).
    const USAGE: (u64, u64) = (100, MAX_TOKENS);
    let home = home_with_ceiling("spend-race", CEILING);
    let env = [("MURMUR_HOME", home.to_str().unwrap())];
    let mock = MockModel::with((0..60).map(|_| tool_reply(USAGE)).collect());
    let manifest = manifest(&mock, "", ONE_TASK);
    let a = Capsule::new("spend-race-a", &manifest, "");
    let b = Capsule::new("spend-race-b", &manifest, "");
    let ra = a.spawn_env(&["--task", "race"], &env);
    let rb = b.spawn_env(&["--task", "race"], &env);
    let sessions = [ra.session(), rb.session()];
    for run in [ra.wait(WAIT), rb.wait(WAIT)] {
        assert_eq!(run.status, 1, "{}", run.stderr);
    }
    let mut total = 0;
    let mut calls = 0;
    for session in &sessions {
        let trace = session.trace();
        for turn in events(&trace, "inference") {
            assert!(turn["input_tokens"].as_u64().unwrap() >= USAGE.0, "{turn}");
        }
        total += reported_usage(&trace);
        calls += events(&trace, "inference").len();
        let task = events(&trace, "task_start")[0]["task_id"]
            .as_str()
            .unwrap()
            .to_string();
        let line = refusal_of(&trace, &task);
        assert_eq!(line["limit"], "spend.machine_tokens_per_day");
        assert_requested_a_whole_call(&line);
    }
    assert!(total <= CEILING, "together they used {total} of {CEILING}");
    assert_eq!(calls, mock.requests().len());
    assert!(mock.unused() > 0, "the ceiling stopped them, not the mock");
    assert_eq!(ledger(&home), (utc_today(), total));
}

/// A config that misspells its ceiling, and a ledger that is a link, stop the launch
/// with an error naming the file and a hint; nothing reaches the model.
#[test]
fn a_bad_config_or_ledger_stops_the_launch() {
    let mock = MockModel::start();
    let capsule = Capsule::new("spend-bad", &manifest(&mock, "", ONE_TASK), "");
    let home = scratch("spend-bad-home");
    std::fs::write(
        home.join("config.yaml"),
        "spend:\n  machine_token_per_day: 5\n",
    )
    .unwrap();
    let env = [("MURMUR_HOME", home.to_str().unwrap())];
    let mut cmd = mur();
    cmd.args(["run", "--json", "--port", "0", "--task", "go", "--manifest"])
        .arg(capsule.manifest())
        .envs(env);
    let run = finish(&mut cmd);
    run.assert_error(&format!(
        "error[E-CFG-002]: {}: spend.machine_token_per_day is not a setting mur knows\n  hint: ",
        home.join("config.yaml").display()
    ));

    std::fs::write(
        home.join("config.yaml"),
        "spend:\n  machine_tokens_per_day: 5\n",
    )
    .unwrap();
    std::fs::create_dir_all(home.join("spend")).unwrap();
    let target = home.join("elsewhere");
    std::fs::write(&target, "keep me").unwrap();
    std::os::unix::fs::symlink(&target, home.join("spend").join("machine-day")).unwrap();
    let run = finish(&mut cmd);
    run.assert_error(&format!(
        "error[E-SPEND-001]: the spend ledger {} is unusable: it is a symbolic link, which is \
         not followed\n  hint: ",
        home.join("spend").join("machine-day").display()
    ));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
    assert_eq!(mock.requests().len(), 0);
}

// =================================================================================
// A tenant's ceiling under `mur serve`.

fn served_yaml(mock: &MockModel) -> String {
    manifest(mock, "", QUEUED).replace("name: spender", "name: tenant")
}

fn last_status(frames: &[crate::common::sse_frames::Frame]) -> &Value {
    &frames.last().expect("frames").data["status"]
}

/// A tenant with `limits.tokens_per_day: 10000` is stopped at its third call while
/// its neighbour (the server's `--capsule-tokens-per-day` for a ceiling) goes on
/// working. Both days show in the admin API, the tokens in `/metrics`; after a restart
/// of the server the tenant's day is where it was and its next task is refused without
/// reaching the model.
#[test]
fn a_tenant_over_its_tokens_per_day_is_stopped_and_its_neighbour_is_not() {
    let tenant_mock = MockModel::with(vec![
        tool_reply((4000, 999)),
        tool_reply((4000, 999)),
        text_reply("never sent", (1, 1)),
    ]);
    let neighbour_mock = MockModel::with(vec![
        text_reply("still here", (10, 3)),
        text_reply("still here after the restart", (10, 3)),
    ]);
    let mut served =
        Served::start_with("spend-serve", &["--capsule-tokens-per-day", "1000000"], &[]);
    let tenant = served
        .create(&Create::yaml(&served_yaml(&tenant_mock)).limits(json!({"tokens_per_day": 10000})));
    let neighbour = served.create(&Create::yaml(&served_yaml(&neighbour_mock)));

    let frames = tenant.message("spend it all");
    let status = last_status(&frames);
    assert_eq!(status["state"], "failed", "{frames:#?}");
    let task = frames.last().unwrap().task().to_string();
    let session = served.session_id(&tenant.id);
    // The final status goes out before `task_end` is written.
    served.wait_for_event(&tenant.id, "task_end", 0);
    let trace = served.trace(&tenant.id, &session);
    let line = refusal_of(&trace, &task);
    assert_eq!(
        (&line["limit"], &line["ceiling"], &line["used"]),
        (&json!("limits.tokens_per_day"), &json!(10000), &json!(9998)),
    );
    assert_requested_a_whole_call(&line);
    assert_eq!(status["message"], message_of(&line));
    assert!(
        message_of(&line).starts_with(
            "spend ceiling reached: limits.tokens_per_day is 10000 and this capsule has used \
             9998 today (UTC); "
        ),
        "{line}"
    );
    assert_eq!(
        task_end(&trace, &task)["exit_status"],
        "spend_ceiling_reached"
    );

    let frames = neighbour.message("are you still working?");
    assert_eq!(last_status(&frames)["state"], "completed", "{frames:#?}");
    assert_eq!(last_status(&frames)["response"], "still here");

    let day = utc_today();
    assert_eq!(
        served.capsule(&tenant.id)["tokens"],
        json!({"day": day, "used": 9998, "per_day": 10000})
    );
    assert_eq!(
        served.capsule(&neighbour.id)["tokens"],
        json!({"day": day, "used": 13, "per_day": 1000000})
    );
    let metrics = served.metrics();
    for line in [
        "mur_inference_tokens_total{kind=\"input\"} 8010",
        "mur_inference_tokens_total{kind=\"output\"} 2001",
        "mur_spend_refusals_total 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line}:\n{metrics}");
    }
    assert!(!metrics.contains(&tenant.id) && !metrics.contains("tenant"));

    // A restart brings the day back from the tenant's records.
    served.restart();
    assert_eq!(served.capsule(&tenant.id)["tokens"]["used"], 9998);
    let frames = tenant.message("one more?");
    assert_eq!(last_status(&frames)["state"], "failed", "{frames:#?}");
    let task = frames.last().unwrap().task().to_string();
    let session = served.session_id(&tenant.id);
    let line = refusal_of(&served.trace(&tenant.id, &session), &task);
    assert_eq!(line["used"], 9998);
    assert_eq!(
        tenant_mock.requests().len(),
        2,
        "the model was not called again"
    );
    let frames = neighbour.message("and after the restart?");
    assert_eq!(
        last_status(&frames)["response"],
        "still here after the restart"
    );
}

/// `limits.tokens_per_day: 0` would refuse every call: the creation is refused.
#[test]
fn a_zero_tokens_per_day_is_refused_at_creation() {
    let mock = MockModel::start();
    let served = Served::start("spend-serve-zero");
    let reply =
        served.try_create(&Create::yaml(&served_yaml(&mock)).limits(json!({"tokens_per_day": 0})));
    assert_eq!(reply.status, 400, "{reply:?}");
    assert_eq!(
        reply.json()["error"]["message"],
        "limits.tokens_per_day is 0, which would refuse everything"
    );
}
