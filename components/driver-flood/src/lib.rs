//! A hostile driver for the limits tests. `config.mode`: `big` answers with a reply of
//! `config.n` bytes of text; `calls` asks for `config.n` tool calls of `config.tool`
//! in one reply (then answers `done` once it sees a tool result).

wit_bindgen::generate!({
    path: ["../../wit/message", "../../wit/text", "../../wit/driver"],
    world: "murmur:driver/driver",
    generate_all,
});

use exports::murmur::driver::inference::{
    Guest, InferError, Request, Response, Settings, StopReason, Usage,
};
use murmur::message::types::{Block, ToolCall};
use serde_json::Value;
use std::sync::Mutex;

struct Component;

static CONFIG: Mutex<Value> = Mutex::new(Value::Null);

impl Guest for Component {
    fn configure(settings: Settings) -> Result<(), String> {
        let config: Value = serde_json::from_str(&settings.config).map_err(|e| e.to_string())?;
        *CONFIG.lock().unwrap_or_else(|p| p.into_inner()) = config;
        Ok(())
    }

    fn infer(request: Request) -> Result<Response, InferError> {
        let config = CONFIG.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let n = config["n"].as_u64().unwrap_or(1) as usize;
        match config["mode"].as_str().unwrap_or("") {
            // One copy of the big text in the driver's memory, handed over as it is.
            "big" => Ok(answer(
                StopReason::EndTurn,
                vec![Block::Text("b".repeat(n))],
            )),
            "calls" if has_a_result(&request) => Ok(answer(
                StopReason::EndTurn,
                vec![Block::Text("done".into())],
            )),
            "calls" => {
                let tool = config["tool"].as_str().unwrap_or("t");
                let calls = (0..n)
                    .map(|i| {
                        Block::ToolCall(ToolCall {
                            id: format!("c{i}"),
                            name: tool.to_string(),
                            input: "{}".into(),
                        })
                    })
                    .collect();
                Ok(answer(StopReason::ToolCall, calls))
            }
            other => Err(InferError::Failed(format!("unknown mode '{other}'"))),
        }
    }
}

/// Whether the conversation already holds a tool's answer.
fn has_a_result(request: &Request) -> bool {
    request
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .any(|block| matches!(block, Block::ToolResult(_)))
}

fn answer(stop_reason: StopReason, content: Vec<Block>) -> Response {
    Response {
        stop_reason,
        content,
        usage: Usage {
            input_tokens: None,
            output_tokens: None,
            cached_tokens: None,
            cache_write_tokens: None,
            thinking_tokens: None,
        },
    }
}

export!(Component);
