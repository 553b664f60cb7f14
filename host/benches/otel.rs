//! OpenTelemetry export benchmark (`cargo bench -p mur --bench otel`): the release
//! `mur run` (`--lifecycle-task-acceptance queue --lifecycle-after-task sleep`, scripted
//! driver) on 127.0.0.1, with span export off and on, driven by a tokio client in this
//! process. Export is switched on as an operator would: `OTEL_EXPORTER_OTLP_ENDPOINT`
//! on the `mur run` process, spans posted as OTLP/HTTP protobuf to `<base>/v1/traces`.
//!
//! The receiver is a small hyper server in this process (on a runtime of its own):
//! *live*, it reads each `POST /v1/traces` body whole, counts the spans in it (a walk of
//! the protobuf's `resource_spans` → `scope_spans` → `spans`) and answers `200` with an
//! empty body; *hung*, it accepts, reads whatever comes and never answers.
//!
//! 1. Fan-out: the stream bench's capsule and task (`fanout/mod.rs`: one turn streaming
//!    `CHUNKS` chunks to N `stream/watch` connections) at N = 1 and 100, on two `mur
//!    run` processes, export off and export on to a live receiver, one run of each in
//!    turn (the order swapped every run), a pause of `SETTLE` after each so that one
//!    side's batch goes out before the other side's run. Medians of the aggregate
//!    frames/s and of the time to the last watcher's final status, their ratios on/off
//!    (and the median of each run's own on/off ratio), and `mur`'s own CPU time per
//!    run (`/proc/<pid>/stat`, all its threads, the pause included).
//! 2. Tool calls: one task of `CALLS` `bash` calls of `true`, one per scripted turn, then
//!    the answer; timed from `message/stream` to its final status, off and on in turn
//!    as in 1. Medians, ratios, CPU per task.
//! 3. Memory: one task of `MEM_TURNS` turns of one `bash` call each (a `chat`, an
//!    `execute_tool` and a `shell` span per turn: more than 10,000 spans), on a fresh
//!    `mur run` each: export off; on to a live receiver; on to a port nobody listens on;
//!    on to a receiver that never answers. The export settings are the defaults (batch
//!    delay 5 s, queue 2,048 spans, timeout 10 s). `VmRSS` and `RssAnon` of `mur` are
//!    sampled every `SAMPLE_EVERY` during the task; the peak, the value at the final
//!    status and `AFTER` later are reported.
//! 4. Drops: `mur run` has no `/metrics`, so the same task runs on a capsule of a `mur
//!    serve` with the same export settings, its endpoint a port nobody listens on and
//!    then a receiver that never answers; `mur_otel_spans_exported_total` and
//!    `mur_otel_spans_lost_total` by reason, read at the task's final status and
//!    `AFTER_DROPS` later.
//!
//! `OTEL_BSP_SCHEDULE_DELAY` in 1 and 2 is `DELAY_MS` (`MUR_BENCH_OTEL_DELAY_MS` sets
//! another; `default` leaves the SDK's 5 s). `MUR_BENCH_OTEL_AA=1` makes the "on" side
//! of 1 and 2 a control (its environment plus `OTEL_SDK_DISABLED=true`: export off), to
//! see what two like processes differ by. `MUR_BENCH_OTEL_PARTS` picks parts
//! (`fanout,tools,memory,drops`, the default all). Every read has a deadline, and each `mur`
//! process is killed when its guard drops, also on a panic. Results are plain lines on
//! stdout.

#[allow(
    dead_code,
    reason = "the benches' shared client; this one uses part of it"
)]
mod client;
#[allow(
    dead_code,
    reason = "the benches' shared fan-out; this one uses part of it"
)]
mod fanout;
#[allow(
    dead_code,
    reason = "the benches' `mur run`; this one reads /proc by pid, from a thread too"
)]
mod mur;
#[allow(
    dead_code,
    reason = "the benches' OTLP receiver; this one uses part of it"
)]
mod otlp_receiver;

use client::*;
use fanout::{FanOut, Res, fan_out, report, submit};
use mur::{Mur, cache};
use otlp_receiver::*;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::runtime::{Handle, Runtime};
use tokio::time::timeout;

/// (watch connections, runs of each side).
const FAN_OUT: [(usize, usize); 2] = [(1, 25), (100, 25)];
/// Tool calls in part 2's task, one per turn.
const CALLS: usize = 200;
const TOOL_RUNS: usize = 21;
/// Turns of part 3's task, one `bash` call each: 3 spans a turn.
const MEM_TURNS: usize = 3_400;
/// After each run, before the next: longer than the batch delay, shorter than the 1 s
/// after which an idle `mur run` gives memory back.
const SETTLE: Duration = Duration::from_millis(500);
/// `OTEL_BSP_SCHEDULE_DELAY` in parts 1 and 2, unless `MUR_BENCH_OTEL_DELAY_MS` says.
const DELAY_MS: &str = "200";
const SAMPLE_EVERY: Duration = Duration::from_millis(50);
/// When memory is read again after part 3's task: past the default batch delay (5 s)
/// and the idle second after which `mur run` trims its heap.
const AFTER: Duration = Duration::from_secs(7);
/// `mur run` to its launch line (a cold component cache compiles the components).
const LAUNCH_LIMIT: Duration = Duration::from_secs(600);
/// When `/metrics` is read again after part 4's task: past one more export timeout.
const AFTER_DROPS: Duration = Duration::from_secs(12);
/// One task of part 2, and part 3's long one.
const TASK_LIMIT: Duration = Duration::from_secs(300);
const LONG_TASK_LIMIT: Duration = Duration::from_secs(1800);

// ---------------------------------------------------------------------------------
// Capsules, processes, measures.

fn cache_dir() -> PathBuf {
    cache("otel-cache")
}

/// A capsule allowed `bash` whose script (played from its first turn by every task)
/// has `calls` turns of one `bash` call of `true`, then the answer.
fn tool_capsule(name: &str, calls: usize) -> PathBuf {
    let dir = mur::scratch("otel", name);
    let manifest = format!(
        "name: otel-bench\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  \
         script: ./script.yaml\n  model: scripted-bench\n  max_turns: {}\ncapabilities:\n  \
         shell:\n    allow: [bash]\n  limits:\n    max_tool_calls_per_task: {}\n    \
         max_trace_bytes: {}\nlifecycle:\n  queue_depth: 8\n",
        calls + 1,
        calls + 1,
        1u64 << 30
    );
    let mut script = String::from("turns:\n");
    for i in 0..calls {
        script.push_str(&format!(
            "  - tool_calls: [{{id: c{i}, name: bash, input: {{command: \"true\"}}}}]\n"
        ));
    }
    script.push_str("  - text: done\n");
    std::fs::write(dir.join("murmur.yaml"), manifest).unwrap();
    std::fs::write(dir.join("script.yaml"), script).unwrap();
    dir
}

/// `mur run` on `capsule`, with `env` added (none: export off).
fn start(capsule: &Path, env: &[(&str, String)]) -> Mur {
    if env.is_empty() {
        return Mur::start(capsule, &cache_dir(), LAUNCH_LIMIT);
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Mur::start_with_env(capsule, &cache_dir(), LAUNCH_LIMIT, &env)
}

/// The schedule delay of parts 1 and 2, `None` for the SDK's default.
fn delay_ms() -> Option<String> {
    match std::env::var("MUR_BENCH_OTEL_DELAY_MS") {
        Ok(v) if v.trim() == "default" => None,
        Ok(v) if !v.trim().is_empty() => Some(v.trim().to_string()),
        _ => Some(DELAY_MS.to_string()),
    }
}

/// The "on" side of parts 1 and 2: export to `receiver`; with `MUR_BENCH_OTEL_AA` set,
/// the same environment plus `OTEL_SDK_DISABLED=true` (export off), a control run that
/// shows the difference two like processes make.
fn on_env(receiver: &str, delay: Option<&str>) -> Vec<(&'static str, String)> {
    let mut env = export_env(receiver, delay);
    if control() {
        env.push(("OTEL_SDK_DISABLED", "true".into()));
    }
    env
}

fn control() -> bool {
    std::env::var_os("MUR_BENCH_OTEL_AA").is_some_and(|v| !v.is_empty())
}

fn export_env(receiver: &str, delay: Option<&str>) -> Vec<(&'static str, String)> {
    let mut env = vec![("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.to_string())];
    if let Some(delay) = delay {
        env.push(("OTEL_BSP_SCHEDULE_DELAY", delay.to_string()));
    }
    env
}

/// `mur`'s own CPU time (user + system, all its threads), in ms.
fn cpu_ms(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    // After the name: state (3) ... utime (14), stime (15).
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    // SAFETY: sysconf reads a constant of the system.
    let per_sec = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    ticks as f64 * 1e3 / per_sec
}

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// (`VmRSS`, `RssAnon`) in KiB.
fn rss(pid: u32) -> (u64, u64) {
    (status_kib(pid, "VmRSS:"), status_kib(pid, "RssAnon:"))
}

/// Samples `rss` of `pid` every `SAMPLE_EVERY` until stopped.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(u64, u64)>>,
}

impl Sampler {
    fn start(pid: u32) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                samples.push(rss(pid));
                std::thread::sleep(SAMPLE_EVERY);
            }
            samples
        });
        Sampler { stop, thread }
    }

    /// The peaks of (`VmRSS`, `RssAnon`) and the number of samples.
    fn stop(self) -> (u64, u64, usize) {
        self.stop.store(true, Ordering::Relaxed);
        let samples = self.thread.join().unwrap();
        let peak = |f: fn(&(u64, u64)) -> u64| samples.iter().map(f).max().unwrap_or(0);
        (peak(|s| s.0), peak(|s| s.1), samples.len())
    }
}

/// One task sent with `message/stream`, read to its final status.
async fn task(addr: SocketAddr, limit: Duration) -> Res<Duration> {
    let started = Instant::now();
    let run = async {
        let sse = Sse::post(addr, "/", &[], &message_stream("bench")).await?;
        finish(sse).await
    };
    match timeout(limit, run).await {
        Ok(Ok(_)) => Ok(started.elapsed()),
        Ok(Err(e)) => Err(format!("the task: {e}")),
        Err(_) => Err(format!("the task did not end within {limit:?}")),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// `on / off`, and the cost it means in percent.
fn ratio(on: f64, off: f64) -> String {
    format!("{:.3} ({:+.1} %)", on / off, (on / off - 1.0) * 100.0)
}

fn stderr_of(capsule: &Path) -> String {
    let log = std::fs::read_to_string(capsule.join("mur.stderr")).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(5).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

/// What `alternate` measured: each side's results, the runs where both sides
/// succeeded (indices into each), and each side's CPU time in ms.
struct Alternated<T> {
    got: [Vec<T>; 2],
    pairs: Vec<(usize, usize)>,
    cpu: [f64; 2],
}

impl<T> Alternated<T> {
    /// The median over the runs of `f(on) / f(off)`, each run's two sides taken one
    /// right after the other.
    fn paired(&self, f: impl Fn(&T) -> f64) -> f64 {
        let ratios: Vec<f64> = self
            .pairs
            .iter()
            .map(|&(off, on)| f(&self.got[1][on]) / f(&self.got[0][off]))
            .collect();
        if ratios.is_empty() {
            return f64::NAN;
        }
        median(&ratios)
    }

    /// CPU ms per run of a side.
    fn cpu_per_run(&self, side: usize) -> f64 {
        self.cpu[side] / self.got[side].len().max(1) as f64
    }
}

/// Off and on, one run of each in turn (the order swapped every run), `SETTLE` after
/// each; `run` is one timed run on one side.
fn alternate<T>(
    sides: &[&Mur; 2],
    runs: usize,
    mut run: impl FnMut(&Mur) -> Res<T>,
) -> Alternated<T> {
    let mut got = [Vec::new(), Vec::new()];
    let mut pairs = Vec::new();
    let mut cpu = [0.0; 2];
    for i in 0..runs {
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        let mut both = true;
        for side in order {
            let mur = sides[side];
            let before = cpu_ms(mur.pid());
            match run(mur) {
                Ok(r) => got[side].push(r),
                Err(e) => {
                    both = false;
                    println!("  {} run {} failed: {e}", ["off", "on"][side], i + 1);
                }
            }
            std::thread::sleep(SETTLE);
            cpu[side] += cpu_ms(mur.pid()) - before;
        }
        if both {
            pairs.push((got[0].len() - 1, got[1].len() - 1));
        }
    }
    Alternated { got, pairs, cpu }
}

// ---------------------------------------------------------------------------------
// The parts.

fn fan_out_part(client: &Runtime, server: &Handle, delay: Option<&str>) {
    let receiver = Receiver::start(server, Answer::Live);
    let tasks = 1 + FAN_OUT.iter().map(|(_, runs)| 2 * runs).sum::<usize>();
    let off_dir = fanout::capsule("otel", "fanout-off", tasks + 2);
    let on_dir = fanout::capsule("otel", "fanout-on", tasks + 2);
    let off = start(&off_dir, &[]);
    let on = start(&on_dir, &on_env(&receiver.base(), delay));
    for mur in [&off, &on] {
        let addr = mur.addr;
        if let Err(e) = client.block_on(fan_out(addr, 1, || submit(addr))) {
            println!("  warm-up task failed: {e}");
        }
    }
    std::thread::sleep(SETTLE);
    let warm = receiver.get();
    let mut on_tasks = 0;
    for (n, runs) in FAN_OUT {
        let done = alternate(&[&off, &on], runs, |mur| {
            let addr = mur.addr;
            client.block_on(fan_out(addr, n, || submit(addr)))
        });
        on_tasks += runs;
        let [off_runs, on_runs] = &done.got;
        report(&format!("off, N={n}"), off_runs);
        report(&format!("on,  N={n}"), on_runs);
        if off_runs.is_empty() || on_runs.is_empty() {
            println!("  on/off at N={n}: not available (a side failed)");
            continue;
        }
        let m = |runs: &[FanOut], f: fn(&FanOut) -> f64| {
            median(&runs.iter().map(f).collect::<Vec<_>>())
        };
        let fps = |r: &FanOut| r.frames_per_sec;
        let last = |r: &FanOut| r.max_final.as_secs_f64();
        println!(
            "  on/off at N={n}: aggregate frames/s {} (median of the runs' own ratios {}), \
             time to the last final status {}; mur CPU per task {:.1} ms off, {:.1} ms on",
            ratio(m(on_runs, fps), m(off_runs, fps)),
            ratio(done.paired(fps), 1.0),
            ratio(m(on_runs, last), m(off_runs, last)),
            done.cpu_per_run(0),
            done.cpu_per_run(1),
        );
    }
    std::thread::sleep(Duration::from_secs(1));
    let (_, spans, bytes, _) = receiver.get();
    println!(
        "  receiver: {}; {:.1} spans and {:.0} B per timed task",
        receiver.said(),
        (spans - warm.1) as f64 / on_tasks as f64,
        (bytes - warm.2) as f64 / on_tasks as f64
    );
    if spans == 0 && !control() {
        println!(
            "  warning: no span arrived; mur's stderr: {}",
            stderr_of(&on_dir)
        );
    }
}

fn tools_part(client: &Runtime, server: &Handle, delay: Option<&str>) {
    let receiver = Receiver::start(server, Answer::Live);
    let off_dir = tool_capsule("tools-off", CALLS);
    let on_dir = tool_capsule("tools-on", CALLS);
    let off = start(&off_dir, &[]);
    let on = start(&on_dir, &on_env(&receiver.base(), delay));
    for mur in [&off, &on] {
        if let Err(e) = client.block_on(task(mur.addr, TASK_LIMIT)) {
            println!("  warm-up task failed: {e}");
        }
    }
    std::thread::sleep(SETTLE);
    let warm = receiver.get();
    let done = alternate(&[&off, &on], TOOL_RUNS, |mur| {
        client.block_on(task(mur.addr, TASK_LIMIT))
    });
    let [off_runs, on_runs] = &done.got;
    let cpu = [done.cpu_per_run(0), done.cpu_per_run(1)];
    let line = |label: &str, runs: &[Duration], cpu: f64| {
        if runs.is_empty() {
            return;
        }
        println!(
            "  {label} ({} runs): submission to final status median {:.1} ms [{:.1} – {:.1}], \
             {:.2} ms per call; mur CPU per task {:.1} ms",
            runs.len(),
            ms(median(runs)),
            ms(*runs.iter().min().unwrap()),
            ms(*runs.iter().max().unwrap()),
            ms(median(runs)) / CALLS as f64,
            cpu
        );
    };
    line("off", off_runs, cpu[0]);
    line("on ", on_runs, cpu[1]);
    if !off_runs.is_empty() && !on_runs.is_empty() {
        let min = |r: &[Duration]| ms(*r.iter().min().unwrap());
        println!(
            "  on/off: median {} (median of the runs' own ratios {}), minimum {}, mur CPU per \
             task {}",
            ratio(ms(median(on_runs)), ms(median(off_runs))),
            ratio(done.paired(|d| ms(*d)), 1.0),
            ratio(min(on_runs), min(off_runs)),
            ratio(cpu[1], cpu[0])
        );
    }
    std::thread::sleep(Duration::from_secs(1));
    let (_, spans, bytes, _) = receiver.get();
    println!(
        "  receiver: {}; {:.1} spans and {:.0} B per timed task",
        receiver.said(),
        (spans - warm.1) as f64 / TOOL_RUNS as f64,
        (bytes - warm.2) as f64 / TOOL_RUNS as f64
    );
    if spans == 0 && !control() {
        println!(
            "  warning: no span arrived; mur's stderr: {}",
            stderr_of(&on_dir)
        );
    }
}

enum Mode {
    Off,
    Live,
    Down,
    Hung,
}

fn memory_part(client: &Runtime, server: &Handle) {
    let modes = [
        (Mode::Off, "off", "off"),
        (Mode::Live, "live", "on, live receiver"),
        (Mode::Down, "down", "on, nothing listens"),
        (Mode::Hung, "hung", "on, never answers"),
    ];
    let mut off_peak = None;
    for (mode, name, label) in modes {
        let receiver = match mode {
            Mode::Live => Some(Receiver::start(server, Answer::Live)),
            Mode::Hung => Some(Receiver::start(server, Answer::Hung)),
            Mode::Off | Mode::Down => None,
        };
        let env = match (&mode, &receiver) {
            (Mode::Off, _) => Vec::new(),
            (Mode::Down, _) => export_env(&format!("http://{}", closed_port()), None),
            (_, Some(r)) => export_env(&r.base(), None),
            (_, None) => unreachable!(),
        };
        let dir = tool_capsule(&format!("memory-{name}"), MEM_TURNS);
        let mur = start(&dir, &env);
        let pid = mur.pid();
        std::thread::sleep(Duration::from_millis(500));
        let before = rss(pid);
        let cpu_before = cpu_ms(pid);
        let sampler = Sampler::start(pid);
        let took = client.block_on(task(mur.addr, LONG_TASK_LIMIT));
        let at_end = rss(pid);
        let cpu = cpu_ms(pid) - cpu_before;
        let (peak_rss, peak_anon, samples) = sampler.stop();
        std::thread::sleep(AFTER);
        let after = rss(pid);
        let took = match took {
            Ok(t) => format!("{:.1} s", t.as_secs_f64()),
            Err(e) => format!("FAILED ({e})"),
        };
        println!(
            "  {label}: task {took}, mur CPU {:.1} s; VmRSS {:.1} MiB before, peak {:.1}, at the end \
             {:.1}, {} s after {:.1}; RssAnon {:.1} before, peak {:.1}, at the end {:.1}, after {:.1} \
             ({samples} samples)",
            cpu / 1e3,
            mib(before.0),
            mib(peak_rss),
            mib(at_end.0),
            AFTER.as_secs(),
            mib(after.0),
            mib(before.1),
            mib(peak_anon),
            mib(at_end.1),
            mib(after.1),
        );
        match &mode {
            Mode::Off => off_peak = Some((peak_rss, peak_anon)),
            _ => {
                if let Some((rss0, anon0)) = off_peak {
                    println!(
                        "    peak against off: VmRSS {:+.1} MiB, RssAnon {:+.1} MiB",
                        mib(peak_rss) - mib(rss0),
                        mib(peak_anon) - mib(anon0)
                    );
                }
            }
        }
        match (&mode, &receiver) {
            (Mode::Live, Some(r)) => println!("    receiver: {}", r.said()),
            (Mode::Hung, Some(r)) => println!(
                "    receiver: {} connections, {:.1} KiB read, no answer",
                r.taken.connections.load(Ordering::Relaxed),
                r.taken.bytes.load(Ordering::Relaxed) as f64 / 1024.0
            ),
            _ => {}
        }
        drop(mur);
    }
}

// ---------------------------------------------------------------------------------
// Lost spans, as `mur serve` counts them.

/// One request to its reply (every reply of `mur` but an event stream ends with
/// `connection: close`): the status code and the body.
async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> std::io::Result<(u16, String)> {
    let mut socket = send(addr, method, path, headers, body).await?;
    let mut reply = Vec::new();
    limited("read", socket.read_to_end(&mut reply)).await?;
    let end = find(&reply, b"\r\n\r\n").ok_or_else(|| io_err("no reply head"))?;
    let head = String::from_utf8_lossy(&reply[..end]);
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io_err(format!("bad status line in {head:?}")))?;
    let body = String::from_utf8_lossy(&reply[end + 4..]).into_owned();
    Ok((status, body))
}

/// `mur serve` with its data in `dir/data`, `env` added; and its admin token.
fn start_serve(dir: &Path, env: &[(&str, String)]) -> Res<(Mur, String)> {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_mur"));
    command
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .args([
            "serve",
            "--json",
            "--bind",
            "127.0.0.1",
            "--port",
            "0",
            "--data",
        ])
        .arg(dir.join("data"));
    let mur = Mur::launch(command, dir, &cache_dir(), LAUNCH_LIMIT);
    let admin = std::fs::read_to_string(dir.join("data").join("admin-token"))
        .map_err(|e| format!("the admin token: {e}"))?;
    Ok((mur, format!("Bearer {}", admin.trim())))
}

/// Creates the capsule in `capsule` on `mur serve`, runs one task on it to its final
/// status, and reads `/metrics` then and `AFTER_DROPS` later.
async fn hosted(addr: SocketAddr, admin: &str, capsule: &Path) -> Res<(Duration, Lost, Lost)> {
    let body = serde_json::json!({ "path": capsule }).to_string();
    let headers = [
        ("authorization", admin),
        ("content-type", "application/json"),
    ];
    let (status, body) = http(addr, "POST", "/admin/capsules", &headers, &body)
        .await
        .map_err(|e| format!("POST /admin/capsules: {e}"))?;
    if status != 201 {
        return Err(format!("POST /admin/capsules answered {status}: {body}"));
    }
    let created: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    let path = created["path"].as_str().unwrap_or_default();
    let bearer = format!("Bearer {}", created["token"].as_str().unwrap_or_default());
    let started = Instant::now();
    let run = async {
        let headers = [("authorization", bearer.as_str())];
        let sse = Sse::post(addr, path, &headers, &message_stream("bench")).await?;
        finish(sse).await
    };
    match timeout(LONG_TASK_LIMIT, run).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(format!("the task: {e}")),
        Err(_) => return Err("the task did not end in time".into()),
    }
    let took = started.elapsed();
    let at_end = lost(addr).await?;
    tokio::time::sleep(AFTER_DROPS).await;
    Ok((took, at_end, lost(addr).await?))
}

/// `mur_otel_spans_exported_total` and `mur_otel_spans_lost_total` by reason.
#[derive(Default)]
struct Lost {
    exported: u64,
    queue_full: u64,
    export_failed: u64,
}

async fn lost(addr: SocketAddr) -> Res<Lost> {
    let (status, body) = http(addr, "GET", "/metrics", &[], "")
        .await
        .map_err(|e| format!("GET /metrics: {e}"))?;
    if status != 200 {
        return Err(format!("GET /metrics answered {status}"));
    }
    let value = |name: &str| {
        body.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    Ok(Lost {
        exported: value("mur_otel_spans_exported_total "),
        queue_full: value("mur_otel_spans_lost_total{reason=\"queue_full\"} "),
        export_failed: value("mur_otel_spans_lost_total{reason=\"export_failed\"} "),
    })
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exported {}, lost {} (queue full {}, export failed {})",
            self.exported,
            self.queue_full + self.export_failed,
            self.queue_full,
            self.export_failed
        )
    }
}

fn drops_part(client: &Runtime, server: &Handle) {
    let modes = [
        (Mode::Down, "down", "nothing listens"),
        (Mode::Hung, "hung", "never answers"),
    ];
    for (mode, name, label) in modes {
        let receiver = matches!(mode, Mode::Hung).then(|| Receiver::start(server, Answer::Hung));
        let endpoint = match &receiver {
            Some(r) => r.base(),
            None => format!("http://{}", closed_port()),
        };
        let capsule = tool_capsule(&format!("drops-{name}"), MEM_TURNS);
        let dir = mur::scratch("otel", &format!("drops-{name}-serve"));
        let (mur, admin) = match start_serve(&dir, &export_env(&endpoint, None)) {
            Ok(served) => served,
            Err(e) => {
                println!("  {label}: failed: {e}");
                continue;
            }
        };
        match client.block_on(hosted(mur.addr, &admin, &capsule)) {
            Ok((took, at_end, after)) => println!(
                "  {label}: task {:.1} s; at its final status: {at_end}; {} s later: {after}",
                took.as_secs_f64(),
                AFTER_DROPS.as_secs()
            ),
            Err(e) => println!("  {label}: failed: {e}"),
        }
        drop(mur);
    }
}

fn main() {
    // "Off" must be off: no OpenTelemetry setting of this shell reaches `mur`.
    let inherited: Vec<String> = std::env::vars()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with("OTEL_") || k == "TRACEPARENT")
        .collect();
    for name in &inherited {
        // SAFETY: no other thread runs yet.
        unsafe { std::env::remove_var(name) };
    }
    let parts = std::env::var("MUR_BENCH_OTEL_PARTS")
        .unwrap_or_else(|_| "fanout,tools,memory,drops".into());
    let delay = delay_ms();
    let client = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "mur OpenTelemetry export benchmark: release `mur run` (queue + sleep, scripted driver) on \
         127.0.0.1; export on = OTEL_EXPORTER_OTLP_ENDPOINT to a loopback receiver in this \
         process (OTLP/HTTP protobuf, 200 with an empty body)"
    );
    if control() {
        println!(
            "  MUR_BENCH_OTEL_AA: a control run, the \"on\" side of fan-out and tool calls has \
             OTEL_SDK_DISABLED=true (export off)"
        );
    }
    if !inherited.is_empty() {
        println!(
            "  (left out of mur's environment: {})",
            inherited.join(", ")
        );
    }
    let delay_said = delay
        .as_deref()
        .map_or("the default 5000".to_string(), |d| d.to_string());
    if parts.contains("fanout") {
        println!(
            "fan-out: the stream bench's task ({} chunks) to N stream/watch connections; off and \
             on alternating, {} ms pause after each run; OTEL_BSP_SCHEDULE_DELAY={delay_said} \
             (medians of the runs)",
            fanout::CHUNKS,
            SETTLE.as_millis()
        );
        fan_out_part(&client, server.handle(), delay.as_deref());
    }
    if parts.contains("tools") {
        println!(
            "tool calls: one task of {CALLS} `bash` calls of `true`, one per turn, then the answer; \
             off and on alternating, {TOOL_RUNS} runs each after a warm-up, {} ms pause after each; \
             OTEL_BSP_SCHEDULE_DELAY={delay_said}",
            SETTLE.as_millis()
        );
        tools_part(&client, server.handle(), delay.as_deref());
    }
    if parts.contains("memory") {
        println!(
            "memory: one task of {MEM_TURNS} turns of one `bash` call ({} spans), a fresh mur run \
             each, default export settings (delay 5 s, queue 2048, timeout 10 s); RSS sampled \
             every {} ms",
            1 + (MEM_TURNS + 1) + 2 * MEM_TURNS,
            SAMPLE_EVERY.as_millis()
        );
        memory_part(&client, server.handle());
    }
    if parts.contains("drops") {
        println!(
            "drops: the same task on a capsule of `mur serve` (its /metrics counts what is lost), \
             default export settings"
        );
        drops_part(&client, server.handle());
    }
    server.shutdown_background();
    client.shutdown_background();
}
