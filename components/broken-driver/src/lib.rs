//! A deliberately broken driver, a test fixture for `mur component check`: the built-in
//! `openai` driver's wire format (its own source files, included), with one defect. When
//! the provider answers an error, it panics instead of returning `infer-error`, so the
//! guest traps where a driver must fail the call. Every other scenario passes; the check's
//! provider-error scenario must catch it.

#[path = "../../../guest-drivers/openai/src/answer.rs"]
mod answer;
#[path = "../../../guest-drivers/openai/src/request.rs"]
mod request;

use mur_driver_kit::config::Config;
use mur_driver_kit::default_endpoint;
use mur_driver_kit::exports::murmur::driver::inference::Guest;
use mur_driver_kit::provider::{self, Provider};
use mur_driver_kit::setup::Slot;
use mur_driver_kit::types::{InferError, Request, Response, Settings};

struct OpenAi;

impl Provider for OpenAi {
    const NAME: &'static str = "broken-driver";
    const DEFAULT_ENDPOINT: &'static str = default_endpoint::OPENAI;
    type Draft = answer::Draft;

    fn api_path(path: &str) -> String {
        mur_driver_kit::endpoint::api_path(path, "/chat/completions")
    }

    fn request_body(request: &Request, model: &str, config: &Config) -> Result<Vec<u8>, String> {
        request::body(request, model, config)
    }

    fn headers(api_key: Option<&str>) -> Vec<(&'static str, String)> {
        api_key
            .map(|key| ("authorization", format!("Bearer {key}")))
            .into_iter()
            .collect()
    }
}

static SETUP: Slot = Slot::new();

struct Driver;

impl Guest for Driver {
    fn configure(settings: Settings) -> Result<(), String> {
        provider::configure::<OpenAi>(&SETUP, settings)
    }

    fn infer(request: Request) -> Result<Response, InferError> {
        match provider::infer::<OpenAi>(&SETUP, &request) {
            // The defect: an error answer becomes a trap.
            Err(InferError::Failed(why)) => panic!("broken-driver: {why}"),
            other => other,
        }
    }
}

mur_driver_kit::export!(Driver);
