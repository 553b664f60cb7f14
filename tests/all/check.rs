//! `mur component check`, end to end: the built-in and example components pass it;
//! the broken fixtures (`components/broken-tool`, `components/broken-loop`) fail it
//! on their scenario; `--json` and `--junit` say the same; a file that is not a
//! component, and a component of another world or version, get their errors; a
//! hostile component fails and the check still returns.

use crate::common::*;
use serde_json::Value;

/// `mur component check <args>` to its end (bounded by [`LIMIT`]).
fn check(args: &[&str]) -> Run {
    finish(mur().args(["component", "check"]).args(args))
}

fn path(name: &str) -> String {
    guest(name).display().to_string()
}

/// The totals line: the last line of the plain output.
fn totals(run: &Run) -> (u32, u32, u32) {
    let last = run.stdout.lines().last().unwrap_or_default();
    let n: Vec<u32> = last
        .split(", ")
        .map(|part| {
            part.split(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("not a totals line: {last:?}\n{}", run.stdout))
        })
        .collect();
    assert_eq!(
        last,
        format!("{} passed, {} failed, {} skipped", n[0], n[1], n[2])
    );
    (n[0], n[1], n[2])
}

/// The `FAIL` lines of a plain report.
fn failures(run: &Run) -> Vec<&str> {
    run.stdout
        .lines()
        .filter(|l| l.starts_with("FAIL "))
        .collect()
}

fn passes(name: &str, world: &str) {
    let run = check(&[&path(name)]);
    assert_eq!(
        (run.status, failures(&run)),
        (0, vec![]),
        "{name}:\n{}{}",
        run.stdout,
        run.stderr
    );
    assert!(
        run.stdout
            .starts_with(&format!("world: {world} (exports murmur:")),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains(&format!("\nPASS links against the {world} world (")),
        "{}",
        run.stdout
    );
    let (passed, _, _) = totals(&run);
    assert!(passed >= 5, "{name}: only {passed} passed:\n{}", run.stdout);
}

#[test]
fn the_builtin_session_loop_passes() {
    passes(MUR_SESSION_LOOP, "loop");
}

/// The planner and the critic are complete loops; `loop-oneshot` is not (one turn,
/// no tools, the seed left out on purpose), see below.
#[test]
fn the_example_loops_pass() {
    passes(MUR_LOOP_PLANNER, "loop");
    passes(MUR_LOOP_CRITIC, "loop");
}

/// The built-in process drivers: described, planning a first and a resumed run within
/// the host's rules, reading odd lines and classifying every exit.
#[test]
fn the_builtin_process_drivers_pass() {
    passes(MUR_DRIVER_CLAUDE_CODE, "process-driver");
    passes(MUR_DRIVER_CODEX, "process-driver");
}

#[test]
fn the_example_tool_passes() {
    passes(MUR_TOOL_WORDCOUNT, "tool");
}

#[test]
pub(crate) fn the_broken_tool_fails_on_its_trap() {
    let run = check(&[&path(MUR_BROKEN_TOOL)]);
    assert_eq!(run.status, 1, "{}{}", run.stdout, run.stderr);
    let failed = failures(&run);
    assert_eq!(failed.len(), 1, "{}", run.stdout);
    assert!(
        failed[0].starts_with(
            "FAIL tool: a schema-invalid input gets an error result, not a trap: \
             required 'text' of a wrong type ({\"text\":12345}): \
             tool 'mur-broken-tool' failed: wasm trap"
        ),
        "{}",
        failed[0]
    );
    assert_eq!(totals(&run), (4, 1, 0));
    // Its valid input names a file, and it answers it: a pass with nothing to add.
    assert!(
        run.stdout
            .contains("\nPASS tool: a schema-valid input answers within the deadline ("),
        "{}",
        run.stdout
    );
}

/// Upstream's `jsonl-line-count` requires no property, so the check calls it with `{}`,
/// which names no file: it answers with an error result saying so, which is right, and
/// the check passes, quoting what it said.
#[test]
fn an_upstream_tool_refusing_an_input_naming_nothing_passes() {
    let tool = repo().join("tests/fixtures/upstream/jsonl-line-count.wasm");
    let run = check(&[tool.to_str().unwrap()]);
    assert_eq!(
        (run.status, failures(&run)),
        (0, vec![]),
        "{}{}",
        run.stdout,
        run.stderr
    );
    let valid = "PASS tool: a schema-valid input answers within the deadline: input {} names \
                 nothing, and the tool answered with an error result: failed to read '{}': No \
                 such file or directory (os error 44) (";
    assert!(
        run.stdout.lines().any(|l| l.starts_with(valid)),
        "{}",
        run.stdout
    );
    assert_eq!(totals(&run), (4, 0, 1));
}

#[test]
pub(crate) fn the_broken_loop_fails_on_max_turns() {
    let run = check(&[&path(MUR_BROKEN_LOOP)]);
    assert_eq!(run.status, 1, "{}{}", run.stdout, run.stderr);
    let failed = failures(&run);
    assert_eq!(failed.len(), 1, "{}", run.stdout);
    assert!(
        failed[0].starts_with(
            "FAIL loop: max_turns ends the task: a task whose model never stops ended \"ok\" \
             after 3 turns, not max_turns_reached ("
        ),
        "{}",
        failed[0]
    );
}

/// `loop-oneshot` exists to show `--loop` swaps the loop: it answers in one turn and
/// leaves tools, the seed and history out, and the check says each.
#[test]
fn the_oneshot_loop_is_no_complete_loop() {
    let run = check(&[&path(MUR_LOOP_ONESHOT)]);
    assert_eq!(run.status, 1, "{}{}", run.stdout, run.stderr);
    let failed = failures(&run);
    for name in [
        "FAIL loop: runs the tool calls the model asks for",
        "FAIL loop: max_turns ends the task",
        "FAIL loop: a hook's seed is delivered",
        "FAIL loop: a threaded context's history is sent",
    ] {
        assert!(
            failed.iter().any(|l| l.starts_with(&format!("{name}: "))),
            "{name} missing:\n{}",
            run.stdout
        );
    }
}

#[test]
fn json_is_one_document_of_every_scenario() {
    let run = check(&["--json", &path(MUR_BROKEN_TOOL)]);
    assert_eq!(run.status, 1, "{}", run.stderr);
    let doc: Value = serde_json::from_str(&run.stdout).expect("stdout is one JSON document");
    assert_eq!(doc["world"], "tool");
    assert_eq!(
        doc["totals"],
        serde_json::json!({"passed": 4, "failed": 1, "skipped": 0})
    );
    let scenarios = doc["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), 5);
    assert_eq!(scenarios[0]["name"], "links against the tool world");
    assert_eq!(scenarios[0]["outcome"], "pass");
    assert_eq!(scenarios[0]["message"], Value::Null);
    let failed: Vec<&Value> = scenarios
        .iter()
        .filter(|s| s["outcome"] == "fail")
        .collect();
    assert_eq!(
        failed[0]["name"],
        "tool: a schema-invalid input gets an error result, not a trap"
    );
    assert!(
        failed[0]["message"].as_str().unwrap().contains("wasm trap"),
        "{}",
        failed[0]
    );
    assert!(scenarios.iter().all(|s| s["duration_ms"].is_u64()));
}

#[test]
fn junit_counts_and_escapes_the_failure() {
    let dir = scratch("check-junit");
    let file = dir.join("report.xml");
    let run = check(&["--junit", file.to_str().unwrap(), &path(MUR_BROKEN_TOOL)]);
    assert_eq!(run.status, 1, "{}", run.stderr);
    let xml = std::fs::read_to_string(&file).unwrap();
    assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites><testsuite "));
    assert!(
        xml.contains(" tests=\"5\" failures=\"1\" errors=\"0\" skipped=\"0\" "),
        "{xml}"
    );
    assert_eq!(xml.matches("<testcase ").count(), 5, "{xml}");
    assert_eq!(xml.matches("<failure message=\"").count(), 1, "{xml}");
    // The input's quotes, escaped in the attribute.
    assert!(
        xml.contains(
            "<failure message=\"required &apos;text&apos; of a wrong type ({&quot;text&quot;:12345}): tool &apos;mur-broken-tool&apos; failed: wasm trap"
        ),
        "{xml}"
    );
    // Nothing raw that would break a parser: every `<` opens a tag we wrote.
    for piece in xml.split('<').skip(1) {
        assert!(
            [
                "?xml",
                "testsuites",
                "/testsuites",
                "testsuite",
                "/testsuite",
                "testcase",
                "/testcase",
                "failure",
                "/failure",
                "skipped"
            ]
            .iter()
            .any(|tag| piece.starts_with(tag)),
            "stray '<': {piece:?}"
        );
    }
}

#[test]
fn a_file_that_is_not_a_component_is_refused() {
    let dir = scratch("check-not-a-component");
    let text = dir.join("notes.wasm");
    std::fs::write(&text, "not wasm").unwrap();
    check(&[text.to_str().unwrap()]).assert_error("error[E-CHK-002]: ");
    let core = dir.join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    let run = check(&[core.to_str().unwrap()]);
    run.assert_error("error[E-CHK-002]: ");
    assert!(
        run.stderr
            .contains("a core WebAssembly module, not a component"),
        "{}",
        run.stderr
    );
    check(&[dir.join("missing.wasm").to_str().unwrap()])
        .assert_error("error[E-CHK-001]: could not read ");
}

/// A loop checked as a tool fails the link with the capsule's own error, and the
/// scenarios are skipped; a loop of the released 0.1.0 gets the version error.
#[test]
fn a_component_of_another_world_or_version_fails_the_link() {
    let run = check(&["--world", "tool", &path(MUR_LOOP_ONESHOT)]);
    assert_eq!(run.status, 1, "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(
        lines[1].starts_with(
            "FAIL links against the tool world: error[E-RUN-031]: tool artifact 'mur-loop-oneshot' \
             does not target the tool world: it is a session-loop component"
        ),
        "{}",
        run.stdout
    );
    assert_eq!(
        lines[2],
        "SKIP behaviour: the component does not link, so no scenario can run it"
    );
    assert_eq!(totals(&run), (0, 1, 1));

    let run = check(&[&path(MUR_LOOP_LEGACY)]);
    assert_eq!(run.status, 1);
    assert!(
        run.stdout.contains(
            "FAIL links against the loop world: error[E-RUN-030]: session loop artifact \
             'mur-loop-legacy' was built against murmur:session/loop@0.1.0; this mur serves \
             murmur:session/loop@0.2.0"
        ),
        "{}",
        run.stdout
    );
}

/// The hostile tool plants links and reports every act `passed`, but answers an input
/// it does not know as an error: a schema-valid input fails, and the check returns.
#[test]
fn a_hostile_tool_fails_and_the_check_returns() {
    let started = std::time::Instant::now();
    let run = check(&[&path(MUR_TOOL_HOSTILE_FS)]);
    assert_eq!(run.status, 1, "{}{}", run.stdout, run.stderr);
    assert!(
        failures(&run)
            .iter()
            .any(|l| l.starts_with("FAIL tool: a schema-valid input answers within the deadline: ")),
        "{}",
        run.stdout
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(120));
}
