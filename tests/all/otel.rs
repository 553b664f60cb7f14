//! OpenTelemetry export end to end, against a real receiver: Arize Phoenix (see
//! `common::phoenix`), read back through its REST API and its web UI as a user of
//! Phoenix would see a capsule's work. A session is a tree of GenAI spans, `session` →
//! `invoke_agent` → `chat`, `execute_tool`, `shell`, whose ids are the `span_id`s of its
//! `trace.jsonl` lines; `mur trace export` sends a stored session as the same spans.
//!
//! The A2A caller's trace is `otel_sdk`; collectors that fail are `otel_failures`.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::browser::Browser;
use crate::common::phoenix::{
    PROJECT_HEADER, Phoenix, SpanTree, attr, name, parent_id, span_id, trace_id,
};
use crate::common::*;

/// The capsule's name, and so its spans': `session lookout`, `invoke_agent lookout`.
pub(crate) const NAME: &str = "lookout";
/// The scripted driver's model, and so the turns' spans: `chat scripted-test`.
pub(crate) const MODEL: &str = "scripted-test";
const PROJECT: &str = "mur-otel";
const TASK: &str = "Count the words of your task.";
/// Far above the second or two Phoenix takes to store what it was sent, on a machine
/// busy with other tests.
pub(crate) const STORED_WITHIN: Duration = Duration::from_secs(60);
/// The attributes that carry what was said (a task's text and answer, tools' arguments
/// and results, a command line): on a span only when the operator opts in.
pub(crate) const CONTENT: &[&str] = &[
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "process.command_line",
];

/// A capsule with two tools, `bash` (a shell command) and the `wordcount` component,
/// that takes its one task and ends: one turn calls bash, one wordcount, one answers.
pub(crate) fn lookout(test: &str) -> Capsule {
    let manifest = format!(
        r#"name: {NAME}
version: "0.1.0"
artifacts:
  - name: wordcount
    runtime: tool
    source: {wordcount}
inference:
  driver: scripted
  script: ./script.yaml
  model: {MODEL}
capabilities:
  shell:
    allow: [bash]
lifecycle:
  task_acceptance: none
"#,
        wordcount = guest(MUR_TOOL_WORDCOUNT).display(),
    );
    let script = "turns:
  - tool_calls: [{id: call-echo, name: bash, input: {command: \"echo hello\"}}]
  - tool_calls: [{id: call-count, name: wordcount, input: {path: task.md}}]
  - text: \"Your task has five words.\"
";
    Capsule::new(test, &manifest, script)
}

/// `mur`, with none of the test's own OpenTelemetry environment: only what a test sets
/// applies.
pub(crate) fn mur_clean() -> Command {
    let mut cmd = mur();
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("OTEL_") || key == "TRACEPARENT" {
            cmd.env_remove(key.as_ref());
        }
    }
    cmd
}

/// The environment that sends a `mur`'s spans to `endpoint`, into Phoenix's `project`,
/// in batches a tenth of a second apart.
pub(crate) fn exporting_to(endpoint: &str, project: &str) -> Vec<(&'static str, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.to_string()),
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            format!("{PROJECT_HEADER}={project}"),
        ),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_string()),
    ]
}

/// `capsule`'s task run to its end by `mur run --task`, with `env` set (an exporter's,
/// or none); its session.
pub(crate) fn run_task(capsule: &Capsule, env: &[(&str, String)]) -> Session {
    let mut cmd = mur_clean();
    cmd.args(["run", "--json", "--port", "0", "--manifest"])
        .arg(capsule.manifest())
        .args(["--task", TASK])
        .envs(env.iter().map(|(k, v)| (k, v)));
    let run = finish(&mut cmd);
    run.assert_ok();
    run.session()
}

/// The spans Phoenix holds in `project` once it holds `n` of them.
pub(crate) fn stored(phoenix: &Phoenix, project: &str, n: usize) -> SpanTree {
    SpanTree::new(phoenix.eventually_spans(project, |s| s.len() >= n, STORED_WITHIN))
}

/// The trace's lines that are or open a span: those carrying `parent_span_id`.
pub(crate) fn span_lines(trace: &[Value]) -> Vec<&Value> {
    trace
        .iter()
        .filter(|line| line.get("parent_span_id").is_some())
        .collect()
}

pub(crate) fn text<'a>(line: &'a Value, key: &str) -> &'a str {
    line[key]
        .as_str()
        .unwrap_or_else(|| panic!("no {key} in {line}"))
}

/// The span a line names by its `span_id`; the test fails, showing the tree, if
/// Phoenix has none.
pub(crate) fn span_of<'a>(tree: &'a SpanTree, line: &Value) -> &'a Value {
    let id = text(line, "span_id");
    tree.by_id(id).unwrap_or_else(|| {
        panic!(
            "no span {id} for the {} line {line}; Phoenix holds:\n{}",
            line["event_type"],
            tree.outline()
        )
    })
}

/// That `span`'s attribute `key` is `value`.
pub(crate) fn has(span: &Value, key: &str, value: Value) {
    assert_eq!(
        attr(span, key),
        Some(&value),
        "{key} of {}: {span:#}",
        name(span)
    );
}

/// The span name a line of `kind` gives, as the GenAI conventions name it.
fn span_name(line: &Value) -> String {
    match text(line, "event_type") {
        "session_start" => format!("session {}", text(line, "capsule_name")),
        "task_start" => format!("invoke_agent {NAME}"),
        "inference" => format!("chat {MODEL}"),
        "tool_call" => format!("execute_tool {}", text(line, "tool_name")),
        "shell" => {
            let binary = text(line, "binary");
            format!("shell {}", binary.rsplit('/').next().unwrap())
        }
        other => panic!("a {other} line opened a span in a session that has none: {line}"),
    }
}

/// The usage a turn's line reports: the provider's count, else the host's estimate.
fn tokens(line: &Value, which: &str) -> Value {
    let actual = &line[format!("{which}_tokens_actual")];
    if actual.is_u64() {
        actual.clone()
    } else {
        line[format!("{which}_tokens")].clone()
    }
}

/// Checks that `tree` is the whole of `session`'s spans as a user of Phoenix sees them:
/// `session lookout` the root of a trace whose id is the session's, `invoke_agent
/// lookout` under it, and under that the task's three turns, its two tool calls and
/// its shell command, each with its GenAI attributes and no content (none was opted
/// in); and that each span is the trace line of the same `span_id`, the same parent
/// and the same trace, with every other line an event of the span it names.
pub(crate) fn assert_session_tree(tree: &SpanTree, session: &Session) {
    let trace = session.trace();
    let trace_hex = session.id.strip_prefix("ses_").unwrap();
    let lines = span_lines(&trace);
    let kinds: Vec<&str> = lines.iter().map(|l| text(l, "event_type")).collect();
    assert_eq!(
        kinds,
        [
            "session_start",
            "task_start",
            "inference",
            "tool_call",
            "shell",
            "inference",
            "tool_call",
            "inference"
        ],
        "the span lines of {}",
        session.records.display()
    );
    assert_eq!(
        tree.spans().len(),
        lines.len(),
        "one span per span line:\n{}",
        tree.outline()
    );

    for line in &trace {
        assert_eq!(line["trace_id"], trace_hex, "{line}");
    }
    assert_lines_are_spans(tree, &trace);
    for line in &lines {
        assert_eq!(name(span_of(tree, line)), span_name(line), "{line}");
    }

    // The tree.
    let root = tree.one(&format!("session {NAME}"));
    assert_eq!(tree.roots(), [root], "{}", tree.outline());
    assert_eq!(parent_id(root), None);
    let agent = tree.one(&format!("invoke_agent {NAME}"));
    assert_eq!(tree.children(root), [agent], "{}", tree.outline());
    let mut under: Vec<&str> = tree.child_names(agent);
    under.sort();
    let chat = format!("chat {MODEL}");
    assert_eq!(
        under,
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
        assert!(tree.children(span).is_empty(), "{}", tree.outline());
    }

    // The session's span.
    has(root, "gen_ai.agent.name", json!(NAME));
    // No GenAI operation: its model and usage stay under mur., counted once.
    has(root, "mur.session.model", json!(MODEL));
    assert!(
        root["attributes"]
            .get("gen_ai.usage.input_tokens")
            .is_none(),
        "{root:#}"
    );
    has(root, "mur.session.id", json!(session.id));
    assert_eq!(root["status_code"], "OK", "{root:#}");

    // The task's span: an agent's invocation, ended completed with its usage.
    let task = lines[1];
    let end = trace
        .iter()
        .find(|l| l["event_type"] == "task_end")
        .unwrap();
    assert_eq!(agent["span_kind"], "AGENT", "{agent:#}");
    assert_eq!(agent["status_code"], "OK", "{agent:#}");
    has(agent, "gen_ai.operation.name", json!("invoke_agent"));
    has(agent, "gen_ai.agent.name", json!(NAME));
    has(agent, "gen_ai.conversation.id", task["context_id"].clone());
    has(agent, "a2a.task.id", task["task_id"].clone());
    has(agent, "a2a.task.state", json!("completed"));
    has(
        agent,
        "gen_ai.usage.input_tokens",
        end["input_tokens"].clone(),
    );
    has(
        agent,
        "gen_ai.usage.output_tokens",
        end["output_tokens"].clone(),
    );
    assert!(
        end["input_tokens"].as_u64().unwrap() > 0,
        "the task counted its tokens: {end}"
    );

    // The turns: one model call each.
    let turns: Vec<&&Value> = lines
        .iter()
        .filter(|l| l["event_type"] == "inference")
        .collect();
    for line in turns {
        let span = span_of(tree, line);
        assert_eq!(span["span_kind"], "LLM", "{span:#}");
        has(span, "gen_ai.operation.name", json!("chat"));
        has(span, "gen_ai.request.model", json!(MODEL));
        has(span, "gen_ai.usage.input_tokens", tokens(line, "input"));
        has(span, "gen_ai.usage.output_tokens", tokens(line, "output"));
        has(
            span,
            "gen_ai.response.finish_reasons",
            json!([text(line, "stop_reason")]),
        );
        has(span, "mur.turn", line["turn"].clone());
        let provider = attr(span, "gen_ai.provider.name").and_then(Value::as_str);
        assert!(provider.is_some_and(|p| !p.is_empty()), "{span:#}");
    }
    let reasons: Vec<&str> = lines
        .iter()
        .filter(|l| l["event_type"] == "inference")
        .map(|l| text(l, "stop_reason"))
        .collect();
    assert_eq!(reasons, ["tool_call", "tool_call", "end_turn"]);

    // The tool calls.
    let calls: Vec<&&Value> = lines
        .iter()
        .filter(|l| l["event_type"] == "tool_call")
        .collect();
    let ids: Vec<&str> = calls.iter().map(|l| text(l, "tool_call_id")).collect();
    assert_eq!(ids, ["call-echo", "call-count"]);
    for line in calls {
        let span = span_of(tree, line);
        assert_eq!(span["span_kind"], "TOOL", "{span:#}");
        has(span, "gen_ai.operation.name", json!("execute_tool"));
        has(span, "gen_ai.tool.name", line["tool_name"].clone());
        has(span, "gen_ai.tool.call.id", line["tool_call_id"].clone());
        has(span, "gen_ai.tool.type", json!("function"));
    }

    // The shell command bash ran.
    let shell = lines.iter().find(|l| l["event_type"] == "shell").unwrap();
    let span = span_of(tree, shell);
    has(span, "process.exit.code", json!(0));
    has(span, "process.executable.path", shell["binary"].clone());
    assert!(text(shell, "binary").ends_with("/bash"), "{shell}");

    // Nothing that was said: content was not opted in.
    for span in tree.spans() {
        for key in CONTENT {
            assert_eq!(attr(span, key), None, "{key} without opting in: {span:#}");
        }
    }
}

/// Line to span: each line that is or opens a span is the span of its `span_id` in
/// `tree`, in its `trace_id`, under its `parent_span_id`; a `task_end` or
/// `session_end` names the span its start opened; every other line is an event, named
/// for its kind, of the span its `span_id` names (when `tree` holds that span).
pub(crate) fn assert_lines_are_spans(tree: &SpanTree, trace: &[Value]) {
    for line in trace {
        let kind = text(line, "event_type");
        if line.get("parent_span_id").is_some() {
            let span = span_of(tree, line);
            assert_eq!(trace_id(span), text(line, "trace_id"), "{line}\n{span:#}");
            assert_eq!(
                parent_id(span),
                line["parent_span_id"].as_str(),
                "{line}\n{span:#}"
            );
            continue;
        }
        if let Some(opener) = match kind {
            "task_end" => Some("task_start"),
            "session_end" => Some("session_start"),
            _ => None,
        } {
            let opened = trace
                .iter()
                .find(|l| l["event_type"] == opener && l["task_id"] == line["task_id"])
                .unwrap_or_else(|| panic!("no {opener} before {line}"));
            assert_eq!(line["span_id"], opened["span_id"], "{line}");
            continue;
        }
        let Some(span) = tree.by_id(text(line, "span_id")) else {
            continue;
        };
        let events: Vec<&str> = span["events"]
            .as_array()
            .unwrap_or_else(|| panic!("no events in {span:#}"))
            .iter()
            .map(|e| e["name"].as_str().unwrap_or_default())
            .collect();
        assert!(
            events.contains(&kind),
            "{line}\nis no event of its span:\n{span:#}"
        );
    }
}

/// What telemetry said in a session's records: none when it had nothing to say.
pub(crate) fn telemetry_log(session: &Session) -> String {
    std::fs::read_to_string(session.records.join("logs").join("telemetry.log")).unwrap_or_default()
}

#[test]
fn a_task_with_two_tools_and_a_shell_command_is_a_span_tree_in_phoenix() {
    let Some(phoenix) = Phoenix::start() else {
        return;
    };
    let capsule = lookout("otel-live");
    let session = run_task(&capsule, &exporting_to(&phoenix.endpoint(), PROJECT));
    let n = span_lines(&session.trace()).len();
    let tree = stored(&phoenix, PROJECT, n);
    assert_session_tree(&tree, &session);
    // The collector took every span: nothing was lost, nothing said about it.
    assert_eq!(telemetry_log(&session), "");
    assert!(
        phoenix.spans("default").is_empty(),
        "every span went to the project its header named"
    );
}

#[test]
fn a_stored_session_exports_as_the_same_tree_as_it_went_live() {
    let Some(live) = Phoenix::start() else {
        return;
    };
    let capsule = lookout("otel-export");
    let session = run_task(&capsule, &exporting_to(&live.endpoint(), PROJECT));
    let n = span_lines(&session.trace()).len();
    let went_live = stored(&live, PROJECT, n);
    assert_session_tree(&went_live, &session);
    drop(live);

    // The same session, from its records, into a Phoenix that has seen none of it.
    let later = Phoenix::start().expect("Phoenix started once already");
    let exported = export(&capsule, &session.id, &later.endpoint(), PROJECT);
    exported.assert_ok();
    assert_eq!(
        exported.stdout,
        format!(
            "exported {n} spans of session {} to {}\n",
            session.id,
            later.traces_url()
        )
    );
    let afterwards = stored(&later, PROJECT, n);
    assert_session_tree(&afterwards, &session);
    assert_same_spans(&went_live, &afterwards);

    // A session run with no collector at all shows its whole tree once exported.
    let unwatched = lookout("otel-unwatched");
    let quiet = run_task(&unwatched, &[]);
    assert_eq!(telemetry_log(&quiet), "");
    assert!(!quiet.records.join("logs/telemetry.log").exists());
    let project = "mur-otel-afterwards";
    export(&unwatched, &quiet.id, &later.endpoint(), project).assert_ok();
    let tree = stored(&later, project, span_lines(&quiet.trace()).len());
    assert_session_tree(&tree, &quiet);

    // Without a collector named anywhere there is nothing to export to.
    let mut cmd = mur_clean();
    cmd.args(["trace", "export", &quiet.id, "--manifest"])
        .arg(unwatched.manifest());
    finish(&mut cmd).assert_error("error[E-TRC-007]: no collector to export to");
}

/// `mur trace export SESSION --manifest M --endpoint URL`, into Phoenix's `project`.
pub(crate) fn export(capsule: &Capsule, session: &str, endpoint: &str, project: &str) -> Run {
    let mut cmd = mur_clean();
    cmd.args(["trace", "export", session, "--manifest"])
        .arg(capsule.manifest())
        .args(["--endpoint", endpoint])
        .env(
            "OTEL_EXPORTER_OTLP_HEADERS",
            format!("{PROJECT_HEADER}={project}"),
        );
    finish(&mut cmd)
}

/// The same spans, as Phoenix shows them: ids, names, parents, kinds, times, status,
/// attributes and events (Phoenix's own row ids aside).
fn assert_same_spans(a: &SpanTree, b: &SpanTree) {
    let ids = |tree: &SpanTree| {
        let mut ids: Vec<String> = tree
            .spans()
            .iter()
            .map(|s| span_id(s).to_string())
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(a), ids(b), "{}\n{}", a.outline(), b.outline());
    for span in a.spans() {
        let other = b.by_id(span_id(span)).unwrap();
        for key in [
            "name",
            "context",
            "parent_id",
            "span_kind",
            "start_time",
            "end_time",
            "status_code",
            "status_message",
            "attributes",
            "events",
        ] {
            assert_eq!(
                span[key],
                other[key],
                "{key} of {}: live\n{span:#}\nexported\n{other:#}",
                name(span)
            );
        }
    }
}

#[test]
fn phoenix_shows_the_task_trace_in_its_web_ui() {
    let Some(phoenix) = Phoenix::start() else {
        return;
    };
    let capsule = lookout("otel-ui");
    let session = run_task(&capsule, &exporting_to(&phoenix.endpoint(), PROJECT));
    let tree = stored(&phoenix, PROJECT, span_lines(&session.trace()).len());
    assert_session_tree(&tree, &session);
    let Some(browser) = Browser::get() else {
        return;
    };
    let trace = session.id.strip_prefix("ses_").unwrap();
    let page = phoenix.trace_ui_url(PROJECT, trace);
    // Taken in the test's own folder, then put where the docs take it from.
    let screenshot = scratch("otel-ui-shot").join("phoenix-trace.png");
    let agent = format!("invoke_agent {NAME}");
    let chat = format!("chat {MODEL}");
    let task = session.events("task_start")[0]["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let seen = browser.scenario_of(
        "phoenix.mjs",
        "trace",
        &[
            &page,
            screenshot.to_str().unwrap(),
            &agent,
            &task,
            &agent,
            &chat,
            "execute_tool wordcount",
            "shell bash",
        ],
        &[],
    );
    assert_eq!(seen["status"], 200, "{seen:#}");
    assert_eq!(
        seen["names"],
        json!([agent, chat, "execute_tool wordcount", "shell bash"]),
        "{seen:#}"
    );
    let shown = seen["text"].as_str().unwrap_or_default();
    for expected in [agent.as_str(), &chat, &task] {
        assert!(
            shown.contains(expected),
            "{expected:?} not on the page:\n{shown}"
        );
    }
    assert!(is_png(&screenshot), "{}", screenshot.display());
    let kept = repo().join("target").join("otel").join("phoenix-trace.png");
    std::fs::create_dir_all(kept.parent().unwrap()).unwrap();
    let partial = kept.with_extension(format!("png.{}", std::process::id()));
    std::fs::copy(&screenshot, &partial).unwrap();
    std::fs::rename(&partial, &kept).unwrap();
    println!("the trace page: {}", kept.display());
}

/// Whether `path` is a PNG of some size.
fn is_png(path: &Path) -> bool {
    std::fs::read(path)
        .is_ok_and(|bytes| bytes.len() > 10_000 && bytes.starts_with(b"\x89PNG\r\n\x1a\n"))
}
