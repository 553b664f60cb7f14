//! A driver that reports what its sandbox lets it see, or misbehaves on purpose, so the
//! host's limits on drivers can be tested end to end. Its `config.mode`:
//! `probe` answers with what it could read; `trap` panics (a trap); `spin` never returns;
//! `sleep` sleeps through WASI clocks for an hour (a host wait, not guest code);
//! `sleep-configure` does that already in `configure`.

wit_bindgen::generate!({
    path: ["../../wit/message", "../../wit/text", "../../wit/driver"],
    world: "murmur:driver/driver",
    generate_all,
});

use exports::murmur::driver::inference::{
    Guest, InferError, Request, Response, Settings, StopReason, Usage,
};
use murmur::message::types::Block;
use serde_json::Value;
use std::sync::Mutex;

struct Component;

static MODE: Mutex<String> = Mutex::new(String::new());

impl Guest for Component {
    fn configure(settings: Settings) -> Result<(), String> {
        let config: Value = serde_json::from_str(&settings.config).map_err(|e| e.to_string())?;
        let mode = config["mode"].as_str().unwrap_or("probe").to_string();
        if mode == "sleep-configure" {
            sleep_long();
        }
        *MODE.lock().unwrap_or_else(|p| p.into_inner()) = mode;
        Ok(())
    }

    fn infer(_request: Request) -> Result<Response, InferError> {
        let mode = MODE.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match mode.as_str() {
            "trap" => panic!("the probe driver traps on purpose"),
            "spin" => loop {
                std::hint::black_box(());
            },
            "sleep" => {
                sleep_long();
                Err(InferError::Failed("the probe driver woke up".into()))
            }
            _ => {
                let text = format!("fs: {}; env: {}", filesystem(), environment());
                Ok(Response {
                    stop_reason: StopReason::EndTurn,
                    content: vec![Block::Text(text)],
                    usage: Usage {
                        input_tokens: None,
                        output_tokens: None,
                        cached_tokens: None,
                        cache_write_tokens: None,
                        thinking_tokens: None,
                    },
                })
            }
        }
    }
}

fn sleep_long() {
    std::thread::sleep(std::time::Duration::from_secs(3600));
}

/// Whether any path at all can be listed or read.
fn filesystem() -> String {
    let attempts = [
        std::fs::read_dir("/").map(|_| "listed /".to_string()),
        std::fs::read_dir(".").map(|_| "listed .".to_string()),
        std::fs::read_to_string("/etc/passwd").map(|_| "read /etc/passwd".to_string()),
    ];
    match attempts.into_iter().find_map(Result::ok) {
        Some(seen) => format!("ok: {seen}"),
        None => "none".to_string(),
    }
}

fn environment() -> String {
    let mut vars: Vec<String> = std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
    vars.sort();
    format!("[{}]", vars.join(","))
}

export!(Component);
