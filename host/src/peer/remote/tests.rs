//! The remote client against the fake peer of [`super::fake`]: each test scripts what
//! the peer answers and reads what it was sent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::net::TcpListener;

use super::fake::*;
use super::*;

#[tokio::test]
async fn a_completed_task_answers_with_its_artifacts_and_carries_the_call_headers() {
    let fake = Fake::start(|_, _| {
        Scripted::Sse(
            [
                frame(None, task("TASK_STATE_SUBMITTED")),
                frame(None, status("TASK_STATE_WORKING", None)),
                frame(None, artifact("a1", "Hel", false)),
                frame(None, artifact("a1", "lo", true)),
                frame(None, artifact("a2", "world", false)),
                frame(None, status("TASK_STATE_COMPLETED", None)),
            ]
            .concat(),
        )
    })
    .await;
    let watch = Watch::new();
    let remote = fake.remote(Some("peer-token-0123456789"));
    let asked = ask("say hello");
    let call = remote.call(&asked, &watch);
    // The roster awaits calls on spawned tasks.
    fn sendable<T: Send>(t: T) -> T {
        t
    }
    let answer = sendable(call).await.unwrap();
    assert_eq!(
        answer,
        Answer {
            text: "Hello\nworld".into(),
            task_id: TASK.into(),
            truncated: false
        }
    );
    assert_eq!(*watch.taken.lock().unwrap(), [TASK]);
    let got = fake.got();
    assert_eq!(got[0].path, "/.well-known/agent-card.json");
    assert_eq!(
        got[0].header("authorization"),
        Some("Bearer peer-token-0123456789")
    );
    let sent = &got[1];
    assert_eq!(
        (sent.path.as_str(), sent.rpc()),
        ("/rpc", "SendStreamingMessage")
    );
    for (name, value) in [
        ("content-type", "application/json"),
        ("a2a-version", "1.0"),
        ("x-murmur-task-origin", "peer"),
        ("x-murmur-call-chain", "lead/ses_lead"),
        ("x-murmur-call-id", "mcl_test"),
        ("x-murmur-caller-task", "tsk_caller"),
        (
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ),
        ("authorization", "Bearer peer-token-0123456789"),
    ] {
        assert_eq!(sent.header(name), Some(value), "{name}");
    }
    let message = &sent.body["params"]["message"];
    assert_eq!(message["role"], "ROLE_USER");
    assert_eq!(message["parts"], json!([{"text": "say hello"}]));
    assert!(
        message["messageId"]
            .as_str()
            .is_some_and(|id| !id.is_empty())
    );
    assert!(message.get("taskId").is_none());
}

#[tokio::test]
async fn the_final_status_message_is_the_answer_and_crlf_streams_read() {
    // sse-starlette (the Python SDK's server) ends lines with CRLF and sends pings.
    let fake = Fake::start(|_, _| {
        let frames = [
            ": ping\n\n".to_string(),
            frame(None, task("TASK_STATE_WORKING")),
            frame(None, artifact("tool-1", "a tool's output", false)),
            frame(None, status("TASK_STATE_COMPLETED", Some("the answer"))),
        ]
        .concat();
        Scripted::Sse(frames.replace('\n', "\r\n"))
    })
    .await;
    let answer = fake
        .remote(None)
        .call(&ask("q"), &Watch::new())
        .await
        .unwrap();
    assert_eq!(answer.text, "the answer");
    assert!(fake.rpcs()[0].header("authorization").is_none());
}

#[tokio::test]
async fn input_required_asks_the_caller_and_sends_the_reply_to_the_task() {
    let fake = Fake::start(|got, n| match n {
        0 => Scripted::Sse(
            [
                frame(None, task("TASK_STATE_SUBMITTED")),
                frame(
                    None,
                    status("TASK_STATE_INPUT_REQUIRED", Some("Which city?")),
                ),
            ]
            .concat(),
        ),
        _ => {
            let reply = got.body["params"]["message"]["parts"][0]["text"]
                .as_str()
                .unwrap_or("?");
            let answer = format!("weather in {reply}: sunny");
            Scripted::Sse(frame(None, status("TASK_STATE_COMPLETED", Some(&answer))))
        }
    })
    .await;
    let watch = Watch::replying(Ok("Paris".into()));
    let answer = fake
        .remote(None)
        .call(&ask("weather?"), &watch)
        .await
        .unwrap();
    assert_eq!(answer.text, "weather in Paris: sunny");
    assert_eq!(*watch.prompts.lock().unwrap(), ["Which city?"]);
    assert_eq!(*watch.taken.lock().unwrap(), [TASK], "told once");
    let follow_up = &fake.rpcs()[1];
    assert_eq!(follow_up.rpc(), "SendStreamingMessage");
    let message = &follow_up.body["params"]["message"];
    assert_eq!(
        (message["taskId"].as_str(), message["contextId"].as_str()),
        (Some(TASK), Some("ctx-1"))
    );
    assert_eq!(message["role"], "ROLE_USER");
}

#[tokio::test]
async fn input_the_caller_cannot_give_fails_the_call_and_cancels_the_task() {
    let fake = Fake::start(|got, _| match got.rpc() {
        "CancelTask" => Scripted::Json(
            200,
            json!({"jsonrpc": "2.0", "id": 1, "result": task("TASK_STATE_CANCELED")["task"]}),
        ),
        _ => Scripted::Sse(frame(
            None,
            status("TASK_STATE_INPUT_REQUIRED", Some("Which city?")),
        )),
    })
    .await;
    let watch = Watch::replying(Err("the person did not answer within 5 minutes".into()));
    let failure = fake
        .remote(None)
        .call(&ask("weather?"), &watch)
        .await
        .unwrap_err();
    assert_eq!(failure.kind, FailureKind::Failed);
    assert_eq!(
        failure.message,
        "helper's task asked for input and got none: the person did not answer within 5 minutes"
    );
    assert_eq!(failure.task_id.as_deref(), Some(TASK));
    let cancel = until_got(&fake, "CancelTask").await;
    assert_eq!(cancel.body["params"], json!({"id": TASK}));
}

#[tokio::test]
async fn a_dropped_stream_is_reattached_from_its_last_event_and_the_answer_comes_whole() {
    let fake = Fake::start(|got, n| match n {
        0 => Scripted::Sse(
            [
                frame(Some(1), task("TASK_STATE_WORKING")),
                frame(Some(2), artifact("reply-1", "first half, ", false)),
            ]
            .concat(),
        ),
        _ => {
            assert_eq!(got.rpc(), "SubscribeToTask");
            assert_eq!(got.header("last-event-id"), Some("2"));
            Scripted::Sse(
                [
                    frame(Some(3), artifact("reply-1", "second half", true)),
                    frame(Some(4), status("TASK_STATE_COMPLETED", None)),
                ]
                .concat(),
            )
        }
    })
    .await;
    let answer = fake
        .remote(None)
        .call(&ask("long"), &Watch::new())
        .await
        .unwrap();
    assert_eq!(answer.text, "first half, second half");
    let subscribe = &fake.rpcs()[1];
    assert_eq!(subscribe.body["params"], json!({"id": TASK}));
}

#[tokio::test]
async fn a_task_that_ended_during_the_drop_is_read_with_get_task() {
    // As the SDK's server: no event ids, and a finished task cannot be subscribed to.
    let fake = Fake::start(|got, _| match got.rpc() {
        "SendStreamingMessage" => Scripted::Sse(
            [frame(None, task("TASK_STATE_WORKING")), frame(None, artifact("a", "part one", false))].concat(),
        ),
        "SubscribeToTask" => Scripted::Json(200, json!({"jsonrpc": "2.0", "id": 2,
            "error": {"code": -32004, "message": "Task task-1 is in terminal state: TASK_STATE_COMPLETED"}})),
        _ => Scripted::Json(200, json!({"jsonrpc": "2.0", "id": 3, "result": {
            "id": TASK, "contextId": "ctx-1", "status": {"state": "TASK_STATE_COMPLETED"},
            "artifacts": [{"artifactId": "a", "parts": [{"text": "part one, part two"}]}]
        }})),
    })
    .await;
    let answer = fake
        .remote(None)
        .call(&ask("q"), &Watch::new())
        .await
        .unwrap();
    assert_eq!(answer.text, "part one, part two");
    let asked: Vec<String> = fake.rpcs().iter().map(|g| g.rpc().to_string()).collect();
    assert_eq!(
        asked,
        ["SendStreamingMessage", "SubscribeToTask", "GetTask"]
    );
    assert!(fake.rpcs()[1].header("last-event-id").is_none());
}

#[tokio::test]
async fn a_stream_that_never_comes_back_is_unreachable_after_three_tries() {
    let fake =
        Fake::start(|_, _| Scripted::Sse(frame(None, status("TASK_STATE_WORKING", None)))).await;
    let failure = fake
        .remote(None)
        .call(&ask("q"), &Watch::new())
        .await
        .unwrap_err();
    assert_eq!(failure.kind, FailureKind::Unreachable);
    assert_eq!(
        failure.message,
        "helper stopped answering and could not be reattached after 3 tries: its stream ended before the task did"
    );
    let subscribes = fake
        .rpcs()
        .iter()
        .filter(|g| g.rpc() == "SubscribeToTask")
        .count();
    assert_eq!(subscribes, 3);
    until_got(&fake, "CancelTask").await;
}

#[tokio::test]
async fn a_403_is_a_refusal_quoting_the_door_on_one_line() {
    let fake = Fake::start(|_, _| {
        let said = format!("peer calls need a token\nsecond line {}", "x".repeat(400));
        Scripted::Json(403, json!({"error": "forbidden", "message": said}))
    })
    .await;
    let failure = fake
        .remote(None)
        .call(&ask("q"), &Watch::new())
        .await
        .unwrap_err();
    assert_eq!(failure.kind, FailureKind::Refused);
    assert!(
        failure.message.starts_with(
            "helper's door answered 403: peer calls need a token\\u{a}second line xxx"
        ),
        "{}",
        failure.message
    );
    assert!(failure.message.ends_with('…'));
    assert!(failure.message.chars().count() < 340);
    assert!(!failure.message.contains(&fake.port.to_string()));
    assert_eq!(failure.task_id, None);
}

#[tokio::test]
async fn an_answer_past_the_bound_is_cut_and_says_so() {
    let fake = Fake::start(|_, _| {
        Scripted::Sse(
            [
                frame(None, artifact("a", "0123456789", false)),
                frame(None, artifact("a", "abcdefghij", true)),
                frame(None, status("TASK_STATE_COMPLETED", None)),
            ]
            .concat(),
        )
    })
    .await;
    let mut asked = ask("q");
    asked.max_answer_bytes = 15;
    let answer = fake.remote(None).call(&asked, &Watch::new()).await.unwrap();
    assert_eq!(
        (answer.text.as_str(), answer.truncated),
        ("0123456789abcde", true)
    );
}

#[tokio::test]
async fn an_interface_outside_the_allow_list_is_refused_before_any_call() {
    let fake = Fake::with_card(
        |_| card("http://10.9.8.7:4242/rpc"),
        |_, _| Scripted::Json(500, json!({})),
    )
    .await;
    let failure = fake
        .remote(None)
        .call(&ask("q"), &Watch::new())
        .await
        .unwrap_err();
    assert_eq!(failure.kind, FailureKind::Unreachable);
    assert_eq!(
        failure.message,
        "helper's agent card names an interface outside capabilities.network.allow: add that origin there to call helper"
    );
    assert!(fake.rpcs().is_empty());

    let elsewhere = Remote::new("helper", &fake.card_url(), None, Vec::new());
    let failure = elsewhere.call(&ask("q"), &Watch::new()).await.unwrap_err();
    assert_eq!(failure.kind, FailureKind::Unreachable);
    assert!(
        failure
            .message
            .starts_with("helper's agent card is outside capabilities.network.allow")
    );
    assert_eq!(fake.got().len(), 1, "the card itself was not fetched");
}

#[tokio::test]
async fn a_dropped_call_cancels_its_remote_task() {
    let fake = Fake::start(|got, _| match got.rpc() {
        "CancelTask" => Scripted::Json(
            200,
            json!({"jsonrpc": "2.0", "id": 1, "result": task("TASK_STATE_CANCELED")["task"]}),
        ),
        _ => Scripted::SseHang(frame(Some(1), task("TASK_STATE_WORKING"))),
    })
    .await;
    let remote = fake.remote(None);
    let watch = Watch::new();
    let asked = ask("forever");
    let call = remote.call(&asked, &watch);
    assert!(
        tokio::time::timeout(Duration::from_millis(500), call)
            .await
            .is_err()
    );
    assert_eq!(*watch.taken.lock().unwrap(), [TASK]);
    let cancel = until_got(&fake, "CancelTask").await;
    assert_eq!(cancel.body["params"], json!({"id": TASK}));
    assert_eq!(cancel.header("x-murmur-call-id"), Some("mcl_test"));
}

#[tokio::test]
async fn ended_tasks_fail_by_their_state() {
    let cases = [
        (
            "TASK_STATE_FAILED",
            "the tool broke",
            FailureKind::Failed,
            "helper's task ended failed: the tool broke",
        ),
        (
            "TASK_STATE_CANCELED",
            "",
            FailureKind::Failed,
            "helper's task ended canceled: no reason given",
        ),
        (
            "TASK_STATE_REJECTED",
            "task rejected: capsule is busy",
            FailureKind::Busy,
            "helper had no room for the task: task rejected: capsule is busy",
        ),
        (
            "TASK_STATE_REJECTED",
            "not for you",
            FailureKind::Refused,
            "helper rejected the task: not for you",
        ),
    ];
    for (state, said, kind, message) in cases {
        let said = said.to_string();
        let fake = Fake::start(move |_, _| {
            let text = (!said.is_empty()).then_some(said.as_str());
            Scripted::Sse(
                [
                    frame(None, task("TASK_STATE_SUBMITTED")),
                    frame(None, status(state, text)),
                ]
                .concat(),
            )
        })
        .await;
        let failure = fake
            .remote(None)
            .call(&ask("q"), &Watch::new())
            .await
            .unwrap_err();
        assert_eq!((failure.kind, failure.message.as_str()), (kind, message));
        assert_eq!(failure.task_id.as_deref(), Some(TASK));
    }
}

#[tokio::test]
async fn an_error_before_the_task_is_a_refusal_and_a_closed_port_is_unreachable() {
    let fake = Fake::start(|_, _| {
        Scripted::Json(
            200,
            json!({"jsonrpc": "2.0", "id": 1,
            "error": {"code": -32603, "message": "refused: calling helper would form a cycle"}}),
        )
    })
    .await;
    let failure = fake
        .remote(None)
        .call(&ask("q"), &Watch::new())
        .await
        .unwrap_err();
    assert_eq!(failure.kind, FailureKind::Refused);
    assert_eq!(
        failure.message,
        "helper refused the task (error -32603): refused: calling helper would form a cycle"
    );

    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let url = format!("http://127.0.0.1:{port}/.well-known/agent-card.json");
    let allow = vec![NetRule {
        scheme: None,
        host: "127.0.0.1".into(),
        port: Some(port),
    }];
    let failure = Remote::new("gone", &url, None, allow)
        .call(&ask("q"), &Watch::new())
        .await
        .unwrap_err();
    assert_eq!(failure.kind, FailureKind::Unreachable);
    assert_eq!(
        failure.message,
        "gone could not be reached: the connection was refused"
    );
}

#[tokio::test]
async fn the_card_is_read_once_and_again_after_a_failed_read() {
    let reads = Arc::new(Mutex::new(0));
    let counted = reads.clone();
    let fake = Fake::with_card(
        move |base| {
            let mut n = counted.lock().unwrap();
            *n += 1;
            match *n {
                1 => json!({"no": "interfaces"}),
                _ => card(&format!("{base}rpc")),
            }
        },
        |_, _| Scripted::Sse(frame(None, status("TASK_STATE_COMPLETED", Some("ok")))),
    )
    .await;
    let remote = fake.remote(None);
    let failure = remote.call(&ask("q"), &Watch::new()).await.unwrap_err();
    assert_eq!(
        failure.message,
        "helper's agent card offers no A2A 1.0 JSON-RPC interface (supportedInterfaces with protocolBinding JSONRPC)"
    );
    for _ in 0..2 {
        let answer = remote.call(&ask("q"), &Watch::new()).await.unwrap();
        assert_eq!(answer.text, "ok");
    }
    assert_eq!(*reads.lock().unwrap(), 2);
}

#[tokio::test]
async fn an_event_past_4_mib_fails_the_call() {
    let fake = Fake::start(|got, _| match got.rpc() {
        "CancelTask" => Scripted::Json(200, json!({"jsonrpc": "2.0", "id": 1, "result": {}})),
        _ => Scripted::Sse(
            [
                frame(None, task("TASK_STATE_WORKING")),
                frame(None, artifact("a", &"x".repeat(wire::MAX_EVENT), false)),
            ]
            .concat(),
        ),
    })
    .await;
    let failure = fake
        .remote(None)
        .call(&ask("q"), &Watch::new())
        .await
        .unwrap_err();
    assert_eq!(failure.kind, FailureKind::Failed);
    assert_eq!(
        failure.message,
        "helper does not speak A2A 1.0 as mur reads it: its stream carried an event over 4 MiB"
    );
    until_got(&fake, "CancelTask").await;
}
