//! A loopback model for scenarios that must see what a capsule sends its model, or
//! need a model that behaves like one: an OpenAI-compatible endpoint on 127.0.0.1
//! (the built-in `openai` driver, not streaming) that keeps every request body.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::report::{Outcome, skip};

/// How the mock answers.
#[derive(Clone, Debug)]
pub enum Behaviour {
    /// Every request: the text `done`.
    Done,
    /// Like a model told to run `command` with the bash tool: the first request that
    /// offers `bash` calls it (every one, with `always`); every other request gets
    /// `text`, which names the tool (so a loop that plans first offers it next).
    Bash {
        command: String,
        always: bool,
        text: String,
    },
}

/// The model's address and what it was sent; it stops when dropped, or after its
/// limit.
pub struct Mock {
    port: u16,
    requests: Arc<Mutex<Vec<Value>>>,
    stop: Arc<AtomicBool>,
}

impl Mock {
    /// A mock that answers `done`.
    pub fn start(limit: Duration) -> Result<Mock, Outcome> {
        Mock::with(Behaviour::Done, limit)
    }

    pub fn with(behaviour: Behaviour, limit: Duration) -> Result<Mock, Outcome> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| skip(format!("could not listen on 127.0.0.1: {e}")))?;
        let port = listener
            .local_addr()
            .map_err(|e| skip(format!("{e}")))?
            .port();
        listener
            .set_nonblocking(true)
            .map_err(|e| skip(format!("{e}")))?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (kept, stopped) = (requests.clone(), stop.clone());
        std::thread::spawn(move || {
            let until = Instant::now() + limit;
            let calls = AtomicU64::new(0);
            while !stopped.load(Ordering::SeqCst) && Instant::now() < until {
                match listener.accept() {
                    Ok((stream, _)) => serve_one(stream, &kept, &behaviour, &calls),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Ok(Mock {
            port,
            requests,
            stop,
        })
    }

    pub fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Reads one request, keeps its body, answers it and closes the connection.
fn serve_one(
    mut stream: std::net::TcpStream,
    kept: &Mutex<Vec<Value>>,
    behaviour: &Behaviour,
    calls: &AtomicU64,
) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut bytes = Vec::new();
    let mut buf = [0u8; 8192];
    let body = loop {
        let Ok(n) = stream.read(&mut buf) else { return };
        if n == 0 {
            return;
        }
        bytes.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&bytes);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0usize);
            if body.len() >= length {
                break body.to_string();
            }
        }
    };
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let reply = answer(&request, behaviour, calls).to_string();
    if let Ok(mut list) = kept.lock() {
        list.push(request);
    }
    let _ = stream.write_all(
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
            reply.len()
        )
        .as_bytes(),
    );
}

/// The chat completion `behaviour` gives `request`.
fn answer(request: &Value, behaviour: &Behaviour, calls: &AtomicU64) -> Value {
    let (text, call) = match behaviour {
        Behaviour::Done => ("done".to_string(), None),
        Behaviour::Bash {
            command,
            always,
            text,
        } => {
            let offered = request["tools"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t["function"]["name"] == "bash"));
            // Once in the mock's life unless `always`: the next task just answers.
            if offered && (*always || calls.load(Ordering::SeqCst) == 0) {
                (String::new(), Some(command.clone()))
            } else {
                (text.clone(), None)
            }
        }
    };
    let mut message = json!({"role": "assistant", "content": text});
    let mut finish = "stop";
    if let Some(command) = call {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        message = json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": format!("call_{n}"), "type": "function",
            "function": {"name": "bash", "arguments": json!({"command": command}).to_string()}
        }]});
        finish = "tool_calls";
    }
    json!({
        "id": "chatcmpl-check", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    })
}
