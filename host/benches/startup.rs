//! Start-up benchmark (`cargo bench --bench startup`): `mur run` on the hello capsule
//! from launch to the printed answer, with an empty component cache (a machine's first
//! run) and a warm one, the time to instantiate the loop and the driver from the cache,
//! memory, and what the first run would spend compiling the built-in components had the
//! build not compiled them.
//!
//! Whole-process wall time of the release binary, median of several runs; results and
//! the method are written down in BENCHMARKS.md.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RUNS: usize = 15;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn scratch(name: &str) -> PathBuf {
    let dir = repo().join("target").join("bench").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(records_of(&dir));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `mur run` of the hello capsule, with its component cache and workdir.
fn hello(cache: &Path, workdir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mur"));
    cmd.current_dir(repo())
        .env("MUR_CACHE_DIR", cache)
        .args([
            "run",
            "--manifest",
            "examples/hello/murmur.yaml",
            "--port",
            "0",
            "--task",
            "bench",
        ])
        .arg("--workdir")
        .arg(workdir)
        .arg("--records")
        .arg(records_of(workdir));
    cmd
}

/// Where the sessions run in `workdir` keep their records (their logs among them):
/// beside it, out of the guests' view.
fn records_of(workdir: &Path) -> PathBuf {
    let name = workdir.file_name().unwrap().to_string_lossy();
    workdir.with_file_name(format!("{name}-records"))
}

/// One `mur run` of the hello capsule, to exit; returns its wall time.
fn run(cache: &Path, workdir: &Path) -> Duration {
    let started = Instant::now();
    let status = hello(cache, workdir)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    let elapsed = started.elapsed();
    assert!(status.success());
    elapsed
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// The `instantiated <what> in <n> µs` lines of every session under `workdir`.
fn instantiation_micros(workdir: &Path, what: &str) -> Vec<u64> {
    let mut out = Vec::new();
    let sessions = std::fs::read_dir(records_of(workdir)).unwrap();
    for session in sessions {
        let log = session.unwrap().path().join("logs/bootstrap.log");
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let prefix = format!("instantiated {what} in ");
        for line in text.lines().filter_map(|l| l.strip_prefix(&prefix)) {
            out.push(line.trim_end_matches(" µs").parse().unwrap());
        }
    }
    out.sort();
    out
}

/// Resident memory of a capsule idling between tasks (queue + sleep).
fn idle_rss_kib(cache: &Path) -> u64 {
    let workdir = scratch("idle");
    let mut child = hello(cache, &workdir)
        .args([
            "--lifecycle-task-acceptance",
            "queue",
            "--lifecycle-after-task",
            "sleep",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap()
}

/// The hello capsule's two components, compiled by Cranelift as a first run without
/// precompiled components would (side by side, as `mur run` loads them), against loading
/// the same components already compiled.
fn compile_vs_load() -> (Duration, Duration) {
    let guests = repo().join("target/guests/wasm32-wasip2/release");
    let sources: Vec<Vec<u8>> = ["mur_session_loop.wasm", "mur_driver_scripted.wasm"]
        .iter()
        .map(|name| std::fs::read(guests.join(name)).unwrap())
        .collect();
    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.cranelift_opt_level(wasmtime::OptLevel::Speed);
    let engine = wasmtime::Engine::new(&config).unwrap();
    let compiled: Vec<Vec<u8>> = sources
        .iter()
        .map(|bytes| engine.precompile_component(bytes).unwrap())
        .collect();
    let side_by_side = |each: &(dyn Fn(usize) + Sync)| {
        let started = Instant::now();
        std::thread::scope(|scope| {
            for i in 0..sources.len() {
                scope.spawn(move || each(i));
            }
        });
        started.elapsed()
    };
    let compile = (0..RUNS)
        .map(|_| {
            side_by_side(&|i| {
                wasmtime::component::Component::new(&engine, &sources[i]).unwrap();
            })
        })
        .collect();
    let load = (0..RUNS)
        .map(|_| {
            side_by_side(&|i| {
                // SAFETY: compiled just above by this engine.
                unsafe { wasmtime::component::Component::deserialize(&engine, &compiled[i]) }
                    .unwrap();
            })
        })
        .collect();
    (median(compile), median(load))
}

fn main() {
    let workdir = scratch("runs");
    let cold: Vec<Duration> = (0..RUNS)
        .map(|i| run(&scratch(&format!("cold-cache-{i}")), &workdir))
        .collect();
    let warm_cache = scratch("warm-cache");
    run(&warm_cache, &scratch("prewarm"));
    let warm_workdir = scratch("warm-runs");
    let warm: Vec<Duration> = (0..RUNS).map(|_| run(&warm_cache, &warm_workdir)).collect();
    let loop_us = instantiation_micros(&warm_workdir, "session loop");
    let driver_us = instantiation_micros(&warm_workdir, "driver");
    let rss = idle_rss_kib(&warm_cache);

    println!("mur run, hello capsule, launch to answer ({RUNS} runs each)");
    println!(
        "  empty cache (first run): median {}  (min {})",
        ms(median(cold.clone())),
        ms(*cold.iter().min().unwrap())
    );
    println!(
        "  warm cache: median {}  (min {})",
        ms(median(warm.clone())),
        ms(*warm.iter().min().unwrap())
    );
    println!("instantiate from the cache (InstancePre), median");
    println!("  session loop: {} µs", loop_us[loop_us.len() / 2]);
    println!("  driver:       {} µs", driver_us[driver_us.len() / 2]);
    println!(
        "idle RSS (queue + sleep, after one task): {:.1} MiB",
        rss as f64 / 1024.0
    );
    let (compile, load) = compile_vs_load();
    println!("session loop + scripted driver, side by side, median of {RUNS}");
    println!("  compiled by Cranelift: {}", ms(compile));
    println!("  loaded precompiled:    {}", ms(load));
}
