//! A capsule calling a remote A2A agent written with the official Python SDK
//! (`a2a-sdk`, a server the test starts on 127.0.0.1): named in the manifest by its
//! agent card's URL, reached through the allow list, streamed, reattached after a
//! dropped connection, asking for input that reaches the caller's person, and behind a
//! token taken from the environment.

use std::time::Duration;

use crate::common::sdk::{PeerServer, Sdk};
use crate::common::*;

const WAIT: Duration = Duration::from_secs(90);
const JSON_CT: (&str, &str) = ("content-type", "application/json");

/// The peer server, or `None` (a skip, its reason printed) without the SDK.
fn peer(behaviour: &str) -> Option<PeerServer> {
    Sdk::Python.client().map(|c| c.peer_server(behaviour))
}

/// A capsule that calls `weather` at `card` with `task`, then answers with the result.
fn caller(test: &str, card: &str, token_env: &str, tail: &str) -> Capsule {
    let manifest = format!(
        "name: caller\nversion: \"1.0.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: m\npeers:\n  - name: weather\n    card: {card}\n{token_env}capabilities:\n  network:\n    allow: [\"{origin}\"]\n{tail}",
        origin = card.trim_end_matches("/.well-known/agent-card.json")
    );
    let turns = format!(
        "turns:\n  - tool_calls: [{{id: c1, name: call-member, input: {{member: weather, task: \"Lisbon\"}}}}]\n{}",
        text_turn("{{last_tool_result}}")
    );
    Capsule::new(test, &manifest, &turns)
}

fn fenced(text: &str) -> String {
    format!("<untrusted-content source=peer:weather>\n{text}\n</untrusted-content>")
}

/// `mur run --task` to its end; the answer it printed.
fn answer(capsule: &Capsule, env: &[(&str, &str)]) -> String {
    let mut cmd = mur();
    cmd.args(["run", "--port", "0", "--manifest"])
        .arg(capsule.manifest())
        .args(["--task", "Ask the weather agent."])
        .envs(env.iter().copied());
    let run = finish_within(&mut cmd, WAIT);
    run.assert_ok();
    run.stdout
        .strip_suffix("\nstatus:  ok\n")
        .unwrap_or(&run.stdout)
        .lines()
        .skip(2)
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_remote_sdk_agent_answers_a_streamed_call() {
    let Some(peer) = peer("answer") else { return };
    let capsule = caller("peer-remote-answer", &peer.card_url(), "", "");
    assert_eq!(
        answer(&capsule, &[]),
        fenced("sdk peer answers: Lisbon"),
        "{}",
        peer.stderr()
    );
}

#[test]
fn a_dropped_stream_is_reattached_and_loses_nothing() {
    let Some(peer) = peer("drop") else { return };
    let capsule = caller("peer-remote-drop", &peer.card_url(), "", "");
    assert_eq!(
        answer(&capsule, &[]),
        fenced("after the drop: Lisbon"),
        "{}",
        peer.stderr()
    );
}

#[test]
fn a_token_from_the_environment_opens_the_remote_door_and_never_shows() {
    let Some(peer) = peer("token") else { return };
    let capsule = caller(
        "peer-remote-token",
        &peer.card_url(),
        "    token_env: WEATHER_TOKEN\n",
        "",
    );
    let token = "s3cret-peer-token";
    assert_eq!(
        answer(&capsule, &[("WEATHER_TOKEN", token)]),
        fenced("sdk peer answers: Lisbon")
    );
    let refused = answer(&capsule, &[("WEATHER_TOKEN", "wrong-token-value")]);
    assert!(
        refused.starts_with(&fenced("weather's door answered 401")[..50]),
        "{refused}"
    );
    let records = capsule.dir.join("workdir/.murmur");
    for entry in walk(&records) {
        let text = std::fs::read_to_string(&entry).unwrap_or_default();
        assert!(!text.contains(token), "{} holds the token", entry.display());
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn a_remote_agents_question_reaches_the_callers_person_as_input_required() {
    let Some(peer) = peer("input") else { return };
    let capsule = caller(
        "peer-remote-input",
        &peer.card_url(),
        "",
        "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n",
    );
    let running = capsule.spawn(&[]);
    let socket = post(
        &running.address,
        &[JSON_CT],
        &message_stream_body("Weather?"),
    );
    let mut sse = crate::common::sse_frames::Sse::open(socket, std::time::Instant::now(), WAIT);
    let asked = sse.until(WAIT, |f| f.state() == "input-required");
    let question = asked.last().unwrap();
    assert_eq!(
        question.data["status"]["message"],
        "weather asks: Which city?"
    );
    // The person answers in the task's context, as the seed's wire takes a reply.
    let context = asked[0].data["context_id"].as_str().unwrap().to_string();
    let reply = message_stream_body_in("Porto", &context);
    let _ = read_to_close(post(&running.address, &[JSON_CT], &reply));
    let rest = sse.until(WAIT, |f| f.is_final());
    let last = rest.last().unwrap();
    assert_eq!(last.state(), "completed", "{rest:?}");
    assert_eq!(
        last.data["status"]["response"],
        fenced("weather in Porto: sunny")
    );
}

#[test]
fn the_callers_deadline_cancels_the_remote_task() {
    let Some(peer) = peer("hang") else { return };
    let capsule = caller(
        "peer-remote-hang",
        &peer.card_url(),
        "",
        "  limits:\n    deadline_seconds: 2\n",
    );
    assert_eq!(
        answer(&capsule, &[]),
        fenced(
            "weather did not answer within 2 s (capabilities.limits.deadline_seconds); its task was canceled"
        )
    );
    let canceled = peer.next_line(Duration::from_secs(20));
    assert!(
        canceled.as_ref().is_some_and(|l| l["canceled"].is_string()),
        "{canceled:?}; {}",
        peer.stderr()
    );
}

/// A `mur run` capsule serving peer tasks, as another capsule's remote peer: its first
/// task sleeps for a minute.
fn sleeping_peer(test: &str) -> (Capsule, Running) {
    let capsule = Capsule::new(
        test,
        "name: sleeper\nversion: \"1.0.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: m\ncapabilities:\n  shell:\n    allow: [bash]\nlifecycle:\n  task_acceptance: queue\n  after_task: sleep\n  shell_grace_secs: 120\nexports:\n  peer_tasks:\n    accept: true\n",
        &format!("turns:\n{}{}", bash_turn("sleep 60"), text_turn("woke")),
    );
    let running = capsule.spawn(&[]);
    (capsule, running)
}

#[test]
fn a_peer_killed_in_the_middle_of_a_call_ends_the_call_instead_of_hanging_it() {
    let (_peer_capsule, mut peer) = sleeping_peer("peer-killed");
    let card = format!("http://{}/.well-known/agent-card.json", peer.address);
    let capsule = caller("peer-killed-caller", &card, "", "");
    let mut cmd = mur();
    cmd.args(["run", "--json", "--port", "0", "--manifest"])
        .arg(capsule.manifest())
        .args(["--task", "Ask the sleeper."])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let caller = Running::start_command(cmd);
    let session = caller.session();
    eventually(WAIT, "the call reaches the peer", || {
        session
            .trace_so_far()
            .iter()
            .any(|l| l["event_type"] == "inference")
            && peer
                .session()
                .trace_so_far()
                .iter()
                .any(|l| l["event_type"] == "task_start")
    });
    // kill -9: the peer's process ends with nothing said on the stream.
    peer.child.kill().unwrap();
    let _ = peer.child.wait();
    let run = caller.wait(WAIT);
    assert_eq!(run.status, 0, "{}", run.stderr);
    let result = session.read("out/result.txt");
    assert!(
        result.starts_with("<untrusted-content source=peer:weather>\nweather stopped answering and could not be reattached after 3 tries"),
        "{result}"
    );
    let calls = session.events("member_call");
    assert_eq!(calls[0]["status"], "unreachable", "{calls:?}");
}

#[test]
fn a_fifty_megabyte_remote_answer_is_bounded_by_the_callers_limits() {
    let Some(peer) = peer("big") else { return };
    let capsule = caller(
        "peer-remote-big",
        &peer.card_url(),
        "",
        "  limits:\n    max_tool_result_bytes: 1048576\n",
    );
    let kept = 1024 * 1024;
    let expected = fenced(&format!(
        "{}\n[the answer was cut at capabilities.limits.max_tool_result_bytes ({kept} bytes)]",
        "x".repeat(kept)
    ));
    let answered = answer(&capsule, &[]);
    // Compared as a bool: a 1 MiB mismatch printed whole would bury the reason.
    assert!(
        answered == expected,
        "{} bytes answered, {} expected; it starts {:?} and ends {:?}; {}",
        answered.len(),
        expected.len(),
        answered.chars().take(200).collect::<String>(),
        answered
            .chars()
            .rev()
            .take(200)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<String>(),
        peer.stderr()
    );
    let traces: Vec<_> = walk(&capsule.dir.join("workdir/.murmur"))
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "trace.jsonl"))
        .collect();
    assert_eq!(traces.len(), 1, "{traces:?}");
    let calls: Vec<_> = json_lines(&traces[0])
        .into_iter()
        .filter(|l| l["event_type"] == "member_call")
        .collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["status"], "answered", "{calls:?}");
    assert_eq!(calls[0]["truncated"], true, "{calls:?}");
    assert_eq!(calls[0]["answer_bytes"], kept, "{calls:?}");
}
