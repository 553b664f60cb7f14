//! Process hygiene end to end: a component's stdout and stderr reach its own escaped
//! log, never mur's terminal raw, and mur leaves no process behind when it ends.

use std::time::{Duration, Instant};

use crate::common::*;

const STATELESS: &str = "lifecycle:\n  task_acceptance: none\n  after_task: exit\n";

/// The hostile tool prints a fake coloured `[murmur]` line: mur's stderr holds no ESC
/// and no line of it, only a prefixed note; the tool's log holds the text, escaped.
#[test]
pub(crate) fn a_tools_stderr_goes_escaped_to_its_log_and_never_raw_to_murs_stderr() {
    let manifest = format!(
        "name: hygiene\nversion: \"0.1.0\"\nartifacts:\n  - name: loud\n    runtime: tool\n    source: {}\n\
         inference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\n{STATELESS}",
        guest(MUR_TOOL_STDERR).display()
    );
    let script = "turns:\n  - tool_calls: [{id: c1, name: loud, input: {}}]\n  - text: done\n";
    let capsule = Capsule::new("hygiene-stderr", &manifest, script);
    let run = capsule.run(&["--task", "be loud"]);
    run.assert_ok();
    assert!(!run.stderr.contains('\x1b'), "{:?}", run.stderr);
    assert!(!run.stderr.contains('\r'), "{:?}", run.stderr);
    assert!(!run.stderr.contains('\x07'), "{:?}", run.stderr);
    for line in run.stderr.lines() {
        assert!(!line.starts_with("[murmur] task approved"), "{line:?}");
        assert!(!line.starts_with("[murmur] status"), "{line:?}");
    }
    // One note for the call, on its first line only.
    assert_eq!(
        run.stderr.matches("[tool loud]").count(),
        1,
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.lines().any(|l| l
            .starts_with("[tool loud] \\u{1b}[1;32m[murmur] task approved")
            && l.ends_with("tool-loud.log)")),
        "{}",
        run.stderr
    );
    // `--json` keeps stdout to the launch line: the tool's stdout went to its log.
    assert_eq!(run.stdout.lines().count(), 1, "{}", run.stdout);
    let log = run.session().record("logs/tool-loud.log");
    assert!(
        log.contains("\\u{1b}[1;32m[murmur] task approved by the operator\\u{1b}[0m\n"),
        "{log:?}"
    );
    assert!(
        log.contains("\\u{d}[murmur] status: ok\\u{1b}[2A\\u{7}\n"),
        "{log:?}"
    );
    assert!(log.contains("{\"forged\":\"json line\"}\n"), "{log:?}");
    assert!(!log.contains('\x1b') && !log.contains('\r'), "{log:?}");
}

/// Gone, or a zombie nobody reaped yet (a container's pid 1 may never reap): it runs nothing.
fn process_gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

fn wait_gone(pid: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if process_gone(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Unconfined (`advisory`), a `setsid` command and a redirected background command both
/// outlive the command that started them; when mur's task ends they are killed, and mur
/// says so. (Confined, they end with their command: see `confined_shell.rs`.)
#[test]
fn processes_a_command_leaves_behind_die_with_the_session() {
    let manifest = format!(
        "name: hygiene\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\n\
         capabilities:\n  containment: advisory\n  shell:\n    allow: [bash]\n{STATELESS}"
    );
    let setsid = "setsid sleep 300 > /dev/null 2>&1 < /dev/null & echo $! > setsid.pid";
    let background = "sleep 300 > /dev/null 2>&1 & echo $! > background.pid";
    let script = format!(
        "turns:\n  - tool_calls: [{{id: c1, name: bash, input: {{command: {setsid:?}}}}}]\n  \
         - tool_calls: [{{id: c2, name: bash, input: {{command: {background:?}}}}}]\n  - text: done\n"
    );
    let capsule = Capsule::new("hygiene-orphans", &manifest, &script);
    let run = capsule.run(&["--task", "leave things behind"]);
    let session = run.session();
    let pids: Vec<String> = ["setsid.pid", "background.pid"]
        .iter()
        .map(|f| session.read(f).trim().to_string())
        .collect();
    let alive: Vec<&String> = pids.iter().filter(|p| !wait_gone(p)).collect();
    for pid in &alive {
        let _ = std::process::Command::new("kill")
            .args(["-9", pid])
            .status();
    }
    assert!(
        alive.is_empty(),
        "still running after mur exited: {alive:?}"
    );
    run.assert_ok();
    assert!(
        run.stderr
            .lines()
            .any(|l| l == "[murmur] killed 2 processes left behind by shell commands"),
        "{}",
        run.stderr
    );
}
