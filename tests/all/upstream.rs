//! Upstream Murmur's own components (murmur-cli 0.8.0, vendored unchanged in
//! `tests/fixtures/upstream/`, see its SOURCES.md) under the real `mur run`: its
//! `jsonl-line-count` and request-input tools, its OpenAI and Anthropic drivers against
//! the loopback model mock, the limits and the allow-list applied to them as to ours,
//! and the shapes that are refused (our retired tool world, upstream's hook).

use std::path::PathBuf;
use std::time::Duration;

use crate::common::mock_model::{MockModel, Reply, anthropic, messages, openai};
use crate::common::*;
use crate::drivers::{l, labels};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);
const KEY: &str = "sk-test-SECRET-upstream";
const ENV: &[(&str, &str)] = &[("MOCK_API_KEY", KEY)];

fn fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures/upstream").join(name)
}

fn fenced(tool: &str, body: &str) -> String {
    format!("<untrusted-content source=tool:{tool}>\n{body}\n</untrusted-content>")
}

// ---------------------------------------------------------------------------------
// Provenance.

/// Each vendored file is the one SOURCES.md names, byte for byte.
#[test]
fn the_vendored_components_match_their_recorded_sha256() {
    use sha2::Digest;
    let sources = std::fs::read_to_string(fixture("SOURCES.md")).unwrap();
    let mut checked = 0;
    for line in sources.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').map(|c| c.trim().trim_matches('`')).collect();
        let (file, hash) = (cells[1], cells[3]);
        let bytes = std::fs::read(fixture(file)).unwrap();
        let digest: String = sha2::Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(digest, hash, "{file} is not the file SOURCES.md records");
        checked += 1;
    }
    let vendored = std::fs::read_dir(fixture(""))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "wasm"))
        .count();
    assert_eq!(checked, vendored, "every vendored .wasm has its line in SOURCES.md");
}

// ---------------------------------------------------------------------------------
// jsonl-line-count.

/// A capsule with upstream's jsonl-line-count tool, driven by the scripted driver.
fn line_count_capsule(name: &str, script: &str) -> Capsule {
    let manifest = format!(
        r#"name: upstream-tool
version: "0.1.0"
artifacts:
  - name: jsonl-line-count
    runtime: tool
    description: Counts the lines of a JSONL file.
    source: {tool}
inference:
  driver: scripted
  script: ./script.yaml
  model: scripted-test
lifecycle:
  task_acceptance: none
trace:
  include_tool_output: true
"#,
        tool = fixture("jsonl-line-count.wasm").display(),
    );
    Capsule::new(name, &manifest, script)
}

fn call_once(input: &Value) -> String {
    format!(
        "turns:\n  - tool_calls: [{{id: toolu_02, name: jsonl-line-count, input: {input}}}]\n  - text: \"{{{{last_tool_result}}}}\"\n"
    )
}

/// Upstream hands the tool the model's input JSON whole, as `tool-input.data` (the seed's
/// failed call shows it); this tool reads the file of that name, beneath the workdir.
#[test]
fn jsonl_line_count_counts_the_lines_of_a_file_in_the_workdir() {
    let input = json!({"data": "lines.jsonl"});
    let capsule = line_count_capsule("jsonl-count", &call_once(&input));
    let workdir = capsule.dir.join("wd");
    std::fs::create_dir_all(&workdir).unwrap();
    std::fs::write(workdir.join(input.to_string()), "{\"id\":1}\n{\"id\":2}\n{\"id\":3}\n").unwrap();
    let run = capsule.run(&["--task", "count", "--workdir", workdir.to_str().unwrap()]);
    run.assert_ok();
    let s = run.session();
    let calls = s.events("tool_call");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["status"], "ok", "{}", calls[0]);
    assert_eq!(calls[0]["output"], fenced("jsonl-line-count", "3"));
    assert_eq!(s.read("out/result.txt"), fenced("jsonl-line-count", "3"));
}

/// The seed's failed `jsonl-line-count` call, byte for byte in its content.
#[test]
fn jsonl_line_count_fails_on_a_missing_file_as_the_seed_shows() {
    let capsule = line_count_capsule("jsonl-missing", &call_once(&json!({"data": "missing.jsonl"})));
    let run = capsule.run(&["--task", "count"]);
    run.assert_ok();
    let calls = run.session().events("tool_call");
    assert_eq!(calls[0]["status"], "error", "{}", calls[0]);
    assert_eq!(
        calls[0]["output"],
        "<untrusted-content source=tool:jsonl-line-count>\nfailed to read '{\"data\":\"missing.jsonl\"}': No such file or directory (os error 44)\n</untrusted-content>"
    );
}

// ---------------------------------------------------------------------------------
// Refused shapes.

/// Our own retired `murmur:tool@0.1.0` (`describe` + `call`) shares upstream's name and
/// version; told apart by its exports, it keeps its version error.
#[test]
pub(crate) fn a_tool_of_the_retired_0_1_0_world_gets_its_version_error() {
    let manifest = format!(
        "name: legacy\nversion: \"0.1.0\"\nartifacts:\n  - name: legacy\n    runtime: tool\n    source: {}\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\nlifecycle:\n  task_acceptance: none\n",
        guest(MUR_TOOL_LEGACY).display()
    );
    let capsule = Capsule::new("legacy-tool", &manifest, "turns:\n  - text: never\n");
    let run = capsule.run(&["--task", "hi"]);
    run.assert_error(
        "error[E-RUN-030]: tool artifact 'legacy' was built against murmur:tool/run@0.1.0; \
         this mur serves murmur:tool/run@0.2.0\n  hint: rebuild the component against the \
         tool world of murmur:*@0.2.0 (the wit/ folder of this mur)\n",
    );
}

/// Upstream's hook world cannot be mapped soundly onto ours: refused, saying why.
#[test]
fn an_upstream_hook_is_refused_with_the_reason() {
    let manifest = format!(
        "name: uphook\nversion: \"0.1.0\"\nartifacts:\n  - name: records\n    runtime: hook\n    binding: on-session-end\n    execution_mode: blocking\n    source: {}\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\nlifecycle:\n  task_acceptance: none\n",
        fixture("records-hook.wasm").display()
    );
    let capsule = Capsule::new("upstream-hook", &manifest, "turns:\n  - text: never\n");
    let run = capsule.run(&["--task", "hi"]);
    run.assert_error(
        "error[E-RUN-031]: hook artifact 'records' is an upstream Murmur hook \
         (murmur:hook/lifecycle@0.9.0), which this mur does not serve: its flat messages \
         cannot carry the tool calls and results a replace-context or seed-context verdict \
         would rewrite, and its write-manifests, artifact and on-stage have no counterpart \
         here\n  hint: rebuild the hook against the hook world of murmur:*@0.2.0 (`mur wit` \
         prints it)\n",
    );
}

// ---------------------------------------------------------------------------------
// Drivers.

/// Upstream's driver for `provider`, pointed at `endpoint`, allowed `allow`.
fn driver_capsule(name: &str, provider: &str, endpoint: &str, allow: &str, config: &str) -> Capsule {
    let manifest = format!(
        r#"name: upstream-driver
version: "0.1.0"
artifacts:
  - name: driver-{provider}
    runtime: driver
    source: {driver}
  - name: jsonl-line-count
    runtime: tool
    source: {tool}
inference:
  driver:
    artifact: driver-{provider}
    config: {config}
  endpoint: {endpoint}
  model: test-model
  api_key: ${{MOCK_API_KEY}}
  max_tokens: 256
  system_prompt: You are terse.
capabilities:
  network:
    allow: [{allow}]
  limits:
    deadline_seconds: 5
"#,
        driver = fixture(&format!("murmur-driver-{provider}.wasm")).display(),
        tool = fixture("jsonl-line-count.wasm").display(),
    );
    Capsule::new(name, &manifest, "")
}
