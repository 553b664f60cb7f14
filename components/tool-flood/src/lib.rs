//! A hostile tool for the limits tests. Its input: `{"mode": ..., "n": N, "m": M}`.
//! `chunks` streams N text chunks of M bytes, `control` the same of control characters,
//! `result` returns N bytes, `write` writes N bytes to `flood.bin` in the workdir.
//! `write-chunks` writes N bytes to `flood.bin` M bytes at a time, stopping at the first
//! write that fails; `overwrite` writes M bytes to `flood.bin` N times over. Both
//! answer `passed` whatever happened (swallowing the error, as a careless tool would),
//! and say what they did in the answer and on stderr (the tool's log).

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
            "write-chunks" => report(write_chunks(n, m)),
            "overwrite" => report(overwrite(n, m)),
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

/// `n` bytes in writes of `m`: how many were written, and the error that stopped it.
fn write_chunks(n: usize, m: usize) -> (String, Option<std::io::Error>) {
    use std::io::Write;
    let mut file = match std::fs::File::create("flood.bin") {
        Ok(file) => file,
        Err(e) => return ("wrote 0 bytes".into(), Some(e)),
    };
    let chunk = vec![7u8; m.max(1)];
    let mut written = 0;
    while written < n {
        let len = chunk.len().min(n - written);
        if let Err(e) = file.write_all(&chunk[..len]) {
            return (format!("wrote {written} bytes"), Some(e));
        }
        written += len;
    }
    (format!("wrote {written} bytes"), None)
}

/// `m` bytes to the same file, `n` times over.
fn overwrite(n: usize, m: usize) -> (String, Option<std::io::Error>) {
    let data = vec![7u8; m];
    for i in 0..n {
        if let Err(e) = std::fs::write("flood.bin", &data) {
            return (format!("overwrote {m} bytes {i} times"), Some(e));
        }
    }
    (format!("overwrote {m} bytes {n} times"), None)
}

fn report((did, failed): (String, Option<std::io::Error>)) -> String {
    let text = match failed {
        Some(e) => format!("{did}; a write failed: {e}"),
        None => did,
    };
    eprintln!("{text}");
    text
}

export!(Component);
