//! Start-up benchmark (`cargo bench --bench startup`): the four launch figures
//! BENCHMARKS.md keeps after every change to the launch path, and what explains them.
//!
//! - *Spawn to the launch line* and *launch plus the first task*: the release `mur`
//!   on a quiet capsule (the built-in `openai` driver against a loopback mock model in
//!   this process, `queue` + `sleep`, no tools), spawned and read by this process: the
//!   time to its `--json` launch line, then to the final status of a first task sent
//!   with `message/stream` (from the spawn).
//! - *A warm hello*: `mur run` of `examples/hello` (the scripted driver, one command in
//!   the confined `bash`, then the answer), launch to exit, component cache warm.
//! - *Idle RSS*: `VmRSS` of the quiet capsule 1.5 s after its second task ended.
//!
//! Also: the first run on a machine (empty component cache), the loop's and the
//! driver's instantiation (logged by `mur` to each session's `bootstrap.log`), and what
//! compiling the built-ins at run time would cost against loading them compiled.
//!
//! Whole-process wall times of the release binary (or the one `MUR_BENCH_BIN` names),
//! median of RUNS runs; the mock and the reader share the machine's cores with `mur`,
//! as a client and a model server on the same host would. Results and method are
//! written down in BENCHMARKS.md.

use std::convert::Infallible;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

const RUNS: usize = 15;
/// Idle memory is read in this many of the quiet capsule's runs (each waits 1.5 s).
const RSS_RUNS: usize = 5;

const ANSWER: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion","created":1,"model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"Nothing to do."},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":4,"total_tokens":16}}"#;

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

/// Where the sessions run in `workdir` keep their records (their logs among them):
/// beside it, out of the guests' view.
fn records_of(workdir: &Path) -> PathBuf {
    let name = workdir.file_name().unwrap().to_string_lossy();
    workdir.with_file_name(format!("{name}-records"))
}

/// The `mur` measured: this build's, or another (`MUR_BENCH_BIN`, e.g. an earlier
/// build kept for a before-and-after comparison on the same machine).
fn binary() -> PathBuf {
    std::env::var_os("MUR_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_mur")))
}

fn mur(cache: &Path, workdir: &Path) -> Command {
    let mut cmd = Command::new(binary());
    cmd.current_dir(repo())
        .env("MUR_CACHE_DIR", cache)
        .args(["run", "--port", "0"])
        .arg("--workdir")
        .arg(workdir)
        .arg("--records")
        .arg(records_of(workdir));
    cmd
}

/// The mock model server on 127.0.0.1, on a runtime of its own: every request gets
/// ANSWER. Returns its port.
fn mock_model() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let service = service_fn(|req: Request<Incoming>| async move {
                        let _ = req.into_body().collect().await;
                        let response = Response::builder()
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from_static(ANSWER.as_bytes())))
                            .unwrap();
                        Ok::<_, Infallible>(response)
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
    });
    port
}

/// The quiet capsule: the `openai` driver against the mock, `queue` + `sleep`, no tools.
fn quiet_capsule(port: u16) -> PathBuf {
    let dir = scratch("startup-quiet");
    let manifest = format!(
        "name: quiet\nversion: \"0.1.0\"\ninference:\n  driver: openai\n  \
         endpoint: http://127.0.0.1:{port}/v1\n  model: bench\n  api_key: sk-bench-0000\n  \
         stream: false\n  max_turns: 2\ncapabilities:\n  network:\n    \
         allow: [\"http://127.0.0.1:{port}\"]\nlifecycle:\n  task_acceptance: queue\n  \
         after_task: sleep\n"
    );
    let path = dir.join("murmur.yaml");
    std::fs::write(&path, manifest).unwrap();
    path
}

/// A running quiet capsule; dropping it kills the process.
struct Quiet {
    child: Child,
    port: u16,
}

impl Drop for Quiet {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawns the quiet capsule and reads its `--json` launch line; returns it with the
/// time from the spawn.
fn launch(manifest: &Path, cache: &Path, workdir: &Path) -> (Quiet, Instant, Duration) {
    let started = Instant::now();
    let mut child = mur(cache, workdir)
        .args(["--json", "--manifest"])
        .arg(manifest)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let elapsed = started.elapsed();
    let launch: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("no launch line ({e}): {line:?}"));
    let port = launch["address"]
        .as_str()
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line}"));
    // The rest of stdout is drained so the capsule never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    (Quiet { child, port }, started, elapsed)
}

/// Sends one task with `message/stream` and reads until its final status.
fn task(port: u16, text: &str) {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"message/stream","params":{{"message":{{"messageId":"m-{text}","role":"user","parts":[{{"text":"{text}"}}]}}}}}}"#
    );
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "POST / HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 16 * 1024];
    let last = loop {
        if let Some(status) = final_status(&seen) {
            break status;
        }
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "the stream ended before a final status: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    };
    assert!(
        last.contains(r#""state":"completed""#),
        "the task did not complete: {seen}"
    );
}

/// The task's final `status` frame, once a whole one has been read.
fn final_status(seen: &str) -> Option<String> {
    seen.split("\n\n")
        .find(|frame| frame.contains("event: status") && frame.contains(r#""final":true"#))
        .map(str::to_string)
}

fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap()
}

/// The quiet capsule's figures: spawn to the launch line, spawn to the first task's
/// final status, and (in the last RSS_RUNS runs) idle RSS after two tasks.
struct Quietly {
    line: Vec<Duration>,
    first_task: Vec<Duration>,
    idle_kib: Vec<u64>,
}

fn quiet_runs(manifest: &Path, cache: &Path) -> Quietly {
    let mut out = Quietly {
        line: Vec::new(),
        first_task: Vec::new(),
        idle_kib: Vec::new(),
    };
    for run in 0..RUNS {
        let workdir = scratch(&format!("startup-quiet-run-{}", run % 3));
        let (capsule, started, line) = launch(manifest, cache, &workdir);
        task(capsule.port, "first");
        out.first_task.push(started.elapsed());
        out.line.push(line);
        if run >= RUNS - RSS_RUNS {
            task(capsule.port, "second");
            std::thread::sleep(Duration::from_millis(1500));
            out.idle_kib.push(vm_rss_kib(capsule.child.id()));
        }
    }
    out
}

/// One `mur run` of the hello capsule, to exit; returns its wall time.
fn hello(cache: &Path, workdir: &Path) -> Duration {
    let started = Instant::now();
    let status = mur(cache, workdir)
        .args([
            "--manifest",
            "examples/hello/murmur.yaml",
            "--task",
            "bench",
        ])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    let elapsed = started.elapsed();
    assert!(status.success());
    elapsed
}

fn median<T: Ord + Copy>(mut samples: Vec<T>) -> T {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn spread(samples: &[Duration]) -> String {
    let min = samples.iter().min().unwrap();
    let max = samples.iter().max().unwrap();
    format!(
        "median {}  [{} – {}]",
        ms(median(samples.to_vec())),
        ms(*min),
        ms(*max)
    )
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
    let port = mock_model();
    let quiet = quiet_capsule(port);
    let warm_cache = scratch("startup-warm-cache");
    // The first run fills the cache (the built-ins' compiled forms, copied out of the
    // binary); every run measured after it is warm.
    let (capsule, _, _) = launch(&quiet, &warm_cache, &scratch("startup-prewarm"));
    task(capsule.port, "prewarm");
    drop(capsule);
    let quietly = quiet_runs(&quiet, &warm_cache);

    let hello_workdir = scratch("startup-hello");
    let hellos: Vec<Duration> = (0..RUNS)
        .map(|_| hello(&warm_cache, &hello_workdir))
        .collect();
    let cold: Vec<Duration> = (0..RUNS)
        .map(|i| hello(&scratch(&format!("startup-cold-cache-{i}")), &hello_workdir))
        .collect();
    let loop_us = instantiation_micros(&hello_workdir, "session loop");
    let driver_us = instantiation_micros(&hello_workdir, "driver");

    println!("quiet capsule (openai driver, loopback mock, queue + sleep), {RUNS} runs");
    println!("  spawn to launch line:        {}", spread(&quietly.line));
    println!(
        "  launch + first task:         {}",
        spread(&quietly.first_task)
    );
    println!(
        "  idle RSS after two tasks:    median {:.1} MiB ({RSS_RUNS} runs)",
        median(quietly.idle_kib) as f64 / 1024.0
    );
    println!("hello capsule (scripted driver, one confined bash call), launch to exit");
    println!("  warm cache:                  {}", spread(&hellos));
    println!("  empty cache (first run):     {}", spread(&cold));
    println!("instantiate from the cache (InstancePre), median");
    println!("  session loop: {} µs", median(loop_us));
    println!("  driver:       {} µs", median(driver_us));
    let (compile, load) = compile_vs_load();
    println!("session loop + scripted driver, side by side, median of {RUNS}");
    println!("  compiled by Cranelift: {}", ms(compile));
    println!("  loaded precompiled:    {}", ms(load));
}
