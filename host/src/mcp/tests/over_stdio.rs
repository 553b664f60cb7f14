//! Stdio: the test plays the server on the far ends of the pipes, message by message.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};

use super::{Answers, Heard, bounds};
use crate::mcp::connection::{Bounds, CallHooks, Connection, Transport};
use crate::mcp::protocol::{HANDSHAKE, MODERN};

/// The server's ends: what the client writes, and where the server writes.
struct Far {
    input: BufReader<DuplexStream>,
    output: DuplexStream,
}

impl Far {
    /// The next message the client sent.
    async fn recv(&mut self) -> Value {
        let mut line = String::new();
        let read = tokio::time::timeout(Duration::from_secs(10), self.input.read_line(&mut line))
            .await
            .expect("the client wrote in time")
            .expect("the pipe reads");
        assert!(read > 0, "the client closed its output");
        serde_json::from_str(&line).expect("the client writes JSON lines")
    }

    async fn send(&mut self, message: Value) {
        self.raw(format!("{message}\n").as_bytes()).await;
    }

    async fn raw(&mut self, bytes: &[u8]) {
        self.output
            .write_all(bytes)
            .await
            .expect("the client reads");
    }

    async fn answer(&mut self, id: &Value, result: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "result": result}))
            .await;
    }

    /// Accepts the probe: a server of the modern era.
    async fn modern(&mut self) {
        let probe = self.recv().await;
        assert_eq!(probe["method"], "server/discover");
        let meta = &probe["params"]["_meta"];
        assert_eq!(meta["io.modelcontextprotocol/protocolVersion"], MODERN);
        let result = json!({
            "resultType": "complete",
            "supportedVersions": [MODERN],
            "capabilities": {"tools": {}},
            "cacheScope": "public",
        });
        self.answer(&probe["id"], result).await;
    }

    /// Refuses the probe and takes the handshake: a server of the handshake era.
    async fn handshake(&mut self) -> Value {
        let probe = self.recv().await;
        assert_eq!(probe["method"], "server/discover");
        let error = json!({"code": -32601, "message": "Method not found"});
        self.send(json!({"jsonrpc": "2.0", "id": probe["id"], "error": error}))
            .await;
        let initialize = self.recv().await;
        assert_eq!(initialize["method"], "initialize");
        let result = json!({
            "protocolVersion": HANDSHAKE,
            "capabilities": {"tools": {"listChanged": true}},
            "serverInfo": {"name": "fake", "version": "1"},
        });
        self.answer(&initialize["id"], result).await;
        let initialized = self.recv().await;
        assert_eq!(initialized["method"], "notifications/initialized");
        assert!(initialized.get("id").is_none());
        initialize
    }
}

/// A connection's transport and the server's ends of it.
fn pipes() -> (Transport, Far) {
    let (stdin, far_input) = tokio::io::duplex(64 * 1024);
    let (far_output, stdout) = tokio::io::duplex(64 * 1024);
    let transport = Transport::Stdio {
        stdin: Box::new(stdin),
        stdout: Box::new(stdout),
    };
    let far = Far {
        input: BufReader::new(far_input),
        output: far_output,
    };
    (transport, far)
}

async fn open_with(bounds: Bounds, modern: bool) -> (Connection, Far) {
    let (transport, mut far) = pipes();
    let open = Connection::open("fake", transport, bounds);
    let (connection, ()) = tokio::join!(open, async {
        if modern {
            far.modern().await
        } else {
            far.handshake().await;
        }
    });
    (connection.expect("the session opens"), far)
}

async fn open(modern: bool) -> (Connection, Far) {
    open_with(bounds(), modern).await
}

fn text(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": false})
}

#[tokio::test]
async fn a_modern_server_is_spoken_to_with_the_envelope_on_every_request() {
    let (connection, mut far) = open(true).await;
    assert_eq!(connection.era(), MODERN);
    let server = async {
        let list = far.recv().await;
        assert_eq!(list["method"], "tools/list");
        let meta = &list["params"]["_meta"];
        assert_eq!(meta["io.modelcontextprotocol/protocolVersion"], MODERN);
        assert_eq!(
            meta["io.modelcontextprotocol/clientCapabilities"],
            json!({"elicitation": {"form": {}}})
        );
        assert_eq!(meta["io.modelcontextprotocol/clientInfo"]["name"], "mur");
        let tool = json!({"name": "echo", "inputSchema": {"type": "object"}});
        far.answer(
            &list["id"],
            json!({"resultType": "complete", "tools": [tool]}),
        )
        .await;
    };
    let (tools, ()) = tokio::join!(connection.list_tools(), server);
    let tools = tools.unwrap();
    assert_eq!(tools[0].name, "echo");
    assert_eq!(tools[0].input_schema, json!({"type": "object"}));
}

#[tokio::test]
async fn a_refused_probe_falls_back_to_the_handshake() {
    let (transport, mut far) = pipes();
    let open = Connection::open("fake", transport, bounds());
    let (connection, initialize) = tokio::join!(open, far.handshake());
    let connection = connection.unwrap();
    assert_eq!(connection.era(), HANDSHAKE);
    let params = &initialize["params"];
    assert_eq!(params["protocolVersion"], HANDSHAKE);
    assert_eq!(params["capabilities"], json!({"elicitation": {}}));
    assert_eq!(params["clientInfo"]["name"], "mur");
    assert!(params.get("_meta").is_none());
}

#[tokio::test]
async fn an_unanswered_probe_falls_back_to_the_handshake() {
    let (transport, mut far) = pipes();
    let mut bounds = bounds();
    bounds.startup_timeout = Duration::from_millis(800);
    let open = Connection::open("fake", transport, bounds);
    let server = async {
        // A server of the handshake era that ignores what it does not know.
        assert_eq!(far.recv().await["method"], "server/discover");
        let initialize = far.recv().await;
        assert_eq!(initialize["method"], "initialize");
        let result = json!({"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {}});
        far.answer(&initialize["id"], result).await;
        assert_eq!(far.recv().await["method"], "notifications/initialized");
    };
    let (connection, ()) = tokio::join!(open, server);
    assert_eq!(connection.unwrap().era(), "2025-06-18");
}

#[tokio::test]
async fn tool_lists_are_followed_page_by_page() {
    let (connection, mut far) = open(false).await;
    let server = async {
        for (page, cursor) in [(0, None), (1, Some("p1")), (2, Some("p2"))] {
            let list = far.recv().await;
            assert_eq!(list["params"].get("cursor").and_then(Value::as_str), cursor);
            let tool = json!({"name": format!("t{page}"), "inputSchema": {"type": "object"}});
            let mut result = json!({"tools": [tool]});
            if page < 2 {
                result["nextCursor"] = json!(format!("p{}", page + 1));
            }
            far.answer(&list["id"], result).await;
        }
    };
    let (tools, ()) = tokio::join!(connection.list_tools(), server);
    let names: Vec<String> = tools.unwrap().into_iter().map(|t| t.name).collect();
    assert_eq!(names, ["t0", "t1", "t2"]);
}

#[tokio::test]
async fn a_list_past_max_tools_is_refused_with_the_count() {
    let mut bounds = bounds();
    bounds.max_message_bytes = 16 * 1024 * 1024;
    let (connection, mut far) = open_with(bounds, false).await;
    let server = async {
        let list = far.recv().await;
        let tools: Vec<Value> = (0..100_000)
            .map(|i| json!({"name": format!("t{i}"), "inputSchema": {"type": "object"}}))
            .collect();
        far.answer(&list["id"], json!({"tools": tools})).await;
    };
    let (listed, ()) = tokio::join!(connection.list_tools(), server);
    let message = listed.unwrap_err().message;
    assert!(message.contains("server 'fake'"), "{message}");
    assert!(message.contains("1000 allowed (100000 seen)"), "{message}");
}

#[tokio::test]
async fn a_line_past_the_bound_stops_the_connection() {
    let (connection, mut far) = open(false).await;
    let server = async move {
        let call = far.recv().await;
        assert_eq!(call["method"], "tools/call");
        // 50 MB of one line; the client stops reading after 1 MiB and hangs up.
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..800 {
            if far.output.write_all(&chunk).await.is_err() {
                return true;
            }
        }
        false
    };
    let hooks = CallHooks::default();
    let call = connection.call_tool("echo", json!({}), &hooks);
    let (called, hung_up) = tokio::join!(call, server);
    let message = called.unwrap_err().message;
    assert_eq!(
        message,
        "server 'fake' sent a message larger than 1 MiB; it was stopped"
    );
    assert_eq!(connection.gone().as_deref(), Some(message.as_str()));
    assert!(hung_up, "the client stopped reading the long line");
}

#[tokio::test]
async fn junk_lines_are_skipped_and_counted_until_there_are_too_many() {
    let (connection, mut far) = open(false).await;
    let server = async {
        let call = far.recv().await;
        far.raw(b"not json\n\n{\"half\": \n[1,2]\n").await;
        far.answer(&call["id"], text("ok")).await;
    };
    let hooks = CallHooks::default();
    let (called, ()) = tokio::join!(connection.call_tool("echo", json!({}), &hooks), server);
    assert_eq!(called.unwrap(), text("ok"));
    assert_eq!(connection.garbled(), 3);
    assert!(connection.gone().is_none());
    let server = async {
        let _call = far.recv().await;
        // The client hangs up part way: what is left is not read.
        for _ in 0..100 {
            let _ = far.output.write_all(b"junk\n").await;
        }
    };
    let (called, ()) = tokio::join!(connection.call_tool("echo", json!({}), &hooks), server);
    let message = called.unwrap_err().message;
    assert!(
        message.contains("more than 100 lines that are not JSON-RPC messages"),
        "{message}"
    );
    assert_eq!(connection.gone(), Some(message));
}

#[tokio::test]
async fn a_flood_of_notifications_neither_queues_nor_starves_the_answer() {
    // The call's own timeout is not what is tested: a debug build reading 100,000 lines
    // on a loaded machine may take longer than the default bounds' 5 s.
    let mut bounds = bounds();
    bounds.tool_timeout = Duration::from_secs(60);
    let (connection, mut far) = open_with(bounds, false).await;
    let heard = Heard::default();
    let server = async {
        let call = far.recv().await;
        let token = call["params"]["_meta"]["progressToken"].clone();
        let mut flood = String::new();
        for i in 0..50_000 {
            let log = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": i}});
            let stray = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 999_999, "progress": i}});
            flood.push_str(&format!("{log}\n{stray}\n"));
            if flood.len() > 256 * 1024 {
                far.raw(flood.as_bytes()).await;
                flood.clear();
            }
        }
        far.raw(flood.as_bytes()).await;
        let ours = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": token, "progress": 1}});
        far.send(ours).await;
        far.answer(&call["id"], text("done")).await;
    };
    let hooks = CallHooks {
        person: None,
        progress: Some(&heard),
        traceparent: None,
    };
    let started = Instant::now();
    let (called, ()) = tokio::join!(connection.call_tool("slow", json!({}), &hooks), server);
    assert_eq!(called.unwrap(), text("done"));
    assert_eq!(heard.all(), [(1.0, None, None)]);
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!(connection.garbled(), 0);
}

#[tokio::test]
async fn progress_reaches_the_callback_before_the_result() {
    let (connection, mut far) = open(true).await;
    let heard = Heard::default();
    let server = async {
        let call = far.recv().await;
        let token = call["params"]["_meta"]["progressToken"].clone();
        assert!(token.is_u64(), "a token was sent: {call}");
        for step in 1..=3 {
            let params = json!({"progressToken": token, "progress": step, "total": 3, "message": format!("step {step}")});
            far.send(
                json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": params}),
            )
            .await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        far.answer(&call["id"], text("done")).await;
    };
    let hooks = CallHooks {
        person: None,
        progress: Some(&heard),
        traceparent: None,
    };
    let (called, ()) = tokio::join!(connection.call_tool("slow", json!({}), &hooks), server);
    assert_eq!(called.unwrap(), text("done"));
    let heard = heard.all();
    assert_eq!(
        heard.last(),
        Some(&(3.0, Some(3.0), Some("step 3".to_string())))
    );
}

#[tokio::test]
async fn a_handshake_servers_questions_are_answered_while_the_call_waits() {
    let (connection, mut far) = open(false).await;
    let person = Answers::new("octo/repo");
    let server = async {
        let call = far.recv().await;
        far.send(json!({"jsonrpc": "2.0", "id": "p", "method": "ping"}))
            .await;
        assert_eq!(
            far.recv().await,
            json!({"jsonrpc": "2.0", "id": "p", "result": {}})
        );
        far.send(
            json!({"jsonrpc": "2.0", "id": 9, "method": "sampling/createMessage", "params": {}}),
        )
        .await;
        let refused = far.recv().await;
        assert_eq!(refused["id"], 9);
        assert_eq!(refused["error"]["code"], -32601);
        let schema = json!({"type": "object", "properties": {"repo": {"type": "string"}}, "required": ["repo"]});
        let params = json!({"mode": "form", "message": "Which repo?", "requestedSchema": schema});
        far.send(
            json!({"jsonrpc": "2.0", "id": "e1", "method": "elicitation/create", "params": params}),
        )
        .await;
        let answer = far.recv().await;
        assert_eq!(answer["id"], "e1");
        assert_eq!(
            answer["result"],
            json!({"action": "accept", "content": {"repo": "octo/repo"}})
        );
        far.answer(&call["id"], text("opened")).await;
    };
    let hooks = CallHooks {
        person: Some(&person),
        progress: None,
        traceparent: None,
    };
    let (called, ()) = tokio::join!(connection.call_tool("open", json!({}), &hooks), server);
    assert_eq!(called.unwrap(), text("opened"));
    let asked = person.asked();
    assert_eq!(asked.len(), 1);
    assert!(
        asked[0].contains("Which repo?") && asked[0].contains("repo"),
        "{asked:?}"
    );
}

#[tokio::test]
async fn a_modern_servers_input_request_is_answered_and_the_call_sent_again() {
    let (connection, mut far) = open(true).await;
    let person = Answers::new("7");
    let server = async {
        let first = far.recv().await;
        assert_eq!(first["params"]["arguments"], json!({"q": 1}));
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        let ask = json!({"method": "elicitation/create", "params": {"mode": "form", "message": "How many?", "requestedSchema": schema}});
        let result = json!({"resultType": "input_required", "inputRequests": {"a1": ask}, "requestState": "st-1"});
        far.answer(&first["id"], result).await;
        let second = far.recv().await;
        assert_eq!(second["method"], "tools/call");
        assert_ne!(second["id"], first["id"]);
        let params = &second["params"];
        assert_eq!(params["arguments"], json!({"q": 1}));
        assert_eq!(params["requestState"], "st-1");
        assert_eq!(
            params["inputResponses"],
            json!({"a1": {"action": "accept", "content": {"n": 7}}})
        );
        assert_eq!(
            params["_meta"]["io.modelcontextprotocol/protocolVersion"],
            MODERN
        );
        let mut done = text("7 it is");
        done["resultType"] = json!("complete");
        far.answer(&second["id"], done).await;
    };
    let hooks = CallHooks {
        person: Some(&person),
        progress: None,
        traceparent: None,
    };
    let (called, ()) = tokio::join!(
        connection.call_tool("count", json!({"q": 1}), &hooks),
        server
    );
    assert_eq!(called.unwrap()["content"][0]["text"], "7 it is");
    assert_eq!(person.asked().len(), 1);
}

#[tokio::test]
async fn without_a_person_a_question_is_declined_and_the_call_goes_on() {
    let (connection, mut far) = open(false).await;
    let server = async {
        let call = far.recv().await;
        let params =
            json!({"message": "Sure?", "requestedSchema": {"type": "object", "properties": {}}});
        far.send(
            json!({"jsonrpc": "2.0", "id": 1, "method": "elicitation/create", "params": params}),
        )
        .await;
        assert_eq!(far.recv().await["result"], json!({"action": "decline"}));
        far.answer(&call["id"], text("declined")).await;
    };
    let hooks = CallHooks::default();
    let (called, ()) = tokio::join!(connection.call_tool("t", json!({}), &hooks), server);
    assert_eq!(called.unwrap(), text("declined"));
}

#[tokio::test]
async fn a_dropped_call_is_cancelled_without_waiting() {
    let (connection, mut far) = open(false).await;
    let hooks = CallHooks::default();
    let call = far.recv();
    let given_up = tokio::time::timeout(
        Duration::from_millis(300),
        connection.call_tool("slow", json!({}), &hooks),
    );
    let (call, given_up) = tokio::join!(call, given_up);
    assert!(given_up.is_err(), "the call was dropped");
    let cancelled = far.recv().await;
    assert_eq!(cancelled["method"], "notifications/cancelled");
    assert_eq!(cancelled["params"]["requestId"], call["id"]);
    assert!(cancelled["params"]["reason"].is_string());
    // The answer that comes late is ignored.
    far.answer(&call["id"], text("late")).await;
    assert!(connection.gone().is_none());
}

#[tokio::test]
async fn a_call_past_its_timeout_fails_and_is_cancelled() {
    let mut bounds = bounds();
    bounds.tool_timeout = Duration::from_millis(300);
    let (connection, mut far) = open_with(bounds, true).await;
    let hooks = CallHooks::default();
    let (call, called) = tokio::join!(far.recv(), connection.call_tool("slow", json!({}), &hooks));
    assert_eq!(
        called.unwrap_err().message,
        "server 'fake' did not answer the call of tool 'slow' within 0.3 s"
    );
    let cancelled = far.recv().await;
    assert_eq!(cancelled["method"], "notifications/cancelled");
    assert_eq!(cancelled["params"]["requestId"], call["id"]);
    assert_eq!(cancelled["params"]["reason"], "the call timed out");
}

#[tokio::test]
async fn a_server_that_exits_mid_call_fails_it_at_once() {
    let (connection, mut far) = open(false).await;
    let hooks = CallHooks::default();
    let server = async move {
        let _call = far.recv().await;
        drop(far);
    };
    let started = Instant::now();
    let (called, ()) = tokio::join!(connection.call_tool("t", json!({}), &hooks), server);
    assert_eq!(
        called.unwrap_err().message,
        "server 'fake' exited in the middle of the call"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(connection.gone().as_deref(), Some("server 'fake' exited"));
    let again = connection.call_tool("t", json!({}), &hooks).await;
    assert_eq!(again.unwrap_err().message, "server 'fake' exited");
}

#[tokio::test]
async fn list_changed_bumps_the_counter_and_stray_answers_are_ignored() {
    let (connection, mut far) = open(false).await;
    let mut changed = connection.tools_changed();
    far.send(json!({"jsonrpc": "2.0", "id": 4242, "result": {}}))
        .await;
    far.send(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}))
        .await;
    tokio::time::timeout(Duration::from_secs(5), changed.changed())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(*changed.borrow(), 1);
    assert!(connection.gone().is_none());
    assert_eq!(connection.garbled(), 0);
}

#[tokio::test]
async fn closing_closes_the_servers_input() {
    let (connection, mut far) = open(false).await;
    connection.close().await;
    let mut line = String::new();
    let read = tokio::time::timeout(Duration::from_secs(5), far.input.read_line(&mut line))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read, 0, "stdin ended");
}

/// A `traceparent` as a tool call's span gives it.
const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

#[tokio::test]
async fn a_call_carries_its_traceparent_in_meta_in_both_eras() {
    for modern in [true, false] {
        let (connection, mut far) = open(modern).await;
        let heard = Heard::default();
        let server = async {
            let call = far.recv().await;
            assert_eq!(call["method"], "tools/call");
            let params = &call["params"];
            assert_eq!(params["arguments"], json!({"q": 1}));
            let meta = &params["_meta"];
            assert_eq!(meta["traceparent"], TRACEPARENT, "{call}");
            // Beside what `_meta` carries already, never in place of it.
            assert!(meta["progressToken"].is_u64(), "{call}");
            let version = &meta["io.modelcontextprotocol/protocolVersion"];
            match modern {
                true => assert_eq!(version, MODERN),
                false => assert!(version.is_null(), "{call}"),
            }
            far.answer(&call["id"], text("traced")).await;
        };
        let hooks = CallHooks {
            person: None,
            progress: Some(&heard),
            traceparent: Some(TRACEPARENT),
        };
        let called = connection.call_tool("echo", json!({"q": 1}), &hooks);
        let (called, ()) = tokio::join!(called, server);
        assert_eq!(called.unwrap(), text("traced"));
    }
}

#[tokio::test]
async fn every_round_of_a_modern_call_carries_its_traceparent() {
    let (connection, mut far) = open(true).await;
    let person = Answers::new("7");
    let server = async {
        let first = far.recv().await;
        assert_eq!(first["params"]["_meta"]["traceparent"], TRACEPARENT);
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        let ask = json!({"method": "elicitation/create", "params": {"mode": "form", "message": "How many?", "requestedSchema": schema}});
        let result = json!({"resultType": "input_required", "inputRequests": {"a1": ask}, "requestState": "st-1"});
        far.answer(&first["id"], result).await;
        let second = far.recv().await;
        assert_eq!(second["params"]["requestState"], "st-1");
        let meta = &second["params"]["_meta"];
        assert_eq!(meta["traceparent"], TRACEPARENT, "{second}");
        assert_eq!(meta["io.modelcontextprotocol/protocolVersion"], MODERN);
        let mut done = text("7 it is");
        done["resultType"] = json!("complete");
        far.answer(&second["id"], done).await;
    };
    let hooks = CallHooks {
        person: Some(&person),
        progress: None,
        traceparent: Some(TRACEPARENT),
    };
    let (called, ()) = tokio::join!(connection.call_tool("count", json!({}), &hooks), server);
    assert_eq!(called.unwrap()["content"][0]["text"], "7 it is");
}

#[tokio::test]
async fn a_malformed_traceparent_is_not_sent() {
    let (connection, mut far) = open(false).await;
    let server = async {
        let call = far.recv().await;
        assert!(call["params"].get("_meta").is_none(), "{call}");
        far.answer(&call["id"], text("ok")).await;
    };
    let hooks = CallHooks {
        traceparent: Some("00-not-a-traceparent-01"),
        ..CallHooks::default()
    };
    let (called, ()) = tokio::join!(connection.call_tool("echo", json!({}), &hooks), server);
    assert_eq!(called.unwrap(), text("ok"));
}
