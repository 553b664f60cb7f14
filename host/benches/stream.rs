//! Streaming benchmark (`cargo bench -p mur --bench stream`): the release `mur run`
//! (`--lifecycle-task-acceptance queue --lifecycle-after-task sleep`, scripted driver)
//! on 127.0.0.1, driven by a tokio client in this process.
//!
//! 1. Fan-out: N `stream/watch` connections (no replay), one task over `message/stream`
//!    whose single turn streams `CHUNKS` text chunks. Per connection: the text frames of
//!    that task it read and the time from submission to its final status; per run, the
//!    `lagged` frames and the aggregate frames per second (every frame with an id that
//!    reached a watcher / time until the last watcher read the final status). The
//!    capsule and the fan-out are `fanout/mod.rs`, shared with the `otel` bench.
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
mod fanout;
mod mur;

use client::*;
use fanout::*;
use mur::{Mur, cache};

use std::convert::Infallible;
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
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio::time::timeout;

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
/// `mur run` to its launch line (a cold component cache compiles the components).
const LAUNCH_LIMIT: Duration = Duration::from_secs(600);
/// The open-file limit the bench wants (the client's and `mur`'s connections).
const WANT_OPEN_FILES: libc::rlim_t = 8_192;

// ---------------------------------------------------------------------------------
// The capsule and the `mur` process.

/// A capsule whose script has `turns` turns, each streaming `CHUNKS` chunks.
fn capsule(name: &str, turns: usize) -> PathBuf {
    fanout::capsule("stream", name, turns)
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
