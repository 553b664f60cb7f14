//! The running-session registry end to end: `mur run` lists itself under
//! `$MURMUR_HOME/running`, `mur ps` lists and prunes, `mur stop SESSION` asks, then
//! signals, `mur watch SESSION` attaches; and `mur run`'s launch flags
//! (`--system-prompt`, `-v`). Every test has a MURMUR_HOME of its own, so parallel tests
//! never see each other's sessions.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::common::mock_model::{MockModel, Reply, openai};
use crate::common::*;

/// How long a capsule or a command of these tests may take to end before the test fails.
const WAIT: Duration = Duration::from_secs(60);

fn manifest(name: &str) -> String {
    format!(
        "name: {name}\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\ncapabilities:\n  shell:\n    allow: [bash]\n"
    )
}

fn answer(text: &str) -> String {
    format!("turns:\n  - text: \"{text}\"\n    stop_reason: end_turn\n")
}

/// A MURMUR_HOME of the test's own.
struct Home(PathBuf);

impl Home {
    fn new(name: &str) -> Home {
        Home(scratch(&format!("home-{name}")))
    }

    fn env(&self) -> [(&str, &str); 1] {
        [("MURMUR_HOME", self.0.to_str().unwrap())]
    }

    /// `mur ARGS` with this home, to completion.
    fn mur(&self, args: &[&str]) -> Run {
        finish(&mut self.cmd(args))
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = mur();
        cmd.envs(self.env()).args(args);
        cmd
    }

    fn entry(&self, session: &str) -> PathBuf {
        self.0.join("running").join(format!("{session}.json"))
    }

    /// A capsule that takes tasks over HTTP and serves until it is stopped.
    fn serve(&self, capsule: &Capsule, extra: &[&str]) -> Running {
        let args: Vec<&str> = QUEUE.iter().chain(extra).copied().collect();
        capsule.spawn_env(&args, &self.env())
    }
}

fn session_of(running: &Running) -> String {
    running.launch["session_id"].as_str().unwrap().to_string()
}

fn pid_of(running: &Running) -> u32 {
    running.launch["pid"].as_u64().unwrap() as u32
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// The last `n` characters of a session id: the suffix a user would type.
fn suffix(session: &str, n: usize) -> &str {
    &session[session.len() - n..]
}

/// Whether `address` (`HOST:PORT`) still accepts connections.
fn answers(address: &str) -> bool {
    std::net::TcpStream::connect(address).is_ok()
}

/// Waits until `check` holds, failing the test after [`WAIT`].
fn until(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn ps_lists_two_capsules_newest_first_from_private_files_removed_at_a_clean_exit() {
    let home = Home::new("ps");
    let a = Capsule::new("ps-a", &manifest("alpha"), "");
    let b = Capsule::new("ps-b", &manifest("beta"), "");
    let first = home.serve(&a, &[]);
    // Started a millisecond apart at least, so the order is by start.
    std::thread::sleep(Duration::from_millis(5));
    let second = home.serve(&b, &[]);
    let (id_a, id_b) = (session_of(&first), session_of(&second));

    let entry = home.entry(&id_a);
    assert_eq!(mode(&entry), 0o600);
    assert_eq!(mode(entry.parent().unwrap()), 0o700);

    let ps = home.mur(&["ps"]);
    ps.assert_ok();
    let lines: Vec<&str> = ps.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", ps.stdout);
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        ["SESSION", "PID", "URL", "UPTIME", "CAPSULE", "WORKDIR"]
    );
    for (line, running, capsule) in [
        (lines[1], &second, "beta@0.1.0"),
        (lines[2], &first, "alpha@0.1.0"),
    ] {
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cells[0], session_of(running), "{}", ps.stdout);
        assert_eq!(cells[1], pid_of(running).to_string());
        assert_eq!(cells[2], running.launch["url"].as_str().unwrap());
        assert!(cells[3].len() == 8 && cells[3].starts_with("00:"), "{line}");
        assert_eq!(cells[4], capsule);
        assert_eq!(cells[5], running.launch["workdir"].as_str().unwrap());
    }

    let json = home.mur(&["ps", "--json"]);
    json.assert_ok();
    assert_eq!(json.stdout.lines().count(), 1);
    let doc: Value = serde_json::from_str(&json.stdout).unwrap();
    let sessions = doc["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2);
    assert_eq!(sessions[0]["session_id"], json!(id_b));
    assert_eq!(sessions[0]["pid"], second.launch["pid"]);
    assert_eq!(sessions[0]["address"], second.launch["address"]);
    assert_eq!(sessions[0]["url"], second.launch["url"]);
    assert_eq!(sessions[0]["capsule"], "beta@0.1.0");
    assert_eq!(sessions[0]["records_dir"], second.launch["records_dir"]);
    assert_eq!(sessions[1]["session_id"], json!(id_a));

    // A clean end (asked by address, as before the registry) removes the entry.
    home.mur(&["stop", &first.address]).assert_ok();
    first.wait(WAIT).assert_ok();
    assert!(!entry.exists(), "{} is left", entry.display());
    assert!(home.entry(&id_b).exists());
    home.mur(&["stop", &second.address]).assert_ok();
    second.wait(WAIT).assert_ok();
    let ps = home.mur(&["ps"]);
    ps.assert_ok();
    assert_eq!(
        ps.stdout,
        "no running capsules (mur run lists each session it runs here)\n"
    );
    assert_eq!(home.mur(&["ps", "--json"]).stdout, "{\"sessions\":[]}\n");
}

#[test]
fn a_killed_capsules_entry_is_pruned_by_ps_and_the_other_is_still_listed() {
    let home = Home::new("kill");
    let capsule = Capsule::new("kill", &manifest("kill"), "");
    let mut killed = home.serve(&capsule, &[]);
    let alive = home.serve(&capsule, &[]);
    let (gone, kept) = (session_of(&killed), session_of(&alive));
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();
    assert!(
        home.entry(&gone).exists(),
        "SIGKILL leaves the entry behind"
    );

    let ps = home.mur(&["ps"]);
    ps.assert_ok();
    assert_eq!(
        ps.stderr,
        format!("pruned: {gone} — its process has exited\n")
    );
    assert!(!home.entry(&gone).exists());
    let rows: Vec<&str> = ps.stdout.lines().skip(1).collect();
    assert_eq!(rows.len(), 1, "{}", ps.stdout);
    assert!(rows[0].starts_with(&kept), "{}", ps.stdout);
    // Pruned once: the next listing says nothing of it.
    assert_eq!(home.mur(&["ps"]).stderr, "");

    // Naming the killed session now: it is not running.
    home.mur(&["stop", &gone])
        .assert_error("error[E-RUN-022]: no running session matches");
    drop(alive);
}

#[test]
fn stop_by_suffix_ends_that_capsule_only_then_at_1_ends_the_other() {
    let home = Home::new("stop");
    let capsule = Capsule::new("stop", &manifest("stopper"), "");
    let first = home.serve(&capsule, &[]);
    std::thread::sleep(Duration::from_millis(5));
    let second = home.serve(&capsule, &[]);
    let (id_a, id_b) = (session_of(&first), session_of(&second));

    let stop = home.mur(&["stop", suffix(&id_a, 6)]);
    stop.assert_ok();
    assert_eq!(
        stop.stdout,
        format!(
            "stopped: {id_a}\ncapsule: stopper@0.1.0\nsignal:  none — the process had already exited\nresidue: nothing else was left running\n"
        ),
        "{}",
        stop.stderr
    );
    assert!(!home.entry(&id_a).exists());
    // It ended through its own teardown: exit 0, its trace closed.
    let session = first.session();
    first.wait(WAIT).assert_ok();
    assert_eq!(session.events("session_end").len(), 1);
    assert!(answers(&second.address), "the other capsule still serves");

    // @1 is now the only one left.
    let stop = home.mur(&["stop", "@1", "--timeout", "5"]);
    stop.assert_ok();
    assert!(
        stop.stdout.starts_with(&format!("stopped: {id_b}\n")),
        "{}",
        stop.stdout
    );
    second.wait(WAIT).assert_ok();

    home.mur(&["stop", "@1"])
        .assert_error("error[E-RUN-022]: no running session matches @1: there are no sessions");
    home.mur(&["stop", "ses_00000000000000000000000000000000"])
        .assert_error("error[E-RUN-022]: no running session matches ses_00000000000000000000000000000000: no such session");
}

#[test]
fn stop_reports_the_running_and_the_queued_task_it_canceled() {
    let home = Home::new("cancel");
    let script = "turns:\n  - text: \"Napping.\"\n    tool_calls:\n      - id: t1\n        name: bash\n        input: {command: \"sleep 30\"}\n  - text: \"Rested.\"\n    stop_reason: end_turn\n";
    let capsule = Capsule::new("cancel", &manifest("napper"), script);
    let running = home.serve(&capsule, &["--task", "take a nap"]);
    let session = running.session();
    // The first turn asked for the nap: the task is running it.
    until("the first turn has ended", || {
        session
            .trace_so_far()
            .iter()
            .any(|e| e["event_type"] == "inference")
    });
    // A second task waits behind it, its stream left open.
    let _waiting = post(
        &running.address,
        &[("content-type", "application/json")],
        &message_stream_body("and another"),
    );
    until("the second task has arrived", || {
        session
            .trace_so_far()
            .iter()
            .any(|e| e["event_type"] == "a2a_task_received")
    });
    let trace = session.trace_so_far();
    let task_of = |kind: &str| {
        trace
            .iter()
            .find(|e| e["event_type"] == kind)
            .map(|e| e["task_id"].as_str().unwrap().to_string())
            .unwrap()
    };
    let (napping, queued) = (task_of("task_start"), task_of("a2a_task_received"));
    let started = Instant::now();
    let stop = home.mur(&["stop", &session_of(&running)]);
    stop.assert_ok();
    assert_eq!(
        stop.stdout,
        format!(
            "stopped: {}\ncapsule: napper@0.1.0\nsignal:  none — the process had already exited\ncanceled: {napping}\ncanceled: {queued}\nresidue: nothing else was left running\n",
            session_of(&running)
        )
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the nap was cut short"
    );
    running.wait(WAIT);
    let ends = session.events("task_end");
    assert_eq!(ends.len(), 1, "the queued task never started: {ends:?}");
    assert_eq!(ends[0]["exit_status"], "canceled", "{ends:?}");
}

#[test]
fn a_capsule_that_cannot_answer_gets_sigterm_then_sigkill_within_the_timeout() {
    let home = Home::new("wedged");
    let capsule = Capsule::new("wedged", &manifest("wedged"), "");
    let mut running = home.serve(&capsule, &[]);
    let id = session_of(&running);
    // Stopped: its port still accepts, nothing answers, and SIGTERM waits until SIGKILL.
    let stopped = Command::new("kill")
        .args(["-STOP", &pid_of(&running).to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let started = Instant::now();
    let stop = home.mur(&["stop", suffix(&id, 8), "--timeout", "1"]);
    let took = started.elapsed();
    stop.assert_ok();
    let lines: Vec<&str> = stop.stdout.lines().collect();
    assert_eq!(lines[0], format!("stopped: {id}"));
    assert_eq!(lines[1], "capsule: wedged@0.1.0");
    assert_eq!(lines[2], "signal:  SIGKILL", "{}", stop.stdout);
    assert!(
        lines[3].starts_with("residue: unknown — the capsule could not be asked: ")
            && lines[3].contains("did not answer the stop request"),
        "{}",
        stop.stdout
    );
    assert_eq!(lines.len(), 4);
    // 3 s for an answer, 1 s of grace after SIGTERM, then SIGKILL takes at once.
    assert!(took < Duration::from_secs(9), "{took:?}");
    use std::os::unix::process::ExitStatusExt;
    let status = running.child.wait().unwrap();
    assert_eq!(status.signal(), Some(9));
    assert!(
        !home.entry(&id).exists(),
        "a killed session's entry is removed by mur stop"
    );
}

/// An entry naming a live process of someone else's (its pid, another start time) is
/// stale: listed nowhere, pruned, and never signalled.
#[test]
fn a_reused_pid_is_pruned_and_never_signalled() {
    let home = Home::new("reuse");
    let mut sleeper = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = sleeper.id();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 1..];
    let start: u64 = after_name
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    let dir = home.0.join("running");
    std::fs::create_dir_all(&dir).unwrap();
    let craft = |id: &str| {
        let entry = json!({
            "session_id": id, "pid": pid, "start_time": start + 1, "started_at": 1,
            "address": "http://127.0.0.1:9", "url": "localhost:9", "workdir": "/nowhere",
            "records_dir": "/nowhere", "capsule_name": "impostor", "capsule_version": "0.0.1"
        });
        std::fs::write(dir.join(format!("{id}.json")), entry.to_string()).unwrap();
    };
    let listed = "ses_0000000000000000000000000000aaaa";
    craft(listed);
    std::fs::write(dir.join("ses_torn.json"), "{\"session_id\": \"ses_to").unwrap();
    let ps = home.mur(&["ps"]);
    ps.assert_ok();
    assert_eq!(
        ps.stdout,
        "no running capsules (mur run lists each session it runs here)\n"
    );
    assert!(
        ps.stderr.contains(&format!(
            "pruned: {listed} — its pid now runs another process"
        )),
        "{}",
        ps.stderr
    );
    assert!(
        ps.stderr.contains("warning[W-REG-001]") && ps.stderr.contains("ses_torn.json"),
        "{}",
        ps.stderr
    );
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);

    let named = "ses_0000000000000000000000000000bbbb";
    craft(named);
    home.mur(&["stop", named, "--timeout", "0"])
        .assert_error(&format!(
            "error[E-RUN-022]: {named} is not running: its pid now runs another process"
        ));
    assert!(
        sleeper.try_wait().unwrap().is_none(),
        "the other process was signalled"
    );
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}

#[test]
fn watch_by_suffix_and_by_default_attaches_through_the_registry() {
    let home = Home::new("watch");
    let a = Capsule::new("watch-a", &manifest("alpha"), &answer("I am alpha."));
    let b = Capsule::new("watch-b", &manifest("beta"), &answer("I am beta."));
    let alpha = home.serve(&a, &["--task", "who are you?"]);
    std::thread::sleep(Duration::from_millis(5));
    let beta = home.serve(&b, &["--task", "who are you?"]);
    let (id_a, id_b) = (session_of(&alpha), session_of(&beta));

    let mut watch = Watch::start_with(home.cmd(&["watch", suffix(&id_a, 5)]), true);
    assert_eq!(
        watch.attached(),
        format!(
            "[murmur] watching {id_a} — Ctrl-C ends the watch, not the capsule; use `mur stop` to end the capsule"
        )
    );
    watch.printed("I am alpha.");
    // Without an argument: @1, the newest.
    let mut newest = Watch::start_with(home.cmd(&["watch"]), true);
    assert!(
        newest
            .attached()
            .starts_with(&format!("[murmur] watching {id_b} "))
    );
    newest.printed("I am beta.");

    home.mur(&["stop", &id_a]).assert_ok();
    let watched = watch.finish(WAIT);
    assert!(!watched.stdout.contains("I am beta."), "{}", watched.stdout);
    home.mur(&["stop", &id_b]).assert_ok();
    newest.finish(WAIT);
    alpha.wait(WAIT).assert_ok();
    beta.wait(WAIT).assert_ok();

    home.mur(&["watch", "ffffff"])
        .assert_error("error[E-RUN-022]: no running session matches ffffff");
}

// ---------------------------------------------------------------------------------
// `mur run --system-prompt`.

fn prompt_capsule(name: &str, mock: &MockModel) -> Capsule {
    prompt_capsule_with(name, mock, "system_prompt: You are terse.")
}

/// An OpenAI capsule on `mock` whose prompt is `prompt` (an `inference` key).
fn prompt_capsule_with(name: &str, mock: &MockModel, prompt: &str) -> Capsule {
    let origin = mock.origin();
    let manifest = format!(
        "name: {name}\nversion: \"0.1.0\"\ncapabilities:\n  network:\n    allow:\n      - {origin}\ninference:\n  driver: openai\n  endpoint: {origin}/v1\n  model: test-model\n  api_key: none-needed\n  stream: false\n  {prompt}\nlifecycle:\n  task_acceptance: none\n"
    );
    Capsule::new(name, &manifest, "")
}

fn done(text: &str) -> Reply {
    Reply::json(200, openai::completion(Some(text), &[], "stop", (3, 2)))
}

/// The system message the model was sent.
fn system_sent(mock: &MockModel) -> String {
    let body = mock.request(0).json();
    let first = &body["messages"][0];
    assert_eq!(first["role"], "system", "{body}");
    first["content"].as_str().unwrap().to_string()
}

#[test]
fn system_prompt_replaces_the_manifests_and_the_trace_says_cli() {
    let mock = MockModel::with(vec![done("Aye.")]);
    let capsule = prompt_capsule("prompt-cli", &mock);
    let run = capsule.run(&["--task", "hi", "--system-prompt", "  Talk like a pirate.\n"]);
    run.assert_ok();
    let system = system_sent(&mock);
    assert!(system.ends_with("\n\nTalk like a pirate."), "{system}");
    assert!(!system.contains("You are terse."), "{system}");
    let start = &run.session().events("session_start")[0];
    assert_eq!(start["system_prompt_source"], "cli");
    let sha = Sha256::digest(b"Talk like a pirate.");
    let hex: String = sha.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(start["system_prompt_sha256"], json!(hex));

    // Without the flag: the manifest's.
    let mock = MockModel::with(vec![done("Fine.")]);
    let capsule = prompt_capsule("prompt-manifest", &mock);
    let run = capsule.run(&["--task", "hi"]);
    run.assert_ok();
    assert!(system_sent(&mock).ends_with("\n\nYou are terse."));
    assert_eq!(
        run.session().events("session_start")[0]["system_prompt_source"],
        "manifest"
    );
}

#[test]
fn an_empty_system_prompt_clears_the_manifests() {
    let mock = MockModel::with(vec![done("Hello.")]);
    let capsule = prompt_capsule("prompt-empty", &mock);
    let run = capsule.run(&["--task", "hi", "--system-prompt", "  "]);
    run.assert_ok();
    let system = system_sent(&mock);
    assert!(system.starts_with("[Capsule]"), "{system}");
    assert!(!system.contains("You are terse."), "{system}");
    let start = &run.session().events("session_start")[0];
    assert_eq!(start["system_prompt_source"], "cli");
    assert_eq!(start["system_prompt_sha256"], Value::Null);
}

/// `kill -SIG pid...`.
fn kill(signal: &str, pids: &[u32]) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .args(pids.iter().map(u32::to_string))
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn the_entry_goes_on_a_failed_session_and_on_the_first_and_second_signal() {
    let home = Home::new("ends");
    // A failed task: the run exits 1 (E-RUN-040) after a second's nap.
    let nap = "turns:\n  - tool_calls: [{name: bash, input: {command: \"sleep 1\"}}]\n  - tool_calls: [{name: bash, input: {command: \"true\"}}]\n";
    let failing = Capsule::new(
        "ends-fail",
        "name: failing\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\n  max_turns: 1\ncapabilities:\n  shell:\n    allow: [bash]\nlifecycle:\n  task_acceptance: none\n",
        nap,
    );
    let running = failing.spawn_env(&["--task", "nap"], &home.env());
    let id = session_of(&running);
    // Written right after the launch line, out of its path.
    eventually(Duration::from_secs(5), "listed while it runs", || {
        home.entry(&id).exists()
    });
    let run = running.wait(WAIT);
    assert_eq!(run.status, 1, "{}", run.stderr);
    assert!(run.stderr.contains("error[E-RUN-040]"), "{}", run.stderr);
    assert!(
        !home.entry(&id).exists(),
        "a failed session's entry is left"
    );

    // The first SIGTERM: a clean teardown, exit 0.
    let capsule = Capsule::new("ends-signal", &manifest("signalled"), "");
    let first = home.serve(&capsule, &[]);
    let id = session_of(&first);
    kill("TERM", &[pid_of(&first)]);
    let run = first.wait(WAIT);
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert!(
        !home.entry(&id).exists(),
        "the first signal's entry is left"
    );

    // A second signal right behind the first: exit 143 at once, the entry still removed.
    // Both are made pending while the process is stopped, so the second is there the
    // moment the first is handled, however fast the teardown would be.
    let second = home.serve(&capsule, &[]);
    let id = session_of(&second);
    let pid = pid_of(&second);
    kill("STOP", &[pid]);
    kill("TERM", &[pid]);
    kill("INT", &[pid]);
    kill("CONT", &[pid]);
    let run = second.wait(WAIT);
    assert_eq!(run.status, 143, "{}", run.stderr);
    assert!(
        run.stderr.contains("[murmur] exiting without tearing down"),
        "{}",
        run.stderr
    );
    assert!(
        !home.entry(&id).exists(),
        "the second signal's entry is left"
    );
}

#[test]
fn system_prompt_wins_over_a_prompt_file_that_is_not_there() {
    let mock = MockModel::with(vec![done("Ok.")]);
    let capsule = prompt_capsule_with("prompt-file", &mock, "system_prompt_file: missing.md");
    // Without the flag the missing file stops the launch.
    capsule
        .run(&["--task", "hi"])
        .assert_error("error[E-RUN-009]: ");
    assert_eq!(mock.requests().len(), 0);
    let run = capsule.run(&["--task", "hi", "--system-prompt", "Be kind."]);
    run.assert_ok();
    assert!(system_sent(&mock).ends_with("\n\nBe kind."));
    assert_eq!(
        run.session().events("session_start")[0]["system_prompt_source"],
        "cli"
    );
}

/// A capsule `mur serve` hosts lives in the server's process: it is not listed, and the
/// server's admin API is where it is found.
#[test]
fn capsules_mur_serve_hosts_are_not_listed() {
    let home = Home::new("serve");
    let served = crate::common::served::Served::start_with("reg-serve", &[], &home.env());
    let hosted = served.create_scripted("hosted", &answer("Hosted."));
    let session = served.session_id(&hosted.id);
    assert!(session.starts_with("ses_"), "{session}");
    let ps = home.mur(&["ps"]);
    ps.assert_ok();
    assert_eq!(
        ps.stdout,
        "no running capsules (mur run lists each session it runs here)\n"
    );
    home.mur(&["stop", &session])
        .assert_error("error[E-RUN-022]: no running session matches");
}
