//! A `wc`-like tool: counts the lines, words and bytes of a file in the workdir.

wit_bindgen::generate!({
    path: ["../../wit/text", "../../wit/task", "../../wit/tool"],
    world: "murmur:tool/tool",
    // `murmur:text` and `murmur:task` are other packages, so their bindings must be
    // asked for explicitly.
    generate_all,
});

use exports::murmur::tool::run::{Guest, Spec, Status, ToolResult};
use murmur::task::task;
use murmur::text::chunks;
use serde_json::Value;

struct Component;

impl Guest for Component {
    fn describe() -> Spec {
        Spec {
            description: "Counts the lines, words and bytes of a file in the workdir.".into(),
            input_schema: r#"{"type":"object","properties":{"path":{"type":"string","description":"A file path relative to the workdir"}},"required":["path"]}"#.into(),
        }
    }

    fn call(input: String) -> ToolResult {
        let path = match parse_path(&input) {
            Ok(path) => path,
            Err(detail) => {
                return result(
                    Status::Error,
                    format!("input must be a JSON object with a string 'path': {detail}"),
                );
            }
        };
        // Streamed so that tests can see a tool's chunks reach the wire.
        chunks::text(&format!("counting {path}\n"));
        // The host preopens the session workdir as `/`, so a relative path stays inside it.
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) => return result(Status::Failed, format!("failed to read '{path}': {e}")),
        };
        let (lines, words) = count(&bytes);
        let mut out = result(
            Status::Passed,
            format!("{lines} {words} {} {path}", bytes.len()),
        );
        // Proves the task interface reaches tools: the summary names the task served.
        if let Some(info) = task::current() {
            out.summary = Some(format!("counted for {}", info.id));
        }
        out
    }
}

fn parse_path(input: &str) -> Result<String, String> {
    match serde_json::from_str::<Value>(input) {
        Err(e) => Err(format!("not JSON: {e}")),
        Ok(Value::Object(mut fields)) => match fields.remove("path") {
            Some(Value::String(path)) => Ok(path),
            Some(_) => Err("'path' is not a string".into()),
            None => Err("'path' is missing".into()),
        },
        Ok(_) => Err("not an object".into()),
    }
}

/// Lines and words the way `wc` counts them: lines are newline bytes, words are
/// runs of bytes that are not ASCII whitespace (`wc` in the C locale).
fn count(bytes: &[u8]) -> (usize, usize) {
    let lines = bytes.iter().filter(|&&b| b == b'\n').count();
    let mut words = 0;
    let mut in_word = false;
    for &b in bytes {
        // Unlike `u8::is_ascii_whitespace`, `wc` also treats vertical tab as a separator.
        let space = matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c);
        if !space && !in_word {
            words += 1;
        }
        in_word = !space;
    }
    (lines, words)
}

fn result(status: Status, data: String) -> ToolResult {
    ToolResult {
        status,
        data: Some(data),
        summary: None,
        truncated: false,
    }
}

export!(Component);
