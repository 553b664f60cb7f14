//! A reader of server-sent events (the `text/event-stream` format model APIs stream in).
//!
//! Bytes arrive in whatever pieces the network delivers, so an event, a line, a UTF-8
//! character or a `\r\n` pair may be split across two reads. The reader keeps the
//! unfinished line as bytes and decodes a line only once it is complete.

/// One dispatched event: its `event:` name (empty when the server gave none) and its
/// `data:` lines joined with `\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: String,
    pub data: String,
}

/// Turns a byte stream into events. Feed it every chunk read, then call
/// [`SseReader::finish`] at the end of the stream.
#[derive(Debug, Default)]
pub struct SseReader {
    /// The bytes of the line being read, without its terminator.
    line: Vec<u8>,
    /// The last byte fed was `\r`: a `\n` that comes next belongs to the same line end.
    after_cr: bool,
    event: String,
    data: String,
    /// At least one `data:` line was seen for the pending event.
    has_data: bool,
}

impl SseReader {
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads one chunk and returns the events it completed, in order.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        for &byte in bytes {
            let after_cr = std::mem::replace(&mut self.after_cr, false);
            match byte {
                // The `\n` of a `\r\n` split across reads: the line already ended.
                b'\n' if after_cr => {}
                b'\n' => self.end_line(&mut events),
                b'\r' => {
                    self.after_cr = true;
                    self.end_line(&mut events);
                }
                _ => self.line.push(byte),
            }
        }
        events
    }

    /// Ends the stream. A server may close without the blank line that ends its last
    /// event (some send `data: [DONE]` and hang up), so what is pending is dispatched;
    /// a line cut off mid-way is included as it stands and its reader will notice.
    pub fn finish(&mut self) -> Option<SseEvent> {
        let mut events = Vec::new();
        if !self.line.is_empty() {
            self.end_line(&mut events);
        }
        self.dispatch(&mut events);
        events.pop()
    }

    /// How many bytes of an unfinished line are held, so a caller can refuse a server
    /// that never ends its lines instead of holding its output without bound.
    pub fn pending_len(&self) -> usize {
        self.line.len() + self.data.len()
    }

    fn end_line(&mut self, events: &mut Vec<SseEvent>) {
        let bytes = std::mem::take(&mut self.line);
        if bytes.is_empty() {
            self.dispatch(events);
            return;
        }
        // Lossy: a provider's stray invalid byte should cost one character, not the reply.
        let line = String::from_utf8_lossy(&bytes);
        if line.starts_with(':') {
            return; // a comment, often a keep-alive
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => self.event = value.to_string(),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            // `id` and `retry` matter only to a browser that reconnects; we never do.
            _ => {}
        }
    }

    /// A blank line ends an event; one without data is no event (the standard's rule).
    fn dispatch(&mut self, events: &mut Vec<SseEvent>) {
        let event = std::mem::take(&mut self.event);
        let data = std::mem::take(&mut self.data);
        if std::mem::replace(&mut self.has_data, false) {
            events.push(SseEvent { event, data });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
        }
    }

    /// Feeds `input` in pieces of `size` bytes and collects every event.
    fn read_in_pieces(input: &[u8], size: usize) -> Vec<SseEvent> {
        let mut reader = SseReader::new();
        let mut events = Vec::new();
        for piece in input.chunks(size) {
            events.extend(reader.feed(piece));
        }
        events.extend(reader.finish());
        events
    }

    #[test]
    fn events_survive_any_split() {
        let input = "event: a\r\ndata: héllo\r\ndata: wörld\r\n\r\n: ping\n\ndata: {\"x\":1}\n\ndata:[DONE]\r\r";
        let want = vec![
            ev("a", "héllo\nwörld"),
            ev("", "{\"x\":1}"),
            ev("", "[DONE]"),
        ];
        for size in 1..input.len() {
            assert_eq!(read_in_pieces(input.as_bytes(), size), want, "size {size}");
        }
    }

    #[test]
    fn the_last_event_without_a_blank_line_is_kept() {
        assert_eq!(read_in_pieces(b"data: [DONE]", 4), vec![ev("", "[DONE]")]);
        assert_eq!(read_in_pieces(b"data: [DONE]\n", 4), vec![ev("", "[DONE]")]);
    }

    #[test]
    fn comments_unknown_fields_and_dataless_events_yield_nothing() {
        assert_eq!(
            read_in_pieces(b": hi\nid: 3\nretry: 10\nevent: x\n\n", 3),
            vec![]
        );
    }

    #[test]
    fn an_empty_data_line_is_an_event() {
        assert_eq!(read_in_pieces(b"data\n\n", 1), vec![ev("", "")]);
    }

    #[test]
    fn invalid_utf8_costs_one_character() {
        assert_eq!(
            read_in_pieces(b"data: a\xffb\n\n", 2),
            vec![ev("", "a\u{fffd}b")]
        );
    }
}
