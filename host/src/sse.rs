//! Server-sent events as a client reads them: the one frame parser of the project,
//! used by `mur watch`, the tests and the benchmarks. Frames may arrive split at any
//! byte; a blank line ends one, a line starting with `:` is a comment (the heartbeat).

/// One server-sent event: what its `id`, `event` and `data` lines said.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Event {
    pub id: Option<u64>,
    pub event: String,
    pub data: String,
}

/// Splits an event stream into frames as bytes arrive, however they are split.
#[derive(Default)]
pub struct FrameReader {
    buf: Vec<u8>,
    current: Option<Event>,
}

impl FrameReader {
    /// Takes more bytes; returns every frame they completed, in order.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<Event> {
        self.buf.extend_from_slice(bytes);
        let mut done = Vec::new();
        let mut start = 0;
        while let Some(end) = self.buf[start..].iter().position(|b| *b == b'\n') {
            let line = &self.buf[start..start + end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let line = String::from_utf8_lossy(line).into_owned();
            start += end + 1;
            self.line(&line, &mut done);
        }
        self.buf.drain(..start);
        done
    }

    fn line(&mut self, line: &str, done: &mut Vec<Event>) {
        if line.is_empty() {
            // A blank line ends a frame; a lone comment before it made none.
            done.extend(self.current.take());
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        let event = self.current.get_or_insert_with(Event::default);
        match field {
            "id" => event.id = value.trim().parse().ok(),
            "event" => event.event = value.to_string(),
            "data" => {
                if !event.data.is_empty() {
                    event.data.push('\n');
                }
                event.data.push_str(value);
            }
            _ => {}
        }
    }
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
}
