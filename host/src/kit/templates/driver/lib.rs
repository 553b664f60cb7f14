//! `{{name}}`: an inference driver (world `murmur:driver/driver`).
//!
//! It answers without a model: it echoes the last thing the user said and ends its
//! turn, streaming the answer as it goes. That is enough to run a capsule offline; the
//! place where a real driver calls its provider is marked in `infer`.

wit_bindgen::generate!({
    path: ["wit/message", "wit/text", "wit/driver"],
    world: "murmur:driver/driver",
    // `murmur:message` and `murmur:text` are packages of their own: ask for their bindings.
    generate_all,
});

use std::sync::Mutex;

use exports::murmur::driver::inference::{
    Guest, InferError, Request, Response, Settings, StopReason, Usage,
};
use murmur::message::types::{Block, Role};
use murmur::text::chunks;

/// The manifest's settings, kept from `configure` for every `infer` of this instance.
static SETTINGS: Mutex<Option<Settings>> = Mutex::new(None);

struct Component;

impl Guest for Component {
    fn configure(settings: Settings) -> Result<(), String> {
        // `settings.config` is `inference.driver.config` as a JSON object; a driver
        // checks it here, since an error now stops the capsule before any task runs.
        if !settings.config.trim_start().starts_with('{') {
            return Err(format!(
                "config must be a JSON object, got {}",
                settings.config
            ));
        }
        *SETTINGS.lock().unwrap_or_else(|p| p.into_inner()) = Some(settings);
        Ok(())
    }

    fn infer(request: Request) -> Result<Response, InferError> {
        // A provider driver would build its wire request here from `request` (the
        // system prompt, the messages, the tools offered, `max_tokens`) and the
        // settings' `endpoint`, `model` and `api_key`, send it through
        // `wasi:http/outgoing-handler` (the `wasi` crate, or `waki`/`wstd`), stream
        // the answer's text through `chunks::text` as it arrives, and turn the
        // provider's reply into a `Response` (text, thinking and tool-call blocks, the
        // stop reason, the usage it reported). The host allows the request only to an
        // origin in `capabilities.network.allow`, and retries 429 and 5xx for you.
        let heard = last_user_text(&request)
            .ok_or_else(|| InferError::Failed("the request holds no user text to answer".into()))?;
        let text = format!("echo: {heard}");
        chunks::text(&text);
        Ok(Response {
            stop_reason: StopReason::EndTurn,
            content: vec![Block::Text(text.clone())],
            usage: Usage {
                input_tokens: Some(words(&heard)),
                output_tokens: Some(words(&text)),
                cached_tokens: None,
                cache_write_tokens: None,
                thinking_tokens: None,
            },
        })
    }
}

/// The text of the newest user message that has any.
fn last_user_text(request: &Request) -> Option<String> {
    request
        .messages
        .iter()
        .rev()
        .filter(|m| m.role == Role::User)
        .find_map(|m| {
            let text: Vec<&str> = m
                .content
                .iter()
                .filter_map(|b| match b {
                    Block::Text(t) => Some(t.as_str()),
                    _ => None,
                })
                .collect();
            (!text.is_empty()).then(|| text.join("\n"))
        })
}

/// A stand-in for a token count: the provider reports the real one.
fn words(text: &str) -> u64 {
    text.split_whitespace().count() as u64
}

export!(Component);
