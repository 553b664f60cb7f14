//! A tool that asks the person behind the task a question (`murmur:task/task`
//! `request-input`) and returns the reply. When no reply can come (no A2A task, or the
//! wait timed out) the call fails with the host's error as its data.

wit_bindgen::generate!({
    path: ["../../wit/text", "../../wit/task", "../../wit/tool"],
    world: "murmur:tool/tool",
    // `murmur:text` and `murmur:task` are other packages, so their bindings must be
    // asked for explicitly.
    generate_all,
});

use exports::murmur::tool::run::{Guest, Spec, Status, ToolResult};
use murmur::task::task::request_input;
use serde_json::Value;

struct Component;

impl Guest for Component {
    fn describe() -> Spec {
        Spec {
            description: "Asks the user a question and returns their reply.".into(),
            input_schema: r#"{"type":"object","properties":{"prompt":{"type":"string","description":"The question to ask"}},"required":["prompt"]}"#.into(),
        }
    }

    fn call(input: String) -> ToolResult {
        let prompt = match serde_json::from_str::<Value>(&input) {
            Ok(Value::Object(fields)) => match fields.get("prompt") {
                Some(Value::String(prompt)) => prompt.clone(),
                _ => return failed("'prompt' must be a string".into()),
            },
            _ => return failed("input must be a JSON object".into()),
        };
        match request_input(&prompt) {
            Ok(reply) => ToolResult {
                status: Status::Passed,
                data: Some(reply),
                summary: None,
                truncated: false,
            },
            Err(e) => failed(e),
        }
    }
}

fn failed(detail: String) -> ToolResult {
    ToolResult {
        status: Status::Error,
        data: Some(detail),
        summary: None,
        truncated: false,
    }
}

export!(Component);
