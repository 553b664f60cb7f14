//! The workdir quota while a shell command runs: a command that passes
//! `capabilities.limits.workdir_bytes` is stopped before it ends, however many files it
//! spreads the bytes over, its task fails naming the limit, and a neighbour under
//! `mur serve` is untouched. Every bound here is in bytes on disk, never in time, so a
//! busy machine slows the tests down without failing them.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::served::{Create, Served};
use crate::common::*;
use serde_json::Value;

const MIB: u64 = 1 << 20;

/// How far past the quota a command writing 20 MiB/s may get: the watcher walks every
/// 50 ms, so about 1 MiB, and the rest is room for a busy machine.
const SLACK: u64 = 4 * MIB;

/// Writes a 1 MiB file every 50 ms (20 MiB/s), 200 files unless stopped.
const TWENTY_MIB_A_SECOND: &str =
    "for i in $(seq 200); do head -c 1048576 /dev/zero > f$i; sleep 0.05; done; echo finished";

/// A capsule allowed `bash` under `workdir_bytes: quota`, one turn per command.
fn capsule(name: &str, quota: u64, command: &str) -> Capsule {
    let manifest = format!(
        "name: quota-shell\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  \
         script: ./script.yaml\n  model: scripted-test\ncapabilities:\n  shell:\n    \
         allow: [bash]\n  limits:\n    workdir_bytes: {quota}\ntrace:\n  \
         include_tool_output: true\nlifecycle:\n  task_acceptance: none\n  after_task: exit\n"
    );
    let script = format!("turns:\n{}{}", bash_turn(command), text_turn("done"));
    Capsule::new(name, &manifest, &script)
}

/// Whether this kernel backs `scoped` (the default class); prints why not when not.
fn confinable() -> bool {
    let run = capsule("quota-shell-probe", MIB, "true").run(&["--explain-scope"]);
    if run.status != 0 {
        eprintln!(
            "skipped: this kernel cannot confine shell commands:\n{}",
            run.stderr
        );
    }
    run.status == 0
}

/// What the folder takes on disk, as the quota counts it: every entry at least one
/// block, a file its size or its blocks whichever is larger, links never followed.
fn on_disk(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let mut bytes = 0;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let meta = entry.path().symlink_metadata().unwrap();
        bytes += meta.len().max(meta.blocks() * 512).max(4096);
        if meta.is_dir() {
            bytes += on_disk(&entry.path());
        }
    }
    bytes
}

/// The one `shell` line, checked to say the command was stopped for the quota.
fn stopped_for_the_quota(session: &Session) -> Value {
    let shells = session.events("shell");
    assert_eq!(shells.len(), 1, "{shells:?}");
    let shell = shells[0].clone();
    assert_eq!(shell["exit_code"], 128 + 9, "killed: {shell}");
    assert_eq!(
        shell["resource_limit"], "capabilities.limits.workdir_bytes",
        "{shell}"
    );
    shell
}

/// The task failed, the model and the trace were told why, naming the limit.
fn failed_naming_the_limit(run: &Run, session: &Session) {
    assert_eq!(
        run.status, 1,
        "stdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
    let breaches = session.events("workdir_quota_breach");
    assert_eq!(breaches.len(), 1, "{breaches:?}");
    assert_eq!(breaches[0]["limit"], "capabilities.limits.workdir_bytes");
    assert_eq!(session.events("task_end")[0]["exit_status"], "failed");
    let told = session.events("tool_call")[0]["output"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        told.starts_with("workdir size breach: ")
            && told.contains("capabilities.limits.workdir_bytes"),
        "{told}"
    );
    assert!(
        run.stdout.contains("capabilities.limits.workdir_bytes")
            || run.stderr.contains("capabilities.limits.workdir_bytes"),
        "the task's end names the limit:\nstdout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
}

/// A command writing 20 MiB/s over many small files: each file is far under the
/// file-size limit, so only the watcher can stop it. It gets no more than 4 MiB past
/// the quota, and stops long before its 200 files.
#[test]
fn a_command_spreading_writes_over_many_files_is_stopped_near_the_quota() {
    if !confinable() {
        return;
    }
    let quota = 16 * MIB;
    let c = capsule("quota-shell-many", quota, TWENTY_MIB_A_SECOND);
    let run = c.run(&["--task", "fill the disk a file at a time"]);
    let session = run.session();
    let held = on_disk(&session.workdir);
    eprintln!(
        "many files: the workdir holds {held} bytes, {} past the {quota}-byte quota",
        held.saturating_sub(quota)
    );
    assert!(held > quota, "stopped only once past the quota: {held}");
    assert!(
        held <= quota + SLACK,
        "{held} bytes is too far past {quota}"
    );
    let files = (1..=200)
        .filter(|i| session.workdir.join(format!("f{i}")).exists())
        .count();
    assert!(files < 30, "it went on writing: {files} files");
    let shell = stopped_for_the_quota(&session);
    assert_eq!(shell["stdout_bytes"], 0, "it never finished: {shell}");
    failed_naming_the_limit(&run, &session);
}

/// Three files of 40 MiB against a 32 MiB quota: the first is stopped at the quota by
/// the kernel (the file-size limit is the room left when the command started), and the
/// watcher stops the command before it starts the next.
#[test]
fn files_each_under_the_limit_cannot_add_up_past_it() {
    if !confinable() {
        return;
    }
    let quota = 32 * MIB;
    let forty = 40 * MIB;
    let command = format!(
        "head -c {forty} /dev/zero > a; sleep 2; head -c {forty} /dev/zero > b; sleep 2; \
         head -c {forty} /dev/zero > c"
    );
    let c = capsule("quota-shell-three", quota, &command);
    let run = c.run(&["--task", "fill the disk three files at a time"]);
    let session = run.session();
    let held = on_disk(&session.workdir);
    eprintln!(
        "three files: the workdir holds {held} bytes, {} past the {quota}-byte quota",
        held.saturating_sub(quota)
    );
    let first = std::fs::metadata(session.workdir.join("a")).unwrap().len();
    assert!(first <= quota + 4096, "one file past the room: {first}");
    assert!(!session.workdir.join("b").exists(), "the command went on");
    assert!(!session.workdir.join("c").exists(), "the command went on");
    assert!(
        held <= quota + SLACK,
        "{held} bytes is too far past {quota}"
    );
    stopped_for_the_quota(&session);
    failed_naming_the_limit(&run, &session);
}

/// A command that moved to the background is watched the same way: it is stopped, its
/// completion says why, and the completion task fails.
#[test]
fn a_detached_command_is_stopped_near_the_quota_too() {
    if !confinable() {
        return;
    }
    let quota = 16 * MIB;
    let manifest = format!(
        "name: quota-shell\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  \
         script: ./script.yaml\n  model: scripted-test\ncapabilities:\n  shell:\n    \
         allow: [bash]\n  limits:\n    workdir_bytes: {quota}\nlifecycle:\n  \
         task_acceptance: queue\n  after_task: sleep\n  shell_grace_secs: 0\n"
    );
    let script = format!(
        "turns:\n{}{}{}",
        bash_turn(TWENTY_MIB_A_SECOND),
        text_turn("started"),
        text_turn("it ended")
    );
    let c = Capsule::new("quota-shell-detached", &manifest, &script);
    let running = c.spawn(&["--task", "fill the disk in the background"]);
    let session = running.session();
    let events = |kind: &str| -> Vec<Value> {
        session
            .trace_so_far()
            .into_iter()
            .filter(|e| e["event_type"] == kind)
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while events("task_end").len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let held = on_disk(&session.workdir);
    drop(running);
    assert!(
        held <= quota + SLACK,
        "{held} bytes is too far past {quota}"
    );
    let completed = events("shell_completed");
    assert_eq!(completed.len(), 1, "no shell_completed");
    assert_eq!(completed[0]["status"], "failed");
    assert_eq!(completed[0]["exit_code"], 128 + 9);
    assert_eq!(
        completed[0]["resource_limit"],
        "capabilities.limits.workdir_bytes"
    );
    let breach = events("workdir_quota_breach");
    assert_eq!(breach.len(), 1, "{breach:?}");
    assert_eq!(breach[0]["work_id"], completed[0]["work_id"]);
    let ends = events("task_end");
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert_eq!(ends[0]["exit_status"], "ok", "the task that started it");
    assert_eq!(ends[1]["task_id"], completed[0]["completion_task_id"]);
    assert_eq!(ends[1]["exit_status"], "failed");
}

/// A scripted manifest for `mur serve` under `workdir_bytes: quota`, taking tasks.
fn served_yaml(name: &str, quota: u64, script: &str) -> String {
    let path = scratch(name).join("script.yaml");
    std::fs::write(&path, format!("{SPAN_SESSION}{script}")).unwrap();
    format!(
        "name: {name}\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  script: {}\n  \
         model: scripted-test\ncapabilities:\n  shell:\n    allow: [bash]\n  limits:\n    \
         workdir_bytes: {quota}\ntrace:\n  include_tool_output: true\nlifecycle:\n  \
         task_acceptance: queue\n  after_task: sleep\n",
        path.display()
    )
}

/// Under `mur serve`, a capsule whose command passes its quota fails its own task,
/// while a neighbour's command, running at the same time, ends on its own and its task
/// completes.
#[test]
fn a_neighbour_under_serve_is_unharmed_by_a_breach() {
    if !confinable() {
        return;
    }
    let quota = 16 * MIB;
    let served = Served::start("quota-shell-serve");
    let hostile = served.create(&Create::yaml(&served_yaml(
        "quota-hostile",
        quota,
        &format!(
            "turns:\n{}{}",
            bash_turn(TWENTY_MIB_A_SECOND),
            text_turn("filled")
        ),
    )));
    let neighbour = served.create(&Create::yaml(&served_yaml(
        "quota-neighbour",
        quota,
        &format!(
            "turns:\n{}{}",
            bash_turn("head -c 1048576 /dev/zero > mine; sleep 3; echo neighbour"),
            text_turn("the neighbour is done")
        ),
    )));

    let mut fill = hostile.stream("fill the disk");
    // The hostile command is writing before the neighbour's starts, and is stopped
    // while the neighbour's runs (its 3 s sleep outlasts the hostile's 16 MiB).
    eventually(
        Duration::from_secs(60),
        "the hostile command writes",
        || hostile.workdir.join("f1").exists(),
    );
    let started = Instant::now();
    let frames = neighbour.message("work beside it");
    let last = frames.last().expect("frames");
    assert_eq!(last.data["status"]["state"], "completed", "{frames:#?}");
    assert_eq!(last.data["status"]["response"], "the neighbour is done");
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "{:?} {frames:#?}",
        started.elapsed()
    );

    let filled = fill.rest(Duration::from_secs(60));
    let end = filled.last().expect("frames");
    assert_eq!(end.data["status"]["state"], "failed", "{filled:#?}");
    let message = end.data["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("capabilities.limits.workdir_bytes"),
        "{message}"
    );
    let held = on_disk(&hostile.workdir);
    assert!(
        held <= quota + SLACK,
        "{held} bytes is too far past {quota}"
    );

    let session = served.session_id(&neighbour.id);
    let trace = served.trace(&neighbour.id, &session);
    let shell: Vec<&Value> = trace
        .iter()
        .filter(|e| e["event_type"] == "shell")
        .collect();
    assert_eq!(shell.len(), 1, "{shell:?}");
    assert_eq!(
        shell[0]["exit_code"], 0,
        "the neighbour's command ran to its end"
    );
    let mine = std::fs::metadata(neighbour.workdir.join("mine")).unwrap();
    assert_eq!(mine.len(), MIB, "the neighbour's own file is whole");
    assert!(
        !trace
            .iter()
            .any(|e| e["event_type"] == "workdir_quota_breach"),
        "no breach next door"
    );
}
