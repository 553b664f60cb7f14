use opentelemetry::trace::Status;
use serde_json::{Value, json};

use super::*;

const TRACE: &str = "01a250d9e9ca74ef9d9cc941daf035cc";

fn line(
    kind: &str,
    span: &str,
    parent: Option<&str>,
    task: Option<&str>,
    at: u64,
    rest: Value,
) -> Value {
    let mut l = json!({
        "event_type": kind, "event_id": format!("evt_{:0>32}", span), "parent_id": null,
        "session_id": format!("ses_{TRACE}"), "timestamp": at, "task_id": task,
        "trace_id": TRACE, "span_id": format!("{span:0>16}"),
    });
    if let Some(p) = parent {
        l["parent_span_id"] = json!(format!("{p:0>16}"));
    } else if super::shape::has_parent(kind) {
        l["parent_span_id"] = Value::Null;
    }
    for (k, v) in rest.as_object().unwrap() {
        l[k] = v.clone();
    }
    l
}

fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
}

fn session(content: bool) -> Vec<SpanData> {
    let mut m = Mapper::new(content, Some("cap_1".into()));
    let start = json!({"capsule_name": "hello", "capsule_version": "0.1.0",
        "model": "m1", "driver": "built-in anthropic driver"});
    let tool = json!({"turn": 0, "tool_name": "mcp__gh__search", "tool_call_id": "c1",
        "input": {"q": "secret plans"}, "output": "found", "duration_ms": 5, "status": "ok"});
    let lines = [
        line("session_start", "a1", None, None, 1000, start),
        line(
            "task_start",
            "b1",
            Some("a1"),
            Some("tsk_1"),
            1001,
            json!({"task_id": "tsk_1", "context_id": "ctx_1", "text": "do it"}),
        ),
        line(
            "inference",
            "c1",
            Some("b1"),
            Some("tsk_1"),
            1010,
            json!({"turn": 0, "input_tokens": 9, "input_tokens_actual": 12, "output_tokens": 3,
                   "stop_reason": "tool_call", "decision": "tool_call", "duration_ms": 8}),
        ),
        line(
            "call_denied",
            "b1",
            None,
            Some("tsk_1"),
            1011,
            json!({"reason": "guest words", "hook": "h"}),
        ),
        line("tool_call", "d1", Some("b1"), Some("tsk_1"), 1020, tool),
        line(
            "task_end",
            "b1",
            None,
            Some("tsk_1"),
            1030,
            json!({"exit_status": "ok", "input_tokens": 12, "output_tokens": 3, "answer": "done"}),
        ),
        line(
            "session_end",
            "a1",
            None,
            None,
            1040,
            json!({"exit_status": "failed", "total_input_tokens": 12}),
        ),
    ];
    lines.iter().flat_map(|l| m.line(l)).collect()
}

#[test]
fn a_session_s_lines_are_genai_spans_under_each_other() {
    let spans = session(false);
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "chat m1",
            "execute_tool mcp__gh__search",
            "invoke_agent hello",
            "session hello"
        ]
    );
    let (chat, tool, task, session) = (&spans[0], &spans[1], &spans[2], &spans[3]);
    assert_eq!(chat.parent_span_id, task.span_context.span_id());
    assert_eq!(tool.parent_span_id, task.span_context.span_id());
    assert_eq!(task.parent_span_id, session.span_context.span_id());
    assert_eq!(session.parent_span_id, SpanId::INVALID);
    assert_eq!(format!("{}", task.span_context.trace_id()), TRACE);
    assert_eq!(
        attr(chat, "gen_ai.provider.name").as_deref(),
        Some("anthropic")
    );
    assert_eq!(
        attr(chat, "gen_ai.usage.input_tokens").as_deref(),
        Some("12"),
        "what the provider reported"
    );
    assert_eq!(
        chat.end_time
            .duration_since(chat.start_time)
            .unwrap()
            .as_millis(),
        8
    );
    assert_eq!(attr(tool, "gen_ai.tool.type").as_deref(), Some("extension"));
    assert_eq!(attr(tool, "mcp.method.name").as_deref(), Some("tools/call"));
    assert_eq!(attr(task, "a2a.task.state").as_deref(), Some("completed"));
    assert_eq!(attr(task, "mur.capsule.id").as_deref(), Some("cap_1"));
    assert_eq!(task.status, Status::Ok);
    assert!(
        matches!(session.status, Status::Error { .. }),
        "a failed session"
    );
    // The denied call is an event of the task, its guest text left out.
    assert_eq!(task.events.events.len(), 1);
    let event = &task.events.events[0];
    assert_eq!(event.name, "call_denied");
    assert!(
        event
            .attributes
            .iter()
            .any(|kv| kv.key.as_str() == "mur.hook")
    );
    assert!(
        !event
            .attributes
            .iter()
            .any(|kv| kv.key.as_str() == "mur.reason")
    );
    for span in &spans {
        for kv in &span.attributes {
            assert!(
                !kv.key.as_str().starts_with("gen_ai.input")
                    && !kv.key.as_str().contains("arguments"),
                "no content without opting in: {kv:?}"
            );
        }
    }
}

#[test]
fn content_goes_only_when_the_operator_opts_in() {
    let spans = session(true);
    let (tool, task) = (&spans[1], &spans[2]);
    assert_eq!(
        attr(tool, "gen_ai.tool.call.arguments").as_deref(),
        Some(r#"{"q":"secret plans"}"#)
    );
    assert_eq!(
        attr(tool, "gen_ai.tool.call.result").as_deref(),
        Some("found")
    );
    assert!(
        attr(task, "gen_ai.input.messages")
            .unwrap()
            .contains("do it")
    );
    assert!(
        attr(task, "gen_ai.output.messages")
            .unwrap()
            .contains("done")
    );
}

#[test]
fn open_spans_are_bounded_and_end_when_the_stream_does() {
    let mut m = Mapper::new(false, None);
    m.line(&line("session_start", "a1", None, None, 1000, json!({})));
    let mut pushed = 0;
    for i in 0..MAX_OPEN + 10 {
        let id = format!("{:x}", 0x1000 + i);
        pushed += m
            .line(&line(
                "task_start",
                &id,
                Some("a1"),
                Some(&id),
                1001,
                json!({}),
            ))
            .len();
    }
    assert_eq!(pushed, 11, "past the bound the oldest go out as they stand");
    for i in 0..200 {
        m.line(&line(
            "input_requested",
            "a1",
            None,
            None,
            1002 + i,
            json!({}),
        ));
    }
    let left = m.finish(UNIX_EPOCH + Duration::from_millis(5000));
    assert_eq!(left.len(), MAX_OPEN);
    assert!(
        left.iter()
            .all(|s| matches!(s.status, Status::Error { .. }))
    );
    assert!(m.finish(UNIX_EPOCH).is_empty());
}

#[test]
fn a_span_keeps_at_most_its_events_and_counts_the_rest() {
    let mut m = Mapper::new(false, None);
    m.line(&line("session_start", "a1", None, None, 1000, json!({})));
    for i in 0..MAX_EVENTS as u64 + 7 {
        m.line(&line(
            "task_enqueued",
            "a1",
            None,
            None,
            1001 + i,
            json!({}),
        ));
    }
    let spans = m.line(&line(
        "session_end",
        "a1",
        None,
        None,
        2000,
        json!({"exit_status": "ok"}),
    ));
    assert_eq!(spans[0].events.events.len(), MAX_EVENTS);
    assert_eq!(spans[0].events.dropped_count, 7);
}

#[test]
fn a_served_request_is_a_server_span_under_its_caller() {
    let served = super::super::Served {
        method: "SendMessage",
        traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        started: UNIX_EPOCH + Duration::from_secs(1),
        task: Some("tsk_1"),
        state: Some("completed"),
    };
    let span = request(&served, UNIX_EPOCH + Duration::from_secs(2));
    assert_eq!(span.name, "SendMessage");
    assert_eq!(
        format!("{}", span.span_context.trace_id()),
        "0af7651916cd43dd8448eb211c80319c"
    );
    assert_eq!(format!("{}", span.parent_span_id), "b7ad6b7169203331");
    assert!(span.parent_span_is_remote);
    assert_eq!(attr(&span, "a2a.task.state").as_deref(), Some("completed"));
    let alone = super::super::Served {
        traceparent: Some("garbage"),
        ..served
    };
    let span = request(&alone, UNIX_EPOCH);
    assert_eq!(span.parent_span_id, SpanId::INVALID);
    assert!(span.span_context.is_valid());
}

#[test]
fn text_attributes_are_cut_at_the_bound() {
    let mut m = Mapper::new(true, None).with_max_value(10);
    m.line(&line("session_start", "a1", None, None, 1000, json!({})));
    let huge = "é".repeat(1_000_000);
    let tool = json!({"tool_name": "bash", "input": huge, "output": huge, "duration_ms": 1});
    let spans = m.line(&line("tool_call", "d1", Some("a1"), None, 1001, tool));
    let arguments = attr(&spans[0], "gen_ai.tool.call.arguments").unwrap();
    assert_eq!(arguments, "ééééé", "10 bytes, on a character boundary");
    assert_eq!(
        attr(&spans[0], "gen_ai.tool.call.result").unwrap().len(),
        10
    );
}
