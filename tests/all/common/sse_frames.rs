//! The tests' one event-stream reader: strict, over a plain socket, every read with a
//! deadline. Each block is checked against the seed's frame format as it is read
//! (`\n` only; `[id]`, `event`, exactly one `data` line holding a JSON object; ids on
//! exactly the frame types that carry them; the only comment is `:heartbeat`), so no
//! test can pass on a stream that a client would misread.
//!
//! ```ignore
//! let mut sse = Sse::open(socket, Instant::now(), WAIT); // the head, byte for byte
//! let first = sse.frame(WAIT);                          // heartbeats skipped
//! let items = sse.rest_items(WAIT);                     // frames and heartbeats, to close
//! ```

use std::io::{ErrorKind, Read};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::SSE_HEAD;

/// One frame of an event stream.
#[derive(Clone, Debug)]
pub struct Frame {
    pub id: Option<u64>,
    pub event: String,
    pub data: Value,
    /// The frame's exact bytes, without the blank line that ends it.
    pub block: String,
    /// When it was read.
    pub at: Instant,
}

impl Frame {
    /// The task id in its data.
    pub fn task(&self) -> &str {
        self.data["id"].as_str().unwrap_or_default()
    }

    /// A status frame's state.
    pub fn state(&self) -> &str {
        self.data["status"]["state"].as_str().unwrap_or_default()
    }

    /// A final status: what ends a `message/stream`.
    pub fn is_final(&self) -> bool {
        self.event == "status" && self.data["final"] == true
    }

    /// `(id, what)`: the event, and a status frame's state or a text frame's finality.
    pub fn label(&self) -> (Option<u64>, String) {
        let what = match self.event.as_str() {
            "status" => format!("status:{}", self.state()),
            "text" if self.data["final"] == true => "text:final".to_string(),
            other => other.to_string(),
        };
        (self.id, what)
    }
}

/// What one block of a stream is.
#[derive(Clone, Debug)]
pub enum Item {
    /// `:heartbeat`, and when it was read.
    Heartbeat(Instant),
    Frame(Frame),
}

pub fn only_frames(items: &[Item]) -> Vec<Frame> {
    items
        .iter()
        .filter_map(|i| match i {
            Item::Frame(f) => Some(f.clone()),
            Item::Heartbeat(_) => None,
        })
        .collect()
}

/// When each heartbeat was read.
pub fn heartbeats(items: &[Item]) -> Vec<Instant> {
    items
        .iter()
        .filter_map(|i| match i {
            Item::Heartbeat(at) => Some(*at),
            Item::Frame(_) => None,
        })
        .collect()
}

pub fn labels(frames: &[Frame]) -> Vec<(Option<u64>, String)> {
    frames.iter().map(Frame::label).collect()
}

/// A label with an id, for the expected side of a comparison with [`labels`].
pub fn l(id: u64, what: &str) -> (Option<u64>, String) {
    (Some(id), what.to_string())
}

/// The labels of a task that made one tool call and then answered (no chunks).
pub fn one_call_task() -> Vec<(Option<u64>, String)> {
    vec![
        l(0, "status:working"),
        l(1, "artifact"),
        l(2, "status:working"),
        // The whole reply, as no chunk came in the last turn.
        l(3, "text:final"),
        l(3, "status:completed"),
    ]
}

/// One block of the stream (the bytes before a blank line), checked against the
/// seed's frame format.
pub fn parse_block(block: &str) -> Item {
    let at = Instant::now();
    assert!(
        !block.contains('\r'),
        "lines end with \\n, never \\r\\n: {block:?}"
    );
    assert!(!block.is_empty(), "a blank line only ever ends a frame");
    if block.starts_with(':') {
        assert_eq!(block, ":heartbeat", "the only comment is the heartbeat");
        return Item::Heartbeat(at);
    }
    let frames = mur::sse::FrameReader::default().feed(format!("{block}\n\n").as_bytes());
    let [frame] = frames.as_slice() else {
        panic!("not exactly one frame: {block:?}");
    };
    // Written back in the seed's one form, the frame must be the very bytes received:
    // an unsigned id line (only where one belongs), the event, exactly one data line.
    let id_line = frame.id.map(|id| format!("id: {id}\n")).unwrap_or_default();
    assert_eq!(
        block,
        format!("{id_line}event: {}\ndata: {}", frame.event, frame.data),
        "a frame is [id], event, then exactly one data line: {block:?}"
    );
    let data: Value = serde_json::from_str(&frame.data)
        .unwrap_or_else(|e| panic!("data is not valid JSON ({e}): {block:?}"));
    assert!(data.is_object(), "data is a JSON object: {block:?}");
    let carries_id = matches!(
        frame.event.as_str(),
        "status" | "artifact" | "text" | "thinking"
    );
    assert_eq!(
        frame.id.is_some(),
        carries_id,
        "only status, artifact, text and thinking carry an id: {block:?}"
    );
    Item::Frame(Frame {
        id: frame.id,
        event: frame.event.clone(),
        data,
        block: block.to_string(),
        at,
    })
}

/// The blocks of a whole event-stream body, read to its close: it must end with the
/// blank line of its last frame.
pub fn items_of(body: &str) -> Vec<Item> {
    let mut items = Vec::new();
    let mut rest = body;
    while let Some((block, after)) = rest.split_once("\n\n") {
        items.push(parse_block(block));
        rest = after;
    }
    assert!(rest.is_empty(), "the stream ended inside a frame: {rest:?}");
    items
}

/// An event stream read as it comes.
pub struct Sse {
    socket: TcpStream,
    buf: Vec<u8>,
    /// When the client began (before connecting, where the caller can say so), so
    /// that nothing the server writes can be earlier.
    pub opened: Instant,
    /// Every block read so far (each cut at 300 characters), for failure messages.
    log: Vec<String>,
    closed: bool,
}

impl Sse {
    /// Reads the head off `socket`, within `within`; it must be the event stream's,
    /// byte for byte.
    pub fn open(socket: TcpStream, opened: Instant, within: Duration) -> Sse {
        let mut sse = Sse {
            socket,
            buf: Vec::new(),
            opened,
            log: Vec::new(),
            closed: false,
        };
        let deadline = Instant::now() + within;
        let end = loop {
            if let Some(at) = find(&sse.buf, b"\r\n\r\n") {
                break at + 4;
            }
            assert!(
                sse.fill(deadline),
                "closed before the head: {:?}",
                String::from_utf8_lossy(&sse.buf)
            );
        };
        let head: Vec<u8> = sse.buf.drain(..end).collect();
        assert_eq!(
            String::from_utf8_lossy(&head),
            SSE_HEAD,
            "the event stream's head, byte for byte"
        );
        sse
    }

    /// Reads more bytes; false at the end of the stream.
    fn fill(&mut self, deadline: Instant) -> bool {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "timed out; read so far:\n{}",
            self.log.join("\n")
        );
        self.socket.set_read_timeout(Some(left)).unwrap();
        let mut chunk = vec![0u8; 256 * 1024];
        match self.socket.read(&mut chunk) {
            Ok(0) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => true,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("timed out; read so far:\n{}", self.log.join("\n"))
            }
            Err(e) => panic!("read failed: {e}; read so far:\n{}", self.log.join("\n")),
        }
    }

    /// The next frame or heartbeat; `None` once the server closed the connection.
    pub fn item_by(&mut self, deadline: Instant) -> Option<Item> {
        loop {
            if let Some(at) = find(&self.buf, b"\n\n") {
                let block: Vec<u8> = self.buf.drain(..at + 2).collect();
                let block = String::from_utf8(block[..at].to_vec()).expect("frames are UTF-8");
                let item = parse_block(&block);
                self.log.push(block.chars().take(300).collect());
                return Some(item);
            }
            if self.closed || !self.fill(deadline) {
                self.closed = true;
                assert!(
                    self.buf.is_empty(),
                    "the stream ended inside a frame: {:?}",
                    String::from_utf8_lossy(&self.buf)
                );
                return None;
            }
        }
    }

    /// The next frame, heartbeats skipped; `None` once the server closed.
    pub fn next_by(&mut self, deadline: Instant) -> Option<Frame> {
        loop {
            match self.item_by(deadline)? {
                Item::Frame(f) => return Some(f),
                Item::Heartbeat(_) => {}
            }
        }
    }

    /// Items up to and including the first frame `stop` accepts.
    pub fn items_until(
        &mut self,
        within: Duration,
        mut stop: impl FnMut(&Frame) -> bool,
    ) -> Vec<Item> {
        let deadline = Instant::now() + within;
        let mut out = Vec::new();
        loop {
            let item = self.item_by(deadline).unwrap_or_else(|| {
                panic!(
                    "closed before the frame waited for; read:\n{}",
                    self.log.join("\n")
                )
            });
            let done = matches!(&item, Item::Frame(f) if stop(f));
            out.push(item);
            if done {
                return out;
            }
        }
    }

    /// Frames up to and including the first `stop` accepts.
    pub fn until(&mut self, within: Duration, stop: impl FnMut(&Frame) -> bool) -> Vec<Frame> {
        only_frames(&self.items_until(within, stop))
    }

    /// The next `n` frames, heartbeats skipped.
    pub fn frames(&mut self, n: usize, within: Duration) -> Vec<Frame> {
        let deadline = Instant::now() + within;
        let mut out = Vec::new();
        while out.len() < n {
            let frame = self.next_by(deadline).unwrap_or_else(|| {
                panic!(
                    "closed after {} of {n} frames; read:\n{}",
                    out.len(),
                    self.log.join("\n")
                )
            });
            out.push(frame);
        }
        out
    }

    /// The next frame, heartbeats skipped; the stream must not close first.
    pub fn frame(&mut self, within: Duration) -> Frame {
        self.frames(1, within).remove(0)
    }

    /// Every frame and heartbeat until the server closes the connection.
    pub fn rest_items(&mut self, within: Duration) -> Vec<Item> {
        let deadline = Instant::now() + within;
        let mut out = Vec::new();
        while let Some(item) = self.item_by(deadline) {
            out.push(item);
        }
        out
    }

    /// Every frame until the server closes the connection.
    pub fn rest(&mut self, within: Duration) -> Vec<Frame> {
        only_frames(&self.rest_items(within))
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
