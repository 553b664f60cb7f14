//! What a call between two members of one formation costs, and what fanning a task out
//! to ten members at once saves (`cargo bench -p mur --bench formation`).
//!
//! Every formation is a release `mur run --roster` on scripted drivers, run to its end;
//! the figures come from the lead's `member_call` lines (`duration_us`: from sending
//! the task to holding the answer, measured by the caller's host).
//! - **A call**: the lead makes `CALLS` calls one after another to a worker whose own
//!   work is one scripted turn. The median call includes that turn, so it bounds the
//!   cost of the call itself from above.
//! - **Fan-out**: ten workers each run `sleep 0.3` in bash. The lead calls all ten in
//!   one reply (`parallel_tools: 10`), then, in another formation, one after another
//!   (`parallel_tools: 1`). The fan-out's time is its slowest call (all ten start
//!   together); it is set against one single call to the same kind of worker.
//!
//! - **The same call through a socket**: the worker runs as a `mur run` of its own and
//!   the lead, another `mur run`, calls it as a remote A2A peer (`peers[]`, its card
//!   on loopback): HTTP, the A2A client and the door's JSON both ways.
//!
//! Results are plain lines on stdout.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

const CALLS: usize = 41;
const WORKERS: usize = 10;
const ROUNDS: usize = 5;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("target")
        .join("bench-formation")
}

/// Writes a formation: a lead with `lead_turns` and workers, each `(name, turns, extra)`.
fn formation(name: &str, lead: (&str, &str), workers: &[(String, String, &str)]) -> PathBuf {
    let dir = root().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let mut roster =
        "roster_version: 1\nmembers:\n  - name: lead\n    path: ./lead\n    entry: true\n"
            .to_string();
    let mut to = Vec::new();
    member(&dir, "lead", lead.0, lead.1);
    for (worker, turns, extra) in workers {
        roster.push_str(&format!("  - name: {worker}\n    path: ./{worker}\n"));
        let extra = format!(
            "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n  shell_grace_secs: 60\nexports:\n  peer_tasks:\n    accept: true\n{extra}"
        );
        member(&dir, worker, turns, &extra);
        to.push(worker.clone());
    }
    roster.push_str(&format!(
        "reachability:\n  - {{from: lead, to: [{}]}}\n",
        to.join(", ")
    ));
    std::fs::write(dir.join("roster.yaml"), roster).unwrap();
    dir
}

fn member(dir: &Path, name: &str, turns: &str, extra: &str) {
    let home = dir.join(name);
    std::fs::create_dir_all(&home).unwrap();
    let manifest = format!(
        "name: {name}\nversion: \"1.0.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: m\n  max_turns: 100\n{extra}"
    );
    std::fs::write(home.join("murmur.yaml"), manifest).unwrap();
    std::fs::write(
        home.join("script.yaml"),
        format!("span: session\nturns:\n{turns}"),
    )
    .unwrap();
}

fn call(id: usize, member: &str) -> String {
    format!(
        "  - tool_calls: [{{id: c{id}, name: call-member, input: {{member: {member}, task: \"work {id}\"}}}}]\n"
    )
}

/// Runs the formation to its end; the lead's `member_call` durations, in µs.
fn run(dir: &Path) -> Vec<u64> {
    let status = Command::new(env!("CARGO_BIN_EXE_mur"))
        .args(["run", "--json", "--port", "0", "--roster"])
        .arg(dir)
        .args(["--task", "go"])
        .env("MUR_CACHE_DIR", root().join("cache"))
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{}", dir.display());
    durations(&dir.join("lead/workdir/.murmur"))
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn ms(us: u64) -> String {
    format!("{:.2} ms", us as f64 / 1000.0)
}

fn one_call() {
    let lead: String =
        (0..CALLS).map(|i| call(i, "worker")).collect::<String>() + "  - text: done\n";
    let worker: String = "  - text: answered\n".repeat(CALLS);
    let dir = formation("calls", (&lead, ""), &[("worker".into(), worker, "")]);
    let mut all = Vec::new();
    for _ in 0..ROUNDS {
        all.extend(run(&dir));
    }
    println!(
        "member call: median {} over {} calls (the callee's one scripted turn included; target <= 2 ms)",
        ms(median(all.clone())),
        all.len()
    );
}

/// The lead's `member_call` durations from its newest session under `records`.
fn durations(records: &Path) -> Vec<u64> {
    let session = std::fs::read_dir(records)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("trace.jsonl").exists())
        .max()
        .unwrap();
    std::fs::read_to_string(session.join("trace.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["event_type"] == "member_call")
        .inspect(|l| assert_eq!(l["status"], "answered", "{l}"))
        .map(|l| l["duration_us"].as_u64().unwrap())
        .collect()
}

fn socket_call() {
    use std::io::BufRead;
    let dir = root().join("socket");
    let _ = std::fs::remove_dir_all(&dir);
    let turns = "  - text: answered\n".repeat(CALLS * ROUNDS);
    let consent = "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\nexports:\n  peer_tasks:\n    accept: true\n";
    member(&dir, "worker", &turns, consent);
    let mut worker = Command::new(env!("CARGO_BIN_EXE_mur"))
        .args(["run", "--json", "--port", "0", "--manifest"])
        .arg(dir.join("worker/murmur.yaml"))
        .env("MUR_CACHE_DIR", root().join("cache"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(worker.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let launch: Value = serde_json::from_str(&line).unwrap();
    let address = launch["address"].as_str().unwrap().to_string();
    let lead_turns: String =
        (0..CALLS).map(|i| call(i, "worker")).collect::<String>() + "  - text: done\n";
    let peers = format!(
        "peers:\n  - name: worker\n    card: {address}/.well-known/agent-card.json\ncapabilities:\n  network:\n    allow: [\"{address}\"]\n"
    );
    member(&dir, "lead", &lead_turns, &peers);
    let mut all = Vec::new();
    for _ in 0..ROUNDS {
        let status = Command::new(env!("CARGO_BIN_EXE_mur"))
            .args(["run", "--json", "--port", "0", "--manifest"])
            .arg(dir.join("lead/murmur.yaml"))
            .args(["--task", "go"])
            .env("MUR_CACHE_DIR", root().join("cache"))
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        all.extend(durations(&dir.join("lead/workdir/.murmur")));
    }
    let _ = worker.kill();
    let _ = worker.wait();
    println!(
        "the same call through a loopback socket (a remote peer): median {} over {} calls",
        ms(median(all.clone())),
        all.len()
    );
}

fn sleeper_turns() -> String {
    "  - tool_calls: [{id: s, name: bash, input: {command: \"sleep 0.3\"}}]\n  - text: rested\n"
        .into()
}

fn fan_out() {
    let workers: Vec<(String, String, &str)> = (0..WORKERS)
        .map(|i| {
            (
                format!("w{i}"),
                sleeper_turns(),
                "capabilities:\n  shell:\n    allow: [bash]\n",
            )
        })
        .collect();
    let batch: Vec<String> = (0..WORKERS)
        .map(|i| {
            format!(
                "      - {{id: c{i}, name: call-member, input: {{member: w{i}, task: \"rest\"}}}}\n"
            )
        })
        .collect();
    let together = format!("  - tool_calls:\n{}  - text: done\n", batch.concat());
    let apart: String = (0..WORKERS)
        .map(|i| call(i, &format!("w{i}")))
        .collect::<String>()
        + "  - text: done\n";
    let single = formation(
        "single",
        (&(call(0, "w0") + "  - text: done\n"), ""),
        &workers[..1],
    );
    let at_once = formation(
        "fan-out",
        (&together, "lifecycle:\n  parallel_tools: 10\n"),
        &workers,
    );
    let in_turn = formation("in-turn", (&apart, ""), &workers);
    let (mut singles, mut fans, mut turns) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        singles.push(run(&single)[0]);
        fans.push(run(&at_once).into_iter().max().unwrap());
        turns.push(run(&in_turn).into_iter().sum());
    }
    let (single, fan, turn) = (median(singles), median(fans), median(turns));
    println!(
        "fan-out to {WORKERS}: {} at once, {} one after another, one call {}: at once / one call = {:.2}x (target <= 1.3x)",
        ms(fan),
        ms(turn),
        ms(single),
        fan as f64 / single as f64
    );
}

fn main() {
    let started = Instant::now();
    one_call();
    socket_call();
    fan_out();
    let _ = Duration::ZERO;
    println!("(took {:.0} s)", started.elapsed().as_secs_f64());
}
