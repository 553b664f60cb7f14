//! The session loop as a named, versioned artifact: `runtime: loop` entries in
//! `artifacts[]`, the top-level `loop: NAME` that picks one, `--loop PATH.wasm` over
//! both, and the loop's name and version where a user sees them (the launch line,
//! `session_start`, MURMUR.md). Real components: `loop-oneshot` answers `[oneshot] …`,
//! the default loop answers with the model's text as it is.

use crate::common::*;
use serde_json::{Value, json};

const MUR_VERSION: &str = env!("CARGO_PKG_VERSION");

const SCRIPT: &str = "turns:\n  - text: \"one turn, no tools\"\n";

/// A capsule with `loop` (when given) on line 3 and `artifacts` after it; each artifact
/// is `(name, version, guest)`, its component copied to `loops/<name>.wasm`.
fn capsule(name: &str, choice: Option<&str>, loops: &[(&str, Option<&str>, &str)]) -> Capsule {
    let mut yaml = String::from("name: e2e\nversion: \"0.1.0\"\n");
    if let Some(choice) = choice {
        yaml.push_str(&format!("loop: {choice}\n"));
    }
    if !loops.is_empty() {
        yaml.push_str("artifacts:\n");
    }
    for (loop_name, version, _) in loops {
        yaml.push_str(&format!("  - name: {loop_name}\n"));
        if let Some(version) = version {
            yaml.push_str(&format!("    version: \"{version}\"\n"));
        }
        yaml.push_str(&format!(
            "    runtime: loop\n    source: loops/{loop_name}.wasm\n"
        ));
    }
    yaml.push_str(
        "inference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\n\
         lifecycle:\n  task_acceptance: none\n",
    );
    let capsule = Capsule::new(name, &yaml, SCRIPT);
    std::fs::create_dir_all(capsule.dir.join("loops")).unwrap();
    for (loop_name, _, guest_name) in loops {
        let to = capsule.dir.join(format!("loops/{loop_name}.wasm"));
        std::fs::copy(guest(guest_name), to).unwrap();
    }
    capsule
}

/// `session_start`'s `loop`, `loop_version` and `session_loop`.
fn start_loop(run: &Run) -> Value {
    let start = &run.session().events("session_start")[0];
    json!([start["loop"], start["loop_version"], start["session_loop"]])
}

fn launch_loop(run: &Run) -> Value {
    let launch = run.launch();
    json!([launch["loop"], launch["loop_version"]])
}

fn murmur_md_loop(run: &Run) -> String {
    let md = run.session().read("MURMUR.md");
    let line = md.lines().find(|l| l.starts_with("- Session loop: "));
    line.unwrap_or_else(|| panic!("no Session loop line in:\n{md}"))
        .to_string()
}

/// A launch that fails before the workdir exists: exit 1, nothing on stdout, `stderr`
/// exactly.
fn assert_refused(capsule: &Capsule, run: &Run, stderr: &str) {
    assert_eq!(run.status, 1, "{}", run.stderr);
    assert_eq!(run.stdout, "", "nothing on stdout when launch fails");
    assert_eq!(run.stderr, stderr);
    assert!(!capsule.dir.join("workdir").exists(), "no workdir was made");
}

#[test]
fn the_loop_named_in_the_manifest_runs_and_is_shown_with_its_version() {
    let capsule = capsule(
        "named-loop",
        Some("oneshot"),
        &[
            ("classic", Some("0.9.0"), MUR_SESSION_LOOP),
            ("oneshot", Some("1.2.0"), MUR_LOOP_ONESHOT),
        ],
    );
    let run = capsule.run(&["--task", "hi"]);
    run.assert_ok();
    let s = run.session();
    assert_eq!(s.read("out/result.txt"), "[oneshot] one turn, no tools");
    assert_eq!(
        start_loop(&run),
        json!(["oneshot", "1.2.0", "session loop artifact 'oneshot'"])
    );
    assert_eq!(launch_loop(&run), json!(["oneshot", "1.2.0"]));
    assert_eq!(murmur_md_loop(&run), "- Session loop: oneshot v1.2.0");
    // A loop artifact is not a tool the model may call.
    let declared = &s.events("session_start")[0]["tools_declared"];
    assert_eq!(declared, &json!([]));
}

#[test]
fn the_human_launch_line_names_the_loop() {
    let capsule = capsule(
        "human-launch",
        None,
        &[("oneshot", Some("1.2.0"), MUR_LOOP_ONESHOT)],
    );
    let run = finish(
        mur()
            .args(["run", "-v", "--port", "0", "--manifest"])
            .arg(capsule.manifest())
            .args(["--task", "hi"]),
    );
    run.assert_ok();
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(
        lines[0].starts_with("murmur: url localhost:"),
        "{}",
        run.stdout
    );
    assert!(lines[1].starts_with("session: ses_"), "{}", run.stdout);
    assert!(lines[2].starts_with("workdir: "), "{}", run.stdout);
    assert!(lines[3].starts_with("manifest: "), "{}", run.stdout);
    assert!(lines[4].starts_with("driver: "), "{}", run.stdout);
    assert_eq!(lines[5], "loop:    oneshot v1.2.0");
    assert_eq!(lines[6..], ["[oneshot] one turn, no tools", "status:  ok"]);
}

#[test]
fn the_only_loop_artifact_runs_without_a_loop_key() {
    let capsule = capsule("single-loop", None, &[("oneshot", None, MUR_LOOP_ONESHOT)]);
    let run = capsule.run(&["--task", "hi"]);
    run.assert_ok();
    assert_eq!(
        run.session().read("out/result.txt"),
        "[oneshot] one turn, no tools"
    );
    // No version declared: none is made up.
    assert_eq!(
        start_loop(&run),
        json!(["oneshot", null, "session loop artifact 'oneshot'"])
    );
    assert_eq!(launch_loop(&run), json!(["oneshot", null]));
    assert_eq!(murmur_md_loop(&run), "- Session loop: oneshot (no version)");
}

#[test]
fn the_builtin_loop_is_named_default_with_murs_version() {
    let capsule = capsule("builtin-loop", None, &[]);
    let run = capsule.run(&["--task", "hi"]);
    run.assert_ok();
    assert_eq!(run.session().read("out/result.txt"), "one turn, no tools");
    assert_eq!(
        start_loop(&run),
        json!(["default", MUR_VERSION, "built-in session loop"])
    );
    assert_eq!(launch_loop(&run), json!(["default", MUR_VERSION]));
    assert_eq!(
        murmur_md_loop(&run),
        format!("- Session loop: default (built-in, mur {MUR_VERSION})")
    );
}

#[test]
fn two_loops_without_a_loop_key_are_refused_naming_both() {
    let capsule = capsule(
        "two-loops",
        None,
        &[
            ("oneshot", Some("1.2.0"), MUR_LOOP_ONESHOT),
            ("classic", Some("0.9.0"), MUR_SESSION_LOOP),
        ],
    );
    let run = capsule.run(&["--task", "hi"]);
    assert_refused(
        &capsule,
        &run,
        "error[E-MAN-001]: murmur.yaml: missing required field 'loop': artifacts[] declares 2 \
         session loops, 'oneshot' (line 4) and 'classic' (line 8)\n  hint: choose the one to \
         run with a top-level key, e.g. 'loop: oneshot'\n",
    );
}

#[test]
fn a_loop_key_naming_no_loop_artifact_is_refused_with_its_line() {
    let capsule = capsule(
        "unknown-loop",
        Some("planner"),
        &[("oneshot", Some("1.2.0"), MUR_LOOP_ONESHOT)],
    );
    let run = capsule.run(&["--task", "hi"]);
    assert_refused(
        &capsule,
        &run,
        "error[E-MAN-003]: murmur.yaml:3: invalid manifest config for 'loop': 'planner' names \
         no artifacts[] entry with 'runtime: loop'\n  hint: the loop artifacts are 'oneshot' \
         (line 5)\n",
    );
}

#[test]
fn the_loop_flag_overrides_the_manifest() {
    let capsule = capsule(
        "flag-over-manifest",
        Some("oneshot"),
        &[("oneshot", Some("1.2.0"), MUR_LOOP_ONESHOT)],
    );
    let path = guest(MUR_SESSION_LOOP);
    let run = capsule.run(&["--task", "hi", "--loop", path.to_str().unwrap()]);
    run.assert_ok();
    // The default loop's answer: no `[oneshot] ` prefix.
    assert_eq!(run.session().read("out/result.txt"), "one turn, no tools");
    let file = format!("{MUR_SESSION_LOOP}.wasm");
    assert_eq!(
        start_loop(&run),
        json!([file, null, format!("session loop {}", path.display())])
    );
    assert_eq!(launch_loop(&run), json!([file, null]));
    assert_eq!(
        murmur_md_loop(&run),
        format!("- Session loop: {file} (--loop {})", path.display())
    );
}

#[test]
fn a_loop_artifact_built_against_another_version_is_refused() {
    let capsule = capsule(
        "future-loop",
        None,
        &[("future", Some("2.0.0"), MUR_LOOP_FUTURE)],
    );
    let run = capsule.run(&["--task", "hi"]);
    assert_refused(
        &capsule,
        &run,
        "error[E-RUN-030]: session loop artifact 'future' was built against \
         murmur:session/loop@0.9.0; this mur serves murmur:session/loop@0.2.0\n  hint: rebuild \
         the component against the session-loop world of murmur:*@0.2.0 (the wit/ folder of \
         this mur)\n",
    );
}
