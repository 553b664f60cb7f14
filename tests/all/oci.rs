//! Components by name and version through a real OCI registry (Debian's
//! `docker-registry` on 127.0.0.1): push, pull, `mur ls`, `mur install` and its
//! `murmur.lock`, runs by name with and without the lock, a loop moved forward and
//! back, and every refusal a user can meet: a lock the registry no longer matches, a
//! tampered blob, a registry that wants credentials, a file that is not a component.

use crate::common::registry::Registry;
use crate::common::*;

const SCRIPT: &str = "turns:\n  - text: \"one turn, no tools\"\n";

fn wasm(name: &str) -> std::path::PathBuf {
    guest(name)
}

/// A capsule that names its tool and its loop by name and version only.
fn by_name(registry: &Registry, name: &str, loop_version: &str) -> Capsule {
    let manifest = format!(
        "name: by-name\nversion: \"0.1.0\"\nregistry: {}/team\nartifacts:\n  - name: wordcount\n    version: \"1.0.0\"\n  - name: recorder\n    version: \"1.0.0\"\n    runtime: hook\n    binding: on-session-end\n  - name: my-loop\n    version: \"{loop_version}\"\n    runtime: loop\n  - name: scripted\n    version: \"1.0.0\"\n    runtime: driver\n    gateway:\n      endpoint: http://127.0.0.1:9\n      keyless: true\ninference:\n  driver:\n    artifact: scripted\n    config: {{turns: [{{text: \"one turn, no tools\"}}]}}\n  model: m\nlifecycle:\n  task_acceptance: none\n",
        registry.host
    );
    Capsule::new(name, &manifest, SCRIPT)
}

fn push_all(registry: &Registry) {
    registry.push(&wasm(MUR_TOOL_WORDCOUNT), "team/wordcount:1.0.0");
    registry.push(&wasm(MUR_HOOK_RECORDER), "team/recorder:1.0.0");
    registry.push(&wasm(MUR_LOOP_ONESHOT), "team/my-loop:1.0.0");
    registry.push(&wasm(MUR_SESSION_LOOP), "team/my-loop:2.0.0");
    registry.push(&wasm(MUR_DRIVER_SCRIPTED), "team/scripted:1.0.0");
}

fn run_in(registry: &Registry, capsule: &Capsule) -> Run {
    finish(
        registry
            .mur()
            .args(["run", "--json", "--port", "0", "--manifest"])
            .arg(capsule.manifest())
            .args(["--task", "hi"]),
    )
}

fn install(registry: &Registry, capsule: &Capsule) -> Run {
    finish(
        registry
            .mur()
            .args(["install", "--manifest"])
            .arg(capsule.manifest()),
    )
}

/// `session_start.components`, as `label -> sha256`.
fn components(run: &Run) -> Vec<(String, String)> {
    let start = &run.session().events("session_start")[0];
    start["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["component"].as_str().unwrap().to_string(),
                c["sha256"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn sha256_of(path: &std::path::Path) -> String {
    use sha2::Digest;
    let bytes = std::fs::read(path).unwrap();
    sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn a_tool_a_driver_a_hook_and_a_loop_run_by_name_and_the_loop_moves_forward_and_back() {
    let Some(registry) = Registry::start("reg-by-name", false) else {
        return;
    };
    push_all(&registry);
    let capsule = by_name(&registry, "reg-by-name-capsule", "1.0.0");
    let installed = install(&registry, &capsule);
    assert_eq!(installed.status, 0, "{}", installed.stderr);
    let lock = std::fs::read_to_string(capsule.dir.join("murmur.lock")).unwrap();
    let loop_sha = sha256_of(&wasm(MUR_LOOP_ONESHOT));
    assert!(lock.contains("lock_version: 3\n"), "{lock}");
    assert!(
        lock.contains(&format!(
            "  - name: \"my-loop\"\n    resolved_version: \"1.0.0\"\n    sha256:\n      any: {loop_sha}\n    origin: operator\n    registry: \"{}/team\"\n",
            registry.host
        )),
        "{lock}"
    );
    assert!(
        installed
            .stdout
            .contains("tool artifact 'wordcount': compiled in"),
        "{}",
        installed.stdout
    );

    // With the lock: the locked digests, and nothing said about resolving.
    let run = run_in(&registry, &capsule);
    run.assert_ok();
    assert!(!run.stderr.contains("resolved "), "{}", run.stderr);
    assert_eq!(
        run.session().read("out/result.txt"),
        "[oneshot] one turn, no tools"
    );
    let ran = components(&run);
    assert!(
        ran.contains(&("session loop artifact 'my-loop'".into(), loop_sha.clone())),
        "{ran:?}"
    );
    assert!(
        ran.contains(&(
            "tool artifact 'wordcount'".into(),
            sha256_of(&wasm(MUR_TOOL_WORDCOUNT))
        )),
        "{ran:?}"
    );
    assert!(
        ran.contains(&(
            "hook artifact 'recorder'".into(),
            sha256_of(&wasm(MUR_HOOK_RECORDER))
        )),
        "{ran:?}"
    );
    assert!(
        ran.contains(&(
            "driver artifact 'scripted'".into(),
            sha256_of(&wasm(MUR_DRIVER_SCRIPTED))
        )),
        "{ran:?}"
    );

    // Forward: version 2.0.0 is not in the lock, so it is resolved and said.
    let forward = by_name(&registry, "reg-by-name-forward", "2.0.0");
    std::fs::copy(
        capsule.dir.join("murmur.lock"),
        forward.dir.join("murmur.lock"),
    )
    .unwrap();
    let run = run_in(&registry, &forward);
    run.assert_ok();
    let v2 = sha256_of(&wasm(MUR_SESSION_LOOP));
    assert!(
        run.stderr.contains(&format!(
            "resolved my-loop 2.0.0 = {}/team/my-loop:2.0.0@sha256:{v2}",
            registry.host
        )),
        "{}",
        run.stderr
    );
    assert_eq!(run.session().read("out/result.txt"), "one turn, no tools");
    assert!(components(&run).contains(&("session loop artifact 'my-loop'".into(), v2)));

    // And back: 1.0.0 again, from the lock.
    let back = run_in(&registry, &capsule);
    back.assert_ok();
    assert_eq!(
        back.session().read("out/result.txt"),
        "[oneshot] one turn, no tools"
    );
}

#[test]
fn a_locked_capsule_runs_with_the_registry_stopped() {
    let Some(mut registry) = Registry::start("reg-offline", false) else {
        return;
    };
    push_all(&registry);
    let capsule = by_name(&registry, "reg-offline-capsule", "1.0.0");
    assert_eq!(install(&registry, &capsule).status, 0);
    registry.stop();
    let run = run_in(&registry, &capsule);
    run.assert_ok();
    assert_eq!(
        run.session().read("out/result.txt"),
        "[oneshot] one turn, no tools"
    );
    // Without the lock the registry is needed, and its absence is said plainly.
    std::fs::remove_file(capsule.dir.join("murmur.lock")).unwrap();
    let run = run_in(&registry, &capsule);
    assert_eq!(run.status, 1);
    assert!(
        run.stderr.starts_with(&format!(
            "error[E-REG-002]: the registry {} could not be reached: the connection was refused\n",
            registry.host
        )),
        "{}",
        run.stderr
    );
}

#[test]
fn a_lock_the_registry_no_longer_matches_is_refused_naming_both_digests() {
    let Some(registry) = Registry::start("reg-mismatch", false) else {
        return;
    };
    push_all(&registry);
    let capsule = by_name(&registry, "reg-mismatch-capsule", "1.0.0");
    assert_eq!(install(&registry, &capsule).status, 0);
    // The tool's version is pushed again with other content, and the cache is gone.
    registry.push(&wasm(MUR_TOOL_PROBE), "team/wordcount:1.0.0");
    registry.clear_cache();
    let run = run_in(&registry, &capsule);
    assert_eq!(run.status, 1, "{}", run.stderr);
    let want = format!(
        "error[E-REG-006]: artifact 'wordcount' 1.0.0: murmur.lock pins sha256:{}, but {}/team/wordcount:1.0.0 is now sha256:{}\n  hint: the registry's version changed since the lock was written; if the new one is wanted, delete its entry from murmur.lock and run `mur install`\n",
        sha256_of(&wasm(MUR_TOOL_WORDCOUNT)),
        registry.host,
        sha256_of(&wasm(MUR_TOOL_PROBE)),
    );
    assert_eq!(run.stderr, want);
    // `mur install` refuses the same way and leaves the lock as it was.
    let before = std::fs::read_to_string(capsule.dir.join("murmur.lock")).unwrap();
    let again = install(&registry, &capsule);
    assert_eq!((again.status, again.stderr.as_str()), (1, want.as_str()));
    assert_eq!(
        std::fs::read_to_string(capsule.dir.join("murmur.lock")).unwrap(),
        before
    );
}

#[test]
fn a_cached_component_changed_behind_murs_back_is_refused_naming_both_digests() {
    let Some(registry) = Registry::start("reg-cache-tamper", false) else {
        return;
    };
    push_all(&registry);
    let capsule = by_name(&registry, "reg-cache-tamper-capsule", "1.0.0");
    assert_eq!(install(&registry, &capsule).status, 0);
    let want = sha256_of(&wasm(MUR_TOOL_WORDCOUNT));
    let kept = registry.dir.join(format!("cache/blobs/sha256/{want}.wasm"));
    std::fs::copy(wasm(MUR_TOOL_PROBE), &kept).unwrap();
    let run = run_in(&registry, &capsule);
    assert_eq!(run.status, 1);
    assert_eq!(
        run.stderr,
        format!(
            "error[E-REG-006]: artifact 'wordcount' 1.0.0: the lock pins sha256:{want}, but the cached copy is sha256:{}\n  hint: the cache was changed behind mur's back; remove {} and run `mur install` again\n",
            sha256_of(&wasm(MUR_TOOL_PROBE)),
            kept.display()
        )
    );
}

#[test]
fn a_blob_tampered_with_in_the_registry_is_refused_and_not_kept() {
    let Some(registry) = Registry::start("reg-tamper", false) else {
        return;
    };
    registry.push(&wasm(MUR_TOOL_WORDCOUNT), "team/wordcount:1.0.0");
    let digest = format!("sha256:{}", sha256_of(&wasm(MUR_TOOL_WORDCOUNT)));
    let blob = registry.blob_file(&digest);
    let mut bytes = std::fs::read(&blob).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&blob, &bytes).unwrap();
    let run = registry.run(&["pull", &format!("{}/team/wordcount:1.0.0", registry.host)]);
    assert_eq!(run.status, 1, "{}", run.stdout);
    assert!(
        run.stderr.starts_with(&format!(
            "error[E-REG-006]: {}/team/wordcount:1.0.0 does not match its digest: the registry named {digest}, the bytes that came are sha256:",
            registry.host
        )),
        "{}",
        run.stderr
    );
    let kept = registry.dir.join("cache/blobs/sha256");
    assert_eq!(
        std::fs::read_dir(kept).unwrap().count(),
        0,
        "nothing was kept"
    );
}

#[test]
fn pull_keeps_a_component_by_digest_and_ls_lists_versions_newest_first() {
    let Some(registry) = Registry::start("reg-pull", false) else {
        return;
    };
    for version in ["1.9.0", "1.10.0", "0.2.0"] {
        registry.push(
            &wasm(MUR_TOOL_WORDCOUNT),
            &format!("team/wordcount:{version}"),
        );
    }
    let reference = format!("{}/team/wordcount:1.10.0", registry.host);
    let digest = sha256_of(&wasm(MUR_TOOL_WORDCOUNT));
    let run = registry.run(&["pull", &reference]);
    run.assert_ok();
    let kept = registry
        .dir
        .join(format!("cache/blobs/sha256/{digest}.wasm"));
    assert!(
        run.stdout
            .starts_with(&format!("pulled {reference}: sha256:{digest} (")),
        "{}",
        run.stdout
    );
    assert_eq!(sha256_of(&kept), digest);
    let again = registry.run(&["pull", &reference]);
    assert!(
        again.stdout.starts_with("already in the cache "),
        "{}",
        again.stdout
    );
    let ls = registry.run(&["ls", &format!("{}/team/wordcount", registry.host)]);
    ls.assert_ok();
    assert_eq!(ls.stdout, "1.10.0\n1.9.0\n0.2.0\n");
}

#[test]
fn what_is_not_a_component_and_what_is_not_there_are_refused_clearly() {
    let Some(registry) = Registry::start("reg-refusals", false) else {
        return;
    };
    let dir = scratch("reg-refusals-files");
    std::fs::write(dir.join("notes.wasm"), "hello").unwrap();
    std::fs::write(dir.join("core.wasm"), b"\0asm\x01\0\0\0").unwrap();
    let target = format!("{}/team/x:1.0.0", registry.host);
    let run = registry.run(&["push", dir.join("notes.wasm").to_str().unwrap(), &target]);
    assert_eq!(run.status, 1);
    assert_eq!(
        run.stderr,
        format!(
            "error[E-REG-008]: {} is not WebAssembly at all\n  hint: build it for wasm32-wasip2 (cargo build --target wasm32-wasip2), which makes a component\n",
            dir.join("notes.wasm").display()
        )
    );
    let run = registry.run(&["push", dir.join("core.wasm").to_str().unwrap(), &target]);
    assert!(
        run.stderr.starts_with(&format!(
            "error[E-REG-008]: {} is a core WebAssembly module, not a component\n",
            dir.join("core.wasm").display()
        )),
        "{}",
        run.stderr
    );
    let missing = format!("{}/team/nothing:9.9.9", registry.host);
    let run = registry.run(&["pull", &missing]);
    assert_eq!(run.status, 1);
    assert_eq!(
        run.stderr,
        format!(
            "error[E-REG-005]: {missing} is not in the registry (MANIFEST_UNKNOWN: manifest unknown)\n  hint: check the name and version; `mur ls {}/team/nothing` lists the versions there are\n",
            registry.host
        )
    );
    let run = registry.run(&["pull", "no-host:1"]);
    assert!(
        run.stderr.starts_with(
            "error[E-REG-001]: 'no-host:1' is not a registry reference: it names no registry host\n"
        ),
        "{}",
        run.stderr
    );
    // A manifest without source and without any registry says what to add.
    let capsule = Capsule::new(
        "reg-no-registry",
        "name: nr\nversion: \"0.1.0\"\nartifacts:\n  - name: wordcount\n    version: \"1.0.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n",
        SCRIPT,
    );
    let run = finish(
        registry
            .mur()
            .args(["run", "--manifest"])
            .arg(capsule.manifest())
            .args(["--task", "hi"]),
    );
    assert_eq!(run.status, 1);
    assert!(run.stderr.starts_with("error[E-REG-009]: artifact 'wordcount' has no 'source' and cannot be found by name: no registry is named\n"), "{}", run.stderr);
}

#[test]
fn a_registry_that_wants_credentials_gets_them_from_the_environment_or_docker_config() {
    let Some(registry) = Registry::start("reg-auth", true) else {
        return;
    };
    let reference = format!("{}/team/wordcount:1.0.0", registry.host);
    let file = wasm(MUR_TOOL_WORDCOUNT);
    let push = |env: &[(&str, &str)]| {
        finish(
            registry
                .mur()
                .arg("push")
                .arg(&file)
                .arg(&reference)
                .envs(env.iter().copied()),
        )
    };
    let none = push(&[]);
    assert_eq!(none.status, 1);
    assert_eq!(
        none.stderr.lines().skip(1).collect::<Vec<_>>().join("\n"),
        format!(
            "error[E-REG-003]: the registry {} asks for credentials and mur has none for it\n  hint: run `docker login {}`, or set MUR_REGISTRY_USERNAME and MUR_REGISTRY_PASSWORD",
            registry.host, registry.host
        )
    );
    let wrong = push(&[
        ("MUR_REGISTRY_USERNAME", "alice"),
        ("MUR_REGISTRY_PASSWORD", "guess"),
    ]);
    assert_eq!(wrong.status, 1);
    assert!(
        wrong.stderr.contains(&format!(
            "error[E-REG-004]: the registry {} refused the credentials from MUR_REGISTRY_USERNAME and MUR_REGISTRY_PASSWORD\n",
            registry.host
        )),
        "{}",
        wrong.stderr
    );
    let right = push(&[
        ("MUR_REGISTRY_USERNAME", "alice"),
        ("MUR_REGISTRY_PASSWORD", "s3cret"),
    ]);
    assert_eq!(right.status, 0, "{}", right.stderr);
    // `docker login`'s config.json serves as well.
    let docker = registry.dir.join("docker");
    std::fs::create_dir_all(&docker).unwrap();
    std::fs::write(
        docker.join("config.json"),
        format!(
            "{{\"auths\":{{\"{}\":{{\"auth\":\"YWxpY2U6czNjcmV0\"}}}}}}",
            registry.host
        ),
    )
    .unwrap();
    let pulled = registry.run(&["pull", &reference]);
    assert_eq!(pulled.status, 0, "{}", pulled.stderr);
}
