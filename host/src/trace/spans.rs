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

    const SES: &str = "ses_01a250d9e9ca74ef9d9cc941daf035cc";
    const CALLER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    /// Stamps `(kind, event id's last digits, task, caller)` in order; the ids written.
    fn stamped(
        spans: &mut Spans,
        lines: &[(&str, &str, Option<&str>, Option<&str>)],
    ) -> Vec<Value> {
        lines
            .iter()
            .map(|(kind, event, task, caller)| {
                let mut line = Map::new();
                let event = format!("evt_{event:0>32}");
                spans.stamp(kind, &event, (*task, *caller), &mut line);
                Value::Object(line)
            })
            .collect()
    }

    #[test]
    fn a_task_hangs_under_the_session_and_its_work_under_it() {
        let t = Some("tsk_1");
        let lines = stamped(
            &mut Spans::new(SES, None),
            &[
                ("session_start", "a1", None, None),
                ("task_start", "b1", t, None),
                ("inference", "c1", t, None),
                ("call_denied", "d1", t, None),
                ("task_end", "e1", t, None),
                ("shell_completed", "f1", t, None),
            ],
        );
        let trace = "01a250d9e9ca74ef9d9cc941daf035cc";
        let ids = |span: &str, parent: Option<Option<&str>>| {
            let mut want = json!({"trace_id": trace, "span_id": format!("{span:0>16}")});
            if let Some(parent) = parent {
                want["parent_span_id"] = json!(parent.map(|p| format!("{p:0>16}")));
            }
            want
        };
        assert_eq!(lines[0], ids("a1", Some(None)), "the session is the root");
        assert_eq!(lines[1], ids("b1", Some(Some("a1"))), "the task under it");
        assert_eq!(
            lines[2],
            ids("c1", Some(Some("b1"))),
            "a turn under the task"
        );
        assert_eq!(lines[3], ids("b1", None), "an event is the task's");
        assert_eq!(lines[4], ids("b1", None), "task_end closes the task's span");
        assert_eq!(
            lines[5],
            ids("a1", None),
            "after its end a task's lines are the session's"
        );
    }

    #[test]
    fn a_callers_traceparent_is_the_parent_of_the_task() {
        let mut spans = Spans::new(SES, None);
        let t = Some("tsk_1");
        let lines = stamped(
            &mut spans,
            &[
                ("session_start", "a1", None, None),
                ("task_start", "b1", t, Some(CALLER)),
                ("tool_call", "c1", t, None),
            ],
        );
        assert_eq!(lines[1]["trace_id"], "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(lines[1]["parent_span_id"], "b7ad6b7169203331");
        assert_eq!(lines[2]["trace_id"], "0af7651916cd43dd8448eb211c80319c");
        let future = spans.future(t, &format!("evt_{:0>32}", "c2"));
        assert_eq!(
            future.traceparent(),
            "00-0af7651916cd43dd8448eb211c80319c-00000000000000c2-01"
        );
    }

    #[test]
    fn a_session_started_with_a_traceparent_joins_its_trace() {
        let mut spans = Spans::new(SES, context::parse(CALLER));
        let lines = stamped(&mut spans, &[("session_start", "a1", None, None)]);
        assert_eq!(lines[0]["trace_id"], "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(lines[0]["parent_span_id"], "b7ad6b7169203331");
    }
}
