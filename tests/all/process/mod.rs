//! `inference.transport: process` end to end: Claude Code and Codex CLI from npm
//! (`common::harness`) run by the real `mur` inside the capsule's sandbox, pointed at
//! the loopback model mocks, calling the capsule's tools through the bridge.

pub mod claude;
pub mod codex;
mod hostile;

use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::common::mock_model::{MockModel, Recorded};
use crate::common::{
    Capsule, MUR_TOOL_WORDCOUNT, Run, Running, Session, frames, guest, message_stream_body,
    message_stream_body_in, post, read_to_close,
};

const WAIT: Duration = Duration::from_secs(120);
const JSON_CT: (&str, &str) = ("content-type", "application/json");

/// The key the harness is given (`inference.api_key: ${MOCK_API_KEY}`): the tests
/// check that it reaches the model server and nothing else.
pub const KEY: &str = "sk-mock-process-0123456789";
pub const ENV: &[(&str, &str)] = &[("MOCK_API_KEY", KEY)];

/// A capsule run on a harness.
pub struct Setup<'a> {
    pub driver: &'a str,
    pub command: &'a Path,
    pub endpoint: String,
    pub allow: Vec<String>,
    pub model: &'a str,
    pub lifecycle: &'a str,
    pub max_turns: u32,
    pub extra_capabilities: &'a str,
    /// More `inference` keys, each line indented by two spaces.
    pub extra_inference: &'a str,
}

pub const ONE_TASK: &str = "lifecycle:\n  task_acceptance: none\n";
pub const THREADED: &str =
    "lifecycle:\n  conversation: threaded\n  task_acceptance: queue\n  after_task: sleep\n";

impl Setup<'_> {
    pub fn manifest(&self) -> String {
        let allow: String = self
            .allow
            .iter()
            .map(|a| format!("      - {a}\n"))
            .collect();
        format!(
            r#"name: harnessed
version: "0.1.0"
artifacts:
  - name: wordcount
    runtime: tool
    source: {wordcount}
capabilities:
  network:
    allow:
{allow}  shell:
    allow: [bash, cat]
{extra}inference:
  transport: process
  driver: {driver}
  command: {command}
  endpoint: {endpoint}
  model: {model}
  api_key: ${{MOCK_API_KEY}}
  home: ./harness-home
  max_turns: {max_turns}
{extra_inference}{lifecycle}"#,
            wordcount = guest(MUR_TOOL_WORDCOUNT).display(),
            extra = self.extra_capabilities,
            driver = self.driver,
            command = self.command.display(),
            endpoint = self.endpoint,
            model = self.model,
            max_turns = self.max_turns,
            extra_inference = self.extra_inference,
            lifecycle = self.lifecycle,
        )
    }

    pub fn capsule(&self, name: &str) -> Capsule {
        let capsule = Capsule::new(name, &self.manifest(), "");
        std::fs::create_dir_all(capsule.dir.join("harness-home")).unwrap();
        capsule
    }
}

/// A file outside every capsule's view, which a confined command must not read.
pub fn secret_outside(capsule: &Capsule) -> PathBuf {
    let path = capsule.dir.join("outside-secret.txt");
    std::fs::write(&path, "the-secret-outside-the-workdir").unwrap();
    path
}

/// A capsule run to its end on a launch task.
pub fn run_task(capsule: &Capsule, task: &str) -> (Session, Run) {
    let running = capsule.spawn_env(&["--task", task], ENV);
    let session = running.session();
    (session, running.wait(WAIT))
}

/// The model calls the mock received (a harness checks the server with a HEAD first).
pub fn model_requests(mock: &MockModel) -> Vec<Recorded> {
    mock.requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect()
}

/// `text` sent on `message/stream` in `context`, read to the end.
pub fn ask_in(running: &Running, text: &str, context: &str) -> String {
    read_to_close(post(
        &running.address,
        &[JSON_CT],
        &message_stream_body_in(text, context),
    ))
}

/// `text` sent on `message/stream`, read to the end on a thread of its own.
pub fn stream_in_background(running: &Running, text: &str) -> JoinHandle<String> {
    let address = running.address.clone();
    let body = message_stream_body(text);
    std::thread::spawn(move || read_to_close(post(&address, &[JSON_CT], &body)))
}

/// `tasks/cancel` of the running capsule's first task, which must be answered
/// `canceled`; then its stream must end `canceled`.
pub fn cancel_first_task(running: &Running, streaming: JoinHandle<String>) {
    let session = running.session();
    let task = session.events_so_far("task_start")[0]["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let cancel = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/cancel", "params": {"id": task}});
    let answer = read_to_close(post(&running.address, &[JSON_CT], &cancel.to_string()));
    assert!(answer.contains("canceled"), "{answer}");
    let body = streaming.join().unwrap();
    assert!(body.contains("\"canceled\""), "{body}");
}

/// A `message/stream` of `text`, its event stream with what differs run to run (the
/// task's and context's ids, a tool call's id and duration) as `TASK`, `CTX`, `CALL` and
/// `MS`: every other byte is what the client got.
pub fn streamed_with_placeholders(running: &Running, text: &str) -> String {
    let raw = read_to_close(post(
        &running.address,
        &[JSON_CT],
        &message_stream_body(text),
    ));
    let body = raw.split_once("\r\n\r\n").expect("HTTP head").1;
    let (_, _, first) = &frames(body)[0];
    let task = first["id"].as_str().unwrap();
    let context = first["context_id"].as_str().unwrap();
    let mut body = body.replace(task, "TASK").replace(context, "CTX");
    for (_, event, data) in frames(&body) {
        if event == "artifact" {
            let call = data["artifact"]["tool_call_id"]
                .as_str()
                .unwrap()
                .to_string();
            let ms = format!("\"duration_ms\":{}", data["artifact"]["duration_ms"]);
            body = body
                .replace(&call, "CALL")
                .replace(&ms, "\"duration_ms\":MS");
        }
    }
    body
}

/// A `status` frame as [`streamed_with_placeholders`] shows it.
pub fn status(id: u32, state: &str, message: &str, extra: &str, last: bool) -> String {
    format!(
        "id: {id}\nevent: status\ndata: {{\"id\":\"TASK\",\"context_id\":\"CTX\",\"status\":{{\"state\":\"{state}\",\"message\":\"{message}\"{extra}}},\"final\":{last}}}\n\n"
    )
}

/// A `text` or `thinking` frame as [`streamed_with_placeholders`] shows it.
pub fn piece(id: u32, event: &str, text: &str, last: bool) -> String {
    format!(
        "id: {id}\nevent: {event}\ndata: {{\"id\":\"TASK\",\"text\":\"{text}\",\"final\":{last}}}\n\n"
    )
}

/// The `artifact` frame of `wordcount` counting `task.md` (the capsule's task).
pub fn wordcount_artifact(id: u32) -> String {
    format!(
        "id: {id}\nevent: artifact\ndata: {{\"id\":\"TASK\",\"artifact\":{{\"tool_name\":\"wordcount\",\"content\":\"<untrusted-content source=tool:wordcount>\\n0 5 26 task.md\\n</untrusted-content>\",\"fence_source\":\"tool:wordcount\",\"tool_call_id\":\"CALL\",\"is_error\":false,\"duration_ms\":MS,\"exit_code\":null,\"truncated\":false}}}}\n\n"
    )
}
