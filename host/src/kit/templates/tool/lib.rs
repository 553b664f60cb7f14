//! `{{name}}`: a model-callable tool (world `murmur:tool/tool`).
//!
//! It turns a text to upper case. Replace `describe` and `run` with your own; keep the
//! shape: check the input against the schema and answer a bad one with an error result
//! (the model reads it and can try again) rather than a panic (a trap fails the call).

wit_bindgen::generate!({
    path: ["wit/text", "wit/task", "wit/tool"],
    world: "murmur:tool/tool",
    // `murmur:text` and `murmur:task` are packages of their own: ask for their bindings.
    generate_all,
});

use exports::murmur::tool::run::{Guest, Spec, Status, ToolResult};
use murmur::text::chunks;
use serde_json::Value;

struct Component;

impl Guest for Component {
    fn describe() -> Spec {
        Spec {
            description: "Turns a text to upper case.".into(),
            // A JSON Schema of the input object: the model is told it, and
            // `mur component check` calls the tool with inputs that fit it and with
            // inputs that do not.
            input_schema: r#"{"type":"object","properties":{"text":{"type":"string","description":"The text to turn to upper case"}},"required":["text"],"additionalProperties":false}"#.into(),
        }
    }

    fn call(input: String) -> ToolResult {
        match parse(&input) {
            Ok(text) => run(&text),
            Err(why) => answer(
                Status::Error,
                format!("input must be a JSON object with a string 'text': {why}"),
            ),
        }
    }
}

/// The tool's work, on an input that fits the schema.
fn run(text: &str) -> ToolResult {
    // A piece of progress, streamed while the call runs (a `text` frame).
    chunks::text(&format!("{} characters\n", text.chars().count()));
    // The tool sees the session workdir as `/` and nothing else; `std::fs` works there.
    answer(Status::Passed, text.to_uppercase())
}

/// The `text` of an input object, or why the input does not fit the schema.
fn parse(input: &str) -> Result<String, String> {
    let Value::Object(mut fields) =
        serde_json::from_str::<Value>(input).map_err(|e| format!("not JSON: {e}"))?
    else {
        return Err("not an object".into());
    };
    let text = match fields.remove("text") {
        Some(Value::String(text)) => text,
        Some(_) => return Err("'text' is not a string".into()),
        None => return Err("'text' is missing".into()),
    };
    if let Some(extra) = fields.keys().next() {
        return Err(format!("unknown property '{extra}'"));
    }
    Ok(text)
}

fn answer(status: Status, data: String) -> ToolResult {
    ToolResult {
        status,
        data: Some(data),
        summary: None,
        truncated: false,
    }
}

export!(Component);
