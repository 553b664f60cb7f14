//! A2A v1.0 door benchmark (`cargo bench -p mur --bench a2a`): the release `mur run`
//! (`--lifecycle-task-acceptance queue --lifecycle-after-task sleep`, scripted driver)
//! on 127.0.0.1, driven by a tokio client in this process. Every v1 request sends
//! `A2A-Version: 1.0`.
//!
//! 1. Streaming, one client: a task whose single turn streams `CHUNKS` text chunks,
//!    sent with `SendStreamingMessage` and read to `TASK_STATE_COMPLETED`; beside it, in
//!    the same run on the same capsule, the same task over the seed's `message/stream`
//!    read to its final status. Runs alternate which door goes first.
//! 2. Fan-out, lossless: a task whose first turn runs `bash: sleep 1` and whose second
//!    streams `CHUNKS` chunks, sent with `SendStreamingMessage` (that stream is read to
//!    the end too, as the seed's `message/stream` is); its task id read from the first
//!    event, then `FAN_OUT` `SubscribeToTask` connections with `Last-Event-ID: 0`
//!    attached during the sleep. Each checks it read the ids 1..last, each once. Timed
//!    from the submitting stream reading the `inference turn 2` status to the last
//!    subscriber reading `TASK_STATE_COMPLETED` (and from submission). Beside it, the
//!    seed's fan-out of the same task: `FAN_OUT` `stream/watch` connections (no replay)
//!    attached during the same sleep, the task sent with `message/stream`.
//! 3. Memory per kept task: the RSS of a fresh `mur` after 0, 1, 100 and 200 tasks of a
//!    one-tool-call script sent with `SendMessage`, on a capsule keeping 100 tasks (the
//!    default) and on one keeping 1 (`lifecycle.task_history: 1`), whose difference is
//!    the store's; then `GetTask` and `ListTasks` (page 50) latencies on the full store,
//!    beside a `GET` of the agent card on the same kind of connection.
//!
//! `MUR_BENCH_A2A_PARTS` picks parts (`streaming,fanout,memory`, the default all);
//! `MUR_BENCH_A2A_N` sets the fan-out's readers (default 100); `MUR_BENCH_A2A_DOORS`
//! (`v1`, `seed`, the default both) runs one side of the fan-out, to profile it.
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

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio::time::timeout;

/// Text chunks the streaming turn writes.
const CHUNKS: usize = 2_000;
/// Runs of each door in parts 1 and 2, after one warm-up of each.
const STREAM_RUNS: usize = 7;
const FAN_OUT_RUNS: usize = 5;
/// Subscribers (and seed watchers) in part 2; `MUR_BENCH_A2A_N` sets another.
const FAN_OUT: usize = 100;

fn fan_out_n() -> usize {
    std::env::var("MUR_BENCH_A2A_N")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(FAN_OUT)
}
/// The tool call of part 2's first turn: the subscribers attach while it runs.
const SLEEP: &str = "sleep 1";
/// Tasks in part 3, with RSS read after each checkpoint.
const CHECKPOINTS: [usize; 3] = [1, 100, 200];
/// Calls of each kind timed on the full store.
const LOOKUPS: usize = 200;
const LIST_PAGE: usize = 50;
/// A `Last-Event-ID` above every id the capsule writes: a watch replays nothing.
const NO_REPLAY: &str = "18446744073709551614";
/// Connects (with their request and first frame) in flight at once.
const CONNECTING: usize = 64;
/// One run from start to end.
const RUN_LIMIT: Duration = Duration::from_secs(300);
/// `mur run` to its launch line (a cold component cache compiles the components).
const LAUNCH_LIMIT: Duration = Duration::from_secs(600);
const V1: (&str, &str) = ("a2a-version", "1.0");

type Res<T> = Result<T, String>;

// ---------------------------------------------------------------------------------
// Capsules and the `mur` process.

fn scratch(name: &str) -> PathBuf {
    mur::scratch("a2a", name)
}

fn chunk(i: usize) -> String {
    format!("c{i} ")
}

fn chunks_turn() -> String {
    let chunks: Vec<String> = (0..CHUNKS).map(|i| format!("\"{}\"", chunk(i))).collect();
    format!("  - chunks: [{}]\n", chunks.join(", "))
}

fn bash_turn(command: &str) -> String {
    format!("  - tool_calls: [{{id: t1, name: bash, input: {{command: \"{command}\"}}}}]\n")
}

/// A capsule allowed `bash` whose script (played from its first turn by every task) is
/// `turns`; `lifecycle` adds keys under `lifecycle:`.
fn capsule(name: &str, turns: &str, lifecycle: &str) -> PathBuf {
    let dir = scratch(name);
    let manifest = format!(
        "name: a2a-bench\nversion: \"0.1.0\"\ndescription: The A2A door benchmark.\ninference:\n  \
         driver: scripted\n  script: ./script.yaml\n  model: scripted-bench\ncapabilities:\n  \
         shell:\n    allow: [bash]\nlifecycle:\n  queue_depth: 64\n{lifecycle}"
    );
    std::fs::write(dir.join("murmur.yaml"), manifest).unwrap();
    std::fs::write(dir.join("script.yaml"), format!("turns:\n{turns}")).unwrap();
    dir
}

/// `VmRSS` and `RssAnon` of `mur`, in KiB.
fn rss_kib(mur: &Mur) -> Res<(u64, u64)> {
    Ok((mur.status_kib("VmRSS:")?, mur.status_kib("RssAnon:")?))
}

/// Starts `mur run` on `capsule`.
fn start(capsule: &Path) -> Mur {
    Mur::start(capsule, &cache("a2a-cache"), LAUNCH_LIMIT)
}

// ---------------------------------------------------------------------------------
// Requests and what comes back.

fn v1(method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string()
}

fn send_params(text: &str) -> Value {
    let id = format!("msg-{}", next_message_number());
    json!({"message": {"messageId": id, "role": "ROLE_USER", "parts": [{"text": text}]}})
}

fn next_message_number() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A whole request on a new connection, answered with a whole body (the door closes
/// the connection after it): the body, once the head said `200`.
async fn unary(addr: SocketAddr, method: &str, path: &str, body: &str) -> io::Result<String> {
    let headers: &[(&str, &str)] = if method == "POST" {
        &[("content-type", "application/json"), V1]
    } else {
        &[]
    };
    let mut socket = send(addr, method, path, headers, body).await?;
    let mut raw = Vec::with_capacity(16 * 1024);
    limited("read", socket.read_to_end(&mut raw)).await?;
    let end = find(&raw, b"\r\n\r\n").ok_or_else(|| io_err("no response head"))?;
    let head = String::from_utf8_lossy(&raw[..end]);
    if !head.starts_with("HTTP/1.1 200") {
        return Err(io_err(format!(
            "answered {}",
            head.lines().next().unwrap_or_default()
        )));
    }
    Ok(String::from_utf8_lossy(&raw[end + 4..]).into_owned())
}

/// What a v1 stream event is, read from its envelope without parsing it whole (the
/// client reads as cheaply as the seed benchmark's does).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Task,
    Status,
    /// A piece of a streamed reply (`reply-N`, `lastChunk` false).
    Chunk,
    /// The end marker of a streamed reply (`reply-N`, `lastChunk` true).
    ChunkEnd,
    /// Any other artifact (a tool's, the response).
    Artifact,
    Error,
    Other,
}

fn kind(data: &str) -> Kind {
    let Some(at) = data.find("\"result\":{\"") else {
        return if data.contains("\"error\":") {
            Kind::Error
        } else {
            Kind::Other
        };
    };
    let rest = &data[at + 11..];
    if rest.starts_with("task\"") {
        Kind::Task
    } else if rest.starts_with("statusUpdate\"") {
        Kind::Status
    } else if rest.starts_with("artifactUpdate\"") {
        if !data.contains("\"artifactId\":\"reply-") {
            Kind::Artifact
        } else if data.contains("\"lastChunk\":true") {
            Kind::ChunkEnd
        } else {
            Kind::Chunk
        }
    } else {
        Kind::Other
    }
}

/// The v1 state a status or task event names (`TASK_STATE_…`).
fn v1_state(data: &str) -> &str {
    data.split_once("\"state\":\"")
        .and_then(|(_, rest)| rest.split('"').next())
        .unwrap_or_default()
}

const TURN_2: &str = "inference turn 2";

/// Events read on one v1 stream until `TASK_STATE_COMPLETED`.
#[derive(Default, Clone)]
struct Read {
    events: u64,
    tasks: u64,
    statuses: u64,
    chunks: u64,
    chunk_ends: u64,
    artifacts: u64,
    /// Ids not the one after the last (a lost or repeated event).
    out_of_order: u64,
    first_id: u64,
    last_id: u64,
    /// Events from the `inference turn 2` status on (part 2).
    from_turn_2: u64,
    first_at: Option<Instant>,
    turn_2_at: Option<Instant>,
    done_at: Option<Instant>,
    task: String,
    /// The stream ended with `EVENTS_NOT_KEPT`: (the reader's last event, the first kept).
    gone: Option<(u64, u64)>,
}

/// A number in an error's `ErrorInfo.metadata`.
fn fact(data: &str, key: &str) -> u64 {
    data.split_once(&format!("\"{key}\":\""))
        .and_then(|(_, rest)| rest.split('"').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Reads v1 events until the task completes (or fails, an error), or the door says
/// the events the reader needs next are no longer kept (`read.gone`).
async fn read_v1(sse: &mut Sse, mut read: Read) -> io::Result<Read> {
    let mut expect = 0u64;
    loop {
        let block = sse.next_frame().await?;
        let f = sse.frame(block);
        let now = Instant::now();
        read.first_at.get_or_insert(now);
        let k = kind(&f.data);
        if k == Kind::Error {
            // An error inside the stream has no id; the stream ends with it.
            if f.data.contains("\"EVENTS_NOT_KEPT\"") {
                read.gone = Some((
                    fact(&f.data, "lastEventId"),
                    fact(&f.data, "firstAvailableSequence"),
                ));
                read.done_at = Some(now);
                return Ok(read);
            }
            return Err(io_err(format!("error event: {}", &f.data)));
        }
        let id = f.id.unwrap_or(0);
        if read.events == 0 {
            read.first_id = id;
        } else if id != expect {
            read.out_of_order += 1;
        }
        expect = id + 1;
        read.last_id = id;
        read.events += 1;
        if read.turn_2_at.is_none() && k == Kind::Status && f.data.contains(TURN_2) {
            read.turn_2_at = Some(now);
        }
        if read.turn_2_at.is_some() {
            read.from_turn_2 += 1;
        }
        match k {
            Kind::Task => {
                read.tasks += 1;
                if read.task.is_empty() {
                    read.task = f
                        .data
                        .split_once("\"id\":\"tsk_")
                        .and_then(|(_, rest)| rest.split('"').next())
                        .map(|t| format!("tsk_{t}"))
                        .unwrap_or_default();
                }
            }
            Kind::Status => {
                read.statuses += 1;
                match v1_state(&f.data) {
                    "TASK_STATE_COMPLETED" => {
                        read.done_at = Some(now);
                        return Ok(read);
                    }
                    "TASK_STATE_FAILED" | "TASK_STATE_CANCELED" | "TASK_STATE_REJECTED" => {
                        return Err(io_err(format!("the task ended: {}", &f.data)));
                    }
                    _ => {}
                }
            }
            Kind::Chunk => read.chunks += 1,
            Kind::ChunkEnd => read.chunk_ends += 1,
            Kind::Artifact => read.artifacts += 1,
            Kind::Error | Kind::Other => {
                return Err(io_err(format!("unexpected event: {}", &f.data)));
            }
        }
    }
}

/// `SendStreamingMessage`, its head read.
async fn v1_stream(addr: SocketAddr, text: &str) -> io::Result<Sse> {
    let body = v1("SendStreamingMessage", send_params(text));
    Sse::post(addr, "/", &[V1], &body).await
}

/// Frames read on one seed stream until the task's final status.
#[derive(Default)]
struct Seed {
    frames: u64,
    texts: u64,
    lagged: u64,
    from_turn_2: u64,
    first_at: Option<Instant>,
    turn_2_at: Option<Instant>,
    done_at: Option<Instant>,
}

/// Reads seed frames until a final status (which must be `completed`).
async fn read_seed(sse: &mut Sse) -> io::Result<Seed> {
    let mut s = Seed::default();
    loop {
        let block = sse.next_frame().await?;
        let f = sse.frame(block);
        let now = Instant::now();
        s.first_at.get_or_insert(now);
        if f.id.is_some() {
            s.frames += 1;
        }
        if s.turn_2_at.is_none() && f.event == "status" && f.data.contains(TURN_2) {
            s.turn_2_at = Some(now);
        }
        if s.turn_2_at.is_some() && f.id.is_some() {
            s.from_turn_2 += 1;
        }
        match &*f.event {
            "text" if f.data.ends_with(r#""final":false}"#) => s.texts += 1,
            "lagged" => s.lagged += 1,
            "error" => return Err(io_err(format!("error frame: {}", &f.data))),
            "status" if f.data.ends_with(r#""final":true}"#) => {
                let state = state_of(&f.data);
                if state != "completed" {
                    return Err(io_err(format!("task ended {state}: {}", &f.data)));
                }
                s.done_at = Some(now);
                return Ok(s);
            }
            _ => {}
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn med(xs: &[f64]) -> f64 {
    median(xs)
}

// ---------------------------------------------------------------------------------
// 1. Streaming, one client.

struct OneV1 {
    took: Duration,
    read: Read,
}

async fn one_v1(addr: SocketAddr) -> Res<OneV1> {
    let started = Instant::now();
    let run = async {
        let mut sse = v1_stream(addr, "stream").await?;
        read_v1(&mut sse, Read::default()).await
    };
    let read = timeout(RUN_LIMIT, run)
        .await
        .map_err(|_| "the v1 stream did not end in time".to_string())?
        .map_err(|e| format!("SendStreamingMessage: {e}"))?;
    Ok(OneV1 {
        took: read.done_at.unwrap() - started,
        read,
    })
}

async fn one_seed(addr: SocketAddr) -> Res<(Duration, Seed)> {
    let started = Instant::now();
    let run = async {
        let mut sse = Sse::post(addr, "/", &[], &message_stream("stream")).await?;
        read_seed(&mut sse).await
    };
    let seed = timeout(RUN_LIMIT, run)
        .await
        .map_err(|_| "the seed stream did not end in time".to_string())?
        .map_err(|e| format!("message/stream: {e}"))?;
    Ok((seed.done_at.unwrap() - started, seed))
}

async fn streaming(addr: SocketAddr) -> Res<()> {
    one_v1(addr).await?;
    one_seed(addr).await?;
    let mut v1s = Vec::new();
    let mut seeds = Vec::new();
    for run in 0..STREAM_RUNS {
        // Alternate which door goes first, so drift falls on both alike.
        if run % 2 == 0 {
            v1s.push(one_v1(addr).await?);
            seeds.push(one_seed(addr).await?);
        } else {
            seeds.push(one_seed(addr).await?);
            v1s.push(one_v1(addr).await?);
        }
    }
    let cut: Vec<(u64, u64)> = v1s.iter().filter_map(|r| r.read.gone).collect();
    if !cut.is_empty() {
        println!(
            "  v1 streams cut off with EVENTS_NOT_KEPT: {} of {} (last event read, first kept: \
             {:?}); left out below",
            cut.len(),
            v1s.len(),
            cut
        );
    }
    v1s.retain(|r| r.read.gone.is_none());
    if v1s.is_empty() {
        return Err("every v1 stream was cut off".into());
    }
    for r in &v1s {
        let read = &r.read;
        if read.out_of_order > 0 || read.first_id != 1 || read.last_id != read.events {
            return Err(format!(
                "a v1 stream's ids were not 1..{}: first {}, last {}, {} out of order",
                read.events, read.first_id, read.last_id, read.out_of_order
            ));
        }
        if read.chunks != CHUNKS as u64 {
            return Err(format!("a v1 stream read {} chunks", read.chunks));
        }
    }
    let v1_ms: Vec<f64> = v1s.iter().map(|r| ms(r.took)).collect();
    let v1_eps: Vec<f64> = v1s
        .iter()
        .map(|r| r.read.events as f64 / r.took.as_secs_f64())
        .collect();
    let seed_ms: Vec<f64> = seeds.iter().map(|(t, _)| ms(*t)).collect();
    let seed_fps: Vec<f64> = seeds
        .iter()
        .map(|(t, s)| s.frames as f64 / t.as_secs_f64())
        .collect();
    let r = &v1s[0].read;
    println!(
        "  v1 SendStreamingMessage ({} runs): to TASK_STATE_COMPLETED median {:.1} ms (min {:.1}, \
         max {:.1}); {} events, ids 1..{}: {} task, {} status, {} reply-1 chunks, {} end marker, \
         {} other artifact; {:.0} events/s",
        v1s.len(),
        med(&v1_ms),
        v1_ms.iter().cloned().fold(f64::MAX, f64::min),
        v1_ms.iter().cloned().fold(0.0, f64::max),
        r.events,
        r.last_id,
        r.tasks,
        r.statuses,
        r.chunks,
        r.chunk_ends,
        r.artifacts,
        med(&v1_eps),
    );
    let s = &seeds[0].1;
    println!(
        "  seed message/stream ({} runs): to final status median {:.1} ms (min {:.1}, max {:.1}); \
         {} frames ({} text); {:.0} frames/s",
        seeds.len(),
        med(&seed_ms),
        seed_ms.iter().cloned().fold(f64::MAX, f64::min),
        seed_ms.iter().cloned().fold(0.0, f64::max),
        s.frames,
        s.texts,
        med(&seed_fps),
    );
    println!(
        "  v1 / seed time to the end (medians): {:.2}",
        med(&v1_ms) / med(&seed_ms)
    );
    Ok(())
}

// ---------------------------------------------------------------------------------
// 2. Fan-out.

struct FanOut {
    /// From the first reader reading the `inference turn 2` status (the streaming
    /// turn's start) to the last reader done; `None` when no reader read that status.
    from_turn_2: Option<Duration>,
    /// From there to the first reader done: about when the task ended.
    first_done: Option<Duration>,
    /// Median reader, from the turn's start.
    median_from_turn_2: Option<Duration>,
    /// From submission to the last reader done.
    from_submission: Duration,
    /// The submitting stream, too, ended in `EVENTS_NOT_KEPT`.
    submitter_gone: bool,
    /// Per reader: events (v1) or frames with an id (seed) read in all.
    min_events: u64,
    max_events: u64,
    /// Per reader: text chunks read.
    min_texts: u64,
    median_texts: u64,
    /// v1: readers that did not read the ids 1..last each once, and every chunk. Seed:
    /// `lagged` frames.
    faults: u64,
    /// Readers whose first event came after the streaming turn began.
    late: u64,
    /// v1: readers whose stream ended in `EVENTS_NOT_KEPT`, the median last event they
    /// had read, and the first event still kept.
    gone: u64,
    gone_after: u64,
    gone_first_kept: u64,
    /// Events read by all readers from the turn's start on, per second until the last
    /// reader was done.
    per_sec: Option<f64>,
    /// Events read by all readers, and the CPU time `mur` spent on the whole run (all
    /// its threads: the task, the submitting stream and every reader's connection).
    delivered: u64,
    server_cpu: Duration,
}

/// What `summarise` reads of one reader.
struct Row {
    attached: Instant,
    done: Instant,
    events: u64,
    texts: u64,
    from_turn_2: u64,
    faults: u64,
    gone: Option<(u64, u64)>,
}

fn summarise<T>(
    readers: &[T],
    submitted: Instant,
    turn_2: Option<Instant>,
    at: impl Fn(&T) -> Row,
) -> FanOut {
    let rows: Vec<Row> = readers.iter().map(at).collect();
    let last = rows.iter().map(|r| r.done).max().unwrap();
    let first = rows.iter().map(|r| r.done).min().unwrap();
    let events: Vec<u64> = rows.iter().map(|r| r.events).collect();
    let texts: Vec<u64> = rows.iter().map(|r| r.texts).collect();
    let after: u64 = rows.iter().map(|r| r.from_turn_2).sum();
    let gone: Vec<(u64, u64)> = rows.iter().filter_map(|r| r.gone).collect();
    FanOut {
        from_turn_2: turn_2.map(|t| last - t),
        first_done: turn_2.map(|t| first.saturating_duration_since(t)),
        median_from_turn_2: turn_2.map(|t| {
            median(
                &rows
                    .iter()
                    .map(|r| r.done.saturating_duration_since(t))
                    .collect::<Vec<_>>(),
            )
        }),
        from_submission: last - submitted,
        submitter_gone: false,
        min_events: *events.iter().min().unwrap(),
        max_events: *events.iter().max().unwrap(),
        min_texts: *texts.iter().min().unwrap(),
        median_texts: median(&texts),
        faults: rows.iter().map(|r| r.faults).sum(),
        late: turn_2.map_or(0, |t| rows.iter().filter(|r| r.attached > t).count() as u64),
        gone: gone.len() as u64,
        gone_after: if gone.is_empty() {
            0
        } else {
            median(&gone.iter().map(|g| g.0).collect::<Vec<_>>())
        },
        gone_first_kept: gone.iter().map(|g| g.1).max().unwrap_or(0),
        per_sec: turn_2.map(|t| after as f64 / (last - t).as_secs_f64()),
        delivered: events.iter().sum(),
        server_cpu: Duration::ZERO,
    }
}

/// Opens `n` readers with `open` (at most `CONNECTING` connecting at once) and
/// waits until each has read its first event (v1) or its ack (seed).
async fn attach<T, F, Fut>(
    open: F,
    readers: &mut JoinSet<io::Result<T>>,
    deadline: tokio::time::Instant,
) -> Res<()>
where
    T: Send + 'static,
    F: Fn(mpsc::UnboundedSender<Res<()>>, OwnedSemaphorePermit) -> Fut,
    Fut: Future<Output = io::Result<T>> + Send + 'static,
{
    let (ready_tx, mut ready_rx) = mpsc::unbounded_channel();
    let gate = Arc::new(Semaphore::new(CONNECTING));
    for _ in 0..fan_out_n() {
        let permit = timeout(IO_LIMIT, gate.clone().acquire_owned())
            .await
            .map_err(|_| "connecting timed out".to_string())?
            .unwrap();
        readers.spawn(open(ready_tx.clone(), permit));
    }
    drop(ready_tx);
    for _ in 0..fan_out_n() {
        match tokio::time::timeout_at(deadline, ready_rx.recv()).await {
            Ok(Some(Ok(()))) => {}
            Ok(Some(Err(e))) => return Err(e),
            Ok(None) => return Err("a reader ended before it attached".into()),
            Err(_) => return Err("the readers did not all attach in time".into()),
        }
    }
    Ok(())
}

/// Every reader's result and the submitting stream's, each by `deadline`.
async fn joined<T: Send + 'static>(
    mut readers: JoinSet<io::Result<T>>,
    submitter: tokio::task::JoinHandle<io::Result<T>>,
    deadline: tokio::time::Instant,
    who: &str,
    end: &str,
) -> Res<(Vec<T>, T)> {
    let mut got = Vec::with_capacity(fan_out_n());
    while let Some(reader) = tokio::time::timeout_at(deadline, readers.join_next())
        .await
        .map_err(|_| format!("the {who}s did not all read {end} in time"))?
    {
        got.push(
            reader
                .map_err(|e| format!("{who}: {e}"))?
                .map_err(|e| format!("{who}: {e}"))?,
        );
    }
    let sub = tokio::time::timeout_at(deadline, submitter)
        .await
        .map_err(|_| "the submitting stream did not end in time".to_string())?
        .map_err(|e| format!("submitting stream: {e}"))?
        .map_err(|e| format!("submitting stream: {e}"))?;
    Ok((got, sub))
}

async fn subscriber(
    addr: SocketAddr,
    task: String,
    ready: mpsc::UnboundedSender<Res<()>>,
    permit: OwnedSemaphorePermit,
) -> io::Result<Read> {
    let body = v1("SubscribeToTask", json!({"id": task}));
    let opened = Sse::post(addr, "/", &[V1, ("last-event-id", "0")], &body).await;
    drop(permit);
    let mut sse = match opened {
        Ok(sse) => sse,
        Err(e) => {
            let _ = ready.send(Err(format!("SubscribeToTask: {e}")));
            return Err(e);
        }
    };
    // Attached once its first event (the task as submitted, id 1) has been read.
    let block = sse.next_frame().await?;
    let f = sse.frame(block);
    let mut read = Read {
        first_at: Some(Instant::now()),
        first_id: f.id.unwrap_or(0),
        last_id: f.id.unwrap_or(0),
        events: 1,
        ..Read::default()
    };
    if kind(&f.data) != Kind::Task {
        let _ = ready.send(Err(format!("first event not the task: {}", &f.data)));
        return Err(io_err("first event not the task"));
    }
    read.tasks = 1;
    read.task = task;
    let _ = ready.send(Ok(()));
    // The rest, numbered on from the first.
    let first = read.first_id;
    let mut rest = read_v1(&mut sse, Read::default()).await?;
    if rest.first_id != first + 1 {
        rest.out_of_order += 1;
    }
    rest.events += 1;
    rest.tasks += 1;
    rest.first_id = first;
    rest.first_at = read.first_at;
    rest.task = read.task;
    Ok(rest)
}

async fn v1_fan_out(addr: SocketAddr) -> Res<FanOut> {
    let deadline = tokio::time::Instant::now() + RUN_LIMIT;
    let submitted = Instant::now();
    let mut sse = v1_stream(addr, "fan out")
        .await
        .map_err(|e| format!("SendStreamingMessage: {e}"))?;
    // The submitting stream's first event names the task.
    let block = tokio::time::timeout_at(deadline, sse.next_frame())
        .await
        .map_err(|_| "no first event".to_string())?
        .map_err(|e| e.to_string())?;
    let f = sse.frame(block);
    let task = f
        .data
        .split_once("\"id\":\"tsk_")
        .and_then(|(_, rest)| rest.split('"').next())
        .map(|t| format!("tsk_{t}"))
        .ok_or_else(|| format!("the first event names no task: {}", &f.data))?;
    let submitter = tokio::spawn(async move {
        let first = Read {
            events: 1,
            ..Read::default()
        };
        read_v1(&mut sse, first).await
    });
    let mut readers = JoinSet::new();
    attach(
        |ready, permit| subscriber(addr, task.clone(), ready, permit),
        &mut readers,
        deadline,
    )
    .await?;
    let (got, sub) = joined(readers, submitter, deadline, "subscriber", "COMPLETED").await?;
    // The streaming turn began when the first reader read its status.
    let turn_2 = got.iter().chain([&sub]).filter_map(|r| r.turn_2_at).min();
    for r in &got {
        if r.task != task {
            return Err(format!("a subscriber read task {}, not {task}", r.task));
        }
    }
    let mut summary = summarise(&got, submitted, turn_2, |r| {
        let lossless = r.out_of_order == 0
            && r.first_id == 1
            && r.last_id == r.events
            && r.chunks == CHUNKS as u64;
        Row {
            attached: r.first_at.unwrap(),
            done: r.done_at.unwrap(),
            events: r.events,
            texts: r.chunks,
            from_turn_2: r.from_turn_2,
            faults: u64::from(!lossless || r.gone.is_some()),
            gone: r.gone,
        }
    });
    summary.submitter_gone = sub.gone.is_some();
    Ok(summary)
}

async fn watcher(
    addr: SocketAddr,
    ready: mpsc::UnboundedSender<Res<()>>,
    permit: OwnedSemaphorePermit,
) -> io::Result<Seed> {
    const WATCH: &str = r#"{"jsonrpc":"2.0","id":1,"method":"stream/watch","params":{}}"#;
    let opened = Sse::post(addr, "/", &[("last-event-id", NO_REPLAY)], WATCH).await;
    drop(permit);
    let mut sse = match opened {
        Ok(sse) => sse,
        Err(e) => {
            let _ = ready.send(Err(format!("stream/watch: {e}")));
            return Err(e);
        }
    };
    let block = sse.next_frame().await?;
    let acked = Instant::now();
    if sse.frame(block).event != "connection-ack" {
        let _ = ready.send(Err("first frame not connection-ack".into()));
        return Err(io_err("first frame not connection-ack"));
    }
    let _ = ready.send(Ok(()));
    let mut seed = read_seed(&mut sse).await?;
    seed.first_at = Some(acked);
    Ok(seed)
}

async fn seed_fan_out(addr: SocketAddr) -> Res<FanOut> {
    let deadline = tokio::time::Instant::now() + RUN_LIMIT;
    let submitted = Instant::now();
    let mut sse = Sse::post(addr, "/", &[], &message_stream("fan out"))
        .await
        .map_err(|e| format!("message/stream: {e}"))?;
    // The task has begun once its stream's first frame is read.
    let block = tokio::time::timeout_at(deadline, sse.next_frame())
        .await
        .map_err(|_| "no first frame".to_string())?
        .map_err(|e| e.to_string())?;
    let _ = sse.frame(block);
    let submitter = tokio::spawn(async move { read_seed(&mut sse).await });
    let mut readers = JoinSet::new();
    attach(
        |ready, permit| watcher(addr, ready, permit),
        &mut readers,
        deadline,
    )
    .await?;
    let (got, sub) = joined(readers, submitter, deadline, "watcher", "the final status").await?;
    let turn_2 = got.iter().chain([&sub]).filter_map(|r| r.turn_2_at).min();
    Ok(summarise(&got, submitted, turn_2, |s| Row {
        attached: s.first_at.unwrap(),
        done: s.done_at.unwrap(),
        events: s.frames,
        texts: s.texts,
        from_turn_2: s.from_turn_2,
        faults: s.lagged,
        gone: None,
    }))
}

fn opt_ms(d: Option<Duration>) -> String {
    d.map_or("n/a".into(), |d| format!("{:.1}", ms(d)))
}

/// The median of what the runs have.
fn med_of(runs: &[&FanOut], f: impl Fn(&FanOut) -> Option<f64>) -> Option<f64> {
    let xs: Vec<f64> = runs.iter().filter_map(|r| f(r)).collect();
    (!xs.is_empty()).then(|| median(&xs))
}

/// A run read losslessly by every reader (the submitting stream included).
fn lossless(r: &FanOut) -> bool {
    r.faults == 0 && r.gone == 0 && !r.submitter_gone
}

/// One line per run, then the medians over the lossless runs.
fn report(label: &str, runs: &[FanOut], fault: &str) -> Option<(f64, f64)> {
    println!("  {label}:");
    for (i, r) in runs.iter().enumerate() {
        let gone = if r.gone > 0 || r.submitter_gone {
            format!(
                "; {} readers{} cut off with EVENTS_NOT_KEPT (median last event read {}, first \
                 kept {})",
                r.gone,
                if r.submitter_gone {
                    " and the submitting stream"
                } else {
                    ""
                },
                r.gone_after,
                r.gone_first_kept
            )
        } else {
            String::new()
        };
        println!(
            "    run {}: turn 2 to last reader done {} ms (first done {} ms, median reader {} \
             ms), submission to last done {:.0} ms; events per reader {}..{}, chunks min {} \
             median {} of {CHUNKS}; {fault}: {}; attached after turn 2: {}; {} events/s from \
             turn 2{gone}",
            i + 1,
            opt_ms(r.from_turn_2),
            opt_ms(r.first_done),
            opt_ms(r.median_from_turn_2),
            ms(r.from_submission),
            r.min_events,
            r.max_events,
            r.min_texts,
            r.median_texts,
            r.faults,
            r.late,
            r.per_sec.map_or("n/a".into(), |e| format!("{e:.0}")),
        );
    }
    let cpu: Duration = runs.iter().map(|r| r.server_cpu).sum();
    let delivered: u64 = runs.iter().map(|r| r.delivered).sum();
    println!(
        "    mur's CPU over the {} runs: {:.0} ms for {delivered} events delivered to the \
         readers: {:.2} us per event",
        runs.len(),
        ms(cpu),
        cpu.as_secs_f64() * 1e6 / delivered as f64
    );
    let good: Vec<&FanOut> = runs.iter().filter(|r| lossless(r)).collect();
    let time = med_of(&good, |r| r.from_turn_2.map(ms));
    let rate = med_of(&good, |r| r.per_sec);
    match (time, rate) {
        (Some(time), Some(rate)) => {
            println!(
                "    {} of {} runs lossless for every reader; over those, medians: turn 2 to last \
                 reader done {time:.1} ms, median reader {:.1} ms, submission to last done {:.0} \
                 ms, {rate:.0} events/s",
                good.len(),
                runs.len(),
                med_of(&good, |r| r.median_from_turn_2.map(ms)).unwrap_or(f64::NAN),
                med_of(&good, |r| Some(ms(r.from_submission))).unwrap_or(f64::NAN),
            );
            Some((time, rate))
        }
        _ => {
            println!("    0 of {} runs lossless for every reader", runs.len());
            None
        }
    }
}

/// The CPU time a process's threads have run (`/proc/<pid>/task/*/schedstat`).
fn cpu_time(pid: u32) -> Duration {
    let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Duration::ZERO;
    };
    let ns: u64 = threads
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(ns)
}

/// One run, with the CPU time `mur` spent on it.
async fn timed(pid: u32, run: impl Future<Output = Res<FanOut>>) -> Res<FanOut> {
    let before = cpu_time(pid);
    let mut done = run.await?;
    done.server_cpu = cpu_time(pid).saturating_sub(before);
    Ok(done)
}

async fn fan_out(addr: SocketAddr, pid: u32) -> Res<()> {
    // `MUR_BENCH_A2A_DOORS=v1` or `seed` runs one side only (to profile it).
    let doors = std::env::var("MUR_BENCH_A2A_DOORS").unwrap_or_else(|_| "v1,seed".into());
    let (do_v1, do_seed) = (doors.contains("v1"), doors.contains("seed"));
    if do_v1 {
        v1_fan_out(addr).await?;
    }
    if do_seed {
        seed_fan_out(addr).await?;
    }
    let mut v1s = Vec::new();
    let mut seeds = Vec::new();
    for run in 0..FAN_OUT_RUNS {
        if run % 2 == 0 {
            if do_v1 {
                v1s.push(timed(pid, v1_fan_out(addr)).await?);
            }
            if do_seed {
                seeds.push(timed(pid, seed_fan_out(addr)).await?);
            }
        } else {
            if do_seed {
                seeds.push(timed(pid, seed_fan_out(addr)).await?);
            }
            if do_v1 {
                v1s.push(timed(pid, v1_fan_out(addr)).await?);
            }
        }
    }
    let n = fan_out_n();
    let v1 = do_v1
        .then(|| {
            report(
                &format!("v1, {n} SubscribeToTask with Last-Event-ID: 0"),
                &v1s,
                "readers not reading ids 1..last each once with every chunk",
            )
        })
        .flatten();
    let seed = do_seed
        .then(|| report(&format!("seed, {n} stream/watch"), &seeds, "lagged frames"))
        .flatten();
    match (v1, seed) {
        (Some(v1), Some(seed)) => println!(
            "  v1 / seed over the lossless runs (medians): time turn 2 to last done {:.2}; \
             events/s {:.2}",
            v1.0 / seed.0,
            v1.1 / seed.1,
        ),
        _ => println!("  v1 / seed: not available (a side had no lossless run)"),
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// 3. Memory per kept task, and lookups on a full store.

struct Kept {
    /// (tasks sent, VmRSS, RssAnon), the first at 0.
    rss: Vec<(usize, u64, u64)>,
    /// `SendMessage` round trips: the first 20 tasks and the last 100.
    send_early: Vec<Duration>,
    send_late: Vec<Duration>,
    journal_bytes: u64,
    ids: Vec<String>,
}

fn journal_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut total = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            total += journal_size(&path);
        } else if path.file_name().is_some_and(|n| n == "a2a-tasks.jsonl") {
            total += entry.metadata().map_or(0, |m| m.len());
        }
    }
    total
}

async fn send_message(addr: SocketAddr) -> Res<(Duration, String)> {
    let started = Instant::now();
    let body = unary(
        addr,
        "POST",
        "/",
        &v1("SendMessage", send_params("one tool")),
    )
    .await
    .map_err(|e| format!("SendMessage: {e}"))?;
    let took = started.elapsed();
    if !body.contains("\"TASK_STATE_COMPLETED\"") {
        return Err(format!(
            "SendMessage did not answer a completed task: {body}"
        ));
    }
    let task = body
        .split_once("\"id\":\"tsk_")
        .and_then(|(_, rest)| rest.split('"').next())
        .map(|t| format!("tsk_{t}"))
        .ok_or_else(|| format!("no task id in {body}"))?;
    Ok((took, task))
}

async fn fill(mur: &Mur, dir: &Path, after: impl AsyncFn(&[String]) -> Res<()>) -> Res<Kept> {
    let settle = Duration::from_secs(1);
    tokio::time::sleep(settle).await;
    let (rss, anon) = rss_kib(mur)?;
    let mut kept = Kept {
        rss: vec![(0, rss, anon)],
        send_early: Vec::new(),
        send_late: Vec::new(),
        journal_bytes: 0,
        ids: Vec::new(),
    };
    let mut sent = 0;
    for checkpoint in CHECKPOINTS {
        while sent < checkpoint {
            let (took, task) = send_message(mur.addr).await?;
            if sent < 20 {
                kept.send_early.push(took);
            }
            if sent >= CHECKPOINTS[CHECKPOINTS.len() - 1] - 100 {
                kept.send_late.push(took);
            }
            kept.ids.push(task);
            sent += 1;
        }
        tokio::time::sleep(settle).await;
        let (rss, anon) = rss_kib(mur)?;
        kept.rss.push((sent, rss, anon));
        if sent == 100 {
            kept.journal_bytes = journal_size(dir);
            after(&kept.ids).await?;
        }
    }
    Ok(kept)
}

fn stats(label: &str, xs: &[Duration]) -> String {
    format!(
        "{label} median {:.3} ms, p90 {:.3} ms ({} calls)",
        ms(median(xs)),
        ms(p90(xs)),
        xs.len()
    )
}

/// `GetTask`, `ListTasks` (two pages of 50) and the card, on a store of 100 tasks.
async fn lookups(addr: SocketAddr, ids: &[String]) -> Res<()> {
    let mut card = Vec::with_capacity(LOOKUPS);
    let mut get = Vec::with_capacity(LOOKUPS);
    let mut list = [Vec::new(), Vec::new()];
    let (mut get_bytes, mut list_bytes) = (0, [0, 0]);
    for i in 0..LOOKUPS {
        let started = Instant::now();
        unary(addr, "GET", "/.well-known/agent-card.json", "")
            .await
            .map_err(|e| format!("the card: {e}"))?;
        card.push(started.elapsed());

        let task = &ids[ids.len() - 1 - i % 100];
        let started = Instant::now();
        let body = unary(addr, "POST", "/", &v1("GetTask", json!({"id": task})))
            .await
            .map_err(|e| format!("GetTask: {e}"))?;
        get.push(started.elapsed());
        if !body.contains("\"result\"") {
            return Err(format!("GetTask {task}: {body}"));
        }
        get_bytes = body.len();

        let page = i % 2;
        let mut params = json!({"pageSize": LIST_PAGE});
        if page == 1 {
            params["pageToken"] = json!(LIST_PAGE.to_string());
        }
        let started = Instant::now();
        let body = unary(addr, "POST", "/", &v1("ListTasks", params))
            .await
            .map_err(|e| format!("ListTasks: {e}"))?;
        list[page].push(started.elapsed());
        let listed: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
        let n = listed["result"]["tasks"].as_array().map_or(0, Vec::len);
        if n != LIST_PAGE {
            return Err(format!("ListTasks page {} had {n} tasks: {body}", page + 1));
        }
        list_bytes[page] = body.len();
    }
    println!(
        "  on the full store (100 tasks), a new connection per call: {}; {} ({get_bytes} B); \
         ListTasks pageSize {LIST_PAGE}: page 1 {} ({} B), page 2 {} ({} B)",
        stats("card GET", &card),
        stats("GetTask", &get),
        stats("", &list[0]).trim_start(),
        list_bytes[0],
        stats("", &list[1]).trim_start(),
        list_bytes[1],
    );
    // What the store keeps of one ended task besides the task itself: its events.
    let task = ids.last().ok_or("no task")?;
    let body = v1("SubscribeToTask", json!({"id": task}));
    let kept = async {
        let mut sse = Sse::post(addr, "/", &[V1, ("last-event-id", "0")], &body).await?;
        let (mut events, mut bytes) = (0, 0);
        loop {
            let block = sse.next_frame().await?;
            let f = sse.frame(block);
            events += 1;
            bytes += f.data.len();
            if kind(&f.data) == Kind::Status && v1_state(&f.data) == "TASK_STATE_COMPLETED" {
                return Ok::<_, io::Error>((events, bytes));
            }
        }
    };
    let (events, bytes) = timeout(RUN_LIMIT, kept)
        .await
        .map_err(|_| "replaying a kept task timed out".to_string())?
        .map_err(|e| format!("SubscribeToTask: {e}"))?;
    println!(
        "  one kept task: GetTask answers {get_bytes} B; its kept events, replayed with \
         Last-Event-ID: 0, are {events} envelopes of {bytes} B"
    );
    Ok(())
}

async fn memory() -> Res<()> {
    let turns = format!("{}  - text: \"All done.\"\n", bash_turn("echo hi"));
    let mut grown = Vec::new();
    for (name, keep) in [("memory-100", None), ("memory-1", Some(1))] {
        let lifecycle = keep.map_or(String::new(), |k| format!("  task_history: {k}\n"));
        let dir = capsule(name, &turns, &lifecycle);
        let mur = start(&dir);
        let addr = mur.addr;
        let measure_lookups = keep.is_none();
        let kept = fill(&mur, &dir, async |ids: &[String]| {
            if measure_lookups {
                lookups(addr, ids).await
            } else {
                Ok(())
            }
        })
        .await?;
        let label = match keep {
            None => "task_history 100 (default)".to_string(),
            Some(k) => format!("task_history {k}"),
        };
        let points: Vec<String> = kept
            .rss
            .iter()
            .map(|(n, rss, anon)| {
                format!(
                    "{n}: {:.2} MiB ({:.2} anon)",
                    *rss as f64 / 1024.0,
                    *anon as f64 / 1024.0
                )
            })
            .collect();
        println!("  {label}: RSS after tasks {}", points.join(", "));
        println!(
            "    SendMessage (one bash call) round trip: {}; {}; journal after 100 tasks {} B",
            stats("tasks 1-20", &kept.send_early),
            stats("tasks 101-200", &kept.send_late),
            kept.journal_bytes,
        );
        grown.push((label, kept));
        drop(mur);
    }
    let at = |k: &Kept, n: usize| {
        k.rss
            .iter()
            .find(|(m, _, _)| *m == n)
            .map(|(_, rss, anon)| (*rss as f64, *anon as f64))
            .unwrap()
    };
    let (full, one) = (&grown[0].1, &grown[1].1);
    let per = |k: &Kept, from: usize, to: usize| {
        let (a, b) = (at(k, from), at(k, to));
        (
            (b.0 - a.0) / (to - from) as f64,
            (b.1 - a.1) / (to - from) as f64,
        )
    };
    let (full_0, full_1) = (per(full, 0, 100), per(full, 1, 100));
    let one_1 = per(one, 1, 100);
    println!(
        "  per task, keeping 100: (RSS(100) - RSS(0)) / 100 = {:.1} KiB ({:.1} anon); \
         (RSS(100) - RSS(1)) / 99 = {:.1} KiB ({:.1} anon)",
        full_0.0, full_0.1, full_1.0, full_1.1
    );
    println!(
        "  per task, keeping 1: (RSS(100) - RSS(1)) / 99 = {:.1} KiB ({:.1} anon); the store's \
         share, keeping 100 minus keeping 1: {:.1} KiB ({:.1} anon) per kept task",
        one_1.0,
        one_1.1,
        full_1.0 - one_1.0,
        full_1.1 - one_1.1
    );
    let grow = |k: &Kept| at(k, 200).0 - at(k, 100).0;
    println!(
        "  RSS from 100 to 200 tasks (the store full): {:+.0} KiB keeping 100, {:+.0} KiB keeping 1",
        grow(full),
        grow(one)
    );
    Ok(())
}

// ---------------------------------------------------------------------------------

fn main() {
    let parts =
        std::env::var("MUR_BENCH_A2A_PARTS").unwrap_or_else(|_| "streaming,fanout,memory".into());
    let client = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "mur A2A v1.0 door benchmark: release `mur run` (queue + sleep, scripted driver) on \
         127.0.0.1, A2A-Version: 1.0; parts {parts}"
    );

    if parts.contains("streaming") {
        println!(
            "streaming, one client: a task whose one turn streams {CHUNKS} chunks, \
             SendStreamingMessage vs message/stream, submission to the end, alternating, after \
             a warm-up of each"
        );
        let mur = start(&capsule("streaming", &chunks_turn(), ""));
        if let Err(e) = client.block_on(streaming(mur.addr)) {
            println!("  failed: {e}");
        }
        drop(mur);
    }

    if parts.contains("fanout") {
        println!(
            "fan-out: a task of `bash: {SLEEP}` then a turn streaming {CHUNKS} chunks; {} \
             readers attached during the sleep, every reader and the submitting stream read to \
             the end; v1 and seed alternating, after a warm-up of each",
            fan_out_n()
        );
        let turns = format!("{}{}", bash_turn(SLEEP), chunks_turn());
        let mur = start(&capsule("fanout", &turns, ""));
        println!("  (mur pid {})", mur.child.id());
        if let Err(e) = client.block_on(fan_out(mur.addr, mur.child.id())) {
            println!("  failed: {e}");
        }
        drop(mur);
    }

    if parts.contains("memory") {
        println!(
            "memory: RSS of a fresh mur after 0, {} tasks of one bash call each, sent with \
             SendMessage, ~1 s after each checkpoint",
            CHECKPOINTS
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
        if let Err(e) = client.block_on(memory()) {
            println!("  failed: {e}");
        }
    }
    client.shutdown_background();
}
