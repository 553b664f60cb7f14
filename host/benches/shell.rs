//! The confined shell's cost per command (`cargo bench --bench shell`): one session of
//! `CALLS` shell calls of `true`, run under `containment: advisory` (no sandbox) and
//! under `scoped` and `sealed`, alternating; the added cost of a class is the median
//! session's extra wall time divided by the number of calls. Everything else in the
//! session (the scripted driver, the trace, the turns) is the same in each, so the
//! difference is the sandbox's: the extra fork, the namespaces, Landlock and seccomp.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CALLS: usize = 200;
const RUNS: usize = 7;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A capsule allowed `true`, whose script calls it `CALLS` times, one call per turn.
fn capsule(class: &str) -> PathBuf {
    let dir = repo()
        .join("target")
        .join("bench")
        .join(format!("shell-{class}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = format!(
        "name: shell-bench\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  \
         script: ./script.yaml\n  model: bench\n  max_turns: {}\ncapabilities:\n  \
         containment: {class}\n  shell:\n    allow: [\"true\"]\n  limits:\n    \
         max_tool_calls_per_task: {}\nlifecycle:\n  task_acceptance: none\n",
        CALLS + 1,
        CALLS + 1
    );
    let mut script = String::from("turns:\n");
    for i in 0..CALLS {
        script.push_str(&format!(
            "  - tool_calls: [{{id: c{i}, name: \"true\", input: {{command: x}}}}]\n"
        ));
    }
    script.push_str("  - text: done\n");
    std::fs::write(dir.join("murmur.yaml"), manifest).unwrap();
    std::fs::write(dir.join("script.yaml"), script).unwrap();
    dir
}

fn session(dir: &Path, cache: &Path) -> Duration {
    let started = Instant::now();
    let status = Command::new(env!("CARGO_BIN_EXE_mur"))
        .env("MUR_CACHE_DIR", cache)
        .args(["run", "--port", "0", "--task", "bench", "--manifest"])
        .arg(dir.join("murmur.yaml"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    started.elapsed()
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() {
    let cache = repo().join("target").join("bench").join("shell-cache");
    let classes = ["advisory", "scoped", "sealed"];
    let dirs: Vec<PathBuf> = classes.iter().map(|c| capsule(c)).collect();
    for dir in &dirs {
        session(dir, &cache);
    }
    let mut samples = vec![Vec::new(); classes.len()];
    for _ in 0..RUNS {
        for (i, dir) in dirs.iter().enumerate() {
            samples[i].push(session(dir, &cache));
        }
    }
    let medians: Vec<Duration> = samples.into_iter().map(median).collect();
    println!("shell calls of `true`, {CALLS} per session, median of {RUNS} sessions");
    for (class, total) in classes.iter().zip(&medians) {
        let per_call = total.as_secs_f64() * 1000.0 / CALLS as f64;
        let added = (total.as_secs_f64() - medians[0].as_secs_f64()) * 1000.0 / CALLS as f64;
        println!("  {class:9} {per_call:6.3} ms per call, {added:+6.3} ms added by the sandbox");
    }
}
