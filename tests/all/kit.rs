//! The component kit: `mur wit` serves exactly `wit/` (less `retired/`), and `mur new`
//! scaffolds crates that build outside the workspace, run in their sample capsule, and
//! pass `mur component check`.
//!
//! Each scaffold is built once per test run with plain `cargo build --release --target
//! wasm32-wasip2`, offline, with the workspace's Cargo.lock copied in (so the build
//! reuses the `wit-bindgen` already compiled) and one target dir shared by all of them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use crate::common::*;

// ---------------------------------------------------------------------------------
// `mur wit`.

/// Every file under `wit/` but `retired/`, as `(path under wit/, bytes)`, sorted.
fn served_tree() -> Vec<(String, Vec<u8>)> {
    let wit = repo().join("wit");
    let mut files = Vec::new();
    collect(&wit, &wit, &mut files);
    files.retain(|(rel, _)| !rel.starts_with("retired/"));
    files.sort();
    files
}

fn collect(base: &Path, dir: &Path, files: &mut Vec<(String, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(base, &path, files);
        } else {
            let rel = path.strip_prefix(base).unwrap().to_str().unwrap();
            files.push((rel.replace('\\', "/"), std::fs::read(&path).unwrap()));
        }
    }
}

#[test]
fn wit_out_writes_a_tree_identical_to_wit_without_retired() {
    let out = scratch("wit-out").join("wit");
    finish(mur().arg("wit").arg("--out").arg(&out)).assert_ok();
    let mut written = Vec::new();
    collect(&out, &out, &mut written);
    written.sort();
    let want = served_tree();
    let names = |files: &[(String, Vec<u8>)]| files.iter().map(|f| f.0.clone()).collect::<Vec<_>>();
    assert_eq!(names(&written), names(&want));
    assert!(names(&want).contains(&"driver/deps/http.wit".to_string()));
    assert!(names(&want).contains(&"versions.lock".to_string()));
    for ((rel, got), (_, expected)) in written.iter().zip(&want) {
        assert!(got == expected, "{rel} differs from wit/{rel}");
    }
    // Written again over itself: identical files are fine.
    finish(mur().arg("wit").arg("--out").arg(&out)).assert_ok();
}

#[test]
fn wit_out_refuses_to_overwrite_a_changed_file_unless_forced() {
    let out = scratch("wit-force").join("wit");
    finish(mur().arg("wit").arg("--out").arg(&out)).assert_ok();
    let tool = out.join("tool/tool.wit");
    std::fs::write(&tool, "package mine:tool;\n").unwrap();
    let refused = finish(mur().arg("wit").arg("--out").arg(&out));
    refused.assert_error(&format!(
        "error[E-KIT-002]: {} already exists and differs from what would be written (1 file(s) differ)\n  hint: pass --force",
        tool.display()
    ));
    assert_eq!(
        std::fs::read_to_string(&tool).unwrap(),
        "package mine:tool;\n"
    );
    finish(mur().arg("wit").arg("--out").arg(&out).arg("--force")).assert_ok();
    assert_eq!(
        std::fs::read(&tool).unwrap(),
        std::fs::read(repo().join("wit/tool/tool.wit")).unwrap()
    );
}

#[test]
fn wit_prints_every_file_after_a_header_naming_it() {
    let run = finish(mur().arg("wit"));
    run.assert_ok();
    let mut expected = String::new();
    for (rel, bytes) in served_tree() {
        expected.push_str(&format!("// wit/{rel}\n"));
        let text = String::from_utf8(bytes).unwrap();
        expected.push_str(&text);
        if !text.ends_with('\n') {
            expected.push('\n');
        }
    }
    assert!(
        run.stdout == expected,
        "mur wit's stdout is not wit/ in path order"
    );
    assert!(
        run.stdout
            .contains("// wit/session/session.wit\npackage murmur:session@0.2.0;")
    );
    assert!(!run.stdout.contains("// wit/retired/"));
}

// ---------------------------------------------------------------------------------
// `mur new`: errors.

fn new(args: &[&str], dir: &Path) -> Run {
    finish(mur().arg("new").arg("--dir").arg(dir).args(args))
}

#[test]
fn new_refuses_a_name_that_is_not_a_component_name() {
    let dir = scratch("new-bad-name").join("x");
    for bad in ["Shout", "9lives", "a_b", "-x", "x-"] {
        // After `--`, a name starting with '-' reaches mur rather than the option parser.
        new(&["--", "tool", bad], &dir).assert_error(&format!(
            "error[E-KIT-003]: '{bad}' is not a component name\n  hint: use lower-case letters, digits and '-'"
        ));
    }
    assert!(!dir.exists());
}

#[test]
fn new_refuses_a_folder_that_is_not_empty_and_changes_nothing() {
    let dir = scratch("new-occupied");
    std::fs::write(dir.join("notes.txt"), "mine").unwrap();
    new(&["tool", "shout"], &dir).assert_error(&format!(
        "error[E-KIT-004]: {} already exists and is not an empty folder\n  hint: ",
        dir.display()
    ));
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(left.len(), 1);
    // An empty folder is a fine place.
    let empty = scratch("new-empty");
    new(&["tool", "shout"], &empty).assert_ok();
    assert!(empty.join("src/lib.rs").is_file());
}

#[test]
fn new_refuses_a_binding_for_a_kind_that_takes_none_and_an_unknown_binding() {
    let dir = scratch("new-binding").join("x");
    for kind in ["tool", "driver", "loop"] {
        new(&[kind, "x", "--binding", "on-tool-call"], &dir).assert_error(&format!(
            "error[E-KIT-005]: --binding on-tool-call applies to hooks; a {kind} takes no binding\n  hint: "
        ));
    }
    new(&["hook", "x", "--binding", "on-teatime"], &dir).assert_error(
        "error[E-KIT-006]: 'on-teatime' is not a hook binding\n  hint: use one of on-stage, \
         on-session-start, on-task-start, on-inference, on-tool-call, on-shell, on-compaction, \
         on-task-end, on-session-end",
    );
    assert!(!dir.exists());
}

// ---------------------------------------------------------------------------------
// `mur new`: scaffolds that build and run.

/// A scaffold built once per test run: its folder and its component.
#[derive(Clone)]
struct Built {
    dir: PathBuf,
    wasm: PathBuf,
}

/// Shared by every scaffold's build, so `wit-bindgen` compiles once.
fn scaffold_target() -> PathBuf {
    repo().join("target").join("kit-scaffolds")
}

/// `mur new KIND NAME` (plus `extra`), once per run, and its release build.
fn built(kind: &str, name: &str, extra: &[&str]) -> Built {
    static BUILT: OnceLock<Mutex<HashMap<String, Built>>> = OnceLock::new();
    let key = format!("{kind} {name} {}", extra.join(" "));
    let mut cache = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(found) = cache.get(&key) {
        return found.clone();
    }
    let dir = scratch(&format!("scaffold-{name}")).join(name);
    let mut args = vec![kind, name];
    args.extend_from_slice(extra);
    let created = new(&args, &dir);
    created.assert_ok();
    assert!(
        created.stdout.contains(&format!(
            "  cargo build --release --target wasm32-wasip2\n  mur component check target/wasm32-wasip2/release/{}.wasm\n",
            name.replace('-', "_")
        )),
        "{}",
        created.stdout
    );
    cargo_in(&dir, &["build", "--release", "--target", "wasm32-wasip2"]);
    let wasm = scaffold_target()
        .join("wasm32-wasip2/release")
        .join(format!("{}.wasm", name.replace('-', "_")));
    assert!(wasm.is_file(), "{} was not built", wasm.display());
    // The sample manifest names the crate's own target dir; the build used the shared one.
    let local = dir.join("target/wasm32-wasip2/release");
    std::fs::create_dir_all(&local).unwrap();
    std::fs::copy(&wasm, local.join(wasm.file_name().unwrap())).unwrap();
    let found = Built { dir, wasm };
    cache.insert(key, found.clone());
    found
}

/// `cargo ARGS` in a scaffold, offline, with the workspace's lock and the shared target.
fn cargo_in(dir: &Path, args: &[&str]) {
    std::fs::copy(repo().join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(dir)
        .args(args)
        .arg("--offline")
        .env("CARGO_TARGET_DIR", scaffold_target());
    // The test run's flags (coverage, sanitizers) must not reach a wasm build.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
    ] {
        cmd.env_remove(var);
    }
    let run = finish_within(&mut cmd, std::time::Duration::from_secs(600));
    assert_eq!(
        run.status,
        0,
        "cargo {args:?} in {}:\n{}",
        dir.display(),
        run.stderr
    );
}

/// The scaffold's own sample capsule, run with a task; its stdout.
fn run_sample(built: &Built, task: &str) -> Run {
    let run = finish(
        mur()
            .current_dir(&built.dir)
            .args([
                "run",
                "-v",
                "--manifest",
                "murmur.yaml",
                "--port",
                "0",
                "--task",
                task,
            ])
            .arg("--workdir")
            .arg(scratch("scaffold-run")),
    );
    run.assert_ok();
    run
}

#[test]
fn a_tool_scaffold_builds_and_its_sample_capsule_calls_the_tool() {
    let tool = built("tool", "my-tool", &[]);
    // The scaffold's wit/ is what `mur wit --out` writes.
    let wit = tool.dir.join("wit");
    let mut copied = Vec::new();
    collect(&wit, &wit, &mut copied);
    copied.sort();
    assert!(
        copied == served_tree(),
        "the scaffold's wit/ is not wit/ less retired/"
    );
    let run = run_sample(&tool, "Turn a greeting to upper case.");
    assert!(run.stdout.contains("The tool answered:"), "{}", run.stdout);
    // Upper case only the tool makes: the script asked for "hello from my-tool".
    assert!(run.stdout.contains("HELLO FROM MY-TOOL"), "{}", run.stdout);
}

#[test]
fn a_driver_scaffold_builds_and_answers_as_the_capsules_model() {
    let driver = built("driver", "my-driver", &[]);
    let run = run_sample(&driver, "Say hello.");
    assert!(run.stdout.contains("echo: Say hello."), "{}", run.stdout);
}

#[test]
fn a_hook_scaffold_builds_and_refuses_the_sample_call_at_on_tool_call() {
    let hook = built("hook", "my-hook", &[]);
    let manifest = std::fs::read_to_string(hook.dir.join("murmur.yaml")).unwrap();
    assert!(manifest.contains("    binding: on-tool-call\n    # The verdict the host commits at this binding; `none` commits nothing.\n    commit_policy: deny\n"), "{manifest}");
    let run = run_sample(&hook, "May I clean the build folder?");
    assert!(
        run.stdout.contains("Refused by policy hook 'my-hook': my-hook refused the call of 'notes': its input contains \"rm -rf\""),
        "{}",
        run.stdout
    );
}

#[test]
fn a_loop_scaffold_builds_and_runs_its_sample_capsules_session() {
    let lp = built("loop", "my-loop", &[]);
    let run = run_sample(&lp, "Say hello.");
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(
        lines.get(5).copied(),
        Some("loop:    my-loop (no version)"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("The command printed:"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("hello from the my-loop loop"),
        "{}",
        run.stdout
    );
}

/// A hook scaffold builds for every other binding, its sample manifest binds it there
/// with the binding's commit policy, and the capsule runs through every point of the
/// session with it: the skill call it does not refuse reaches the model.
#[test]
fn a_hook_scaffold_builds_and_runs_for_every_binding() {
    for (binding, policy) in [
        ("on-stage", "write-manifests"),
        ("on-session-start", "none"),
        ("on-task-start", "seed-context"),
        ("on-inference", "none"),
        ("on-shell", "deny"),
        ("on-compaction", "replace-context"),
        ("on-task-end", "reopen-task"),
        ("on-session-end", "none"),
    ] {
        let hook = built("hook", &format!("hook-{binding}"), &["--binding", binding]);
        let manifest = std::fs::read_to_string(hook.dir.join("murmur.yaml")).unwrap();
        assert!(
            manifest.contains(&format!("    binding: {binding}\n"))
                && manifest.contains(&format!("    commit_policy: {policy}\n")),
            "{manifest}"
        );
        let run = run_sample(&hook, "May I clean the build folder?");
        assert!(
            run.stdout.contains("Clean builds with `cargo clean`"),
            "{binding}: {}",
            run.stdout
        );
    }
}

// ---------------------------------------------------------------------------------
// `mur component check` on the scaffolds: the one place it is asserted.

/// `mur component check WASM` exits 0 and ends with `N passed, 0 failed, …`.
fn assert_checks(wasm: &Path) {
    let run = finish(mur().args(["component", "check"]).arg(wasm));
    run.assert_ok();
    let total = run.stdout.lines().last().unwrap_or_default();
    let passed = total
        .split_once(" passed, 0 failed")
        .and_then(|(n, _)| n.parse::<u32>().ok());
    assert!(
        matches!(passed, Some(n) if n > 0),
        "{} does not pass:\n{}",
        wasm.display(),
        run.stdout
    );
}

#[test]
fn every_scaffold_passes_component_check_unchanged() {
    for (kind, name) in [
        ("tool", "my-tool"),
        ("driver", "my-driver"),
        ("hook", "my-hook"),
        ("loop", "my-loop"),
    ] {
        assert_checks(&built(kind, name, &[]).wasm);
    }
}
