//! The session loop world's scenarios, after the seed's session loop: a task answered
//! in turns, the tools the model calls, `max_turns`, a reopened task sharing one turn
//! budget, a hook's seed delivered, a canceled task, a threaded context's history.
//! Each runs the loop with `mur run --loop` in a scratch capsule under the scripted
//! driver (or, where what the model is sent matters, the openai driver against a
//! loopback mock), with the memory and gatekeeper hooks this binary carries.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::Target;
use super::capsule::{Finished, Launch, Scratch, Served, yaml_str};
use super::provider::{Provider, Turn};
use super::report::{Outcome, Scenario, Step, ensure, fail, skip};

/// The wall-clock limit of one scenario's capsule.
const LIMIT: Duration = Duration::from_secs(30);
/// What every scripted turn answers, so that any strategy ends on it.
const ANSWER: &str = "mur-check-answer";
/// What the bash tool prints in the tools scenario.
const PRINTED: &str = "mur-check-tool-ran";

/// The behavioural scenarios of a session loop component.
pub fn scenarios(target: &Target) -> Vec<Scenario> {
    vec![
        Scenario::run("loop: answers a task in turns", || turns(target)),
        Scenario::run("loop: runs the tool calls the model asks for", || {
            tools(target)
        }),
        Scenario::run("loop: max_turns ends the task", || max_turns(target)),
        Scenario::run("loop: a reopened task shares one turn budget", || {
            reopen(target)
        }),
        Scenario::run("loop: a hook's seed is delivered", || seeding(target)),
        Scenario::run("loop: a canceled task ends and the next one runs", || {
            cancel(target)
        }),
        Scenario::run("loop: a threaded context's history is sent", || {
            threaded(target)
        }),
        Scenario::skipped(
            "loop: parallel tool calls",
            "murmur:session@0.2.0 gives a loop no way to claim parallel tools: call-tools runs \
             what it is given, up to lifecycle.parallel_tools, whatever the loop",
        ),
    ]
}

// ---------------------------------------------------------------------------------
// Capsules.

/// A scripted capsule's manifest: `max_turns`, and `extra` top-level blocks.
fn scripted(max_turns: u32, extra: &str) -> String {
    format!(
        "name: check-loop\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  \
         model: scripted-test\n  max_turns: {max_turns}\n  max_tokens: 100\n\
         trace:\n  include_tool_output: true\n{extra}"
    )
}

/// A capsule whose model is `mock` over the openai driver, with the bash tool;
/// `extra` are further top-level blocks (a `lifecycle:` block among them).
fn on_mock(mock: &Provider, max_turns: u32, extra: &str) -> String {
    format!(
        "name: check-loop\nversion: \"0.1.0\"\ninference:\n  driver: openai\n  endpoint: {origin}/v1\n  \
         model: m\n  api_key: sk-check\n  stream: false\n  max_tokens: 64\n  max_turns: {max_turns}\n  \
         retry: {{max_attempts: 1}}\n  timeouts: {{connect_secs: 5, read_secs: 20}}\n\
         capabilities:\n  network:\n    allow: [{origin}]\n  shell:\n    allow: [bash]\n\
         trace:\n  include_tool_output: true\n{extra}",
        origin = mock.origin()
    )
}

/// A model told to run `command` with bash: it calls bash when a request offers it
/// (once in its life, or every time with `always`) and otherwise answers with text that
/// names the tool, so a loop that plans first offers it next.
fn bash_model(command: &str, always: bool) -> Result<Provider, Outcome> {
    let arguments = json!({ "command": command }).to_string();
    let text = format!("1. Run `{command}` with the bash tool. {ANSWER}");
    let mut calls = 0;
    Provider::reacting(move |request| {
        if offers_bash(request) && (always || calls == 0) {
            calls += 1;
            return Turn::ToolCall {
                id: format!("call_{calls}"),
                name: "bash".into(),
                arguments: arguments.clone(),
            };
        }
        Turn::text(&[&text])
    })
    .map_err(unstarted)
}

/// The request offers the bash tool (in the OpenAI or the Anthropic shape).
fn offers_bash(request: &Value) -> bool {
    request["tools"].as_array().is_some_and(|tools| {
        tools
            .iter()
            .any(|t| t["function"]["name"] == "bash" || t["name"] == "bash")
    })
}

/// A model that only answers `done`.
fn done_model() -> Result<Provider, Outcome> {
    Provider::answering("done").map_err(unstarted)
}

fn unstarted(e: std::io::Error) -> Outcome {
    skip(format!("the loopback model could not start: {e}"))
}

/// `n` turns that each answer [`ANSWER`].
fn answers(n: usize) -> String {
    format!("  - text: {ANSWER}\n").repeat(n)
}

/// The flags that put the workdir and the records in the scratch directory.
fn places(s: &Scratch) -> Vec<String> {
    vec![
        "--workdir".into(),
        s.dir().join("work").display().to_string(),
        "--records".into(),
        s.dir().join("records").display().to_string(),
    ]
}

/// The loop's capsule taking tasks over HTTP (queued, sleeping between them).
fn serve_queue(s: &Scratch, target: &Target) -> Result<Served, Outcome> {
    let mut args = vec!["--loop".to_string(), target.absolute.display().to_string()];
    args.extend(places(s));
    args.extend(
        [
            "--lifecycle-task-acceptance",
            "queue",
            "--lifecycle-after-task",
            "sleep",
        ]
        .map(String::from),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    s.spawn(&args, &[], LIMIT)
}

/// `mur run --loop <target> --task TEXT` to its end.
fn run_task(s: &Scratch, target: &Target, task: &str) -> Finished {
    let mut args = vec![
        "--task".to_string(),
        task.to_string(),
        "--loop".into(),
        target.absolute.display().to_string(),
    ];
    args.extend(places(s));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    s.run(&args, &[], LIMIT)
}

/// The single `task_end` of a one-task session.
fn task_end(launch: &Launch) -> Result<Value, Outcome> {
    launch
        .events("task_end")
        .into_iter()
        .next()
        .ok_or_else(|| fail("the session's trace has no task_end"))
}

/// Ended without being killed, else the failure saying so.
fn ended(f: &Finished) -> Result<&Launch, Outcome> {
    let launch = f.launched()?;
    ensure(!f.timed_out, || {
        "the capsule did not end within the scenario's limit".into()
    })?;
    Ok(launch)
}

/// A hook artifact of this binary, written into the scratch directory.
fn hook(
    s: &Scratch,
    name: &str,
    bytes: &[u8],
    contract: &str,
    scope: &str,
) -> Result<String, Outcome> {
    let path = s.write(&format!("{name}.wasm"), bytes)?;
    Ok(format!(
        "  - name: {name}\n    runtime: hook\n    source: {}\n{contract}    capabilities:\n      \
         filesystem:\n        scope: {scope}\n",
        yaml_str(&path)
    ))
}

/// A file of a hook's scope (`<records>/hooks/<scope>/<file>`).
fn scope_file(s: &Scratch, scope: &str, file: &str, text: &str) -> Step {
    s.write(&format!("records/hooks/{scope}/{file}"), text)
        .map(drop)
}

// ---------------------------------------------------------------------------------
// Scenarios.

fn turns(target: &Target) -> Step {
    let s = Scratch::new("loop-turns")?;
    s.manifest(&scripted(10, "lifecycle:\n  task_acceptance: none\n"))?;
    s.script(&format!("span: session\nturns:\n{}", answers(12)))?;
    let f = run_task(&s, target, "Say the answer.");
    let launch = f.ok()?;
    let end = task_end(launch)?;
    ensure(end["exit_status"] == "ok", || {
        format!("the task ended {}", end["exit_status"])
    })?;
    let result = launch.read("out/result.txt").unwrap_or_default();
    ensure(result.contains(ANSWER), || {
        format!("out/result.txt holds {result:?}, not the model's answer {ANSWER:?}")
    })?;
    ensure(!launch.events("inference").is_empty(), || {
        "the loop answered without one inference turn".into()
    })
}

fn tools(target: &Target) -> Step {
    let mock = bash_model(&format!("echo {PRINTED}"), false)?;
    let s = Scratch::new("loop-tools")?;
    s.manifest(&on_mock(&mock, 10, "lifecycle:\n  task_acceptance: none\n"))?;
    let f = run_task(&s, target, "Run the command, then answer.");
    let launch = f.ok()?;
    let calls = launch.events("tool_call");
    let call = calls
        .iter()
        .find(|c| c["tool_name"] == "bash")
        .ok_or_else(|| fail("the model's tool call never ran (no tool_call in the trace)"))?;
    ensure(
        call["status"] == "ok"
            && call["output"]
                .as_str()
                .unwrap_or_default()
                .contains(PRINTED),
        || format!("the tool call did not run as asked: {call}"),
    )?;
    let answered = mock.requests().iter().map(|r| r.json()).any(|r| {
        r["messages"].as_array().is_some_and(|m| {
            m.iter()
                .any(|m| m["role"] == "tool" && m["content"].to_string().contains(PRINTED))
        })
    });
    ensure(answered, || {
        "the tool's result was never sent back to the model".into()
    })?;
    let end = task_end(launch)?;
    ensure(end["exit_status"] == "ok", || {
        format!("the task ended {} after its tool call", end["exit_status"])
    })
}

fn max_turns(target: &Target) -> Step {
    let mock = bash_model("echo again", true)?;
    let s = Scratch::new("loop-max-turns")?;
    s.manifest(&on_mock(&mock, 3, "lifecycle:\n  task_acceptance: none\n"))?;
    let f = run_task(&s, target, "Keep calling the tool.");
    let launch = ended(&f)?;
    let end = task_end(launch)?;
    let turns = launch.events("inference").len();
    ensure(turns <= 3, || {
        format!("the task made {turns} inference turns; max_turns is 3")
    })?;
    ensure(end["exit_status"] == "max_turns_reached", || {
        format!(
            "a task whose model never stops ended {} after {turns} turns, not max_turns_reached",
            end["exit_status"]
        )
    })
}

fn reopen(target: &Target) -> Step {
    let s = Scratch::new("loop-reopen")?;
    let gate = hook(
        &s,
        "gatekeeper",
        crate::builtin::GATEKEEPER_HOOK,
        "    binding: on-task-end\n    commit_policy: reopen-task\n",
        "gate",
    )?;
    scope_file(&s, "gate", "required.txt", "mur-check-never-said\n")?;
    s.manifest(&scripted(
        4,
        &format!("artifacts:\n{gate}lifecycle:\n  task_acceptance: none\n  max_task_reopens: 10\n"),
    ))?;
    s.script(&format!("span: session\nturns:\n{}", answers(20)))?;
    let f = run_task(&s, target, "Say the answer.");
    let launch = ended(&f)?;
    let end = task_end(launch)?;
    let reopened = launch.events("task_reopened").len();
    let turns = launch.events("inference").len();
    ensure(reopened >= 1, || {
        format!(
            "the gatekeeper's reopen never happened (task ended {})",
            end["exit_status"]
        )
    })?;
    ensure(turns <= 4, || {
        format!(
            "{reopened} reopens took {turns} inference turns; the task's budget is 4 over all attempts"
        )
    })?;
    ensure(end["exit_status"] != "ok", || {
        "a task its hook kept reopening ended ok".into()
    })
}

fn seeding(target: &Target) -> Step {
    let s = Scratch::new("loop-seed")?;
    let memory = hook(
        &s,
        "memory",
        crate::builtin::MEMORY_HOOK,
        "    commit_policy: seed-context\n",
        "memory",
    )?;
    scope_file(
        &s,
        "memory",
        "memory.md",
        "task tsk_earlier: mur-check-remembered\n",
    )?;
    s.manifest(&scripted(
        10,
        &format!(
            "artifacts:\n{memory}context:\n  max_tokens: 10000\nlifecycle:\n  task_acceptance: none\n"
        ),
    ))?;
    s.script(&format!("span: session\nturns:\n{}", answers(12)))?;
    let f = run_task(&s, target, "What do you remember?");
    let launch = f.ok()?;
    let seeded = launch.events("context_seed");
    ensure(seeded.iter().any(|e| e["outcome"] == "seeded"), || {
        format!("the memory hook's seed was not committed: {seeded:?}")
    })?;
    let first = launch
        .events("inference")
        .into_iter()
        .find(|e| e.get("seed_carried").is_some())
        .ok_or_else(|| fail("no inference of the task was traced with seed_carried"))?;
    ensure(first["seed_carried"] == true, || {
        "the hook's seed was offered, but the task's first request did not carry it".into()
    })
}

fn cancel(target: &Target) -> Step {
    let mock = bash_model("sleep 40", false)?;
    let s = Scratch::new("loop-cancel")?;
    s.manifest(&on_mock(&mock, 10, "lifecycle:\n  shell_grace_secs: 60\n"))?;
    let served = serve_queue(&s, target)?;
    let address = served.launch.address.clone();
    let first = std::thread::spawn(move || {
        let body = json!({
            "jsonrpc": "2.0", "id": 1, "method": "message/stream",
            "params": {"message": {"messageId": "check-1", "role": "user",
                                   "parts": [{"text": "Run the slow command."}]}}
        });
        super::capsule::post(&address, "/", &body.to_string(), LIMIT)
    });
    // The task is running once its tool call has started.
    let task_id = wait_for(&served.launch, Duration::from_secs(15), |trace| {
        let started = trace.iter().any(|e| e["event_type"] == "inference");
        trace
            .iter()
            .find(|e| e["event_type"] == "task_start")
            .filter(|_| started)
            .and_then(|e| e["task_id"].as_str().map(String::from))
    })
    .ok_or_else(|| fail("the first task never started its tool call"))?;
    std::thread::sleep(Duration::from_millis(300));
    let reply = served.rpc(
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/cancel", "params": {"id": task_id}}),
        LIMIT,
    )?;
    ensure(reply.contains("\"canceled\""), || {
        format!(
            "tasks/cancel was refused: {}",
            reply.lines().last().unwrap_or_default()
        )
    })?;
    let started = Instant::now();
    let raw = first
        .join()
        .map_err(|_| fail("the first task's reader failed"))??;
    let frames = super::capsule::frames(raw.split_once("\r\n\r\n").map_or("", |(_, b)| b));
    let last = frames.last().map(|(_, d)| d["status"]["state"].clone());
    ensure(last == Some(json!("canceled")), || {
        format!("the canceled task's stream ended {last:?}, not canceled")
    })?;
    ensure(started.elapsed() < Duration::from_secs(20), || {
        "the canceled task took more than 20 s to end".into()
    })?;
    let next = served.send(3, "Now just answer.", None, LIMIT)?;
    let (_, end) = next
        .last()
        .ok_or_else(|| fail("the next task wrote no frames"))?;
    ensure(end["status"]["state"] == "completed", || {
        format!(
            "the task after the canceled one ended {}",
            end["status"]["state"]
        )
    })?;
    served.stop(LIMIT);
    Ok(())
}

fn threaded(target: &Target) -> Step {
    let mock = done_model()?;
    let s = Scratch::new("loop-threaded")?;
    s.manifest(&format!(
        "name: check-loop\nversion: \"0.1.0\"\ninference:\n  driver: openai\n  endpoint: {origin}/v1\n  \
         model: m\n  api_key: sk-check\n  stream: false\n  max_tokens: 64\n  max_turns: 10\n  \
         retry: {{max_attempts: 1}}\n  timeouts: {{connect_secs: 5, read_secs: 20}}\n\
         capabilities:\n  network:\n    allow: [{origin}]\nlifecycle:\n  conversation: threaded\n",
        origin = mock.origin()
    ))?;
    let served = serve_queue(&s, target)?;
    for (id, text) in [(1, "mur-check-first-task"), (2, "mur-check-second-task")] {
        let frames = served.send(id, text, Some("ctx-check"), LIMIT)?;
        let state = frames.last().map(|(_, d)| d["status"]["state"].clone());
        ensure(state == Some(json!("completed")), || {
            format!("task {id} of the context ended {state:?}")
        })?;
    }
    served.stop(LIMIT);
    let requests: Vec<Value> = mock.requests().iter().map(|r| r.json()).collect();
    let second = requests
        .iter()
        .find(|r| r["messages"].to_string().contains("mur-check-second-task"))
        .ok_or_else(|| fail("the second task never reached the model"))?;
    ensure(
        second["messages"]
            .to_string()
            .contains("mur-check-first-task"),
        || {
            "the second task of a threaded context was sent without the first one's conversation"
                .into()
        },
    )
}

/// Polls the session's trace until `found` gives a value, for at most `within`.
fn wait_for<T>(
    launch: &Launch,
    within: Duration,
    found: impl Fn(&[Value]) -> Option<T>,
) -> Option<T> {
    let until = Instant::now() + within;
    loop {
        if let Some(t) = found(&launch.trace()) {
            return Some(t);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
