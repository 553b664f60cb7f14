//! The hook world's scenarios. Our hook world has one `handle(event)` for every
//! binding, so the hook is declared once per binding (nine artifacts of the same
//! component, each `binding: on-…`), in a capsule driven through every point of the
//! seed's diagram: a shell call, a tool call, a compaction threshold crossed, a task
//! that ends, a session that ends. The scripted driver plays the turns; the tool is the
//! example `wordcount` component this binary carries.
//!
//! Two runs:
//! - with `commit_policy: none` at every binding: each binding's events must be
//!   answered, within the hook's deadline, without an error or a trap (the host logs
//!   each failure to `logs/hook-<name>.log` in its own words, which the scenario quotes);
//!   and any verdict the hook gives is refused, nothing committed;
//! - with each committing policy at its binding (`write-manifests` at on-stage,
//!   `seed-context` at on-task-start, `replace-context` at on-compaction, `reopen-task`
//!   at on-task-end, `deny` at on-tool-call and on-shell): a verdict the policy cannot
//!   commit there is the hook's fault (the host traces it as `hook_dispatch_error`).

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::Target;
use super::capsule::{Scratch, yaml_str};
use super::driver::run::{Ran, stream_one};
use super::report::{Outcome, Scenario, Step, ensure, fail};

/// The example tool the tool-call binding is driven with.
const WORDCOUNT: &[u8] = include_bytes!(concat!(env!("MUR_GUEST_DIR"), "/mur_tool_wordcount.wasm"));
/// The hook's deadline for one event: generous for a hook that answers, short enough
/// that one that never does costs the check little.
const DEADLINE_SECS: u64 = 3;
const RUN_LIMIT: Duration = Duration::from_secs(120);
const TASK: &str = "Count the words of task.md.";

/// Each binding, the trace line that shows the capsule reached it, and the committing
/// policy that belongs to it (if any).
const BINDINGS: [(&str, &str, Option<&str>); 9] = [
    ("on-stage", "session_start", Some("write-manifests")),
    ("on-session-start", "session_start", None),
    ("on-task-start", "task_start", Some("seed-context")),
    ("on-inference", "inference", None),
    ("on-tool-call", "tool_call", Some("deny")),
    ("on-shell", "shell", Some("deny")),
    ("on-compaction", "compaction", Some("replace-context")),
    ("on-task-end", "task_end", Some("reopen-task")),
    ("on-session-end", "session_end", None),
];

/// Turns that reach every binding: a shell call past the compaction threshold, a tool
/// call, an answer; then spare answers for a reopened task. The shell command only
/// echoes, but names `curl`, which policy hooks commonly refuse (the example deny-list
/// does by default): so such a hook's `deny` is seen refused under `none` and committed
/// under `deny`.
const SCRIPT: &str = r#"{"span": "session", "turns": [
  {"tool_calls": [{"id": "c1", "name": "echo", "input": {"command": "checking: curl is not run"}}],
   "usage": {"input_tokens": 600, "output_tokens": 10}},
  {"tool_calls": [{"id": "c2", "name": "wordcount", "input": {"path": "task.md"}}],
   "usage": {"input_tokens": 100, "output_tokens": 10}},
  {"text": "done"},
  {"text": "done again"},
  {"text": "done once more"}
]}"#;

/// Every hook scenario, in order.
pub fn scenarios(target: &Target) -> Vec<Scenario> {
    let runs = [
        capsule(&target.absolute, "hook", |_| "none"),
        capsule(&target.absolute, "verdict", |policy| {
            policy.unwrap_or("none")
        }),
    ];
    let mut out: Vec<Scenario> = BINDINGS
        .iter()
        .map(|&(binding, reached, _)| {
            let name = format!("hook: answers {binding} events within its deadline");
            Scenario::run(&name, || answered(&runs, binding, reached))
        })
        .collect();
    for &(binding, _, policy) in &BINDINGS {
        let Some(policy) = policy else { continue };
        let name = format!("hook: verdicts at {binding} follow commit_policy {policy}");
        out.push(Scenario::run(&name, || verdicts(&runs, binding, policy)));
    }
    out
}

/// Runs the capsule with the hook at every binding, its policy at each by `policy`.
fn capsule(
    wasm: &Path,
    prefix: &str,
    policy: impl Fn(Option<&str>) -> &str,
) -> Result<Ran, Outcome> {
    let scratch = Scratch::new("hook")?;
    scratch.write("wordcount.wasm", WORDCOUNT)?;
    let mut artifacts =
        String::from("  - name: wordcount\n    runtime: tool\n    source: ./wordcount.wasm\n");
    for &(binding, _, committing) in &BINDINGS {
        let name = artifact(prefix, binding);
        artifacts.push_str(&format!(
            "  - name: {name}\n    runtime: hook\n    source: {}\n    binding: {binding}\n    \
             commit_policy: {}\n    capabilities:\n      filesystem:\n        scope: {name}\n      \
             limits:\n        deadline_seconds: {DEADLINE_SECS}\n",
            yaml_str(wasm),
            policy(committing),
        ));
    }
    let manifest = format!(
        "name: check-hook\nversion: \"0.1.0\"\n\
         capabilities:\n  shell:\n    allow: [echo]\n\
         context:\n  max_tokens: 1000\n\
         inference:\n  driver: scripted\n  script: ./script.json\n  model: check-model\n  \
         compaction:\n    threshold: 0.5\n\
         artifacts:\n{artifacts}"
    );
    scratch.manifest(&manifest)?;
    scratch.write("script.json", SCRIPT)?;
    stream_one(scratch, TASK, RUN_LIMIT)
}

fn artifact(prefix: &str, binding: &str) -> String {
    format!("{prefix}-{}", binding.trim_start_matches("on-"))
}

/// In either run, the capsule reached `binding` (a `reached` trace line, or for
/// on-compaction a declined one too) and the hook bound there logged no failure.
fn answered(runs: &[Result<Ran, Outcome>; 2], binding: &str, reached: &str) -> Step {
    let mut seen = false;
    for (ran, prefix) in runs.iter().zip(["hook", "verdict"]) {
        let ran = ran.as_ref().map_err(Clone::clone)?;
        let log = ran.record(&format!("logs/hook-{}.log", artifact(prefix, binding)));
        if let Some(line) = log.lines().next() {
            return Err(fail(line.to_string()));
        }
        let declined = binding == "on-compaction" && !ran.lines("compaction_declined").is_empty();
        seen |= declined || !ran.lines(reached).is_empty();
    }
    let ran = runs[0].as_ref().map_err(Clone::clone)?;
    ensure(seen, || {
        format!(
            "the check's capsule never reached {binding} (no {reached} trace line), so the \
             hook was not asked; the run {}",
            ran.ending()
        )
    })
}

/// Under the binding's committing policy the hook gave no verdict the host had to
/// refuse; under `none` the host committed nothing of the hook's.
fn verdicts(runs: &[Result<Ran, Outcome>; 2], binding: &str, policy: &str) -> Step {
    let listened = runs[0].as_ref().map_err(Clone::clone)?;
    let committing = runs[1].as_ref().map_err(Clone::clone)?;
    let name = artifact("verdict", binding);
    let refused: Vec<Value> = committing
        .lines("hook_dispatch_error")
        .into_iter()
        .filter(|l| l["hook_name"] == name.as_str())
        .collect();
    if let Some(line) = refused.first() {
        return Err(fail(format!(
            "at {} the hook answered {}, which commit_policy {policy} does not commit there \
             (the host refused it: hook_dispatch_error)",
            line["event"].as_str().unwrap_or(binding),
            line["arm"].as_str().unwrap_or("?"),
        )));
    }
    let name = artifact("hook", binding);
    let committed: Vec<String> = listened
        .trace()
        .into_iter()
        .filter(|l| l["hook_name"] == name.as_str() && l["event_type"] != "hook_dispatch_error")
        .filter_map(|l| l["event_type"].as_str().map(str::to_string))
        .collect();
    ensure(committed.is_empty(), || {
        format!(
            "under commit_policy none the host still committed the hook's verdict at \
             {binding}: {}",
            committed.join(", ")
        )
    })?;
    honoured(listened, committing, binding, policy)
}

/// A verdict of the policy's own arm that the host refused under `none` is committed
/// under the policy: the trace names the hook on the commit (a `compaction` line for
/// on-compaction). Manifests written at on-stage leave no trace line, so they are not
/// looked for.
fn honoured(listened: &Ran, committing: &Ran, binding: &str, policy: &str) -> Step {
    let asked = listened
        .lines("hook_dispatch_error")
        .iter()
        .any(|l| l["hook_name"] == artifact("hook", binding).as_str() && l["arm"] == policy);
    if !asked || binding == "on-stage" {
        return Ok(());
    }
    let name = artifact("verdict", binding);
    let committed = match binding {
        "on-compaction" => !committing.lines("compaction").is_empty(),
        _ => committing
            .trace()
            .iter()
            .any(|l| l["hook_name"] == name.as_str() && l["event_type"] != "hook_dispatch_error"),
    };
    ensure(committed, || {
        format!(
            "at {binding} the hook answered {policy}, refused under commit_policy none as it \
             should be, but under commit_policy {policy} nothing was committed"
        )
    })
}
