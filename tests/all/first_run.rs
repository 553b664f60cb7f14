//! The first run on a machine: the built-in components come compiled inside `mur`, so
//! an empty component cache costs no compile; `mur warm` compiles a capsule's own
//! components into the cache ahead of its first run.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::common::*;

/// The compiled components in a cache dir (`MUR_CACHE_DIR/components`).
fn compiled_in(cache: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(cache.join("components")) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    files.sort();
    files
}

/// The hello capsule's answer, from its first line to the end of stdout.
fn answer(stdout: &str) -> &str {
    let start = stdout
        .find("My workdir holds")
        .unwrap_or_else(|| panic!("no answer in: {stdout}"));
    &stdout[start..]
}

fn hello(cache: Option<&Path>, name: &str) -> Run {
    let mut cmd = mur();
    if let Some(cache) = cache {
        cmd.env("MUR_CACHE_DIR", cache);
    }
    cmd.current_dir(repo())
        .args(["run", "--manifest", "examples/hello/murmur.yaml"])
        .arg("--workdir")
        .arg(scratch(name))
        .args(["--task", "What is in your workdir?"]);
    let run = finish(&mut cmd);
    run.assert_ok();
    run
}

#[test]
fn a_first_run_with_an_empty_cache_compiles_nothing_and_answers_the_same() {
    let cache = scratch("first-run-cache");
    let first = hello(Some(&cache), "first-run-empty");
    let warm = hello(None, "first-run-warm");
    assert_eq!(answer(&first.stdout), answer(&warm.stdout));
    assert!(
        answer(&first.stdout).ends_with("status:  ok\n"),
        "{}",
        first.stdout
    );
    // The loop and the scripted driver came out of the binary, copied into the cache
    // to be mapped from there by later runs: exactly those two, named by their digests,
    // each byte for byte a form the binary carries.
    let stored = compiled_in(&cache);
    let mut names: Vec<String> = stored.iter().map(|p| digest_named(p)).collect();
    names.sort();
    assert_eq!(names, built_ins(), "{stored:?}");
    let binary = std::fs::read(MUR).unwrap();
    for path in &stored {
        let compiled = std::fs::read(path).unwrap();
        assert!(
            carries(&binary, &compiled),
            "{} is not in mur",
            path.display()
        );
    }
}

/// The digests (their first 32 hex digits) that name the hello capsule's built-ins in
/// the cache, sorted.
fn built_ins() -> Vec<String> {
    let mut names: Vec<String> = [MUR_SESSION_LOOP, MUR_DRIVER_SCRIPTED]
        .iter()
        .map(|name| digest_prefix(&guest(name)))
        .collect();
    names.sort();
    names
}

/// The digest part of a cache file's name.
fn digest_named(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy()[..32].to_string()
}

/// The compiled components in a cache dir besides the built-ins copied there.
fn own_compiled_in(cache: &Path) -> Vec<PathBuf> {
    let built_ins = built_ins();
    compiled_in(cache)
        .into_iter()
        .filter(|p| !built_ins.contains(&digest_named(p)))
        .collect()
}

/// The first 32 hex digits of the sha-256 of the file at `path`.
fn digest_prefix(path: &Path) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(std::fs::read(path).unwrap());
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `whole` holds `part`, starting at one of its ELF headers (a compiled
/// component is an ELF image).
fn carries(whole: &[u8], part: &[u8]) -> bool {
    let magic = &part[..4];
    (0..whole.len().saturating_sub(part.len()))
        .filter(|&at| &whole[at..at + 4] == magic)
        .any(|at| &whole[at..at + part.len()] == part)
}

const WORDCOUNT_SCRIPT: &str = r#"turns:
  - tool_calls: [{id: c1, name: wordcount, input: {path: task.md}}]
  - text: "{{last_tool_result}}"
"#;

fn wordcount_capsule(name: &str, source: &Path) -> Capsule {
    let manifest = format!(
        "name: warm\nversion: \"0.1.0\"\nartifacts:\n  - name: wordcount\n    runtime: tool\n    source: {}\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\nlifecycle:\n  task_acceptance: none\n",
        source.display()
    );
    Capsule::new(name, &manifest, WORDCOUNT_SCRIPT)
}

fn warm(capsule: &Capsule, cache: &Path) -> Run {
    finish(
        mur()
            .env("MUR_CACHE_DIR", cache)
            .args(["warm", "--manifest"])
            .arg(capsule.manifest()),
    )
}

#[test]
fn mur_warm_compiles_a_capsules_own_components_once_and_its_run_uses_them() {
    let cache = scratch("warm-cache");
    let capsule = wordcount_capsule("warm", &guest(MUR_TOOL_WORDCOUNT));

    let first = warm(&capsule, &cache);
    first.assert_ok();
    let lines: Vec<&str> = first.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", first.stdout);
    assert_eq!(lines[0], "built-in session loop: compiled into mur itself");
    assert_eq!(
        lines[1],
        "built-in scripted driver: compiled into mur itself"
    );
    let components = cache.join("components");
    let (took, kept) = lines[2]
        .strip_prefix("tool artifact 'wordcount': compiled in ")
        .and_then(|rest| rest.split_once(" ms, cached in "))
        .unwrap_or_else(|| panic!("{}", first.stdout));
    assert!(took.parse::<u64>().is_ok(), "{took}");
    assert_eq!(kept, components.display().to_string());
    let stored = own_compiled_in(&cache);
    assert_eq!(stored.len(), 1, "{stored:?}");
    let written: SystemTime = std::fs::metadata(&stored[0]).unwrap().modified().unwrap();

    let again = warm(&capsule, &cache);
    again.assert_ok();
    assert!(
        again
            .stdout
            .lines()
            .nth(2)
            .is_some_and(|l| l.starts_with("tool artifact 'wordcount': already in the cache (")),
        "{}",
        again.stdout
    );

    let mut cmd = mur();
    cmd.env("MUR_CACHE_DIR", &cache)
        .args(["run", "--json", "--port", "0", "--manifest"])
        .arg(capsule.manifest())
        .args(["--task", "count"]);
    let run = finish(&mut cmd);
    run.assert_ok();
    let calls = run.session().events("tool_call");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["status"], "ok");
    // The run loaded what warm compiled: the one file is still the one warm wrote.
    assert_eq!(own_compiled_in(&cache), stored);
    let now: SystemTime = std::fs::metadata(&stored[0]).unwrap().modified().unwrap();
    assert_eq!(now, written);
}

#[test]
fn mur_warm_names_a_component_that_does_not_compile_and_fails() {
    let cache = scratch("warm-bad-cache");
    let dir = scratch("warm-bad-src");
    let bogus = dir.join("bogus.wasm");
    std::fs::write(&bogus, b"\0asm this is not a component").unwrap();
    let capsule = wordcount_capsule("warm-bad", &bogus);
    let run = warm(&capsule, &cache);
    assert_eq!(run.status, 1, "{}", run.stderr);
    assert!(
        run.stdout
            .contains("tool artifact 'wordcount': not compiled"),
        "{}",
        run.stdout
    );
    run.assert_error(
        "error[E-RUN-001]: tool artifact 'wordcount' is not a valid WebAssembly component",
    );
    assert_eq!(own_compiled_in(&cache), Vec::<PathBuf>::new());
}

#[test]
fn mur_warm_without_a_manifest_says_where_it_looked() {
    let dir = scratch("warm-none");
    let run = finish(
        mur()
            .args(["warm", "--manifest"])
            .arg(dir.join("murmur.yaml")),
    );
    assert_eq!(run.status, 1);
    run.assert_error("error[E-IO-001]: murmur.yaml not found at");
}

#[test]
fn a_workdir_that_holds_the_component_cache_is_refused_before_anything_runs() {
    let workdir = scratch("cache-inside-workdir");
    let cache = workdir.join(".cache");
    let run = finish(
        mur()
            .env("MUR_CACHE_DIR", &cache)
            .current_dir(repo())
            .args(["run", "--manifest", "examples/hello/murmur.yaml"])
            .arg("--workdir")
            .arg(&workdir)
            .args(["--task", "What is in your workdir?"]),
    );
    assert_eq!(run.status, 1, "{}", run.stderr);
    run.assert_error("error[E-RUN-025]: the component cache (");
    assert!(
        run.stderr
            .contains("hint: pass --workdir DIR outside the cache"),
        "{}",
        run.stderr
    );
    // Nothing ran: no task was written where the capsule would have worked.
    assert!(!workdir.join("task.md").exists());
}
