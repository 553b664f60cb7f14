//! How the v1 door writes: one JSON reply, or an event stream of JSON-RPC envelopes,
//! each event with the task's sequence number as its `id:`, on the same hand-written
//! stream (and heartbeat) as the seed's frames.

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::rpc::{self, Fault};
use crate::http1::event_stream::Stream;
use crate::task_store::{Event, Follower, Missed, Tasks};

/// A whole JSON answer (a result or an error), then the connection closes.
pub async fn reply(mut socket: TcpStream, body: String) {
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body.as_bytes());
    let _ = socket.write_all(&bytes).await;
    let _ = socket.shutdown().await;
}

/// How many bytes of waiting events one write may carry.
const BATCH_BYTES: usize = 64 * 1024;

/// One connection's framing: each event's own bytes spliced between this request's
/// envelope pieces, with no per-event formatting.
struct Framer {
    /// `,"id":<the request's id>,"result":` after `{"jsonrpc":"2.0"`.
    envelope: Vec<u8>,
    batch: Vec<u8>,
}

impl Framer {
    fn new(id: &Value) -> Framer {
        let mut envelope = b",\"id\":".to_vec();
        envelope.extend_from_slice(id.to_string().as_bytes());
        envelope.extend_from_slice(b",\"result\":");
        Framer {
            envelope,
            batch: Vec::with_capacity(BATCH_BYTES),
        }
    }

    /// Appends one event as an SSE frame: `id: <seq>` and the envelope on one line.
    fn push(&mut self, event: &Event) {
        use std::io::Write;
        let _ = write!(self.batch, "id: {}\ndata: {{\"jsonrpc\":\"2.0\"", event.seq);
        self.batch.extend_from_slice(&self.envelope);
        self.batch.extend_from_slice(&event.json);
        self.batch.extend_from_slice(b"}\n\n");
    }

    fn full(&self) -> bool {
        self.batch.len() >= BATCH_BYTES
    }

    /// Writes what is batched, keeping the buffer for the next batch.
    async fn flush(&mut self, stream: &mut Stream) -> std::io::Result<()> {
        if !self.batch.is_empty() {
            stream.write_raw(&self.batch).await?;
            self.batch.clear();
        }
        Ok(())
    }
}

/// An error inside an open stream: an envelope with no `id:`.
fn error_frame(id: &Value, fault: &Fault) -> Vec<u8> {
    format!("data: {}\n\n", rpc::error(id, fault)).into_bytes()
}

/// Opens the event stream on `socket`, writes `first` (a snapshot), then follows the
/// task's events after `after` until one ends the stream, the client goes, or the
/// store can no longer say what came next.
pub async fn follow(
    socket: TcpStream,
    tasks: &Tasks,
    task: &str,
    id: &Value,
    first: Option<Event>,
    after: u64,
) {
    // Followed before the first await, so nothing the task writes meanwhile can be
    // trimmed away from this connection.
    let follower = tasks.follow(task, after);
    let Ok(mut stream) = Stream::open(socket).await else {
        return;
    };
    let written = async {
        let mut framer = Framer::new(id);
        if let Some(first) = &first {
            framer.push(first);
            framer.flush(&mut stream).await?;
        }
        pump(&mut stream, &mut framer, tasks, task, id, follower).await
    };
    let _ = written.await;
    stream.close().await;
}

async fn pump(
    stream: &mut Stream,
    framer: &mut Framer,
    tasks: &Tasks,
    task: &str,
    id: &Value,
    follower: Follower<'_>,
) -> std::io::Result<()> {
    // Watched before the first read, so a change between the read and the wait is
    // not missed.
    let mut changes = tasks.watch();
    loop {
        match follower.next() {
            Ok((events, _)) => {
                for event in &events {
                    framer.push(event);
                    if event.ends {
                        return framer.flush(stream).await;
                    }
                    if framer.full() {
                        framer.flush(stream).await?;
                    }
                }
                framer.flush(stream).await?;
            }
            Err(Missed::Gone { first_available }) => {
                // This reader fell further behind than even a followed task's log
                // reaches: say so rather than skip what it never read.
                let fault = Fault::events_gone(task, follower.after(), first_available);
                return stream.write_raw(&error_frame(id, &fault)).await;
            }
            Err(Missed::UnknownTask) => {
                let fault = Fault::task_not_found(task);
                return stream.write_raw(&error_frame(id, &fault)).await;
            }
        }
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return Ok(()) },
            beat = stream.beat() => beat?,
        }
    }
}
