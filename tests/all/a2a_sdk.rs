//! Issue 15's scenarios with the official A2A SDKs as clients: Python's `a2a-sdk` and
//! JS's `@a2a-js/sdk` (both 1.3.0, the v1.0 protocol) drive a capsule's address through
//! their own card resolver and client, as another agent would.
//!
//! Each scenario is a script in `tests/sdk/` (one per SDK, the same scenarios) that
//! prints one JSON line of what its SDK saw, events re-serialized as ProtoJSON by the
//! SDK itself; the checks here read that line, so both SDKs are held to the same
//! assertions and a failure shows what the client got. The SDKs are installed once
//! (see `common::sdk`); without them the tests skip, printing why.
//!
//! Every capsule is a fresh `mur run` (a `mur serve` for the hosted scenario) of the
//! scripted driver, taking tasks until it is dropped (`queue` + `sleep`); its script
//! plays across the session, so each test writes the turns its tasks consume in order.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::host::{Host, Live};
use crate::common::sdk::{Client, Sdk};
use crate::common::*;

const NAME: &str = "sdk-door";
const VERSION: &str = "1.2.3";
const DESCRIPTION: &str = "Answers A2A clients from a script";

// ---------------------------------------------------------------------------------
// Capsules.

/// The capsule every scenario drives: the scripted driver, the shell (`bash`, for
/// tool artifacts and slow tasks) and the `ask` tool (for input-required);
/// `lifecycle` is its `lifecycle:` block, if any (the queue flags come from `mur run`).
fn manifest(lifecycle: &str) -> String {
    format!(
        r#"name: {NAME}
version: "{VERSION}"
description: {DESCRIPTION}
artifacts:
  - name: ask
    runtime: tool
    source: {ask}
inference:
  driver: scripted
  script: ./script.yaml
  model: scripted-test
capabilities:
  shell:
    allow: [bash]
{lifecycle}"#,
        ask = guest(MUR_TOOL_ASK).display(),
    )
}

/// A capsule serving at its address under `host`, playing `turns` across its tasks.
struct Door {
    live: Live,
    _capsule: Capsule,
}

impl Door {
    fn start(host: Host, name: &str, turns: &[String]) -> Door {
        Door::with_lifecycle(host, name, turns, "")
    }

    fn with_lifecycle(host: Host, name: &str, turns: &[String], lifecycle: &str) -> Door {
        let script = format!("turns:\n{}", turns.concat());
        let capsule = Capsule::new(name, &manifest(lifecycle), &script);
        let live = Live::start(host, &capsule, QUEUE, &[]);
        Door {
            live,
            _capsule: capsule,
        }
    }

    fn run(name: &str, turns: &[String]) -> Door {
        Door::start(Host::Run, name, turns)
    }

    /// The address as a client is given it: `http://HOST:PORT/`, or under `mur serve`
    /// `http://HOST:PORT/c/<id>/`.
    fn url(&self) -> String {
        format!("http://{}{}", self.live.at.address, self.live.at.path)
    }

    /// The address as `mur` hands it out, which the card names as its interface:
    /// `http://HOST:PORT` for a `mur run`, `http://HOST:PORT/c/<id>/` when hosted.
    fn interface(&self) -> String {
        self.live.at.url()
    }

    fn scenario(&self, client: &Client, scenario: &str) -> Value {
        client.scenario(scenario, &self.url(), self.live.at.token())
    }
}

/// A turn calling the `ask` tool, which waits for the user's answer.
fn ask_turn(prompt: &str) -> String {
    format!(
        "  - tool_calls: [{{id: a1, name: ask, input: {{prompt: {}}}}}]\n",
        json!(prompt)
    )
}

// ---------------------------------------------------------------------------------
// Reading what an SDK saw: v1 ProtoJSON, as the SDKs re-serialize it.

/// The payload of a stream event (`{"task": ...}`, `{"statusUpdate": ...}`, ...):
/// its kind and body.
fn payload(event: &Value) -> (&str, &Value) {
    let map = event.as_object().expect("an event is an object");
    assert_eq!(map.len(), 1, "an event has one payload: {event}");
    let (kind, body) = map.iter().next().unwrap();
    (kind.as_str(), body)
}

fn kind(event: &Value) -> &str {
    payload(event).0
}

/// The state a task or status event reports.
fn state(event: &Value) -> Option<&str> {
    let (kind, body) = payload(event);
    matches!(kind, "task" | "statusUpdate").then(|| body["status"]["state"].as_str().unwrap_or(""))
}

/// The task an event is about.
fn task_of(event: &Value) -> &str {
    let (kind, body) = payload(event);
    let key = if kind == "task" { "id" } else { "taskId" };
    body[key].as_str().unwrap_or_default()
}

/// `metadata.murmur.seq` of an event (a task snapshot carries it on the task). The
/// Python SDK holds metadata as a protobuf `Struct`, whose numbers are doubles.
fn seq(event: &Value) -> Option<u64> {
    let value = &payload(event).1["metadata"]["murmur"]["seq"];
    value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0)
            .map(|f| f as u64)
    })
}

/// The text of a message or an artifact: its text parts, joined.
fn text(parts_holder: &Value) -> String {
    parts_holder["parts"]
        .as_array()
        .map(|parts| parts.iter().filter_map(|p| p["text"].as_str()).collect())
        .unwrap_or_default()
}

/// One label per event, for failure messages: `task:SUBMITTED@Some(1)`,
/// `status:WORKING@Some(2)`, `artifact:bash@Some(3)`.
fn labels(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            let (kind, body) = payload(e);
            let what = match kind {
                "task" | "statusUpdate" => {
                    let state = body["status"]["state"].as_str().unwrap_or("?");
                    let short = if kind == "task" { "task" } else { "status" };
                    format!("{short}:{}", state.trim_start_matches("TASK_STATE_"))
                }
                "artifactUpdate" => {
                    format!(
                        "artifact:{}",
                        body["artifact"]["name"].as_str().unwrap_or("?")
                    )
                }
                other => other.to_string(),
            };
            format!("{what}@{:?}", seq(e))
        })
        .collect()
}

fn events<'a>(seen: &'a Value, key: &str) -> &'a [Value] {
    seen[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key:?} in {seen}"))
}

/// The artifacts of a stream's artifact updates, in order.
fn streamed_artifacts(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| kind(e) == "artifactUpdate")
        .map(|e| &payload(e).1["artifact"])
        .collect()
}

/// The task's final status, as a stream or a blocking send reports it: the last
/// event's status.
fn final_status(events: &[Value]) -> &Value {
    let last = events.last().expect("at least one event");
    &payload(last).1["status"]
}

/// The artifact named `name` among `artifacts`; exactly one.
fn artifact<'a>(artifacts: &[&'a Value], name: &str) -> &'a Value {
    let named: Vec<_> = artifacts.iter().filter(|a| a["name"] == name).collect();
    assert_eq!(named.len(), 1, "one {name:?} artifact among {artifacts:?}");
    named[0]
}

fn task_artifacts(task: &Value) -> Vec<&Value> {
    task["artifacts"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

/// A run of events' sequence numbers, checked: every event carries one and each is
/// the one before plus one (a task snapshot first counts as the last seq it
/// includes). Returns the first and the last.
fn contiguous(events: &[Value]) -> (u64, u64) {
    let seqs: Vec<Option<u64>> = events.iter().map(seq).collect();
    assert!(
        seqs.iter().all(Option::is_some),
        "every event has a seq: {:?}",
        labels(events)
    );
    let seqs: Vec<u64> = seqs.into_iter().flatten().collect();
    let expected: Vec<u64> = (seqs[0]..seqs[0] + seqs.len() as u64).collect();
    assert_eq!(
        seqs,
        expected,
        "one seq after another: {:?}",
        labels(events)
    );
    (seqs[0], *seqs.last().unwrap())
}

fn ids(list: &Value) -> Vec<&str> {
    list["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("no tasks in {list}"))
        .iter()
        .map(|t| t["id"].as_str().unwrap_or_default())
        .collect()
}

fn history(task: &Value) -> Vec<&Value> {
    task["history"]
        .as_array()
        .map(|h| h.iter().collect())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------
// The scenarios, each run with both SDKs.

macro_rules! for_each_sdk {
    ($($scenario:ident),* $(,)?) => {$(
        pub(crate) mod $scenario {
            use crate::common::sdk::Sdk;

            #[test]
            pub(crate) fn python() {
                if let Some(client) = Sdk::Python.client() {
                    super::$scenario(client);
                }
            }

            #[test]
            pub(crate) fn js() {
                if let Some(client) = Sdk::Js.client() {
                    super::$scenario(client);
                }
            }
        }
    )*};
}

for_each_sdk!(
    the_card_resolves_to_the_capsule_and_its_interface,
    a_sent_message_returns_the_completed_task_with_the_answer,
    a_streamed_task_shows_the_tool_artifact_and_the_answer,
    a_canceled_task_ends_canceled_and_its_command_stops,
    an_input_required_task_takes_its_answer_on_the_same_task,
    tasks_are_fetched_with_their_history_and_listed_by_last_update,
    a_dropped_stream_resumes_from_last_event_id_with_nothing_lost_or_repeated,
    a_hosted_capsule_publishes_its_bearer_scheme_and_the_sdk_authenticates_by_it,
    a_polling_send_returns_at_once_and_get_task_sees_it_complete,
    a_subscriber_joining_mid_task_gets_the_task_so_far_then_every_later_event,
    a_resume_from_events_no_longer_kept_is_refused_naming_the_first_kept,
    queued_rejected_canceled_and_failed_tasks_show_v1_states_and_list_by_last_update,
    a_blocking_send_returns_at_input_required_and_a_waiting_task_can_be_canceled,
    a_streamed_reply_comes_in_appended_chunks_that_add_up_to_the_answer,
);

/// The card at `<address>.well-known/agent-card.json`, through the SDK's resolver: the
/// manifest's name, description and version, the address as the JSON-RPC interface
/// at v1.0, streaming, text in and out, a skill per tool, no security on an open
/// address; and the SDK builds a client from it.
fn the_card_resolves_to_the_capsule_and_its_interface(client: &Client) {
    let door = Door::run("sdk-card", &[]);
    let seen = door.scenario(client, "card");
    let card = &seen["card"];
    assert_eq!(
        (&card["name"], &card["description"], &card["version"]),
        (&json!(NAME), &json!(DESCRIPTION), &json!(VERSION)),
        "{card:#}"
    );
    assert_eq!(
        card["supportedInterfaces"],
        json!([{"url": door.interface(), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]),
        "{card:#}"
    );
    assert_eq!(card["capabilities"]["streaming"], true, "{card:#}");
    for modes in ["defaultInputModes", "defaultOutputModes"] {
        assert!(
            card[modes]
                .as_array()
                .is_some_and(|m| m.contains(&json!("text/plain"))),
            "{modes}: {card:#}"
        );
    }
    let skills = card["skills"]
        .as_array()
        .unwrap_or_else(|| panic!("no skills: {card:#}"));
    for skill in skills {
        assert_eq!(
            skill["id"], skill["name"],
            "a skill is named by its tool: {skill}"
        );
    }
    let names: Vec<&str> = skills.iter().filter_map(|s| s["id"].as_str()).collect();
    assert!(
        names.contains(&"ask") && names.contains(&"bash"),
        "{names:?}"
    );
    assert!(
        card.get("securitySchemes").is_none(),
        "an open address: {card:#}"
    );
    assert_eq!(seen["client"], "created");
}

/// A blocking `SendMessage`: one Task back, completed, with the script's answer as
/// the agent's status message and as the `response` artifact, under minted ids.
fn a_sent_message_returns_the_completed_task_with_the_answer(client: &Client) {
    let answer = "Hello from the capsule";
    let door = Door::run("sdk-send", &[text_turn(answer)]);
    let seen = door.scenario(client, "send");
    let events = events(&seen, "events");
    assert_eq!(events.len(), 1, "{:?}", labels(events));
    let task = &events[0]["task"];
    assert_completed_task(task, answer);
}

/// What a completed task says of itself: minted ids, the state, the answer as the
/// agent's status message and as its `response` artifact.
fn assert_completed_task(task: &Value, answer: &str) {
    let id = task["id"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {task:#}"));
    assert!(id.starts_with("tsk_"), "{task:#}");
    assert!(
        task["contextId"]
            .as_str()
            .is_some_and(|c| c.starts_with("ctx_")),
        "{task:#}"
    );
    let status = &task["status"];
    assert_eq!(status["state"], "TASK_STATE_COMPLETED", "{task:#}");
    assert_eq!(status["message"]["role"], "ROLE_AGENT", "{task:#}");
    assert_eq!(text(&status["message"]), answer, "{task:#}");
    assert_eq!(
        text(artifact(&task_artifacts(task), "response")),
        answer,
        "{task:#}"
    );
}

/// `SendStreamingMessage` of a task that calls a tool: the task first (submitted),
/// then the turn's working status, the tool's artifact (its name, fenced output and
/// murmur metadata), the `response` artifact, and the completed status with the
/// answer, last; every event of the one task, numbered one after another.
fn a_streamed_task_shows_the_tool_artifact_and_the_answer(client: &Client) {
    let answer = "The tool said 42";
    let door = Door::run(
        "sdk-stream",
        &[bash_turn("echo tool-says-42"), text_turn(answer)],
    );
    let seen = door.scenario(client, "stream_tool");
    let events = events(&seen, "events");
    let labels = labels(events);
    assert_eq!(kind(&events[0]), "task", "{labels:?}");
    assert_eq!(
        state(&events[0]),
        Some("TASK_STATE_SUBMITTED"),
        "{labels:?}"
    );
    let task = task_of(&events[0]);
    assert!(events.iter().all(|e| task_of(e) == task), "{labels:?}");
    contiguous(events);

    let working: Vec<String> = events
        .iter()
        .filter(|e| state(e) == Some("TASK_STATE_WORKING"))
        .map(|e| text(&payload(e).1["status"]["message"]))
        .collect();
    assert!(
        working.contains(&"inference turn 1".to_string()),
        "{working:?}"
    );

    let artifacts = streamed_artifacts(events);
    let tool = artifact(&artifacts, "bash");
    assert!(text(tool).contains("tool-says-42"), "{tool:#}");
    let murmur = &tool["metadata"]["murmur"];
    assert_eq!(murmur["toolCallId"], "t1", "{tool:#}");
    assert_eq!(murmur["isError"], false, "{tool:#}");
    assert_eq!(murmur["exitCode"].as_f64(), Some(0.0), "{tool:#}");
    assert_eq!(text(artifact(&artifacts, "response")), answer);

    let terminal: Vec<&Value> = events
        .iter()
        .filter(|e| {
            state(e).is_some_and(|s| s != "TASK_STATE_SUBMITTED" && s != "TASK_STATE_WORKING")
        })
        .collect();
    assert_eq!(terminal.len(), 1, "{labels:?}");
    assert_eq!(kind(events.last().unwrap()), "statusUpdate", "{labels:?}");
    let status = final_status(events);
    assert_eq!(status["state"], "TASK_STATE_COMPLETED", "{labels:?}");
    assert_eq!(status["message"]["role"], "ROLE_AGENT");
    assert_eq!(text(&status["message"]), answer);
}

/// `CancelTask` while the task's tool sleeps: the stream ends `CANCELED`, `GetTask`
/// says `CANCELED`, all well before the sleep would have ended, and the command is
/// gone.
fn a_canceled_task_ends_canceled_and_its_command_stops(client: &Client) {
    let sleep = marker(30);
    let _guard = KillOnDrop(sleep.clone());
    let door = Door::run(
        "sdk-cancel",
        &[
            bash_turn(&format!("exec sleep {sleep}")),
            text_turn("should not be said"),
        ],
    );
    let seen = door.scenario(client, "cancel");
    let events = events(&seen, "events");
    let task = task_of(&events[0]);
    assert_eq!(
        seen["followUp"]["error"], "UnsupportedOperationError",
        "a follow-up to a running task: {:#}",
        seen["followUp"]
    );
    let canceled = &seen["cancel"];
    assert_eq!(canceled["id"], task, "{canceled:#}");
    // The answer to CancelTask may come before the task has stopped.
    assert!(
        matches!(
            canceled["status"]["state"].as_str(),
            Some("TASK_STATE_CANCELED" | "TASK_STATE_WORKING")
        ),
        "{canceled:#}"
    );
    assert_eq!(
        final_status(events)["state"],
        "TASK_STATE_CANCELED",
        "{:?}",
        labels(events)
    );
    assert_eq!(
        seen["task"]["status"]["state"], "TASK_STATE_CANCELED",
        "{:#}",
        seen["task"]
    );
    assert!(
        seen["seconds"].as_f64().unwrap() < 15.0,
        "{}",
        seen["seconds"]
    );
    eventually(Duration::from_secs(10), "the canceled command ends", || {
        pids_running(&sleep).is_empty()
    });
    assert_eq!(
        seen["cancelAgain"]["error"], "TaskNotCancelableError",
        "canceling an ended task: {:#}",
        seen["cancelAgain"]
    );
}

/// A tool asks (`request-input`): the stream closes at `INPUT_REQUIRED` with the
/// prompt; the client's answer, sent on the same task and context, reaches the tool
/// and the task completes with it (the script echoes the tool's result).
fn an_input_required_task_takes_its_answer_on_the_same_task(client: &Client) {
    let door = Door::run(
        "sdk-input",
        &[ask_turn("Which file?"), text_turn("{{last_tool_result}}")],
    );
    let seen = door.scenario(client, "input");
    let context = seen["contextId"].as_str().unwrap();
    let asked = events(&seen, "asked");
    let task = task_of(&asked[0]);
    assert_eq!(
        state(&asked[0]),
        Some("TASK_STATE_SUBMITTED"),
        "{:?}",
        labels(asked)
    );
    assert!(
        asked.iter().all(|e| payload(e).1["contextId"] == context),
        "the client's context on every event: {asked:#?}"
    );
    let waiting = final_status(asked);
    assert_eq!(
        waiting["state"],
        "TASK_STATE_INPUT_REQUIRED",
        "{:?}",
        labels(asked)
    );
    assert_eq!(text(&waiting["message"]), "Which file?");

    assert_eq!(
        seen["waiting"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "GetTask while it waits: {:#}",
        seen["waiting"]
    );

    let answered = events(&seen, "answered");
    assert!(
        answered.iter().all(|e| task_of(e) == task),
        "{:?}",
        labels(answered)
    );
    let done = final_status(answered);
    assert_eq!(
        done["state"],
        "TASK_STATE_COMPLETED",
        "{:?}",
        labels(answered)
    );
    assert!(text(&done["message"]).contains("README.md"), "{done:#}");
    if answered.len() > 1 {
        // Streamed: the task says it resumed before the tool's result comes.
        let resumed = answered.iter().any(|e| {
            state(e) == Some("TASK_STATE_WORKING")
                && text(&payload(e).1["status"]["message"]) == "resumed"
        });
        assert!(resumed, "{answered:#?}");
    }

    let fetched = &seen["task"];
    assert_eq!(
        (&fetched["id"], &fetched["contextId"]),
        (&json!(task), &json!(context))
    );
    assert_eq!(
        fetched["status"]["state"], "TASK_STATE_COMPLETED",
        "{fetched:#}"
    );
    assert!(
        text(artifact(&task_artifacts(fetched), "ask")).contains("README.md"),
        "{fetched:#}"
    );
    let said: Vec<String> = history(fetched).iter().map(|m| text(m)).collect();
    assert!(
        said.contains(&"summarise a file".to_string()) && said.contains(&"README.md".to_string()),
        "the user's messages in the history: {said:?}"
    );
}

/// Three blocking sends (two in one context, one in another), then `GetTask` with and
/// without `historyLength`, and `ListTasks`: all, by context, by state, by pages of
/// two (most recently updated first throughout, as the spec orders them, which for
/// tasks sent one after another is newest first), an unknown id's
/// `TaskNotFoundError` and a message to an ended task refused.
fn tasks_are_fetched_with_their_history_and_listed_by_last_update(client: &Client) {
    let answers = ["one", "two", "three"];
    let door = Door::run("sdk-tasks", &answers.map(text_turn));
    let seen = door.scenario(client, "tasks");
    let contexts = &seen["contexts"];
    let sent: Vec<&Value> = seen["sent"].as_array().unwrap().iter().collect();
    for (task, answer) in sent.iter().zip(answers) {
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task:#}");
        assert_eq!(text(&task["status"]["message"]), answer, "{task:#}");
    }
    let contexts_sent: Vec<&Value> = sent.iter().map(|t| &t["contextId"]).collect();
    assert_eq!(contexts_sent, [&contexts[0], &contexts[0], &contexts[1]]);
    let [t1, t2, t3] = [0, 1, 2].map(|i| sent[i]["id"].as_str().unwrap());

    let full = history(&seen["full"]);
    assert_eq!(seen["full"]["id"], t1);
    assert!(!full.is_empty(), "{:#}", seen["full"]);
    assert_eq!(
        history(&seen["last1"]),
        [*full.last().unwrap()],
        "historyLength 1: the last"
    );
    assert!(
        history(&seen["none"]).is_empty(),
        "historyLength 0: {:#}",
        seen["none"]
    );

    assert_eq!(ids(&seen["all"]), [t3, t2, t1], "{:#}", seen["all"]);
    assert_eq!(
        seen["all"]["totalSize"].as_f64(),
        Some(3.0),
        "{:#}",
        seen["all"]
    );
    assert!(
        seen["all"]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t.get("artifacts").is_none()),
        "no artifacts unless asked for: {:#}",
        seen["all"]
    );
    assert_eq!(ids(&seen["inA"]), [t2, t1], "{:#}", seen["inA"]);
    assert_eq!(
        ids(&seen["completed"]),
        [t3, t2, t1],
        "{:#}",
        seen["completed"]
    );
    assert_eq!(ids(&seen["page1"]), [t3, t2], "{:#}", seen["page1"]);
    assert!(
        seen["page1"]["nextPageToken"]
            .as_str()
            .is_some_and(|t| !t.is_empty())
    );
    assert_eq!(ids(&seen["page2"]), [t1], "{:#}", seen["page2"]);
    assert!(
        seen["page2"]["nextPageToken"]
            .as_str()
            .is_none_or(str::is_empty)
    );

    assert_eq!(
        seen["missing"]["error"], "TaskNotFoundError",
        "{:#}",
        seen["missing"]
    );
    for call in ["cancelMissing", "subscribeMissing"] {
        assert_eq!(
            seen[call]["error"], "TaskNotFoundError",
            "{call}: {:#}",
            seen[call]
        );
    }
    assert_eq!(
        seen["sendToUnknown"]["error"], "TaskNotFoundError",
        "a message to an unknown task: {:#}",
        seen["sendToUnknown"]
    );
    assert_eq!(
        seen["sendToEnded"]["error"], "UnsupportedOperationError",
        "a message to an ended task: {:#}",
        seen["sendToEnded"]
    );
}

/// A stream dropped after the first tool's artifact, and `SubscribeToTask` with
/// `Last-Event-ID` set to that event's seq a second later: the new stream starts at
/// the next seq (no snapshot first), and the two together hold every event exactly
/// once, in order, to the completed status. Afterwards the ended task refuses a
/// subscription (`UnsupportedOperationError`).
fn a_dropped_stream_resumes_from_last_event_id_with_nothing_lost_or_repeated(client: &Client) {
    let steps = ["one", "two", "three", "four"];
    let mut turns: Vec<String> = steps
        .iter()
        .map(|s| bash_turn(&format!("sleep 0.4; echo step-{s}")))
        .collect();
    turns.push(text_turn("all steps done"));
    let door = Door::run("sdk-resume", &turns);
    let seen = door.scenario(client, "resubscribe");
    let first = events(&seen, "first");
    let second = events(&seen, "second");
    let last_seen = seen["lastEventId"].as_u64().unwrap();
    assert_eq!(kind(&first[0]), "task", "{:?}", labels(first));
    assert_eq!(
        seq(first.last().unwrap()),
        Some(last_seen),
        "{:?}",
        labels(first)
    );
    assert!(
        !second.is_empty(),
        "nothing after Last-Event-ID {last_seen}"
    );
    assert_ne!(
        kind(&second[0]),
        "task",
        "no snapshot after Last-Event-ID: {:?}",
        labels(second)
    );
    assert_eq!(seq(&second[0]), Some(last_seen + 1), "{:?}", labels(second));

    let all: Vec<Value> = first.iter().chain(second).cloned().collect();
    contiguous(&all);
    let task = task_of(&first[0]);
    assert!(all.iter().all(|e| task_of(e) == task), "{:?}", labels(&all));
    let outputs: Vec<String> = streamed_artifacts(&all)
        .iter()
        .filter(|a| a["name"] == "bash")
        .map(|a| text(a))
        .collect();
    assert_eq!(outputs.len(), steps.len(), "{outputs:?}");
    for (output, step) in outputs.iter().zip(steps) {
        assert!(output.contains(&format!("step-{step}")), "{outputs:?}");
    }
    let done = final_status(second);
    assert_eq!(
        done["state"],
        "TASK_STATE_COMPLETED",
        "{:?}",
        labels(second)
    );
    assert_eq!(text(&done["message"]), "all steps done");

    assert_eq!(
        seen["afterEnd"]["error"], "UnsupportedOperationError",
        "{:#}",
        seen["afterEnd"]
    );
}

/// Under `mur serve` the address wants its token. A client that knows only the
/// address reads the card without one: it names the bearer scheme and requires it,
/// and its interface is the capsule's `/c/<id>/` address. Without the token a send is
/// refused (401); with it, through the SDK's own authentication (Python's
/// `AuthInterceptor` reading the scheme off the card, JS's handler retrying the 401
/// that names `Bearer`), the task completes; and so it does with the token simply
/// sent on every request.
fn a_hosted_capsule_publishes_its_bearer_scheme_and_the_sdk_authenticates_by_it(client: &Client) {
    let answers = ["Hello, authenticated", "Hello again"];
    let door = Door::start(Host::Serve, "sdk-served", &answers.map(text_turn));
    assert!(
        door.live.at.token().is_some(),
        "a hosted capsule has a token"
    );
    assert!(door.interface().ends_with("/"), "{}", door.interface());
    let seen = door.scenario(client, "auth");
    let card = &seen["card"];
    assert_eq!(
        card["supportedInterfaces"][0]["url"],
        door.url(),
        "{card:#}"
    );
    let schemes = card["securitySchemes"]
        .as_object()
        .expect("security schemes");
    assert_eq!(schemes.len(), 1, "{card:#}");
    assert_eq!(
        schemes["bearer"]["httpAuthSecurityScheme"]["scheme"], "Bearer",
        "{card:#}"
    );
    assert_eq!(
        card["securityRequirements"],
        json!([{"schemes": {"bearer": {}}}]),
        "the bearer scheme, no scopes: {card:#}"
    );

    // Python reports the HTTP status, JS the JSON-RPC error in the 401's body.
    let without = &seen["without"];
    let refused = without["message"].as_str().unwrap_or_default();
    assert!(
        without["error"].is_string()
            && (refused.contains("401") || refused.contains("Unauthorized")),
        "refused without the token: {without:#}"
    );
    if client.sdk() == Sdk::Js {
        assert_eq!(
            seen["retriedWithToken"], true,
            "the 401 asked for the token"
        );
    }
    let authenticated = events(&seen, "events");
    let done = final_status(authenticated);
    assert_eq!(
        done["state"],
        "TASK_STATE_COMPLETED",
        "{:?}",
        labels(authenticated)
    );
    assert_eq!(text(&done["message"]), answers[0]);

    let sent = door.scenario(client, "send");
    assert_completed_task(&events(&sent, "events")[0]["task"], answers[1]);
}

/// The SDKs' `polling` client: `SendMessage` with `returnImmediately` answers at once
/// with the task not yet ended, and `GetTask` then sees it complete with the answer.
fn a_polling_send_returns_at_once_and_get_task_sees_it_complete(client: &Client) {
    let answer = "Took my time";
    let door = Door::run("sdk-poll", &[bash_turn("sleep 1"), text_turn(answer)]);
    let seen = door.scenario(client, "poll");
    let returned = &seen["returned"];
    assert!(
        matches!(
            returned["status"]["state"].as_str(),
            Some("TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING")
        ),
        "not waited for: {returned:#}"
    );
    assert_eq!(seen["task"]["id"], returned["id"]);
    assert_completed_task(&seen["task"], answer);
}

/// `SubscribeToTask` without a cursor while another client streams the task: the
/// subscriber gets the task as it stands first (its seq the last event it includes,
/// the tool's artifact among its artifacts), then exactly the events the first client
/// reads after that seq, to the completed status.
fn a_subscriber_joining_mid_task_gets_the_task_so_far_then_every_later_event(client: &Client) {
    let answer = "Watched to the end";
    let door = Door::run(
        "sdk-subscribe",
        &[
            bash_turn("echo first-tool"),
            bash_turn("sleep 1; echo second-tool"),
            text_turn(answer),
        ],
    );
    let seen = door.scenario(client, "subscribe");
    let sent = events(&seen, "sent");
    let subscribed = events(&seen, "subscribed");
    contiguous(sent);
    let (snapshot, _) = contiguous(subscribed);

    let now = &subscribed[0];
    assert_eq!(
        kind(now),
        "task",
        "the task first: {:?}",
        labels(subscribed)
    );
    assert_eq!(task_of(now), task_of(&sent[0]));
    assert_eq!(state(now), Some("TASK_STATE_WORKING"), "{now:#}");
    let so_far = task_artifacts(&now["task"]);
    assert!(
        text(artifact(&so_far, "bash")).contains("first-tool"),
        "{now:#}"
    );
    let first_artifact = sent
        .iter()
        .position(|e| kind(e) == "artifactUpdate")
        .unwrap();
    assert!(
        snapshot >= seq(&sent[first_artifact]).unwrap(),
        "the snapshot includes what happened before it: {:?}",
        labels(subscribed)
    );

    let later: Vec<&Value> = sent.iter().filter(|e| seq(e) > Some(snapshot)).collect();
    let live: Vec<&Value> = subscribed[1..].iter().collect();
    assert_eq!(live, later, "the same events after the snapshot");
    let done = final_status(subscribed);
    assert_eq!(
        done["state"],
        "TASK_STATE_COMPLETED",
        "{:?}",
        labels(subscribed)
    );
    assert_eq!(text(&done["message"]), answer);
}

/// A reply streamed in more chunks than an ended task keeps events for (the task run
/// with a blocking send, so that only the resumptions stream): resuming from the
/// start is refused (invalid params, as the SDK maps it) naming the first
/// event still kept, in the message and the error's data; resuming from just before
/// that one replays from it to the end; resuming near the end replays the tail.
fn a_resume_from_events_no_longer_kept_is_refused_naming_the_first_kept(client: &Client) {
    let chunks: Vec<String> = (0..300).map(|n| format!("c{n} ")).collect();
    let door = Door::run("sdk-late", &[format!("  - chunks: {}\n", json!(chunks))]);
    let seen = door.scenario(client, "late");
    let task = &seen["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task:#}");
    let last = seq(&json!({ "task": task })).unwrap();
    assert!(last > 300, "a chunk an event: {last}");

    let gone = &seen["gone"];
    let mapped = match client.sdk() {
        Sdk::Python => "InvalidParamsError",
        Sdk::Js => "RequestMalformedError",
    };
    assert_eq!(gone["error"], mapped, "{gone:#}");
    let kept = seen["fromFirstKept"].as_array().unwrap();
    let first = kept[0].as_u64().unwrap();
    assert!(first > 2 && first <= last, "{gone:#}");
    assert!(
        gone["message"]
            .as_str()
            .unwrap()
            .contains(&format!("the first kept is {first}")),
        "{gone:#}"
    );
    assert_eq!(
        kept.iter().map(|s| s.as_u64().unwrap()).collect::<Vec<_>>(),
        (first..=last).collect::<Vec<_>>()
    );

    let tail = events(&seen, "tail");
    assert_eq!(
        tail.iter().map(seq).collect::<Vec<_>>(),
        [Some(last - 1), Some(last)]
    );
    assert_eq!(final_status(tail)["state"], "TASK_STATE_COMPLETED");
}

/// A capsule with one queue place, busy with task A: task B (sent with
/// `returnImmediately`) waits `SUBMITTED`, task C is `REJECTED` with the reason, B
/// canceled in the queue ends `CANCELED` at once, A completes, and D, whose model
/// turn is an error, ends `FAILED`. `ListTasks` orders them by their last update, as
/// the spec says: D, A, B, C.
fn queued_rejected_canceled_and_failed_tasks_show_v1_states_and_list_by_last_update(
    client: &Client,
) {
    let turns = [
        bash_turn("sleep 2"),
        text_turn("A done"),
        "  - error: the model is down\n".to_string(),
    ];
    let door = Door::with_lifecycle(
        Host::Run,
        "sdk-queue",
        &turns,
        "lifecycle:\n  queue_depth: 1\n",
    );
    let seen = door.scenario(client, "queue");
    let state_of = |task: &Value| task["status"]["state"].as_str().unwrap_or("").to_string();
    let said = |task: &Value| text(&task["status"]["message"]);

    let b = &seen["b"]["task"];
    assert_eq!(state_of(b), "TASK_STATE_SUBMITTED", "B waits: {b:#}");
    let c = &seen["c"]["task"];
    assert_eq!(
        state_of(c),
        "TASK_STATE_REJECTED",
        "C is turned away: {:#}",
        seen["c"]
    );
    assert!(said(c).contains("busy"), "{c:#}");
    let canceled = &seen["cancelB"];
    assert_eq!(canceled["id"], b["id"]);
    assert_eq!(state_of(canceled), "TASK_STATE_CANCELED", "{canceled:#}");
    assert_eq!(state_of(&seen["getB"]), "TASK_STATE_CANCELED");
    let a = events(&seen, "a");
    assert_eq!(
        final_status(a)["state"],
        "TASK_STATE_COMPLETED",
        "{:?}",
        labels(a)
    );
    let d = &seen["d"]["task"];
    assert_eq!(state_of(d), "TASK_STATE_FAILED", "{:#}", seen["d"]);

    let [a, b, c, d] = [
        task_of(&a[0]),
        b["id"].as_str().unwrap(),
        c["id"].as_str().unwrap(),
        d["id"].as_str().unwrap(),
    ];
    assert_eq!(ids(&seen["list"]), [d, a, b, c], "{:#}", seen["list"]);
}

/// Blocking `SendMessage` only: a task whose tool asks comes back at
/// `INPUT_REQUIRED` with the prompt (the call does not wait for an end that needs
/// the caller); canceled while it waits it ends `CANCELED`; the next task asks too,
/// and a blocking answer on it returns it completed with the answer.
fn a_blocking_send_returns_at_input_required_and_a_waiting_task_can_be_canceled(client: &Client) {
    let door = Door::run(
        "sdk-blocking-input",
        &[
            ask_turn("First?"),
            ask_turn("Second?"),
            text_turn("{{last_tool_result}}"),
        ],
    );
    let seen = door.scenario(client, "blocking_input");
    let first = &seen["first"];
    assert_eq!(
        first["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{first:#}"
    );
    assert_eq!(text(&first["status"]["message"]), "First?");
    for key in ["cancelFirst", "getFirst"] {
        assert_eq!(seen[key]["id"], first["id"]);
        assert_eq!(
            seen[key]["status"]["state"], "TASK_STATE_CANCELED",
            "{key}: {:#}",
            seen[key]
        );
    }
    let second = &seen["second"];
    assert_eq!(
        second["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{second:#}"
    );
    assert_eq!(text(&second["status"]["message"]), "Second?");
    let answered = &seen["answered"];
    assert_eq!(answered["id"], second["id"]);
    assert_eq!(
        answered["status"]["state"], "TASK_STATE_COMPLETED",
        "{answered:#}"
    );
    assert!(
        text(&answered["status"]["message"]).contains("42"),
        "{answered:#}"
    );
}

/// A reply the model streams: artifact updates of one artifact, the first not
/// appended, the rest appended, the last flagged `lastChunk`; put together as a
/// client does (by `artifactId`, honouring `append`) they are the answer, byte for
/// byte (non-ASCII and a newline included), as are the `response` artifact and the
/// completed status.
fn a_streamed_reply_comes_in_appended_chunks_that_add_up_to_the_answer(client: &Client) {
    let chunks = ["Hel", "lo ", "wörld ✓\nsecond line"];
    let answer = chunks.concat();
    let door = Door::run("sdk-chunks", &[format!("  - chunks: {}\n", json!(chunks))]);
    let seen = door.scenario(client, "stream_tool");
    let events = events(&seen, "events");
    contiguous(events);
    let updates: Vec<&Value> = events
        .iter()
        .filter(|e| kind(e) == "artifactUpdate")
        .map(|e| &e["artifactUpdate"])
        .collect();
    let mut assembled: Vec<(String, String, bool)> = Vec::new();
    for update in &updates {
        let id = update["artifact"]["artifactId"]
            .as_str()
            .unwrap()
            .to_string();
        let part = text(&update["artifact"]);
        let last = update["lastChunk"] == true;
        match assembled.iter_mut().find(|(known, _, _)| *known == id) {
            Some((_, so_far, ended)) => {
                assert!(!*ended, "an update after the last chunk: {updates:#?}");
                assert_eq!(update["append"], true, "{update:#}");
                so_far.push_str(&part);
                *ended = last;
            }
            None => {
                assert_ne!(update["append"], true, "the first chunk appends to nothing");
                assembled.push((id, part, last));
            }
        }
    }
    assert!(
        assembled.iter().all(|(_, _, ended)| *ended),
        "{assembled:?}"
    );
    let streamed: Vec<&(String, String, bool)> = assembled
        .iter()
        .filter(|(id, _, _)| id != "response")
        .collect();
    assert_eq!(streamed.len(), 1, "one streamed reply: {assembled:?}");
    assert_eq!(streamed[0].1, answer);
    let response = assembled.iter().find(|(id, _, _)| id == "response");
    assert_eq!(response.map(|r| r.1.as_str()), Some(answer.as_str()));
    assert_eq!(text(&final_status(events)["message"]), answer);
}

/// The README's Python client ("A2A v1.0 clients"), run as written against the hello
/// example (started as the README starts it, the address it prints put in place of
/// the README's): it prints the hello capsule's answer.
#[test]
fn the_readmes_python_client_prints_the_hello_answer() {
    let Some(client) = Sdk::Python.client() else {
        return;
    };
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let section = readme
        .split_once("### A2A v1.0 clients")
        .expect("the README's A2A section")
        .1;
    let code = section
        .split_once("```python\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .expect("a Python block in the A2A section")
        .0;
    assert!(code.lines().count() <= 12, "ten lines or so:\n{code}");
    let readme_url = "http://localhost:52222";
    assert!(code.contains(readme_url), "{code}");

    let hello = Capsule {
        dir: repo().join("examples/hello"),
    };
    let workdir = scratch("sdk-readme");
    let mut args = vec!["--workdir", workdir.to_str().unwrap()];
    args.extend_from_slice(QUEUE);
    let running = hello.spawn(&args);
    let url = format!("http://{}", running.address);
    let run = client.python(&code.replace(readme_url, &url));
    assert_eq!(
        run.status, 0,
        "stdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
    assert!(
        run.stdout.starts_with("My workdir holds the files below"),
        "{}",
        run.stdout
    );
}
