//! Server-sent events as a client reads them: the one frame parser of the project,
//! used by `mur watch`, the tests and the benchmarks. Frames may arrive split at any
//! byte; a blank line ends one, a line starting with `:` is a comment (the heartbeat).
//!
//! The reader hands out frames borrowed from its buffer, so a client that reads
//! thousands of frames a second (the streaming benchmark) copies nothing per frame;
//! `feed` is the owned form for everyone else.

use std::borrow::Cow;
use std::ops::Range;

/// One server-sent event: what its `id`, `event` and `data` lines said.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Event {
    pub id: Option<u64>,
    pub event: String,
    pub data: String,
}

/// One frame, borrowed from the reader's buffer where its text allows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Frame<'a> {
    pub id: Option<u64>,
    pub event: Cow<'a, str>,
    pub data: Cow<'a, str>,
}

impl Frame<'_> {
    pub fn to_event(&self) -> Event {
        Event {
            id: self.id,
            event: self.event.clone().into_owned(),
            data: self.data.clone().into_owned(),
        }
    }

    fn into_owned(self) -> Frame<'static> {
        Frame {
            id: self.id,
            event: Cow::Owned(self.event.into_owned()),
            data: Cow::Owned(self.data.into_owned()),
        }
    }
}

/// Splits an event stream into frames as bytes arrive, however they are split.
#[derive(Default)]
pub struct FrameReader {
    buf: Vec<u8>,
    /// Where the unread part of `buf` starts (always a line start).
    pos: usize,
    /// Where the search for the blank line ending the next frame resumes.
    scan: usize,
}

impl FrameReader {
    /// Takes more bytes; returns every frame they completed, in order.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<Event> {
        self.buffer().extend_from_slice(bytes);
        let mut done = Vec::new();
        while let Some(frame) = self.next_frame() {
            done.push(frame.to_event());
        }
        done
    }

    /// The buffer to append newly read bytes to (and only to append to). What was
    /// read already is dropped from its front first, so it holds at most one partial
    /// frame beside the new bytes.
    pub fn buffer(&mut self) -> &mut Vec<u8> {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.scan -= self.pos;
            self.pos = 0;
        }
        &mut self.buf
    }

    /// The next complete frame in the buffer, comments and empty blocks skipped.
    pub fn next_frame(&mut self) -> Option<Frame<'_>> {
        let block = self.next_block()?;
        Some(self.frame(block))
    }

    /// Where the next complete frame's lines lie in the buffer (valid until the next
    /// call to `buffer`), for a caller that must fill the buffer in between tries.
    pub fn next_block(&mut self) -> Option<Range<usize>> {
        loop {
            let Some((end, next)) = blank_line(&self.buf, self.pos, self.scan) else {
                // Bytes before the last two may not be searched again: no blank line
                // can end in them any more.
                self.scan = self.buf.len().saturating_sub(2).max(self.pos);
                return None;
            };
            let block = self.pos..end;
            self.pos = next;
            self.scan = next;
            if has_field(&self.buf[block.clone()]) {
                return Some(block);
            }
        }
    }

    /// The frame whose lines `next_block` found.
    pub fn frame(&self, block: Range<usize>) -> Frame<'_> {
        parse_block(&self.buf[block])
    }
}

/// The first blank line at or after `scan` in the frame that starts at `start`: where
/// the frame's lines end, and where the next frame starts.
fn blank_line(buf: &[u8], start: usize, scan: usize) -> Option<(usize, usize)> {
    let mut at = scan.max(start);
    loop {
        // A line starts at `start` or right after a `\n`.
        if at == start || buf.get(at.wrapping_sub(1)) == Some(&b'\n') {
            match (buf.get(at), buf.get(at + 1)) {
                (Some(b'\n'), _) => return Some((at, at + 1)),
                (Some(b'\r'), Some(b'\n')) => return Some((at, at + 2)),
                (Some(b'\r'), None) | (None, _) => return None,
                _ => {}
            }
        }
        at += 1 + buf.get(at..)?.iter().position(|&b| b == b'\n')?;
    }
}

/// Whether a block has a line other than comments: only such a block is a frame.
fn has_field(block: &[u8]) -> bool {
    block
        .split(|&b| b == b'\n')
        .any(|line| !line.is_empty() && line != b"\r" && line[0] != b':')
}

fn parse_block(block: &[u8]) -> Frame<'_> {
    match String::from_utf8_lossy(block) {
        Cow::Borrowed(text) => parse_text(text),
        Cow::Owned(text) => parse_text(&text).into_owned(),
    }
}

fn parse_text(text: &str) -> Frame<'_> {
    let mut frame = Frame::default();
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() || line.starts_with(':') {
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "id" => frame.id = value.trim().parse().ok(),
            "event" => frame.event = Cow::Borrowed(value),
            "data" if frame.data.is_empty() => frame.data = Cow::Borrowed(value),
            "data" => {
                let data = frame.data.to_mut();
                data.push('\n');
                data.push_str(value);
            }
            _ => {}
        }
    }
    frame
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_split_at_every_byte_still_parses() {
        let wire = "id: 7\nevent: text\ndata: {\"text\":\"h\u{e9}\"}\n\n:heartbeat\n\n";
        let mut reader = FrameReader::default();
        let mut frames = Vec::new();
        for byte in wire.as_bytes() {
            frames.extend(reader.feed(std::slice::from_ref(byte)));
        }
        assert_eq!(
            frames,
            vec![Event {
                id: Some(7),
                event: "text".into(),
                data: "{\"text\":\"h\u{e9}\"}".into(),
            }]
        );
    }

    #[test]
    fn crlf_line_ends_and_multi_line_data_are_read() {
        let frames = FrameReader::default().feed(b"event: x\r\ndata: a\r\ndata: b\r\n\r\n");
        assert_eq!(frames[0].data, "a\nb");
        assert_eq!(frames[0].id, None);
    }

    #[test]
    fn a_crlf_blank_line_split_between_its_two_bytes_ends_the_frame() {
        let mut reader = FrameReader::default();
        assert_eq!(reader.feed(b"event: x\r\ndata: a\r\n\r"), vec![]);
        let frames = reader.feed(b"\nevent: y\n\n");
        let events: Vec<_> = frames.iter().map(|f| f.event.as_str()).collect();
        assert_eq!(events, ["x", "y"]);
    }

    #[test]
    fn comments_extra_blank_lines_and_a_field_without_a_colon_make_no_frame() {
        let frames = FrameReader::default().feed(b"\n\n:heartbeat\n\n:a\n:b\n\n\ndata\n\n");
        assert_eq!(
            frames,
            vec![Event {
                id: None,
                event: String::new(),
                data: String::new(),
            }]
        );
    }

    #[test]
    fn frames_are_borrowed_from_the_buffer_unless_their_text_needs_a_copy() {
        let mut reader = FrameReader::default();
        reader
            .buffer()
            .extend_from_slice(b"id: 3\nevent: status\ndata: {}\n\ndata: a\ndata: b\n\n");
        let first = reader.next_frame().unwrap();
        assert!(matches!(first.data, Cow::Borrowed("{}")));
        assert_eq!(first.id, Some(3));
        let second = reader.next_frame().unwrap();
        assert!(matches!(second.data, Cow::Owned(ref d) if d == "a\nb"));
        assert!(reader.next_frame().is_none());
    }

    #[test]
    fn invalid_utf8_is_replaced_not_refused() {
        let frames = FrameReader::default().feed(b"event: t\ndata: \xff!\n\n");
        assert_eq!(frames[0].data, "\u{fffd}!");
    }

    #[test]
    fn a_bad_id_is_no_id() {
        let frames = FrameReader::default().feed(b"id: x\nevent: t\n\n");
        assert_eq!(frames[0].id, None);
    }
}
