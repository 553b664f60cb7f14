//! Hooks end to end: the real `mur` binary with real hook components (the scripted
//! `mur_hook_recorder` fixture and the three example hooks), checked on what a user
//! sees — `trace.jsonl` lines, frames on the wire, `out/result.txt`, `task.md`,
//! `logs/`, the exit status — and on what the hooks themselves saw (the recorder's
//! `events.jsonl`). Where a test must show what the model was sent, the capsule talks
//! to the loopback mock of the OpenAI API (`common::mock_model`), which records every
//! request. The rules are the hook world's (`wit/hook`: bindings, verdicts, which
//! policy commits where), the session loop's and the streaming protocol's.
//!
//! Every capsule runs with `--workdir <scratch>/wd --records <scratch>/records`, so a
//! hook's scope folder is `records/hooks/<scope>` (its `script.json`, `required.txt`, ...
//! are written before the run) and the session's records are under
//! `records/<session-id>/`, out of the capsule's sight.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::mock_model::{MockModel, Reply, openai};
use crate::common::sse_frames::{Sse, l, labels};
use crate::common::*;
use serde_json::{Value, json};

/// The bound on any one wait: what these capsules do takes a second or two.
const WAIT: Duration = Duration::from_secs(60);
const JSON_CT: (&str, &str) = ("content-type", "application/json");
const ENV: &[(&str, &str)] = &[("MOCK_API_KEY", "sk-test-hooks-0000")];
/// What follows a policy hook's reason in the text the model receives.
const REFUSAL_TAIL: &str =
    "\n\nThis call did not run. Retrying it unchanged will be refused again.";

pub(crate) fn refusal(hook: &str, reason: &str) -> String {
    format!("Refused by policy hook '{hook}': {reason}{REFUSAL_TAIL}")
}

// ---------------------------------------------------------------------------------
// Manifests.

/// One hook artifact entry.
#[derive(Clone)]
pub(crate) struct Hook {
    name: &'static str,
    wasm: &'static str,
    binding: Option<&'static str>,
    mode: Option<&'static str>,
    policy: Option<&'static str>,
    scope: Option<String>,
    deadline: Option<u64>,
}

impl Hook {
    pub(crate) fn new(name: &'static str, wasm: &'static str) -> Hook {
        Hook {
            name,
            wasm,
            binding: None,
            mode: None,
            policy: None,
            scope: None,
            deadline: None,
        }
    }

    /// The recorder fixture, its scope folder named after it.
    pub(crate) fn recorder(name: &'static str) -> Hook {
        Hook::new(name, MUR_HOOK_RECORDER).scope(name)
    }

    pub(crate) fn bind(mut self, binding: &'static str) -> Hook {
        self.binding = Some(binding);
        self
    }

    pub(crate) fn policy(mut self, policy: &'static str) -> Hook {
        self.policy = Some(policy);
        self
    }

    pub(crate) fn mode(mut self, mode: &'static str) -> Hook {
        self.mode = Some(mode);
        self
    }

    pub(crate) fn scope(mut self, scope: &str) -> Hook {
        self.scope = Some(scope.to_string());
        self
    }

    pub(crate) fn deadline(mut self, secs: u64) -> Hook {
        self.deadline = Some(secs);
        self
    }

    pub(crate) fn yaml(&self) -> String {
        let source = guest(self.wasm);
        let mut y = format!(
            "  - name: {}\n    runtime: hook\n    source: {}\n",
            self.name,
            json!(source.to_str().unwrap())
        );
        for (key, value) in [
            ("binding", self.binding),
            ("execution_mode", self.mode),
            ("commit_policy", self.policy),
        ] {
            if let Some(value) = value {
                y.push_str(&format!("    {key}: {value}\n"));
            }
        }
        if self.scope.is_some() || self.deadline.is_some() {
            y.push_str("    capabilities:\n");
        }
        if let Some(scope) = &self.scope {
            y.push_str(&format!("      filesystem:\n        scope: {scope}\n"));
        }
        if let Some(secs) = self.deadline {
            y.push_str(&format!(
                "      limits:\n        deadline_seconds: {secs}\n"
            ));
        }
        y
    }
}

/// A capsule manifest: its inference section, optional network allow list, other
/// top-level sections and artifacts. Shell binaries `echo` and `bash` are allowed.
pub(crate) struct Yaml {
    inference: String,
    network: Option<String>,
    sections: String,
    artifacts: Vec<String>,
}

impl Yaml {
    pub(crate) fn scripted() -> Yaml {
        Yaml {
            inference: "  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\n"
                .into(),
            network: None,
            sections: String::new(),
            artifacts: Vec::new(),
        }
    }

    /// The built-in `openai` driver against the mock, unstreamed, no retries.
    pub(crate) fn openai(mock: &MockModel) -> Yaml {
        Yaml {
            inference: format!(
                "  driver: openai\n  endpoint: {}/v1\n  model: test-model\n  api_key: ${{MOCK_API_KEY}}\n  stream: false\n  max_tokens: 256\n  retry: {{max_attempts: 1, initial_backoff_ms: 10, max_backoff_ms: 10}}\n  timeouts: {{connect_secs: 5, read_secs: 20}}\n",
                mock.origin()
            ),
            network: Some(mock.origin()),
            sections: String::new(),
            artifacts: Vec::new(),
        }
    }

    /// Lines under `inference:` (indented two spaces).
    /// Under `inference.transport: process`, a stand-in harness of
    /// `tests/fixtures/harness` run by the built-in `claude-code` driver.
    pub(crate) fn harness(script: &str) -> Yaml {
        let command = crate::common::repo()
            .join("tests/fixtures/harness")
            .join(script);
        Yaml {
            inference: format!(
                "  transport: process\n  driver: claude-code\n  command: {}\n",
                command.display()
            ),
            network: None,
            sections: String::new(),
            artifacts: Vec::new(),
        }
    }

    pub(crate) fn inference(mut self, lines: &str) -> Yaml {
        self.inference.push_str(lines);
        self
    }

    /// Top-level sections (`context:`, `lifecycle:`).
    pub(crate) fn section(mut self, text: &str) -> Yaml {
        self.sections.push_str(text);
        self
    }

    pub(crate) fn hook(mut self, hook: Hook) -> Yaml {
        self.artifacts.push(hook.yaml());
        self
    }

    pub(crate) fn wordcount(mut self) -> Yaml {
        self.artifacts.push(format!(
            "  - name: wordcount\n    runtime: tool\n    source: {}\n",
            json!(guest(MUR_TOOL_WORDCOUNT).to_str().unwrap())
        ));
        self
    }

    pub(crate) fn build(&self) -> String {
        let mut m = format!(
            "name: hooks\nversion: \"0.1.0\"\ninference:\n{}capabilities:\n  shell:\n    allow: [echo, bash]\n",
            self.inference
        );
        if let Some(origin) = &self.network {
            m.push_str(&format!("  network:\n    allow:\n      - {origin}\n"));
        }
        m.push_str(&self.sections);
        if !self.artifacts.is_empty() {
            m.push_str("artifacts:\n");
            for a in &self.artifacts {
                m.push_str(a);
            }
        }
        m
    }
}

// ---------------------------------------------------------------------------------
// Running capsules and reading what they leave.

/// A capsule directory and the workdir it runs in.
pub(crate) struct Cap {
    capsule: Capsule,
    wd: PathBuf,
    /// `--records`: the host's records, hook scopes among them.
    records: PathBuf,
}

impl Cap {
    pub(crate) fn new(name: &str, yaml: &Yaml, script: &str) -> Cap {
        let capsule = Capsule::new(name, &yaml.build(), script);
        let wd = capsule.dir.join("wd");
        let records = capsule.dir.join("records");
        Cap {
            capsule,
            wd,
            records,
        }
    }

    /// A file in a hook's scope folder, written before the run.
    pub(crate) fn scope_file(&self, scope: &str, file: &str, text: &str) -> &Cap {
        let dir = self.records.join("hooks").join(scope);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(file), text).unwrap();
        self
    }

    /// The recorder's answers (`script.json` in its scope).
    pub(crate) fn answers(&self, scope: &str, script: Value) -> &Cap {
        self.scope_file(scope, "script.json", &script.to_string())
    }

    pub(crate) fn start(&self, args: &[&str]) -> Live {
        let mut all = vec![
            "--workdir",
            self.wd.to_str().unwrap(),
            "--records",
            self.records.to_str().unwrap(),
        ];
        all.extend_from_slice(args);
        let running = self.capsule.spawn_env(&all, ENV);
        let id = running.launch["session_id"].as_str().unwrap().to_string();
        assert_eq!(
            running.launch["workdir"].as_str(),
            self.wd.to_str(),
            "the capsule sees the chosen workdir"
        );
        Live {
            running,
            place: Place::new(&self.wd, &self.records, &id),
        }
    }

    /// A launch task, run to the end.
    pub(crate) fn run_task(&self, task: &str) -> Done {
        self.start(&["--task", task]).finish()
    }
}

/// Where a session's files are.
pub(crate) struct Place {
    wd: PathBuf,
    hooks: PathBuf,
    pub(crate) session: Session,
}

impl Place {
    pub(crate) fn new(wd: &Path, records: &Path, id: &str) -> Place {
        Place {
            wd: wd.to_path_buf(),
            hooks: records.join("hooks"),
            session: Session {
                id: id.to_string(),
                workdir: wd.to_path_buf(),
                records: records.join(id),
            },
        }
    }

    /// The trace, once the process has exited: strict (see `common::json_lines`).
    pub(crate) fn trace(&self) -> Vec<Value> {
        self.session.trace()
    }

    /// The trace lines of one kind.
    pub(crate) fn lines(&self, kind: &str) -> Vec<Value> {
        self.trace()
            .into_iter()
            .filter(|e| e["event_type"] == kind)
            .collect()
    }

    pub(crate) fn kinds(&self) -> Vec<String> {
        self.trace()
            .iter()
            .map(|e| e["event_type"].as_str().unwrap().to_string())
            .collect()
    }

    pub(crate) fn one(&self, kind: &str) -> Value {
        let lines = self.lines(kind);
        assert_eq!(lines.len(), 1, "one {kind} line: {:#?}", self.kinds());
        lines.into_iter().next().unwrap()
    }

    pub(crate) fn result(&self) -> String {
        self.session.read("out/result.txt")
    }

    pub(crate) fn task_md(&self) -> String {
        std::fs::read_to_string(self.wd.join("task.md")).unwrap()
    }

    pub(crate) fn log(&self, name: &str) -> String {
        log_file(&self.session.records.join("logs").join(name))
    }

    pub(crate) fn bootstrap(&self) -> String {
        self.log("bootstrap.log")
    }

    /// What the recorder with this scope was called with, in order.
    pub(crate) fn events(&self, scope: &str) -> Vec<Value> {
        json_lines(&self.hooks.join(scope).join("events.jsonl"))
    }

    /// A trace line written while the capsule runs, waited for with a bound.
    pub(crate) fn wait_for(&self, what: &str, pick: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + WAIT;
        loop {
            let trace = self.session.trace_so_far();
            if pick(&trace) {
                return trace;
            }
            assert!(Instant::now() < deadline, "never saw {what}: {trace:#?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A capsule running in the background.
pub(crate) struct Live {
    running: Running,
    place: Place,
}

impl Live {
    pub(crate) fn address(&self) -> String {
        self.running.address.clone()
    }

    /// Waits for the capsule to exit; every line of its trace must fit the reference
    /// schema (`trace_schema`), whatever the test goes on to check.
    pub(crate) fn finish(self) -> Done {
        let run = self.running.wait(WAIT);
        crate::trace_schema::assert_schema(&self.place.session.records.join("trace.jsonl"));
        Done {
            run,
            place: self.place,
        }
    }
}

/// A capsule that has exited.
pub(crate) struct Done {
    pub(crate) run: Run,
    place: Place,
}

impl std::ops::Deref for Done {
    type Target = Place;
    fn deref(&self) -> &Place {
        &self.place
    }
}

impl std::ops::Deref for Live {
    type Target = Place;
    fn deref(&self) -> &Place {
        &self.place
    }
}

impl Done {
    pub(crate) fn assert_ok(&self) -> &Done {
        assert_eq!(
            self.run.status,
            0,
            "mur failed; result: {:?}\nstderr:\n{}",
            std::fs::read_to_string(self.session.workdir.join("out/result.txt")),
            self.run.stderr
        );
        self
    }

    /// Exit 1 with the task-did-not-complete error naming this exit status.
    pub(crate) fn assert_incomplete(&self, exit_status: &str) -> &Done {
        assert_eq!(self.run.status, 1, "stderr:\n{}", self.run.stderr);
        let want = format!("error[E-RUN-040]: the task did not complete: {exit_status} (");
        assert!(self.run.stderr.contains(&want), "{}", self.run.stderr);
        self
    }
}

/// Only these keys of a trace line (or event), for exact comparisons.
pub(crate) fn pick(line: &Value, keys: &[&str]) -> Value {
    let mut out = serde_json::Map::new();
    for key in keys {
        out.insert(
            key.to_string(),
            line.get(*key).cloned().unwrap_or(Value::Null),
        );
    }
    Value::Object(out)
}

/// An event's kind, with `(decision)`/`(observation)` for a call event.
pub(crate) fn event_label(e: &Value) -> String {
    let kind = e["event"].as_str().unwrap();
    match kind {
        "tool-call" | "shell" if e["outcome"].is_null() => format!("{kind}(decision)"),
        "tool-call" | "shell" => format!("{kind}(observation)"),
        _ => kind.to_string(),
    }
}

pub(crate) fn event_labels(events: &[Value]) -> Vec<String> {
    events.iter().map(event_label).collect()
}

pub(crate) fn of_kind(events: &[Value], kind: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["event"] == kind)
        .cloned()
        .collect()
}

// ---------------------------------------------------------------------------------
// The wire: the tests' event-stream reader (`common::sse_frames`).

pub(crate) fn block(id: u64, event: &str, data: &Value) -> String {
    format!("id: {id}\nevent: {event}\ndata: {data}")
}

/// A task submitted with `message/stream`.
pub(crate) fn send(address: &str, message_id: &str, text: &str) -> Sse {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "message/stream",
        "params": {"message": {"messageId": message_id, "role": "user", "parts": [{"text": text}]}}
    });
    open(address, &body.to_string())
}

/// A `stream/watch` connection, its `connection-ack` read.
fn watch(address: &str) -> Sse {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "stream/watch", "params": {}});
    let mut sse = open(address, &body.to_string());
    let ack = sse.frame(WAIT);
    assert_eq!(ack.event, "connection-ack");
    sse
}

/// A JSON `POST /` read as an event stream, its head checked.
fn open(address: &str, body: &str) -> Sse {
    let opened = Instant::now();
    Sse::open(post(address, &[JSON_CT], body), opened, WAIT)
}

/// `murmur/stop`: a sleeping capsule ends cleanly.
fn stop(address: &str) {
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "murmur/stop", "params": {}});
    let reply = read_to_close(post(address, &[JSON_CT], &body.to_string()));
    assert!(reply.contains("\"stopped\""), "{reply}");
}

pub(crate) fn status(task: &str, context: &str, state: &str, message: &str, fin: bool) -> Value {
    json!({"id": task, "context_id": context, "status": {"state": state, "message": message}, "final": fin})
}

pub(crate) fn completed(task: &str, context: &str, response: &str) -> Value {
    json!({"id": task, "context_id": context, "status": {"state": "completed", "message": "session ended", "response": response}, "final": true})
}

// ---------------------------------------------------------------------------------
// What the model was sent (the mock's recorded requests).

pub(crate) fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The request's conversation without the system prompt: `(role, text)` each.
fn conversation(mock: &MockModel, i: usize) -> Vec<(String, String)> {
    let body = mock.request(i).json();
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_string(),
                text_of(&m["content"]),
            )
        })
        .collect()
}

fn said(role: &str, text: &str) -> (String, String) {
    (role.to_string(), text.to_string())
}

pub(crate) fn answer(text: &str) -> Reply {
    Reply::json(200, openai::completion(Some(text), &[], "stop", (20, 5)))
}

pub(crate) fn calls(id: &str, name: &str, arguments: &str, usage: (u64, u64)) -> Reply {
    let call = openai::tool_call(id, name, arguments);
    Reply::json(200, openai::completion(None, &[call], "tool_calls", usage))
}

// ---------------------------------------------------------------------------------
// Seeds: messages of an exact size as the host counts it (their wire form, 4 bytes a
// token, rounded up).

fn wire_len(role: &str, content: &str) -> usize {
    json!({"role": role, "content": [{"type": "text", "text": content}]})
        .to_string()
        .len()
}

/// A user message of exactly `tokens` tokens, its content starting with `label`.
fn sized(label: &str, tokens: usize) -> Value {
    let bare = wire_len("user", label);
    assert!(
        4 * tokens > bare,
        "{tokens} tokens is too small for {label}"
    );
    let content = format!("{label}{}", "x".repeat(4 * tokens - bare));
    assert_eq!(wire_len("user", &content).div_ceil(4), tokens);
    json!({"role": "user", "content": content})
}

fn content(m: &Value) -> String {
    m["content"].as_str().unwrap().to_string()
}

// =================================================================================
// Bindings.

/// Seed diagram order: session-start once per launch; per task task-start, then per
/// turn inference and the call pairs (decision before, observation after), then
/// task-end; session-end once at teardown. `on-stage` only for a hook bound to it, and
/// exactly once.
#[test]
pub(crate) fn every_binding_fires_once_per_point_in_the_seed_diagram_order() {
    let yaml = Yaml::scripted()
        .wordcount()
        .hook(Hook::recorder("rec"))
        .hook(Hook::recorder("stager").bind("on-stage"));
    let script = r#"
turns:
  - tool_calls: [{id: c1, name: echo, input: {command: "hi"}}]
  - tool_calls: [{id: c2, name: wordcount, input: {path: task.md}}]
  - text: first done
  - text: second done
"#;
    let cap = Cap::new("order", &yaml, script);
    let live = cap.start(QUEUE);
    let a = live.address();
    let first = send(&a, "m1", "first task").rest(WAIT);
    assert_eq!(first.last().unwrap().label().1, "status:completed");
    let second = send(&a, "m2", "second task").rest(WAIT);
    assert_eq!(second.last().unwrap().label(), l(1, "status:completed"));
    stop(&a);
    let done = live.finish();
    done.assert_ok();

    let events = done.events("rec");
    assert_eq!(
        event_labels(&events),
        [
            "session-start",
            "task-start",
            "inference",
            "shell(decision)",
            "shell(observation)",
            "inference",
            "tool-call(decision)",
            "tool-call(observation)",
            "inference",
            "task-end",
            "task-start",
            "inference",
            "task-end",
            "session-end",
        ]
    );
    let starts = done.lines("task_start");
    let (t1, t2) = (&starts[0]["task_id"], &starts[1]["task_id"]);
    assert_eq!(
        pick(
            &events[0],
            &["capsule_name", "capsule_version", "session_id", "model"]
        ),
        json!({"capsule_name": "hooks", "capsule_version": "0.1.0", "session_id": done.session.id, "model": "scripted-test"})
    );
    assert_eq!(
        events[1],
        json!({"event": "task-start", "task_id": t1, "context_id": starts[0]["context_id"],
               "source": "a2a", "origin": "event", "text": "first task", "input_bytes": 10,
               "budget_tokens": 0, "context_window": 0, "prior_tokens": 0})
    );
    assert_eq!(
        pick(&events[2], &["turn", "decision", "tool_name", "output"]),
        json!({"turn": 0, "decision": "tool_call", "tool_name": "echo", "output": ""})
    );
    let binary = events[3]["binary"].as_str().unwrap();
    assert!(
        binary.starts_with('/') && binary.ends_with("/echo"),
        "{binary}"
    );
    assert_eq!(
        events[3],
        json!({"event": "shell", "turn": 0, "binary": binary, "command": "hi", "outcome": null})
    );
    assert_eq!(
        pick(
            &events[4]["outcome"],
            &["exit_code", "stdout_bytes", "stderr_bytes"]
        ),
        json!({"exit_code": 0, "stdout_bytes": 3, "stderr_bytes": 0})
    );
    assert_eq!(events[4]["binary"], json!(binary));
    assert_eq!(
        events[6],
        json!({"event": "tool-call", "turn": 1, "tool_name": "wordcount", "input": "{\"path\":\"task.md\"}", "outcome": null})
    );
    assert_eq!(events[7]["outcome"]["status"], "ok");
    assert_eq!(
        pick(&events[8], &["turn", "decision", "tool_name", "output"]),
        json!({"turn": 2, "decision": "end_turn", "tool_name": null, "output": "first done"})
    );
    assert_eq!(
        events[9],
        json!({"event": "task-end", "task_id": t1, "exit_status": "ok", "result": "first done", "attempt": 1})
    );
    assert_eq!(events[10]["task_id"], *t2);
    assert_eq!(events[10]["text"], "second task");
    assert_eq!(events[11]["turn"], 0, "turns count per task");
    assert_eq!(
        events[12],
        json!({"event": "task-end", "task_id": t2, "exit_status": "ok", "result": "second done", "attempt": 1})
    );
    assert_eq!(
        pick(
            &events[13],
            &[
                "total_turns",
                "total_tool_calls",
                "total_shell_calls",
                "exit_status"
            ]
        ),
        json!({"total_turns": 4, "total_tool_calls": 2, "total_shell_calls": 1, "exit_status": "ok"})
    );

    // The on-stage hook heard its one event and nothing else.
    assert_eq!(
        done.events("stager"),
        [json!({"event": "stage", "shell_allow": ["echo", "bash"]})]
    );
    assert!(done.lines("hook_dispatch_error").is_empty());
}

/// `on-stage` + `write-manifests`: `tools/<binary>/murmur.yaml` for an allowed binary;
/// one the capsule does not allow is skipped with a `bootstrap.log` line.
#[test]
fn on_stage_writes_manifests_only_for_allowed_binaries() {
    let yaml = Yaml::scripted().hook(
        Hook::recorder("stager")
            .bind("on-stage")
            .policy("write-manifests"),
    );
    let cap = Cap::new("stage", &yaml, "turns:\n  - text: staged\n");
    cap.answers(
        "stager",
        json!({"stage": [{"manifests": [
            {"binary_name": "echo", "content": "name: echo\ndescription: prints\n"},
            {"binary_name": "curl", "content": "name: curl\n"},
        ]}]}),
    );
    let done = cap.run_task("go");
    done.assert_ok();
    let tools = done.session.workdir.join("tools");
    assert_eq!(
        std::fs::read_to_string(tools.join("echo").join("murmur.yaml")).unwrap(),
        "name: echo\ndescription: prints\n"
    );
    assert!(!tools.join("curl").exists());
    let log = done.bootstrap();
    assert!(
        log.contains("hook 'stager' wrote tools/echo/murmur.yaml\n"),
        "{log}"
    );
    assert!(
        log.contains(
            "hook 'stager' wrote a manifest for 'curl', which is not in capabilities.shell.allow; skipped\n"
        ),
        "{log}"
    );
    assert_eq!(done.result(), "staged");
}

// =================================================================================
// Task reopening.

fn gate() -> Hook {
    Hook::recorder("gate")
        .bind("on-task-end")
        .policy("reopen-task")
}

/// One granted reopen: `task_reopened`, `reopen_count: 1`, exit ok; on the wire the
/// first attempt ends `completed`, then a new attempt writes `working` `inference turn
/// 1` with ids from 0 again, to its own `completed`; `message/stream` closes at the
/// first `completed`; `task.md` carries the feedback section.
#[test]
fn a_granted_reopen_runs_a_second_attempt_and_says_so_everywhere() {
    let cap = Cap::new(
        "reopen",
        &Yaml::scripted().hook(gate()),
        "turns:\n  - text: first answer\n  - text: second answer\n",
    );
    cap.answers(
        "gate",
        json!({"task-end": [{"reopen": "Mention the capital.\n"}]}),
    );
    let live = cap.start(&[]);
    let a = live.address();
    let mut w = watch(&a);
    let submitted = send(&a, "m1", "Name a city.").rest(WAIT);
    let watched = w.rest(WAIT);
    let done = live.finish();
    done.assert_ok();

    let t = watched[0].data["id"].as_str().unwrap();
    let c = watched[0].data["context_id"].as_str().unwrap();
    let attempt = |answer: &str| {
        vec![
            block(
                0,
                "status",
                &status(t, c, "working", "inference turn 1", false),
            ),
            block(1, "text", &json!({"id": t, "text": answer, "final": true})),
            block(1, "status", &completed(t, c, answer)),
        ]
    };
    let blocks: Vec<String> = watched.iter().map(|f| f.block.clone()).collect();
    assert_eq!(
        blocks,
        [attempt("first answer"), attempt("second answer")].concat()
    );
    let submitted: Vec<String> = submitted.iter().map(|f| f.block.clone()).collect();
    assert_eq!(
        submitted,
        attempt("first answer"),
        "message/stream closes at the first final status"
    );

    let reopened = done.one("task_reopened");
    assert_eq!(
        pick(&reopened, &["task_id", "hook_name", "reopen_number"]),
        json!({"task_id": t, "hook_name": "gate", "reopen_number": 1})
    );
    assert_eq!(
        reopened["reason"].as_str().unwrap().trim(),
        "Mention the capital."
    );
    assert_eq!(
        pick(
            &done.one("task_end"),
            &["task_id", "exit_status", "turns", "reopen_count"]
        ),
        json!({"task_id": t, "exit_status": "ok", "turns": 2, "reopen_count": 1})
    );
    let turns: Vec<Value> = done
        .lines("inference")
        .iter()
        .map(|i| i["turn"].clone())
        .collect();
    assert_eq!(turns, [json!(0), json!(1)], "turns go on across attempts");
    assert_eq!(done.result(), "second answer");

    // task.md: the task, a rule, the feedback heading, a one-line preamble, then each
    // reopen's trimmed reason under its own heading.
    let md = done.task_md();
    let head = "Name a city.\n\n---\n\n# Reopen feedback\n\n";
    assert!(md.starts_with(head), "{md}");
    let rest = &md[head.len()..];
    let (preamble, reopens) = rest.split_once("\n\n").unwrap();
    assert!(!preamble.contains('\n') && !preamble.is_empty(), "{md}");
    assert_eq!(
        reopens,
        "## Reopen 1 — from hook `gate`\n\nMention the capital.\n"
    );

    let ends: Vec<Value> = of_kind(&done.events("gate"), "task-end");
    assert_eq!(
        ends.iter()
            .map(|e| pick(e, &["exit_status", "result", "attempt"]))
            .collect::<Vec<_>>(),
        [
            json!({"exit_status": "ok", "result": "first answer", "attempt": 1}),
            json!({"exit_status": "ok", "result": "second answer", "attempt": 2}),
        ]
    );
}

/// The second attempt continues the conversation: the model's first answer, then the
/// hook's feedback as one user message.
#[test]
fn reopen_feedback_reaches_the_model_as_one_user_message() {
    let mock = MockModel::with(vec![answer("Lyon"), answer("Paris")]);
    let cap = Cap::new("reopen-request", &Yaml::openai(&mock).hook(gate()), "");
    cap.answers(
        "gate",
        json!({"task-end": [{"reopen": "Name the capital instead."}]}),
    );
    let done = cap.run_task("Name a French city.");
    done.assert_ok();
    assert_eq!(done.result(), "Paris");
    assert_eq!(
        conversation(&mock, 0),
        [said("user", "Name a French city.")]
    );
    let second = conversation(&mock, 1);
    assert_eq!(second.len(), 3, "{second:#?}");
    assert_eq!(
        second[..2],
        [
            said("user", "Name a French city."),
            said("assistant", "Lyon")
        ]
    );
    assert_eq!(second[2].0, "user");
    assert!(
        second[2].1.contains("Name the capital instead."),
        "{second:#?}"
    );
    assert_eq!(mock.unused(), 0);
}

/// `max_task_reopens: 0` disables reopening: a hook that asks ends the task
/// `reopen_budget_exhausted`, A2A `failed` naming the limit, `error: …` result, exit 1.
#[test]
fn reopening_disabled_fails_the_task_when_a_hook_asks() {
    let yaml = Yaml::scripted()
        .hook(gate())
        .section("lifecycle:\n  max_task_reopens: 0\n");
    let cap = Cap::new("no-reopen", &yaml, "turns:\n  - text: only answer\n");
    cap.answers("gate", json!({"task-end": [{"reopen": "Try again."}]}));
    let live = cap.start(&[]);
    let frames = send(&live.address(), "m1", "do it").rest(WAIT);
    let done = live.finish();
    done.assert_incomplete("reopen_budget_exhausted");

    assert_eq!(
        labels(&frames),
        [l(0, "status:working"), l(1, "status:failed")]
    );
    let failed = &frames[1].data;
    let message = failed["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("task reopen budget exhausted after 0 reopen(s)"),
        "{message}"
    );
    assert_eq!(failed["final"], true);
    assert!(failed["status"].get("response").is_none(), "{failed}");
    assert_eq!(done.result(), format!("error: {message}"));
    assert!(done.lines("task_reopened").is_empty());
    assert_eq!(
        pick(&done.one("task_end"), &["exit_status", "reopen_count"]),
        json!({"exit_status": "reopen_budget_exhausted", "reopen_count": 0})
    );
}

/// The default budget is one reopen: a hook that always asks gets one, then the task
/// ends `reopen_budget_exhausted` with `reopen_count: 1`.
#[test]
fn the_default_budget_is_one_reopen() {
    let cap = Cap::new(
        "budget",
        &Yaml::scripted().hook(gate()),
        "turns:\n  - text: a1\n  - text: a2\n",
    );
    cap.answers(
        "gate",
        json!({"task-end": [{"reopen": "no"}, {"reopen": "still no"}]}),
    );
    let done = cap.run_task("try");
    done.assert_incomplete("reopen_budget_exhausted");
    let reopened = done.one("task_reopened");
    assert_eq!(
        pick(&reopened, &["hook_name", "reason", "reopen_number"]),
        json!({"hook_name": "gate", "reason": "no", "reopen_number": 1})
    );
    assert_eq!(
        pick(
            &done.one("task_end"),
            &["exit_status", "turns", "reopen_count"]
        ),
        json!({"exit_status": "reopen_budget_exhausted", "turns": 2, "reopen_count": 1})
    );
    assert!(
        done.result()
            .starts_with("error: task reopen budget exhausted after 1 reopen(s)"),
        "{}",
        done.result()
    );
    let attempts: Vec<Value> = of_kind(&done.events("gate"), "task-end")
        .iter()
        .map(|e| e["attempt"].clone())
        .collect();
    assert_eq!(attempts, [json!(1), json!(2)]);
}

/// Every attempt shares `inference.max_turns`: a first attempt that used them all
/// cannot be reopened (`task turn budget exhausted …`); a reopened attempt that runs out
/// ends `max_turns_reached` counting every attempt's turns.
#[test]
fn attempts_share_the_turn_budget() {
    let yaml = Yaml::scripted().hook(gate()).inference("  max_turns: 2\n");
    let script = r#"
turns:
  - tool_calls: [{id: c1, name: echo, input: {command: "one"}}]
  - text: done
"#;
    let cap = Cap::new("turns", &yaml, script);
    cap.answers("gate", json!({"task-end": [{"reopen": "more"}]}));
    let done = cap.run_task("go");
    done.assert_incomplete("reopen_budget_exhausted");
    assert!(done.lines("task_reopened").is_empty());
    assert!(
        done.result()
            .starts_with("error: task turn budget exhausted"),
        "{}",
        done.result()
    );
    assert_eq!(
        pick(
            &done.one("task_end"),
            &["exit_status", "turns", "reopen_count"]
        ),
        json!({"exit_status": "reopen_budget_exhausted", "turns": 2, "reopen_count": 0})
    );

    // Three turns: two for the first attempt, one left for the second.
    let yaml = Yaml::scripted().hook(gate()).inference("  max_turns: 3\n");
    let script = r#"
turns:
  - tool_calls: [{id: c1, name: echo, input: {command: "one"}}]
  - text: done
  - tool_calls: [{id: c2, name: echo, input: {command: "two"}}]
  - text: never played
"#;
    let cap = Cap::new("turns-shared", &yaml, script);
    cap.answers("gate", json!({"task-end": [{"reopen": "more"}, "none"]}));
    let done = cap.run_task("go");
    done.assert_incomplete("max_turns_reached");
    assert_eq!(done.one("task_reopened")["turns_remaining"], 1);
    assert_eq!(
        pick(
            &done.one("task_end"),
            &["exit_status", "turns", "reopen_count"]
        ),
        json!({"exit_status": "max_turns_reached", "turns": 3, "reopen_count": 1})
    );
    assert_eq!(
        done.result(),
        "error: max_turns exceeded: the task used all 3 inference turns"
    );
}

/// Under `task_acceptance: queue` each task starts with its whole reopen budget.
#[test]
fn each_queued_task_starts_at_zero_reopens() {
    let script = "turns:\n  - text: a1\n  - text: a2\n  - text: b1\n  - text: b2\n";
    let cap = Cap::new("queue-reopen", &Yaml::scripted().hook(gate()), script);
    cap.answers(
        "gate",
        json!({"task-end": [{"reopen": "r1"}, "none", {"reopen": "r2"}, "none"]}),
    );
    let live = cap.start(QUEUE);
    let a = live.address();
    send(&a, "m1", "first").rest(WAIT);
    live.wait_for("the first task's end", |t| {
        t.iter().any(|e| e["event_type"] == "task_end")
    });
    send(&a, "m2", "second").rest(WAIT);
    live.wait_for("the second task's end", |t| {
        t.iter().filter(|e| e["event_type"] == "task_end").count() == 2
    });
    stop(&a);
    let done = live.finish();
    done.assert_ok();
    let ends = done.lines("task_end");
    let reopens = done.lines("task_reopened");
    assert_eq!(reopens.len(), 2);
    for (i, reason) in ["r1", "r2"].iter().enumerate() {
        assert_eq!(
            pick(&reopens[i], &["task_id", "reason", "reopen_number"]),
            json!({"task_id": ends[i]["task_id"], "reason": reason, "reopen_number": 1})
        );
        assert_eq!(
            pick(&ends[i], &["exit_status", "turns", "reopen_count"]),
            json!({"exit_status": "ok", "turns": 2, "reopen_count": 1})
        );
    }
    assert_ne!(ends[0]["task_id"], ends[1]["task_id"]);
}

// =================================================================================
// Policy hooks.

/// A `deny` hook refuses a shell call before it runs: the model gets the refusal text,
/// there is no `artifact` frame, no `tool_call`/`shell` line, no observation; a
/// `call_denied` line names the resolved binary. A call the hook lets through runs,
/// and a `deny` at its observation is a fault that refuses nothing.
#[test]
fn a_policy_hook_refuses_a_shell_call_before_it_runs() {
    let yaml = Yaml::scripted()
        .hook(Hook::recorder("deny").bind("on-shell").policy("deny"))
        .hook(Hook::recorder("seen").bind("on-inference"));
    let script = r#"
turns:
  - tool_calls: [{id: c1, name: echo, input: {command: "one"}}]
  - text: "{{last_tool_result}}"
    tool_calls: [{id: c2, name: echo, input: {command: "two"}}]
  - text: "{{last_tool_result}}"
"#;
    let cap = Cap::new("deny-shell", &yaml, script);
    cap.answers(
        "deny",
        json!({"shell": [{"deny": "no echoing today"}, "none", {"deny": "too late"}]}),
    );
    let live = cap.start(&[]);
    let frames = send(&live.address(), "m1", "echo things").rest(WAIT);
    let done = live.finish();
    done.assert_ok();

    assert_eq!(
        labels(&frames),
        [
            l(0, "status:working"),
            l(1, "status:working"),
            l(2, "artifact"),
            l(3, "status:working"),
            l(4, "text:final"),
            l(4, "status:completed"),
        ],
        "no frame for the refused call"
    );
    assert_eq!(frames[2].data["artifact"]["tool_call_id"], "c2");

    // What the model received for the refused call, exactly.
    let seen = done.events("seen");
    assert_eq!(seen[1]["output"], refusal("deny", "no echoing today"));
    assert_eq!(
        done.result(),
        "<untrusted-content source=tool:echo>\n$ echo two\nExit code: 0\nStdout:\ntwo\n\nStderr:\n\n</untrusted-content>"
    );

    let asked = done.events("deny");
    assert_eq!(
        event_labels(&asked),
        ["shell(decision)", "shell(decision)", "shell(observation)"],
        "no observation of a refused call"
    );
    assert_eq!(asked[0]["command"], "one");
    let binary = asked[0]["binary"].as_str().unwrap();
    assert!(
        binary.starts_with('/') && binary.ends_with("/echo"),
        "{binary}"
    );
    assert_eq!(
        pick(
            &done.one("call_denied"),
            &["turn", "event", "hook_name", "target", "reason"]
        ),
        json!({"turn": 0, "event": "on-shell", "hook_name": "deny", "target": binary, "reason": "no echoing today"})
    );
    let calls = done.lines("tool_call");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["tool_call_id"], "c2");
    assert_eq!(done.lines("shell").len(), 1);
    assert_eq!(
        pick(
            &done.one("hook_dispatch_error"),
            &["hook_name", "event", "arm"]
        ),
        json!({"hook_name": "deny", "event": "on-shell", "arm": "deny"})
    );
    assert_eq!(
        pick(&done.one("task_end"), &["tool_calls", "shell_calls"]),
        json!({"tool_calls": 1, "shell_calls": 1})
    );
}

/// Fail-closed: only a clean `none` lets a call through. An error, `deny("")`, another
/// arm, a spin past the deadline and a trap all refuse, each with its message; of two
/// refusals the first in declaration order wins.
#[test]
fn a_policy_hook_fails_closed() {
    let yaml = Yaml::scripted()
        .wordcount()
        .hook(Hook::recorder("p1").bind("on-tool-call").policy("deny"))
        .hook(
            Hook::recorder("p2")
                .bind("on-tool-call")
                .policy("deny")
                .deadline(1),
        )
        .hook(Hook::recorder("seen").bind("on-inference"));
    let mut script = String::from("turns:\n");
    for i in 1..=5 {
        script.push_str(&format!(
            "  - text: \"{{{{last_tool_result}}}}\"\n    tool_calls: [{{id: w{i}, name: wordcount, input: {{path: task.md}}}}]\n"
        ));
    }
    script.push_str("  - text: \"{{last_tool_result}}\"\n");
    let cap = Cap::new("fail-closed", &yaml, &script);
    cap.answers(
        "p1",
        json!({"tool-call": [{"error": "policy db down"}, {"deny": ""}, {"reopen": "x"}, "none", "trap"]}),
    );
    // p2 refuses the first call too, but p1 is declared first and its refusal wins.
    cap.answers(
        "p2",
        json!({"tool-call": [{"deny": "p2 also"}, "none", "none", "spin"]}),
    );
    let started = Instant::now();
    let done = cap.run_task("count");
    done.assert_ok();
    assert!(started.elapsed() < Duration::from_secs(30));

    let denied = done.lines("call_denied");
    let who: Vec<(Value, Value)> = denied
        .iter()
        .map(|d| (d["hook_name"].clone(), d["turn"].clone()))
        .collect();
    assert_eq!(
        who,
        [
            (json!("p1"), json!(0)),
            (json!("p1"), json!(1)),
            (json!("p1"), json!(2)),
            (json!("p2"), json!(3)),
            (json!("p1"), json!(4)),
        ]
    );
    let reasons: Vec<&str> = denied
        .iter()
        .map(|d| d["reason"].as_str().unwrap())
        .collect();
    // Each refusal says why, exactly: `deny("")` gets the host's reason, and the spin
    // was stopped at p2's 1 s deadline.
    assert_eq!(
        reasons,
        [
            "the policy hook failed: policy db down",
            "refused by policy",
            "the policy hook answered reopen-task, which is not a decision",
            "the policy hook failed: timed out: deadline exceeded: the component ran for more than 1 s without returning",
            "the policy hook failed: trapped: wasm trap: wasm `unreachable` instruction executed",
        ]
    );
    for d in &denied {
        assert_eq!(d["event"], "on-tool-call");
        assert_eq!(d["target"], "wordcount");
    }
    assert!(done.lines("tool_call").is_empty(), "nothing ran");

    // The model got each refusal, naming the hook that refused.
    let seen = done.events("seen");
    for (i, d) in denied.iter().enumerate() {
        assert_eq!(
            seen[i + 1]["output"],
            refusal(
                d["hook_name"].as_str().unwrap(),
                d["reason"].as_str().unwrap()
            )
        );
    }
    assert_eq!(
        done.result(),
        refusal("p1", reasons[4]),
        "the last refusal is the last tool result"
    );
    assert_eq!(
        done.log("hook-p1.log"),
        "on-tool-call: policy db down\non-tool-call: trapped: wasm trap: wasm `unreachable` instruction executed\n"
    );
}

/// "Any other arm refuses (fault logged)": the refusal comes with a fault record.
#[test]
fn a_policy_hook_answering_another_arm_is_a_recorded_fault() {
    let yaml = Yaml::scripted()
        .wordcount()
        .hook(Hook::recorder("p1").bind("on-tool-call").policy("deny"));
    let script = r#"
turns:
  - tool_calls: [{id: w1, name: wordcount, input: {path: task.md}}]
  - text: "{{last_tool_result}}"
"#;
    let cap = Cap::new("deny-fault", &yaml, script);
    cap.answers("p1", json!({"tool-call": [{"reopen": "x"}]}));
    let done = cap.run_task("count");
    done.assert_ok();
    assert_eq!(done.one("call_denied")["hook_name"], "p1");
    assert_eq!(
        pick(
            &done.one("hook_dispatch_error"),
            &["hook_name", "event", "arm"]
        ),
        json!({"hook_name": "p1", "event": "on-tool-call", "arm": "reopen-task"})
    );
    let log = done.bootstrap();
    assert!(
        log.contains("hook 'p1' answered reopen-task at on-tool-call"),
        "{log}"
    );
}

/// trace.md: `session_end.exit_status` is one of `ok`, `failed`, `max_turns_reached`,
/// `canceled`, `deadline_reached`; a task that ended `reopen_budget_exhausted` is a
/// failed session, and the `on-session-end` hook hears the same.
#[test]
fn session_end_status_stays_in_its_value_set_after_an_exhausted_reopen() {
    let yaml = Yaml::scripted()
        .hook(gate())
        .hook(Hook::recorder("ender").bind("on-session-end"))
        .section("lifecycle:\n  max_task_reopens: 0\n");
    let cap = Cap::new("session-status", &yaml, "turns:\n  - text: only answer\n");
    cap.answers("gate", json!({"task-end": [{"reopen": "Try again."}]}));
    let done = cap.run_task("go");
    done.assert_incomplete("reopen_budget_exhausted");
    assert_eq!(
        done.one("task_end")["exit_status"],
        "reopen_budget_exhausted"
    );
    assert_eq!(done.one("session_end")["exit_status"], "failed");
    assert_eq!(done.events("ender")[0]["exit_status"], "failed");
}

// =================================================================================
// Hook artifacts.

/// An `on-inference` hook's `artifact` becomes one `artifact` frame before `completed`,
/// with every key a hook artifact has.
#[test]
fn a_hook_artifact_is_one_frame_before_completed() {
    let yaml = Yaml::scripted().hook(Hook::recorder("rev").bind("on-inference"));
    let cap = Cap::new("artifact", &yaml, "turns:\n  - text: Hello\n");
    cap.answers(
        "rev",
        json!({"inference": [{"artifact": {"reviewed": true}}]}),
    );
    let live = cap.start(&[]);
    let frames = send(&live.address(), "m1", "greet").rest(WAIT);
    let done = live.finish();
    done.assert_ok();
    let t = frames[0].data["id"].as_str().unwrap();
    let c = frames[0].data["context_id"].as_str().unwrap();
    let blocks: Vec<String> = frames.iter().map(|f| f.block.clone()).collect();
    assert_eq!(
        blocks,
        [
            block(
                0,
                "status",
                &status(t, c, "working", "inference turn 1", false)
            ),
            format!(
                "id: 1\nevent: artifact\ndata: {{\"id\":\"{t}\",\"artifact\":{{\"tool_name\":\"rev\",\"content\":\"{{\\\"reviewed\\\":true}}\",\"fence_source\":null,\"tool_call_id\":null,\"is_error\":false,\"duration_ms\":null,\"exit_code\":null,\"truncated\":false}}}}"
            ),
            block(1, "text", &json!({"id": t, "text": "Hello", "final": true})),
            block(2, "status", &completed(t, c, "Hello")),
        ]
    );
}

// =================================================================================
// Context seeding.

fn seeder() -> Hook {
    Hook::recorder("seeder")
        .bind("on-task-start")
        .policy("seed-context")
}

fn seed_answer(messages: &[Value]) -> Value {
    json!({"seed": messages})
}

/// The seed reaches the loop apart from the history, and the trace claims no more than
/// happened: `context_seed` says what was offered, and the task's first `inference`
/// line says whether its request carried it: the default loop sends it, the one-shot
/// loop (which sends only the task's text) does not. Later turns say nothing.
#[test]
fn the_trace_says_whether_the_first_request_carried_the_seed() {
    let memory = json!({"role": "assistant", "content": "Earlier: the answer was 42."});
    for (name, one_shot) in [("carried", false), ("ignored", true)] {
        let mock = MockModel::with(vec![answer("done")]);
        let yaml = Yaml::openai(&mock)
            .hook(seeder())
            .section("context:\n  max_tokens: 10000\n");
        let cap = Cap::new(&format!("seed-{name}"), &yaml, "");
        cap.answers(
            "seeder",
            json!({"task-start": [seed_answer(std::slice::from_ref(&memory))]}),
        );
        let oneshot = guest(MUR_LOOP_ONESHOT);
        let mut args = vec!["--task", "What was the answer?"];
        if one_shot {
            args.extend(["--loop", oneshot.to_str().unwrap()]);
        }
        let done = cap.start(&args).finish();
        done.assert_ok();
        assert_eq!(done.one("context_seed")["outcome"], "seeded", "{name}");
        let first = &done.lines("inference")[0];
        assert_eq!(first["seed_carried"], json!(!one_shot), "{name}: {first}");
        let sent = mock.request(0).json();
        let carried = sent["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| text_of(&m["content"]) == "Earlier: the answer was 42.");
        assert_eq!(carried, !one_shot, "{name}: {sent}");
    }
}

/// Without a seed, no inference line mentions one.
#[test]
fn without_a_seed_the_inference_line_says_nothing_of_one() {
    let mock = MockModel::with(vec![answer("done")]);
    let cap = Cap::new("no-seed", &Yaml::openai(&mock), "");
    let done = cap.run_task("hi");
    done.assert_ok();
    assert!(done.lines("inference")[0].get("seed_carried").is_none());
}

/// Rows 3 to 7 of the seed's table and "first hook that returns a seed wins", in one
/// queue session against the mock model, so each task's request shows what was
/// committed: `context.max_tokens: 10000`, budget B = 1000, margin 10% (100 tokens).
#[test]
fn seeding_follows_the_table_row_by_row() {
    let mock = MockModel::with((1..=7).map(|i| answer(&format!("ok {i}"))).collect());
    let yaml = Yaml::openai(&mock)
        .hook(seeder())
        .hook(
            Hook::recorder("second")
                .bind("on-task-start")
                .policy("seed-context"),
        )
        .hook(
            Hook::recorder("summarizer")
                .bind("on-compaction")
                .policy("replace-context"),
        )
        .section("context:\n  max_tokens: 10000\n");
    let cap = Cap::new("seeding", &yaml, "");

    let over = sized("over ", 1001);
    let limit: Vec<Value> = (0..5).map(|i| sized(&format!("l{i} "), 900)).collect();
    let fits = [sized("fit a ", 300), sized("fit b ", 300)];
    let margin = [sized("old ", 50), sized("mid ", 500), sized("new ", 500)];
    let big = [
        sized("front ", 600),
        sized("keep1 ", 600),
        sized("keep2 ", 300),
    ];
    let summary = json!({"role": "user", "content": "Summary: the front said hello."});
    let huge_summary = sized("huge ", 1001);
    cap.answers(
        "seeder",
        json!({"task-start": [
            seed_answer(&[over.clone(), sized("small ", 20)]),
            seed_answer(&limit),
            seed_answer(&fits),
            seed_answer(&margin),
            seed_answer(&big),
            "none",
            seed_answer(&big),
        ]}),
    );
    let from_second = json!({"role": "user", "content": "from the second hook"});
    cap.answers(
        "second",
        json!({"task-start": vec![seed_answer(std::slice::from_ref(&from_second)); 7]}),
    );
    cap.answers(
        "summarizer",
        json!({"compaction": [{"replace": [summary]}, {"replace": [huge_summary]}]}),
    );

    let live = cap.start(QUEUE);
    let a = live.address();
    for i in 1..=7 {
        let frames = send(&a, &format!("m{i}"), &format!("task {i}")).rest(WAIT);
        assert_eq!(
            frames.last().unwrap().label().1,
            "status:completed",
            "a seed never fails the task"
        );
    }
    stop(&a);
    let done = live.finish();
    done.assert_ok();

    let seeds = done.lines("context_seed");
    let keys = [
        "hook_name",
        "outcome",
        "reason",
        "tokens",
        "proposed_tokens",
        "budget_tokens",
    ];
    let got: Vec<Value> = seeds.iter().map(|s| pick(s, &keys)).collect();
    let summary_tokens = wire_len("user", "Summary: the front said hello.").div_ceil(4) as u64;
    assert_eq!(
        got,
        [
            json!({"hook_name": "seeder", "outcome": "rejected", "reason": "message_over_budget", "tokens": 0, "proposed_tokens": 1021, "budget_tokens": 1000}),
            json!({"hook_name": "seeder", "outcome": "rejected", "reason": "overflow_over_limit", "tokens": 0, "proposed_tokens": 4500, "budget_tokens": 1000}),
            json!({"hook_name": "seeder", "outcome": "seeded", "reason": null, "tokens": 600, "proposed_tokens": 600, "budget_tokens": 1000}),
            json!({"hook_name": "seeder", "outcome": "trimmed", "reason": null, "tokens": 1000, "proposed_tokens": 1050, "budget_tokens": 1000}),
            json!({"hook_name": "seeder", "outcome": "compacted", "reason": null, "tokens": summary_tokens + 900, "proposed_tokens": 1500, "budget_tokens": 1000}),
            json!({"hook_name": "second", "outcome": "seeded", "reason": null, "tokens": wire_len("user", "from the second hook").div_ceil(4), "proposed_tokens": wire_len("user", "from the second hook").div_ceil(4), "budget_tokens": 1000}),
            json!({"hook_name": "seeder", "outcome": "rejected", "reason": "message_over_budget", "tokens": 0, "proposed_tokens": 1500, "budget_tokens": 1000}),
        ]
    );
    let committed = [0, 0, 2, 2, 3, 1, 0];
    let starts = done.lines("task_start");
    for (i, seed) in seeds.iter().enumerate() {
        assert!(seed.get("reason").is_some() == (seed["outcome"] == "rejected"));
        assert_eq!(seed["task_id"], starts[i]["task_id"]);
        let ids = seed["message_ids"].as_array().unwrap();
        assert_eq!(ids.len(), committed[i], "{seed}");
        assert!(
            ids.iter()
                .all(|id| is_minted(id.as_str().unwrap(), "msg_", 32))
        );
    }
    let log_lines = done
        .bootstrap()
        .lines()
        .filter(|l| l.starts_with("context seed from hook"))
        .map(str::to_string)
        .collect::<Vec<_>>();
    assert_eq!(log_lines.len(), 7, "{log_lines:#?}");
    for (line, seed) in log_lines.iter().zip(&seeds) {
        assert!(line.contains(seed["outcome"].as_str().unwrap()), "{line}");
        if let Some(reason) = seed["reason"].as_str() {
            assert!(line.contains(reason), "{line}");
        }
    }

    // What each task's first (and only) request began with.
    let msg = |m: &Value| said("user", &content(m));
    let task = |i: usize| said("user", &format!("task {i}"));
    assert_eq!(conversation(&mock, 0), [task(1)]);
    assert_eq!(conversation(&mock, 1), [task(2)]);
    assert_eq!(
        conversation(&mock, 2),
        [msg(&fits[0]), msg(&fits[1]), task(3)]
    );
    assert_eq!(
        conversation(&mock, 3),
        [msg(&margin[1]), msg(&margin[2]), task(4)],
        "the oldest dropped"
    );
    assert_eq!(
        conversation(&mock, 4),
        [
            said("user", "Summary: the front said hello."),
            msg(&big[1]),
            msg(&big[2]),
            task(5)
        ],
        "the summary first"
    );
    assert_eq!(conversation(&mock, 5), [msg(&from_second), task(6)]);
    assert_eq!(conversation(&mock, 6), [task(7)]);

    // The hooks' view: the ceiling at task start, the front to summarize.
    let ts = done.events("seeder");
    assert_eq!(
        pick(&ts[0], &["budget_tokens", "context_window", "prior_tokens"]),
        json!({"budget_tokens": 1000, "context_window": 10000, "prior_tokens": 0})
    );
    let summarized = done.events("summarizer");
    assert_eq!(summarized.len(), 2);
    assert_eq!(
        summarized[0]["messages"],
        json!([{"role": "user", "content": content(&big[0])}])
    );
    assert_eq!(summarized[0]["session_tokens"], 600);
}

/// Rows 1, 2 and 8: transport `process` (checked first), no `context.max_tokens`, and
/// over by more than the margin with no compaction hook (trimmed).
#[test]
fn seeding_without_a_budget_a_cli_transport_or_a_summarizer() {
    let seed = [sized("a ", 600), sized("b ", 600), sized("c ", 300)];
    let cases = [
        (
            "process",
            "",
            "rejected",
            Some("unsupported_transport"),
            0,
            0,
        ),
        ("", "", "rejected", Some("no_budget"), 0, 0),
        (
            "",
            "context:\n  max_tokens: 10000\n",
            "trimmed",
            None,
            900,
            1000,
        ),
    ];
    for (inference, section, outcome, reason, tokens, budget) in cases {
        let base = match inference {
            "process" => Yaml::harness("answers-fine.sh"),
            _ => Yaml::scripted(),
        };
        let yaml = base.section(section).hook(seeder());
        let cap = Cap::new("seed-rows", &yaml, "turns:\n  - text: fine\n");
        cap.answers("seeder", json!({"task-start": [seed_answer(&seed)]}));
        let done = cap.run_task("go");
        done.assert_ok();
        assert_eq!(done.result(), "fine");
        let line = done.one("context_seed");
        assert_eq!(
            pick(
                &line,
                &[
                    "hook_name",
                    "outcome",
                    "reason",
                    "tokens",
                    "proposed_tokens",
                    "budget_tokens"
                ]
            ),
            json!({"hook_name": "seeder", "outcome": outcome, "reason": reason, "tokens": tokens, "proposed_tokens": 1500, "budget_tokens": budget}),
            "{inference}{section}"
        );
        let log = done.bootstrap();
        assert_eq!(
            log.lines()
                .filter(|l| l.starts_with("context seed from hook 'seeder': "))
                .count(),
            1,
            "{log}"
        );
    }
}

// =================================================================================
// Compaction.

fn squash() -> Hook {
    Hook::recorder("squash")
        .bind("on-compaction")
        .policy("replace-context")
}

/// Past the threshold after a reply, the hook's `replace-context` is committed: a
/// `compaction` line, and the next request starts with the summary, the pending call
/// kept with its result.
#[test]
fn compaction_replaces_the_conversation_the_next_request_sees() {
    let mock = MockModel::with(vec![
        calls("c1", "echo", r#"{"command":"one"}"#, (100, 10)),
        calls("c2", "echo", r#"{"command":"two"}"#, (600, 10)),
        answer("done"),
    ]);
    let yaml = Yaml::openai(&mock)
        .inference("  compaction:\n    threshold: 0.5\n    dump_summaries: true\n")
        .section("context:\n  max_tokens: 1000\n")
        .hook(squash());
    let cap = Cap::new("compact", &yaml, "");
    cap.answers("squash", json!({"compaction": [{"replace_keep_last": 1}]}));
    let done = cap.run_task("echo twice");
    done.assert_ok();
    assert_eq!(done.result(), "done");

    assert_eq!(mock.requests().len(), 3);
    assert_eq!(done.one("task_end")["turns"], 3, "compaction uses no turn");
    let line = done.one("compaction");
    assert_eq!(
        pick(&line, &["turn", "tokens_before"]),
        json!({"turn": 1, "tokens_before": 610})
    );
    let after = line["tokens_after"].as_u64().unwrap();
    assert!(after > 0 && after < 610, "{line}");
    assert_eq!(line["task_id"], done.one("task_start")["task_id"]);
    assert!(done.lines("compaction_declined").is_empty());
    // dump_summaries: what replaced the dropped messages, one line per compaction.
    let dumped =
        std::fs::read_to_string(done.session.workdir.join("out/compaction-summaries.jsonl"))
            .expect("the summaries file");
    let dumped: Value = serde_json::from_str(dumped.trim()).expect("one JSON line");
    assert_eq!(
        dumped,
        json!({"turn": 1, "tokens_before": 610, "tokens_after": after,
               "summary": "Summary of earlier conversation."})
    );

    let third = mock.request(2).json();
    let messages: Vec<&Value> = third["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "system")
        .collect();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool"], "{third}");
    assert_eq!(
        text_of(&messages[0]["content"]),
        "Summary of earlier conversation."
    );
    assert_eq!(messages[1]["tool_calls"][0]["id"], "c2");
    assert_eq!(messages[2]["tool_call_id"], "c2");

    let seen = done.events("squash");
    assert_eq!(seen.len(), 1, "below the threshold nothing is asked");
    let roles: Vec<&str> = seen[0]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    assert_eq!(seen[0]["session_tokens"], 610);
    assert_eq!(seen[0]["threshold"], 0.5);
    assert!(
        seen[0]["messages"][3]["content"]
            .as_str()
            .unwrap()
            .contains("[tool call c2] echo {\"command\":\"two\"}"),
        "{}",
        seen[0]
    );
}

/// A replacement that drops the pending call is declined (`unresolved_tool_call`), an
/// answer without one too (`no_hook_replacement`); the task goes on unchanged. With no
/// compaction hook at all, a warning in `bootstrap.log`.
#[test]
fn compaction_is_declined_or_warned_about_and_the_task_goes_on() {
    let script = r#"
turns:
  - tool_calls: [{id: c1, name: echo, input: {command: "one"}}]
    usage: {input_tokens: 600, output_tokens: 10}
  - text: "{{last_tool_result}}"
    usage: {input_tokens: 700, output_tokens: 10}
"#;
    let yaml = Yaml::scripted()
        .inference("  compaction:\n    threshold: 0.5\n")
        .section("context:\n  max_tokens: 1000\n")
        .hook(squash());
    let cap = Cap::new("declined", &yaml, script);
    cap.answers(
        "squash",
        json!({"compaction": [{"replace": [{"role": "user", "content": "short"}]}, "none"]}),
    );
    let done = cap.run_task("echo");
    done.assert_ok();
    assert!(done.lines("compaction").is_empty());
    let declined: Vec<Value> = done
        .lines("compaction_declined")
        .iter()
        .map(|d| pick(d, &["turn", "tokens", "reason"]))
        .collect();
    assert_eq!(
        declined,
        [
            json!({"turn": 0, "tokens": 610, "reason": "unresolved_tool_call"}),
            json!({"turn": 1, "tokens": 710, "reason": "no_hook_replacement"}),
        ]
    );
    assert_eq!(
        done.result(),
        "<untrusted-content source=tool:echo>\n$ echo one\nExit code: 0\nStdout:\none\n\nStderr:\n\n</untrusted-content>"
    );

    // No compaction hook at all.
    let yaml = Yaml::scripted()
        .inference("  compaction:\n    threshold: 0.5\n")
        .section("context:\n  max_tokens: 1000\n");
    let cap = Cap::new("no-compactor", &yaml, script);
    let done = cap.run_task("echo");
    done.assert_ok();
    assert!(done.lines("compaction").is_empty());
    assert!(done.lines("compaction_declined").is_empty());
    let log = done.bootstrap();
    assert!(
        log.contains("warning:") && log.contains("no on-compaction hook is bound"),
        "{log}"
    );
}

/// trace.md: `compaction.tokens_before_source` and `compaction_declined.tokens_source`
/// say whether the count is the provider's (`actual`) or the host's (`estimate`). Here
/// the driver reported usage, and the threshold was checked against it.
#[test]
fn compaction_lines_say_the_count_was_reported() {
    let script = r#"
turns:
  - text: big
    usage: {input_tokens: 600, output_tokens: 10}
"#;
    let yaml = Yaml::scripted()
        .inference("  compaction:\n    threshold: 0.5\n")
        .section("context:\n  max_tokens: 1000\n")
        .hook(squash());
    let cap = Cap::new("source", &yaml, script);
    cap.answers("squash", json!({"compaction": ["none"]}));
    let done = cap.run_task("go");
    done.assert_ok();
    let declined = done.one("compaction_declined");
    assert_eq!(declined["tokens"], 610);
    assert_eq!(declined["tokens_source"], "actual", "{declined}");
}

/// A compaction hook that fails ends the task: `failed` / `session ended`, result
/// `error: compaction hook '<name>' failed: …`, exit 1.
#[test]
fn a_failing_compaction_hook_fails_the_task() {
    let script = r#"
turns:
  - text: never shown
    usage: {input_tokens: 600, output_tokens: 10}
"#;
    let yaml = Yaml::scripted()
        .inference("  compaction:\n    threshold: 0.5\n")
        .section("context:\n  max_tokens: 1000\n")
        .hook(squash());
    let cap = Cap::new("compact-fails", &yaml, script);
    cap.answers(
        "squash",
        json!({"compaction": [{"error": "summarizer offline"}]}),
    );
    let live = cap.start(&[]);
    let frames = send(&live.address(), "m1", "go").rest(WAIT);
    let done = live.finish();
    done.assert_incomplete("failed");
    let t = frames[0].data["id"].as_str().unwrap();
    let c = frames[0].data["context_id"].as_str().unwrap();
    let blocks: Vec<String> = frames.iter().map(|f| f.block.clone()).collect();
    assert_eq!(
        blocks,
        [
            block(
                0,
                "status",
                &status(t, c, "working", "inference turn 1", false)
            ),
            block(1, "status", &status(t, c, "failed", "session ended", true)),
        ]
    );
    assert_eq!(
        done.result(),
        "error: compaction hook 'squash' failed: summarizer offline"
    );
    assert_eq!(done.one("task_end")["exit_status"], "failed");
    assert!(
        done.log("hook-squash.log")
            .contains("on-compaction: summarizer offline")
    );
}

// =================================================================================
// Hook failures and unhonored arms.

/// A blocking hook that errors, traps or spins past its deadline at a point that decides
/// nothing is logged to `logs/hook-<name>.log` and the session goes on (no trace line).
#[test]
fn a_failing_blocking_hook_is_logged_and_the_session_goes_on() {
    let yaml = Yaml::scripted()
        .hook(Hook::recorder("flaky"))
        .hook(Hook::recorder("slow").bind("on-task-start").deadline(1));
    let cap = Cap::new("flaky", &yaml, "turns:\n  - text: fine\n");
    cap.answers(
        "flaky",
        json!({"session-start": [{"error": "ss broke"}], "inference": ["trap"], "task-end": [{"error": "te broke"}]}),
    );
    cap.answers("slow", json!({"task-start": ["spin"]}));
    let started = Instant::now();
    let done = cap.run_task("go");
    done.assert_ok();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the spin was stopped"
    );
    assert_eq!(done.result(), "fine");
    let log = done.log("hook-flaky.log");
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 3, "{log}");
    assert_eq!(lines[0], "on-session-start: ss broke");
    assert!(lines[1].starts_with("on-inference: trapped"), "{log}");
    assert_eq!(lines[2], "on-task-end: te broke");
    let slow = done.log("hook-slow.log");
    assert_eq!(
        slow,
        "on-task-start: timed out: deadline exceeded: the component ran for more than 1 s without returning\n"
    );
    assert!(done.lines("hook_dispatch_error").is_empty());
    assert_eq!(
        event_labels(&done.events("flaky")),
        [
            "session-start",
            "task-start",
            "inference",
            "task-end",
            "session-end"
        ]
    );
}

/// An async hook's failure is traced `hook_dispatch_error` with arm `error`, or
/// `timeout` when it ran past its deadline; the session does not wait for it.
#[test]
fn async_hook_failures_are_traced() {
    // `bgspin` spins at session start until its deadline: a task that waited for it
    // would start only after its timeout is traced.
    let yaml = Yaml::scripted()
        .hook(Hook::recorder("bg").bind("on-task-end").mode("async"))
        .hook(
            Hook::recorder("bgspin")
                .bind("on-session-start")
                .mode("async")
                .deadline(2),
        );
    let cap = Cap::new("async", &yaml, "turns:\n  - text: fine\n");
    cap.answers("bg", json!({"task-end": [{"error": "async broke"}]}));
    cap.answers("bgspin", json!({"session-start": ["spin"]}));
    let done = cap.run_task("go");
    done.assert_ok();
    let mut errors: Vec<Value> = done
        .lines("hook_dispatch_error")
        .iter()
        .map(|e| pick(e, &["hook_name", "event", "arm"]))
        .collect();
    errors.sort_by_key(|e| e["hook_name"].to_string());
    assert_eq!(
        errors,
        [
            json!({"hook_name": "bg", "event": "on-task-end", "arm": "error"}),
            json!({"hook_name": "bgspin", "event": "on-session-start", "arm": "timeout"}),
        ]
    );
    assert!(done.log("hook-bg.log").contains("on-task-end: async broke"));
    let kinds = done.kinds();
    let end = kinds.iter().position(|k| k == "session_end").unwrap();
    assert_eq!(end, kinds.len() - 1, "traced before session_end: {kinds:?}");

    // The task did not wait for the spinning hook: it started, ran and ended while the
    // hook was still spinning, so its lines precede the hook's timeout in the trace
    // (which is written in order) and in time.
    let trace = done.trace();
    let at = |pick: &dyn Fn(&Value) -> bool| {
        trace
            .iter()
            .position(pick)
            .unwrap_or_else(|| panic!("{kinds:?}"))
    };
    let spun = at(&|e| e["event_type"] == "hook_dispatch_error" && e["hook_name"] == "bgspin");
    let started = at(&|e| e["event_type"] == "task_start");
    let ended = at(&|e| e["event_type"] == "task_end");
    assert!(started < ended && ended < spun, "{kinds:?}");
    let ms = |i: usize| trace[i]["timestamp"].as_u64().unwrap();
    assert!(ms(ended) <= ms(spun), "{} > {}", ms(ended), ms(spun));
    assert_eq!(
        event_labels(&done.events("bgspin")),
        ["session-start"],
        "the spinning hook was called once, at session start"
    );
}

/// An arm the hook's policy does not allow there is logged and traced
/// (`hook_dispatch_error` naming the arm) and treated as `none`: nothing reopened.
#[test]
fn unhonored_arms_are_faults_and_change_nothing() {
    let yaml = Yaml::scripted().hook(Hook::recorder("meddler"));
    let cap = Cap::new("unhonored", &yaml, "turns:\n  - text: fine\n");
    cap.answers(
        "meddler",
        json!({
            "session-start": [{"seed": [{"role": "user", "content": "x"}]}],
            "task-start": [{"artifact": {"a": 1}}],
            "task-end": [{"reopen": "again"}],
        }),
    );
    let done = cap.run_task("go");
    done.assert_ok();
    let errors: Vec<Value> = done
        .lines("hook_dispatch_error")
        .iter()
        .map(|e| pick(e, &["hook_name", "event", "arm"]))
        .collect();
    assert_eq!(
        errors,
        [
            json!({"hook_name": "meddler", "event": "on-session-start", "arm": "seed-context"}),
            json!({"hook_name": "meddler", "event": "on-task-start", "arm": "artifact"}),
            json!({"hook_name": "meddler", "event": "on-task-end", "arm": "reopen-task"}),
        ]
    );
    assert!(done.lines("task_reopened").is_empty());
    assert!(done.lines("context_seed").is_empty());
    assert_eq!(
        pick(&done.one("task_end"), &["exit_status", "reopen_count"]),
        json!({"exit_status": "ok", "reopen_count": 0})
    );
    assert_eq!(done.result(), "fine");
    assert_eq!(done.task_md(), "go", "task.md untouched");
    let log = done.bootstrap();
    assert!(
        log.contains("hook 'meddler' answered reopen-task at on-task-end"),
        "{log}"
    );
}

// =================================================================================
// The hook contract in the manifest.

/// A binding/mode/policy mismatch fails at start-up, before anything is compiled or
/// run: `E-MAN-003` naming the field, no workdir, no hook called.
#[test]
fn contract_mismatches_fail_before_anything_runs() {
    let cases = [
        (
            Hook::recorder("h")
                .bind("on-task-start")
                .policy("reopen-task"),
            "commit_policy",
            "'reopen-task' cannot commit at on-task-start",
        ),
        (
            Hook::recorder("h")
                .bind("on-task-start")
                .mode("async")
                .policy("seed-context"),
            "commit_policy",
            "an async hook commits nothing, found 'seed-context'",
        ),
        (
            Hook::recorder("h").policy("deny"),
            "commit_policy",
            "'deny' needs an explicit binding",
        ),
        (
            Hook::recorder("h").bind("on-stage").mode("async"),
            "execution_mode",
            "on-stage hooks must be blocking",
        ),
        (
            Hook::recorder("h").bind("on-inference").policy("deny"),
            "commit_policy",
            "'deny' cannot commit at on-inference",
        ),
    ];
    for (hook, field, why) in cases {
        let cap = Cap::new("contract", &Yaml::scripted().hook(hook), "turns: []\n");
        let run = cap
            .capsule
            .run(&["--workdir", cap.wd.to_str().unwrap(), "--task", "go"]);
        let want = format!("invalid artifacts config for 'artifacts[0].{field}': {why}\n  hint: ");
        run.assert_error("error[E-MAN-003]: ");
        assert!(run.stderr.contains(&want), "{}", run.stderr);
        assert!(run.stdout.is_empty(), "{}", run.stdout);
        assert!(!cap.wd.exists(), "nothing ran: {}", run.stderr);
    }
}

// =================================================================================
// The example hooks.

/// The gatekeeper reopens until the result names every line of `required.txt`.
#[test]
pub(crate) fn gatekeeper_reopens_until_required_phrases_are_present() {
    let yaml = Yaml::scripted().hook(
        Hook::new("gatekeeper", MUR_HOOK_GATEKEEPER)
            .bind("on-task-end")
            .policy("reopen-task")
            .scope("gate"),
    );
    let script =
        "turns:\n  - text: The capital is Paris.\n  - text: Paris is the capital of France.\n";
    let cap = Cap::new("gatekeeper", &yaml, script);
    cap.scope_file("gate", "required.txt", "Paris\nFrance\n");
    let done = cap.run_task("What is the capital of France?");
    done.assert_ok();
    assert_eq!(done.result(), "Paris is the capital of France.");
    let feedback = "The answer must mention: \"France\".";
    assert_eq!(
        pick(
            &done.one("task_reopened"),
            &["hook_name", "reason", "reopen_number"]
        ),
        json!({"hook_name": "gatekeeper", "reason": feedback, "reopen_number": 1})
    );
    assert_eq!(done.one("task_end")["reopen_count"], 1);
    assert!(
        done.task_md().ends_with(&format!(
            "## Reopen 1 — from hook `gatekeeper`\n\n{feedback}\n"
        )),
        "{}",
        done.task_md()
    );
}

/// The memory hook: a first session remembers its task; a second one in the same
/// workdir starts with that memory as its first message.
#[test]
pub(crate) fn memory_carries_a_task_into_the_next_session() {
    let mock = MockModel::with(vec![answer("Noted: 42."), answer("It was 42.")]);
    let yaml = Yaml::openai(&mock)
        .section("context:\n  max_tokens: 10000\n")
        .hook(
            Hook::new("memory", MUR_HOOK_MEMORY)
                .policy("seed-context")
                .scope("memory"),
        );
    let cap = Cap::new("memory", &yaml, "");
    let first = cap.run_task("Remember the number 42.");
    first.assert_ok();
    assert!(
        first.lines("context_seed").is_empty(),
        "nothing to seed yet"
    );
    let t1 = first.one("task_start")["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let memory = cap.records.join("hooks").join("memory").join("memory.md");
    let entry = format!("task {t1}: Noted: 42.");
    assert_eq!(
        std::fs::read_to_string(&memory).unwrap(),
        format!("{entry}\n")
    );

    let second = cap.run_task("Which number?");
    second.assert_ok();
    assert_ne!(first.session.id, second.session.id);
    assert_eq!(
        pick(&second.one("context_seed"), &["hook_name", "outcome"]),
        json!({"hook_name": "memory", "outcome": "seeded"})
    );
    assert_eq!(
        conversation(&mock, 1),
        [
            said("user", &format!("Memory from an earlier task:\n{entry}")),
            said("user", "Which number?"),
        ]
    );
    let t2 = second.one("task_start")["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        std::fs::read_to_string(&memory).unwrap(),
        format!("{entry}\n---\ntask {t2}: It was 42.\n")
    );
}

/// The deny-list's built-in list refuses `curl`.
#[test]
pub(crate) fn deny_list_default_rules_refuse_curl() {
    let yaml = Yaml::scripted().hook(
        Hook::new("guard", MUR_HOOK_DENY_LIST)
            .bind("on-shell")
            .policy("deny"),
    );
    let script = r#"
turns:
  - tool_calls: [{id: c1, name: bash, input: {command: "curl -s http://example.com"}}]
  - text: "{{last_tool_result}}"
"#;
    let cap = Cap::new("deny-list", &yaml, script);
    let done = cap.run_task("fetch it");
    done.assert_ok();
    let reason = "text:curl  matched: the command contains \"curl \"";
    assert_eq!(done.result(), refusal("guard", reason));
    let denied = done.one("call_denied");
    let target = denied["target"].as_str().unwrap();
    assert!(
        target.starts_with('/') && target.ends_with("/bash"),
        "{target}"
    );
    assert_eq!(
        pick(&denied, &["event", "hook_name", "reason"]),
        json!({"event": "on-shell", "hook_name": "guard", "reason": reason})
    );
    assert!(done.lines("tool_call").is_empty());
    assert!(done.lines("shell").is_empty());
}
