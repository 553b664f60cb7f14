//! The built-in `anthropic` driver: Anthropic's Messages API.

mod wire;

use mur_driver_kit::exports::murmur::driver::inference::{Guest, Settings};
use mur_driver_kit::neutral::{Reply, Request};
use mur_driver_kit::setup::{self, Setup, Slot};
use mur_driver_kit::{emit, http};

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
    let reply = read_reply(setup, response)?;
    Ok(reply.to_json())
}

/// Reads the answer, streamed or whole. A server that ignored `stream: true` (a proxy,
/// say) answers with plain JSON, which is read as a whole answer.
fn read_reply(setup: &Setup, mut response: http::Response) -> Result<Reply, String> {
    let is_json = response
        .content_type
        .as_deref()
        .is_some_and(|t| t.starts_with("application/json"));
    if !setup.config.stream || is_json {
        return wire::parse_reply(&response.read_to_end(MAX_ANSWER)?);
    }
    let mut stream = wire::Stream::default();
    let end = response.read_events(|event| stream.on_event(event, &mut emit))?;
    stream.finish(end, &setup.endpoint.display())
}

mur_driver_kit::export!(Driver);
