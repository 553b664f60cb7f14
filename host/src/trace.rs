//! `trace.jsonl`: one JSON object per line, written and flushed line by line, so a
//! killed runtime leaves every earlier line intact. Each line's fields are laid out in
//! `line`; this module writes the envelope before them.

pub mod line;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use crate::ids;
pub use line::Line;

pub struct Trace {
    file: Mutex<Sink>,
    /// The first write that failed, wherever it was made: kept so the running task
    /// ends `failed` naming it, not only the caller that happened to see it.
    failure: Mutex<Option<String>>,
    path: PathBuf,
    session_id: String,
    /// `capabilities.limits.max_trace_bytes`.
    max_bytes: u64,
}

struct Sink {
    file: File,
    /// What this session wrote, the lines before it in the file not counted.
    written: u64,
}

/// Kept free below the ceiling for the lines that close a task and the session, so a
/// trace that reached its ceiling still ends with `task_end` and `session_end`.
const CLOSING_ROOM: u64 = 16 * 1024;
const CLOSING: &[&str] = &["task_end", "session_end"];

/// Where a line hangs in the session ← task ← turn tree, and which task it is about.
#[derive(Clone, Copy, Default)]
pub struct Place<'a> {
    pub parent: Option<&'a str>,
    pub task: Option<&'a str>,
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Trace {
    pub fn create(path: &Path, session_id: &str) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Trace {
            file: Mutex::new(Sink { file, written: 0 }),
            failure: Mutex::new(None),
            path: path.to_path_buf(),
            session_id: session_id.to_string(),
            max_bytes: u64::MAX,
        })
    }

    pub fn with_max_bytes(self, max_bytes: u64) -> Self {
        Trace { max_bytes, ..self }
    }

    /// Whether a line of `len` bytes still fits: other lines stop short of the closing
    /// lines' room, those may use it.
    fn fits(&self, event_type: &str, written: u64, len: u64) -> bool {
        let room = if CLOSING.contains(&event_type) {
            0
        } else {
            CLOSING_ROOM.min(self.max_bytes / 2)
        };
        written.saturating_add(len) <= self.max_bytes - room
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Why a write failed, if one has: the trace is no longer a whole record.
    pub fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn failed(&self, e: std::io::Error) -> std::io::Error {
        let mut failure = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        failure.get_or_insert_with(|| e.to_string());
        e
    }

    /// Appends one event and returns its `event_id` (for children to name as parent).
    /// The line's fields follow the envelope.
    pub fn write(&self, place: Place<'_>, line: Line) -> std::io::Result<String> {
        let event_type = line.kind();
        self.append(event_type, place, line.into_fields())
            .map_err(|e| self.failed(e))
    }

    fn append(&self, event_type: &str, place: Place<'_>, fields: Value) -> std::io::Result<String> {
        let event_id = ids::event();
        let mut line = Map::new();
        line.insert("event_type".into(), event_type.into());
        line.insert("event_id".into(), event_id.clone().into());
        line.insert("parent_id".into(), place.parent.into());
        line.insert("session_id".into(), self.session_id.clone().into());
        line.insert("timestamp".into(), now_ms().into());
        line.insert("task_id".into(), place.task.into());
        if let Value::Object(fields) = fields {
            line.extend(fields);
        }
        let mut text = crate::secret::scrub(&Value::Object(line).to_string()).into_owned();
        text.push('\n');
        let mut sink = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if !self.fits(event_type, sink.written, text.len() as u64) {
            // The write that fails ends the task and the session: the loop traps on it.
            return Err(std::io::Error::other(format!(
                "the session's trace holds {} bytes and a {event_type} line does not fit \
                 under capabilities.limits.max_trace_bytes ({})",
                sink.written, self.max_bytes
            )));
        }
        sink.file.write_all(text.as_bytes())?;
        sink.file.flush()?;
        sink.written += text.len() as u64;
        Ok(event_id)
    }
}

/// The session's trace with its `session_start` line: every line about the session or
/// one of its tasks is written through it, and the lines of the session and of a task's
/// arrival hang under that first line.
pub struct SessionTrace {
    trace: Trace,
    start: String,
}

impl SessionTrace {
    /// Writes `session_start`, the trace's first line of this session.
    pub fn start(trace: Trace, line: Line) -> std::io::Result<Self> {
        let start = trace.write(Place::default(), line)?;
        Ok(SessionTrace { trace, start })
    }

    pub fn write(&self, place: Place<'_>, line: Line) -> std::io::Result<String> {
        self.trace.write(place, line)
    }

    /// A line under `session_start`, about `task` if it names one.
    pub fn under_session(&self, task: Option<&str>, line: Line) -> std::io::Result<String> {
        let place = Place {
            parent: Some(&self.start),
            task,
        };
        self.trace.write(place, line)
    }

    pub fn failure(&self) -> Option<String> {
        self.trace.failure()
    }

    pub fn path(&self) -> &Path {
        self.trace.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_ceiling_refuses_lines_but_keeps_room_to_close() {
        let dir = std::env::temp_dir().join(format!("mur-trace-{}", ids::event()));
        std::fs::create_dir_all(&dir).unwrap();
        let trace = Trace::create(&dir.join("trace.jsonl"), "ses_x")
            .unwrap()
            .with_max_bytes(CLOSING_ROOM + 2000);
        let big = json!({"pad": "x".repeat(900)});
        let mut refused = None;
        for _ in 0..100 {
            if let Err(e) = trace.write(Place::default(), Line::any("tool_call", big.clone())) {
                refused = Some(e.to_string());
                break;
            }
        }
        let refused = refused.expect("the ceiling refuses a line");
        assert!(
            refused.ends_with(&format!(
                "a tool_call line does not fit under capabilities.limits.max_trace_bytes ({})",
                CLOSING_ROOM + 2000
            )),
            "{refused}"
        );
        trace
            .write(
                Place::default(),
                Line::any("task_end", json!({"exit_status": "failed"})),
            )
            .unwrap();
        trace
            .write(
                Place::default(),
                Line::any("session_end", json!({"exit_status": "failed"})),
            )
            .unwrap();
        let text = std::fs::read_to_string(dir.join("trace.jsonl")).unwrap();
        assert!(text.len() as u64 <= CLOSING_ROOM + 2000);
        let kinds: Vec<&str> = text
            .lines()
            .rev()
            .take(3)
            .map(|l| {
                if l.contains("\"pad\"") {
                    "pad"
                } else {
                    "closing"
                }
            })
            .collect();
        assert_eq!(
            kinds,
            ["closing", "closing", "pad"],
            "the refused line is not written"
        );
        assert!(text.lines().last().unwrap().contains("session_end"));
    }

    #[test]
    fn lines_carry_the_envelope_first() {
        let dir = std::env::temp_dir().join(format!("mur-trace-{}", ids::event()));
        std::fs::create_dir_all(&dir).unwrap();
        let trace = Trace::create(&dir.join("trace.jsonl"), "ses_x").unwrap();
        let parent = trace
            .write(
                Place::default(),
                Line::any("session_start", json!({"model": "m"})),
            )
            .unwrap();
        trace
            .write(
                Place {
                    parent: Some(&parent),
                    task: Some("tsk_1"),
                },
                Line::any("task_start", json!({"task_id": "tsk_1", "lane": "user"})),
            )
            .unwrap();
        let text = std::fs::read_to_string(dir.join("trace.jsonl")).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        let keys: Vec<&str> = lines[1]
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(
            keys,
            [
                "event_type",
                "event_id",
                "parent_id",
                "session_id",
                "timestamp",
                "task_id",
                "lane"
            ]
        );
        assert_eq!(lines[1]["parent_id"], json!(parent));
        assert_eq!(lines[0]["parent_id"], Value::Null);
        assert!(text.ends_with('\n'));
    }
}
