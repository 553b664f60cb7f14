//! Formations end to end (`mur run --roster`): members in one process on scripted
//! drivers, a call between them through the callee's door code, and what each side
//! sees: the caller's frames and artifacts, both sides' trace lines, and every refusal
//! with its exact text.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::*;

const WAIT: Duration = Duration::from_secs(90);
const JSON_CT: (&str, &str) = ("content-type", "application/json");

/// A formation written into a scratch folder: `roster.yaml`, and one folder per member
/// holding its manifest and its scripted driver's turns.
struct Formation {
    dir: PathBuf,
}

/// One member: its name, its manifest's extra blocks and its turns.
struct M<'a> {
    name: &'a str,
    entry: bool,
    extra: &'a str,
    turns: &'a str,
}

/// A worker that consents to peer tasks and keeps taking them.
fn worker<'a>(name: &'a str, turns: &'a str) -> M<'a> {
    M {
        name,
        entry: false,
        extra: WORKER,
        turns,
    }
}

const WORKER: &str = "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\nexports:\n  peer_tasks:\n    accept: true\n";

impl Formation {
    fn new(test: &str, members: &[M<'_>], reachability: &str) -> Self {
        let dir = scratch(test);
        let mut roster = String::from("roster_version: 1\nmembers:\n");
        for m in members {
            roster.push_str(&format!(
                "  - name: {}\n    path: ./{}\n    entry: {}\n",
                m.name, m.name, m.entry
            ));
            let home = dir.join(m.name);
            std::fs::create_dir_all(&home).unwrap();
            let manifest = format!(
                "name: {}\nversion: \"1.0.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-{}\n  max_turns: 6\n{}",
                m.name, m.name, m.extra
            );
            std::fs::write(home.join("murmur.yaml"), manifest).unwrap();
            std::fs::write(
                home.join("script.yaml"),
                format!("{SPAN_SESSION}turns:\n{}", m.turns),
            )
            .unwrap();
        }
        roster.push_str(&format!("reachability:\n{reachability}"));
        std::fs::write(dir.join("roster.yaml"), roster).unwrap();
        Formation { dir }
    }

    fn command(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = mur();
        cmd.args(["run", "--json", "--port", "0", "--roster"])
            .arg(&self.dir)
            .args(args);
        cmd
    }

    /// `mur run --roster` with the launch task, to its end.
    fn run(&self, task: &str) -> Run {
        finish_within(&mut self.command(&["--task", task]), WAIT)
    }

    /// The formation serving its entry member's address.
    fn spawn(&self) -> Running {
        let mut cmd = self.command(&[]);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        Running::start_command(cmd)
    }

    /// Every trace line of `member`'s newest session.
    fn trace(&self, member: &str) -> Vec<Value> {
        json_lines(&newest_trace(
            &self.dir.join(member).join("workdir/.murmur"),
        ))
    }
}

fn newest_trace(records: &Path) -> PathBuf {
    let mut sessions: Vec<PathBuf> = std::fs::read_dir(records)
        .unwrap_or_else(|e| panic!("{}: {e}", records.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("trace.jsonl").exists())
        .collect();
    sessions.sort();
    sessions.pop().expect("a session").join("trace.jsonl")
}

fn events<'a>(lines: &'a [Value], kind: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["event_type"] == kind).collect()
}

/// A scripted turn calling `member` with `task` (one tool call).
fn call_turn(id: &str, member: &str, task: &str) -> String {
    format!(
        "  - tool_calls: [{{id: {id}, name: call-member, input: {{member: {member}, task: {}}}}}]\n",
        json!(task)
    )
}

fn fenced(peer: &str, text: &str) -> String {
    format!("<untrusted-content source=peer:{peer}>\n{text}\n</untrusted-content>")
}

#[test]
fn a_lead_hands_two_workers_their_parts_and_carries_on_with_their_answers() {
    let lead_turns = format!(
        "  - tool_calls:\n      - {{id: c1, name: call-member, input: {{member: researcher, task: \"One fact about lighthouses.\"}}}}\n      - {{id: c2, name: call-member, input: {{member: writer, task: \"A title about lighthouses.\"}}}}\n{}",
        text_turn("done: {{last_tool_result}}")
    );
    let formation = Formation::new(
        "formation-lead",
        &[
            M {
                name: "lead",
                entry: true,
                extra: "lifecycle:\n  parallel_tools: 2\n",
                turns: &lead_turns,
            },
            worker("researcher", &text_turn("South Foreland, 1858.")),
            worker("writer", &text_turn("Keepers of the Light")),
        ],
        "  - {from: lead, to: [researcher, writer]}\n",
    );
    let running = formation.spawn();
    // The caller's trace context is passed on to every callee.
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let raw = read_to_close(post(
        &running.address,
        &[JSON_CT, ("traceparent", traceparent)],
        &message_stream_body("Tell me about lighthouses."),
    ));
    let frames = frames(
        raw.strip_prefix(SSE_HEAD)
            .unwrap_or_else(|| panic!("{raw}")),
    );
    let waits: Vec<&str> = frames
        .iter()
        .filter(|(_, event, _)| event == "status")
        .filter_map(|(_, _, d)| d["status"]["message"].as_str())
        .filter(|m| m.starts_with("waiting on peer"))
        .collect();
    assert_eq!(waits.len(), 2, "{frames:?}");
    assert!(
        waits
            .iter()
            .any(|w| w.starts_with("waiting on peer researcher (its task tsk_"))
    );
    assert!(
        waits
            .iter()
            .any(|w| w.starts_with("waiting on peer writer (its task tsk_"))
    );
    let artifacts: Vec<&Value> = frames
        .iter()
        .filter(|(_, event, _)| event == "artifact")
        .map(|(_, _, d)| &d["artifact"])
        .collect();
    assert_eq!(artifacts.len(), 2, "{frames:?}");
    assert_eq!(
        artifacts[0]["content"],
        fenced("researcher", "South Foreland, 1858.")
    );
    assert_eq!(artifacts[0]["fence_source"], "peer:researcher");
    assert_eq!(
        artifacts[1]["content"],
        fenced("writer", "Keepers of the Light")
    );
    let (_, _, last) = frames.last().unwrap();
    assert_eq!(last["status"]["state"], "completed");
    assert_eq!(
        last["status"]["response"],
        format!("done: {}", fenced("writer", "Keepers of the Light"))
    );
    drop(running);

    // Both sides' lines, joined by the call id; the workers ran it in the peer lane.
    let lead = formation.trace("lead");
    let calls = events(&lead, "member_call");
    assert_eq!(calls.len(), 2, "{lead:?}");
    for member in ["researcher", "writer"] {
        let call = calls.iter().find(|c| c["member"] == member).unwrap();
        assert_eq!(call["status"], "answered");
        let theirs = formation.trace(member);
        let received = events(&theirs, "peer_task_received");
        assert_eq!(received.len(), 1, "{theirs:?}");
        assert_eq!(received[0]["call_id"], call["call_id"]);
        assert_eq!(received[0]["caller"], "lead");
        assert_eq!(received[0]["caller_task_id"], call["task_id"]);
        assert_eq!(received[0]["task_id"], call["member_task_id"]);
        // The callee's task is a span in the caller's trace, under the lead's call.
        let arrived = events(&theirs, "a2a_task_received");
        let passed = arrived[0]["traceparent_from_caller"].as_str().unwrap();
        let parts: Vec<&str> = passed.split('-').collect();
        assert_eq!(parts[1], traceparent.split('-').nth(1).unwrap(), "{passed}");
        let call_spans: Vec<&Value> = events(&lead, "tool_call")
            .into_iter()
            .filter(|l| l["tool_name"] == "call-member")
            .map(|l| &l["span_id"])
            .collect();
        assert!(
            call_spans.contains(&&Value::from(parts[2])),
            "{passed} {call_spans:?}"
        );
        let start = events(&theirs, "task_start");
        assert_eq!(start[0]["origin"], "peer");
        assert_eq!(start[0]["lane"], "peer");
        let answered = events(&theirs, "peer_task_answered");
        assert_eq!(answered.len(), 1, "{theirs:?}");
        assert_eq!(answered[0]["call_id"], call["call_id"]);
        assert_eq!(answered[0]["caller"], "lead");
        assert_eq!(answered[0]["caller_task_id"], call["task_id"]);
        assert_eq!(answered[0]["outcome"], "ok");
        assert!(answered[0]["duration_ms"].is_u64());
    }
}

#[test]
fn the_launch_task_is_answered_through_the_workers_as_mur_run_prints_it() {
    let formation = Formation::new(
        "formation-launch",
        &[
            M {
                name: "lead",
                entry: true,
                extra: "",
                turns: &format!(
                    "{}{}",
                    call_turn("c1", "researcher", "One fact."),
                    text_turn("{{last_tool_result}}")
                ),
            },
            worker("researcher", &text_turn("A fact.")),
        ],
        "  - {from: lead, to: [researcher]}\n",
    );
    let mut cmd = mur();
    cmd.args(["run", "--port", "0", "--roster"])
        .arg(formation.dir.join("roster.yaml"))
        .args(["--task", "Go."]);
    let run = finish_within(&mut cmd, WAIT);
    run.assert_ok();
    assert!(
        run.stdout
            .contains(&format!("{}\nstatus:  ok", fenced("researcher", "A fact."))),
        "{}",
        run.stdout
    );
    assert!(run.stderr.contains("formation: frm_"), "{}", run.stderr);
    assert!(
        run.stderr.contains("  member researcher  ses_"),
        "{}",
        run.stderr
    );
}

/// What the lead's launch task answered (its last tool result), when its only turn
/// before the answer calls `member`.
fn lead_answer(formation: &Formation) -> String {
    let run = formation.run("Go.");
    let workdir = run.launch()["workdir"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let result = Path::new(&workdir).join("out/result.txt");
    let answer = std::fs::read_to_string(&result)
        .unwrap_or_else(|e| panic!("{e}; stdout {} stderr {}", run.stdout, run.stderr));
    answer.trim_end().to_string()
}

#[test]
fn a_member_outside_the_rules_is_refused_naming_who_may_be_called() {
    let formation = Formation::new(
        "formation-reach",
        &[
            M {
                name: "lead",
                entry: true,
                extra: "",
                turns: &format!(
                    "{}{}",
                    call_turn("c1", "writer", "A title."),
                    text_turn("{{last_tool_result}}")
                ),
            },
            worker("researcher", &text_turn("unused")),
            worker("writer", &text_turn("unused")),
        ],
        "  - {from: lead, to: [researcher]}\n",
    );
    assert_eq!(
        lead_answer(&formation),
        "'writer' is not a member this capsule may call; it may call: researcher"
    );
}

#[test]
fn a_call_back_into_a_waiting_member_is_refused_as_a_cycle() {
    let relay = |to: &str| {
        format!(
            "{}{}",
            call_turn("c1", to, "Pass it on."),
            text_turn("{{last_tool_result}}")
        )
    };
    let formation = Formation::new(
        "formation-cycle",
        &[
            M {
                name: "lead",
                entry: true,
                extra: "",
                turns: &relay("alpha"),
            },
            worker("alpha", &relay("beta")),
            worker("beta", &relay("alpha")),
        ],
        "  - {from: lead, to: [alpha]}\n  - {from: alpha, to: [beta]}\n  - {from: beta, to: [alpha]}\n",
    );
    let answer = lead_answer(&formation);
    // alpha's answer holds beta's, which holds the refusal beta's call met (the inner
    // fences neutralised, as every fence inside a fenced text is).
    assert!(answer.starts_with("<untrusted-content source=peer:alpha>\n<!MURMUR-NEUTRALISED!untrusted-content source=peer:beta>\n"), "{answer}");
    assert!(
        answer.contains("\nrefused: calling alpha would form a cycle: lead → alpha → beta → alpha; a capsule waiting on a call cannot take a task that call sent\n"),
        "{answer}"
    );
}

#[test]
fn a_chain_deeper_than_four_calls_is_refused_naming_it() {
    let relay = |to: &str| {
        format!(
            "{}{}",
            call_turn("c1", to, "Pass it on."),
            text_turn("{{last_tool_result}}")
        )
    };
    let names = ["lead", "m1", "m2", "m3", "m4", "m5"];
    let turns: Vec<String> = names[1..].iter().map(|n| relay(n)).collect();
    let mut members = vec![M {
        name: "lead",
        entry: true,
        extra: "",
        turns: &turns[0],
    }];
    for (i, name) in names[1..5].iter().enumerate() {
        members.push(worker(name, &turns[i + 1]));
    }
    members.push(worker("m5", "  - text: unreachable\n"));
    let rules: String = names
        .windows(2)
        .map(|w| format!("  - {{from: {}, to: [{}]}}\n", w[0], w[1]))
        .collect();
    let formation = Formation::new("formation-depth", &members, &rules);
    let answer = lead_answer(&formation);
    assert!(
        answer.contains(
            "refused: the call chain lead → m1 → m2 → m3 → m4 → m5 is deeper than 4 calls"
        ),
        "{answer}"
    );
}

#[test]
fn a_callee_without_consent_stops_the_launch_naming_the_key() {
    let formation = Formation::new(
        "formation-consent",
        &[
            M {
                name: "lead",
                entry: true,
                extra: "",
                turns: &text_turn("unused"),
            },
            M {
                name: "shy",
                entry: false,
                extra: "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n",
                turns: &text_turn("unused"),
            },
        ],
        "  - {from: lead, to: [shy]}\n",
    );
    let run = formation.run("Go.");
    run.assert_error("error[E-ROS-005]");
    assert!(
        run.stderr.contains(
            "roster.yaml: member 'shy' is listed in a reachability rule's `to`, but its manifest does not declare `exports.peer_tasks.accept: true`"
        ),
        "{}",
        run.stderr
    );
}

/// The answer a member's door gives a request marked `peer` with `authorization`.
fn peer_request(address: &str, authorization: Option<&str>) -> String {
    let mut headers = vec![JSON_CT, ("x-murmur-task-origin", "peer")];
    let bearer;
    if let Some(token) = authorization {
        bearer = format!("Bearer {token}");
        headers.push(("authorization", &bearer));
    }
    read_to_close(post(address, &headers, &message_stream_body("hello")))
}

#[test]
fn a_peer_task_without_consent_or_without_an_edge_credential_gets_a_fixed_refusal() {
    // A capsule of its own that does not consent.
    let plain = Capsule::new(
        "peer-no-consent",
        "name: plain\nversion: \"1.0.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: m\nlifecycle:\n  task_acceptance: queue\n  after_task: sleep\n",
        &format!("turns:\n{}", text_turn("never")),
    );
    let running = plain.spawn(&[]);
    let answer = peer_request(&running.address, None);
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    assert!(
        answer.ends_with(
            "\r\n\r\n{\"error\":\"peer_not_accepted\",\"message\":\"this capsule does not accept tasks from peers\"}"
        ),
        "{answer}"
    );
    drop(running);

    // A formation's worker: only a roster edge's credential gets a peer task in.
    let formation = Formation::new(
        "formation-credential",
        &[
            M {
                name: "lead",
                entry: true,
                extra: "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n",
                turns: &text_turn("unused"),
            },
            worker("worker", &text_turn("unused")),
        ],
        "  - {from: lead, to: [worker]}\n",
    );
    let mut cmd = formation.command(&[]);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut running = Running::start_command(cmd);
    let address = member_address(&mut running, "worker");
    let refused = "{\"error\":\"peer_credential_refused\",\"message\":\"this member takes peer tasks only from the members its roster lets call it, each with its own credential\"}";
    for token in [None, Some("mur_not_an_edge_credential")] {
        let answer = peer_request(&address, token);
        assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
        assert!(answer.ends_with(refused), "{token:?}: {answer}");
    }
}

/// The address the formation block gives `member`, read from stderr.
fn member_address(running: &mut Running, member: &str) -> String {
    use std::io::BufRead;
    let stderr = running.child.stderr.take().unwrap();
    let prefix = format!("  member {member}  ");
    let mut lines = std::io::BufReader::new(stderr).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix(&prefix) {
            let url = rest.split_whitespace().nth(1).unwrap();
            // The rest is read, so mur's later lines never meet a closed pipe.
            std::thread::spawn(move || lines.for_each(drop));
            return url.trim_start_matches("http://").to_string();
        }
    }
    panic!("no line for {member}");
}

/// A worker whose only task runs `sleep 60` in the foreground.
fn sleeper(name: &str) -> M<'_> {
    M {
        name,
        entry: false,
        extra: "capabilities:\n  shell:\n    allow: [bash]\nlifecycle:\n  task_acceptance: queue\n  after_task: sleep\n  shell_grace_secs: 120\nexports:\n  peer_tasks:\n    accept: true\n",
        turns: SLEEP_TURN,
    }
}

const SLEEP_TURN: &str =
    "  - tool_calls: [{id: s1, name: bash, input: {command: \"sleep 60\"}}]\n  - text: woke\n";

/// The worker's task ended `canceled`, as its trace says, within a while.
fn assert_worker_task_canceled(formation: &Formation, member: &str) {
    let records = formation.dir.join(member).join("workdir/.murmur");
    eventually(
        Duration::from_secs(30),
        "the callee's task ends canceled",
        || {
            let lines = json_lines_so_far(&newest_trace(&records));
            lines
                .iter()
                .any(|l| l["event_type"] == "task_end" && l["exit_status"] == "canceled")
        },
    );
}

#[test]
fn canceling_the_callers_task_cancels_the_callees() {
    let formation = Formation::new(
        "formation-cancel",
        &[
            M {
                name: "lead",
                entry: true,
                extra: "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n",
                turns: &format!(
                    "{}{}",
                    call_turn("c1", "slow", "Take your time."),
                    text_turn("late")
                ),
            },
            sleeper("slow"),
        ],
        "  - {from: lead, to: [slow]}\n",
    );
    let running = formation.spawn();
    let socket = post(&running.address, &[JSON_CT], &message_stream_body("Go."));
    let mut sse = crate::common::sse_frames::Sse::open(socket, std::time::Instant::now(), WAIT);
    let seen = sse.until(WAIT, |f| {
        f.data["status"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("waiting on peer slow"))
    });
    let task = seen.last().unwrap().task().to_string();
    let cancel =
        json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/cancel", "params": {"id": task}});
    let answer = read_to_close(post(&running.address, &[JSON_CT], &cancel.to_string()));
    assert!(answer.contains("\"result\""), "{answer}");
    let rest = sse.until(WAIT, |f| f.is_final());
    assert_eq!(rest.last().unwrap().state(), "canceled", "{rest:?}");
    assert_worker_task_canceled(&formation, "slow");
}

#[test]
fn the_callers_deadline_ends_a_call_to_a_peer_that_never_answers() {
    let formation = Formation::new(
        "formation-deadline",
        &[
            M {
                name: "lead",
                entry: true,
                extra: "capabilities:\n  limits:\n    deadline_seconds: 2\n",
                turns: &format!(
                    "{}{}",
                    call_turn("c1", "slow", "Take your time."),
                    text_turn("{{last_tool_result}}")
                ),
            },
            sleeper("slow"),
        ],
        "  - {from: lead, to: [slow]}\n",
    );
    let answer = lead_answer(&formation);
    assert_eq!(
        answer,
        fenced(
            "slow",
            "slow did not answer within 2 s (capabilities.limits.deadline_seconds); its task was canceled"
        )
    );
    let lead = formation.trace("lead");
    let calls = events(&lead, "member_call");
    assert_eq!(calls[0]["status"], "failed", "{calls:?}");
    assert_worker_task_canceled(&formation, "slow");
}

#[test]
fn an_answer_past_the_callers_limit_is_cut_and_said_so() {
    let long = "x".repeat(300);
    let formation = Formation::new(
        "formation-bound",
        &[
            M {
                name: "lead",
                entry: true,
                extra: "capabilities:\n  limits:\n    max_tool_result_bytes: 100\n",
                turns: &format!(
                    "{}{}",
                    call_turn("c1", "chatty", "Say a lot."),
                    text_turn("{{last_tool_result}}")
                ),
            },
            worker("chatty", &text_turn(&long)),
        ],
        "  - {from: lead, to: [chatty]}\n",
    );
    let answer = lead_answer(&formation);
    let kept = format!(
        "{}\n[the answer was cut at capabilities.limits.max_tool_result_bytes (100 bytes)]",
        "x".repeat(100)
    );
    assert_eq!(answer, fenced("chatty", &kept));
    let lead = formation.trace("lead");
    let calls = events(&lead, "member_call");
    assert_eq!(calls[0]["truncated"], true);
    assert_eq!(calls[0]["answer_bytes"], 100);
}

/// `mur ARGS` with `home` as MURMUR_HOME, to its end.
fn mur_in(home: &Path, args: &[&str]) -> Run {
    let mut cmd = mur();
    cmd.env("MURMUR_HOME", home).args(args);
    finish_within(&mut cmd, WAIT)
}

/// `mur ps --json` in `home`, once `check` holds for it.
fn ps_until(home: &Path, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let ps = mur_in(home, &["ps", "--json"]);
        ps.assert_ok();
        let doc: Value = serde_json::from_str(&ps.stdout).unwrap();
        if check(&doc) {
            return doc;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting: {what}: {doc}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn ps_lists_a_formations_members_under_it_and_stop_ends_one_member_then_the_formation() {
    let home = scratch("formation-ps-home");
    let plain = Capsule::new(
        "formation-ps-plain",
        "name: plain\nversion: \"1.0.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: m\n",
        "",
    );
    let alone = plain.spawn_env(QUEUE, &[("MURMUR_HOME", home.to_str().unwrap())]);
    let formation = Formation::new(
        "formation-ps",
        &[
            M {
                name: "lead",
                entry: true,
                extra: "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n",
                turns: &text_turn("unused"),
            },
            worker("worker", &text_turn("unused")),
        ],
        "  - {from: lead, to: [worker]}\n",
    );
    let mut cmd = formation.command(&[]);
    cmd.env("MURMUR_HOME", &home)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut running = Running::start_command(cmd);
    let worker_address = member_address(&mut running, "worker");
    let pid = running.launch["pid"].as_u64().unwrap();

    let doc = ps_until(&home, "both members listed", |doc| {
        doc["formations"][0]["members"]
            .as_array()
            .is_some_and(|m| m.len() == 2)
    });
    // The capsule run alone is a session as ever; the members are not among them.
    let sessions = doc["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "{doc}");
    assert_eq!(sessions[0]["session_id"], alone.launch["session_id"]);
    let group = &doc["formations"][0];
    let id = group["id"].as_str().unwrap().to_string();
    assert!(is_minted(&id, "frm_", 32), "{id}");
    assert_eq!(group["pid"], pid);
    assert_eq!(group["roster"], json!(formation.dir.join("roster.yaml")));
    let members = group["members"].as_array().unwrap();
    assert_eq!(
        (&members[0]["member"], &members[0]["entry"]),
        (&json!("lead"), &json!(true))
    );
    assert_eq!(members[0]["session_id"], running.launch["session_id"]);
    assert_eq!(
        (&members[1]["member"], &members[1]["entry"]),
        (&json!("worker"), &json!(false))
    );
    assert_eq!(members[1]["address"], format!("http://{worker_address}"));
    let worker_session = members[1]["session_id"].as_str().unwrap().to_string();
    let lead_session = members[0]["session_id"].as_str().unwrap().to_string();

    // The table: the plain one's table as before, then the formation's block.
    let ps = mur_in(&home, &["ps"]);
    ps.assert_ok();
    let lines: Vec<&str> = ps.stdout.lines().collect();
    assert!(lines[0].starts_with("SESSION "), "{}", ps.stdout);
    assert!(lines[1].starts_with(alone.launch["session_id"].as_str().unwrap()));
    assert_eq!(lines[2], "", "{}", ps.stdout);
    assert!(
        lines[3].starts_with(&format!("FORMATION {id}  PID {pid}  UPTIME 00:")),
        "{}",
        ps.stdout
    );
    assert!(
        lines[3].ends_with(&format!(
            "ROSTER {}",
            formation.dir.join("roster.yaml").display()
        )),
        "{}",
        ps.stdout
    );
    let cells =
        |line: &str| -> Vec<String> { line.split_whitespace().map(str::to_string).collect() };
    assert_eq!(
        cells(lines[4]),
        ["MEMBER", "SESSION", "URL", "CAPSULE", "WORKDIR"]
    );
    let url = running.launch["url"].as_str().unwrap();
    assert_eq!(
        cells(lines[5])[..4],
        ["lead", "(entry)", lead_session.as_str(), url]
    );
    assert_eq!(cells(lines[6])[..2], ["worker", worker_session.as_str()]);
    assert_eq!(lines.len(), 7, "{}", ps.stdout);

    // One member by its session: that member ends, its process (the others') is spared.
    let stopped = mur_in(&home, &["stop", &worker_session]);
    stopped.assert_ok();
    assert!(
        stopped.stdout.starts_with(&format!(
            "stopped: {worker_session}\ncapsule: worker@1.0.0\nmember:  worker of formation {id} (its other members keep running)\nsignal:  none — the process runs the formation's other members\n"
        )),
        "{}",
        stopped.stdout
    );
    assert!(
        running.child.try_wait().unwrap().is_none(),
        "the formation's process ended"
    );
    ps_until(&home, "the worker gone, the lead kept", |doc| {
        doc["formations"][0]["members"]
            .as_array()
            .is_some_and(|m| m.len() == 1 && m[0]["member"] == "lead")
    });

    // The whole formation: one process, ended once.
    let stopped = mur_in(&home, &["stop", &id]);
    stopped.assert_ok();
    assert!(
        stopped.stdout.starts_with(&format!(
            "stopped: {id}\nmember:  lead (entry)  {lead_session}  lead@1.0.0\nsignal:  "
        )),
        "{}",
        stopped.stdout
    );
    assert!(
        stopped
            .stdout
            .ends_with("residue: nothing else was left running\n"),
        "{}",
        stopped.stdout
    );
    let run = running.wait(WAIT);
    assert_eq!(run.status, 0, "{}", run.stderr);
    let doc = ps_until(&home, "the formation gone", |doc| {
        doc.get("formations").is_none()
    });
    assert_eq!(doc["sessions"].as_array().unwrap().len(), 1, "{doc}");
    mur_in(&home, &["stop", &id]).assert_error("error[E-RUN-022]: no running formation is frm_");
    drop(alone);
}

#[test]
fn a_busy_member_gives_the_caller_a_tool_error_saying_so() {
    // The worker takes one task (`task_acceptance: single`): of two calls sent at once,
    // one is taken and the other refused as busy.
    let formation = Formation::new(
        "formation-busy",
        &[
            M {
                name: "lead",
                entry: true,
                extra: "lifecycle:\n  parallel_tools: 2\ntrace:\n  include_tool_output: true\n",
                turns: &format!(
                    "  - tool_calls:\n      - {{id: c1, name: call-member, input: {{member: solo, task: one}}}}\n      - {{id: c2, name: call-member, input: {{member: solo, task: two}}}}\n{}",
                    text_turn("done")
                ),
            },
            M {
                name: "solo",
                entry: false,
                extra: "capabilities:\n  shell:\n    allow: [bash]\nlifecycle:\n  task_acceptance: single\nexports:\n  peer_tasks:\n    accept: true\n",
                turns: &format!("{}{}", bash_turn("sleep 1"), text_turn("one done")),
            },
        ],
        "  - {from: lead, to: [solo]}\n",
    );
    let run = formation.run("Go.");
    run.assert_ok();
    let lead = formation.trace("lead");
    let mut statuses: Vec<String> = events(&lead, "member_call")
        .iter()
        .map(|c| c["status"].as_str().unwrap_or_default().to_string())
        .collect();
    statuses.sort();
    assert_eq!(statuses, ["answered", "busy"], "{lead:?}");
    let outputs: Vec<String> = events(&lead, "tool_call")
        .iter()
        .map(|c| c.to_string())
        .collect();
    assert!(
        outputs
            .iter()
            .any(|o| o.contains("solo is busy with other work and did not take the task")),
        "{outputs:?}"
    );
}
