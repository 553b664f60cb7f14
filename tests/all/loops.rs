//! Session loops that own their strategy (`murmur:session@0.2.0`), end to end: the
//! planner and the critic of `components/`, the default loop's parallel tool calls, and
//! `components/loop-probe`, which calls the host with bad input and reports the host's
//! exact words in its result. Each loop runs with `--loop PATH.wasm`, against the
//! scripted driver or, where what the model was sent matters, the openai driver and
//! the loopback mock model.

use std::cell::Cell;
use std::time::Duration;

use crate::common::mock_model::{MockModel, Reply, openai};
use crate::common::*;
use serde_json::{Value, json};

/// The bound on one capsule run: what happens here takes a few seconds.
const WAIT: Duration = Duration::from_secs(60);
const JSON_CT: (&str, &str) = ("content-type", "application/json");
/// The API key the openai capsules read from `${MOCK_API_KEY}`.
const ENV: &[(&str, &str)] = &[("MOCK_API_KEY", "sk-test-loops")];

type Frames = Vec<(Option<u64>, String, Value)>;

// ---------------------------------------------------------------------------------
// Capsules.

fn loop_path(name: &str) -> String {
    guest(name).display().to_string()
}

/// A scripted capsule: 10 turns a task, an output cap of 100 tokens, and `extra`.
fn scripted(extra: &str) -> String {
    scripted_with("", extra)
}

/// [`scripted`] with more `inference` keys (each line indented by two spaces).
fn scripted_with(inference: &str, extra: &str) -> String {
    format!(
        "name: loops\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  \
         model: scripted-test\n  max_turns: 10\n  max_tokens: 100\n{inference}{extra}"
    )
}

/// One task at launch, then the capsule exits.
const ONE_TASK: &str = "lifecycle:\n  task_acceptance: none\n";

/// A capsule whose model is the mock, over the openai driver (not streaming), with the
/// `echo` and `bash` shell tools, in that order.
fn on_openai(mock: &MockModel, lifecycle: &str) -> String {
    format!(
        "name: loops\nversion: \"0.1.0\"\n\
         capabilities:\n  network:\n    allow:\n      - {origin}\n  shell:\n    allow: [echo, bash]\n\
         inference:\n  driver: openai\n  endpoint: {origin}/v1\n  model: test-model\n  \
         api_key: ${{MOCK_API_KEY}}\n  stream: false\n  max_tokens: 256\n  \
         system_prompt: You are terse.\n  \
         retry: {{max_attempts: 3, initial_backoff_ms: 10, max_backoff_ms: 50}}\n  \
         timeouts: {{connect_secs: 5, read_secs: 10}}\n{lifecycle}",
        origin = mock.origin()
    )
}

/// A plain answer of the mock.
fn says(text: &str) -> Reply {
    Reply::json(200, openai::completion(Some(text), &[], "stop", (20, 5)))
}

/// `mur run --task TEXT --loop <loop>` to its end.
fn run_task(capsule: &Capsule, loop_name: &str, task: &str, env: &[(&str, &str)]) -> Run {
    let path = loop_path(loop_name);
    let running = capsule.spawn_env(&["--task", task, "--loop", &path], env);
    let launch = running.launch.clone();
    let mut run = running.wait(WAIT);
    // `wait` leaves stdout empty; `session()` reads the launch line.
    run.stdout = launch.to_string();
    run
}

/// A capsule that queues tasks and sleeps between them, run by `loop_name`, taking
/// tasks over `message/stream`.
struct Served {
    running: Running,
    sent: Cell<u64>,
}

impl Served {
    fn start(capsule: &Capsule, loop_name: &str, env: &[(&str, &str)]) -> Served {
        let path = loop_path(loop_name);
        let mut args = vec!["--loop", path.as_str()];
        args.extend_from_slice(QUEUE);
        Served {
            running: capsule.spawn_env(&args, env),
            sent: Cell::new(0),
        }
    }

    /// Sends `text` (in `context`, when given) and reads the task's frames to its end.
    fn send(&self, text: &str, context: Option<&str>) -> Frames {
        let n = self.sent.get() + 1;
        self.sent.set(n);
        let mut message = json!({
            "messageId": format!("msg-{n}"), "role": "user", "parts": [{"text": text}]
        });
        if let Some(context) = context {
            message["contextId"] = json!(context);
        }
        let body = json!({
            "jsonrpc": "2.0", "id": n, "method": "message/stream",
            "params": {"message": message}
        });
        let raw = read_to_close(post(&self.running.address, &[JSON_CT], &body.to_string()));
        let (_, body) = raw
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("no HTTP head: {raw:?}"));
        frames(body)
    }

    fn session(&self) -> Session {
        self.running.session()
    }

    /// `murmur/stop`, then the process's exit.
    fn stop(self) -> (Session, Run) {
        let raw = read_to_close(post(
            &self.running.address,
            &[JSON_CT],
            &json!({"jsonrpc": "2.0", "id": 99, "method": "murmur/stop", "params": {}}).to_string(),
        ));
        assert!(raw.contains("\"result\""), "murmur/stop: {raw}");
        let session = self.running.session();
        let run = self.running.wait(WAIT);
        assert_eq!(run.status, 0, "{}", run.stderr);
        (session, run)
    }
}

/// The task's answer: its last frame is `completed` and carries it.
fn answer(frames: &Frames) -> String {
    let (_, event, last) = frames.last().expect("the task wrote frames");
    assert_eq!(
        (event.as_str(), &last["status"]["state"]),
        ("status", &json!("completed")),
        "{frames:?}"
    );
    last["status"]["response"]
        .as_str()
        .unwrap_or_else(|| panic!("no response: {last}"))
        .to_string()
}

/// Each frame in a word: `status:<state>:<message>` (a final status only its state),
/// `text:<piece>`, `text:final`, `artifact:<tool call id>`.
fn described(frames: &Frames) -> Vec<String> {
    frames
        .iter()
        .map(|(_, event, data)| match event.as_str() {
            "status" if data["final"] == true => {
                format!("status:{}", data["status"]["state"].as_str().unwrap_or(""))
            }
            "status" => format!(
                "status:{}:{}",
                data["status"]["state"].as_str().unwrap_or(""),
                data["status"]["message"].as_str().unwrap_or("")
            ),
            "text" if data["final"] == true => "text:final".into(),
            "text" => format!("text:{}", data["text"].as_str().unwrap_or("")),
            "artifact" => format!(
                "artifact:{}",
                data["artifact"]["tool_call_id"].as_str().unwrap_or("")
            ),
            other => other.to_string(),
        })
        .collect()
}

// ---------------------------------------------------------------------------------
// What the mock model was sent.

/// The text of a message's `content`: a string, or the `text` of its parts.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    }
}

/// The system prompt of a request.
fn system_of(body: &Value) -> String {
    let messages = body["messages"].as_array().expect("messages");
    assert_eq!(messages[0]["role"], "system", "{body}");
    text_of(&messages[0]["content"])
}

/// `(role, text)` of every message after the system prompt.
fn conversation(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_string(),
                text_of(&m["content"]),
            )
        })
        .collect()
}

fn said(role: &str, text: &str) -> (String, String) {
    (role.to_string(), text.to_string())
}

/// The names of the tools a request offers (none when it has no `tools`).
fn offered(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

// =================================================================================
// The planner.

const PLANNER_TOOLS: &str = "capabilities:\n  shell:\n    allow: [echo, bash]\n";

/// The plan is streamed line by line as text and its first line is the task's status,
/// before the execution (only the tools the plan named) and the self-check, whose text
/// is the answer.
#[test]
pub(crate) fn the_planner_streams_its_plan_executes_it_and_answers_from_its_check() {
    let script = r#"
turns:
  - text: "1. Use echo to say hi.\n2. Answer with what it said."
  - tool_calls: [{id: c1, name: echo, input: {command: hi}}]
  - text: "It said hi."
  - text: "Checked: it said hi."
"#;
    let capsule = Capsule::new("planner", &scripted(PLANNER_TOOLS), script);
    let served = Served::start(&capsule, MUR_LOOP_PLANNER, &[]);
    let frames = served.send("What does echo say?", None);
    assert_eq!(
        described(&frames),
        [
            "status:working:inference turn 1",
            "text:1. Use echo to say hi.\n",
            "text:2. Answer with what it said.\n",
            "status:working:plan: 1. Use echo to say hi.",
            "status:working:inference turn 2",
            "artifact:c1",
            "status:working:inference turn 3",
            "status:working:inference turn 4",
            "text:final",
            "status:completed",
        ]
    );
    // The seed's counters: the loop's own chunks, like a tool's, are numbered by the
    // chunk counter, which continues from the last inference call; its status is the
    // task's counter's next value. Ids are labels, so the plan's status repeats an id.
    let ids: Vec<Option<u64>> = frames.iter().map(|f| f.0).take(8).collect();
    assert_eq!(ids, [0, 1, 2, 1, 2, 3, 4, 5].map(Some));
    assert_eq!(answer(&frames), "Checked: it said hi.");
    let (session, _) = served.stop();
    let calls = session.events("tool_call");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["tool_name"], "echo");
    assert_eq!(session.events("inference").len(), 4);
}

/// What the model is sent in each phase: the plan request has no tools and the
/// planner's system addition (after the capsule's prompt) listing the capsule's tools;
/// the execution offers only the tool the plan named; the check offers none, with its
/// own addition, after the loop asked for it.
#[test]
fn the_planner_offers_no_tools_to_plan_then_only_the_tools_its_plan_names() {
    let call = openai::tool_call("call_1", "echo", r#"{"command":"hello"}"#);
    let mock = MockModel::with(vec![
        says("1. Run echo with hello.\n2. Report what it printed."),
        Reply::json(
            200,
            openai::completion(None, &[call], "tool_calls", (30, 8)),
        ),
        says("It printed hello."),
        says("It printed hello, as planned."),
    ]);
    let capsule = Capsule::new("planner-oa", &on_openai(&mock, ONE_TASK), "");
    let run = run_task(&capsule, MUR_LOOP_PLANNER, "What does echo print?", ENV);
    run.assert_ok();
    let session = run.session();
    assert_eq!(
        session.read("out/result.txt"),
        "It printed hello, as planned."
    );
    assert_eq!(mock.requests().len(), 4);
    let bodies: Vec<Value> = (0..4).map(|i| mock.request(i).json()).collect();

    // The plan: no tools, the planner's addition after the capsule's own prompt.
    let plan = &bodies[0];
    assert_eq!(offered(plan), Vec::<String>::new(), "{plan}");
    let system = system_of(plan);
    assert!(system.starts_with("[Capsule]\n"), "{system}");
    let terse = system
        .find("You are terse.")
        .expect("the manifest's prompt");
    let asked = system
        .find("Before you act, plan. Reply with a short numbered plan")
        .unwrap_or_else(|| panic!("the planner's addition: {system}"));
    assert!(terse < asked, "the capsule's prompt comes first: {system}");
    assert!(
        system[asked..].contains("Your tools:\n- echo: ") && system[asked..].contains("\n- bash: "),
        "the capsule's tools, in order: {system}"
    );
    assert_eq!(conversation(plan), [said("user", "What does echo print?")]);

    // The execution: only echo, the plan and the loop's instruction in the conversation.
    let carry_out = said("user", "Carry out your plan now, then give your answer.");
    for body in &bodies[1..3] {
        assert_eq!(offered(body), ["echo"], "{body}");
        let system = system_of(body);
        assert!(!system.contains("Before you act"), "{system}");
        assert!(system.ends_with("You are terse."), "{system}");
    }
    assert_eq!(
        conversation(&bodies[1]),
        [
            said("user", "What does echo print?"),
            said(
                "assistant",
                "1. Run echo with hello.\n2. Report what it printed."
            ),
            carry_out.clone(),
        ]
    );
    let messages = bodies[2]["messages"].as_array().expect("messages");
    let result = messages.last().expect("the tool's result");
    assert_eq!(result["role"], "tool", "{result}");
    assert_eq!(result["tool_call_id"], "call_1");
    assert!(text_of(&result["content"]).contains("hello"), "{result}");

    // The check: no tools, its own addition, the loop's question last.
    let check = &bodies[3];
    assert_eq!(offered(check), Vec::<String>::new(), "{check}");
    assert!(
        system_of(check).ends_with(
            "Check the answer you just gave against the plan you made: every step carried \
             out, the task answered. Reply with the final answer only, corrected if the \
             check found a fault."
        ),
        "{}",
        system_of(check)
    );
    let talk = conversation(check);
    assert_eq!(
        talk[talk.len() - 2..],
        [
            said("assistant", "It printed hello."),
            said(
                "user",
                "Check your answer against your plan and give the final answer."
            ),
        ]
    );
}

/// A plan that names none of the capsule's tools leaves the execution with none.
#[test]
fn a_plan_naming_no_tool_executes_with_none() {
    let mock = MockModel::with(vec![
        says("1. Answer from memory."),
        says("Four."),
        says("Four."),
    ]);
    let capsule = Capsule::new("planner-none", &on_openai(&mock, ONE_TASK), "");
    let run = run_task(&capsule, MUR_LOOP_PLANNER, "What is two and two?", ENV);
    run.assert_ok();
    assert_eq!(run.session().read("out/result.txt"), "Four.");
    let execution = mock.request(1).json();
    assert_eq!(offered(&execution), Vec::<String>::new(), "{execution}");
    assert_eq!(mock.requests().len(), 3);
}

// =================================================================================
// The critic.

/// Draft, critique, revision: the revision is the answer, and every call counted as
/// a turn of the task.
#[test]
fn the_critic_answers_with_its_revision() {
    let script = r#"
turns:
  - text: "Paris is in Germany."
  - text: "Wrong country."
  - text: "Paris is in France."
"#;
    let capsule = Capsule::new("critic", &scripted(ONE_TASK), script);
    let run = run_task(&capsule, MUR_LOOP_CRITIC, "Where is Paris?", &[]);
    run.assert_ok();
    let session = run.session();
    assert_eq!(session.read("out/result.txt"), "Paris is in France.");
    assert_eq!(session.events("inference").len(), 3);
    assert_eq!(session.events("task_end")[0]["turns"], 3);
}

/// In a threaded context the critic's second task is sent the first task's main
/// conversation (task, draft, the reviewer's words, revision) and never the critic's
/// own exchange; the critique itself has no tools and the critic's addition.
#[test]
pub(crate) fn the_critics_threaded_history_is_its_main_conversation() {
    let mock = MockModel::with(vec![
        says("Draft one."),
        says("Too short."),
        says("Revised one."),
        says("Draft two."),
        says("Fine."),
        says("Revised two."),
    ]);
    let lifecycle = "lifecycle:\n  conversation: threaded\n";
    let capsule = Capsule::new("critic-threaded", &on_openai(&mock, lifecycle), "");
    let served = Served::start(&capsule, MUR_LOOP_CRITIC, ENV);
    let first = served.send("Name a bird.", Some("ctx-critic"));
    assert_eq!(answer(&first), "Revised one.");
    let second = served.send("Name another.", Some("ctx-critic"));
    assert_eq!(answer(&second), "Revised two.");
    served.stop();
    assert_eq!(mock.requests().len(), 6);

    let critique = mock.request(1).json();
    assert_eq!(offered(&critique), Vec::<String>::new(), "{critique}");
    assert!(
        system_of(&critique).ends_with(
            "You are a critic. Say briefly what is wrong, missing or unclear in the answer; \
             do not write a new answer."
        ),
        "{}",
        system_of(&critique)
    );
    assert_eq!(
        conversation(&critique),
        [said(
            "user",
            "Critique this answer to the task.\n\nThe task:\nName a bird.\n\nThe answer:\nDraft one."
        )]
    );

    let reviewed = said("user", "A reviewer said: Too short.\nRevise your answer.");
    let revision = mock.request(2).json();
    assert_eq!(
        offered(&revision),
        ["echo", "bash"],
        "the default strategy offers every tool"
    );
    assert_eq!(
        conversation(&revision),
        [
            said("user", "Name a bird."),
            said("assistant", "Draft one."),
            reviewed.clone(),
        ]
    );

    let next = conversation(&mock.request(3).json());
    assert_eq!(
        next,
        [
            said("user", "Name a bird."),
            said("assistant", "Draft one."),
            reviewed,
            said("assistant", "Revised one."),
            said("user", "Name another."),
        ]
    );
    assert!(
        !next
            .iter()
            .any(|(_, text)| text.starts_with("Critique this answer") || text == "Too short."),
        "{next:?}"
    );
}

// =================================================================================
// Both from the manifest.

/// The planner and the critic declared as loop artifacts, `loop: <choice>` picking one
/// (their components copied beside the manifest).
fn both_declared(name: &str, choice: &str, script: &str) -> Capsule {
    let manifest = format!(
        "name: loops\nversion: \"0.1.0\"\nloop: {choice}\nartifacts:\n\
         \x20 - name: planner\n    version: \"0.2.0\"\n    runtime: loop\n    source: loops/planner.wasm\n\
         \x20 - name: critic\n    version: \"0.1.0\"\n    runtime: loop\n    source: loops/critic.wasm\n\
         inference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\n{ONE_TASK}"
    );
    let capsule = Capsule::new(name, &manifest, script);
    std::fs::create_dir_all(capsule.dir.join("loops")).unwrap();
    for (file, guest_name) in [("planner", MUR_LOOP_PLANNER), ("critic", MUR_LOOP_CRITIC)] {
        let to = capsule.dir.join(format!("loops/{file}.wasm"));
        std::fs::copy(guest(guest_name), to).unwrap();
    }
    capsule
}

/// Each loop runs from its manifest entry, named and versioned on `session_start`.
#[test]
fn the_planner_and_the_critic_run_from_their_manifest_entries() {
    let planned = "turns:\n  - text: \"1. Answer.\"\n  - text: draft\n  - text: checked\n";
    let reviewed = "turns:\n  - text: draft\n  - text: too short\n  - text: revised\n";
    for (choice, version, script, answer) in [
        ("planner", "0.2.0", planned, "checked"),
        ("critic", "0.1.0", reviewed, "revised"),
    ] {
        let capsule = both_declared(&format!("declared-{choice}"), choice, script);
        let run = capsule.run(&["--task", "Say something."]);
        run.assert_ok();
        let session = run.session();
        assert_eq!(session.read("out/result.txt"), answer, "{choice}");
        let start = &session.events("session_start")[0];
        assert_eq!(
            (&start["loop"], &start["loop_version"]),
            (&json!(choice), &json!(version))
        );
        assert_eq!(session.events("inference").len(), 3, "{choice}");
    }
}

// =================================================================================
// The default loop's parallel tool calls.

/// `lifecycle.parallel_tools: 3`: three slow calls of one reply (the slowest first) run
/// at once, so the task takes about as long as the slowest, and their artifact frames
/// still go out in call order, numbered one after another.
#[test]
fn parallel_tools_runs_three_slow_calls_at_once_with_artifacts_in_call_order() {
    let script = r#"
turns:
  - tool_calls:
      - {id: slow, name: bash, input: {command: "sleep 2; echo first"}}
      - {id: mid, name: bash, input: {command: "sleep 1.5; echo second"}}
      - {id: fast, name: bash, input: {command: "sleep 1; echo third"}}
  - text: done
"#;
    let manifest =
        scripted("capabilities:\n  shell:\n    allow: [bash]\nlifecycle:\n  parallel_tools: 3\n");
    let capsule = Capsule::new("parallel", &manifest, script);
    let served = Served::start(&capsule, MUR_SESSION_LOOP, &[]);
    let frames = served.send("Run three slow commands.", None);
    assert_eq!(answer(&frames), "done");
    assert_eq!(
        described(&frames),
        [
            "status:working:inference turn 1",
            "artifact:slow",
            "artifact:mid",
            "artifact:fast",
            "status:working:inference turn 2",
            "text:final",
            "status:completed",
        ]
    );
    let artifacts: Vec<(Option<u64>, String)> = frames
        .iter()
        .filter(|f| f.1 == "artifact")
        .map(|(id, _, d)| {
            (
                *id,
                d["artifact"]["content"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let ids: Vec<Option<u64>> = artifacts.iter().map(|a| a.0).collect();
    assert_eq!(ids, [Some(1), Some(2), Some(3)]);
    for ((_, content), printed) in artifacts.iter().zip(["first", "second", "third"]) {
        assert!(
            content.contains(&format!("Stdout:\n{printed}\n")),
            "{content}"
        );
    }

    let (session, _) = served.stop();
    let calls = session.events("tool_call");
    assert_eq!(calls.len(), 3);
    for (id, slept) in [("slow", 2000), ("mid", 1500), ("fast", 1000)] {
        let call = calls
            .iter()
            .find(|c| c["tool_call_id"] == id)
            .unwrap_or_else(|| panic!("no tool_call line for {id}: {calls:?}"));
        let ms = call["duration_ms"].as_u64().expect("duration_ms");
        assert!(ms >= slept, "{id} really slept: {call}");
    }
    // One after another they would take 4.5 s; at once, about the slowest one's 2 s.
    let task = session.events("task_end")[0]["duration_ms"]
        .as_u64()
        .expect("duration_ms");
    assert!(task < 3500, "the task took {task} ms");
}

// =================================================================================
// The host's refusals, in its words (`components/loop-probe`).

/// A capsule for the probe: the `bash` and `echo` tools, scripted turns `script`.
fn probe_capsule(name: &str, extra: &str, script: &str) -> Capsule {
    let manifest = scripted(&format!(
        "capabilities:\n  shell:\n    allow: [bash, echo]\n{extra}"
    ));
    Capsule::new(name, &manifest, script)
}

/// What the probe answered to `commands`, run as the launch task.
fn probe(capsule: &Capsule, commands: &str) -> (String, Session) {
    let run = run_task(capsule, MUR_LOOP_PROBE, commands, &[]);
    run.assert_ok();
    let session = run.session();
    (session.read("out/result.txt"), session)
}

/// The answers the probe noted before its first task, in the order it asked.
const OUTSIDE: &str = "outside infer: refused: the session loop called infer outside a task
outside status: err: the session loop called status outside a task
outside budget: err: the session loop called budget outside a task
outside compact: err: the session loop called compact outside a task
outside call-tools: err: the session loop called call-tools outside a task
outside finish-task: err: the session loop called finish-task outside a task";

/// Before its first task the loop may call nothing that needs one: each call is
/// refused naming it, and none of them reaches the model or starts a task. (`enqueue`
/// is the exception: between tasks it queues a task in a new context.)
#[test]
pub(crate) fn outside_a_task_every_call_is_refused_naming_it() {
    let capsule = probe_capsule("probe-outside", ONE_TASK, "");
    let (result, session) = probe(&capsule, "report");
    assert_eq!(result, OUTSIDE);
    assert!(session.events("inference").is_empty());
    assert_eq!(session.events("task_start").len(), 1);
}

/// Requests the host refuses before counting a turn: an unknown tool (the capsule's
/// tools listed in order), parameters off their ranges, an output cap outside 1 to
/// `inference.max_tokens`. Values at the edges of the ranges pass.
#[test]
fn infer_refuses_bad_requests_in_the_hosts_words() {
    let script = "turns:\n  - text: within range\n";
    let capsule = probe_capsule("probe-infer", ONE_TASK, script);
    let commands = "infer tools=echo,nope
infer temperature=3
infer top-p=0
infer top-p=1.5
infer stop=a,b,c,d,e
infer stop=a,
infer max-tokens=0
infer max-tokens=101
infer tools=echo temperature=2 top-p=1 stop=a,b,c,d max-tokens=100";
    let (result, session) = probe(&capsule, commands);
    let cap = "max-tokens must be between 1 and inference.max_tokens (100)";
    assert_eq!(
        result.lines().collect::<Vec<_>>(),
        [
            "infer tools=echo,nope: refused: the loop offered tool 'nope', which this capsule \
             does not have (its tools: bash, echo)"
                .to_string(),
            "infer temperature=3: refused: params.temperature must be between 0 and 2; the \
             loop sent 3"
                .into(),
            "infer top-p=0: refused: params.top_p must be above 0 and at most 1; the loop sent 0"
                .into(),
            "infer top-p=1.5: refused: params.top_p must be above 0 and at most 1; the loop \
             sent 1.5"
                .into(),
            "infer stop=a,b,c,d,e: refused: params.stop holds at most 4 sequences; the loop \
             sent 5"
                .into(),
            "infer stop=a,: refused: params.stop holds an empty sequence".into(),
            format!("infer max-tokens=0: refused: {cap}; the loop sent 0"),
            format!("infer max-tokens=101: refused: {cap}; the loop sent 101"),
            "infer tools=echo temperature=2 top-p=1 stop=a,b,c,d max-tokens=100: ok: within range"
                .into(),
        ]
    );
    // Only the request within range was a turn.
    assert_eq!(session.events("inference").len(), 1);
    assert_eq!(session.events("task_end")[0]["turns"], 1);
}

/// A capsule with no tools says so when a loop offers one.
#[test]
fn an_unknown_tool_of_a_capsule_without_tools_is_refused() {
    let capsule = Capsule::new("probe-no-tools", &scripted(ONE_TASK), "");
    let (result, _) = probe(&capsule, "infer tools=bash");
    assert_eq!(
        result,
        "infer tools=bash: refused: the loop offered tool 'bash', which this capsule does \
         not have (it has no tools)"
    );
}

/// The loop's parameters and output cap reach the provider as it names them.
#[test]
fn the_loops_params_reach_the_provider() {
    let mock = MockModel::with(vec![says("tuned")]);
    let capsule = Capsule::new("probe-params", &on_openai(&mock, ONE_TASK), "");
    let commands = "infer tools= temperature=0.5 top-p=0.9 stop=END,STOP max-tokens=17";
    let run = run_task(&capsule, MUR_LOOP_PROBE, commands, ENV);
    run.assert_ok();
    assert_eq!(
        run.session().read("out/result.txt"),
        format!("{commands}: ok: tuned")
    );
    let body = mock.request(0).json();
    assert_eq!(
        (
            &body["temperature"],
            &body["top_p"],
            &body["stop"],
            &body["max_tokens"]
        ),
        (
            &json!(0.5),
            &json!(0.9),
            &json!(["END", "STOP"]),
            &json!(17)
        ),
        "{body}"
    );
    assert_eq!(offered(&body), Vec::<String>::new(), "{body}");
}

/// `call-tools` with no call is an error, not a no-op; `budget` counts the task's turns
/// over every call and measures the messages against `context.max_tokens`; a loop's
/// status is a `working` frame with its own words.
#[test]
fn call_tools_needs_a_call_and_budget_counts_turns() {
    let extra = format!("context:\n  max_tokens: 1000\n{ONE_TASK}");
    let manifest = scripted_with("  compaction:\n    threshold: 0.5\n", &extra);
    let capsule = Capsule::new("probe-calls", &manifest, "turns:\n  - text: one turn\n");
    let flood = "x".repeat(5000);
    let (result, session) = probe(
        &capsule,
        &format!("call-tools\nbudget\ninfer\nbudget\nstatus halfway\nstatus {flood}"),
    );
    let lines: Vec<&str> = result.lines().collect();
    assert_eq!(lines.len(), 6, "{result}");
    // A status is a frame every client gets and the replay ring keeps: it is bounded.
    assert_eq!(
        lines[5],
        format!(
            "status {flood}: err: a status message holds at most 4096 bytes; the loop sent 5000"
        )
    );
    assert_eq!(
        lines[0],
        "call-tools: err: call-tools needs at least one call"
    );
    assert_eq!(lines[2], "infer: ok: one turn");
    assert_eq!(lines[4], "status halfway: ok");
    for (line, used, left) in [(lines[1], 0, 10), (lines[3], 1, 9)] {
        let head = format!("budget: ok: turns-used {used}, turns-left {left}, tokens ");
        let tokens = line
            .strip_prefix(&head)
            .and_then(|rest| rest.strip_suffix(", window 1000, threshold 0.5"))
            .unwrap_or_else(|| panic!("{line}"));
        let tokens: u64 = tokens.parse().unwrap_or_else(|_| panic!("{line}"));
        // "one two three four" in one message: a handful of tokens.
        assert!((1..=50).contains(&tokens), "{line}");
    }
    assert!(session.events("tool_call").is_empty());
}

/// `enqueue` queues follow-ups (origin `system`, lane `bg`, the task's context) until
/// the queue is full, then says so naming `lifecycle.queue_depth`.
#[test]
fn enqueue_past_the_queue_is_refused_naming_its_depth() {
    let capsule = probe_capsule("probe-enqueue", "lifecycle:\n  queue_depth: 2\n", "");
    let served = Served::start(&capsule, MUR_LOOP_PROBE, &[]);
    let frames = served.send("enqueue-until-full", Some("ctx-probe"));
    assert_eq!(
        answer(&frames),
        "enqueue-until-full: queued 2, then err: the queue is full (lifecycle.queue_depth 2): \
         the follow-up task was not queued"
    );
    // The follow-ups run after it; they end before the capsule is stopped.
    wait_for_task_ends(&served.session(), 3);
    let (session, _) = served.stop();
    let starts = session.events("task_start");
    assert_eq!(starts.len(), 3);
    for follow_up in &starts[1..] {
        assert_eq!(
            (
                &follow_up["origin"],
                &follow_up["lane"],
                &follow_up["context_id"]
            ),
            (&json!("system"), &json!("bg"), &json!("ctx-probe")),
            "{follow_up}"
        );
    }
    // Each follow-up is traced as the running task queued it, under its own id.
    let queued: Vec<Value> = session
        .events("task_enqueued")
        .iter()
        .map(|l| {
            json!([
                l["task_id"],
                l["by_task_id"],
                l["origin"],
                l["lane"],
                l["context_id"]
            ])
        })
        .collect();
    let first = &starts[0]["task_id"];
    let expected: Vec<Value> = starts[1..]
        .iter()
        .map(|s| json!([s["task_id"], first, "system", "bg", "ctx-probe"]))
        .collect();
    assert_eq!(queued, expected);
    assert_eq!(session.read("out/result.txt"), "noop: ok");
}

/// Between tasks `enqueue` queues a follow-up in a context of its own (no task runs
/// to lend it one).
#[test]
fn enqueue_between_tasks_queues_a_task_in_a_new_context() {
    let capsule = probe_capsule("probe-between", "", "");
    let served = Served::start(&capsule, MUR_LOOP_PROBE, &[]);
    let first = served.send("finish-then-enqueue\nnoop", Some("ctx-first"));
    assert_eq!(answer(&first), "finished once");
    wait_for_task_ends(&served.session(), 2);
    let report = answer(&served.send("report", None));
    let (session, _) = served.stop();
    assert_eq!(
        report,
        format!("{OUTSIDE}\nfinish-task: ok, then enqueue: ok")
    );
    let starts = session.events("task_start");
    assert_eq!(starts.len(), 3);
    let follow_up = &starts[1];
    assert_eq!(
        (&follow_up["origin"], &follow_up["lane"]),
        (&json!("system"), &json!("bg")),
        "{follow_up}"
    );
    let context = follow_up["context_id"].as_str().expect("context_id");
    assert!(!context.is_empty() && context != "ctx-first", "{follow_up}");
    assert_eq!(session.events("task_enqueued").len(), 1);
}

/// Waits until the trace holds `n` task ends.
fn wait_for_task_ends(session: &Session, n: usize) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let ended = session
            .trace_so_far()
            .iter()
            .filter(|l| l["event_type"] == "task_end")
            .count();
        if ended >= n {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{ended} of {n} tasks ended within {WAIT:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Once a task is finished it is no longer the loop's: a second `finish-task` is
/// refused as a call outside a task, and the first one's answer stands.
#[test]
fn finish_task_twice_is_refused_the_second_time() {
    let capsule = probe_capsule("probe-finish", "", "");
    let served = Served::start(&capsule, MUR_LOOP_PROBE, &[]);
    assert_eq!(
        answer(&served.send("finish-twice\nnoop", None)),
        "finished once"
    );
    let report = answer(&served.send("report", None));
    served.stop();
    assert_eq!(
        report,
        format!(
            "{OUTSIDE}\nfinish-task: ok, then finish-task: err: the session loop called \
             finish-task outside a task"
        )
    );
}
