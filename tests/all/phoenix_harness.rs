//! The Phoenix harness (`common::phoenix`) checked on its own, before any test relies on
//! it: a real OTLP client (the OpenTelemetry Python SDK and its OTLP/HTTP protobuf
//! exporter, from Phoenix's virtualenv) sends spans to a Phoenix the harness started,
//! configured through the environment as `mur` is (`OTEL_EXPORTER_OTLP_ENDPOINT`,
//! `OTEL_RESOURCE_ATTRIBUTES`), and the spans are read back through Phoenix's REST API:
//! names, attributes, status, events, the parent link, and the project each one went to.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::phoenix::{
    DEFAULT_PROJECT, PROJECT_ATTRIBUTE, PROJECT_HEADER, Phoenix, SpanTree, attr, parent_id,
    span_id, trace_id,
};

const PROJECT: &str = "mur-harness";
const HEADER_PROJECT: &str = "mur-harness-header";
/// Far above the second or two Phoenix takes to store what it was sent.
const STORED_WITHIN: Duration = Duration::from_secs(30);

/// Sends, in three exports: a parent span and its child to the project the environment
/// names; one span with no project (gzipped) to Phoenix's default project; one span to
/// the project its exporter's `x-project-name` header names. Prints the ids it minted
/// and each export's result.
const SEND: &str = r#"
import json, sys
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

results = []

class Checked(OTLPSpanExporter):
    def export(self, spans):
        result = super().export(spans)
        results.append(result.name)
        return result

def provider(resource, **exporter):
    p = TracerProvider(resource=resource)
    # The endpoint from OTEL_EXPORTER_OTLP_ENDPOINT, `/v1/traces` appended.
    p.add_span_processor(BatchSpanProcessor(Checked(**exporter)))
    return p

# Resource.create() reads OTEL_RESOURCE_ATTRIBUTES, which names the project.
named = provider(Resource.create({"service.name": "mur-harness"}))
tracer = named.get_tracer("mur-harness")
with tracer.start_as_current_span("invoke_agent probe", kind=SpanKind.INTERNAL, attributes={
    "gen_ai.operation.name": "invoke_agent",
    "gen_ai.agent.name": "probe",
    "mur.turns": 3,
    "mur.ratio": 0.5,
    "mur.streamed": True,
    "mur.tools": ["bash", "ask"],
}) as parent:
    with tracer.start_as_current_span("chat m", kind=SpanKind.CLIENT, attributes={
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "m",
        "gen_ai.usage.input_tokens": 7,
    }) as child:
        child.add_event("retry", {"attempt": 2})
        child.set_status(Status(StatusCode.ERROR, "model said no"))
named.shutdown()

# Resource(...) reads no environment: no project named.
unnamed = provider(Resource({"service.name": "mur-harness"}), compression=Compression.Gzip)
with unnamed.get_tracer("mur-harness").start_as_current_span("unnamed"):
    pass
unnamed.shutdown()

headed = provider(Resource({"service.name": "mur-harness"}), headers={"x-project-name": sys.argv[1]})
with headed.get_tracer("mur-harness").start_as_current_span("headed"):
    pass
headed.shutdown()

print(json.dumps({
    "trace_id": format(parent.get_span_context().trace_id, "032x"),
    "parent": format(parent.get_span_context().span_id, "016x"),
    "child": format(child.get_span_context().span_id, "016x"),
    "results": results,
}))
"#;

#[test]
fn phoenix_receives_otlp_and_returns_the_spans() {
    let Some(phoenix) = Phoenix::start() else {
        return;
    };
    let endpoint = phoenix.endpoint();
    assert!(!endpoint.ends_with('/'), "{endpoint}");
    assert_eq!(phoenix.traces_url(), format!("{endpoint}/v1/traces"));
    assert!(
        phoenix.spans(PROJECT).is_empty(),
        "a project no span named yet has no spans"
    );

    let resource = format!("{PROJECT_ATTRIBUTE}={PROJECT}");
    let sent = phoenix.python(
        SEND,
        &[HEADER_PROJECT],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_RESOURCE_ATTRIBUTES", &resource),
        ],
    );
    assert_eq!(
        sent.status, 0,
        "stdout:\n{}\nstderr:\n{}",
        sent.stdout, sent.stderr
    );
    let ids: Value = serde_json::from_str(sent.stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", sent.stdout, sent.stderr));
    assert_eq!(
        ids["results"],
        json!(["SUCCESS", "SUCCESS", "SUCCESS"]),
        "{}",
        sent.stderr
    );

    let spans = phoenix.eventually_spans(PROJECT, |s| s.len() >= 2, STORED_WITHIN);
    let tree = SpanTree::new(spans);
    assert_eq!(tree.spans().len(), 2, "{}", tree.outline());

    let parent = tree.one("invoke_agent probe");
    assert_eq!(span_id(parent), ids["parent"]);
    assert_eq!(trace_id(parent), ids["trace_id"]);
    assert_eq!(parent_id(parent), None);
    assert_eq!(tree.roots(), [parent]);
    assert_eq!(tree.child_names(parent), ["chat m"]);
    assert_eq!(parent["span_kind"], "AGENT", "{parent:#}");
    assert_eq!(parent["status_code"], "UNSET");
    for (key, value) in [
        ("gen_ai.operation.name", json!("invoke_agent")),
        ("gen_ai.agent.name", json!("probe")),
        ("mur.turns", json!(3)),
        ("mur.ratio", json!(0.5)),
        ("mur.streamed", json!(true)),
        ("mur.tools", json!(["bash", "ask"])),
    ] {
        assert_eq!(attr(parent, key), Some(&value), "{key} in {parent:#}");
    }
    // The resource is not kept on the span.
    assert_eq!(attr(parent, "service.name"), None, "{parent:#}");
    assert_eq!(attr(parent, PROJECT_ATTRIBUTE), None, "{parent:#}");

    let child = tree.one("chat m");
    assert_eq!(span_id(child), ids["child"]);
    assert_eq!(trace_id(child), ids["trace_id"]);
    assert_eq!(parent_id(child), Some(span_id(parent)));
    assert_eq!(tree.parent(child), Some(parent));
    assert!(tree.children(child).is_empty());
    assert_eq!(tree.descendants(parent), [child]);
    assert_eq!(child["span_kind"], "LLM", "{child:#}");
    assert_eq!(child["status_code"], "ERROR");
    assert_eq!(child["status_message"], "model said no");
    assert_eq!(attr(child, "gen_ai.request.model"), Some(&json!("m")));
    assert_eq!(attr(child, "gen_ai.usage.input_tokens"), Some(&json!(7)));
    // What Phoenix synthesizes from gen_ai.* beside it.
    assert_eq!(
        attr(child, "llm.model_name"),
        Some(&json!("m")),
        "{child:#}"
    );
    let events = child["events"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{child:#}");
    assert_eq!(events[0]["name"], "retry");
    assert_eq!(events[0]["attributes"], json!({"attempt": 2}));

    let unnamed = phoenix.eventually_spans(
        DEFAULT_PROJECT,
        |s| s.iter().any(|s| s["name"] == "unnamed"),
        STORED_WITHIN,
    );
    assert_eq!(unnamed.len(), 1, "{unnamed:#?}");
    let headed = phoenix.eventually_spans(HEADER_PROJECT, |s| !s.is_empty(), STORED_WITHIN);
    assert_eq!(headed.len(), 1, "{headed:#?}");
    assert_eq!(headed[0]["name"], "headed", "{PROJECT_HEADER}: {headed:#?}");
    assert_eq!(phoenix.spans(PROJECT).len(), 2, "the other projects' spans");

    // The UI's pages (the web app answers every one of its routes).
    let project_page = phoenix.project_ui_url(PROJECT);
    let trace_page = phoenix.trace_ui_url(PROJECT, trace_id(parent));
    assert!(trace_page.starts_with(&format!("{project_page}/traces/")));
    for page in [phoenix.ui_url(), project_page, trace_page] {
        let target = page.strip_prefix(&endpoint).unwrap();
        let (status, body) = phoenix.get(target).unwrap();
        assert_eq!(status, 200, "{page}: {body}");
        assert!(body.contains("<html"), "{page}: {body}");
    }
}
