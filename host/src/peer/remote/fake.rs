//! The unit tests' fake A2A peer on a loopback socket: its agent card, and each
//! JSON-RPC request answered as a test scripts it (a JSON body, or an event stream that
//! ends, breaks or hangs), every request it got kept for the test to read.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{Ask, NetRule, Remote, Watcher};
use crate::peer::chain::{Chain, Link};

/// One request the fake peer got.
#[derive(Debug, Clone)]
pub(super) struct Got {
    pub(super) path: String,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: Value,
}

impl Got {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub(super) fn rpc(&self) -> &str {
        self.body["method"].as_str().unwrap_or_default()
    }
}

/// How the fake answers one JSON-RPC request.
pub(super) enum Scripted {
    Json(u16, Value),
    /// An event stream: these frames, then the connection closes.
    Sse(String),
    /// An event stream: these frames, then nothing until the caller goes.
    SseHang(String),
}

type Script = dyn Fn(&Got, usize) -> Scripted + Send + Sync;
type Card = dyn Fn(&str) -> Value + Send + Sync;

pub(super) struct Fake {
    /// `http://127.0.0.1:<port>/`.
    pub(super) base: String,
    pub(super) port: u16,
    pub(super) got: Arc<Mutex<Vec<Got>>>,
}

impl Fake {
    /// A peer whose card names its JSON-RPC interface at `<base>rpc`, and whose n-th
    /// JSON-RPC request (from 0) `script` answers.
    pub(super) async fn start(
        script: impl Fn(&Got, usize) -> Scripted + Send + Sync + 'static,
    ) -> Fake {
        Fake::with_card(|base| card(&format!("{base}rpc")), script).await
    }

    pub(super) async fn with_card(
        card: impl Fn(&str) -> Value + Send + Sync + 'static,
        script: impl Fn(&Got, usize) -> Scripted + Send + Sync + 'static,
    ) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let base = format!("http://127.0.0.1:{port}/");
        let got = Arc::new(Mutex::new(Vec::new()));
        let card: Arc<Card> = Arc::new(card);
        let script: Arc<Script> = Arc::new(script);
        let (kept, at) = (got.clone(), base.clone());
        tokio::spawn(async move {
            let rpcs = Arc::new(Mutex::new(0usize));
            while let Ok((socket, _)) = listener.accept().await {
                let (got, card, script, rpcs) =
                    (kept.clone(), card.clone(), script.clone(), rpcs.clone());
                let base = at.clone();
                tokio::spawn(async move { serve(socket, &base, got, card, script, rpcs).await });
            }
        });
        Fake { base, port, got }
    }

    pub(super) fn card_url(&self) -> String {
        format!("{}.well-known/agent-card.json", self.base)
    }

    pub(super) fn allow(&self) -> Vec<NetRule> {
        vec![NetRule {
            scheme: Some("http".into()),
            host: "127.0.0.1".into(),
            port: Some(self.port),
        }]
    }

    pub(super) fn remote(&self, token: Option<&str>) -> Remote {
        Remote::new(
            "helper",
            &self.card_url(),
            token.map(str::to_string),
            self.allow(),
        )
    }

    pub(super) fn got(&self) -> Vec<Got> {
        self.got.lock().unwrap().clone()
    }

    pub(super) fn rpcs(&self) -> Vec<Got> {
        self.got()
            .into_iter()
            .filter(|g| g.path == "/rpc")
            .collect()
    }
}

async fn serve(
    mut socket: TcpStream,
    base: &str,
    got: Arc<Mutex<Vec<Got>>>,
    card: Arc<Card>,
    script: Arc<Script>,
    rpcs: Arc<Mutex<usize>>,
) {
    let Some(request) = read_request(&mut socket).await else {
        return;
    };
    got.lock().unwrap().push(request.clone());
    let reply = if request.path.ends_with("agent-card.json") {
        Scripted::Json(200, card(base))
    } else {
        let n = {
            let mut count = rpcs.lock().unwrap();
            *count += 1;
            *count - 1
        };
        script(&request, n)
    };
    match reply {
        Scripted::Json(status, body) => {
            let body = body.to_string();
            let head = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = socket.write_all(format!("{head}{body}").as_bytes()).await;
        }
        Scripted::Sse(frames) => {
            let _ = socket.write_all(sse_head(&frames).as_bytes()).await;
        }
        Scripted::SseHang(frames) => {
            let _ = socket.write_all(sse_head(&frames).as_bytes()).await;
            let mut sink = [0u8; 64];
            while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
        }
    }
    let _ = socket.shutdown().await;
}

fn sse_head(frames: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n{frames}"
    )
}

async fn read_request(socket: &mut TcpStream) -> Option<Got> {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        bytes.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut parsed = httparse::Request::new(&mut headers);
        let Ok(httparse::Status::Complete(head)) = parsed.parse(&bytes) else {
            continue;
        };
        let headers: Vec<(String, String)> = parsed
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_string(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect();
        let length = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.parse::<usize>().ok())
            .unwrap_or(0);
        let path = parsed.path.unwrap_or_default().to_string();
        while bytes.len() < head + length {
            let n = socket.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            bytes.extend_from_slice(&chunk[..n]);
        }
        let body = serde_json::from_slice(&bytes[head..head + length]).unwrap_or(Value::Null);
        return Some(Got {
            path,
            headers,
            body,
        });
    }
}

pub(super) fn card(rpc: &str) -> Value {
    json!({
        "name": "helper",
        "version": "1.0.0",
        "supportedInterfaces": [
            {"url": rpc, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "capabilities": {"streaming": true},
    })
}

/// One SSE frame carrying `result`, numbered when `id` is given.
pub(super) fn frame(id: Option<u64>, result: Value) -> String {
    let data = json!({"jsonrpc": "2.0", "id": 1, "result": result});
    match id {
        Some(id) => format!("id: {id}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

pub(super) const TASK: &str = "task-1";

pub(super) fn task(state: &str) -> Value {
    json!({"task": {"id": TASK, "contextId": "ctx-1", "status": {"state": state}}})
}

pub(super) fn status(state: &str, text: Option<&str>) -> Value {
    let mut status = json!({"state": state});
    if let Some(text) = text {
        status["message"] = json!({
            "messageId": format!("m-{state}"), "role": "ROLE_AGENT", "parts": [{"text": text}]
        });
    }
    json!({"statusUpdate": {"taskId": TASK, "contextId": "ctx-1", "status": status}})
}

pub(super) fn artifact(id: &str, text: &str, append: bool) -> Value {
    json!({"artifactUpdate": {
        "taskId": TASK, "contextId": "ctx-1", "append": append,
        "artifact": {"artifactId": id, "parts": [{"text": text}]}
    }})
}

/// What the caller's side heard.
pub(super) struct Watch {
    pub(super) taken: Mutex<Vec<String>>,
    pub(super) prompts: Mutex<Vec<String>>,
    pub(super) reply: Result<String, String>,
}

impl Watch {
    pub(super) fn new() -> Watch {
        Watch::replying(Err("nobody is there".into()))
    }

    pub(super) fn replying(reply: Result<String, String>) -> Watch {
        Watch {
            taken: Mutex::new(Vec::new()),
            prompts: Mutex::new(Vec::new()),
            reply,
        }
    }
}

impl Watcher for Watch {
    fn taken(&self, task_id: &str, _page: Option<&str>) {
        self.taken.lock().unwrap().push(task_id.to_string());
    }

    fn input<'a>(&'a self, prompt: &'a str) -> BoxFuture<'a, Result<String, String>> {
        self.prompts.lock().unwrap().push(prompt.to_string());
        Box::pin(async move { self.reply.clone() })
    }
}

pub(super) fn ask(text: &str) -> Ask {
    let lead = Link {
        name: "lead".into(),
        session: "ses_lead".into(),
    };
    Ask {
        call_id: "mcl_test".into(),
        caller_task: "tsk_caller".into(),
        text: text.into(),
        chain: Chain::empty().then(lead),
        traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into()),
        max_answer_bytes: 1024 * 1024,
    }
}

/// Waits (up to 5 s) until the fake got a request `rpc`.
pub(super) async fn until_got(fake: &Fake, rpc: &str) -> Got {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(got) = fake.rpcs().into_iter().find(|g| g.rpc() == rpc) {
            return got;
        }
        assert!(Instant::now() < deadline, "no {rpc} came: {:?}", fake.got());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
