//! A hostile tool for the limits tests. Its input: `{"mode": ..., "n": N, "m": M}`.
//! `chunks` streams N text chunks of M bytes, `control` the same of control characters,
//! `result` returns N bytes, `write` writes N bytes to `flood.bin` in the workdir.

wit_bindgen::generate!({
    path: ["../../wit/text", "../../wit/task", "../../wit/tool"],
    world: "murmur:tool/tool",
    generate_all,
});

use exports::murmur::tool::run::{Guest, Spec, Status, ToolResult};
use murmur::text::chunks;
use serde_json::Value;

struct Component;

impl Guest for Component {
    fn describe() -> Spec {
        Spec {
            description: "Floods the host on purpose.".into(),
            input_schema: r#"{"type":"object"}"#.into(),
        }
    }

    fn call(input: String) -> ToolResult {
        let v: Value = serde_json::from_str(&input).unwrap_or(Value::Null);
        let n = v["n"].as_u64().unwrap_or(1) as usize;
        let m = v["m"].as_u64().unwrap_or(1) as usize;
        let data = match v["mode"].as_str().unwrap_or("") {
            "chunks" => {
                let chunk = "x".repeat(m);
                for _ in 0..n {
                    chunks::text(&chunk);
                }
                format!("sent {n} chunks")
            }
            "control" => {
                let chunk = "\u{1}".repeat(m);
                for _ in 0..n {
                    chunks::text(&chunk);
                }
                format!("sent {n} chunks")
            }
            "result" => "r".repeat(n),
            "write" => match std::fs::write("flood.bin", vec![7u8; n]) {
                Ok(()) => format!("wrote {n} bytes"),
                Err(e) => format!("err: {e}"),
            },
            other => format!("unknown mode '{other}'"),
        };
        ToolResult {
            status: Status::Passed,
            data: Some(data),
            summary: None,
            truncated: false,
        }
    }
}

export!(Component);
