//! A deliberately broken tool, for `mur component check`'s own tests: it answers a
//! valid input, but traps (an `expect` on the input) where it should return an error
//! result. The check must fail it on the scenario
//! "tool: a schema-invalid input gets an error result, not a trap".

wit_bindgen::generate!({
    path: ["../../wit/text", "../../wit/task", "../../wit/tool"],
    world: "murmur:tool/tool",
    generate_all,
});

use exports::murmur::tool::run::{Guest, Spec, Status, ToolResult};
use serde_json::Value;

struct Component;

impl Guest for Component {
    fn describe() -> Spec {
        Spec {
            description: "Shouts its text back, and traps on input it does not expect.".into(),
            input_schema:
                r#"{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}"#
                    .into(),
        }
    }

    fn call(input: String) -> ToolResult {
        let input: Value = serde_json::from_str(&input).expect("input is JSON");
        // The defect: a missing or mistyped `text` traps instead of answering `error`.
        let text = input["text"].as_str().expect("'text' is a string");
        ToolResult {
            status: Status::Passed,
            data: Some(text.to_uppercase()),
            summary: None,
            truncated: false,
        }
    }
}

export!(Component);
