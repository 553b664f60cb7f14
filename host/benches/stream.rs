//! Streaming benchmark (`cargo bench -p mur --bench stream`): the release `mur run`
//! (`--lifecycle-task-acceptance queue --lifecycle-after-task sleep`, scripted driver)
//! on 127.0.0.1, driven by a tokio client in this process.
//!
//! 1. Fan-out: N `stream/watch` connections (no replay), one task over `message/stream`
//!    whose single turn streams `CHUNKS` text chunks. Per connection: the text frames of
//!    that task it read and the time from submission to its final status; per run, the
//!    `lagged` frames and the aggregate frames per second (every frame with an id that
//!    reached a watcher / time until the last watcher read the final status).
//! 2. Baseline: a bare hyper 1 HTTP/1.1 server in this process (on a runtime of its
//!    own) that fans out the same frame bytes through `StreamBody` over per-connection
//!    `mpsc` channels of 128, read by the same client (which de-chunks hyper's body), at
//!    N = `BASELINE_N`: lossless (a feeder task per connection waits on its channel) and
//!    lossy (one publisher that never waits, as ours, dropping where a channel is full).
//! 3. Replay: after a task that wrote more than 512 frames, a new `stream/watch` with
//!    `Last-Event-ID: 0`, from connecting to reading the gap frame and 512 replayed frames.
//! 4. Memory: the RSS of a fresh `mur` process with no connection and with
//!    `IDLE_CONNECTIONS` idle `stream/watch` connections.
//!
//! Every read has a deadline, and the `mur` process is killed when its guard drops,
//! also on a panic. Results are plain lines on stdout.

#[allow(
    dead_code,
    reason = "the benches' shared client; this one uses part of it"
)]
mod client;
mod mur;

use client::*;
use mur::{Mur, cache};

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::StreamBody;
use hyper::body::Frame as BodyFrame;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio::time::timeout;

/// Text chunks the task's single turn streams.
const CHUNKS: usize = 2_000;
/// (watch connections, runs).
const FAN_OUT: [(usize, usize); 3] = [(1, 5), (100, 5), (1000, 3)];
const BASELINE_N: usize = 100;
const BASELINE_RUNS: usize = 5;
const REPLAY_RECONNECTS: usize = 50;
/// The seed's replay ring.
const REPLAY_RING: usize = 512;
const IDLE_CONNECTIONS: usize = 1_000;
/// The per-connection queue of the server, mirrored by the baseline's channels.
const QUEUE_CAPACITY: usize = 128;
/// A `Last-Event-ID` above every id the capsule writes: the watch replays nothing.
const NO_REPLAY: &str = "18446744073709551614";
/// Connects (with their request and first frame) in flight at once, so the listen
/// backlog never overflows into SYN retries.
const CONNECTING: usize = 64;
/// Any one read, connect or write.
/// One fan-out run or one phase of connecting, from start to end.
const RUN_LIMIT: Duration = Duration::from_secs(300);
/// `mur run` to its launch line (a cold component cache compiles the components).
const LAUNCH_LIMIT: Duration = Duration::from_secs(600);
/// The open-file limit the bench wants (the client's and `mur`'s connections).
const WANT_OPEN_FILES: libc::rlim_t = 8_192;

type Res<T> = Result<T, String>;

// ---------------------------------------------------------------------------------
// The capsule and the `mur` process.

fn scratch(name: &str) -> PathBuf {
    mur::scratch("stream", name)
}

fn chunk(i: usize) -> String {
    format!("c{i} ")
}

/// A capsule whose script has `turns` turns, each streaming `CHUNKS` chunks.
fn capsule(name: &str, turns: usize) -> PathBuf {
    let dir = scratch(name);
    let manifest = "name: stream-bench\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  \
                    script: ./script.yaml\n  model: scripted-bench\nlifecycle:\n  queue_depth: 64\n";
    std::fs::write(dir.join("murmur.yaml"), manifest).unwrap();
    let chunks: Vec<String> = (0..CHUNKS).map(|i| format!("\"{}\"", chunk(i))).collect();
    let turn = format!("  - chunks: [{}]\n", chunks.join(", "));
    std::fs::write(
        dir.join("script.yaml"),
        format!("turns:\n{}", turn.repeat(turns)),
    )
    .unwrap();
    dir
}

/// `VmRSS` of `mur`, in KiB.
fn rss_kib(mur: &Mur) -> Res<u64> {
    mur.status_kib("VmRSS:")
}

/// Starts `mur run` on `capsule`.
fn start(capsule: &Path) -> Mur {
    Mur::start(capsule, &cache("stream-cache"), LAUNCH_LIMIT)
}

/// Raises this process's soft open-file limit (and the hard one when it is too low and
/// we may); `mur` inherits it. Returns the soft limit in force.
fn raise_open_files() -> libc::rlim_t {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed to them.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        if lim.rlim_max != libc::RLIM_INFINITY && lim.rlim_max < WANT_OPEN_FILES {
            let raised = libc::rlimit {
                rlim_cur: WANT_OPEN_FILES,
                rlim_max: WANT_OPEN_FILES,
            };
            libc::setrlimit(libc::RLIMIT_NOFILE, &raised);
        } else if lim.rlim_cur < WANT_OPEN_FILES {
            lim.rlim_cur = WANT_OPEN_FILES;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
    }
    lim.rlim_cur
}

const WATCH: &str = r#"{"jsonrpc":"2.0","id":1,"method":"stream/watch","params":{}}"#;

/// A `stream/watch` whose `connection-ack` has been read.
async fn open_watch(addr: SocketAddr, last_event_id: &str) -> io::Result<Sse> {
    let mut sse = Sse::post(addr, "/", &[("last-event-id", last_event_id)], WATCH).await?;
    let first = sse.next_frame().await?;
    let event = sse.frame(first).event.to_string();
    if event != "connection-ack" {
        return Err(io_err(format!(
            "first frame is {event:?}, not connection-ack"
        )));
    }
    Ok(sse)
}

/// What one watch connection read until the first final status.
#[derive(Default)]
struct Watched {
    /// Text frames with `"final":false`, per task id.
    texts: Vec<(String, u64)>,
    /// Every frame with an id (a task's frames).
    frames: u64,
    lagged: u64,
    missed: u64,
    final_task: String,
    final_state: String,
    final_at: Option<Instant>,
}

async fn watcher(
    addr: SocketAddr,
    ready: mpsc::UnboundedSender<Res<()>>,
    permit: OwnedSemaphorePermit,
) -> io::Result<Watched> {
    let opened = open_watch(addr, NO_REPLAY).await;
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
    let mut w = Watched::default();
    loop {
        let block = sse.next_frame().await?;
        let f = sse.frame(block);
        if f.id.is_some() {
            w.frames += 1;
        }
        match &*f.event {
            "text" if f.data.ends_with(r#""final":false}"#) => {
                let task = task_of(&f.data);
                match w.texts.iter_mut().find(|(t, _)| t == task) {
                    Some((_, n)) => *n += 1,
                    None => w.texts.push((task.to_string(), 1)),
                }
            }
            "lagged" => {
                w.lagged += 1;
                w.missed += serde_json::from_str::<Value>(&f.data)
                    .ok()
                    .and_then(|v| v["missed"].as_u64())
                    .unwrap_or(0);
            }
            "status" if f.data.ends_with(r#""final":true}"#) => {
                w.final_at = Some(Instant::now());
                w.final_task = task_of(&f.data).to_string();
                w.final_state = state_of(&f.data).to_string();
                return Ok(w);
            }
            _ => {}
        }
    }
}

/// Submits a task over `message/stream` and reads it to its final status; returns the
/// task id.
async fn submit(addr: SocketAddr) -> io::Result<String> {
    finish(Sse::post(addr, "/", &[], &message_stream("stream")).await?).await
}

// ---------------------------------------------------------------------------------
// Fan-out.

struct FanOut {
    median_final: Duration,
    max_final: Duration,
    min_texts: u64,
    median_texts: u64,
    lagged: u64,
    lagged_connections: u64,
    missed: u64,
    frames_per_sec: f64,
}

/// Opens `n` watch connections, starts `start` once each has read its ack, and reads
/// every connection to its final status. `start` returns the task id.
async fn fan_out<F, Fut>(addr: SocketAddr, n: usize, start: F) -> Res<FanOut>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = io::Result<String>> + Send + 'static,
{
    let deadline = tokio::time::Instant::now() + RUN_LIMIT;
    let (ready_tx, mut ready_rx) = mpsc::unbounded_channel();
    let gate = Arc::new(Semaphore::new(CONNECTING));
    // Dropping the set (on any early return) aborts the watchers and closes them.
    let mut watchers = JoinSet::new();
    for _ in 0..n {
        let permit = timeout(IO_LIMIT, gate.clone().acquire_owned())
            .await
            .map_err(|_| "connecting timed out".to_string())?
            .unwrap();
        watchers.spawn(watcher(addr, ready_tx.clone(), permit));
    }
    drop(ready_tx);
    for _ in 0..n {
        match tokio::time::timeout_at(deadline, ready_rx.recv()).await {
            Ok(Some(Ok(()))) => {}
            Ok(Some(Err(e))) => return Err(e),
            Ok(None) => return Err("a watcher ended before its ack".into()),
            Err(_) => return Err("the watchers did not all attach in time".into()),
        }
    }
    let submitted = Instant::now();
    let started = tokio::spawn(start());
    let task = match tokio::time::timeout_at(deadline, started).await {
        Ok(Ok(Ok(task))) => task,
        Ok(Ok(Err(e))) => return Err(format!("submitting: {e}")),
        Ok(Err(e)) => return Err(format!("submitting: {e}")),
        Err(_) => return Err("the task did not end in time".into()),
    };
    let mut got = Vec::with_capacity(n);
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
        got.push(w);
    }
    let finals: Vec<Duration> = got
        .iter()
        .map(|w| w.final_at.unwrap() - submitted)
        .collect();
    let texts: Vec<u64> = got
        .iter()
        .map(|w| {
            w.texts
                .iter()
                .find(|(t, _)| *t == task)
                .map_or(0, |(_, n)| *n)
        })
        .collect();
    let last = *finals.iter().max().unwrap();
    let frames: u64 = got.iter().map(|w| w.frames).sum();
    Ok(FanOut {
        median_final: median(&finals),
        max_final: last,
        min_texts: *texts.iter().min().unwrap(),
        median_texts: median(&texts),
        lagged: got.iter().map(|w| w.lagged).sum(),
        lagged_connections: got.iter().filter(|w| w.lagged > 0).count() as u64,
        missed: got.iter().map(|w| w.missed).sum(),
        frames_per_sec: frames as f64 / last.as_secs_f64(),
    })
}

/// The medians of several runs, one line.
fn report(label: &str, runs: &[FanOut]) {
    let m = |f: fn(&FanOut) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
    println!(
        "  {label} ({} runs): to final median {:.1} ms, max {:.1} ms; text frames/conn min {:.0}, \
         median {:.0} of {CHUNKS}; lagged frames {:.0} on {:.0} conns ({:.0} missed); {:.0} frames/s",
        runs.len(),
        m(|r| r.median_final.as_secs_f64() * 1e3),
        m(|r| r.max_final.as_secs_f64() * 1e3),
        m(|r| r.min_texts as f64),
        m(|r| r.median_texts as f64),
        m(|r| r.lagged as f64),
        m(|r| r.lagged_connections as f64),
        m(|r| r.missed as f64),
        m(|r| r.frames_per_sec),
    );
}

async fn runs<F, Fut>(label: &str, addr: SocketAddr, n: usize, runs: usize, start: F) -> Option<f64>
where
    F: Fn() -> Fut,
    Fut: Future<Output = io::Result<String>> + Send + 'static,
{
    let mut done = Vec::new();
    for run in 0..runs {
        match fan_out(addr, n, &start).await {
            Ok(r) => done.push(r),
            Err(e) => {
                println!("  {label}: run {} failed: {e}", run + 1);
                break;
            }
        }
    }
    if done.is_empty() {
        return None;
    }
    report(label, &done);
    Some(median(
        &done.iter().map(|r| r.frames_per_sec).collect::<Vec<_>>(),
    ))
}

// ---------------------------------------------------------------------------------
// The bare-hyper baseline.

const FAKE_TASK: &str = "tsk_0199c4e2f1b7712a9d3e4f5061728394";
const FAKE_CONTEXT: &str = "ctx_0199c4e2f1b7712a9d3e4f50617283a1";

fn sse_frame(id: Option<u64>, event: &str, data: Value) -> Bytes {
    Bytes::from(match id {
        Some(id) => format!("id: {id}\nevent: {event}\ndata: {data}\n\n"),
        None => format!("event: {event}\ndata: {data}\n\n"),
    })
}

/// What a one-turn task streaming `CHUNKS` chunks writes, byte for byte in form.
fn task_frames() -> Vec<Bytes> {
    let (task, ctx) = (FAKE_TASK, FAKE_CONTEXT);
    let mut out = vec![sse_frame(
        Some(0),
        "status",
        json!({"id": task, "context_id": ctx, "status": {"state": "working", "message": "inference turn 1"}, "final": false}),
    )];
    for i in 0..CHUNKS {
        out.push(sse_frame(
            Some(i as u64 + 1),
            "text",
            json!({"id": task, "text": chunk(i), "final": false}),
        ));
    }
    out.push(sse_frame(
        Some(CHUNKS as u64 + 1),
        "text",
        json!({"id": task, "text": "", "final": true}),
    ));
    let response: String = (0..CHUNKS).map(chunk).collect();
    out.push(sse_frame(
        Some(CHUNKS as u64 + 2),
        "status",
        json!({"id": task, "context_id": ctx, "status": {"state": "completed", "message": "session ended", "response": response}, "final": true}),
    ));
    out
}

struct Hub {
    senders: Mutex<Vec<mpsc::Sender<Bytes>>>,
    ack: Bytes,
}

/// A connection's channel as the body's stream of frames.
struct Frames(mpsc::Receiver<Bytes>);

impl futures_core::Stream for Frames {
    type Item = Result<BodyFrame<Bytes>, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0
            .poll_recv(cx)
            .map(|next| next.map(|bytes| Ok(BodyFrame::data(bytes))))
    }
}

async fn baseline_server(listener: TcpListener, hub: Arc<Hub>) {
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let _ = socket.set_nodelay(true);
        let hub = hub.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |_request| {
                let hub = hub.clone();
                async move {
                    let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
                    let _ = tx.try_send(hub.ack.clone());
                    hub.senders.lock().unwrap().push(tx);
                    let response = hyper::Response::builder()
                        .header("content-type", "text/event-stream")
                        .header("cache-control", "no-cache")
                        .body(StreamBody::new(Frames(rx)))
                        .unwrap();
                    Ok::<_, Infallible>(response)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(socket), service)
                .await;
        });
    }
}

/// Every frame to every connection registered so far, in order; then the channels
/// close. `lossless`: one feeder per connection waits on its full channel, so a slow
/// connection holds up only itself. Otherwise one publisher, as ours, that never
/// waits: a frame that finds a channel full is dropped there, except the final status.
async fn produce(hub: Arc<Hub>, frames: Arc<Vec<Bytes>>, lossless: bool) {
    let senders = std::mem::take(&mut *hub.senders.lock().unwrap());
    if lossless {
        let mut feeders = JoinSet::new();
        for sender in senders {
            let frames = frames.clone();
            feeders.spawn(async move {
                for frame in frames.iter() {
                    let _ = sender.send(frame.clone()).await;
                }
            });
        }
        while feeders.join_next().await.is_some() {}
        return;
    }
    let (last, frames) = frames.split_last().unwrap();
    for frame in frames {
        for sender in &senders {
            let _ = sender.try_send(frame.clone());
        }
    }
    for sender in &senders {
        let _ = sender.send(last.clone()).await;
    }
}

// ---------------------------------------------------------------------------------
// Replay and memory.

/// Connect to the last of the gap frame and `REPLAY_RING` replayed frames.
async fn replay_once(addr: SocketAddr) -> Res<(Duration, u64)> {
    let started = Instant::now();
    let mut sse = open_watch(addr, "0")
        .await
        .map_err(|e| format!("stream/watch: {e}"))?;
    let block = sse.next_frame().await.map_err(|e| e.to_string())?;
    let f = sse.frame(block);
    if f.event != "gap" {
        return Err(format!(
            "the replay did not start with a gap frame but {:?}",
            f.event
        ));
    }
    let first: u64 = serde_json::from_str::<Value>(&f.data)
        .ok()
        .and_then(|v| v["first_available_id"].as_u64())
        .unwrap_or(0);
    for i in 0..REPLAY_RING {
        let block = sse
            .next_frame()
            .await
            .map_err(|e| format!("replayed frame {i}: {e}"))?;
        if sse.frame(block).id.is_none() {
            return Err(format!("replayed frame {i} has no id"));
        }
    }
    Ok((started.elapsed(), first))
}

async fn replay(addr: SocketAddr) -> Res<(Vec<Duration>, u64)> {
    let mut times = Vec::with_capacity(REPLAY_RECONNECTS);
    let mut first = 0;
    for _ in 0..REPLAY_RECONNECTS {
        let (t, f) = timeout(RUN_LIMIT, replay_once(addr))
            .await
            .map_err(|_| "a replay timed out".to_string())??;
        times.push(t);
        first = f;
    }
    Ok((times, first))
}

/// RSS with no connection, then with `IDLE_CONNECTIONS` idle watches, each ~1 s after.
async fn idle_memory(mur: &Mur) -> Res<(u64, u64)> {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = rss_kib(mur)?;
    let addr = mur.addr;
    let gate = Arc::new(Semaphore::new(CONNECTING));
    let mut opening = JoinSet::new();
    for _ in 0..IDLE_CONNECTIONS {
        let permit = gate.clone().acquire_owned().await.unwrap();
        opening.spawn(async move {
            let sse = open_watch(addr, NO_REPLAY).await;
            drop(permit);
            sse
        });
    }
    let mut open = Vec::with_capacity(IDLE_CONNECTIONS);
    while let Some(joined) = timeout(RUN_LIMIT, opening.join_next())
        .await
        .map_err(|_| "opening the idle connections timed out".to_string())?
    {
        open.push(
            joined
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("stream/watch: {e}"))?,
        );
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = rss_kib(mur)?;
    drop(open);
    Ok((before, after))
}

// ---------------------------------------------------------------------------------

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let open_files = raise_open_files();
    let client = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "mur streaming benchmark: release `mur run` (queue + sleep, scripted driver) on 127.0.0.1; \
         open-file limit {open_files}"
    );
    if open_files < (2 * IDLE_CONNECTIONS + 256) as libc::rlim_t {
        println!(
            "  warning: the open-file limit may be too low for {IDLE_CONNECTIONS} connections"
        );
    }

    // 1 and 3: one capsule, one warm-up task, then the runs; the replay reads the ring
    // the last run left.
    let tasks = 1 + FAN_OUT.iter().map(|(_, runs)| runs).sum::<usize>();
    let dir = capsule("fanout", tasks + 2);
    let mur = start(&dir);
    let addr = mur.addr;
    println!(
        "fan-out: one task streaming {CHUNKS} chunks to N stream/watch connections (medians of the runs)"
    );
    let ours_100 = client.block_on(async {
        if let Err(e) = fan_out(addr, 1, || submit(addr)).await {
            println!("  warm-up task failed: {e}");
        }
        let mut at_100 = None;
        for (n, count) in FAN_OUT {
            let fps = runs(&format!("N={n}"), addr, n, count, || submit(addr)).await;
            if n == BASELINE_N {
                at_100 = fps;
            }
        }
        at_100
    });

    println!(
        "replay: stream/watch with Last-Event-ID: 0 after a {CHUNKS}-chunk task, connect to the \
         gap frame and {REPLAY_RING} replayed frames"
    );
    match client.block_on(replay(addr)) {
        Ok((times, first)) => println!(
            "  median {} (min {}, max {}) over {} reconnects; gap first_available_id {first}",
            ms(median(&times)),
            ms(*times.iter().min().unwrap()),
            ms(*times.iter().max().unwrap()),
            times.len()
        ),
        Err(e) => println!("  failed: {e}"),
    }
    drop(mur);

    // 2: the baseline, on a runtime of its own (as `mur` has), same client.
    println!(
        "baseline: bare hyper 1 HTTP/1.1, StreamBody over mpsc({QUEUE_CAPACITY}) per connection, \
         the same frame bytes, N={BASELINE_N}; lossless: a feeder per connection waits on its \
         full channel; lossy: one publisher (as ours) drops a frame where a channel is full"
    );
    let server = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let hub = Arc::new(Hub {
        senders: Mutex::new(Vec::new()),
        ack: sse_frame(
            None,
            "connection-ack",
            json!({"role": "observer", "conversation_mode": "stateless"}),
        ),
    });
    let listener = server
        .block_on(TcpListener::bind("127.0.0.1:0"))
        .expect("the baseline binds");
    let base_addr = listener.local_addr().unwrap();
    server.spawn(baseline_server(listener, hub.clone()));
    let frames = Arc::new(task_frames());
    let handle = server.handle().clone();
    let mut base_100 = Vec::new();
    for (label, lossless) in [("lossless", true), ("lossy", false)] {
        let fps = client.block_on(runs(
            &format!("{label}, N={BASELINE_N}"),
            base_addr,
            BASELINE_N,
            BASELINE_RUNS,
            || {
                let produced = handle.spawn(produce(hub.clone(), frames.clone(), lossless));
                async move {
                    produced.await.map_err(io_err)?;
                    Ok(FAKE_TASK.to_string())
                }
            },
        ));
        base_100.push((label, fps));
    }
    server.shutdown_background();
    for (label, base) in base_100 {
        match (ours_100, base) {
            (Some(ours), Some(base)) => println!(
                "  ours/baseline aggregate frames/s at N={BASELINE_N}, baseline {label}: {:.2}",
                ours / base
            ),
            _ => println!("  ours/baseline, baseline {label}: not available (a side failed)"),
        }
    }

    // 4: memory, on a fresh capsule.
    println!(
        "memory: RSS of a fresh mur process, idle, then with {IDLE_CONNECTIONS} idle stream/watch connections"
    );
    let mur = start(&capsule("memory", 1));
    match client.block_on(idle_memory(&mur)) {
        Ok((before, after)) => println!(
            "  {:.1} MiB with 0, {:.1} MiB with {IDLE_CONNECTIONS}: {:.1} KiB per connection",
            before as f64 / 1024.0,
            after as f64 / 1024.0,
            (after as f64 - before as f64) / IDLE_CONNECTIONS as f64
        ),
        Err(e) => println!("  failed: {e}"),
    }
    drop(mur);
    client.shutdown_background();
}
