//! The per-capsule budget: chunk, tool result and driver reply sizes, call bounds, the
//! trace ceiling and the workdir quota, each met by a hostile component built from
//! source. Memory is read from `/proc/<mur pid>/status` (VmHWM, the peak RSS) while
//! the capsule is parked after its task.

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

/// A capsule with the flood tool; `driver` is the `inference:` block, `limits` extra
/// `capabilities.limits` lines (a deadline of 20 s unless they set one). It parks after
/// its task so its memory can be read.
fn capsule(name: &str, driver: &str, limits: &str, script: &str) -> Capsule {
    let deadline = if limits.contains("deadline_seconds") {
        ""
    } else {
        "    deadline_seconds: 20\n"
    };
    let limits = format!("{deadline}{limits}");
    let manifest = format!(
        r#"name: limits
version: "0.1.0"
artifacts:
  - name: flood
    runtime: tool
    source: {tool}
  - name: flood-driver
    runtime: driver
    source: {driver_wasm}
inference:
{driver}
capabilities:
  network:
    allow: [https://models.invalid]
  limits:
{limits}
lifecycle:
  task_acceptance: none
  after_task: sleep
trace:
  include_tool_output: true
"#,
        tool = guest(MUR_TOOL_FLOOD).display(),
        driver_wasm = guest(MUR_DRIVER_FLOOD).display(),
    );
    Capsule::new(name, &manifest, script)
}

const SCRIPTED: &str = "  driver: scripted\n  script: ./script.yaml\n  model: m";

/// One scripted call of the flood tool, then an answer.
fn flood_call(name: &str, input: &str, limits: &str) -> Capsule {
    let script = format!(
        "turns:\n  - tool_calls: [{{id: c1, name: flood, input: {input}}}]\n  - text: done\n"
    );
    capsule(name, SCRIPTED, limits, &script)
}

/// Runs the capsule's task, waits for its `task_end`, and returns the session and the
/// peak RSS of `mur` in bytes.
fn run_parked(capsule: &Capsule) -> (Session, u64) {
    run_parked_with(capsule, &[])
}

fn run_parked_with(capsule: &Capsule, args: &[&str]) -> (Session, u64) {
    let mut all = vec!["--task", "flood the host"];
    all.extend_from_slice(args);
    let running = capsule.spawn(&all);
    let session = running.session();
    // As long as the longest task deadline these capsules set (120 s): a wait, not a
    // measure, and two busy cores can take most of a minute to stream 200 MB.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ended = session.record("trace.jsonl").contains("\"task_end\"");
        if ended {
            break;
        }
        assert!(Instant::now() < deadline, "no task_end within 120 s");
        std::thread::sleep(Duration::from_millis(200));
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", running.child.id())).unwrap();
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmHWM in /proc status");
    drop(running);
    eprintln!("{}: VmHWM {} MB", capsule.dir.display(), hwm / 1024);
    (session, hwm * 1024)
}

fn tool_outputs(session: &Session) -> Vec<String> {
    session
        .events("tool_call")
        .iter()
        .map(|c| c["output"].as_str().unwrap_or_default().to_string())
        .collect()
}

const MB: u64 = 1_000_000;

#[test]
fn a_chunk_flood_is_refused_at_the_first_chunk_and_memory_stays_bounded() {
    let capsule = flood_call("chunk-flood", r#"{mode: chunks, n: 32, m: 16777216}"#, "");
    let (session, hwm) = run_parked(&capsule);
    assert_eq!(
        tool_outputs(&session),
        ["tool 'flood' failed: text chunk of 16777216 bytes is over \
          capabilities.limits.max_chunk_bytes (1048576)"]
    );
    assert!(hwm < 200 * MB, "VmHWM {hwm}");
}

#[test]
fn control_characters_count_as_the_json_they_become() {
    // 200,000 bytes raw, 1,200,000 escaped: over the 1 MiB default only when escaped.
    let capsule = flood_call("control-flood", r#"{mode: control, n: 8, m: 200000}"#, "");
    let (session, _) = run_parked(&capsule);
    assert_eq!(
        tool_outputs(&session),
        ["tool 'flood' failed: text chunk of 1200000 bytes is over \
          capabilities.limits.max_chunk_bytes (1048576)"]
    );
}

#[test]
fn chunks_under_the_limit_are_held_under_the_ring_s_byte_ceiling() {
    // 200 chunks of 1,000,000 bytes: all 200 MB of them stayed in the ring before. A
    // debug build on two busy cores can take most of the usual 20 s deadline to stream
    // them, so this call gets more.
    let capsule = flood_call(
        "ring-flood",
        r#"{mode: chunks, n: 200, m: 1000000}"#,
        "    deadline_seconds: 120",
    );
    let (session, hwm) = run_parked(&capsule);
    assert_eq!(tool_outputs(&session).len(), 1);
    assert!(tool_outputs(&session)[0].contains("sent 200 chunks"));
    assert!(hwm < 150 * MB, "VmHWM {hwm}");
}

#[test]
pub(crate) fn a_big_tool_result_is_refused_and_the_model_gets_the_error() {
    let capsule = flood_call("big-result", r#"{mode: result, n: 52428800}"#, "");
    let (session, hwm) = run_parked(&capsule);
    let want = "tool 'flood' failed: tool result of 52428800 bytes is over \
                capabilities.limits.max_tool_result_bytes (4194304)";
    assert_eq!(tool_outputs(&session), [want]);
    let call = &session.events("tool_call")[0];
    assert_eq!(call["status"], "error");
    assert_eq!(call["output_bytes"], want.len());
    assert!(hwm < 300 * MB, "VmHWM {hwm}");
}

#[test]
pub(crate) fn a_big_driver_reply_fails_the_task_naming_the_limit() {
    let driver = "  driver:\n    artifact: flood-driver\n    config: {mode: big, n: 52428800}\n  model: m\n  endpoint: https://models.invalid/v1";
    let capsule = capsule("big-reply", driver, "", "");
    let (session, hwm) = run_parked(&capsule);
    let result = session.read("out/result.txt");
    assert!(
        result.starts_with("error: driver invocation failed: driver reply of 524288")
            && result
                .ends_with(" bytes is over capabilities.limits.max_driver_reply_bytes (16777216)"),
        "{result}"
    );
    let end = &session.events("task_end")[0];
    assert_eq!(end["exit_status"], "failed");
    assert!(hwm < 300 * MB, "VmHWM {hwm}");
}

#[test]
fn a_reply_with_200000_calls_runs_64_and_the_task_bound_ends_it() {
    let driver = "  driver:\n    artifact: flood-driver\n    config: {mode: calls, n: 200000, tool: flood}\n  model: m\n  endpoint: https://models.invalid/v1";
    let capsule = capsule(
        "many-calls",
        driver,
        "    max_driver_reply_bytes: 33554432",
        "",
    );
    let (session, hwm) = run_parked(&capsule);
    let calls = session.events("tool_call");
    // 64 ran, 960 were refused by the reply's bound, the 1025th ended the task; the
    // other 198,975 got the error without a frame or a trace line.
    assert_eq!(calls.len(), 1025);
    let ran = calls.iter().filter(|c| c["status"] == "ok").count();
    assert_eq!(ran, 64);
    assert!(calls[64..].iter().all(|c| c["status"] == "error"));
    assert_eq!(
        calls[64]["output"],
        "tool call 65 of this model reply is over \
         capabilities.limits.max_tool_calls_per_reply (64); it did not run"
    );
    assert_eq!(
        calls[1024]["output"],
        "tool call 1025 of this task is over \
         capabilities.limits.max_tool_calls_per_task (1024); it did not run"
    );
    assert_eq!(session.events("task_end")[0]["exit_status"], "failed");
    assert_eq!(
        session.read("out/result.txt"),
        "error: the task asked for more than 1024 tool calls, the bound of \
         capabilities.limits.max_tool_calls_per_task (1024)"
    );
    // 1.4 GB before: every call reached the loop and the conversation.
    assert!(hwm < 400 * MB, "VmHWM {hwm}");
}

#[test]
pub(crate) fn a_call_flooding_loop_is_stopped_by_the_trace_ceiling() {
    let capsule = flood_call("loop-flood", "{}", "    max_trace_bytes: 131072");
    let loop_path = guest(MUR_LOOP_FLOOD);
    let started = Instant::now();
    let running = capsule.spawn(&["--task", "x", "--loop", loop_path.to_str().unwrap()]);
    let session = running.session();
    let run = running.wait(Duration::from_secs(25));
    eprintln!("loop flood stopped after {:?}", started.elapsed());
    assert_eq!(run.status, 1, "{}", run.stderr);
    let trace = session.record("trace.jsonl");
    assert!(trace.len() <= 131_072, "{}", trace.len());
    let lines: Vec<Value> = session.trace();
    let kinds: Vec<&str> = lines
        .iter()
        .rev()
        .take(2)
        .map(|l| l["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["session_end", "task_end"]);
    assert_eq!(session.events("task_end")[0]["exit_status"], "failed");
    let result = session.read("out/result.txt");
    assert!(
        result.ends_with("does not fit under capabilities.limits.max_trace_bytes (131072)"),
        "{result}"
    );
    let refused = session
        .events("tool_call")
        .iter()
        .filter(|c| {
            c["error"]
                .as_str()
                .is_some_and(|e| e.contains("max_tool_calls_per_reply (64)"))
        })
        .count();
    assert!(refused > 0);
}

#[test]
fn a_write_past_the_workdir_quota_ends_the_task() {
    let capsule = flood_call(
        "quota",
        r#"{mode: write, n: 2097152}"#,
        "    workdir_bytes: 1048576",
    );
    let (session, _) = run_parked(&capsule);
    let outputs = tool_outputs(&session);
    assert_eq!(outputs.len(), 1);
    // The meter refuses the write that would pass the quota, during the call.
    assert!(
        outputs[0].starts_with("workdir size breach: a write of ")
            && outputs[0].contains(" was refused: the session workdir would grow by ")
            && outputs[0].ends_with(" bytes, over capabilities.limits.workdir_bytes (1048576)"),
        "{}",
        outputs[0]
    );
    assert_eq!(session.events("workdir_quota_breach").len(), 1);
    assert_eq!(session.events("task_end")[0]["exit_status"], "failed");
    assert_eq!(
        session.read("out/result.txt"),
        format!("error: {}", outputs[0])
    );
}

/// The quota bounds what a session adds: a chosen workdir that already holds more than
/// the quota is no breach.
#[test]
fn the_quota_counts_what_the_session_adds_to_its_workdir() {
    let capsule = flood_call(
        "quota-baseline",
        r#"{mode: write, n: 4096}"#,
        "    workdir_bytes: 1048576",
    );
    let wd = capsule.dir.join("project");
    std::fs::create_dir_all(&wd).unwrap();
    std::fs::write(wd.join("existing.bin"), vec![7u8; 3 << 20]).unwrap();
    let (session, _) = run_parked_with(&capsule, &["--workdir", wd.to_str().unwrap()]);
    assert!(session.events("workdir_quota_breach").is_empty());
    assert_eq!(session.events("task_end")[0]["exit_status"], "ok");
    assert_eq!(session.read("out/result.txt"), "done");
}

/// The records on a 96 KiB filesystem that fills mid-task: the first trace write that
/// fails ends the task `failed` naming it, on stderr and in `out/result.txt`, and mur
/// exits 1. The filesystem is a tmpfs in a mount namespace of mur's own, so it needs
/// root; elsewhere the test says why and returns.
#[test]
fn a_trace_write_that_fails_mid_task_ends_the_task_naming_it() {
    // SAFETY: geteuid takes no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: mounting a small tmpfs for the records needs root");
        return;
    }
    // Each call's whole output goes into its trace line: a few fill 96 KiB.
    let call = "{id: c, name: bash, input: {command: \"head -c 12000 /dev/zero | tr '\\\\0' a\"}}";
    let mut script = String::from("turns:\n");
    for _ in 0..20 {
        script.push_str(&format!("  - tool_calls: [{call}]\n"));
    }
    script.push_str("  - text: never reached\n");
    let manifest = "name: trace-full\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  \
                    script: ./script.yaml\n  model: m\n  max_turns: 40\ncapabilities:\n  shell:\n    \
                    allow: [bash]\ntrace:\n  include_tool_output: true\nlifecycle:\n  \
                    task_acceptance: none\n";
    let capsule = Capsule::new("trace-full", manifest, &script);
    let records = capsule.dir.join("records");
    let workdir = capsule.dir.join("wd");
    std::fs::create_dir_all(&records).unwrap();
    let mur_args = format!(
        "exec {} run --port 0 --manifest {} --workdir {} --records {} --task fill",
        MUR,
        capsule.manifest().display(),
        workdir.display(),
        records.display()
    );
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "mount -t tmpfs -o size=96k tmpfs {} && {mur_args}",
            records.display()
        ));
    for (key, value) in mur().get_envs() {
        if let Some(value) = value {
            cmd.env(key, value);
        }
    }
    let started = Instant::now();
    let run = finish(&mut cmd);
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!(
        run.status, 1,
        "stdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
    assert!(
        run.stderr
            .contains("error[E-RUN-007]: trace write failed: No space left on device"),
        "{}",
        run.stderr
    );
    let result = std::fs::read_to_string(workdir.join("out/result.txt")).unwrap();
    assert!(
        result.starts_with("error: trace write failed: No space left on device"),
        "{result}"
    );
    assert!(!run.stdout.contains("never reached"), "{}", run.stdout);
}
