//! The span ids a line carries (`trace_id`, `span_id`, and `parent_span_id` on a line
//! that is or opens a span), so a line of `trace.jsonl` and a span in an OpenTelemetry
//! backend are found by the same id.
//!
//! The session is a span under the `traceparent` it was started with (`TRACEPARENT`),
//! else the root of a trace whose id is the session's. A task is a span under the
//! `traceparent` it arrived with, in its caller's trace, else under the session. Turns,
//! tool calls, shell commands, hooks and compactions are spans under their task; every
//! other line is an event on the task's span, or the session's.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::telemetry::context::{self, SpanRef};
use crate::telemetry::shape::{self, Shape};

/// The spans of one session that later lines hang under.
pub(super) struct Spans {
    session_id: String,
    /// `TRACEPARENT`, the session's parent.
    caller: Option<SpanRef>,
    /// Set by `session_start`.
    session: Option<SpanRef>,
    /// Running tasks' spans, from `task_start` to `task_end`.
    tasks: HashMap<String, SpanRef>,
}

/// What a task's line keeps of the caller's context: a malformed value is dropped.
pub const CALLER_FIELD: &str = "traceparent_from_caller";

impl Spans {
    pub fn new(session_id: &str, caller: Option<SpanRef>) -> Self {
        Spans {
            session_id: session_id.to_string(),
            caller,
            session: None,
            tasks: HashMap::new(),
        }
    }

    /// Writes the ids of the line `event_id` of `kind` into `line`: about `task`, and
    /// for a `task_start`, with the `traceparent` its task arrived with.
    pub fn stamp(
        &mut self,
        kind: &str,
        event_id: &str,
        (task, caller): (Option<&str>, Option<&str>),
        line: &mut Map<String, Value>,
    ) {
        let own = |trace_id: &str| SpanRef {
            trace_id: trace_id.to_string(),
            span_id: context::span_id_of_event(event_id),
        };
        let (span, parent) = match (kind, shape::of(kind)) {
            ("session_start", _) => {
                let trace_id = match &self.caller {
                    Some(caller) => caller.trace_id.clone(),
                    None => context::trace_id_of_session(&self.session_id),
                };
                let span = own(&trace_id);
                self.session = Some(span.clone());
                (span, self.caller.as_ref().map(|c| c.span_id.clone()))
            }
            ("task_start", _) => {
                let caller = caller.and_then(context::parse);
                let session = self.session();
                let (trace_id, parent) = match caller {
                    Some(c) => (c.trace_id, c.span_id),
                    None => (session.trace_id, session.span_id),
                };
                let span = own(&trace_id);
                if let Some(task) = task {
                    self.tasks.insert(task.to_string(), span.clone());
                }
                (span, Some(parent))
            }
            ("task_end", _) => {
                let span = task
                    .and_then(|t| self.tasks.remove(t))
                    .unwrap_or_else(|| self.session());
                (span, None)
            }
            ("session_end", _) => (self.session(), None),
            (_, Shape::Whole) => {
                let owner = self.owner(task);
                (own(&owner.trace_id), Some(owner.span_id))
            }
            _ => (self.owner(task), None),
        };
        line.insert("trace_id".into(), span.trace_id.into());
        line.insert("span_id".into(), span.span_id.into());
        if shape::has_parent(kind) {
            line.insert("parent_span_id".into(), parent.into());
        }
    }

    /// The span a line about `event_id` will be, under `task`'s span (or the session's):
    /// for a request sent before its line is written.
    pub fn future(&self, task: Option<&str>, event_id: &str) -> SpanRef {
        SpanRef {
            trace_id: self.owner(task).trace_id,
            span_id: context::span_id_of_event(event_id),
        }
    }

    /// The running task's span, else the session's.
    pub fn owner(&self, task: Option<&str>) -> SpanRef {
        task.and_then(|t| self.tasks.get(t))
            .cloned()
            .unwrap_or_else(|| self.session())
    }

    fn session(&self) -> SpanRef {
        self.session.clone().unwrap_or_else(|| SpanRef {
            trace_id: context::trace_id_of_session(&self.session_id),
            span_id: context::span_id_of_event(&self.session_id),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stamp(
        spans: &mut Spans,
        kind: &str,
        event: &str,
        task: Option<&str>,
        fields: Value,
    ) -> Value {
        let caller = fields.get(CALLER_FIELD).and_then(Value::as_str);
        let mut line = Map::new();
        spans.stamp(kind, event, (task, caller), &mut line);
        Value::Object(line)
    }

    const SES: &str = "ses_01a250d9e9ca74ef9d9cc941daf035cc";

    #[test]
    fn a_task_hangs_under_the_session_and_its_work_under_it() {
        let mut spans = Spans::new(SES, None);
        let s = stamp(
            &mut spans,
            "session_start",
            "evt_000000000000000000000000000000a1",
            None,
            json!({}),
        );
        assert_eq!(
            s,
            json!({"trace_id": "01a250d9e9ca74ef9d9cc941daf035cc", "span_id": "00000000000000a1", "parent_span_id": null})
        );
        let t = stamp(
            &mut spans,
            "task_start",
            "evt_000000000000000000000000000000b1",
            Some("tsk_1"),
            json!({}),
        );
        assert_eq!(t["parent_span_id"], "00000000000000a1");
        let turn = stamp(
            &mut spans,
            "inference",
            "evt_000000000000000000000000000000c1",
            Some("tsk_1"),
            json!({}),
        );
        assert_eq!(turn["span_id"], "00000000000000c1");
        assert_eq!(turn["parent_span_id"], "00000000000000b1");
        let event = stamp(
            &mut spans,
            "call_denied",
            "evt_000000000000000000000000000000d1",
            Some("tsk_1"),
            json!({}),
        );
        assert_eq!(
            event,
            json!({"trace_id": "01a250d9e9ca74ef9d9cc941daf035cc", "span_id": "00000000000000b1"})
        );
        let end = stamp(
            &mut spans,
            "task_end",
            "evt_000000000000000000000000000000e1",
            Some("tsk_1"),
            json!({}),
        );
        assert_eq!(end["span_id"], "00000000000000b1");
        let late = stamp(
            &mut spans,
            "shell_completed",
            "evt_000000000000000000000000000000f1",
            Some("tsk_1"),
            json!({}),
        );
        assert_eq!(
            late["span_id"], "00000000000000a1",
            "after its end a task's lines go to the session"
        );
    }

    #[test]
    fn a_callers_traceparent_is_the_parent_of_the_task() {
        let mut spans = Spans::new(SES, None);
        stamp(
            &mut spans,
            "session_start",
            "evt_000000000000000000000000000000a1",
            None,
            json!({}),
        );
        let t = stamp(
            &mut spans,
            "task_start",
            "evt_000000000000000000000000000000b1",
            Some("tsk_1"),
            json!({CALLER_FIELD: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}),
        );
        assert_eq!(t["trace_id"], "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(t["parent_span_id"], "b7ad6b7169203331");
        let call = stamp(
            &mut spans,
            "tool_call",
            "evt_000000000000000000000000000000c1",
            Some("tsk_1"),
            json!({}),
        );
        assert_eq!(call["trace_id"], "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(
            spans
                .future(Some("tsk_1"), "evt_000000000000000000000000000000c2")
                .traceparent(),
            "00-0af7651916cd43dd8448eb211c80319c-00000000000000c2-01"
        );
    }

    #[test]
    fn a_session_started_with_a_traceparent_joins_its_trace() {
        let caller = context::parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        let mut spans = Spans::new(SES, caller);
        let s = stamp(
            &mut spans,
            "session_start",
            "evt_000000000000000000000000000000a1",
            None,
            json!({}),
        );
        assert_eq!(s["trace_id"], "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(s["parent_span_id"], "b7ad6b7169203331");
    }
}
