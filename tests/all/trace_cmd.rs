//! `mur trace show|steps|diff|report`: run real sessions with `mur run`, then read them
//! back the way a user would; and crafted traces whose figures are worked out by hand.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::*;

/// The hello example's capsule, in a folder of its own.
fn hello(name: &str) -> Capsule {
    let capsule = Capsule { dir: scratch(name) };
    for file in ["murmur.yaml", "script.yaml"] {
        std::fs::copy(
            repo().join("examples/hello").join(file),
            capsule.dir.join(file),
        )
        .unwrap();
    }
    capsule
}

/// One hello session, run to its end.
fn run_hello(capsule: &Capsule) -> Session {
    let run = capsule.run(&["--task", "What is in your workdir?"]);
    run.assert_ok();
    run.session()
}

/// `mur trace <args> --manifest <manifest>`, to its exit.
fn trace(manifest: &Path, args: &[&str]) -> Run {
    finish(
        mur()
            .arg("trace")
            .args(args)
            .arg("--manifest")
            .arg(manifest),
    )
}

fn json_of(run: &Run) -> Value {
    run.assert_ok();
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("not one JSON document ({e}):\n{}", run.stdout))
}

fn event<'a>(trace: &'a [Value], kind: &str) -> &'a Value {
    trace
        .iter()
        .find(|e| e["event_type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} line"))
}

/// `12ms` or `1.2s`, as `steps` prints a duration.
fn dur(ms: &Value) -> String {
    let ms = ms.as_u64().unwrap();
    if ms < 1000 {
        format!("{ms}ms")
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}

fn short(id: &Value) -> String {
    format!("{}…", &id.as_str().unwrap()[..12])
}

#[test]
fn steps_shows_the_hello_session_turn_by_turn_with_its_task_row() {
    let capsule = hello("trace-steps");
    let session = run_hello(&capsule);
    let lines = session.trace();
    let (task, call, shell, end) = (
        event(&lines, "task_start"),
        event(&lines, "tool_call"),
        event(&lines, "shell"),
        event(&lines, "task_end"),
    );
    let run = trace(&capsule.manifest(), &["steps"]);
    run.assert_ok();
    assert_eq!(
        run.stdout,
        format!(
            "Session {}  (1 task, 2 turns)\n\
             \n\
             task {}  {}  (task_md, user/trusted, lane user)\n\
             \x20 turn 0  tool_call  bash\n\
             \x20   tool_call  bash  {}  ✓\n\
             \x20   shell      {}  exit 0  {}\n\
             \x20 turn 1  end_turn\n\
             \x20 task_end   ok  2 turns  {}\n\
             \n",
            session.id,
            short(&task["task_id"]),
            short(&task["context_id"]),
            dur(&call["duration_ms"]),
            shell["binary"].as_str().unwrap(),
            dur(&shell["duration_ms"]),
            dur(&end["duration_ms"]),
        )
    );
    let verbose = trace(&capsule.manifest(), &["steps", "--verbose"]);
    assert!(
        verbose.stdout.contains(&format!(
            "    tool_call  bash  {}  ✓  {{\"command\":\"ls -1 && head -n 1 task.md\"}}\n",
            dur(&call["duration_ms"])
        )),
        "{}",
        verbose.stdout
    );

    let doc = json_of(&trace(&capsule.manifest(), &["steps", "--json"]));
    assert_eq!(doc["session_id"], json!(session.id));
    assert_eq!(
        (doc["tasks"].as_u64(), doc["turns"].as_u64()),
        (Some(1), Some(2))
    );
    let steps = doc["steps"].as_array().unwrap();
    assert_eq!(steps[0]["event_type"], "task_start");
    assert_eq!(
        steps[0]["text"],
        format!(
            "task {}  {}  (task_md, user/trusted, lane user)",
            short(&task["task_id"]),
            short(&task["context_id"])
        )
    );
    let depths: Vec<u64> = steps.iter().map(|s| s["depth"].as_u64().unwrap()).collect();
    assert_eq!(depths, [0, 1, 2, 2, 1, 1]);
}

#[test]
fn show_has_every_section_with_the_sessions_figures() {
    let capsule = hello("trace-show");
    let session = run_hello(&capsule);
    let lines = session.trace();
    let (call, shell, end) = (
        event(&lines, "tool_call"),
        event(&lines, "shell"),
        event(&lines, "session_end"),
    );
    let run = trace(&capsule.manifest(), &["show"]);
    run.assert_ok();
    let out = &run.stdout;
    let input = end["total_input_tokens"].as_u64().unwrap();
    let output = end["total_output_tokens"].as_u64().unwrap();
    for expected in [
        "── Session ──────────────────────────────────────".to_string(),
        format!("session:    {}", session.id),
        "capsule:    hello v0.1.0".into(),
        "model:      scripted-hello".into(),
        "status:     ok".into(),
        "capabilities: filesystem, shell".into(),
        "tools:      bash".into(),
        "── Turns ────────────────────────────────────────".into(),
        "count:      2  (max: 4)".into(),
        "── Tokens ───────────────────────────────────────".into(),
        format!("input:      {input}  (avg {:.0}/turn)", input as f64 / 2.0),
        format!(
            "output:     {output}  (avg {:.0}/turn)",
            output as f64 / 2.0
        ),
        "── Tool calls ───────────────────────────────────".into(),
        "count:      1  (1 ok, 0 error)  success 100.0%".into(),
        format!(
            "  turn 0  bash {}ms ✓  {{\"command\":\"ls -1 && head -n 1 task.md\"}}",
            call["duration_ms"]
        ),
        "  turn 1  end_turn".into(),
        "── Shell calls ──────────────────────────────────".into(),
        "count:      1".into(),
        "exit codes: 1 ok".into(),
        format!(
            "  turn 0  {}  exit 0  {}ms  ls -1 && head -n 1 task.md",
            shell["binary"].as_str().unwrap(),
            shell["duration_ms"]
        ),
        "── Compaction ───────────────────────────────────".into(),
        "fired:      no".into(),
    ] {
        assert!(
            out.lines().any(|l| l == expected),
            "no line {expected:?} in:\n{out}"
        );
    }
    assert!(
        !out.contains("── Tasks"),
        "one task has no Tasks section:\n{out}"
    );

    let doc = json_of(&trace(&capsule.manifest(), &["show", "--json"]));
    assert_eq!(doc["session_id"], json!(session.id));
    assert_eq!(doc["capabilities"], json!(["filesystem", "shell"]));
    assert_eq!(doc["turns"], 2);
    assert_eq!(doc["input_tokens"], json!(input));
    assert_eq!(doc["tool_calls"], 1);
    assert_eq!(doc["shell_calls"], 1);
    assert_eq!(doc["exit_status"], "ok");
    assert_eq!(doc["tasks"][0]["lane"], "user");
    assert_eq!(doc["torn_line"], Value::Null);
}

/// Copies a session's records under another id, as if a second session had run.
fn copy_session(from: &Session, root: &Path, id: &str) -> PathBuf {
    let dir = root.join(id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(from.records.join("trace.jsonl"), dir.join("trace.jsonl")).unwrap();
    dir.join("trace.jsonl")
}

fn shown_session(run: &Run) -> String {
    run.assert_ok();
    run.stdout
        .lines()
        .find_map(|l| l.strip_prefix("session:    "))
        .unwrap_or_else(|| panic!("no session line:\n{}", run.stdout))
        .to_string()
}

#[test]
fn selectors_name_sessions_by_age_id_suffix_and_path() {
    let capsule = hello("trace-select");
    let first = run_hello(&capsule);
    let second = run_hello(&capsule);
    assert!(first.id < second.id);
    let m = capsule.manifest();
    let show = |selector: &str| shown_session(&trace(&m, &["show", selector]));
    assert_eq!(
        shown_session(&trace(&m, &["show"])),
        second.id,
        "none = newest"
    );
    assert_eq!(show("@1"), second.id);
    assert_eq!(show("@2"), first.id);
    assert_eq!(show(&first.id), first.id);
    let suffix = first.id[first.id.len() - 6..].to_ascii_uppercase();
    assert_eq!(show(&suffix), first.id, "a suffix, any case");
    let path = first.records.join("trace.jsonl");
    assert_eq!(show(path.to_str().unwrap()), first.id, "a path");

    let far = trace(&m, &["show", "@3"]);
    far.assert_error("error[E-TRC-002]: no session matches '@3' under ");
    assert!(
        far.stderr.contains(": there are only 2 sessions\n  hint: "),
        "{}",
        far.stderr
    );
    assert!(far.stdout.is_empty());

    // A made-up session whose id ends like the first one's.
    let root = first.records.parent().unwrap();
    let twin = format!("ses_0000{}", &first.id[8..]);
    copy_session(&first, root, &twin);
    let tail = &first.id[first.id.len() - 8..];
    let both = trace(&m, &["show", tail]);
    both.assert_error(&format!(
        "error[E-TRC-002]: '{tail}' names 2 sessions:\n  {twin}\n  {}\n  hint: give more characters of the id\n",
        first.id
    ));
    // The made-up one is the oldest now: @3.
    let oldest = trace(&m, &["show", "@3"]);
    oldest.assert_ok();
    assert!(
        oldest.stdout.contains(&format!("/{twin}/trace.jsonl\n")),
        "{}",
        oldest.stdout
    );

    let nowhere = scratch("trace-select-none").join("murmur.yaml");
    trace(&nowhere, &["show"]).assert_error("error[E-TRC-002]: no sessions under ");
}

#[test]
fn the_sessions_of_a_run_with_workdir_are_found_with_the_same_flag() {
    let capsule = hello("trace-workdir");
    let workdir = capsule.dir.join("elsewhere");
    let run = capsule.run(&[
        "--task",
        "What is in your workdir?",
        "--workdir",
        workdir.to_str().unwrap(),
    ]);
    run.assert_ok();
    let session = run.session();
    let found = finish(mur().args(["trace", "show", "--workdir"]).arg(&workdir));
    assert_eq!(shown_session(&found), session.id);
}

#[test]
fn a_torn_last_line_is_skipped_and_said_and_a_malformed_one_is_refused() {
    let capsule = hello("trace-torn");
    let session = run_hello(&capsule);
    let root = session.records.parent().unwrap();
    let text = std::fs::read_to_string(session.records.join("trace.jsonl")).unwrap();
    let count = text.lines().count();

    let torn_id = format!("ses_ffff{}", &session.id[8..]);
    let torn = copy_session(&session, root, &torn_id);
    std::fs::write(&torn, format!("{text}{{\"event_type\":\"task_st")).unwrap();
    let run = trace(&capsule.manifest(), &["show", &torn_id]);
    run.assert_ok();
    let note = format!(
        "note:       line {}, the last, is not valid JSON and was skipped (its writer was stopped mid-line)",
        count + 1
    );
    assert_eq!(
        run.stdout
            .lines()
            .filter(|l| l.contains("not valid JSON"))
            .collect::<Vec<_>>(),
        [note.as_str()]
    );
    assert!(run.stdout.contains("status:     ok\n"), "{}", run.stdout);
    let doc = json_of(&trace(&capsule.manifest(), &["steps", &torn_id, "--json"]));
    assert_eq!(doc["torn_line"], json!(count + 1));

    let bad_id = format!("ses_eeee{}", &session.id[8..]);
    let bad = copy_session(&session, root, &bad_id);
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(2, "{\"event_type\": \"inference\", oops}");
    std::fs::write(&bad, lines.join("\n") + "\n").unwrap();
    for sub in ["show", "steps", "report"] {
        let run = trace(&capsule.manifest(), &[sub, &bad_id]);
        run.assert_error(&format!(
            "error[E-TRC-001]: {}:3: not JSON (",
            bad.display()
        ));
        assert!(run.stderr.contains("\n  hint: "), "{}", run.stderr);
        assert!(run.stdout.is_empty(), "{}", run.stdout);
    }
}

/// A made-up finished session: `session_start`, one task, `session_end`.
struct Crafted {
    turns: u64,
    input: u64,
    output: u64,
    tools: u64,
    duration_ms: u64,
    status: &'static str,
    started_ms: u64,
}

fn craft(root: &Path, id: &str, c: &Crafted) {
    let dir = root.join(id);
    std::fs::create_dir_all(&dir).unwrap();
    let at = c.started_ms;
    let lines = [
        json!({"event_type": "session_start", "event_id": format!("evt_{id}a"), "parent_id": null,
               "session_id": id, "timestamp": at, "task_id": null, "capsule_name": "c",
               "capsule_version": "1.0.0", "model": "m", "max_turns": 10,
               "capabilities": ["filesystem"]}),
        json!({"event_type": "task_start", "event_id": format!("evt_{id}b"),
               "parent_id": format!("evt_{id}a"), "session_id": id, "timestamp": at + 1,
               "task_id": "tsk_1", "source": "task_md", "origin": "user", "trust": "trusted",
               "lane": "user"}),
        json!({"event_type": "task_end", "event_id": format!("evt_{id}c"),
               "parent_id": format!("evt_{id}b"), "session_id": id,
               "timestamp": at + c.duration_ms, "task_id": "tsk_1", "exit_status": c.status,
               "turns": c.turns, "duration_ms": c.duration_ms}),
        json!({"event_type": "session_end", "event_id": format!("evt_{id}d"),
               "parent_id": format!("evt_{id}a"), "session_id": id,
               "timestamp": at + c.duration_ms, "task_id": null, "total_turns": c.turns,
               "total_input_tokens": c.input, "total_output_tokens": c.output,
               "total_tool_calls": c.tools, "total_shell_calls": 0,
               "duration_ms": c.duration_ms, "exit_status": c.status}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(dir.join("trace.jsonl"), text).unwrap();
}

/// Three sessions with turns 2, 4 and 9, the oldest started three days ago.
fn three_sessions(name: &str) -> PathBuf {
    let dir = scratch(name);
    let root = dir.join("workdir").join(".murmur");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let day = 86_400_000;
    let sessions = [
        ("ses_01aaaa", 2, 100, 10, 1, 300, "ok", now - 3 * day),
        ("ses_02bbbb", 4, 200, 20, 3, 1500, "ok", now - 60_000),
        (
            "ses_03cccc",
            9,
            600,
            30,
            2,
            700,
            "max_turns_reached",
            now - 1000,
        ),
    ];
    for (id, turns, input, output, tools, duration_ms, status, started_ms) in sessions {
        let c = Crafted {
            turns,
            input,
            output,
            tools,
            duration_ms,
            status,
            started_ms,
        };
        craft(&root, id, &c);
    }
    dir.join("murmur.yaml")
}

#[test]
fn diff_puts_two_sessions_side_by_side_at_2_against_at_1_by_default() {
    let m = three_sessions("trace-diff");
    let run = trace(&m, &["diff"]);
    run.assert_ok();
    let rows: Vec<&str> = run.stdout.lines().skip(3).collect();
    let row = |cells: [&str; 4]| {
        format!(
            "{:<22} {:<16} {:<16} {}",
            cells[0], cells[1], cells[2], cells[3]
        )
    };
    assert_eq!(rows[0], row(["Metric", "Run A", "Run B", "Delta"]));
    for expected in [
        row(["turns", "4", "9", "+5"]),
        row(["duration", "1.5s", "700ms", "-800ms"]),
        row(["input tokens", "200", "600", "+400"]),
        row(["output tokens", "20", "30", "+10"]),
        row(["tool calls", "3", "2", "-1"]),
        row(["shell calls", "0", "0", "="]),
        row(["exit status", "ok", "max_turns_reached", "changed"]),
    ] {
        assert!(
            rows.contains(&expected.as_str()),
            "no row {expected:?} in:\n{}",
            run.stdout
        );
    }
    assert!(run.stdout.starts_with("A: ses_02bbbb  ("), "{}", run.stdout);

    let doc = json_of(&trace(&m, &["diff", "@3", "cccc", "--json"]));
    assert_eq!(doc["a"]["session_id"], "ses_01aaaa");
    assert_eq!(doc["b"]["session_id"], "ses_03cccc");
    let turns = doc["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "turns")
        .unwrap();
    assert_eq!(
        turns,
        &json!({"metric": "turns", "a": 2, "b": 9, "delta": 7})
    );
    assert_eq!(doc["exit_status_changed"], true);
}

#[test]
fn report_gives_mean_population_stddev_min_max_and_how_sessions_ended() {
    let m = three_sessions("trace-report");
    let run = trace(&m, &["report"]);
    run.assert_ok();
    let out = &run.stdout;
    assert!(out.starts_with("Sessions: 3  ("), "{out}");
    assert!(out.contains("\nStdDev: population "), "{out}");
    let row = |cells: [&str; 5]| {
        format!(
            "{:<22} {:<14} {:<14} {:<14} {}",
            cells[0], cells[1], cells[2], cells[3], cells[4]
        )
    };
    // turns 2, 4, 9: mean 5, population stddev sqrt(26/3) = 2.94.
    // input 100, 200, 600: mean 300, stddev sqrt(140000/3) = 216.02.
    // duration 300, 1500, 700: mean 833.3, stddev sqrt(746666.7/3) = 498.9.
    for expected in [
        row(["Metric", "Mean", "StdDev", "Min", "Max"]),
        row(["turns", "5.0", "2.9", "2.0", "9.0"]),
        row(["input tokens", "300", "216", "100", "600"]),
        row(["duration (ms)", "833", "499", "300", "1,500"]),
        row(["tool calls", "2.0", "0.8", "1.0", "3.0"]),
        "  max_turns_reached        1  (33.3%)".to_string(),
        "  ok                       2  (66.7%)".to_string(),
    ] {
        assert!(
            out.lines().any(|l| l == expected),
            "no row {expected:?} in:\n{out}"
        );
    }

    let doc = json_of(&trace(&m, &["report", "--json"]));
    assert_eq!(doc["stddev"], "population");
    let turns = &doc["metrics"]["turns"];
    assert_eq!(turns["mean"], 5.0);
    assert!((turns["stddev"].as_f64().unwrap() - (26.0f64 / 3.0).sqrt()).abs() < 1e-9);
    assert_eq!(
        (turns["min"].as_f64(), turns["max"].as_f64()),
        (Some(2.0), Some(9.0))
    );
    assert_eq!(doc["exit_status"], json!({"max_turns_reached": 1, "ok": 2}));
    assert_eq!(doc["sessions"].as_array().unwrap().len(), 3);

    let mean_turns = |args: &[&str]| {
        let mut all = vec!["report", "--json"];
        all.extend_from_slice(args);
        json_of(&trace(&m, &all))["metrics"]["turns"]["mean"]
            .as_f64()
            .unwrap()
    };
    assert_eq!(mean_turns(&["--last", "2"]), 6.5);
    assert_eq!(
        mean_turns(&["--since", "2h"]),
        6.5,
        "the oldest started 3 days ago"
    );
    assert_eq!(mean_turns(&["--since", "4d"]), 5.0);
    assert_eq!(mean_turns(&["@3", "bbbb"]), 3.0);

    trace(&m, &["report", "--since", "2w"])
        .assert_error("error[E-TRC-004]: --since 2w: not a duration");
    trace(&m, &["report", "--since", "1s"])
        .assert_error("error[E-TRC-002]: no sessions to report under ");
}

/// The fixture is upstream-shaped (see its README): a list for `capabilities`, fields
/// and event types mur does not write, and upstream's own session layout.
#[test]
fn an_upstream_trace_reads_like_ours() {
    let runs = repo().join("tests/fixtures/upstream-trace/runs");
    let show = finish(mur().args(["trace", "show", "--workdir"]).arg(&runs));
    show.assert_ok();
    for expected in [
        "session:    ses_019ed2af53da75c2aefee84ee10c34af",
        "capsule:    upstream-hello v1.2.0",
        "capabilities: network, filesystem, shell",
        "count:      4  (max: 10)",
        "input:      17,600  (avg 4400/turn)",
        "count:      2  (1 ok, 1 error)  success 50.0%",
        "  turn 0  read_file 14ms ✓  {\"path\":\"README.md\"}",
        "  turn 1  bash 2100ms ✗  {\"command\":\"make test\"}",
        "exit codes: 1 failed (exit 2)",
        "fired:      yes  at turn 2  (150,000 → 12,000 tokens)",
        "── Tasks ────────────────────────────────────────",
        "task 1  tsk_019ed2af…  turns: 3  in: 16,700  out: 340  ok  4.8s",
        "task 2  tsk_019ed2b0…  turns: 1  in: 900  out: 40  ok  490ms",
    ] {
        assert!(
            show.stdout.lines().any(|l| l == expected),
            "no line {expected:?} in:\n{}",
            show.stdout
        );
    }
    let steps = finish(mur().args(["trace", "steps", "@1", "--workdir"]).arg(&runs));
    steps.assert_ok();
    assert!(
        steps
            .stdout
            .contains("\ntask tsk_019ed2b0…  ctx_019ed2b0…  (a2a, event/untrusted, lane bg)\n  turn 0  end_turn\n"),
        "{}",
        steps.stdout
    );
    assert!(
        steps
            .stdout
            .contains("\n  compaction 150,000 → 12,000 tokens\n"),
        "{}",
        steps.stdout
    );
    let path = runs.join(
        "ses_019ed2af53da75c2aefee84ee10c34af/.murmur/ses_019ed2af53da75c2aefee84ee10c34af/trace.jsonl",
    );
    let by_path = finish(mur().args(["trace", "show", "--json"]).arg(&path));
    let doc = json_of(&by_path);
    assert_eq!(doc["session_id"], "ses_019ed2af53da75c2aefee84ee10c34af");
    assert_eq!(doc["tasks"][1]["trust"], "untrusted");
}
