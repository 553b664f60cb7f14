//! The built-in `openai` driver: the Chat Completions API, as spoken by OpenAI and by
//! most local model servers (vLLM, Ollama, llama.cpp, LM Studio).

mod wire;

use mur_driver_kit::exports::murmur::driver::inference::{Guest, Settings};
use mur_driver_kit::neutral::Request;
use mur_driver_kit::setup::{self, Setup, Slot};

/// Every error starts with this, so a reader knows which driver speaks.
const NAME: &str = "openai";
const DEFAULT_ENDPOINT: &str = "https://api.openai.com/v1";
/// A whole answer bigger than this is not a chat answer.
const MAX_ANSWER: usize = 32 * 1024 * 1024;

static SETUP: Slot = Slot::new();

struct Driver;

impl Guest for Driver {
    fn configure(settings: Settings) -> Result<(), String> {
        setup::configure(&SETUP, NAME, settings, DEFAULT_ENDPOINT, wire::api_path)
    }

    fn infer(request: String) -> Result<String, String> {
        setup::infer(&SETUP, NAME, &request, infer)
    }
}

fn infer(setup: &Setup, request: &str) -> Result<String, String> {
    let request = Request::parse(request)?;
    let body = wire::request_body(&request, setup.model(&request), &setup.config);
    let authorization = setup.api_key.as_ref().map(|key| format!("Bearer {key}"));
    let mut headers = vec![("content-type", "application/json")];
    if let Some(authorization) = &authorization {
        headers.push(("authorization", authorization));
    }
    if setup.config.stream {
        headers.push(("accept", "text/event-stream"));
    }
    let response = setup.post_json(&headers, &body)?;
    let reply = setup::read_reply::<wire::Stream>(setup, response, MAX_ANSWER, wire::parse_reply)?;
    Ok(reply.to_json())
}

mur_driver_kit::export!(Driver);
