//! An open event stream on a capsule's address, with its heartbeat. The seed's wire
//! writes its frames on it and the A2A v1.0 door its events.
//!
//! The seed's event stream is an HTTP/1.1 body with exactly three headers and no
//! framing: it ends when the connection closes. hyper always chunk-encodes an
//! HTTP/1.1 body of unknown length, which would put chunk sizes between the frames, so
//! the response is written here by hand.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::{Instant, MissedTickBehavior, interval_at};

use crate::bus::Next;
use crate::frames::{Frame, HEARTBEAT};

/// The heartbeat interval of every event stream mur writes; tests shorten it through
/// `MUR_HEARTBEAT_MS`.
pub(crate) fn heartbeat_every() -> Duration {
    std::env::var("MUR_HEARTBEAT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_secs(15))
}

const SSE_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: keep-alive\r\n\r\n";

/// An open event stream: frames, and a heartbeat due every interval from when the
/// connection opened, whatever else was written.
pub(crate) struct Stream {
    socket: TcpStream,
    heartbeat: tokio::time::Interval,
}

impl Stream {
    pub(crate) async fn open(mut socket: TcpStream) -> std::io::Result<Self> {
        socket.write_all(SSE_HEAD).await?;
        let every = heartbeat_every();
        let mut heartbeat = interval_at(Instant::now() + every, every);
        // A heartbeat held up by a slow write goes out at once and the next ones keep
        // to the schedule counted from the connection's opening, as the seed says;
        // `Delay` would shift every later one.
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Skip);
        Ok(Stream { socket, heartbeat })
    }

    pub(crate) async fn write(&mut self, frame: &Frame) -> std::io::Result<()> {
        self.socket.write_all(&frame.bytes).await
    }

    pub(crate) async fn write_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.socket.write_all(bytes).await
    }

    /// Waits for the next heartbeat, then writes it.
    pub(crate) async fn beat(&mut self) -> std::io::Result<()> {
        self.heartbeat.tick().await;
        self.socket.write_all(HEARTBEAT).await
    }

    /// Live frames until `stop` says so, the bus closes, or the client goes away.
    /// Returns whether the bus closed.
    pub(crate) async fn pump(
        &mut self,
        conn: &crate::bus::Connection,
        stop: impl Fn(&Frame) -> bool,
    ) -> std::io::Result<bool> {
        let mut batch = Vec::with_capacity(BATCH_BYTES);
        loop {
            tokio::select! {
                next = conn.next() => match next {
                    Next::Frame(frame) => {
                        let (stopped, closed) = gather(&mut batch, conn, frame, &stop);
                        self.socket.write_all(&batch).await?;
                        conn.written();
                        batch.clear();
                        if stopped {
                            return Ok(false);
                        }
                        if closed {
                            return Ok(true);
                        }
                    }
                    Next::Closed => return Ok(true),
                },
                beat = self.beat() => beat?,
            }
        }
    }

    pub(crate) async fn close(mut self) {
        let _ = self.socket.shutdown().await;
    }
}

/// How many bytes of waiting frames one write may carry.
const BATCH_BYTES: usize = 64 * 1024;

/// `first` and the frames already waiting behind it, in one buffer: a burst of small
/// frames costs one write, not one per frame. Stops after the frame `stop` names.
/// Returns whether it stopped there, and whether the stream closed.
fn gather(
    batch: &mut Vec<u8>,
    conn: &crate::bus::Connection,
    first: Frame,
    stop: &impl Fn(&Frame) -> bool,
) -> (bool, bool) {
    let mut frame = first;
    loop {
        batch.extend_from_slice(&frame.bytes);
        if stop(&frame) {
            return (true, false);
        }
        if batch.len() >= BATCH_BYTES {
            return (false, false);
        }
        frame = match conn.try_next() {
            Some(Next::Frame(next)) => next,
            Some(Next::Closed) => return (false, true),
            None => return (false, false),
        };
    }
}
