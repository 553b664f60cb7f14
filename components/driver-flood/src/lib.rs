//! A hostile driver for the limits tests. `config.mode`: `big` answers with a reply of
//! `config.n` bytes of text; `calls` asks for `config.n` tool calls of `config.tool`
//! in one reply (then answers `done` once it sees a tool result).

wit_bindgen::generate!({
    path: ["../../wit/text", "../../wit/driver"],
    world: "murmur:driver/driver",
    generate_all,
});

use exports::murmur::driver::inference::{Guest, Settings};
use serde_json::{Value, json};
use std::sync::Mutex;

struct Component;

static CONFIG: Mutex<Value> = Mutex::new(Value::Null);

impl Guest for Component {
    fn configure(settings: Settings) -> Result<(), String> {
        let config: Value = serde_json::from_str(&settings.config).map_err(|e| e.to_string())?;
        *CONFIG.lock().unwrap_or_else(|p| p.into_inner()) = config;
        Ok(())
    }

    fn infer(request: String) -> Result<String, String> {
        let config = CONFIG.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let n = config["n"].as_u64().unwrap_or(1) as usize;
        let end = |text: &str| {
            json!({"stop_reason": "end_turn", "content": [{"type": "text", "text": text}]})
                .to_string()
        };
        match config["mode"].as_str().unwrap_or("") {
            "big" => {
                // Built in place: one copy of the big text in the driver's memory.
                let mut reply = String::with_capacity(n + 80);
                reply.push_str(r#"{"stop_reason":"end_turn","content":[{"type":"text","text":""#);
                reply.extend(std::iter::repeat_n('b', n));
                reply.push_str(r#""}]}"#);
                Ok(reply)
            }
            "calls" if request.contains("tool_result") => Ok(end("done")),
            "calls" => {
                let tool = config["tool"].as_str().unwrap_or("t");
                let mut reply = String::with_capacity(n * 64);
                reply.push_str(r#"{"stop_reason":"tool_call","content":["#);
                for i in 0..n {
                    if i > 0 {
                        reply.push(',');
                    }
                    reply.push_str(&format!(
                        r#"{{"type":"tool_call","id":"c{i}","name":"{tool}","input":{{}}}}"#
                    ));
                }
                reply.push_str("]}");
                Ok(reply)
            }
            other => Err(format!("unknown mode '{other}'")),
        }
    }
}

export!(Component);
