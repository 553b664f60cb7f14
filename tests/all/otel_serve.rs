//! OpenTelemetry under `mur serve` and through the MCP door: a served capsule's spans,
//! read back from a real Phoenix, carry its id (`mur.capsule.id`) exactly when the
//! operator asks for it with `--otel-capsule-ids`; and an MCP client's
//! `params._meta.traceparent` (SEP-414) puts the task it starts in the client's trace,
//! over an HTTP `traceparent` header sent beside it.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::phoenix::{Phoenix, SpanTree, attr, name, parent_id, span_id, trace_id};
use crate::common::served::{Hosted, Served};
use crate::common::*;
use crate::otel::{STORED_WITHIN, mur_clean, span_lines, text};

/// The attribute `--otel-capsule-ids` puts on every span.
const CAPSULE_ID: &str = "mur.capsule.id";

/// A `mur serve` exporting to `phoenix`, into its `project` (named by the
/// `x-project-name` header, as an operator would), with `--otel-capsule-ids` when
/// `ids`; it hosts one scripted capsule, `name`, which runs one task (a shell command,
/// then an answer) and is then stopped, so that its session span ends and goes out
/// too. Returns the server (kept alive, so its exporter is), the capsule, and its
/// session's whole trace.
fn serve_one_task(
    phoenix: &Phoenix,
    name: &str,
    project: &str,
    ids: bool,
) -> (Served, Hosted, Vec<Value>) {
    let endpoint = phoenix.endpoint();
    let mut args = vec!["--otel-endpoint", endpoint.as_str()];
    if ids {
        args.push("--otel-capsule-ids");
    }
    let headers = format!("x-project-name={project}");
    let served = Served::start_with(
        name,
        &args,
        &[
            ("OTEL_EXPORTER_OTLP_HEADERS", headers.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "200"),
        ],
    );
    let script = format!("turns:\n{}{}", bash_turn("echo hello"), text_turn("Done."));
    let hosted = served.create_scripted(name, &script);
    assert!(hosted.id.starts_with("cap_"), "{}", hosted.id);
    let session = served.session_id(&hosted.id);

    let frames = hosted.message("Say hello, then done.");
    let last = frames.last().expect("frames");
    assert_eq!(
        last.state(),
        "completed",
        "{frames:?}\nserver stderr:\n{}",
        served.stderr()
    );

    // Stopped: its session ends, and with it the session's span.
    let stopped = served.stop(&hosted.id);
    assert_eq!(stopped.status, 200, "{stopped:?}");
    let path = served
        .records(&hosted.id)
        .join(&session)
        .join("trace.jsonl");
    eventually(LIMIT, "the session's session_end line", || {
        json_lines_so_far(&path)
            .iter()
            .any(|l| l["event_type"] == "session_end")
    });
    let trace = json_lines(&path);
    (served, hosted, trace)
}

/// The `span_id`s of the trace's span lines: the spans the session must have sent.
fn expected_spans(trace: &[Value]) -> BTreeSet<String> {
    span_lines(trace)
        .iter()
        .map(|l| text(l, "span_id").to_string())
        .collect()
}

/// The request the door served: a server span of its own (the client sent no
/// `traceparent`), named for the method.
const DOOR: &str = "message/stream";

/// The spans Phoenix holds in `project` once it holds every one of `expected` and the
/// door's span (and then only those: the server hosted one capsule, and nothing else
/// may show up in its project).
fn stored_exactly(phoenix: &Phoenix, project: &str, expected: &BTreeSet<String>) -> SpanTree {
    let spans = phoenix.eventually_spans(
        project,
        |spans| {
            let got: BTreeSet<&str> = spans.iter().map(span_id).collect();
            expected.iter().all(|id| got.contains(id.as_str()))
                && spans.iter().any(|s| name(s) == DOOR)
        },
        STORED_WITHIN,
    );
    let tree = SpanTree::new(spans);
    let got: BTreeSet<String> = tree
        .spans()
        .iter()
        .filter(|s| name(s) != DOOR)
        .map(|s| span_id(s).to_string())
        .collect();
    assert_eq!(&got, expected, "{}", tree.outline());
    tree
}

/// Checks the session's trace and its spans in Phoenix are the whole task: the
/// session, its task, the turns, the tool call and the shell command, all in the
/// session's own trace; and the door's one span for the request that brought it.
fn assert_whole_task(tree: &SpanTree, trace: &[Value], capsule: &str) {
    let session = trace
        .iter()
        .find(|l| l["event_type"] == "session_start")
        .expect("a session_start line");
    let session_trace = text(session, "trace_id");
    for line in trace {
        assert_eq!(line["trace_id"], session_trace, "{line}");
    }
    let mut names: Vec<&str> = tree.spans().iter().map(name).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "chat scripted-test",
            "chat scripted-test",
            "execute_tool bash",
            &format!("invoke_agent {capsule}"),
            DOOR,
            &format!("session {capsule}"),
            "shell bash",
        ],
        "{}",
        tree.outline()
    );
    let task = trace
        .iter()
        .find(|l| l["event_type"] == "task_start")
        .expect("a task_start line");
    for span in tree.spans() {
        if name(span) == DOOR {
            assert_eq!(
                attr(span, "a2a.task.id"),
                Some(&task["task_id"]),
                "{span:#}"
            );
            assert_eq!(
                attr(span, "a2a.task.state"),
                Some(&json!("completed")),
                "{span:#}"
            );
            assert_eq!(parent_id(span), None, "no caller, no parent: {span:#}");
            continue;
        }
        assert_eq!(trace_id(span), session_trace, "{span:#}");
    }
}

#[test]
fn under_serve_spans_carry_the_capsule_id_only_when_asked() {
    let Some(phoenix) = Phoenix::start() else {
        return;
    };
    let started = Instant::now();

    // With --otel-capsule-ids: every span of the capsule's trace says which capsule.
    let (tagged_project, tagged_name) = ("mur-serve-ids", "tagged");
    let (served, hosted, trace) = serve_one_task(&phoenix, tagged_name, tagged_project, true);
    let expected = expected_spans(&trace);
    let tree = stored_exactly(&phoenix, tagged_project, &expected);
    assert_whole_task(&tree, &trace, tagged_name);
    for span in tree.spans() {
        assert_eq!(
            attr(span, CAPSULE_ID),
            Some(&json!(hosted.id)),
            "{CAPSULE_ID} of {}: {span:#}",
            name(span)
        );
    }
    drop(served);
    eprintln!(
        "with --otel-capsule-ids: {} spans, each carrying {CAPSULE_ID}={} ({:.1?})",
        tree.spans().len(),
        hosted.id,
        started.elapsed()
    );

    // Without it: the same spans, and not one says which capsule.
    let (plain_project, plain_name) = ("mur-serve-no-ids", "untagged");
    let (served, hosted, trace) = serve_one_task(&phoenix, plain_name, plain_project, false);
    let expected = expected_spans(&trace);
    let tree = stored_exactly(&phoenix, plain_project, &expected);
    assert_whole_task(&tree, &trace, plain_name);
    for span in tree.spans() {
        assert_eq!(
            attr(span, CAPSULE_ID),
            None,
            "{CAPSULE_ID} without --otel-capsule-ids: {span:#}"
        );
        // Nor under any other key: the capsule's id is nowhere on the span.
        assert!(
            !span["attributes"].to_string().contains(&hosted.id),
            "{} named without --otel-capsule-ids: {span:#}",
            hosted.id
        );
    }
    drop(served);
    eprintln!(
        "without --otel-capsule-ids: {} spans, none carrying {CAPSULE_ID} ({:.1?})",
        tree.spans().len(),
        started.elapsed()
    );

    // Each server's spans went to the project its header named, and only there.
    assert!(phoenix.spans("default").is_empty(), "spans with no project");
}

// ---------------------------------------------------------------------------------
// The MCP door.

/// The capsule behind the door: scripted, one answer per task, across the session.
const DOOR_NAME: &str = "traced-door";
/// The stateless era the calls are made in, and its envelope's keys.
const MCP_VERSION: &str = "2026-07-28";
const VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
const CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";
const WAIT: Duration = Duration::from_secs(60);

/// The MCP client's trace context, sent in `params._meta.traceparent`.
const META_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const META_PARENT: &str = "b7ad6b7169203331";
/// The HTTP `traceparent` header's, of another trace.
const HEADER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const HEADER_PARENT: &str = "00f067aa0ba902b7";

/// `tools/call` of the door's one tool with `task`, in the stateless era, answered as
/// one JSON body; `traceparent` in the envelope's `_meta` when given, `headers`
/// besides the era's: the answer's JSON.
fn call_tool(
    address: &str,
    id: u64,
    task: &str,
    traceparent: Option<&str>,
    headers: &[(&str, &str)],
) -> Value {
    let mut meta = json!({VERSION_KEY: MCP_VERSION, CAPABILITIES_KEY: {}});
    if let Some(traceparent) = traceparent {
        meta["traceparent"] = json!(traceparent);
    }
    let body = json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"_meta": meta, "name": DOOR_NAME, "arguments": {"task": task}}
    })
    .to_string();
    let mut all = vec![
        ("content-type", "application/json"),
        ("accept", "application/json"),
        ("mcp-protocol-version", MCP_VERSION),
    ];
    all.extend_from_slice(headers);
    let raw = exchange(address, &raw_request(address, "POST", "/mcp", &all, &body));
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no head: {raw:?}"));
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{raw}");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {raw}"))
}

/// The one text of a tool call's successful result.
fn answer(reply: &Value) -> &str {
    let result = &reply["result"];
    assert_eq!(result["isError"], false, "{reply}");
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text: {reply}"))
}

/// The lines of `kind` of the task `task` in the trace.
fn of_task<'a>(trace: &'a [Value], kind: &str, task: &str) -> Vec<&'a Value> {
    trace
        .iter()
        .filter(|l| l["event_type"] == kind && l["task_id"] == task)
        .collect()
}

#[test]
fn an_mcp_callers_meta_traceparent_puts_the_task_in_its_trace() {
    let manifest = format!(
        "name: {DOOR_NAME}\nversion: \"1.0.0\"\ndescription: Answers traced MCP calls\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\ncapabilities:\n  shell:\n    allow: [bash]\n"
    );
    let script = format!(
        "turns:\n{}{}{}",
        bash_turn("echo traced"),
        text_turn("In the caller's trace."),
        text_turn("In the header's trace.")
    );
    let capsule = Capsule::new("otel-mcp-meta", &manifest, &script);
    let mut cmd = mur_clean();
    cmd.args(["run", "--json", "--port", "0", "--manifest"])
        .arg(capsule.manifest())
        .args(QUEUE)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let running = Running::start_command(cmd);
    let session = running.session();
    let address = running.address.clone();

    let meta = format!("00-{META_TRACE}-{META_PARENT}-01");
    let header = format!("00-{HEADER_TRACE}-{HEADER_PARENT}-01");
    assert_ne!(META_TRACE, HEADER_TRACE);

    // Both: the body's `_meta.traceparent` wins over the header.
    let both = call_tool(
        &address,
        1,
        "Run it, then answer.",
        Some(&meta),
        &[("traceparent", &header)],
    );
    assert_eq!(answer(&both), "In the caller's trace.", "{both}");
    // The header alone, for a second task: it is read when the body has none, so the
    // first task's trace was chosen, not the header ignored.
    let alone = call_tool(
        &address,
        2,
        "Answer again.",
        None,
        &[("traceparent", &header)],
    );
    assert_eq!(answer(&alone), "In the header's trace.", "{alone}");

    let mut trace = Vec::new();
    eventually(WAIT, "two task_end lines", || {
        trace = session.trace_so_far();
        trace
            .iter()
            .filter(|l| l["event_type"] == "task_end")
            .count()
            == 2
    });
    let starts: Vec<&Value> = trace
        .iter()
        .filter(|l| l["event_type"] == "task_start")
        .collect();
    assert_eq!(starts.len(), 2, "{}", session.records.display());
    let (first, second) = (starts[0], starts[1]);

    // The task of the call with both: a span in the MCP client's trace, under the
    // span its `_meta.traceparent` named, which it keeps as its caller's.
    let task = text(first, "task_id");
    assert_eq!(first["trace_id"], META_TRACE, "{first}");
    assert_eq!(first["parent_span_id"], META_PARENT, "{first}");
    assert_eq!(first["traceparent_from_caller"], meta, "{first}");
    let received = of_task(&trace, "a2a_task_received", task);
    assert_eq!(received.len(), 1, "{trace:#?}");
    assert_eq!(
        received[0]["traceparent_from_caller"], meta,
        "{}",
        received[0]
    );
    // Its work is under it there, to its end.
    let task_span = text(first, "span_id");
    let work: Vec<&Value> = trace
        .iter()
        .filter(|l| l["task_id"] == task)
        .filter(|l| ["inference", "tool_call", "shell"].contains(&text(l, "event_type")))
        .collect();
    assert!(
        work.len() >= 4,
        "a turn, a call, its command, a turn: {work:#?}"
    );
    for line in work {
        assert_eq!(line["trace_id"], META_TRACE, "{line}");
        assert_eq!(line["parent_span_id"], task_span, "{line}");
    }
    let end = of_task(&trace, "task_end", task);
    assert_eq!(
        (&end[0]["trace_id"], &end[0]["span_id"]),
        (&first["trace_id"], &first["span_id"]),
        "{}",
        end[0]
    );
    // The header's trace is nowhere in the first task's lines.
    for line in trace.iter().filter(|l| l["task_id"] == task) {
        assert!(!line.to_string().contains(HEADER_TRACE), "{line}");
    }

    // The task of the call with the header alone: in the header's trace.
    assert_eq!(second["trace_id"], HEADER_TRACE, "{second}");
    assert_eq!(second["parent_span_id"], HEADER_PARENT, "{second}");
    assert_eq!(second["traceparent_from_caller"], header, "{second}");

    // The session itself stays a trace of its own.
    let session_start = trace
        .iter()
        .find(|l| l["event_type"] == "session_start")
        .unwrap();
    assert_eq!(
        session_start["trace_id"],
        session.id.strip_prefix("ses_").unwrap()
    );
}
