//! The built-in `anthropic` driver: Anthropic's Messages API.

mod wire;

use mur_driver_kit::exports::murmur::driver::inference::{Guest, Settings};
use mur_driver_kit::neutral::Request;
use mur_driver_kit::setup::{self, Setup, Slot};

/// Every error starts with this, so a reader knows which driver speaks.
const NAME: &str = "anthropic";
const DEFAULT_ENDPOINT: &str = "https://api.anthropic.com";
/// The API version whose shapes `wire` speaks.
const API_VERSION: &str = "2023-06-01";
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
    let mut headers = vec![
        ("content-type", "application/json"),
        ("anthropic-version", API_VERSION),
    ];
    if let Some(key) = &setup.api_key {
        headers.push(("x-api-key", key));
    }
    if setup.config.stream {
        headers.push(("accept", "text/event-stream"));
    }
    let response = setup.post_json(&headers, &body)?;
    let reply = setup::read_reply::<wire::Stream>(setup, response, MAX_ANSWER, wire::parse_reply)?;
    Ok(reply.to_json())
}

mur_driver_kit::export!(Driver);
