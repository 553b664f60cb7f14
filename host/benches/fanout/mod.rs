//! The streaming fan-out the benches share (`stream`, `otel`): a `mur run` capsule
//! whose every task is one turn streaming `CHUNKS` text chunks, N `stream/watch`
//! connections (no replay) opened and acknowledged before one task is sent over
//! `message/stream`, each connection read to the task's final status.
//!
//! Per connection: the text frames of that task it read and the time from submission
//! to its final status; per run, the `lagged` frames and the aggregate frames per
//! second (every frame with an id that reached a watcher / time until the last watcher
//! read the final status).

use crate::client::*;
use crate::mur;

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio::time::timeout;

/// Text chunks the task's single turn streams.
pub const CHUNKS: usize = 2_000;
/// A `Last-Event-ID` above every id the capsule writes: the watch replays nothing.
pub const NO_REPLAY: &str = "18446744073709551614";
/// Connects (with their request and first frame) in flight at once, so the listen
/// backlog never overflows into SYN retries.
pub const CONNECTING: usize = 64;
/// Any one read, connect or write.
/// One fan-out run or one phase of connecting, from start to end.
pub const RUN_LIMIT: Duration = Duration::from_secs(300);

pub type Res<T> = Result<T, String>;

pub fn chunk(i: usize) -> String {
    format!("c{i} ")
}

/// A capsule (a fresh folder `name` of `bench`) whose script has `turns` turns, each
/// streaming `CHUNKS` chunks.
pub fn capsule(bench: &str, name: &str, turns: usize) -> PathBuf {
    let dir = mur::scratch(bench, name);
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

pub const WATCH: &str = r#"{"jsonrpc":"2.0","id":1,"method":"stream/watch","params":{}}"#;

/// A `stream/watch` whose `connection-ack` has been read.
pub async fn open_watch(addr: SocketAddr, last_event_id: &str) -> io::Result<Sse> {
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
pub async fn submit(addr: SocketAddr) -> io::Result<String> {
    finish(Sse::post(addr, "/", &[], &message_stream("stream")).await?).await
}

// ---------------------------------------------------------------------------------
// Fan-out.

pub struct FanOut {
    pub median_final: Duration,
    pub max_final: Duration,
    pub min_texts: u64,
    pub median_texts: u64,
    pub lagged: u64,
    pub lagged_connections: u64,
    pub missed: u64,
    pub frames_per_sec: f64,
}

/// Opens `n` watch connections, starts `start` once each has read its ack, and reads
/// every connection to its final status. `start` returns the task id.
pub async fn fan_out<F, Fut>(addr: SocketAddr, n: usize, start: F) -> Res<FanOut>
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
pub fn report(label: &str, runs: &[FanOut]) {
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

/// `runs` fan-outs one after the other, reported as one line; the median aggregate
/// frames per second, or `None` when no run succeeded.
pub async fn runs<F, Fut>(
    label: &str,
    addr: SocketAddr,
    n: usize,
    runs: usize,
    start: F,
) -> Option<f64>
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
