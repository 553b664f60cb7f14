//! What the benchmarks that talk to a real `mur` share: an event-stream client (one
//! `POST`, the response head, then frames, from a close-delimited body like ours or a
//! chunked one like hyper's), the bits of a frame's data they read, and their statistics.

use std::io;
use std::net::SocketAddr;
use std::ops::Range;
use std::time::Duration;

use mur::sse::{Frame, FrameReader};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// The bound on any one read, write or connect.
pub const IO_LIMIT: Duration = Duration::from_secs(30);

pub fn io_err(what: impl std::fmt::Display) -> io::Error {
    io::Error::other(what.to_string())
}

pub async fn limited<T>(what: &str, f: impl Future<Output = io::Result<T>>) -> io::Result<T> {
    timeout(IO_LIMIT, f)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, format!("{what} timed out")))?
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[derive(Clone, Copy)]
enum Chunk {
    Size,
    Data(usize),
    Crlf,
    Done,
}

pub struct Sse {
    socket: TcpStream,
    /// Bytes read but not yet de-chunked (chunked bodies only).
    raw: Vec<u8>,
    /// Event-stream bytes, split into frames by the project's one parser, which
    /// lends them out without copying.
    body: FrameReader,
    chunked: Option<Chunk>,
}

pub async fn read_into(socket: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<()> {
    buf.reserve(16 * 1024);
    let n = limited("read", socket.read_buf(buf)).await?;
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    Ok(())
}

/// A whole request sent on a new connection, left open for the answer.
pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> io::Result<TcpStream> {
    let mut socket = limited("connect", TcpStream::connect(addr)).await?;
    socket.set_nodelay(true)?;
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    limited("write", socket.write_all(request.as_bytes())).await?;
    Ok(socket)
}

impl Sse {
    /// A JSON-RPC `POST` to `path`; returns once the `200` head has been read.
    pub async fn post(
        addr: SocketAddr,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> io::Result<Sse> {
        let mut all = vec![("content-type", "application/json")];
        all.extend_from_slice(headers);
        let socket = send(addr, "POST", path, &all, body).await?;
        let mut sse = Sse {
            socket,
            raw: Vec::new(),
            body: FrameReader::default(),
            chunked: None,
        };
        loop {
            if let Some(end) = find(&sse.raw, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&sse.raw[..end]).to_ascii_lowercase();
                if !head.starts_with("http/1.1 200") {
                    let rest = String::from_utf8_lossy(&sse.raw[end + 4..]).into_owned();
                    return Err(io_err(format!(
                        "answered {}: {rest}",
                        head.lines().next().unwrap_or_default()
                    )));
                }
                let chunked = head
                    .lines()
                    .any(|l| l.starts_with("transfer-encoding:") && l.contains("chunked"));
                let rest = sse.raw.split_off(end + 4);
                sse.raw.clear();
                if chunked {
                    sse.chunked = Some(Chunk::Size);
                    sse.raw = rest;
                    sse.decode()?;
                } else {
                    sse.body.buffer().extend_from_slice(&rest);
                }
                return Ok(sse);
            }
            if sse.raw.len() > 64 * 1024 {
                return Err(io_err("response head too long"));
            }
            read_into(&mut sse.socket, &mut sse.raw).await?;
        }
    }

    /// Moves what `raw` holds of chunk data into `body`.
    fn decode(&mut self) -> io::Result<()> {
        let mut i = 0;
        while let Some(state) = self.chunked {
            match state {
                Chunk::Size => {
                    let Some(end) = find(&self.raw[i..], b"\r\n") else {
                        break;
                    };
                    let line = String::from_utf8_lossy(&self.raw[i..i + end]);
                    let hex = line.split(';').next().unwrap_or_default().trim();
                    let size = usize::from_str_radix(hex, 16)
                        .map_err(|_| io_err(format!("bad chunk size {hex:?}")))?;
                    i += end + 2;
                    self.chunked = Some(if size == 0 {
                        Chunk::Done
                    } else {
                        Chunk::Data(size)
                    });
                }
                Chunk::Data(n) => {
                    let take = n.min(self.raw.len() - i);
                    if take == 0 {
                        break;
                    }
                    self.body.buffer().extend_from_slice(&self.raw[i..i + take]);
                    i += take;
                    self.chunked = Some(if take == n {
                        Chunk::Crlf
                    } else {
                        Chunk::Data(n - take)
                    });
                }
                Chunk::Crlf => {
                    if self.raw.len() - i < 2 {
                        break;
                    }
                    i += 2;
                    self.chunked = Some(Chunk::Size);
                }
                Chunk::Done => break,
            }
        }
        self.raw.drain(..i);
        Ok(())
    }

    async fn fill(&mut self) -> io::Result<()> {
        match self.chunked {
            None => read_into(&mut self.socket, self.body.buffer()).await,
            Some(Chunk::Done) => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "body ended")),
            Some(_) => {
                read_into(&mut self.socket, &mut self.raw).await?;
                self.decode()
            }
        }
    }

    /// The next frame, heartbeats skipped, as a range of the reader's buffer.
    pub async fn next_frame(&mut self) -> io::Result<Range<usize>> {
        loop {
            if let Some(block) = self.body.next_block() {
                return Ok(block);
            }
            self.fill().await?;
        }
    }

    pub fn frame(&self, block: Range<usize>) -> Frame<'_> {
        self.body.frame(block)
    }
}

/// The task id a frame's data starts with (`{"id":"tsk_…"`).
pub fn task_of(data: &str) -> &str {
    data.strip_prefix("{\"id\":\"")
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_default()
}

pub fn state_of(data: &str) -> &str {
    data.split_once("\"state\":\"")
        .and_then(|(_, rest)| rest.split('"').next())
        .unwrap_or_default()
}

pub fn message_stream(text: &str) -> String {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "message/stream",
        "params": {"message": {"messageId": "msg-bench", "role": "user", "parts": [{"text": text}]}}
    })
    .to_string()
}

/// Reads a `message/stream` to its final status; returns the task id.
pub async fn finish(mut sse: Sse) -> io::Result<String> {
    let mut task = String::new();
    loop {
        let block = sse.next_frame().await?;
        let f = sse.frame(block);
        if task.is_empty() {
            task = task_of(&f.data).to_string();
        }
        if f.event == "error" {
            return Err(io_err(format!("message/stream: error {}", &f.data)));
        }
        if f.event == "status" && f.data.ends_with(r#""final":true}"#) {
            let state = state_of(&f.data);
            if state != "completed" {
                return Err(io_err(format!("task ended {state}: {}", &f.data)));
            }
            return Ok(task);
        }
    }
}

fn sorted<T: Copy + PartialOrd>(samples: &[T]) -> Vec<T> {
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    s
}

pub fn median<T: Copy + PartialOrd>(samples: &[T]) -> T {
    let s = sorted(samples);
    s[s.len() / 2]
}

/// The nearest-rank 90th percentile.
pub fn p90<T: Copy + PartialOrd>(samples: &[T]) -> T {
    let s = sorted(samples);
    s[(s.len() * 9).div_ceil(10).max(1) - 1]
}
