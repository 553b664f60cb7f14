//! `trace.jsonl`: one JSON object per line, written and flushed line by line, so a
//! killed runtime leaves every earlier line intact. Each line's fields are laid out in
//! `line`; this module writes the envelope before them.

pub mod line;
mod spans;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use crate::ids;
use crate::telemetry::{Feed, context::SpanRef};
pub use line::Line;
pub use spans::CALLER_FIELD;
use spans::Spans;

pub struct Trace {
    file: Mutex<Sink>,
    /// The first write that failed, wherever it was made: kept so the running task
    /// ends `failed` naming it, not only the caller that happened to see it.
    failure: Mutex<Option<String>>,
    path: PathBuf,
    session_id: String,
    /// `capabilities.limits.max_trace_bytes`.
    max_bytes: u64,
    /// Where each line also goes as a span or a span's event, when export is on.
    feed: Option<Feed>,
}

struct Sink {
    file: File,
    /// What this session wrote, the lines before it in the file not counted.
    written: u64,
    spans: Spans,
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
            file: Mutex::new(Sink {
                file,
                written: 0,
                spans: Spans::new(session_id, None),
            }),
            failure: Mutex::new(None),
            path: path.to_path_buf(),
            session_id: session_id.to_string(),
            max_bytes: u64::MAX,
            feed: None,
        })
    }

    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// Lines also go to `feed` as spans; `caller` (a `TRACEPARENT` the session was
    /// started with) is the session's parent.
    pub fn with_telemetry(mut self, feed: Option<Feed>, caller: Option<SpanRef>) -> Self {
        let session_id = self.session_id.clone();
        self.sink().spans = Spans::new(&session_id, caller);
        self.feed = feed;
        self
    }

    fn sink(&self) -> std::sync::MutexGuard<'_, Sink> {
        self.file.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The span the line `event_id` (not yet written) will be, under `task`: what a
    /// request sent before the line names as its parent.
    pub fn future_span(&self, task: Option<&str>, event_id: &str) -> SpanRef {
        self.sink().spans.future(task, event_id)
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
        self.write_as(ids::event(), place, line)
    }

    /// [`Trace::write`] with an event id chosen before: the line of a call whose
    /// requests named its span (see [`Trace::future_span`]) while it ran.
    pub fn write_as(
        &self,
        event_id: String,
        place: Place<'_>,
        line: Line,
    ) -> std::io::Result<String> {
        let event_type = line.kind();
        self.append(event_id, event_type, place, line.into_fields())
            .map_err(|e| self.failed(e))
    }

    fn append(
        &self,
        event_id: String,
        event_type: &str,
        place: Place<'_>,
        fields: Value,
    ) -> std::io::Result<String> {
        let mut line = Map::new();
        line.insert("event_type".into(), event_type.into());
        line.insert("event_id".into(), event_id.clone().into());
        line.insert("parent_id".into(), place.parent.into());
        line.insert("session_id".into(), self.session_id.clone().into());
        line.insert("timestamp".into(), now_ms().into());
        line.insert("task_id".into(), place.task.into());
        let mut sink = self.sink();
        let caller = fields.get(CALLER_FIELD).and_then(Value::as_str);
        sink.spans
            .stamp(event_type, &event_id, (place.task, caller), &mut line);
        if let Value::Object(fields) = fields {
            line.extend(fields);
        }
        let line = Value::Object(line);
        let serialized = line.to_string();
        let scrubbed = crate::secret::scrub(&serialized);
        let mut text = scrubbed.to_string();
        text.push('\n');
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
        if let Some(feed) = &self.feed {
            // What the file holds goes out, a scrubbed secret scrubbed there too.
            match scrubbed {
                std::borrow::Cow::Borrowed(_) => feed.line(&line),
                std::borrow::Cow::Owned(_) => {
                    if let Ok(scrubbed) = serde_json::from_str(&text) {
                        feed.line(&scrubbed);
                    }
                }
            }
        }
        Ok(event_id)
    }
}

/// Span ids for lines written without them (by an older `mur`, or upstream Murmur's
/// runtime), as a live run would have given them: for `mur trace export`.
#[derive(Default)]
pub struct SpanStamp {
    sessions: std::collections::HashMap<String, Spans>,
}

impl SpanStamp {
    pub fn fill(&mut self, line: &mut Map<String, Value>) {
        if line.contains_key("span_id") {
            return;
        }
        let text = |k: &str| line.get(k).and_then(Value::as_str).map(str::to_string);
        let (Some(kind), Some(event), Some(session)) =
            (text("event_type"), text("event_id"), text("session_id"))
        else {
            return;
        };
        let (task, caller) = (text("task_id"), text(CALLER_FIELD));
        let spans = self
            .sessions
            .entry(session.clone())
            .or_insert_with(|| Spans::new(&session, None));
        let mut ids = Map::new();
        spans.stamp(
            &kind,
            &event,
            (task.as_deref(), caller.as_deref()),
            &mut ids,
        );
        line.extend(ids);
    }
}

impl Drop for Trace {
    /// Spans a session left open (it failed without its closing lines) go as they stand.
    fn drop(&mut self) {
        if let Some(feed) = &self.feed {
            feed.finish();
        }
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

    pub fn write_as(
        &self,
        event_id: String,
        place: Place<'_>,
        line: Line,
    ) -> std::io::Result<String> {
        self.trace.write_as(event_id, place, line)
    }

    pub fn future_span(&self, task: Option<&str>, event_id: &str) -> SpanRef {
        self.trace.future_span(task, event_id)
    }

    /// Whether the operator asked for prompt and reply text on the spans.
    pub fn captures_content(&self) -> bool {
        self.trace.feed.as_ref().is_some_and(Feed::captures_content)
    }

    /// The session's feed to the exporter, when export is on.
    pub fn feed(&self) -> Option<&Feed> {
        self.trace.feed.as_ref()
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
                "trace_id",
                "span_id",
                "parent_span_id",
                "lane"
            ]
        );
        assert_eq!(lines[1]["parent_id"], json!(parent));
        assert_eq!(lines[0]["parent_id"], Value::Null);
        assert!(text.ends_with('\n'));
    }
}
