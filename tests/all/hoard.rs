//! What a hostile loop or hook makes the host store, hold or print, each bound met by a
//! component built from source: `components/loop-hoard` hands the host huge answers,
//! conversations and lists; `components/hook-hostile` floods it with seeds and
//! artifacts. Memory is the peak RSS of `mur` (`VmHWM` in `/proc/<pid>/status`), read
//! while the capsule is parked after its tasks.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::served::{Create, Served};
use crate::common::*;
use serde_json::Value;

const MIB: u64 = 1024 * 1024;

/// A capsule whose session loop is `loop-hoard` (its task's text says what it hoards);
/// `limits` and `lifecycle` are further lines of those blocks.
fn hoard(name: &str, limits: &str, lifecycle: &str, extra: &str) -> Capsule {
    let manifest = format!(
        r#"name: {name}
version: "0.1.0"
loop: hoard
artifacts:
  - name: hoard
    runtime: loop
    source: {source}
{extra}inference:
  driver: scripted
  script: ./script.yaml
  model: m
  max_turns: 40
capabilities:
  limits:
    deadline_seconds: 60
{limits}lifecycle:
{lifecycle}"#,
        source = guest(MUR_LOOP_HOARD).display(),
    );
    Capsule::new(name, &manifest, "turns:\n  - text: fine\n")
}

/// The task that tells `loop-hoard` what to do.
fn hoarding(mode: &str, n: &str, tasks: &str) -> String {
    format!("{mode} {n} {tasks}")
}

/// Runs the capsule to its end, bounded, and says its peak RSS.
fn run_to_end(capsule: &Capsule, task: &str) -> (Session, Run, u64) {
    let mut running = capsule.spawn(&["--task", task]);
    let session = running.session();
    let stderr = running.child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let (status, peak) = wait_with_peak(running.child.id(), Duration::from_secs(120));
    // Reaped already: its drop must not signal a pid the kernel may have given away.
    std::mem::forget(running);
    eprintln!("{}: peak RSS {} MiB", capsule.dir.display(), peak / MIB);
    let run = Run {
        status,
        stdout: String::new(),
        stderr: stderr.join().unwrap(),
    };
    (session, run, peak)
}

/// Runs the capsule (which parks after its tasks) until `tasks` `task_end` lines are
/// written, then reads the peak RSS and stops it.
fn run_parked(capsule: &Capsule, task: &str, tasks: usize) -> (Session, u64) {
    let running = capsule.spawn(&["--task", task]);
    let session = running.session();
    let deadline = Instant::now() + Duration::from_secs(90);
    while session
        .trace_so_far()
        .iter()
        .filter(|l| l["event_type"] == "task_end")
        .count()
        < tasks
    {
        assert!(
            Instant::now() < deadline,
            "{tasks} task_end lines within 90 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let hwm = vm_hwm(running.child.id());
    drop(running);
    eprintln!("{}: VmHWM {} MiB", capsule.dir.display(), hwm / MIB);
    (session, hwm)
}

/// The peak RSS of a live process, in bytes.
fn vm_hwm(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmHWM in /proc status")
        * 1024
}

/// Waits (bounded) for the process `pid` to exit: its exit code and its peak RSS in
/// bytes, as the kernel counted it to the end (`ru_maxrss`).
fn wait_with_peak(pid: u32, limit: Duration) -> (i32, u64) {
    let deadline = Instant::now() + limit;
    loop {
        let mut status = 0;
        // SAFETY: a plain out-parameter struct, zeroed; wait4 only writes into it.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child, without blocking.
        let done = unsafe { libc::wait4(pid as i32, &mut status, libc::WNOHANG, &mut usage) };
        if done == pid as i32 {
            let code = if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                -1
            };
            return (code, usage.ru_maxrss as u64 * 1024);
        }
        if Instant::now() > deadline {
            // SAFETY: only sends a signal to our own child, which has not been reaped.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("the process did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The bytes the files under `dir` hold, links not followed.
fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    for entry in entries.flatten() {
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        total += if meta.is_dir() {
            bytes_under(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

fn task_ends(session: &Session) -> Vec<Value> {
    session.events("task_end")
}

#[test]
pub(crate) fn a_chain_of_huge_answers_ends_at_the_records_budget() {
    let capsule = hoard(
        "hoard-records",
        "    max_records_bytes: 8388608\n",
        "  task_acceptance: none\n  conversation: threaded\n",
        "",
    );
    let (session, run, _) = run_to_end(&capsule, &hoarding("chain", "1048576", "40"));
    assert_eq!(run.status, 1, "stderr:\n{}", run.stderr);
    assert!(
        run.stderr.contains("error[E-RUN-008]")
            && run
                .stderr
                .contains("over capabilities.limits.max_records_bytes (8388608)"),
        "{}",
        run.stderr
    );
    let ran = task_ends(&session).len();
    assert!(ran < 40, "the chain was stopped, {ran} tasks ran");
    assert!(!session.events("session_end").is_empty());
    let records_root = session.records.parent().unwrap();
    let kept = bytes_under(&records_root.join("conversations"))
        + std::fs::metadata(session.records.join("a2a-tasks.jsonl")).map_or(0, |m| m.len());
    assert!(kept <= 8 * MIB, "the records hold {kept} bytes");
}

#[test]
fn each_task_s_kept_answer_counts_against_the_workdir_quota() {
    let capsule = hoard(
        "hoard-workdir",
        "    workdir_bytes: 6291456\n",
        "  task_acceptance: none\n  conversation: threaded\n",
        "",
    );
    let (session, _, _) = run_to_end(&capsule, &hoarding("chain", "1048576", "12"));
    let failed = task_ends(&session)
        .iter()
        .filter(|t| t["exit_status"] == "failed")
        .count();
    assert!(failed > 0, "tasks past the quota fail");
    // A failed task's answer (`error: ...`) replaces the megabyte before it, so the
    // chain goes on failing and succeeding in turn: never past the quota.
    let log = session.record("logs/bootstrap.log");
    assert!(
        log.contains("could not write out/result_tsk_")
            && log.contains(
                "would take the session workdir past \
                             capabilities.limits.workdir_bytes (6291456)"
            ),
        "{log}"
    );
    let held = bytes_under(&session.workdir);
    assert!(
        held <= 6 * MIB + 64 * 1024,
        "the workdir holds {held} bytes"
    );
}

#[test]
fn an_answer_over_its_limit_fails_the_task_and_costs_the_host_little() {
    let capsule = hoard(
        "hoard-answer",
        "",
        "  task_acceptance: queue\n  after_task: sleep\n",
        "",
    );
    // 20 MiB: within what one call may carry, over max_answer_bytes.
    let (session, hwm) = run_parked(&capsule, &hoarding("answer", "20971520", "1"), 1);
    assert_eq!(task_ends(&session)[0]["exit_status"], "failed");
    assert_eq!(
        session.read("out/result.txt"),
        "error: the task's answer of 20971520 bytes is over \
         capabilities.limits.max_answer_bytes (16777216)"
    );
    assert!(hwm < 250 * MIB, "VmHWM {hwm}");
}

#[test]
fn a_hundred_mib_answer_is_refused_while_it_is_lifted() {
    // Before: 1.76 GB of RSS. Past the hostcall bound the loop's call is refused before
    // the host builds anything, and the session ends naming the limits.
    let capsule = hoard("hoard-huge", "", "  task_acceptance: none\n", "");
    let (session, run, peak) = run_to_end(&capsule, &hoarding("answer", "104857600", "1"));
    assert_eq!(run.status, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("the component handed the host more data in one call than its limits allow"),
        "{}",
        run.stderr
    );
    assert_eq!(task_ends(&session)[0]["exit_status"], "failed");
    // The guest's own 100 MiB string (twice: built, then lowered) is in its linear memory.
    eprintln!("100 MiB answer: peak RSS {} MiB", peak / MIB);
    assert!(peak > 0 && peak < 450 * MIB, "VmHWM {peak}");
}

#[test]
fn a_conversation_of_too_many_messages_is_not_kept() {
    let capsule = hoard(
        "hoard-conversation",
        "",
        "  task_acceptance: queue\n  after_task: sleep\n  conversation: threaded\n",
        "",
    );
    let (session, hwm) = run_parked(&capsule, &hoarding("conversation", "20000", "1"), 1);
    assert_eq!(
        session.read("out/result.txt"),
        "error: the conversation to keep of 20000 messages is over \
         capabilities.limits.max_conversation_messages (10000)"
    );
    let conversations = session.records.parent().unwrap().join("conversations");
    assert_eq!(bytes_under(&conversations), 0, "nothing was kept");
    assert!(hwm < 200 * MIB, "VmHWM {hwm}");
}

#[test]
fn compacting_a_million_blocks_is_refused_before_the_host_builds_them() {
    // Before: 1.18 GB of RSS for a million blocks.
    let capsule = hoard("hoard-compact", "", "  task_acceptance: none\n", "");
    let (session, run, _) = run_to_end(&capsule, &hoarding("compact", "1000000", "1"));
    assert_eq!(run.status, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("more data in one call than its limits allow"),
        "{}",
        run.stderr
    );
    assert!(session.read("out/result.txt").starts_with("error: "));
    // Under the hostcall bound, the count names its key.
    let capsule = hoard(
        "hoard-compact-count",
        "",
        "  task_acceptance: queue\n  after_task: sleep\n",
        "",
    );
    let (session, hwm) = run_parked(&capsule, &hoarding("compact", "60000", "1"), 1);
    assert_eq!(
        session.read("out/result.txt"),
        "compact: the conversation to compact of 60000 blocks is over \
         capabilities.limits.max_conversation_blocks (50000)"
    );
    assert!(hwm < 200 * MIB, "VmHWM {hwm}");
}

#[test]
fn an_inference_request_of_too_many_messages_is_refused() {
    let capsule = hoard("hoard-infer", "", "  task_acceptance: none\n", "");
    let (session, run, _) = run_to_end(&capsule, &hoarding("infer", "20000", "1"));
    run.assert_ok();
    assert_eq!(
        session.read("out/result.txt"),
        "infer: InferenceError::Refused(\"the request of 20000 messages is over \
         capabilities.limits.max_conversation_messages (10000)\")"
    );
    assert!(session.events("inference").is_empty(), "no turn was used");
}

#[test]
fn a_link_in_place_of_out_fails_the_task_saying_why() {
    let manifest = "name: out-link\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  \
                    script: ./script.yaml\n  model: m\ncapabilities:\n  shell:\n    \
                    allow: [bash]\nlifecycle:\n  task_acceptance: none\n";
    let outside = scratch("out-link-target");
    let script = format!(
        "turns:\n{}{}",
        bash_turn(&format!("rm -rf out && ln -s {} out", outside.display())),
        text_turn("the answer")
    );
    let capsule = Capsule::new("out-link", manifest, &script);
    let run = capsule.run(&["--task", "replace out"]);
    assert_eq!(
        run.status, 1,
        "stdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
    assert!(
        run.stderr.contains(
            "error[E-RUN-040]: the task did not complete: failed (error: could not \
                       write out/result.txt: out is a symbolic link that leads outside the \
                       workdir; the host does not write through it)"
        ),
        "{}",
        run.stderr
    );
    let session = run.session();
    let end = &task_ends(&session)[0];
    assert_eq!(end["exit_status"], "failed");
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing was written through the link"
    );
    assert!(
        session
            .record("logs/bootstrap.log")
            .contains("could not write out/result.txt")
    );
}

#[test]
fn hoarding_tenants_fail_alone_under_serve() {
    // Five tenants hoard at once, each its own way, beside a neighbour: each is stopped
    // at its own bound, the server's memory stays bounded, and the neighbour answers.
    let served = Served::start("hoard-served");
    let queue = "  task_acceptance: queue\n  after_task: sleep\n";
    let records = hoard(
        "tenant-records",
        "    max_records_bytes: 16777216\n",
        &format!("{queue}  conversation: threaded\n"),
        "",
    );
    let answer = hoard("tenant-answer", "", queue, "");
    let compact = hoard("tenant-compact", "", queue, "");
    let seed = hostile_hook(
        "tenant-seed",
        "seed-million 1000000",
        "    binding: on-task-start\n    commit_policy: seed-context\n",
        "turns:\n  - text: unseeded\n",
        "context:\n  max_tokens: 32000\n",
    );
    let mut script = String::from("turns:\n");
    for _ in 0..12 {
        script.push_str(&bash_turn("true"));
    }
    script.push_str(&text_turn("done"));
    let artifacts = hostile_hook(
        "tenant-artifacts",
        "artifact-flood 8388608",
        "    binding: on-inference\n",
        &script,
        "",
    );
    let hosted: Vec<_> = [&records, &answer, &compact, &seed, &artifacts]
        .iter()
        .map(|c| served.create(&Create::path(&c.dir)))
        .collect();
    // A hosted capsule's records are its own; the hook reads its mode from its scope.
    for (i, c) in [(3, &seed), (4, &artifacts)] {
        let mode = std::fs::read_to_string(c.dir.join("workdir/.murmur/hooks/flood/hostile.txt"));
        let scope = served.records(&hosted[i].id).join("hooks/flood");
        std::fs::create_dir_all(&scope).unwrap();
        std::fs::write(scope.join("hostile.txt"), mode.unwrap()).unwrap();
    }
    let neighbour = served.create_scripted("neighbour", "turns:\n  - text: still here\n");
    let tasks = [
        hoarding("chain", "4194304", "1000"),
        hoarding("answer", "104857600", "1"),
        hoarding("compact", "1000000", "1"),
        "go".to_string(),
        "go".to_string(),
    ];
    let streams: Vec<_> = hosted
        .iter()
        .zip(&tasks)
        .map(|(h, task)| h.stream(task))
        .collect();
    for mut stream in streams {
        let frames = stream.rest(Duration::from_secs(120));
        assert!(!frames.is_empty());
    }
    let frames = neighbour.message("are you there?");
    let last = frames.last().expect("frames");
    assert_eq!(last.data["status"]["state"], "completed", "{}", last.data);
    let chain_records = bytes_under(&served.records(&hosted[0].id));
    assert!(
        chain_records < 20 * MIB,
        "the chaining tenant's records hold {chain_records} bytes"
    );
    let hwm = vm_hwm(served.pid() as u32);
    eprintln!(
        "mur serve with five hoarding tenants: VmHWM {} MiB",
        hwm / MIB
    );
    assert!(hwm < 700 * MIB, "VmHWM {hwm}");
}

/// A capsule with `hook-hostile` as the hook `flood` (scope `flood`, in `mode`), under
/// the built-in loop and a scripted driver; `hook` is the rest of its artifact entry.
fn hostile_hook(name: &str, mode: &str, hook: &str, script: &str, extra: &str) -> Capsule {
    let manifest = format!(
        r#"name: {name}
version: "0.1.0"
artifacts:
  - name: flood
    runtime: hook
    source: {source}
{hook}    capabilities:
      filesystem: {{scope: flood}}
inference:
  driver: scripted
  script: ./script.yaml
  model: m
  max_turns: 20
capabilities:
  shell:
    allow: [bash]
{extra}lifecycle:
  task_acceptance: queue
  after_task: sleep
"#,
        source = guest(MUR_HOOK_HOSTILE).display(),
    );
    let capsule = Capsule::new(name, &manifest, script);
    capsule.file(
        "workdir/.murmur/hooks/flood/hostile.txt",
        &format!("{mode}\n"),
    );
    capsule
}

#[test]
fn a_million_seed_messages_are_refused_while_they_are_lifted() {
    // Before: 1.17 GB of RSS for a million tiny messages.
    let capsule = hostile_hook(
        "seed-million",
        "seed-million 1000000",
        "    binding: on-task-start\n    commit_policy: seed-context\n",
        "turns:\n  - text: unseeded\n",
        "context:\n  max_tokens: 32000\n",
    );
    let (session, hwm) = run_parked(&capsule, "go", 1);
    assert_eq!(task_ends(&session)[0]["exit_status"], "ok");
    assert_eq!(session.read("out/result.txt"), "unseeded");
    assert!(
        session.events("context_seed").is_empty(),
        "nothing was seeded"
    );
    let log = session.record("logs/hook-flood.log");
    assert!(
        log.contains("more data in one call than its limits allow"),
        "{log}"
    );
    assert!(hwm < 200 * MIB, "VmHWM {hwm}");
}

#[test]
fn a_seed_of_too_many_messages_is_rejected_naming_the_key() {
    let capsule = hostile_hook(
        "seed-many",
        "seed-million 20000",
        "    binding: on-task-start\n    commit_policy: seed-context\n",
        "turns:\n  - text: unseeded\n",
        "context:\n  max_tokens: 32000\n",
    );
    let (session, _) = run_parked(&capsule, "go", 1);
    let seeds = session.events("context_seed");
    assert_eq!(seeds.len(), 1);
    assert_eq!(seeds[0]["outcome"], "rejected");
    assert_eq!(
        seeds[0]["reason"],
        "the proposed seed of 20000 messages is over \
         capabilities.limits.max_conversation_messages (10000)"
    );
    assert_eq!(session.read("out/result.txt"), "unseeded");
}

#[test]
fn hook_artifacts_are_capped_per_task() {
    // Before: 13 inferences of 64 MiB artifacts held 2.2 GB until the task ended.
    let mut script = String::from("turns:\n");
    for _ in 0..12 {
        script.push_str(&bash_turn("true"));
    }
    script.push_str(&text_turn("done"));
    let capsule = hostile_hook(
        "artifact-flood",
        "artifact-flood 8388608",
        "    binding: on-inference\n",
        &script,
        "",
    );
    let (session, hwm) = run_parked(&capsule, "go", 1);
    assert_eq!(task_ends(&session)[0]["exit_status"], "ok");
    let dropped = session
        .events("hook_dispatch_error")
        .iter()
        .filter(|e| e["arm"] == "artifact")
        .count();
    // 16 MiB hold two 8 MiB artifacts; the other eleven inferences' are dropped.
    assert_eq!(dropped, 11, "{:?}", session.events("hook_dispatch_error"));
    let log = session.record("logs/bootstrap.log");
    assert!(
        log.contains("would pass capabilities.limits.max_hook_artifact_bytes (16777216)"),
        "{log}"
    );
    assert!(hwm < 300 * MIB, "VmHWM {hwm}");
}

#[test]
fn an_answer_is_charged_to_the_tenant_s_memory_under_serve() {
    // The loop's own memory holds the answer it built (about twice, while it was being
    // built); handing it to the host charges it once more, past the tenant's 30 MiB.
    let served = Served::start("hoard-charge");
    let capsule = hoard(
        "charged",
        "",
        "  task_acceptance: queue\n  after_task: sleep\n",
        "",
    );
    let hosted = served
        .create(&Create::path(&capsule.dir).limits(serde_json::json!({"memory_bytes": 31457280})));
    let frames = hosted.message(&hoarding("answer", "12582912", "1"));
    let last = frames.last().expect("frames");
    assert_eq!(last.data["status"]["state"], "failed", "{}", last.data);
    let message = last.data["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(
            "the task's answer and conversation of 12582912 bytes does not fit in \
                             the capsule's memory budget"
        ),
        "{message}"
    );
    let neighbour = served.create_scripted("neighbour", "turns:\n  - text: still here\n");
    let frames = neighbour.message("are you there?");
    assert_eq!(
        frames.last().expect("frames").data["status"]["state"],
        "completed"
    );
}
