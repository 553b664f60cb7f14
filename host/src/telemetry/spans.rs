//! Trace lines into spans. The same mapping serves a running session (each line as it
//! is written) and `mur trace export` (each line of a stored `trace.jsonl`), so a run
//! exported afterwards gives the spans it would have given live, ids included.

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{
    Event, Link, SpanContext, SpanId, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use serde_json::{Map, Value};

use super::genai::{Describe, SessionFacts, failure};
use super::shape::{self, Shape};

/// Events one span keeps; later ones are counted as dropped.
const MAX_EVENTS: usize = 128;
/// Spans held open at once (sessions and their running tasks); past it the oldest
/// goes out as it stands, so a flood of tasks that never end holds no more.
const MAX_OPEN: usize = 4096;

/// The longest text attribute by default: a tool's arguments or a task's answer sent
/// with `capture_content` can be megabytes, and a queue of 2048 such spans must stay
/// small.
pub const MAX_VALUE: usize = 16 * 1024;

/// Text attributes cut at `max` bytes, on a character boundary.
fn bounded(mut attributes: Vec<KeyValue>, max: usize) -> Vec<KeyValue> {
    for kv in &mut attributes {
        if let opentelemetry::Value::String(text) = &kv.value {
            let text = text.as_str();
            if text.len() > max {
                let cut = text[..text.floor_char_boundary(max)].to_string();
                kv.value = opentelemetry::Value::String(cut.into());
            }
        }
    }
    attributes
}

/// Lines to spans, for one stream of lines (one session live; a whole file exported).
pub struct Mapper {
    content: bool,
    /// `mur.capsule.id` on every span, when the operator asks for it.
    capsule_id: Option<String>,
    /// Each session's facts and span, from its `session_start` to its `session_end`.
    facts: HashMap<String, (SessionFacts, SpanContext)>,
    open: HashMap<String, Open>,
    /// The order spans were opened in, to let the oldest go first.
    opened: Vec<String>,
    scope: InstrumentationScope,
    /// The longest text attribute, in bytes (`OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`).
    max_value: usize,
}

struct Open {
    span: SpanData,
}

impl Mapper {
    pub fn new(content: bool, capsule_id: Option<String>) -> Self {
        Mapper {
            content,
            capsule_id,
            facts: HashMap::new(),
            open: HashMap::new(),
            opened: Vec::new(),
            scope: InstrumentationScope::builder("mur")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
            max_value: MAX_VALUE,
        }
    }

    /// Text attributes cut at `bytes` (`OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`).
    pub fn with_max_value(mut self, bytes: usize) -> Self {
        self.max_value = bytes;
        self
    }

    /// The spans this line ends (none, one, or more when it pushes out the oldest).
    pub fn line(&mut self, line: &Value) -> Vec<SpanData> {
        let Some(line) = line.as_object() else {
            return Vec::new();
        };
        let Some(kind) = line.get("event_type").and_then(Value::as_str) else {
            return Vec::new();
        };
        let Some(ids) = Ids::of(line) else {
            return Vec::new();
        };
        let at = timestamp(line);
        match shape::of(kind) {
            Shape::Opens { .. } => self.opens(kind, line, ids, at),
            Shape::Closes => self.closes(kind, line, &ids, at).into_iter().collect(),
            Shape::Whole => vec![self.whole(kind, line, ids, at)],
            Shape::Event => {
                self.event(kind, line, &ids, at);
                Vec::new()
            }
        }
    }

    /// Every span still open, ended at `at`: a session that stopped without its
    /// closing lines still shows what it did.
    pub fn finish(&mut self, at: SystemTime) -> Vec<SpanData> {
        let ids: Vec<String> = std::mem::take(&mut self.opened);
        ids.into_iter()
            .rev()
            .filter_map(|id| self.open.remove(&id))
            .map(|mut open| {
                open.span.end_time = at.max(open.span.start_time);
                open.span.status = Status::error("ended without its closing line");
                open.span
            })
            .collect()
    }

    fn facts(&self, line: &Map<String, Value>) -> SessionFacts {
        let session = line.get("session_id").and_then(Value::as_str).unwrap_or("");
        self.facts
            .get(session)
            .map(|(facts, _)| facts.clone())
            .unwrap_or_default()
    }

    fn opens(
        &mut self,
        kind: &str,
        line: &Map<String, Value>,
        ids: Ids,
        at: SystemTime,
    ) -> Vec<SpanData> {
        let session = line.get("session_id").and_then(Value::as_str).unwrap_or("");
        if kind == "session_start" {
            let context = SpanContext::new(
                ids.trace,
                span_id(&ids.span),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            );
            let facts = (SessionFacts::of(line), context);
            self.facts.insert(session.to_string(), facts);
        }
        let mut span = self.span(kind, line, &ids, at, at);
        // A task in its caller's trace links back to its session's span.
        let session_span = self.facts.get(session).map(|(_, context)| context);
        if let Some(context) =
            session_span.filter(|c| kind == "task_start" && c.trace_id() != ids.trace)
        {
            span.links.links.push(Link::with_context(context.clone()));
        }
        let mut pushed_out = Vec::new();
        if self.open.len() >= MAX_OPEN {
            let oldest = self.opened.remove(0);
            if let Some(open) = self.open.remove(&oldest) {
                pushed_out.push(open.span);
            }
        }
        self.opened.push(ids.span.clone());
        self.open.insert(ids.span, Open { span });
        pushed_out
    }

    fn closes(
        &mut self,
        kind: &str,
        line: &Map<String, Value>,
        ids: &Ids,
        at: SystemTime,
    ) -> Option<SpanData> {
        let mut open = self.open.remove(&ids.span)?;
        self.opened.retain(|id| id != &ids.span);
        if kind == "session_end" {
            let session = line.get("session_id").and_then(Value::as_str).unwrap_or("");
            self.facts.remove(session);
        }
        let describe = Describe {
            facts: &SessionFacts::default(),
            content: self.content,
        };
        let closing = bounded(describe.closing(kind, line), self.max_value);
        open.span.attributes.extend(closing);
        open.span.end_time = at.max(open.span.start_time);
        open.span.status = match failure(line) {
            Some(why) => Status::error(why),
            None => Status::Ok,
        };
        Some(open.span)
    }

    fn whole(
        &mut self,
        kind: &str,
        line: &Map<String, Value>,
        ids: Ids,
        at: SystemTime,
    ) -> SpanData {
        let took = duration(line);
        let start = at.checked_sub(took).unwrap_or(at);
        let mut span = self.span(kind, line, &ids, start, at);
        span.status = match failure(line) {
            Some(why) => Status::error(why),
            None => Status::Unset,
        };
        span
    }

    fn event(&mut self, kind: &str, line: &Map<String, Value>, ids: &Ids, at: SystemTime) {
        let facts = self.facts(line);
        let describe = Describe {
            facts: &facts,
            content: self.content,
        };
        let attributes = bounded(describe.event_attributes(line), self.max_value);
        let Some(open) = self.open.get_mut(&ids.span) else {
            return;
        };
        let events = &mut open.span.events;
        if events.events.len() >= MAX_EVENTS {
            events.dropped_count += 1;
            return;
        }
        events
            .events
            .push(Event::new(kind.to_string(), at, attributes, 0));
    }

    fn span(
        &self,
        kind: &str,
        line: &Map<String, Value>,
        ids: &Ids,
        start: SystemTime,
        end: SystemTime,
    ) -> SpanData {
        let facts = self.facts(line);
        let described = Describe {
            facts: &facts,
            content: self.content,
        }
        .span(kind, line);
        let mut attributes = bounded(described.attributes, self.max_value);
        if let Some(id) = &self.capsule_id {
            attributes.push(KeyValue::new("mur.capsule.id", id.clone()));
        }
        SpanData {
            span_context: SpanContext::new(
                ids.trace,
                span_id(&ids.span),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: ids.parent,
            parent_span_is_remote: false,
            span_kind: described.kind,
            name: Cow::Owned(described.name),
            start_time: start,
            end_time: end,
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: self.scope.clone(),
        }
    }
}

/// A line's span ids, as its envelope carries them.
struct Ids {
    trace: TraceId,
    span: String,
    parent: SpanId,
}

impl Ids {
    fn of(line: &Map<String, Value>) -> Option<Ids> {
        let hex = |k: &str| line.get(k).and_then(Value::as_str);
        let trace = TraceId::from_hex(hex("trace_id")?).ok()?;
        let span = hex("span_id")?;
        SpanId::from_hex(span).ok()?;
        let parent = hex("parent_span_id")
            .and_then(|p| SpanId::from_hex(p).ok())
            .unwrap_or(SpanId::INVALID);
        Some(Ids {
            trace,
            span: span.to_string(),
            parent,
        })
    }
}

fn span_id(hex: &str) -> SpanId {
    SpanId::from_hex(hex).unwrap_or(SpanId::INVALID)
}

fn timestamp(line: &Map<String, Value>) -> SystemTime {
    let ms = line.get("timestamp").and_then(Value::as_u64).unwrap_or(0);
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// How long a whole-span line says it took: `duration_us` when it has one.
fn duration(line: &Map<String, Value>) -> Duration {
    match line.get("duration_us").and_then(Value::as_u64) {
        Some(us) => Duration::from_micros(us),
        None => Duration::from_millis(line.get("duration_ms").and_then(Value::as_u64).unwrap_or(0)),
    }
}

/// An A2A request the door served: a server span named for its method, the caller's
/// `traceparent` its parent, with the task it was about and the task's state.
pub fn request(served: &super::Served<'_>, end: SystemTime) -> SpanData {
    let caller = served.traceparent.and_then(super::context::parse);
    let (trace, parent) = match &caller {
        Some(c) => (
            TraceId::from_hex(&c.trace_id).unwrap_or(TraceId::INVALID),
            span_id(&c.span_id),
        ),
        None => (
            TraceId::from_bytes(*uuid::Uuid::new_v4().as_bytes()),
            SpanId::INVALID,
        ),
    };
    let own = SpanId::from_bytes(random_span_bytes());
    let mut attributes = vec![
        KeyValue::new("rpc.system", "jsonrpc"),
        KeyValue::new("rpc.method", served.method.to_string()),
    ];
    if let Some(task) = served.task {
        attributes.push(KeyValue::new("a2a.task.id", task.to_string()));
    }
    if let Some(state) = served.state {
        attributes.push(KeyValue::new("a2a.task.state", state.to_string()));
    }
    SpanData {
        span_context: SpanContext::new(
            trace,
            own,
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        parent_span_id: parent,
        parent_span_is_remote: caller.is_some(),
        span_kind: opentelemetry::trace::SpanKind::Server,
        name: Cow::Owned(served.method.to_string()),
        start_time: served.started,
        end_time: end.max(served.started),
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: Status::Unset,
        instrumentation_scope: InstrumentationScope::builder("mur")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    }
}

fn random_span_bytes() -> [u8; 8] {
    let bytes = *uuid::Uuid::new_v4().as_bytes();
    let mut out = [0u8; 8];
    out.copy_from_slice(&bytes[8..]);
    out
}

#[cfg(test)]
mod tests;
