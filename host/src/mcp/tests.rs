//! The client against scripted servers: over stdio, the far ends of two
//! `tokio::io::duplex` pipes played by the test; over HTTP, a hyper server on a
//! loopback port.

mod over_http;
mod over_stdio;

use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::connection::{Bounds, Person, Progress};

fn bounds() -> Bounds {
    Bounds {
        max_message_bytes: 1024 * 1024,
        max_tools: 1000,
        startup_timeout: Duration::from_secs(5),
        tool_timeout: Duration::from_secs(5),
    }
}

/// A person who answers every question with `answer` and keeps the questions.
struct Answers {
    answer: String,
    asked: Mutex<Vec<String>>,
}

impl Answers {
    fn new(answer: &str) -> Answers {
        Answers {
            answer: answer.into(),
            asked: Mutex::new(Vec::new()),
        }
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

impl Person for Answers {
    fn ask<'a>(&'a self, prompt: &'a str) -> BoxFuture<'a, Result<String, String>> {
        self.asked.lock().unwrap().push(prompt.to_string());
        Box::pin(async move { Ok(self.answer.clone()) })
    }
}

/// Every progress report heard.
/// One progress report: progress, total, message.
type Report = (f64, Option<f64>, Option<String>);

#[derive(Default)]
struct Heard(Mutex<Vec<Report>>);

impl Progress for Heard {
    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        self.0
            .lock()
            .unwrap()
            .push((progress, total, message.map(str::to_string)));
    }
}

impl Heard {
    fn all(&self) -> Vec<(f64, Option<f64>, Option<String>)> {
        self.0.lock().unwrap().clone()
    }
}

/// What the session shares across tasks must be shareable: checked when this compiles.
#[test]
fn connections_and_their_futures_cross_tasks() {
    fn send<T: Send>(_: &T) {}
    fn shared<T: Send + Sync>() {}
    fn futures(
        connection: &super::connection::Connection,
        hooks: &super::connection::CallHooks<'_>,
    ) {
        send(&connection.call_tool("t", serde_json::Value::Null, hooks));
        send(&connection.list_tools());
    }
    shared::<super::connection::Connection>();
    let _ = futures;
}
