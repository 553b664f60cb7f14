//! A tool that reports what the sandbox lets it see, for the sandbox tests.
//! Every answer the probe gets is `passed`; the `ok:`/`err:` prefix of the data is
//! the finding. Only input the probe cannot understand gives an `error` status.

wit_bindgen::generate!({
    path: ["../../wit/text", "../../wit/task", "../../wit/tool"],
    world: "murmur:tool/tool",
    // `murmur:text` and `murmur:task` are other packages, so their bindings must be
    // asked for explicitly.
    generate_all,
});

use exports::murmur::tool::run::{Guest, Spec, Status, ToolResult};
use serde_json::{Map, Value};
use std::hint::black_box;

struct Component;

impl Guest for Component {
    fn describe() -> Spec {
        Spec {
            description: "Reports what the sandbox lets a tool see.".into(),
            input_schema: r#"{"type":"object","properties":{"probe":{"type":"string"},"rounds":{"type":"number"},"path":{"type":"string"},"name":{"type":"string"},"seconds":{"type":"number"}},"required":["probe"]}"#.into(),
        }
    }

    fn call(input: String) -> ToolResult {
        let fields = match serde_json::from_str::<Value>(&input) {
            Ok(Value::Object(fields)) => fields,
            Ok(_) => return bad_input("input must be a JSON object".into()),
            Err(e) => return bad_input(format!("input is not JSON: {e}")),
        };
        let probe = match string_field(&fields, "probe") {
            Ok(probe) => probe,
            Err(e) => return bad_input(e),
        };
        let finding = match probe {
            "read" => with_string(&fields, "path", read),
            "list" => with_string(&fields, "path", list),
            "write" => with_string(&fields, "path", write),
            "env" => Ok(env()),
            "getenv" => with_string(&fields, "name", getenv),
            "spin" => spin(),
            "balloon" => balloon(),
            "sleep" => sleep(&fields),
            "compute" => compute(&fields),
            other => Err(format!(
                "unknown probe '{other}' (known: read, list, write, env, getenv, spin, balloon, sleep, compute)"
            )),
        };
        match finding {
            Ok(data) => ToolResult {
                status: Status::Passed,
                data: Some(data),
                summary: None,
                truncated: false,
            },
            Err(e) => bad_input(e),
        }
    }
}

fn string_field<'a>(fields: &'a Map<String, Value>, key: &str) -> Result<&'a str, String> {
    match fields.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(format!("'{key}' must be a string")),
        None => Err(format!("'{key}' is missing")),
    }
}

/// Runs a probe that needs one string argument; `Err` only for bad input.
fn with_string(
    fields: &Map<String, Value>,
    key: &str,
    probe: fn(&str) -> String,
) -> Result<String, String> {
    string_field(fields, key).map(probe)
}

fn read(path: &str) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let head = &bytes[..bytes.len().min(200)];
            format!("ok: {}", String::from_utf8_lossy(head))
        }
        Err(e) => format!("err: {e}"),
    }
}

fn list(path: &str) -> String {
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) => return format!("err: {e}"),
    };
    let mut names = Vec::new();
    for entry in entries {
        match entry {
            Ok(entry) => names.push(entry.file_name().to_string_lossy().into_owned()),
            Err(e) => return format!("err: {e}"),
        }
    }
    // Sorted because directory order is the filesystem's, and tests compare strings.
    names.sort();
    format!("ok: {}", names.join(","))
}

fn write(path: &str) -> String {
    match std::fs::write(path, "probe") {
        Ok(()) => "ok".into(),
        Err(e) => format!("err: {e}"),
    }
}

fn env() -> String {
    let mut vars: Vec<String> = std::env::vars_os()
        .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
        .collect();
    vars.sort();
    format!("ok: {}", vars.join(","))
}

fn getenv(name: &str) -> String {
    match std::env::var_os(name) {
        Some(value) => format!("ok: {}", value.to_string_lossy()),
        None => "err: not set".into(),
    }
}

/// Never returns: the epoch/fuel deadline is the only way out, which is what it tests.
fn spin() -> ! {
    let mut n: u64 = 0;
    loop {
        // `black_box` keeps the compiler from proving the loop has no effect.
        n = black_box(n.wrapping_add(1));
    }
}

/// Never returns: it grows memory until the host's cap stops it.
fn balloon() -> ! {
    const CHUNK: usize = 16 << 20;
    let mut kept: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut block = vec![0u8; CHUNK];
        // Touching every page makes the memory real on hosts that commit lazily.
        for i in (0..CHUNK).step_by(4096) {
            block[i] = 1;
        }
        kept.push(black_box(block));
        black_box(&kept);
    }
}

/// Sleeps through WASI clocks (a host wait, not guest code): only a wall-clock
/// deadline stops it. `seconds` defaults to an hour.
fn sleep(fields: &Map<String, Value>) -> Result<String, String> {
    let seconds = match fields.get("seconds") {
        None => 3600.0,
        Some(Value::Number(n)) => n.as_f64().unwrap_or(3600.0),
        Some(_) => return Err("'seconds' must be a number".into()),
    };
    std::thread::sleep(std::time::Duration::from_secs_f64(seconds.max(0.0)));
    Ok(format!("ok: slept {seconds} s"))
}

fn bad_input(detail: String) -> ToolResult {
    ToolResult {
        status: Status::Error,
        data: Some(detail),
        summary: None,
        truncated: false,
    }
}

export!(Component);

/// A fixed amount of arithmetic (`rounds` steps of xorshift), for measuring what the
/// host's yields cost a guest that only computes.
fn compute(fields: &Map<String, Value>) -> Result<String, String> {
    let rounds = fields
        .get("rounds")
        .and_then(Value::as_u64)
        .ok_or("compute needs a whole number of rounds")?;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..rounds {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x = black_box(x);
    }
    Ok(format!("ok: {x:016x}"))
}
