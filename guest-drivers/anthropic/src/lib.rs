//! The built-in `anthropic` driver: Anthropic's Messages API. The request it sends is
//! [`request`], the answer it reads back whole or streamed is [`answer`]; both are plain
//! Rust, tested natively.

mod answer;
mod request;

use mur_driver_kit::config::Config;
use mur_driver_kit::default_endpoint;
use mur_driver_kit::provider::Provider;
use mur_driver_kit::types::Request;

/// The API version whose shapes this driver speaks.
const API_VERSION: &str = "2023-06-01";

pub struct Anthropic;

impl Provider for Anthropic {
    const NAME: &'static str = "anthropic";
    const DEFAULT_ENDPOINT: &'static str = default_endpoint::ANTHROPIC;
    type Draft = answer::Draft;

    /// The messages call (see the kit's `api_path`).
    fn api_path(path: &str) -> String {
        mur_driver_kit::endpoint::api_path(path, "/messages")
    }

    fn request_body(request: &Request, model: &str, config: &Config) -> Result<Vec<u8>, String> {
        request::body(request, model, config)
    }

    fn headers(api_key: Option<&str>) -> Vec<(&'static str, String)> {
        let mut headers = vec![("anthropic-version", API_VERSION.to_string())];
        headers.extend(api_key.map(|key| ("x-api-key", key.to_string())));
        headers
    }
}

mur_driver_kit::export_driver!(Anthropic);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_paths() {
        assert_eq!(Anthropic::api_path(""), "/v1/messages");
        assert_eq!(Anthropic::api_path("/v1"), "/v1/messages");
        assert_eq!(Anthropic::api_path("/x/v1/messages"), "/x/v1/messages");
        assert_eq!(Anthropic::api_path("/proxy"), "/proxy/v1/messages");
    }

    #[test]
    fn the_version_then_the_key() {
        assert_eq!(
            Anthropic::headers(Some("k")),
            [
                ("anthropic-version", API_VERSION.to_string()),
                ("x-api-key", "k".to_string())
            ]
        );
    }
}
