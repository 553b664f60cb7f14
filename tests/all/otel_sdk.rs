//! A traced A2A caller: a client built on the official A2A Python SDK that runs inside
//! an OpenTelemetry span of its own, carries its context to the capsule in the W3C
//! `traceparent` header of its call, and exports its spans to the same Phoenix as the
//! capsule. In Phoenix the capsule's work is then part of the caller's trace: the
//! task's `invoke_agent` span, and the door's `SendMessage` server span, are children
//! of the span the header named.

use std::process::Stdio;

use serde_json::{Value, json};

use crate::common::phoenix::{Phoenix, SpanTree, attr, name, parent_id, span_id, trace_id};
use crate::common::*;
use crate::otel::{
    MODEL, NAME, STORED_WITHIN, assert_lines_are_spans, exporting_to, has, lookout, mur_clean,
    span_of, text,
};

const PROJECT: &str = "mur-otel-caller";
const ASKED: &str = "Count the words of this message, please.";
const ANSWER: &str = "Your task has five words.";
/// The caller's own span, the root of its trace.
const CALLER_SPAN: &str = "ask lookout";

/// The caller: `python -c CLIENT <capsule address> <phoenix endpoint> <project> <text>
/// <span name>`.
/// Its tracer provider is the process's (so the SDK's own instrumentation records into
/// it too); an httpx request hook injects the current context into every POST's
/// headers, as OpenTelemetry's httpx instrumentation does. Prints one JSON line: its
/// span's ids, the `traceparent`s it sent, the SDK's events and each export's result.
const CLIENT: &str = r#"
import asyncio, json, sys, uuid

import httpx
from google.protobuf.json_format import MessageToDict
from opentelemetry import propagate, trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest

address, endpoint, project, text, span_name = sys.argv[1:6]
results = []

class Checked(OTLPSpanExporter):
    def export(self, spans):
        result = super().export(spans)
        results.append(result.name)
        return result

provider = TracerProvider(resource=Resource.create({"service.name": "a2a-caller"}))
provider.add_span_processor(BatchSpanProcessor(
    Checked(endpoint=endpoint + "/v1/traces", headers={"x-project-name": project})))
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("a2a-caller")

sent = []

async def carry_context(request):
    if request.method == "POST":
        propagate.inject(request.headers)
        sent.append(request.headers.get("traceparent"))

async def main():
    async with httpx.AsyncClient(timeout=60, event_hooks={"request": [carry_context]}) as http:
        with tracer.start_as_current_span(span_name, kind=trace.SpanKind.CLIENT) as span:
            card = await A2ACardResolver(http, address).get_agent_card()
            client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
            message = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
            events = [MessageToDict(e) async for e in client.send_message(SendMessageRequest(message=message))]
    context = span.get_span_context()
    return {
        "trace_id": format(context.trace_id, "032x"),
        "span_id": format(context.span_id, "016x"),
        "traceparents": sent,
        "events": events,
    }

seen = asyncio.run(main())
provider.shutdown()
seen["exports"] = results
print(json.dumps(seen))
"#;

#[test]
fn an_sdk_callers_traceparent_puts_the_task_in_the_callers_trace() {
    let Some(python) = otel_client::python() else {
        return;
    };
    let Some(phoenix) = Phoenix::start() else {
        return;
    };
    let capsule = lookout("otel-caller");
    let mut env = exporting_to(&phoenix.endpoint(), PROJECT);
    env.push((
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
        "true".to_string(),
    ));
    let mut cmd = mur_clean();
    cmd.args(["run", "--json", "--port", "0", "--manifest"])
        .arg(capsule.manifest())
        .args(QUEUE)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let running = Running::start_command(cmd);
    let session = running.session();
    let address = format!("http://{}/", running.address);

    let ran = otel_client::run(
        &python,
        CLIENT,
        &[&address, &phoenix.endpoint(), PROJECT, ASKED, CALLER_SPAN],
    );
    let seen: Value = serde_json::from_str(ran.stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| {
            panic!(
                "the client printed no JSON ({e}); exit {}\nstdout:\n{}\nstderr:\n{}",
                ran.status, ran.stdout, ran.stderr
            )
        });
    assert_eq!(ran.status, 0, "{seen:#}\n{}", ran.stderr);
    let exports = seen["exports"].as_array().unwrap();
    assert!(
        !exports.is_empty() && exports.iter().all(|r| r == "SUCCESS"),
        "{seen:#}"
    );
    let last = seen["events"].as_array().unwrap().last().cloned();
    let task = last.as_ref().map(|e| &e["task"]).unwrap_or(&Value::Null);
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{seen:#}");
    let task_id = task["id"].as_str().unwrap().to_string();

    // What the caller sent: its context, the SDK's span within its own.
    let client_trace = seen["trace_id"].as_str().unwrap().to_string();
    let client_span = seen["span_id"].as_str().unwrap().to_string();
    let traceparent = seen["traceparents"][0]
        .as_str()
        .unwrap_or_else(|| panic!("no traceparent was sent: {seen:#}"))
        .to_string();
    let parts: Vec<&str> = traceparent.split('-').collect();
    let [_, header_trace, header_span, _] = parts[..] else {
        panic!("not a traceparent: {traceparent}")
    };
    assert_eq!(header_trace, client_trace, "{traceparent}");
    let header_span = header_span.to_string();

    // The session ends, and with it the session's span.
    stop(&running.address);
    let run = running.wait(LIMIT);
    assert_eq!(run.status, 0, "{}", run.stderr);

    // The capsule's records: the task in the caller's trace, under the header's span.
    let trace = session.trace();
    let received = session.events("a2a_task_received");
    assert_eq!(received.len(), 1, "{received:?}");
    assert_eq!(received[0]["traceparent_from_caller"], traceparent);
    let start = &session.events("task_start")[0];
    assert_eq!(start["task_id"], task_id);
    assert_eq!(start["trace_id"], client_trace, "{start}");
    assert_eq!(start["parent_span_id"], header_span, "{start}");
    let session_start = &session.events("session_start")[0];
    assert_eq!(
        session_start["trace_id"],
        session.id.strip_prefix("ses_").unwrap(),
        "the session is a trace of its own: {session_start}"
    );

    // Phoenix: one project, both sides.
    let agent_name = format!("invoke_agent {NAME}");
    let session_name = format!("session {NAME}");
    let all = phoenix.eventually_spans(
        PROJECT,
        |spans| {
            let tree = SpanTree::new(spans.to_vec());
            [CALLER_SPAN, &agent_name, &session_name, "SendMessage"]
                .iter()
                .all(|n| !tree.named(n).is_empty())
                && tree.by_id(&header_span).is_some()
                && tree.named(&format!("chat {MODEL}")).len() == 3
        },
        STORED_WITHIN,
    );
    let tree = SpanTree::new(all);

    // The caller's span, the root of its trace, and the span its header named, within.
    let caller = tree.one(CALLER_SPAN);
    assert_eq!(span_id(caller), client_span);
    assert_eq!(trace_id(caller), client_trace);
    assert_eq!(parent_id(caller), None, "{caller:#}");
    let named = tree.by_id(&header_span).unwrap();
    assert_eq!(trace_id(named), client_trace, "{named:#}");
    let mut up = named;
    while span_id(up) != client_span {
        up = tree.parent(up).unwrap_or_else(|| {
            panic!(
                "the header's span {header_span} is not within the caller's span:\n{}",
                tree.outline()
            )
        });
    }

    // The task: in the caller's trace, a child of the header's span, its work below it.
    let agent = tree.one(&agent_name);
    assert_eq!(trace_id(agent), client_trace, "{agent:#}");
    assert_eq!(parent_id(agent), Some(header_span.as_str()), "{agent:#}");
    assert_eq!(span_id(agent), text(start, "span_id"));
    has(agent, "a2a.task.id", json!(task_id));
    has(agent, "a2a.task.state", json!("completed"));
    has(agent, "gen_ai.conversation.id", start["context_id"].clone());
    let chat = format!("chat {MODEL}");
    let mut work = tree.child_names(agent);
    work.sort();
    assert_eq!(
        work,
        [
            chat.as_str(),
            &chat,
            &chat,
            "execute_tool bash",
            "execute_tool wordcount",
            "shell bash"
        ],
        "{}",
        tree.outline()
    );
    for span in tree.descendants(agent) {
        assert_eq!(trace_id(span), client_trace, "{span:#}");
    }

    // The door's answer to the call: a server span, a child of the header's span.
    let served: Vec<&Value> = tree
        .named("SendMessage")
        .into_iter()
        .filter(|s| attr(s, "a2a.task.id") == Some(&json!(task_id)))
        .collect();
    assert_eq!(served.len(), 1, "{}", tree.outline());
    let served = served[0];
    assert_eq!(trace_id(served), client_trace, "{served:#}");
    assert_eq!(parent_id(served), Some(header_span.as_str()), "{served:#}");
    has(served, "rpc.method", json!("SendMessage"));
    has(served, "a2a.task.state", json!("completed"));

    // The session: a trace of its own, which the task is not in.
    let root = tree.one(&session_name);
    assert_eq!(trace_id(root), session.id.strip_prefix("ses_").unwrap());
    assert_eq!(parent_id(root), None, "{root:#}");
    assert!(tree.children(root).is_empty(), "{}", tree.outline());

    // Every span line of the session is its span; every other line an event of one.
    assert_lines_are_spans(&tree, &trace);

    // Content, opted in: what the caller asked and what the capsule answered; what the
    // tools were called with.
    let asked = attr(agent, "gen_ai.input.messages").and_then(Value::as_str);
    assert!(asked.is_some_and(|m| m.contains(ASKED)), "{agent:#}");
    let answered = attr(agent, "gen_ai.output.messages").and_then(Value::as_str);
    assert!(answered.is_some_and(|m| m.contains(ANSWER)), "{agent:#}");
    let bash = tree.one("execute_tool bash");
    let arguments = attr(bash, "gen_ai.tool.call.arguments").and_then(Value::as_str);
    assert!(
        arguments.is_some_and(|a| a.contains("echo hello")),
        "{bash:#}"
    );
    let shell = span_of(&tree, &session.events("shell")[0]);
    assert_eq!(name(shell), "shell bash");
    has(shell, "process.command_line", json!("echo hello"));
}

/// `murmur/stop` to a `mur run`'s door: the session ends after it.
fn stop(address: &str) {
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "murmur/stop", "params": {}});
    let reply = read_to_close(post(
        address,
        &[("content-type", "application/json")],
        &body.to_string(),
    ));
    assert!(reply.contains("\"stopped\""), "{reply}");
}

#[test]
fn a_traceparent_at_the_seed_door_puts_the_task_in_the_callers_trace() {
    let capsule = lookout("otel-seed-caller");
    let mut cmd = mur_clean();
    cmd.args(["run", "--json", "--port", "0", "--manifest"])
        .arg(capsule.manifest())
        .args(QUEUE)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let running = Running::start_command(cmd);
    let session = running.session();
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let traceparent = format!("00-{caller_trace}-{caller_span}-01");
    let raw = read_to_close(post(
        &running.address,
        &[
            ("content-type", "application/json"),
            ("traceparent", &traceparent),
        ],
        &message_stream_body(ASKED),
    ));
    let streamed = frames(
        raw.strip_prefix(SSE_HEAD)
            .unwrap_or_else(|| panic!("{raw}")),
    );
    let (_, _, last) = streamed.last().unwrap();
    assert_eq!(last["status"]["state"], "completed", "{raw}");
    stop(&running.address);
    let run = running.wait(LIMIT);
    assert_eq!(run.status, 0, "{}", run.stderr);

    // The task's span is a child of the caller's, in the caller's trace; its work is
    // under it there; the session is a trace of its own.
    let received = session.events("a2a_task_received");
    assert_eq!(received[0]["traceparent_from_caller"], traceparent);
    let start = &session.events("task_start")[0];
    assert_eq!(start["trace_id"], caller_trace, "{start}");
    assert_eq!(start["parent_span_id"], caller_span, "{start}");
    let task_span = text(start, "span_id");
    for kind in ["inference", "tool_call", "shell"] {
        for line in session.events(kind) {
            assert_eq!(line["trace_id"], caller_trace, "{line}");
            assert_eq!(line["parent_span_id"], task_span, "{line}");
        }
    }
    let end = &session.events("task_end")[0];
    assert_eq!(
        (&end["trace_id"], &end["span_id"]),
        (&start["trace_id"], &start["span_id"]),
        "{end}"
    );
    let session_start = &session.events("session_start")[0];
    assert_eq!(
        session_start["trace_id"],
        session.id.strip_prefix("ses_").unwrap()
    );
    assert_eq!(session_start["parent_span_id"], Value::Null);
}
