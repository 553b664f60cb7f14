//! `mur trace calls`: a formation run with `mur run --roster`, then its call tree read
//! back from every member's traces, as a user would.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::common::*;

const WAIT: Duration = Duration::from_secs(90);

const WORKER: &str = "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\nexports:\n  peer_tasks:\n    accept: true\n";

/// A formation in a scratch folder: lead → a → b, and b calls back into a, which is
/// waiting on it, so that call is refused as a cycle.
fn relay_formation(test: &str) -> PathBuf {
    let dir = scratch(test);
    let relay = |to: &str| {
        format!(
            "  - tool_calls: [{{id: c1, name: call-member, input: {{member: {to}, task: \"Pass it on.\"}}}}]\n{}",
            text_turn("{{last_tool_result}}")
        )
    };
    for (name, extra, to) in [("lead", "", "a"), ("a", WORKER, "b"), ("b", WORKER, "a")] {
        let home = dir.join(name);
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(
            home.join("murmur.yaml"),
            format!(
                "name: {name}\nversion: \"1.0.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-{name}\n  max_turns: 6\n{extra}"
            ),
        )
        .unwrap();
        std::fs::write(
            home.join("script.yaml"),
            format!("{SPAN_SESSION}turns:\n{}", relay(to)),
        )
        .unwrap();
    }
    std::fs::write(
        dir.join("roster.yaml"),
        "roster_version: 1\nmembers:\n  - {name: lead, path: ./lead, entry: true}\n  - {name: a, path: ./a}\n  - {name: b, path: ./b}\nreachability:\n  - {from: lead, to: [a]}\n  - {from: a, to: [b]}\n  - {from: b, to: [a]}\n",
    )
    .unwrap();
    dir
}

fn run_formation(dir: &Path) {
    finish_within(
        mur()
            .args(["run", "--port", "0", "--roster"])
            .arg(dir)
            .args(["--task", "Go."]),
        WAIT,
    )
    .assert_ok();
}

/// `mur trace calls --roster <dir> <args>`, to its exit.
fn calls(dir: &Path, args: &[&str]) -> Run {
    finish(
        mur()
            .args(["trace", "calls", "--roster"])
            .arg(dir)
            .args(args),
    )
}

/// Every `<prefix>` followed by `len` hex digits, as `<prefix>#N`, N counting distinct
/// ids on from those in `seen`: ids are masked and still told apart.
fn mask_ids(text: &str, prefix: &str, len: usize, seen: &mut Vec<String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        out.push_str(&rest[..at]);
        let after = &rest[at + prefix.len()..];
        let hex: String = after.chars().take_while(char::is_ascii_hexdigit).collect();
        if hex.len() != len {
            out.push_str(prefix);
            rest = after;
            continue;
        }
        let id = format!("{prefix}{hex}");
        let n = match seen.iter().position(|s| *s == id) {
            Some(i) => i + 1,
            None => {
                seen.push(id);
                seen.len()
            }
        };
        out.push_str(&format!("{prefix}#{n}"));
        rest = &after[len..];
    }
    out.push_str(rest);
    out
}

/// Durations (`850µs`, `12ms`, `1.2s`) as `<d>`, and ids as [`mask_ids`] writes them.
fn mask(text: &str) -> String {
    let mut seen = Vec::new();
    let text = mask_ids(text, "ses_", 32, &mut seen);
    let text = mask_ids(&text, "tsk_", 32, &mut seen);
    let text = mask_ids(&text, "mcl_…", 8, &mut seen);
    text.lines()
        .map(|line| {
            line.split("  ")
                .map(|word| if is_duration(word) { "<d>" } else { word })
                .collect::<Vec<_>>()
                .join("  ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_duration(word: &str) -> bool {
    let number = word
        .strip_suffix("µs")
        .or_else(|| word.strip_suffix("ms"))
        .or_else(|| word.strip_suffix('s'));
    number.is_some_and(|n| !n.is_empty() && n.parse::<f64>().is_ok())
}

/// The sessions under `member`'s records, oldest first.
fn sessions(dir: &Path, member: &str) -> Vec<String> {
    let records = dir.join(member).join("workdir/.murmur");
    let mut ids: Vec<String> = std::fs::read_dir(&records)
        .unwrap_or_else(|e| panic!("{}: {e}", records.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("ses_"))
        .collect();
    ids.sort();
    ids
}

fn trace_lines(dir: &Path, member: &str, session: &str) -> Vec<Value> {
    json_lines(
        &dir.join(member)
            .join("workdir/.murmur")
            .join(session)
            .join("trace.jsonl"),
    )
}

fn line_of<'a>(lines: &'a [Value], kind: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l["event_type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} line"))
}

const TREE: &str = "\
Session ses_#1  (lead, the entry: 1 task, 3 calls)

task tsk_#2  lead  ok  <d>
  → a  answered  <d>  mcl_…#5
    task tsk_#3  a  ok  <d>
      → b  answered  <d>  mcl_…#6
        task tsk_#4  b  ok  <d>
          → a  refused  <d>  mcl_…#7
";

#[test]
fn the_call_tree_runs_from_the_entry_task_through_a_nested_call_to_a_refusal() {
    let dir = relay_formation("trace-calls");
    run_formation(&dir);
    run_formation(&dir);

    let newest = calls(&dir, &[]);
    newest.assert_ok();
    assert_eq!(mask(&newest.stdout), TREE, "{}", newest.stdout);
    assert_eq!(newest.stderr, "");

    // The first run's tree: its workers' tasks are found among both their sessions.
    let first = calls(&dir, &["@2", "--json"]);
    let doc: Value = serde_json::from_str(&first.assert_ok().stdout).unwrap();
    let (lead, a, b) = (
        sessions(&dir, "lead"),
        sessions(&dir, "a"),
        sessions(&dir, "b"),
    );
    assert_eq!((lead.len(), a.len(), b.len()), (2, 2, 2));
    assert_eq!(doc["session_id"], lead[0].as_str());
    assert_eq!(doc["entry"], "lead");
    assert_eq!(doc["skipped"], serde_json::json!([]));
    let lead_trace = trace_lines(&dir, "lead", &lead[0]);
    let task = &doc["tasks"][0];
    assert_eq!(
        task["task_id"],
        line_of(&lead_trace, "task_start")["task_id"]
    );
    assert_eq!(task["member"], "lead");
    assert_eq!(task["status"], "ok");
    let to_a = &task["calls"][0];
    let sent = line_of(&lead_trace, "member_call");
    assert_eq!(to_a["call_id"], sent["call_id"]);
    assert_eq!(to_a["task"]["task_id"], sent["member_task_id"]);
    assert_eq!(to_a["task"]["session_id"], a[0].as_str());
    let to_b = &to_a["task"]["calls"][0];
    assert_eq!(to_b["task"]["session_id"], b[0].as_str());
    let refused = &to_b["task"]["calls"][0];
    assert_eq!(refused["status"], "refused");
    assert_eq!(refused["member"], "a");
    assert_eq!(refused["task"], Value::Null);
    assert_eq!(refused["not_followed"], "no_task");
    let b_trace = trace_lines(&dir, "b", &b[0]);
    let received = line_of(&b_trace, "peer_task_received");
    assert_eq!(to_b["task"]["task_id"], received["task_id"]);
    assert_eq!(to_b["call_id"], received["call_id"]);

    // The entry's session named by its trace's path reads the same as by its ordinal.
    let path = dir
        .join("lead/workdir/.murmur")
        .join(&lead[1])
        .join("trace.jsonl");
    let by_path = calls(&dir, &[path.to_str().unwrap()]);
    assert_eq!(by_path.assert_ok().stdout, newest.stdout);
}

#[test]
fn a_missing_roster_and_a_formation_never_run_are_named() {
    let dir = relay_formation("trace-calls-errors");
    let run = calls(&dir.join("nowhere"), &[]);
    run.assert_error("error[E-TRC-005]: no roster at ");
    assert!(run.stderr.contains("nowhere"), "{}", run.stderr);

    let run = calls(&dir, &[]);
    run.assert_error("error[E-TRC-006]: the entry member 'lead' has no session under ");
    assert!(
        run.stderr.contains("hint: run the formation first"),
        "{}",
        run.stderr
    );
}
