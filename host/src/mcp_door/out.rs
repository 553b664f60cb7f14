//! How the door writes its answer. Most requests get one JSON body. A `tools/call`
//! runs as long as the capsule's task does: its answer is a stream of messages once
//! there is something to stream before the end (a progress notification, or a
//! heartbeat due to keep proxies from closing a quiet connection), and stays one plain
//! JSON body when the task ends first or the client reads no event streams. The
//! stream carries no event ids: it cannot be resumed, so a client never tries.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::http1::{Reply, Request};

/// How much a client may send after its request before it counts as gone (it is
/// owed nothing for it: the connection closes after the answer).
const DISCARD_MAX: usize = 64 * 1024;

/// What the request's `Accept` allows: JSON, and event streams. A request without
/// one takes either, as HTTP reads a missing `Accept`.
pub fn accepts(request: &Request) -> (bool, bool) {
    let Some(accept) = request.header("accept") else {
        return (true, true);
    };
    let kinds: Vec<String> = accept
        .split(',')
        .map(|range| {
            let kind = range.split(';').next().unwrap_or_default();
            kind.trim().to_ascii_lowercase()
        })
        .collect();
    let any = kinds.iter().any(|k| k == "*/*");
    let json = any
        || kinds
            .iter()
            .any(|k| k == "application/json" || k == "application/*");
    let sse = any
        || kinds
            .iter()
            .any(|k| k == "text/event-stream" || k == "text/*");
    (json, sse)
}

/// A whole JSON answer with the era's headers; `body` empty for none.
pub async fn reply(
    socket: &mut TcpStream,
    status: &'static str,
    headers: Vec<(&'static str, String)>,
    body: String,
) {
    let content_type = if body.is_empty() {
        ""
    } else {
        "application/json"
    };
    let reply = Reply {
        status,
        content_type,
        headers,
        body: body.into_bytes(),
    };
    reply.write(socket).await;
}

/// The answer to one running call.
pub struct Out {
    socket: TcpStream,
    headers: Vec<(&'static str, String)>,
    /// The client reads event streams.
    sse: bool,
    /// The stream's head is written: what follows goes as events.
    streaming: bool,
    discarded: AtomicUsize,
}

impl Out {
    pub fn new(socket: TcpStream, headers: Vec<(&'static str, String)>, sse: bool) -> Out {
        Out {
            socket,
            headers,
            sse,
            streaming: false,
            discarded: AtomicUsize::new(0),
        }
    }

    /// Whether messages before the answer can reach the client.
    pub fn streams(&self) -> bool {
        self.sse
    }

    async fn open(&mut self) -> std::io::Result<()> {
        if self.streaming {
            return Ok(());
        }
        let mut head = String::from(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache, no-transform\r\nx-accel-buffering: no\r\n",
        );
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("connection: close\r\n\r\n");
        self.socket.write_all(head.as_bytes()).await?;
        self.streaming = true;
        Ok(())
    }

    /// One message (a notification) on the stream, opening it.
    pub async fn send(&mut self, message: &str) -> std::io::Result<()> {
        self.open().await?;
        let event = format!("event: message\ndata: {message}\n\n");
        self.socket.write_all(event.as_bytes()).await
    }

    /// A heartbeat, when the client reads streams: it commits the answer to one.
    pub async fn beat(&mut self) -> std::io::Result<()> {
        if !self.sse {
            return Ok(());
        }
        self.open().await?;
        self.socket.write_all(b": ping\n\n").await
    }

    /// The answer: the last event of the stream, or the whole JSON body with `status`.
    pub async fn finish(mut self, status: &'static str, body: String) {
        if self.streaming {
            let _ = self.send(&body).await;
            let _ = self.socket.shutdown().await;
            return;
        }
        let headers = std::mem::take(&mut self.headers);
        reply(&mut self.socket, status, headers, body).await;
    }

    /// Completes once the client has closed its side (or broken the connection):
    /// nobody is left to read the answer.
    pub async fn gone(&self) {
        let mut scratch = [0u8; 4096];
        loop {
            if self.socket.readable().await.is_err() {
                return;
            }
            match self.socket.try_read(&mut scratch) {
                Ok(0) => return,
                Ok(n) => {
                    if self.discarded.fetch_add(n, Ordering::Relaxed) + n > DISCARD_MAX {
                        return;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_accept(accept: Option<&str>) -> Request {
        Request {
            method: "POST".into(),
            path: "/mcp".into(),
            headers: accept
                .map(|a| vec![("Accept".to_string(), a.to_string())])
                .unwrap_or_default(),
            body: Vec::new(),
        }
    }

    #[test]
    fn accept_is_read_with_wildcards_and_parameters() {
        for (accept, want) in [
            (None, (true, true)),
            (Some("application/json, text/event-stream"), (true, true)),
            (Some("application/json"), (true, false)),
            (Some("text/event-stream;q=0.9"), (false, true)),
            (Some("*/*"), (true, true)),
            (Some("application/*, text/*"), (true, true)),
            (Some("text/html"), (false, false)),
        ] {
            assert_eq!(accepts(&with_accept(accept)), want, "{accept:?}");
        }
    }
}
