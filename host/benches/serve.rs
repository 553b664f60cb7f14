//! Density benchmark of `mur serve` (`cargo bench -p mur --bench serve`): the release
//! `mur serve` on 127.0.0.1, driven by a tokio client in this process.
//!
//! 1. Create to ready: sequential `POST /admin/capsules` of the hosted example
//!    (`examples/hosted`: queue + sleep, scripted driver, one `bash` call per task), each
//!    timed from connecting to the admin route until the `201` has been read, and then
//!    until a `stream/watch` at the capsule's new address has read its `connection-ack`
//!    (the address answers: a task can be sent). `WARMUP` creates fill the component
//!    cache first; every create is timed, and reported by window of how many capsules
//!    the server already hosted.
//! 2. Idle cost: the RSS of the `mur serve` process (`/proc/<pid>/status`, and
//!    `/proc/<pid>/smaps` broken down by kind of mapping) with 0 and then each of
//!    `CHECKPOINTS` idle capsules, on two servers: capsules that ran no task, and
//!    capsules that each ran one task right after being created (their loop parked
//!    again, waiting for the next). Open files and mappings are counted against the
//!    process's limits. The process-per-capsule baseline is `mur run` of the same
//!    capsule, measured the same way after one task.
//! 3. Noisy neighbour: `WATCHERS` `stream/watch` connections on one capsule, then one
//!    task streaming `CHUNKS` chunks; timed from submission to the last watcher reading
//!    the task's final status. Alone on its server; on a server with `NEIGHBOURS` parked
//!    capsules beside it; there while a capsule's driver spins
//!    (`components/driver-probe` in `spin` mode, a task burning CPU until its deadline);
//!    there while another capsule's confined shell runs `while :; do :; done`;
//!    and there while the same spinning capsule runs in a `mur run` of its own (the CPU
//!    taken from outside the server). One run of each per round, so that the shared
//!    machine's drift falls on all five alike. The spinning capsules' CPU figures from
//!    the admin API follow.
//! 4. The yields' cost: a capsule whose tool computes for about a second (fixed
//!    arithmetic in `components/tool-probe`, `compute`), the task timed from
//!    submission to its final status, on a server whose guests yield every 10 ms and
//!    on one where they yield once an hour (`MUR_TICK_MS`), alternately.
//!
//! Every read has a deadline, and each `mur` process is killed when its guard drops,
//! also on a panic. Results are plain lines on stdout.
//!
//! `MUR_BENCH_SERVE_N` lowers the largest checkpoint (default 5,000) and the number of
//! neighbours for a quick run;
//! `MUR_BENCH_SERVE_PARTS` picks parts (`density,baseline,noisy,yield`, the default all);
//! `MUR_BENCH_SERVE_ARGS` adds flags to every `mur serve` (say `--pool-slots 12000`).

mod client;

use client::*;

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio::time::timeout;

/// Creates before any is timed: the first loads the components into the process.
const WARMUP: usize = 20;
/// Creates per reported window.
const WINDOW: usize = 200;
/// Idle capsule counts at which the server's memory is read.
const CHECKPOINTS: [usize; 3] = [100, 1_000, 5_000];
/// `--max-capsules`: above every checkpoint.
const MAX_CAPSULES: usize = 6_000;
/// Watch connections of the fan-out.
const WATCHERS: usize = 100;
/// Text chunks the fan-out task's single turn streams.
const CHUNKS: usize = 2_000;
/// Rounds of the fan-out (one run of each configuration per round), after a warm-up.
const FAN_RUNS: usize = 21;
/// Parked capsules beside the fan-out in the noisy configuration.
const NEIGHBOURS: usize = 1_000;
/// `mur run` processes of the process-per-capsule baseline.
const BASELINE_RUNS: usize = 3;
/// How long memory is left to settle before it is read.
const SETTLE: Duration = Duration::from_secs(2);
/// A `Last-Event-ID` above every id a capsule writes: the watch replays nothing.
const NO_REPLAY: &str = "18446744073709551614";
/// Connects in flight at once, so the listen backlog never overflows.
const CONNECTING: usize = 64;
/// Any one connect, read or write.
/// One fan-out run, from start to end.
const RUN_LIMIT: Duration = Duration::from_secs(300);
/// `mur` to its launch line (a cold component cache compiles the components).
const LAUNCH_LIMIT: Duration = Duration::from_secs(600);
/// The spinning driver's deadline: each spinning task burns CPU this long, well past
/// the fan-out run it overlaps.
const SPIN_SECONDS: u64 = 4;

type Res<T> = Result<T, String>;

// ---------------------------------------------------------------------------------
// Capsules on disk.

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn bench_dir() -> PathBuf {
    repo().join("target").join("bench")
}

fn scratch(name: &str) -> PathBuf {
    let dir = bench_dir().join(format!("serve-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The component cache every `mur` of this bench shares: warm after the first create.
fn cache_dir() -> PathBuf {
    bench_dir().join("serve-cache")
}

/// The hosted example: queue + sleep, scripted driver, one `bash` call per task.
fn hosted() -> PathBuf {
    repo().join("examples").join("hosted")
}

/// A capsule whose every task streams `CHUNKS` chunks in one turn.
fn fan_out_capsule() -> PathBuf {
    let dir = scratch("fanout-capsule");
    let manifest = "name: serve-fanout\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  \
                    script: ./script.yaml\n  model: scripted-bench\nlifecycle:\n  \
                    task_acceptance: queue\n  after_task: sleep\n  queue_depth: 64\n";
    std::fs::write(dir.join("murmur.yaml"), manifest).unwrap();
    let chunks: Vec<String> = (0..CHUNKS).map(|i| format!("\"c{i} \"")).collect();
    let script = format!("turns:\n  - chunks: [{}]\n", chunks.join(", "));
    std::fs::write(dir.join("script.yaml"), script).unwrap();
    dir
}

/// A capsule whose driver (`components/driver-probe`, mode `spin`) never returns: each
/// task burns CPU until its deadline.
fn spin_capsule() -> Res<PathBuf> {
    let driver = Path::new(env!("MUR_GUEST_DIR")).join("mur_driver_probe.wasm");
    if !driver.is_file() {
        return Err(format!("the probe driver is missing: {}", driver.display()));
    }
    let dir = scratch("spin-capsule");
    let manifest = format!(
        "name: serve-spin\nversion: \"0.1.0\"\nartifacts:\n  - name: spin-driver\n    \
         runtime: driver\n    source: {}\ninference:\n  driver:\n    artifact: spin-driver\n    \
         config: {{mode: spin}}\n  endpoint: https://models.invalid/v1\n  model: m\n\
         capabilities:\n  network:\n    allow: [https://models.invalid]\n  limits:\n    \
         deadline_seconds: {SPIN_SECONDS}\nlifecycle:\n  task_acceptance: queue\n  \
         after_task: sleep\n",
        driver.display()
    );
    std::fs::write(dir.join("murmur.yaml"), manifest).unwrap();
    Ok(dir)
}

/// A capsule whose task runs one confined `bash` call spinning in shell code until its
/// CPU limit (`shell_cpu_seconds`) ends it.
fn shell_spin_capsule() -> PathBuf {
    let dir = scratch("shell-spin-capsule");
    let manifest = format!(
        "name: serve-shell-spin\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  \
         script: ./script.yaml\n  model: scripted-bench\ncapabilities:\n  shell:\n    \
         allow: [bash]\n  limits:\n    shell_cpu_seconds: {SPIN_SECONDS}\nlifecycle:\n  \
         task_acceptance: queue\n  after_task: sleep\n  shell_grace_secs: 60\n"
    );
    std::fs::write(dir.join("murmur.yaml"), manifest).unwrap();
    let script = "turns:\n  - tool_calls:\n      - id: t1\n        name: bash\n        \
                  input: {command: \"while :; do :; done\"}\n  - text: spun\n";
    std::fs::write(dir.join("script.yaml"), script).unwrap();
    dir
}

/// Rounds of the compute for about a second of a guest's arithmetic here.
const COMPUTE_ROUNDS: u64 = 400_000_000;
/// Timed tasks of each kind of server in the yields' cost.
const YIELD_RUNS: usize = 21;

/// A capsule whose every task calls `tool-probe`'s `compute` once, then answers.
fn compute_capsule() -> Res<PathBuf> {
    let tool = Path::new(env!("MUR_GUEST_DIR")).join("mur_tool_probe.wasm");
    if !tool.is_file() {
        return Err(format!("the probe tool is missing: {}", tool.display()));
    }
    let dir = scratch("compute-capsule");
    let manifest = format!(
        "name: serve-compute\nversion: \"0.1.0\"\nartifacts:\n  - name: probe\n    \
         runtime: tool\n    source: {}\ninference:\n  driver: scripted\n  \
         script: ./script.yaml\n  model: scripted-bench\nlifecycle:\n  \
         task_acceptance: queue\n  after_task: sleep\n",
        tool.display()
    );
    std::fs::write(dir.join("murmur.yaml"), manifest).unwrap();
    let script = format!(
        "turns:\n  - tool_calls:\n      - id: t1\n        name: probe\n        \
         input: {{probe: compute, rounds: {COMPUTE_ROUNDS}}}\n  - text: computed\n"
    );
    std::fs::write(dir.join("script.yaml"), script).unwrap();
    Ok(dir)
}

/// The compute task on a server yielding every 10 ms and on one yielding hourly.
async fn yields() -> Res<()> {
    let dir = compute_capsule()?;
    println!(
        "yields' cost: a tool computing {COMPUTE_ROUNDS} rounds of xorshift in one task, \
         submission to final status, {YIELD_RUNS} tasks on each server, alternately"
    );
    // A share of the whole machine: what is measured is the yields, never a pause.
    let whole = ["--cpu-share", "1024"];
    let ticking = Mur::serve_with("yield-10ms", None, &[], &whole)?;
    let hourly = Mur::serve_with("yield-hourly", None, &[("MUR_TICK_MS", "3600000")], &whole)?;
    let a = create(&ticking, &dir).await?;
    let b = create(&hourly, &dir).await?;
    for (mur, c) in [(&ticking, &a), (&hourly, &b)] {
        run_task(mur.addr, c)
            .await
            .map_err(|e| format!("warm-up: {e}"))?;
    }
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..YIELD_RUNS {
        let (_, t) = run_task(ticking.addr, &a)
            .await
            .map_err(|e| e.to_string())?;
        with.push(ms(t));
        let (_, t) = run_task(hourly.addr, &b).await.map_err(|e| e.to_string())?;
        without.push(ms(t));
    }
    let (w, wo) = (median(&with), median(&without));
    println!(
        "  yielding every 10 ms: median {w:.1} ms (min {:.1}, max {:.1}); hourly: median \
         {wo:.1} ms (min {:.1}, max {:.1}); ratio {:.3} (target <= 1.03)",
        with.iter().cloned().fold(f64::MAX, f64::min),
        with.iter().cloned().fold(0.0, f64::max),
        without.iter().cloned().fold(f64::MAX, f64::min),
        without.iter().cloned().fold(0.0, f64::max),
        w / wo
    );
    let figures = admin_get(&ticking, &format!("/admin/capsules/{}", a.id)).await?;
    println!("  the ticking capsule's CPU figures: {}", figures["cpu"]);
    Ok(())
}

// ---------------------------------------------------------------------------------
// `mur` processes.

/// A running `mur` (serve or run); dropping it kills the process.
struct Mur {
    child: Child,
    addr: SocketAddr,
    /// The admin token (`mur serve` only).
    admin: String,
    stderr: PathBuf,
}

impl Mur {
    /// `heartbeat`: how often idle event streams get a heartbeat, which is when the
    /// server finds a connection its client has closed.
    fn serve(name: &str, heartbeat: Option<Duration>) -> Res<Mur> {
        Mur::serve_with(name, heartbeat, &[], &[])
    }

    /// [`Mur::serve`] with more environment and flags.
    fn serve_with(
        name: &str,
        heartbeat: Option<Duration>,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Res<Mur> {
        let dir = scratch(name);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_mur"));
        if let Some(every) = heartbeat {
            cmd.env("MUR_HEARTBEAT_MS", every.as_millis().to_string());
        }
        cmd.envs(env.iter().copied());
        cmd.args(["serve", "--json", "--bind", "127.0.0.1", "--port", "0"])
            .arg("--data")
            .arg(dir.join("data"))
            .args(["--max-capsules", &MAX_CAPSULES.to_string()])
            .args(args)
            .args(extra_serve_args());
        let mut mur = Mur::launch(cmd, &dir)?;
        mur.admin = std::fs::read_to_string(dir.join("data").join("admin-token"))
            .map_err(|e| format!("the admin token: {e}"))?
            .trim()
            .to_string();
        Ok(mur)
    }

    /// `mur run` of the hosted example, shell confined as `mur serve` confines it.
    fn run(name: &str) -> Res<Mur> {
        Mur::run_manifest(name, &hosted().join("murmur.yaml"))
    }

    fn run_manifest(name: &str, manifest: &Path) -> Res<Mur> {
        let dir = scratch(name);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_mur"));
        cmd.args(["run", "--json", "--bind", "127.0.0.1", "--port", "0"])
            .args(["--containment", "scoped"])
            .arg("--manifest")
            .arg(manifest)
            .arg("--workdir")
            .arg(dir.join("work"))
            .arg("--records")
            .arg(dir.join("records"));
        std::fs::create_dir_all(dir.join("work")).unwrap();
        Mur::launch(cmd, &dir)
    }

    fn launch(mut cmd: Command, dir: &Path) -> Res<Mur> {
        let stderr = dir.join("mur.stderr");
        let mut child = cmd
            .current_dir(dir)
            .env("MUR_CACHE_DIR", cache_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .map_err(|e| format!("mur did not start: {e}"))?;
        let stdout = child.stdout.take().unwrap();
        // From here on an early return or a panic kills the process.
        let mut mur = Mur {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            admin: String::new(),
            stderr,
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut stdout = BufReader::new(stdout);
            let mut line = String::new();
            let _ = stdout.read_line(&mut line);
            let _ = tx.send(line);
            let _ = io::copy(&mut stdout, &mut io::sink());
        });
        let line = rx.recv_timeout(LAUNCH_LIMIT).unwrap_or_default();
        let launch: Value = serde_json::from_str(&line).map_err(|_| {
            format!(
                "mur printed no launch line ({line:?}); stderr:\n{}",
                mur.log()
            )
        })?;
        mur.addr = launch["address"]
            .as_str()
            .and_then(|a| a.strip_prefix("http://"))
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| format!("no address in the launch line: {line}"))?;
        Ok(mur)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn bearer(&self) -> String {
        format!("Bearer {}", self.admin)
    }
}

impl Drop for Mur {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `MUR_BENCH_SERVE_ARGS`: more flags for every `mur serve` (`--pool-slots 12000`).
fn extra_serve_args() -> Vec<String> {
    std::env::var("MUR_BENCH_SERVE_ARGS")
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect()
}

// ---------------------------------------------------------------------------------
// HTTP: every reply of `mur` but an event stream ends with `connection: close`.

/// One request to its reply: the status code and the body.
async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> io::Result<(u16, String)> {
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
    Ok((
        status,
        String::from_utf8_lossy(&reply[end + 4..]).into_owned(),
    ))
}

/// A capsule the server created.
#[derive(Clone)]
struct Created {
    id: String,
    /// `/c/<id>/`.
    path: String,
    /// `Bearer <token>`.
    bearer: String,
}

/// `POST /admin/capsules` of the manifest folder `dir`, to its `201`.
async fn create(mur: &Mur, dir: &Path) -> Res<Created> {
    let body = json!({ "path": dir }).to_string();
    let bearer = mur.bearer();
    let headers = [
        ("authorization", bearer.as_str()),
        ("content-type", "application/json"),
    ];
    let (status, body) = http(mur.addr, "POST", "/admin/capsules", &headers, &body)
        .await
        .map_err(|e| format!("POST /admin/capsules: {e}"))?;
    if status != 201 {
        return Err(format!("POST /admin/capsules answered {status}: {body}"));
    }
    let v: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    let text = |key: &str| v[key].as_str().unwrap_or_default().to_string();
    Ok(Created {
        id: text("id"),
        path: text("path"),
        bearer: format!("Bearer {}", text("token")),
    })
}

async fn admin_get(mur: &Mur, path: &str) -> Res<Value> {
    let bearer = mur.bearer();
    let (status, body) = http(mur.addr, "GET", path, &[("authorization", &bearer)], "")
        .await
        .map_err(|e| format!("GET {path}: {e}"))?;
    if status != 200 {
        return Err(format!("GET {path} answered {status}: {body}"));
    }
    serde_json::from_str(&body).map_err(|e| format!("GET {path}: {e}"))
}

// ---------------------------------------------------------------------------------
// Event streams at a capsule's address (close-delimited bodies).

const WATCH: &str = r#"{"jsonrpc":"2.0","id":1,"method":"stream/watch","params":{}}"#;

/// A `stream/watch` whose `connection-ack` has been read.
async fn open_watch(addr: SocketAddr, capsule: &Created) -> io::Result<Sse> {
    let headers = [
        ("authorization", capsule.bearer.as_str()),
        ("last-event-id", NO_REPLAY),
    ];
    let mut sse = Sse::post(addr, &capsule.path, &headers, WATCH).await?;
    let first = sse.next_frame().await?;
    let event = sse.frame(first).event.to_string();
    if event != "connection-ack" {
        return Err(io_err(format!(
            "first frame is {event:?}, not connection-ack"
        )));
    }
    Ok(sse)
}

/// A `message/stream` to the capsule, open with its first frame read.
async fn submit_open(addr: SocketAddr, capsule: &Created, text: &str) -> io::Result<Sse> {
    let headers = [("authorization", capsule.bearer.as_str())];
    let mut sse = Sse::post(addr, &capsule.path, &headers, &message_stream(text)).await?;
    let first = sse.next_frame().await?;
    let f = sse.frame(first.clone());
    if f.event == "error" || state_of(&f.data) == "rejected" {
        return Err(io_err(format!("message/stream: {} {}", f.event, f.data)));
    }
    Ok(sse)
}

/// One task to its final status: (time to its first frame, time to its end).
async fn run_task(addr: SocketAddr, capsule: &Created) -> io::Result<(Duration, Duration)> {
    let started = Instant::now();
    let sse = submit_open(addr, capsule, "bench").await?;
    let first = started.elapsed();
    finish(sse).await?;
    Ok((first, started.elapsed()))
}

// ---------------------------------------------------------------------------------
// Statistics.

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

// ---------------------------------------------------------------------------------
// Memory: /proc.

fn proc_text(pid: u32, file: &str) -> Res<String> {
    std::fs::read_to_string(format!("/proc/{pid}/{file}"))
        .map_err(|e| format!("/proc/{pid}/{file}: {e}"))
}

/// A `Key:   N kB` line of a /proc file.
fn kib_field(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// One mapping of /proc/<pid>/smaps.
struct Mapping {
    start: u64,
    end: u64,
    perms: String,
    inode: u64,
    path: String,
    rss: u64,
}

impl Mapping {
    fn size(&self) -> u64 {
        self.end - self.start
    }

    fn anonymous(&self) -> bool {
        self.inode == 0 && self.path.is_empty()
    }

    fn reserved(&self) -> bool {
        self.perms.starts_with("---")
    }
}

fn smaps(pid: u32) -> Res<Vec<Mapping>> {
    let text = proc_text(pid, "smaps")?;
    let mut maps: Vec<Mapping> = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or_default();
        if let Some((start, end)) = first.split_once('-')
            && let (Ok(start), Ok(end)) =
                (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
        {
            let perms = words.next().unwrap_or_default().to_string();
            let inode = words.nth(2).and_then(|i| i.parse().ok()).unwrap_or(0);
            let path = words.collect::<Vec<_>>().join(" ");
            maps.push(Mapping {
                start,
                end,
                perms,
                inode,
                path,
                rss: 0,
            });
        } else if let Some(rss) = line.strip_prefix("Rss:")
            && let Some(last) = maps.last_mut()
        {
            last.rss = rss
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .unwrap_or(0);
        }
    }
    Ok(maps)
}

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// Resident KiB by kind of mapping, and how many mappings of a kind there are.
#[derive(Clone, Default)]
struct Breakdown {
    /// WebAssembly linear memories: what lies before a reservation of 1 GiB or more
    /// (wasmtime reserves 4 GiB and guards per memory).
    linear: u64,
    linear_count: u64,
    /// Stacks: an anonymous mapping right above a guard page of one page (fiber
    /// stacks of async calls, threads' stacks), by size in KiB.
    stacks: BTreeMap<u64, (u64, u64)>,
    /// The main heap and glibc's 64 MiB malloc arenas (other threads' heaps).
    malloc: u64,
    /// Every other anonymous mapping (large allocations are mapped on their own).
    other_anon: u64,
    /// File-backed: the binary, libraries, the mapped compiled components.
    file: u64,
    mappings: u64,
}

impl Breakdown {
    fn of(maps: &[Mapping]) -> Breakdown {
        let mut b = Breakdown {
            mappings: maps.len() as u64,
            ..Breakdown::default()
        };
        let mut linear = vec![false; maps.len()];
        for (k, m) in maps.iter().enumerate() {
            if !(m.anonymous() && m.reserved() && m.size() >= GIB) {
                continue;
            }
            b.linear_count += 1;
            let mut i = k;
            while i > 0 && maps[i - 1].end == maps[i].start && !maps[i - 1].reserved() {
                i -= 1;
                linear[i] = true;
            }
        }
        for (i, m) in maps.iter().enumerate() {
            let contiguous_next = maps.get(i + 1).filter(|n| n.start == m.end);
            let guard_below = i > 0 && {
                let p = &maps[i - 1];
                p.end == m.start && p.reserved() && p.anonymous() && p.size() == 4096
            };
            if linear[i] {
                b.linear += m.rss;
            } else if m.path == "[heap]" {
                b.malloc += m.rss;
            } else if !m.anonymous() {
                b.file += m.rss;
            } else if m.reserved() {
                // Reserved address space holds nothing resident.
            } else if contiguous_next
                .is_some_and(|n| n.anonymous() && n.reserved() && m.size() + n.size() == 64 * MIB)
            {
                b.malloc += m.rss;
            } else if guard_below {
                let entry = b.stacks.entry(m.size() / 1024).or_default();
                entry.0 += 1;
                entry.1 += m.rss;
            } else {
                b.other_anon += m.rss;
            }
        }
        b
    }

    fn stacks_rss(&self) -> u64 {
        self.stacks.values().map(|(_, rss)| rss).sum()
    }
}

/// What the process holds at one moment.
#[derive(Clone, Default)]
struct Sample {
    capsules: usize,
    vm_rss: u64,
    rss_anon: u64,
    rss_file: u64,
    pss: u64,
    breakdown: Breakdown,
    fds: u64,
    fd_limit: u64,
    threads: u64,
    children: u64,
    children_rss: u64,
    /// The capsules' linear memory, as the admin API reports it (`memory_bytes`).
    budget_bytes: u64,
}

fn sample(pid: u32, capsules: usize) -> Res<Sample> {
    let status = proc_text(pid, "status")?;
    let rollup = proc_text(pid, "smaps_rollup")?;
    let limits = proc_text(pid, "limits")?;
    let fd_limit = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map_err(|e| format!("/proc/{pid}/fd: {e}"))?
        .count() as u64;
    let (children, children_rss) = children_of(pid);
    Ok(Sample {
        capsules,
        vm_rss: kib_field(&status, "VmRSS"),
        rss_anon: kib_field(&status, "RssAnon"),
        rss_file: kib_field(&status, "RssFile"),
        pss: kib_field(&rollup, "Pss"),
        breakdown: Breakdown::of(&smaps(pid)?),
        fds,
        fd_limit,
        threads: kib_field(&status, "Threads"),
        children,
        children_rss,
        budget_bytes: 0,
    })
}

/// The kernel's ceiling on one process's mappings.
fn max_map_count() -> u64 {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Live processes whose parent is `pid`, and their summed VmRSS in KiB.
fn children_of(pid: u32) -> (u64, u64) {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return (0, 0);
    };
    let mut count = 0;
    let mut rss = 0;
    for e in entries.flatten() {
        let Some(child) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(status) = proc_text(child, "status") else {
            continue;
        };
        if kib_field(&status, "PPid") == u64::from(pid) {
            count += 1;
            rss += kib_field(&status, "VmRSS");
        }
    }
    (count, rss)
}

/// The capsules' `memory_bytes`, summed over `GET /admin/capsules`.
async fn budget_bytes(mur: &Mur) -> Res<u64> {
    let list = admin_get(mur, "/admin/capsules").await?;
    Ok(list["capsules"]
        .as_array()
        .map(|all| all.iter().filter_map(|c| c["memory_bytes"].as_u64()).sum())
        .unwrap_or(0))
}

// ---------------------------------------------------------------------------------
// 1 and 2: create to ready, and memory by idle capsule count.

/// One timed create: (capsules hosted before it, to the 201, to ready).
type Timed = (usize, Duration, Duration);

struct Density {
    label: &'static str,
    with_task: bool,
    timed: Vec<Timed>,
    samples: Vec<Sample>,
    /// Why it stopped short of the largest checkpoint.
    stopped: Option<String>,
}

/// Creates capsules one by one up to the largest checkpoint, reading memory at each.
/// `with_task`: every capsule runs one task right after it answers; its readiness is
/// then the task's first frame, otherwise a `stream/watch`'s ack.
async fn density(mur: &Mur, label: &'static str, with_task: bool, top: usize) -> Density {
    let mut out = Density {
        label,
        with_task,
        timed: Vec::new(),
        samples: Vec::new(),
        stopped: None,
    };
    tokio::time::sleep(SETTLE).await;
    match sample(mur.pid(), 0) {
        Ok(s) => out.samples.push(s),
        Err(e) => {
            out.stopped = Some(e);
            return out;
        }
    }
    let checkpoints: Vec<usize> = CHECKPOINTS.iter().copied().filter(|&n| n <= top).collect();
    let hosted = hosted();
    let begun = Instant::now();
    for n in 0..top {
        match create_one(mur, &hosted, with_task).await {
            Ok((created, ready)) => out.timed.push((n, created, ready)),
            Err(e) => {
                out.stopped = Some(format!("capsule {} of {top}: {e}", n + 1));
                // What the server holds at the most it reached.
                tokio::time::sleep(SETTLE).await;
                if let Ok(mut s) = sample(mur.pid(), n) {
                    s.budget_bytes = budget_bytes(mur).await.unwrap_or(0);
                    out.samples.push(s);
                }
                break;
            }
        }
        let hosting = n + 1;
        if hosting % 500 == 0 {
            eprintln!(
                "  [{label}] {hosting} capsules, {:.0} s",
                begun.elapsed().as_secs_f64()
            );
        }
        if checkpoints.contains(&hosting) {
            tokio::time::sleep(SETTLE).await;
            match sample(mur.pid(), hosting) {
                Ok(mut s) => {
                    s.budget_bytes = budget_bytes(mur).await.unwrap_or(0);
                    out.samples.push(s);
                }
                Err(e) => {
                    out.stopped = Some(e);
                    break;
                }
            }
        }
    }
    out
}

async fn create_one(mur: &Mur, dir: &Path, with_task: bool) -> Res<(Duration, Duration)> {
    let started = Instant::now();
    let capsule = create(mur, dir).await?;
    let created = started.elapsed();
    if with_task {
        let sse = submit_open(mur.addr, &capsule, "bench")
            .await
            .map_err(|e| format!("{}: first task: {e}", capsule.id))?;
        let ready = started.elapsed();
        finish(sse)
            .await
            .map_err(|e| format!("{}: first task: {e}", capsule.id))?;
        return Ok((created, ready));
    }
    let watch = open_watch(mur.addr, &capsule)
        .await
        .map_err(|e| format!("{}: stream/watch: {e}", capsule.id))?;
    let ready = started.elapsed();
    drop(watch);
    Ok((created, ready))
}

fn report_creates(d: &Density) {
    let hosted = d.timed.len();
    println!(
        "create to ready, {} ({} creates; ready = {}):",
        d.label,
        hosted,
        if d.with_task {
            "the first task's first frame"
        } else {
            "stream/watch connection-ack"
        }
    );
    if let Some((_, created, ready)) = d.timed.first() {
        println!(
            "  first create of the process (it loads the components): 201 in {:.2} ms, ready in {:.2} ms",
            ms(*created),
            ms(*ready)
        );
    }
    // The first window after the warm-up, the last below 1,000 hosted, the last of all.
    let mut windows = vec![(1, WARMUP), (WARMUP, WARMUP + WINDOW), (800, 1_000)];
    if hosted > 1_000 + WINDOW {
        windows.push((hosted - WINDOW, hosted));
    }
    for (from, to) in windows {
        if to > hosted {
            continue;
        }
        let window = &d.timed[from..to];
        let created: Vec<f64> = window.iter().map(|t| ms(t.1)).collect();
        let ready: Vec<f64> = window.iter().map(|t| ms(t.2)).collect();
        println!(
            "  hosting {from}..{}: 201 median {:.2} ms p90 {:.2} ms; ready median {:.2} ms p90 {:.2} ms ({} creates)",
            to - 1,
            median(&created),
            p90(&created),
            median(&ready),
            p90(&ready),
            to - from
        );
    }
}

fn report_memory(d: &Density) {
    println!("memory, {}:", d.label);
    let Some(zero) = d.samples.first() else {
        return;
    };
    for s in &d.samples {
        let b = &s.breakdown;
        let per = |now: u64, then: u64| {
            if s.capsules == 0 {
                0.0
            } else {
                (now as f64 - then as f64) / s.capsules as f64
            }
        };
        println!(
            "  N={:>5}: VmRSS {:>8.1} MiB (anon {:.1}, file {:.1}, PSS {:.1}); per capsule {:.1} KiB",
            s.capsules,
            s.vm_rss as f64 / 1024.0,
            s.rss_anon as f64 / 1024.0,
            s.rss_file as f64 / 1024.0,
            s.pss as f64 / 1024.0,
            per(s.vm_rss, zero.vm_rss),
        );
        println!(
            "           per capsule: linear memory {:.1} KiB ({} memories, admin memory_bytes {:.1} KiB), \
             stacks {:.1} KiB, malloc heap {:.1} KiB, other anon {:.1} KiB, files {:.1} KiB",
            per(b.linear, zero.breakdown.linear),
            b.linear_count,
            if s.capsules == 0 {
                0.0
            } else {
                s.budget_bytes as f64 / 1024.0 / s.capsules as f64
            },
            per(b.stacks_rss(), zero.breakdown.stacks_rss()),
            per(b.malloc, zero.breakdown.malloc),
            per(b.other_anon, zero.breakdown.other_anon),
            per(b.file, zero.breakdown.file),
        );
        let stacks: Vec<String> = b
            .stacks
            .iter()
            .filter(|(_, (count, _))| *count > 1)
            .map(|(size, (count, rss))| format!("{count} x {size} KiB ({rss} KiB resident)"))
            .collect();
        println!(
            "           open files {} of {}, mappings {} of {}, threads {}, child processes {} ({} KiB); stacks: {}",
            s.fds,
            s.fd_limit,
            b.mappings,
            max_map_count(),
            s.threads,
            s.children,
            s.children_rss,
            stacks.join(", ")
        );
    }
    for pair in d.samples.windows(2).skip(1) {
        let (a, b) = (&pair[0], &pair[1]);
        println!(
            "  marginal, N={} to N={}: {:.1} KiB per capsule (VmRSS), {:.1} KiB anonymous",
            a.capsules,
            b.capsules,
            (b.vm_rss as f64 - a.vm_rss as f64) / (b.capsules - a.capsules) as f64,
            (b.rss_anon as f64 - a.rss_anon as f64) / (b.capsules - a.capsules) as f64,
        );
    }
    if let Some(last) = d.samples.last().filter(|s| s.capsules > 0) {
        let per = (last.vm_rss as f64 - zero.vm_rss as f64) / last.capsules as f64;
        println!(
            "  bytes per idle capsule at N={}: {:.1} KiB -> {:.0} capsules per GiB",
            last.capsules,
            per,
            (1024.0 * 1024.0) / per
        );
    }
    if let Some(why) = &d.stopped {
        println!("  stopped early: {why}");
    }
}

// ---------------------------------------------------------------------------------
// The process-per-capsule baseline.

async fn baseline() -> Res<(Vec<u64>, Vec<u64>, Breakdown)> {
    let mut before = Vec::new();
    let mut after = Vec::new();
    let mut last = Breakdown::default();
    for i in 0..BASELINE_RUNS {
        let mur = Mur::run(&format!("run-{i}"))?;
        tokio::time::sleep(SETTLE).await;
        before.push(sample(mur.pid(), 0)?.vm_rss);
        let sse = Sse::post(mur.addr, "/", &[], &message_stream("bench"))
            .await
            .map_err(|e| format!("mur run: task: {e}\n{}", mur.log()))?;
        finish(sse)
            .await
            .map_err(|e| format!("mur run: task: {e}"))?;
        tokio::time::sleep(SETTLE).await;
        let s = sample(mur.pid(), 1)?;
        after.push(s.vm_rss);
        last = s.breakdown;
    }
    Ok((before, after, last))
}

// ---------------------------------------------------------------------------------
// 3: the noisy neighbour.

struct Watched {
    texts: u64,
    lagged: u64,
    final_task: String,
    final_state: String,
    final_at: Instant,
}

async fn watcher(
    addr: SocketAddr,
    capsule: Created,
    ready: mpsc::UnboundedSender<Res<()>>,
    permit: OwnedSemaphorePermit,
) -> io::Result<Watched> {
    let opened = open_watch(addr, &capsule).await;
    drop(permit);
    let mut sse = match opened {
        Ok(sse) => {
            let _ = ready.send(Ok(()));
            sse
        }
        Err(e) => {
            let _ = ready.send(Err(format!("stream/watch: {e}")));
            return Err(e);
        }
    };
    let (mut texts, mut lagged) = (0, 0);
    loop {
        let block = sse.next_frame().await?;
        let f = sse.frame(block);
        match &*f.event {
            "text" if f.data.ends_with(r#""final":false}"#) => texts += 1,
            "lagged" => lagged += 1,
            "status" if f.data.ends_with(r#""final":true}"#) => {
                return Ok(Watched {
                    texts,
                    lagged,
                    final_task: task_of(&f.data).to_string(),
                    final_state: state_of(&f.data).to_string(),
                    final_at: Instant::now(),
                });
            }
            _ => {}
        }
    }
}

/// CPU time the process's threads have run, in nanoseconds (`schedstat`, exact where
/// `/proc/<pid>/stat` counts ticks).
fn cpu_ns(pid: u32) -> u64 {
    let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    threads
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|line| line.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Processes whose CPU a fan-out reads, with their names; this one is added as `client`.
type Measured<'a> = &'a [(&'a str, u32)];

/// One fan-out's outcome.
struct FanOut {
    /// Submission to the last watcher's final status.
    time: Duration,
    /// Fewest text frames a watcher read, and the lagged frames of all.
    fewest: u64,
    lagged: u64,
    /// From submission until every watcher was done: the wall time, and the CPU time
    /// of each watched process then of this one, in nanoseconds.
    wall_ns: u64,
    cpu_ns: Vec<u64>,
}

fn cpu_of(measured: Measured<'_>) -> Vec<u64> {
    let mut out: Vec<u64> = measured.iter().map(|(_, pid)| cpu_ns(*pid)).collect();
    out.push(cpu_ns(std::process::id()));
    out
}

/// One fan-out of `WATCHERS` watchers and a task on `capsule`.
async fn fan_out(addr: SocketAddr, capsule: &Created, measured: Measured<'_>) -> Res<FanOut> {
    let deadline = tokio::time::Instant::now() + RUN_LIMIT;
    let (ready_tx, mut ready_rx) = mpsc::unbounded_channel();
    let gate = Arc::new(Semaphore::new(CONNECTING));
    // Dropping the set (on any early return) aborts the watchers and closes them.
    let mut watchers = JoinSet::new();
    for _ in 0..WATCHERS {
        let permit = timeout(IO_LIMIT, gate.clone().acquire_owned())
            .await
            .map_err(|_| "connecting timed out".to_string())?
            .unwrap();
        watchers.spawn(watcher(addr, capsule.clone(), ready_tx.clone(), permit));
    }
    drop(ready_tx);
    for _ in 0..WATCHERS {
        match tokio::time::timeout_at(deadline, ready_rx.recv()).await {
            Ok(Some(Ok(()))) => {}
            Ok(Some(Err(e))) => return Err(e),
            Ok(None) => return Err("a watcher ended before its ack".into()),
            Err(_) => return Err("the watchers did not all attach in time".into()),
        }
    }
    let cpu_before = cpu_of(measured);
    let submitted = Instant::now();
    let sse = submit_open(addr, capsule, "fan out")
        .await
        .map_err(|e| format!("submitting: {e}"))?;
    let task = tokio::time::timeout_at(deadline, finish(sse))
        .await
        .map_err(|_| "the task did not end in time".to_string())?
        .map_err(|e| format!("the task: {e}"))?;
    let mut last = submitted;
    let (mut fewest, mut lagged) = (u64::MAX, 0);
    while let Some(joined) = tokio::time::timeout_at(deadline, watchers.join_next())
        .await
        .map_err(|_| "the watchers did not all read the final status in time".to_string())?
    {
        let w = joined
            .map_err(|e| format!("watcher: {e}"))?
            .map_err(|e| format!("watcher: {e}"))?;
        if w.final_task != task || w.final_state != "completed" {
            return Err(format!(
                "a watcher's first final status was {} of {}, not completed of {task}",
                w.final_state, w.final_task
            ));
        }
        last = last.max(w.final_at);
        fewest = fewest.min(w.texts);
        lagged += w.lagged;
    }
    let wall = submitted.elapsed();
    let cpu = cpu_of(measured);
    Ok(FanOut {
        time: last - submitted,
        fewest,
        lagged,
        wall_ns: wall.as_nanos() as u64,
        cpu_ns: cpu
            .iter()
            .zip(&cpu_before)
            .map(|(after, before)| after.saturating_sub(*before))
            .collect(),
    })
}

/// Reads a stream to its first final status, whatever its state; returns the state.
async fn final_state(mut sse: Sse) -> io::Result<String> {
    loop {
        let block = sse.next_frame().await?;
        let f = sse.frame(block);
        if f.event == "status" && f.data.ends_with(r#""final":true}"#) {
            return Ok(state_of(&f.data).to_string());
        }
        if f.event == "error" {
            return Err(io_err(format!("error {}", &f.data)));
        }
    }
}

/// Where a spinning task can be started: a capsule of the fleet, or `mur run`.
struct Spinner<'a> {
    addr: SocketAddr,
    capsule: Created,
    /// The fleet, to ask for the capsule's state.
    fleet: Option<&'a Mur>,
}

/// A fan-out while a spinning task runs: the task is started, left to spin for a
/// moment, then the fan-out runs; it counts only if the task still spins at its end.
/// Waits for the task to end at its deadline before returning.
async fn fan_out_spinning(
    addr: SocketAddr,
    fan: &Created,
    spinner: &Spinner<'_>,
    measured: Measured<'_>,
) -> Res<FanOut> {
    let sse = submit_open(spinner.addr, &spinner.capsule, "spin")
        .await
        .map_err(|e| format!("the spinning task: {e}"))?;
    let spinning = tokio::spawn(final_state(sse));
    tokio::time::sleep(Duration::from_millis(300)).await;
    if let Some(fleet) = spinner.fleet {
        let path = format!("/admin/capsules/{}", spinner.capsule.id);
        let state = admin_get(fleet, &path).await?;
        if state["state"] != "running" {
            return Err(format!("the spinning capsule is {}", state["state"]));
        }
    }
    let result = fan_out(addr, fan, measured).await;
    if spinning.is_finished() {
        return Err("the spinning task ended before the fan-out did".into());
    }
    let limit = Duration::from_secs(SPIN_SECONDS) + IO_LIMIT;
    match timeout(limit, spinning).await {
        Ok(Ok(Ok(_state))) => result,
        Ok(Ok(Err(e))) => Err(format!("the spinning task: {e}")),
        Ok(Err(e)) => Err(format!("the spinning task: {e}")),
        Err(_) => Err("the spinning task did not end at its deadline".into()),
    }
}

/// The samples of one configuration of the fan-out.
#[derive(Default)]
struct Runs {
    times: Vec<f64>,
    fewest: Option<u64>,
    lagged: u64,
    wall_ns: u64,
    /// Per watched process, then this one.
    cpu_ns: Vec<u64>,
    names: Vec<String>,
    failed: Vec<String>,
}

impl Runs {
    fn add(&mut self, run: Res<FanOut>, measured: Measured<'_>) {
        match run {
            Ok(r) => {
                self.times.push(ms(r.time));
                self.fewest = Some(self.fewest.map_or(r.fewest, |f| f.min(r.fewest)));
                self.lagged += r.lagged;
                self.wall_ns += r.wall_ns;
                self.cpu_ns.resize(r.cpu_ns.len(), 0);
                for (sum, n) in self.cpu_ns.iter_mut().zip(&r.cpu_ns) {
                    *sum += n;
                }
                self.names = measured.iter().map(|(name, _)| name.to_string()).collect();
                self.names.push("client".into());
            }
            Err(e) => self.failed.push(e),
        }
    }

    /// Cores each process kept busy while the fan-outs ran.
    fn cores(&self) -> String {
        let wall = self.wall_ns.max(1) as f64;
        let each: Vec<String> = self
            .names
            .iter()
            .zip(&self.cpu_ns)
            .map(|(name, cpu)| format!("{name} {:.2}", *cpu as f64 / wall))
            .collect();
        each.join(", ")
    }

    fn median(&self) -> Option<f64> {
        (!self.times.is_empty()).then(|| median(&self.times))
    }

    fn report(&self, label: &str) {
        let Some(m) = self.median() else {
            println!("  {label}: no run succeeded: {:?}", self.failed);
            return;
        };
        let t = &self.times;
        println!(
            "  {label}: median {m:.1} ms (p90 {:.1}, min {:.1}, max {:.1}; {} runs); fewest text frames \
             {} of {CHUNKS}; lagged frames {}",
            p90(t),
            t.iter().cloned().fold(f64::MAX, f64::min),
            t.iter().cloned().fold(0.0, f64::max),
            t.len(),
            self.fewest.unwrap_or(0),
            self.lagged
        );
        println!(
            "    cores busy from submission to the last watcher: {}",
            self.cores()
        );
        for e in &self.failed {
            println!("    a run failed: {e}");
        }
    }
}

/// `neighbours` capsules of the hosted example, each with one task run: parked.
async fn park_neighbours(mur: &Mur, neighbours: usize) -> Res<()> {
    let hosted = hosted();
    let begun = Instant::now();
    for n in 0..neighbours {
        let capsule = create(mur, &hosted)
            .await
            .map_err(|e| format!("neighbour {}: {e}", n + 1))?;
        run_task(mur.addr, &capsule)
            .await
            .map_err(|e| format!("neighbour {}: task: {e}", n + 1))?;
    }
    eprintln!(
        "  [noisy] {neighbours} parked neighbours in {:.0} s",
        begun.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The fan-out in four configurations, one run of each per round so that the
/// machine's drift (it is shared) falls on all of them alike.
async fn noisy(spin_dir: &Path, neighbours: usize) -> Res<()> {
    let fan_dir = fan_out_capsule();
    println!(
        "noisy neighbour: {WATCHERS} stream/watch connections on one capsule, then one task of \
         {CHUNKS} chunks; submit to the last watcher's final status; {FAN_RUNS} rounds, one run \
         of each configuration per round"
    );
    let alone = Mur::serve("alone", None)?;
    let alone_fan = create(&alone, &fan_dir).await?;
    let busy = Mur::serve("noisy", None)?;
    let fan = create(&busy, &fan_dir).await?;
    park_neighbours(&busy, neighbours).await?;
    let spin = create(&busy, spin_dir).await?;
    let inside = Spinner {
        addr: busy.addr,
        capsule: spin,
        fleet: Some(&busy),
    };
    // The same spinning capsule in a process of its own: a core taken from outside.
    let outside_run = Mur::run_manifest("spin-run", &spin_dir.join("murmur.yaml"))?;
    let outside = Spinner {
        addr: outside_run.addr,
        capsule: Created {
            id: "mur run".into(),
            path: "/".into(),
            bearer: String::new(),
        },
        fleet: None,
    };
    for (mur, capsule) in [(&alone, &alone_fan), (&busy, &fan)] {
        fan_out(mur.addr, capsule, &[])
            .await
            .map_err(|e| format!("warm-up: {e}"))?;
    }
    let alone_cpu = [("server", alone.pid())];
    let busy_cpu = [("server", busy.pid())];
    let outside_cpu = [
        ("server", busy.pid()),
        ("spinning mur run", outside_run.pid()),
    ];
    let shell_spin = create(&busy, &shell_spin_capsule()).await?;
    let shell = Spinner {
        addr: busy.addr,
        capsule: shell_spin.clone(),
        fleet: Some(&busy),
    };
    let mut runs: [Runs; 5] = Default::default();
    for _ in 0..FAN_RUNS {
        let run = fan_out(alone.addr, &alone_fan, &alone_cpu).await;
        runs[0].add(run, &alone_cpu);
        let run = fan_out(busy.addr, &fan, &busy_cpu).await;
        runs[1].add(run, &busy_cpu);
        let run = fan_out_spinning(busy.addr, &fan, &inside, &busy_cpu).await;
        runs[2].add(run, &busy_cpu);
        let run = fan_out_spinning(busy.addr, &fan, &outside, &outside_cpu).await;
        runs[3].add(run, &outside_cpu);
        let run = fan_out_spinning(busy.addr, &fan, &shell, &busy_cpu).await;
        runs[4].add(run, &busy_cpu);
    }
    runs[0].report("alone on its server");
    runs[1].report(&format!("beside {neighbours} parked capsules"));
    runs[2].report(&format!(
        "beside {neighbours} parked capsules and one spinning driver in the same server"
    ));
    runs[3].report(&format!(
        "beside {neighbours} parked capsules, the spinning capsule in a `mur run` of its own"
    ));
    runs[4].report(&format!(
        "beside {neighbours} parked capsules and one capsule whose shell spins"
    ));
    let ratio = |i: usize| match (runs[i].median(), runs[0].median()) {
        (Some(x), Some(a)) => format!("{:.2}", x / a),
        _ => "n/a".into(),
    };
    println!(
        "  ratios to alone: parked {}; spinning in the server {} (target <= 1.10); spinning in \
         another process {}; a shell spinning in the server {} (target <= 1.10)",
        ratio(1),
        ratio(2),
        ratio(3),
        ratio(4)
    );
    for (label, id) in [("driver", &inside.capsule.id), ("shell", &shell_spin.id)] {
        let figures = admin_get(&busy, &format!("/admin/capsules/{id}")).await?;
        println!(
            "  the spinning {label}'s capsule, CPU figures: {}",
            figures["cpu"]
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------

fn main() {
    let top = std::env::var("MUR_BENCH_SERVE_N")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(CHECKPOINTS[CHECKPOINTS.len() - 1]);
    let parts = std::env::var("MUR_BENCH_SERVE_PARTS")
        .unwrap_or_else(|_| "density,baseline,noisy,yield".into());
    let client = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "mur serve density benchmark: release `mur serve` on 127.0.0.1, the hosted example \
         (queue + sleep, scripted driver, one confined bash call per task); extra serve flags: {:?}",
        extra_serve_args()
    );

    if parts.contains("density") {
        for (name, label, with_task) in [
            ("bare", "capsules that ran no task", false),
            ("parked", "capsules that each ran one task", true),
        ] {
            // The readiness watches are closed at once; a short heartbeat lets the
            // server find that out before the memory is read.
            let heartbeat = (!with_task).then_some(Duration::from_millis(250));
            let mur = match Mur::serve(name, heartbeat) {
                Ok(mur) => mur,
                Err(e) => {
                    println!("{label}: {e}");
                    continue;
                }
            };
            let d = client.block_on(density(&mur, label, with_task, top));
            report_creates(&d);
            report_memory(&d);
            if d.stopped.is_some() {
                let log = mur.log();
                let tail: Vec<&str> = log.lines().rev().take(10).collect();
                println!("  mur stderr (last lines, newest first): {tail:?}");
            }
        }
    }

    if parts.contains("baseline") {
        println!(
            "process per capsule: `mur run` of the hosted example (--containment scoped), \
             VmRSS {} s after launch and {} s after one task ({BASELINE_RUNS} processes)",
            SETTLE.as_secs(),
            SETTLE.as_secs()
        );
        match client.block_on(baseline()) {
            Ok((before, after, b)) => println!(
                "  before any task median {:.1} MiB; after one task median {:.1} MiB \
                 (linear memory {:.1} MiB in {} memories, malloc {:.1} MiB, files {:.1} MiB)",
                median(&before) as f64 / 1024.0,
                median(&after) as f64 / 1024.0,
                b.linear as f64 / 1024.0,
                b.linear_count,
                b.malloc as f64 / 1024.0,
                b.file as f64 / 1024.0
            ),
            Err(e) => println!("  failed: {e}"),
        }
    }

    if parts.contains("yield")
        && let Err(e) = client.block_on(yields())
    {
        println!("  failed: {e}");
    }

    if parts.contains("noisy") {
        let result = spin_capsule()
            .and_then(|spinner| client.block_on(noisy(&spinner, NEIGHBOURS.min(top))));
        if let Err(e) = result {
            println!("  failed: {e}");
        }
    }
    client.shutdown_background();
}
