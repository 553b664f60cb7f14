//! The built-in `openai` driver: the Chat Completions API, as spoken by OpenAI and by
//! most local model servers (vLLM, Ollama, llama.cpp, LM Studio). The request it sends is
//! [`request`], the answer it reads back whole or streamed is [`answer`]; both are plain
//! Rust, tested natively.

mod answer;
mod request;

use mur_driver_kit::config::Config;
use mur_driver_kit::default_endpoint;
use mur_driver_kit::provider::Provider;
use mur_driver_kit::types::Request;

pub struct OpenAi;

impl Provider for OpenAi {
    const NAME: &'static str = "openai";
    const DEFAULT_ENDPOINT: &'static str = default_endpoint::OPENAI;
    type Draft = answer::Draft;

    /// The chat call (see the kit's `api_path`).
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

mur_driver_kit::export_driver!(OpenAi);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_paths() {
        assert_eq!(OpenAi::api_path(""), "/v1/chat/completions");
        assert_eq!(OpenAi::api_path("/v1"), "/v1/chat/completions");
        assert_eq!(
            OpenAi::api_path("/openai/v1/chat/completions"),
            "/openai/v1/chat/completions"
        );
        assert_eq!(OpenAi::api_path("/proxy"), "/proxy/v1/chat/completions");
    }

    #[test]
    fn the_key_is_a_bearer_token() {
        assert_eq!(
            OpenAi::headers(Some("sk-1")),
            [("authorization", "Bearer sk-1".to_string())]
        );
        assert!(OpenAi::headers(None).is_empty());
    }
}
