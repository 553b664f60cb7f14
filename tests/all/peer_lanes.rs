//! A peer task waits in the `peer` lane, as the seed orders lanes: a formation's
//! worker, busy with a task, holds a `bg` task that arrived first and a peer task from
//! its lead that arrived after it; the peer task runs next.

use std::io::BufRead;
use std::time::Duration;

use serde_json::Value;

use crate::common::*;

const JSON_CT: (&str, &str) = ("content-type", "application/json");

fn write_member(dir: &std::path::Path, name: &str, extra: &str, turns: &str) {
    let home = dir.join(name);
    std::fs::create_dir_all(&home).unwrap();
    let manifest = format!(
        "name: {name}\nversion: \"1.0.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: m\n{extra}"
    );
    std::fs::write(home.join("murmur.yaml"), manifest).unwrap();
    std::fs::write(
        home.join("script.yaml"),
        format!("{SPAN_SESSION}turns:\n{turns}"),
    )
    .unwrap();
}

#[test]
fn a_peer_task_runs_ahead_of_a_bg_task_that_arrived_first() {
    let dir = scratch("peer-lanes");
    write_member(
        &dir,
        "lead",
        "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n",
        &format!(
            "  - tool_calls: [{{id: c1, name: call-member, input: {{member: worker, task: \"Your part.\"}}}}]\n{}",
            text_turn("{{last_tool_result}}")
        ),
    );
    write_member(
        &dir,
        "worker",
        "capabilities:\n  shell:\n    allow: [bash]\nlifecycle:\n  task_acceptance: queue\n  after_task: sleep\n  queue_depth: 4\nexports:\n  peer_tasks:\n    accept: true\n",
        &format!(
            "{}{}{}{}",
            bash_turn("sleep 3"),
            text_turn("first done"),
            text_turn("the third task to run"),
            text_turn("the fourth task to run")
        ),
    );
    std::fs::write(
        dir.join("roster.yaml"),
        "roster_version: 1\nmembers:\n  - {name: lead, path: ./lead, entry: true}\n  - {name: worker, path: ./worker}\nreachability:\n  - {from: lead, to: [worker]}\n",
    )
    .unwrap();
    let mut cmd = mur();
    cmd.args(["run", "--json", "--port", "0", "--roster"])
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut running = Running::start_command(cmd);
    let worker = worker_address(&mut running);

    // The worker is busy; a bg task waits; then the lead's call arrives.
    let _busy = post(&worker, &[JSON_CT], &message_stream_body("first"));
    eventually(
        Duration::from_secs(30),
        "the worker runs its first task",
        || worker_starts(&dir).len() == 1,
    );
    let _bg = post(&worker, &[JSON_CT], &message_stream_body("a bg task"));
    std::thread::sleep(Duration::from_millis(300));
    let raw = read_to_close(post(
        &running.address,
        &[JSON_CT],
        &message_stream_body("Go."),
    ));
    assert!(
        raw.contains(
            "<untrusted-content source=peer:worker>\\nthe third task to run\\n</untrusted-content>"
        ),
        "{raw}"
    );
    eventually(Duration::from_secs(30), "the bg task ran last", || {
        worker_starts(&dir).len() == 3
    });
    let lanes: Vec<String> = worker_starts(&dir)
        .iter()
        .map(|l| l["lane"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(lanes, ["bg", "peer", "bg"]);
}

/// The worker's `task_start` lines so far.
fn worker_starts(dir: &std::path::Path) -> Vec<Value> {
    let records = dir.join("worker/workdir/.murmur");
    let Some(session) = std::fs::read_dir(&records).ok().and_then(|mut d| {
        d.find_map(|e| {
            e.ok()
                .map(|e| e.path())
                .filter(|p| p.join("trace.jsonl").exists())
        })
    }) else {
        return Vec::new();
    };
    json_lines_so_far(&session.join("trace.jsonl"))
        .into_iter()
        .filter(|l| l["event_type"] == "task_start")
        .collect()
}

fn worker_address(running: &mut Running) -> String {
    let stderr = running.child.stderr.take().unwrap();
    let mut lines = std::io::BufReader::new(stderr).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("  member worker  ") {
            let url = rest.split_whitespace().nth(1).unwrap().to_string();
            std::thread::spawn(move || lines.for_each(drop));
            return url.trim_start_matches("http://").to_string();
        }
    }
    panic!("no line for the worker");
}
