//! A `trace.jsonl` read into events, strictly where it matters and loosely elsewhere.
//!
//! Every line must be a JSON object with a string `event_type`; one that is not is
//! `E-TRC-001` naming `path:line`. One exception: a last line with no newline after it
//! that does not parse is what a writer killed mid-line leaves, so it is skipped and
//! reported, not refused. Unknown event types and keys are kept as they are: the
//! readers that follow look only at what they know.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::error::Error;

/// One line of the trace.
#[derive(Debug, Clone)]
pub struct Event {
    /// 1-based, as an editor counts.
    pub line: usize,
    pub kind: String,
    pub fields: Map<String, Value>,
}

impl Event {
    pub fn str(&self, key: &str) -> Option<&str> {
        self.fields.get(key).and_then(Value::as_str)
    }

    /// A count or duration; one that is missing or not a number reads as none.
    pub fn u64(&self, key: &str) -> Option<u64> {
        let v = self.fields.get(key)?;
        v.as_u64()
            .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
    }

    pub fn i64(&self, key: &str) -> Option<i64> {
        self.fields.get(key).and_then(Value::as_i64)
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.fields.get(key).filter(|v| !v.is_null())
    }
}

/// A whole trace file.
#[derive(Debug, Clone)]
pub struct Parsed {
    pub path: PathBuf,
    pub events: Vec<Event>,
    /// The line number of a torn last line that was skipped.
    pub torn: Option<usize>,
}

/// Reads and parses the trace at `path`.
///
/// # Errors
///
/// `E-TRC-003` when it cannot be read, `E-TRC-001` for a malformed line.
/// Whether a link in the trace's own place is followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Links {
    Follow,
    Refuse,
}

pub fn read(path: &Path, links: Links) -> Result<Parsed, Error> {
    let unreadable = |why: String| {
        Error::new(
            "E-TRC-003",
            format!("could not read {}: {why}", path.display()),
        )
        .hint("check that the file exists and is readable")
    };
    let bytes = read_regular(path, links).map_err(unreadable)?;
    parse(path, &bytes)
}

/// The bytes of `path` when it is a regular file. Upstream's layout keeps traces inside
/// the capsule's own folder, where anything could have been put in their place: a pipe
/// that never ends (opened without blocking, then refused), a device that never stops
/// giving bytes, or a link to some other file of the user's (not followed there).
fn read_regular(path: &Path, links: Links) -> Result<Vec<u8>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let nofollow = match links {
        Links::Follow => 0,
        Links::Refuse => libc::O_NOFOLLOW,
    };
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | nofollow)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => "it is a link, in a folder a capsule could write".to_string(),
            _ => e.to_string(),
        })?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    Ok(bytes)
}

/// Parses a trace's bytes; `path` only names it in errors.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Parsed, Error> {
    let pieces: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    // After a final newline `split` yields one empty piece; without one, the last piece
    // is a line the writer never finished.
    let unfinished = pieces.len() - 1;
    let mut parsed = Parsed {
        path: path.to_path_buf(),
        events: Vec::new(),
        torn: None,
    };
    for (i, piece) in pieces.iter().enumerate() {
        if piece.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match event(i + 1, piece) {
            Ok(event) => parsed.events.push(event),
            Err(_) if i == unfinished => parsed.torn = Some(i + 1),
            Err(what) => return Err(malformed(path, i + 1, &what)),
        }
    }
    Ok(parsed)
}

fn event(line: usize, piece: &[u8]) -> Result<Event, String> {
    let value: Value = serde_json::from_slice(piece).map_err(|e| format!("not JSON ({e})"))?;
    let Value::Object(fields) = value else {
        return Err("not a JSON object".into());
    };
    let kind = match fields.get("event_type") {
        Some(Value::String(kind)) => kind.clone(),
        Some(_) => return Err("event_type is not a string".into()),
        None => return Err("no event_type".into()),
    };
    Ok(Event { line, kind, fields })
}

fn malformed(path: &Path, line: usize, what: &str) -> Error {
    Error::new("E-TRC-001", format!("{}:{line}: {what}", path.display())).hint(
        "every line of a trace is one JSON object with an event_type; this one was damaged \
         or written by something else: fix or remove that line",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_or_a_device_in_a_trace_s_place_is_refused_not_read() {
        let dir = std::env::temp_dir().join(format!("mur-trace-fifo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("trace.jsonl");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for path in [fifo.as_path(), Path::new("/dev/zero")] {
            let e = read(path, Links::Follow).unwrap_err();
            assert_eq!(e.code, "E-TRC-003");
            assert!(
                e.message.ends_with("it is not a regular file"),
                "{}",
                e.message
            );
        }
        // A link where a found trace should be is not followed; a typed one is.
        let real = dir.join("real.jsonl");
        std::fs::write(&real, "{\"event_type\":\"session_start\"}\n").unwrap();
        let link = dir.join("link.jsonl");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = read(&link, Links::Refuse).unwrap_err();
        assert!(
            e.message
                .ends_with("it is a link, in a folder a capsule could write"),
            "{}",
            e.message
        );
        assert_eq!(read(&link, Links::Follow).unwrap().events.len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    const START: &str = r#"{"event_type":"session_start","session_id":"ses_1","timestamp":5}"#;

    fn parse_text(text: &str) -> Result<Parsed, Error> {
        parse(Path::new("t/trace.jsonl"), text.as_bytes())
    }

    #[test]
    fn a_torn_last_line_is_skipped_and_named() {
        let p = parse_text(&format!("{START}\n{{\"event_type\":\"task_st")).unwrap();
        assert_eq!(p.events.len(), 1);
        assert_eq!(p.torn, Some(2));
    }

    #[test]
    fn a_malformed_line_before_the_end_is_refused_with_its_number() {
        let e = parse_text(&format!("{START}\n{{oops\n{START}\n")).unwrap_err();
        assert_eq!(e.code, "E-TRC-001");
        assert!(
            e.message.starts_with("t/trace.jsonl:2: not JSON ("),
            "{}",
            e.message
        );
        // A malformed last line that did end with a newline was finished: not torn.
        let e = parse_text(&format!("{START}\n[1]\n")).unwrap_err();
        assert_eq!(e.message, "t/trace.jsonl:2: not a JSON object");
        let e = parse_text("{\"event_type\":3}\n").unwrap_err();
        assert_eq!(e.message, "t/trace.jsonl:1: event_type is not a string");
    }

    #[test]
    fn unknown_types_and_keys_are_kept_and_blank_lines_skipped() {
        let p = parse_text(&format!(
            "{START}\n\n{{\"event_type\":\"from_the_future\",\"x\":1}}\n"
        ))
        .unwrap();
        assert_eq!(p.events.len(), 2);
        assert_eq!(p.events[1].kind, "from_the_future");
        assert_eq!(p.events[1].line, 3);
        assert_eq!(p.torn, None);
    }
}
