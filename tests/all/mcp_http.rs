//! An MCP server written with the official Python SDK over streamable HTTP, on
//! 127.0.0.1 behind a bearer token: called by a capsule through its allow rules with
//! the token from the environment, and refused when the rules do not reach it or the
//! token is wrong.

use crate::common::mcp_servers::PythonServer;
use crate::common::*;

const TOKEN: &str = "mcp-test-token-0b1e";

fn capsule(name: &str, url: &str, allow: &str, turns: &str) -> Capsule {
    let manifest = format!(
        r#"name: {name}
version: "0.1.0"
inference:
  driver: scripted
  script: script.yaml
  model: scripted-test
capabilities:
  network:
    allow: [{allow}]
mcp_servers:
  notes:
    url: {url}
    bearer_token_env_var: MUR_TEST_NOTES_TOKEN
trace:
  include_tool_output: true
"#
    );
    Capsule::new(name, &manifest, &format!("turns:\n{turns}"))
}

fn run_with_token(capsule: &Capsule, token: &str) -> Run {
    let mut cmd = mur();
    cmd.args(["run", "--json", "--port", "0", "--manifest"])
        .arg(capsule.manifest())
        .args(["--task", "go"])
        .env("MUR_TEST_NOTES_TOKEN", token);
    finish(&mut cmd)
}

fn fenced(source: &str, text: &str) -> String {
    format!("<untrusted-content source={source}>\n{text}\n</untrusted-content>")
}

#[test]
fn a_python_sdk_server_answers_through_the_allow_list_with_its_token() {
    let Some(server) = PythonServer::start(TOKEN) else {
        return;
    };
    let turns = format!(
        "  - tool_calls:\n      - {{id: c1, name: mcp__notes__add, input: {{a: 2, b: 40}}}}\n      - {{id: c2, name: mcp__notes__greet, input: {{name: Ada}}}}\n{}",
        text_turn("{{last_tool_result}}")
    );
    let allow = format!("http://127.0.0.1:{}", server.port);
    let capsule = capsule("mcp-http", &server.url(), &allow, &turns);
    let run = run_with_token(&capsule, TOKEN);
    run.assert_ok();
    let session = run.session();
    let calls = session.events("tool_call");
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0]["output"], fenced("mcp:notes/add", "42"));
    assert_eq!(
        session.read("out/result.txt").trim_end(),
        fenced("mcp:notes/greet", "Hello, Ada, from the Python MCP SDK.")
    );
    let trace = std::fs::read_to_string(session.records.join("trace.jsonl")).unwrap();
    assert!(!trace.contains(TOKEN), "the token never reaches the trace");
    assert!(!run.stdout.contains(TOKEN) && !run.stderr.contains(TOKEN));
}

#[test]
fn the_same_server_off_the_allow_list_is_refused_at_load() {
    let Some(server) = PythonServer::start(TOKEN) else {
        return;
    };
    let capsule = capsule(
        "mcp-http-off-list",
        &server.url(),
        "http://127.0.0.1:1",
        &text_turn("unused"),
    );
    let run = run_with_token(&capsule, TOKEN);
    run.assert_error("error[E-MAN-003]");
    assert!(
        run.stderr.contains("mcp_servers.notes.url"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_wrong_token_stops_the_launch_saying_the_server_refused_it() {
    let Some(server) = PythonServer::start(TOKEN) else {
        return;
    };
    let allow = format!("http://127.0.0.1:{}", server.port);
    let capsule = capsule(
        "mcp-http-bad-token",
        &server.url(),
        &allow,
        &text_turn("unused"),
    );
    let run = run_with_token(&capsule, "not-the-token");
    assert_eq!(run.status, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("error[E-MCP-001]: MCP server 'notes'"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(
            "answered initialize with HTTP 401: it did not accept the bearer token \
             (bearer_token_env_var), or wants one"
        ),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("not-the-token"));
}

#[test]
fn a_python_sdk_server_is_called_inside_the_tool_calls_trace() {
    let Some(server) = PythonServer::start(TOKEN) else {
        return;
    };
    let turns = format!(
        "  - tool_calls:\n      - {{id: c1, name: mcp__notes__traceparent, input: {{}}}}\n{}",
        text_turn("{{last_tool_result}}")
    );
    let allow = format!("http://127.0.0.1:{}", server.port);
    let capsule = capsule("mcp-http-traced", &server.url(), &allow, &turns);
    let run = run_with_token(&capsule, TOKEN);
    run.assert_ok();
    let session = run.session();
    let calls = session.events("tool_call");
    assert_eq!(calls.len(), 1, "{calls:?}");
    let call = &calls[0];
    assert_eq!(call["status"], "ok", "{call}");
    // What the server's tool found in its request: `_meta.traceparent`, and the
    // `traceparent` header, as the SDK hands them to the tool.
    let output = call["output"].as_str().unwrap_or_default();
    let said = output
        .strip_prefix("<untrusted-content source=mcp:notes/traceparent>\n")
        .and_then(|o| o.strip_suffix("\n</untrusted-content>"))
        .unwrap_or_else(|| panic!("the tool's answer, fenced: {output}"));
    let got: serde_json::Value = serde_json::from_str(said).unwrap();
    let traceparent = got["meta"]
        .as_str()
        .unwrap_or_else(|| panic!("the server got no _meta.traceparent: {got}"));
    assert_eq!(got["header"], traceparent, "the header is the same: {got}");
    let parts: Vec<&str> = traceparent.split('-').collect();
    let [version, trace_id, parent_id, flags] = parts[..] else {
        panic!("not a traceparent: {traceparent}")
    };
    assert_eq!((version, flags), ("00", "01"), "{traceparent}");
    // The server's work is a child of the tool call's span, in the session's trace.
    assert_eq!(call["trace_id"], trace_id, "{call}");
    assert_eq!(call["span_id"], parent_id, "{call}");
}
