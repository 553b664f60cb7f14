//! The confined shell end to end: every hostile command a poisoned model could send is
//! refused and leaves a trace of why, ordinary work still succeeds, and the capsule says
//! which sandbox is in force. Commands come from the scripted driver; the checks read
//! the trace's `tool_call.output` (exactly what the model was told) and the workdir.
//!
//! Where this kernel cannot back `scoped` (no Landlock ABI 6, no user namespaces), the
//! tests that need it print why and return.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

const ONE_TASK: &str = "lifecycle:\n  task_acceptance: none\n  after_task: exit\n";

/// A capsule allowed `bash`, with `extra` under `capabilities:`; one turn per command.
fn capsule(name: &str, extra: &str, commands: &[&str]) -> Capsule {
    let manifest = format!(
        "name: confined\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  \
         model: scripted-test\n  max_turns: 60\ncapabilities:\n  shell:\n    allow: [bash]\n{extra}\
         trace:\n  include_tool_output: true\n{ONE_TASK}"
    );
    let mut script = String::from("turns:\n");
    for (i, command) in commands.iter().enumerate() {
        script.push_str(&format!(
            "  - tool_calls: [{{id: c{i}, name: bash, input: {{command: {command:?}}}}}]\n"
        ));
    }
    script.push_str("  - text: done\n");
    Capsule::new(name, &manifest, &script)
}

/// A capsule that keeps running (queue + sleep) whose one command detaches at once;
/// `extra` goes under `capabilities:`. The turn after the command's completion task
/// would answer `it ended`.
fn detaching(name: &str, extra: &str, command: &str) -> Capsule {
    let manifest = format!(
        "name: confined\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  \
         script: ./script.yaml\n  model: scripted-test\ncapabilities:\n  shell:\n    \
         allow: [bash]\n{extra}lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n  \
         shell_grace_secs: 0\n"
    );
    let script = format!(
        "turns:\n  - tool_calls: [{{id: c0, name: bash, input: {{command: {command:?}}}}}]\n  \
         - text: started\n  - text: it ended\n"
    );
    Capsule::new(name, &manifest, &script)
}

/// Whether this kernel backs `scoped`; prints why not when it does not.
fn confinable() -> bool {
    let probe = capsule("confined-probe", "", &[]);
    let run = probe.run(&["--explain-scope"]);
    if run.status == 0 {
        return true;
    }
    eprintln!(
        "skipped: this kernel cannot confine shell commands:\n{}",
        run.stderr
    );
    false
}

/// What the model was told for each shell call, in order.
fn outputs(session: &Session) -> Vec<String> {
    session
        .events("tool_call")
        .iter()
        .map(|e| e["output"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The `shell` lines' exit codes, in order.
fn exit_codes(session: &Session) -> Vec<i64> {
    session
        .events("shell")
        .iter()
        .map(|e| e["exit_code"].as_i64().unwrap())
        .collect()
}

#[test]
fn reads_outside_the_workdir_are_refused() {
    if !confinable() {
        return;
    }
    let c = capsule(
        "confined-reads",
        "",
        &[
            "cat ../../secret.txt",
            "cat /etc/shadow",
            "ln -s / r; cat r$SECRET_PATH",
            "ls ~/.. /root /tmp",
        ],
    );
    let secret = c.dir.join("secret.txt");
    std::fs::write(&secret, "the user's secret\n").unwrap();
    // The third command reaches the same file through a link to `/`.
    let manifest = std::fs::read_to_string(c.manifest()).unwrap().replace(
        "allow: [bash]\n",
        "allow: [bash]\n  env:\n    allow: [SECRET_PATH]\n",
    );
    std::fs::write(c.manifest(), manifest).unwrap();
    let mut cmd = mur();
    cmd.args(["run", "--json", "--port", "0", "--manifest"])
        .arg(c.manifest())
        .args(["--task", "read what you should not"])
        .env("SECRET_PATH", &secret);
    let run = finish(&mut cmd);
    run.assert_ok();
    let session = run.session();
    let told = outputs(&session);
    assert_eq!(told.len(), 4, "{told:?}");
    for (i, text) in told.iter().enumerate() {
        assert!(
            !text.contains("the user's secret"),
            "call {i} leaked: {text}"
        );
        assert!(
            !text.contains("root:"),
            "call {i} leaked /etc/shadow: {text}"
        );
        assert!(text.contains("Permission denied"), "call {i}: {text}");
    }
    assert!(exit_codes(&session).iter().all(|code| *code != 0));
}

#[test]
fn writes_outside_the_workdir_are_refused_and_nothing_lands_there() {
    if !confinable() {
        return;
    }
    let c = capsule(
        "confined-writes",
        "",
        &[
            "echo owned > ../../planted.txt",
            "echo owned > /tmp/mur-confined-planted.txt",
        ],
    );
    let run = c.run(&["--task", "write outside"]);
    run.assert_ok();
    let session = run.session();
    for text in outputs(&session) {
        assert!(text.contains("Permission denied"), "{text}");
    }
    assert!(!c.dir.join("planted.txt").exists());
    assert!(!std::path::Path::new("/tmp/mur-confined-planted.txt").exists());
    assert_eq!(exit_codes(&session), vec![1, 1]);
}

#[test]
fn no_socket_reaches_a_loopback_listener() {
    if !confinable() {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let bash_tcp = format!("echo hi > /dev/tcp/127.0.0.1/{port}");
    let python = format!(
        "/usr/bin/python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}))'"
    );
    let udp =
        "/usr/bin/python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)'";
    let c = capsule("confined-net", "", &[&bash_tcp, &python, udp]);
    let run = c.run(&["--task", "phone home"]);
    run.assert_ok();
    let session = run.session();
    let told = outputs(&session);
    assert!(told[0].contains("Operation not permitted"), "{}", told[0]);
    assert!(told[1].contains("PermissionError"), "{}", told[1]);
    assert!(told[2].contains("PermissionError"), "{}", told[2]);
    assert!(exit_codes(&session).iter().all(|code| *code != 0));
    assert!(
        listener.accept().is_err(),
        "a confined command connected to the test's listener"
    );
}

#[test]
fn a_command_cannot_signal_mur_or_anything_outside_its_sandbox() {
    if !confinable() {
        return;
    }
    let test_pid = std::process::id();
    let wait_for_pid =
        "for i in $(seq 100); do [ -s mur.pid ] && break; sleep 0.05; done; kill -0 $(cat mur.pid)";
    let c = capsule(
        "confined-signal",
        "",
        &[wait_for_pid, &format!("kill -9 {test_pid}")],
    );
    let running = c.spawn(&["--task", "kill the host"]);
    let pid = running.launch["pid"].as_u64().unwrap();
    let session = running.session();
    std::fs::write(session.workdir.join("mur.pid"), pid.to_string()).unwrap();
    let run = running.wait(Duration::from_secs(60));
    run.assert_ok();
    let told = outputs(&session);
    assert_eq!(told.len(), 2, "{told:?}");
    for text in &told {
        assert!(
            text.contains("No such process") || text.contains("Operation not permitted"),
            "{text}"
        );
    }
    assert!(exit_codes(&session).iter().all(|code| *code != 0));
}

#[test]
fn a_file_written_in_the_workdir_runs_only_with_workdir_exec() {
    if !confinable() {
        return;
    }
    let write_and_run = "printf '#!/bin/sh\\necho ran\\n' > s.sh; chmod +x s.sh; ./s.sh";
    let refused = capsule("confined-noexec", "", &[write_and_run, "bash s.sh"]);
    let run = refused.run(&["--task", "run what you wrote"]);
    run.assert_ok();
    let session = run.session();
    let told = outputs(&session);
    assert!(told[0].contains("Permission denied"), "{}", told[0]);
    assert!(told[0].contains("Stdout:\n\nStderr:"), "{}", told[0]);
    // Through its interpreter a script still runs: only exec of the file itself is refused.
    assert!(told[1].contains("Stdout:\nran\n"), "{}", told[1]);
    assert_eq!(exit_codes(&session), vec![126, 0]);

    let allowed = capsule(
        "confined-exec",
        "  filesystem:\n    workdir_exec: true\n",
        &[write_and_run],
    );
    let run = allowed.run(&["--task", "run what you wrote"]);
    run.assert_ok();
    let session = run.session();
    assert!(outputs(&session)[0].contains("Stdout:\nran\n"));
    assert_eq!(exit_codes(&session), vec![0]);
}

#[test]
fn a_600_mib_allocation_fails_under_the_512_mib_default() {
    if !confinable() {
        return;
    }
    let allocate = "/usr/bin/python3 -c 'b = bytearray(600 * 1024 * 1024); print(len(b))'";
    let c = capsule("confined-memory", "", &[allocate]);
    let run = c.run(&["--task", "balloon"]);
    run.assert_ok();
    let session = run.session();
    assert!(
        outputs(&session)[0].contains("MemoryError"),
        "{:?}",
        outputs(&session)
    );
    assert_eq!(exit_codes(&session), vec![1]);
}

#[test]
fn a_command_cannot_start_more_processes_than_the_limit() {
    if !confinable() {
        return;
    }
    // Bounded by the test itself: at most 300 sleeps, fewer once the limit refuses.
    let fork_bomb = "/usr/bin/python3 -c '\nimport subprocess\nstarted = []\ntry:\n    for _ in range(300):\n        started.append(subprocess.Popen([\"/usr/bin/sleep\", \"30\"]))\nexcept OSError as e:\n    print(\"refused after\", len(started), e)\n'";
    let c = capsule("confined-nproc", "", &[fork_bomb]);
    let run = c.run(&["--task", "fork"]);
    run.assert_ok();
    let session = run.session();
    let told = &outputs(&session)[0];
    let after: usize = told
        .split("refused after ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no refusal: {told}"));
    assert!(after < 256, "{told}");
    assert!(told.contains("Resource temporarily unavailable"), "{told}");
}

#[test]
fn a_write_past_the_quota_fails_the_task_with_the_limit_named() {
    if !confinable() {
        return;
    }
    let c = capsule(
        "confined-quota",
        "  limits:\n    workdir_bytes: 2097152\n",
        &["head -c 3000000 /dev/zero > big", "echo never"],
    );
    let run = c.run(&["--task", "fill the disk"]);
    assert_eq!(run.status, 1, "{}", run.stderr);
    let session = run.session();
    // The file stops one block past the room the quota had left when the command
    // started (never larger than the quota): past it, so the breach is reported.
    let size = std::fs::metadata(session.workdir.join("big"))
        .unwrap()
        .len();
    assert!((2_097_152 - 65_536..=2_097_152).contains(&size), "{size}");
    let breach = &session.events("workdir_quota_breach")[0];
    assert_eq!(breach["limit"], "capabilities.limits.workdir_bytes");
    let end = &session.events("task_end")[0];
    assert_eq!(end["exit_status"], "failed");
    let result = session.read("out/result.txt");
    assert!(
        result.contains("capabilities.limits.workdir_bytes"),
        "{result}"
    );
    assert_eq!(
        session.events("shell").len(),
        1,
        "the second command must not run"
    );
    // head was stopped by the file-size limit, and the trace says which limit.
    let shell = &session.events("shell")[0];
    assert_eq!(shell["exit_code"], 128 + 25);
    assert_eq!(shell["resource_limit"], "capabilities.limits.workdir_bytes");
}

#[test]
fn a_detached_write_past_the_quota_fails_its_completion_task() {
    if !confinable() {
        return;
    }
    let c = detaching(
        "confined-detached-quota",
        "  limits:\n    workdir_bytes: 2097152\n",
        "sleep 0.3; head -c 3000000 /dev/zero > big",
    );
    let running = c.spawn(&["--task", "fill the disk in the background"]);
    let session = running.session();
    let deadline = Instant::now() + Duration::from_secs(30);
    while session_events(&session, "task_end").len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let completed = session_events(&session, "shell_completed");
    assert_eq!(completed.len(), 1, "no shell_completed");
    assert_eq!(completed[0]["status"], "failed");
    assert_eq!(
        completed[0]["resource_limit"],
        "capabilities.limits.workdir_bytes"
    );
    let breach = session_events(&session, "workdir_quota_breach");
    assert_eq!(breach.len(), 1, "{breach:?}");
    assert_eq!(breach[0]["work_id"], completed[0]["work_id"]);
    let ends = session_events(&session, "task_end");
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert_eq!(ends[1]["task_id"], completed[0]["completion_task_id"]);
    assert_eq!(ends[1]["exit_status"], "failed");
    // The completion task failed at its first turn: the script's last text never ran.
    assert!(session_events(&session, "inference").len() < 3);
    drop(running);
}

/// Processes running `sleep <marker>` anywhere on the machine.
fn sleeping(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let words: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if words.len() >= 2 && words[0].ends_with(b"sleep") && words[1] == marker.as_bytes() {
            found.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    found
}

#[test]
fn setsid_and_background_processes_are_gone_once_the_session_ends() {
    if !confinable() {
        return;
    }
    let marker = format!("600.{}", std::process::id());
    let setsid = format!("setsid sleep {marker} &");
    let background = format!("sleep {marker} >/dev/null 2>&1 &");
    let c = capsule("confined-orphans", "", &[&setsid, &background]);
    let run = c.run(&["--task", "leave things behind"]);
    run.assert_ok();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sleeping(&marker).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = sleeping(&marker);
    for pid in &left {
        let _ = std::process::Command::new("kill")
            .args(["-9", pid])
            .status();
    }
    assert!(left.is_empty(), "still running after mur exited: {left:?}");
}

#[test]
fn fifty_calls_in_one_reply_run_at_most_the_limit_at_once() {
    if !confinable() {
        return;
    }
    // Each call detaches at once (grace 0) and records how many were running.
    let command = "mkdir -p running; t=running/$$-$RANDOM$RANDOM; touch $t; \
                   ls running | wc -l >> counts; sleep 0.3; rm $t";
    let mut calls = String::new();
    for i in 0..50 {
        calls.push_str(&format!(
            "{{id: c{i}, name: bash, input: {{command: {command:?}}}}}, "
        ));
    }
    // The default bound, capabilities.limits.shell_concurrency: 8.
    let manifest = "name: confined\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  \
                    script: ./script.yaml\n  model: scripted-test\ncapabilities:\n  shell:\n    \
                    allow: [bash]\nlifecycle:\n  task_acceptance: none\n  shell_grace_secs: 0\n";
    // Each command that ends reports back as a completion task: one more turn each.
    let script = format!(
        "turns:\n  - tool_calls: [{calls}]\n  - text: done\n{}",
        "  - text: noted\n".repeat(60)
    );
    let c = Capsule::new("confined-concurrency", manifest, &script);
    let run = c.run(&["--task", "start fifty"]);
    run.assert_ok();
    let session = run.session();
    let counts: Vec<usize> = session
        .read("counts")
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert!(counts.len() >= 8, "{counts:?}");
    let most = counts.iter().max().copied().unwrap_or(0);
    assert!(most <= 8, "{most} ran at once: {counts:?}");
    assert!(most >= 2, "the commands never overlapped: {counts:?}");
}

#[test]
fn ordinary_work_still_succeeds() {
    if !confinable() {
        return;
    }
    let work = [
        "printf 'b\\na\\nc\\n' | sort | grep -v c > sorted.txt && cat sorted.txt",
        "ls -la . > listing.txt 2>&1; grep -c . listing.txt",
        "/usr/bin/python3 -c 'import os, tempfile; print(os.getcwd() == os.environ[\"PWD\"], tempfile.gettempdir().startswith(os.getcwd()))'",
        "git init -q repo && cd repo && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m first && git log --oneline | wc -l",
        "echo $HOME; echo $TMPDIR; touch \"$TMPDIR/x\" && echo tmp-ok",
    ];
    let c = capsule("confined-ordinary", "", &work);
    let run = c.run(&["--task", "do some work"]);
    run.assert_ok();
    let session = run.session();
    assert_eq!(
        exit_codes(&session),
        vec![0, 0, 0, 0, 0],
        "{:?}",
        outputs(&session)
    );
    let told = outputs(&session);
    assert!(told[0].contains("Stdout:\na\nb\n"), "{}", told[0]);
    assert!(told[2].contains("Stdout:\nTrue True\n"), "{}", told[2]);
    assert!(told[3].contains("Stdout:\n1\n"), "{}", told[3]);
    let home = session.workdir.join(".capsule-home");
    assert!(
        told[4].contains(&format!(
            "{}\n{}/tmp\ntmp-ok",
            home.display(),
            home.display()
        )),
        "{}",
        told[4]
    );
    assert_eq!(session.read("sorted.txt"), "a\nb\n");
}

#[test]
fn a_detached_command_is_confined_the_same_way() {
    if !confinable() {
        return;
    }
    let c = detaching(
        "confined-detached",
        "",
        "sleep 0.5; echo inside > made.txt; cat ../../secret.txt; echo end",
    );
    c.file("secret.txt", "the user's secret\n");
    let running = c.spawn(&["--task", "run it in the background"]);
    let session = running.session();
    let deadline = Instant::now() + Duration::from_secs(30);
    while session_events(&session, "shell_completed").is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let completed = session_events(&session, "shell_completed");
    assert_eq!(completed.len(), 1, "no shell_completed");
    let log = std::fs::read_to_string(completed[0]["output_path"].as_str().unwrap()).unwrap();
    assert!(log.contains("Permission denied"), "{log}");
    assert!(!log.contains("the user's secret"), "{log}");
    assert!(log.contains("end"), "{log}");
    assert_eq!(session.read("made.txt"), "inside\n");
    drop(running);
}

/// The trace lines of one kind so far, while the capsule runs.
fn session_events(session: &Session, kind: &str) -> Vec<Value> {
    session
        .trace_so_far()
        .into_iter()
        .filter(|e| e["event_type"] == kind)
        .collect()
}

/// A loopback HTTP server answering every request with `body`; returns its port.
fn http_server(body: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[test]
fn through_the_proxy_an_allowed_host_answers_and_another_port_is_refused() {
    if !confinable() {
        return;
    }
    let allowed = http_server("hello from the allowed mock\n");
    let other = http_server("you should not see this\n");
    let c = capsule(
        "confined-proxy",
        &format!("    network: proxy\n  network:\n    allow: [\"http://127.0.0.1:{allowed}\"]\n"),
        &[
            &format!("curl -sS http://127.0.0.1:{allowed}/hi"),
            &format!("curl -sS -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{other}/"),
            &format!("curl -sS --noproxy '*' http://127.0.0.1:{allowed}/"),
        ],
    );
    let run = c.run(&["--task", "fetch"]);
    run.assert_ok();
    assert!(
        run.stderr.contains("network through the session proxy"),
        "{}",
        run.stderr
    );
    let session = run.session();
    let told = outputs(&session);
    assert!(
        told[0].contains("hello from the allowed mock"),
        "{}",
        told[0]
    );
    assert!(told[1].contains("Stdout:\n403"), "{}", told[1]);
    assert!(!told[1].contains("you should not see this"), "{}", told[1]);
    // Around the proxy there is no way out.
    assert!(
        !told[2].contains("hello from the allowed mock"),
        "{}",
        told[2]
    );
    assert_ne!(exit_codes(&session)[2], 0);
    let allowed_lines = session.events("shell_http_allowed");
    assert_eq!(allowed_lines.len(), 1, "{allowed_lines:?}");
    assert_eq!(allowed_lines[0]["port"], allowed);
    let denied = session.events("shell_http_denied");
    assert_eq!(denied.len(), 1, "{denied:?}");
    assert_eq!(denied[0]["port"], other);
    assert_eq!(denied[0]["reason"], "not in capabilities.network.allow");
}

#[test]
fn the_launch_says_which_sandbox_is_in_force_and_the_trace_records_it() {
    if !confinable() {
        return;
    }
    let c = capsule("confined-launch", "", &["true"]);
    let run = c.run(&["--task", "hello"]);
    run.assert_ok();
    let line = run
        .stderr
        .lines()
        .find(|l| l.starts_with("shell: "))
        .unwrap_or_else(|| panic!("no shell line: {}", run.stderr));
    assert!(
        line.starts_with("shell: scoped (landlock abi ")
            && line.ends_with(" + seccomp + pid namespace), no network"),
        "{line}"
    );
    let start = &run.session().events("session_start")[0];
    let containment = &start["containment"];
    assert_eq!(containment["declared"], "scoped");
    assert_eq!(containment["achieved"], "scoped");
    assert!(containment["landlock_abi"].as_i64().unwrap() >= 6);
    assert_eq!(containment["seccomp"], true);
    assert_eq!(containment["network"], "none");
    let md = run.session().read("MURMUR.md");
    assert!(
        md.contains("Your commands run in a sandbox (containment: scoped)"),
        "{md}"
    );
    assert!(md.contains("No network"), "{md}");
}

/// One run of `c` with its own cache folder `cache`: what the model was told.
fn told_with_cache(c: &Capsule, cache: &std::path::Path) -> Vec<String> {
    let mut cmd = mur();
    cmd.args(["run", "--json", "--port", "0", "--manifest"])
        .arg(c.manifest())
        .args(["--task", "read /etc"])
        .env("MUR_CACHE_DIR", cache);
    let run = finish(&mut cmd);
    run.assert_ok();
    outputs(&run.session())
}

#[test]
fn what_the_shell_keeps_across_runs_however_corrupt_never_widens_it() {
    if !confinable() {
        return;
    }
    let c = capsule(
        "confined-kept-walk",
        "",
        // A file of `/etc` first: the first command waits for the rules of `/etc`.
        &[
            "head -c 0 /etc/hostname && echo readable",
            "cat /etc/shadow",
        ],
    );
    let cache = scratch("confined-kept-cache");
    let kept = cache.join("confine");
    let check = |told: Vec<String>, when: &str| {
        assert_eq!(told.len(), 2, "{when}: {told:?}");
        assert!(told[0].contains("Stdout:\nreadable"), "{when}: {}", told[0]);
        assert!(told[1].contains("Permission denied"), "{when}: {}", told[1]);
    };
    check(told_with_cache(&c, &cache), "first run");
    let walk = std::fs::read_to_string(kept.join("etc-walk")).expect("the walk is kept");
    assert!(
        walk.starts_with("mur-etc-walk 1\n") && walk.contains("\nlink "),
        "{walk}"
    );
    // Kept only where both namespace probes succeed (`sealed` needs the mount one).
    if let Ok(probe) = std::fs::read_to_string(kept.join("kernel-probe")) {
        assert!(probe.ends_with("\nnamespaces ok\n"), "{probe}");
    }
    check(told_with_cache(&c, &cache), "kept run");

    // Rewritten by someone else: garbage, and links planted in their place.
    std::fs::write(kept.join("etc-walk"), "mur-etc-walk 1\nkey x\nlink / -\n").unwrap();
    std::fs::write(kept.join("kernel-probe"), [0xff; 32]).unwrap();
    check(told_with_cache(&c, &cache), "corrupt run");
    let elsewhere = scratch("confined-kept-elsewhere").join("planted");
    std::fs::write(&elsewhere, "planted").unwrap();
    for name in ["etc-walk", "kernel-probe"] {
        std::fs::remove_file(kept.join(name)).unwrap();
        std::os::unix::fs::symlink(&elsewhere, kept.join(name)).unwrap();
    }
    check(told_with_cache(&c, &cache), "linked run");
    assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "planted");
    // Each was replaced by a file of its own again.
    for name in ["etc-walk", "kernel-probe"] {
        let meta = std::fs::symlink_metadata(kept.join(name)).unwrap();
        assert!(meta.is_file(), "{name}");
    }
}

#[test]
fn advisory_is_the_explicit_opt_out_and_says_so_everywhere() {
    let c = capsule(
        "confined-advisory",
        "  containment: advisory\n",
        &["cat ../../secret.txt"],
    );
    c.file("secret.txt", "readable when unconfined\n");
    let run = c.run(&["--task", "hello"]);
    run.assert_ok();
    assert!(
        run.stderr
            .lines()
            .any(|l| l.starts_with("shell: advisory (unconfined")),
        "{}",
        run.stderr
    );
    let session = run.session();
    assert_eq!(
        session.events("session_start")[0]["containment"]["achieved"],
        "advisory"
    );
    assert!(session.read("MURMUR.md").contains("NOT confined"));
    assert!(outputs(&session)[0].contains("readable when unconfined"));
}

#[test]
fn the_stronger_of_manifest_and_command_line_wins() {
    if !confinable() {
        return;
    }
    let raised = capsule(
        "confined-raised",
        "  containment: advisory\n",
        &["cat ../../secret.txt"],
    );
    raised.file("secret.txt", "secret\n");
    let run = raised.run(&["--task", "hello", "--containment", "scoped"]);
    run.assert_ok();
    let session = run.session();
    let record = &session.events("session_start")[0]["containment"];
    assert_eq!(record["declared"], "advisory");
    assert_eq!(record["achieved"], "scoped");
    assert!(outputs(&session)[0].contains("Permission denied"));

    let kept = capsule("confined-kept", "  containment: scoped\n", &["true"]);
    let run = kept.run(&["--task", "hello", "--containment", "advisory"]);
    run.assert_ok();
    assert_eq!(
        run.session().events("session_start")[0]["containment"]["achieved"],
        "scoped"
    );
}

#[test]
fn sealed_runs_commands_in_a_private_root() {
    if !confinable() {
        return;
    }
    let c = capsule(
        "confined-sealed",
        "  containment: sealed\n",
        &[
            "ls / | tr '\\n' ' '",
            "ls ../.. 2>&1; echo made > here.txt; cat here.txt",
        ],
    );
    let run = c.run(&["--task", "look around"]);
    run.assert_ok();
    assert!(
        run.stderr
            .contains("shell: sealed (private root + landlock abi "),
        "{}",
        run.stderr
    );
    let session = run.session();
    let told = outputs(&session);
    // The root holds only what was put there; listing it is refused by Landlock.
    assert!(
        !told[0].contains("home") && !told[0].contains("root "),
        "{}",
        told[0]
    );
    assert!(told[1].contains("Stdout:\n"), "{}", told[1]);
    assert!(told[1].contains("made"), "{}", told[1]);
    assert_eq!(session.read("here.txt"), "made\n");
    assert_eq!(
        session.events("session_start")[0]["containment"]["mount_namespace"],
        true
    );
}

#[test]
fn explain_scope_prints_the_reach_and_exits_without_a_session() {
    if !confinable() {
        return;
    }
    let c = capsule("confined-explain", "", &[]);
    let mut cmd = mur();
    cmd.args(["run", "--explain-scope", "--manifest"])
        .arg(c.manifest());
    let run = finish(&mut cmd);
    run.assert_ok();
    let first = run.stdout.lines().next().unwrap();
    assert!(first.starts_with("shell: scoped (landlock abi "), "{first}");
    for needle in [
        "Read, write and create files in the workdir ",
        "Read and run programs in /usr",
        "secrets such as /etc/shadow are left out",
        "Files written in the workdir cannot be executed",
        "No network: IPv4 and IPv6 sockets of every kind are refused",
        "256 processes per command; at most 8 commands at once",
    ] {
        assert!(
            run.stdout.contains(needle),
            "{needle:?} in:\n{}",
            run.stdout
        );
    }
    assert!(
        !c.dir.join("workdir").exists(),
        "explain-scope must not start a session"
    );
}
