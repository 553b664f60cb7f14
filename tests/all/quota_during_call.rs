//! The workdir quota holds during a WASM tool's call: the flood tool writes far past an
//! 8 MiB quota in 4 KiB writes, and the write that would pass it fails in the tool.
//! The tool swallows the error; the host still fails the task naming the limit. A tool
//! that only overwrites its own file is never refused.

use crate::common::*;

const QUOTA: u64 = 8 * 1024 * 1024;

/// A capsule whose scripted model calls the flood tool once with `input`, then answers.
fn flood(name: &str, input: &str) -> Capsule {
    let manifest = format!(
        r#"name: quota-during-call
version: "0.1.0"
artifacts:
  - name: flood
    runtime: tool
    source: {tool}
inference:
  driver: scripted
  script: ./script.yaml
  model: m
capabilities:
  limits:
    deadline_seconds: 120
    workdir_bytes: {QUOTA}
lifecycle:
  task_acceptance: none
trace:
  include_tool_output: true
"#,
        tool = guest(MUR_TOOL_FLOOD).display(),
    );
    let script = format!(
        "turns:\n  - tool_calls: [{{id: c1, name: flood, input: {input}}}]\n  - text: done\n"
    );
    Capsule::new(name, &manifest, &script)
}

#[test]
fn a_wasm_tool_writing_past_the_quota_is_stopped_by_the_write_that_would_pass_it() {
    let capsule = flood(
        "quota-during-call",
        "{mode: write-chunks, n: 67108864, m: 4096}",
    );
    let run = capsule.run(&["--task", "flood the workdir"]);
    assert_eq!(run.status, 1, "{}", run.stderr);
    let session = run.session();
    // Nothing past the quota reached the disk.
    let size = std::fs::metadata(session.workdir.join("flood.bin"))
        .unwrap()
        .len();
    assert!(size <= QUOTA, "flood.bin holds {size} bytes");
    assert!(size >= QUOTA / 2, "flood.bin holds only {size} bytes");
    // The tool saw the write that would pass the quota fail, and stopped there (it
    // reports on stderr). Its libc makes any failed stream write `EIO`; the error's
    // debug string names the limit (see `meter::stream`).
    let log = session.record("logs/tool-flood.log");
    assert!(
        log.contains(&format!("wrote {size} bytes; a write failed: ")),
        "{log}"
    );
    // The model is told the refusal, naming the limit and the write refused.
    let told = session.events("tool_call")[0]["output"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        told.starts_with("workdir size breach: a write of 4096 bytes was refused: ")
            && told.ends_with(" bytes, over capabilities.limits.workdir_bytes (8388608)"),
        "{told}"
    );
    let breach = &session.events("workdir_quota_breach")[0];
    assert_eq!(breach["refused"], true);
    assert_eq!(breach["tool_name"], "flood");
    assert_eq!(breach["limit"], "capabilities.limits.workdir_bytes");
    assert_eq!(breach["limit_bytes"], QUOTA);
    assert!(breach["bytes_would_be"].as_u64().unwrap() > QUOTA);
    // The tool swallowed the error and answered `passed`: the task fails all the same,
    // naming the limit (`out/result.txt` may not fit in the workdir the tool filled).
    assert_eq!(session.events("task_end")[0]["exit_status"], "failed");
    assert!(
        run.stderr
            .contains("error[E-RUN-040]: the task did not complete: failed")
            && run
                .stderr
                .contains("capabilities.limits.workdir_bytes (8388608)"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_wasm_tool_overwriting_one_file_is_not_refused() {
    let capsule = flood("quota-overwrite", "{mode: overwrite, n: 20, m: 1048576}");
    let run = capsule.run(&["--task", "rewrite a file"]);
    assert_eq!(run.status, 0, "{}", run.stderr);
    let session = run.session();
    assert!(session.events("workdir_quota_breach").is_empty());
    let log = session.record("logs/tool-flood.log");
    assert!(log.contains("overwrote 1048576 bytes 20 times"), "{log}");
    assert_eq!(session.events("task_end")[0]["exit_status"], "ok");
    assert_eq!(session.read("out/result.txt"), "done");
    let size = std::fs::metadata(session.workdir.join("flood.bin"))
        .unwrap()
        .len();
    assert_eq!(size, 1_048_576);
}
