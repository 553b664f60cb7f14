//! What counting a WASM tool's workdir writes costs (`cargo bench --bench meter`): one
//! call of the flood tool writing 100 MB to a file in 4 KiB writes, in sessions run
//! alternately with the meter (a 1 GiB quota, the default) and without it
//! (`MUR_BENCH_UNMETERED`, which only this benchmark sets). Each sample is the call's
//! own `duration_ms` from the trace, so start-up and the check after the call are
//! left out; the figure is the ratio of the medians. The session's CPU time (user and
//! system, from the kernel's count for exited children) is reported beside it: on a
//! machine busy with other work it varies less than wall time. The workdir is on
//! `/dev/shm` where there is one: no disk writeback between sessions, and the host's
//! own cost per write is the largest share of the call.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

const BYTES: u64 = 100_000_000;
const WRITE: u64 = 4096;
const RUNS: usize = 21;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A capsule whose scripted model calls the flood tool once.
fn capsule(dir: &Path) -> PathBuf {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let tool = Path::new(env!("MUR_GUEST_DIR")).join("mur_tool_flood.wasm");
    let manifest = format!(
        "name: meter-bench\nversion: \"0.1.0\"\nartifacts:\n  - name: flood\n    runtime: tool\n    \
         source: {}\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: bench\n\
         capabilities:\n  limits:\n    deadline_seconds: 600\nlifecycle:\n  task_acceptance: none\n",
        tool.display()
    );
    let script = format!(
        "turns:\n  - tool_calls: [{{id: c1, name: flood, input: {{mode: write-chunks, n: {BYTES}, \
         m: {WRITE}}}}}]\n  - text: done\n"
    );
    std::fs::write(dir.join("murmur.yaml"), manifest).unwrap();
    std::fs::write(dir.join("script.yaml"), script).unwrap();
    dir.join("murmur.yaml")
}

/// CPU time of the exited children so far, in milliseconds.
fn children_cpu_ms() -> u64 {
    // SAFETY: getrusage only writes the struct it is handed.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    let ms = |t: libc::timeval| t.tv_sec as u64 * 1000 + t.tv_usec as u64 / 1000;
    ms(usage.ru_utime) + ms(usage.ru_stime)
}

/// One session: the tool call's duration and the session's CPU time, in milliseconds.
fn call_ms(manifest: &Path, cache: &Path, workdir: &Path, metered: bool) -> (u64, u64) {
    let _ = std::fs::remove_dir_all(workdir);
    std::fs::create_dir_all(workdir).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mur"));
    cmd.env("MUR_CACHE_DIR", cache)
        .args([
            "run",
            "--json",
            "--port",
            "0",
            "--task",
            "bench",
            "--workdir",
        ])
        .arg(workdir)
        .arg("--manifest")
        .arg(manifest)
        .stderr(Stdio::null());
    if !metered {
        cmd.env("MUR_BENCH_UNMETERED", "1");
    }
    let cpu_before = children_cpu_ms();
    let out = cmd.output().unwrap();
    let cpu = children_cpu_ms() - cpu_before;
    assert!(out.status.success(), "the session failed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let launch: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    let records = Path::new(launch["records_dir"].as_str().unwrap());
    let trace = std::fs::read_to_string(records.join("trace.jsonl")).unwrap();
    let call = trace
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["event_type"] == "tool_call")
        .expect("a tool_call line");
    let output = call["output"].as_str().unwrap_or_default();
    assert!(!output.contains("breach"), "{output}");
    let written = std::fs::metadata(workdir.join("flood.bin")).unwrap().len();
    assert_eq!(written, BYTES);
    (call["duration_ms"].as_u64().unwrap(), cpu)
}

/// The median and the fastest sample.
fn median(mut samples: Vec<u64>) -> (u64, u64) {
    samples.sort_unstable();
    (samples[samples.len() / 2], samples[0])
}

fn main() {
    let base = repo().join("target").join("bench").join("meter");
    let manifest = capsule(&base.join("capsule"));
    let cache = base.join("cache");
    let shm = Path::new("/dev/shm");
    let workdir = if shm.is_dir() {
        shm.join(format!("mur-meter-bench-{}", std::process::id()))
    } else {
        base.join("workdir")
    };
    // Warm-up: the component's compilation lands in the cache.
    call_ms(&manifest, &cache, &workdir, true);
    let mut samples = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
    for _ in 0..RUNS {
        for (i, metered) in [false, true].into_iter().enumerate() {
            let (call, cpu) = call_ms(&manifest, &cache, &workdir, metered);
            samples[i][0].push(call);
            samples[i][1].push(cpu);
        }
    }
    let _ = std::fs::remove_dir_all(&workdir);
    println!("one tool call writing {BYTES} bytes in {WRITE}-byte writes, {RUNS} sessions each");
    let [unmetered, metered] = samples;
    for (what, k) in [("the call (wall)", 0), ("the session (CPU)", 1)] {
        println!("  {what}, unmetered samples (ms): {:?}", unmetered[k]);
        println!("  {what}, metered samples (ms):   {:?}", metered[k]);
        let ((u, u_min), (m, m_min)) = (median(unmetered[k].clone()), median(metered[k].clone()));
        let ratio = m as f64 / u as f64;
        let ratio_min = m_min as f64 / u_min as f64;
        println!(
            "  {what}: median unmetered {u} ms, metered {m} ms: {ratio:.3}x \
             (fastest {u_min} and {m_min} ms: {ratio_min:.3}x)"
        );
    }
}
