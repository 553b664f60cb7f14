//! What `configure` hands a driver, checked once and kept for every `infer`.

use crate::config::Config;
use crate::endpoint::Endpoint;
use crate::http::{self, Response};
use crate::types::{Request, Settings};
use std::sync::Mutex;

/// An error answer's body is read this far for its message.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// A driver's settings, ready to use.
#[derive(Debug, Clone, PartialEq)]
pub struct Setup {
    /// The manifest's model, used when a request names none.
    pub model: String,
    /// The full URL requests go to.
    pub endpoint: Endpoint,
    /// `None` when the manifest gave no key or an empty one (local servers need none).
    pub api_key: Option<String>,
    pub config: Config,
}

impl Setup {
    /// Checks the settings. An empty endpoint means the provider's own; `api_path`
    /// turns the endpoint's path into the path of the provider's API call.
    pub fn new(
        settings: Settings,
        default_endpoint: &str,
        api_path: fn(&str) -> String,
    ) -> Result<Setup, String> {
        let endpoint = match settings.endpoint.trim() {
            "" => default_endpoint,
            given => given,
        };
        let endpoint = Endpoint::parse(endpoint)?;
        let endpoint = endpoint.with_path(api_path(&endpoint.path));
        Ok(Setup {
            model: settings.model,
            endpoint,
            api_key: settings.api_key.filter(|key| !key.trim().is_empty()),
            config: Config::parse(&settings.config)?,
        })
    }

    /// The model to ask for: the request's (a hook may override it), else the manifest's.
    pub fn model<'a>(&'a self, request: &'a Request) -> &'a str {
        if request.model.is_empty() {
            &self.model
        } else {
            &request.model
        }
    }

    /// `text` with the API key blotted out, in case a server quoted it back.
    pub fn redact(&self, text: String) -> String {
        match &self.api_key {
            Some(key) if text.contains(key.as_str()) => text.replace(key.as_str(), "[redacted]"),
            _ => text,
        }
    }

    /// POSTs `body` (JSON) and returns the answer if its status is a success; any other
    /// status becomes an error naming it and the provider's message.
    pub fn post_json(&self, headers: &[(&str, &str)], body: &[u8]) -> Result<Response, String> {
        let mut response = http::post(&self.endpoint, headers, body)?;
        if !(200..300).contains(&response.status) {
            let body = response.read_prefix(ERROR_BODY_LIMIT);
            return Err(http::status_error(
                response.status,
                &self.endpoint.display(),
                &body,
            ));
        }
        Ok(response)
    }
}

/// Where a driver keeps its setup between calls. The host calls one instance one call
/// at a time; the mutex only makes the static sound and never contends.
pub struct Slot(Mutex<Option<Setup>>);

impl Slot {
    pub const fn new() -> Slot {
        Slot(Mutex::new(None))
    }

    pub fn set(&self, setup: Setup) {
        *self.lock() = Some(setup);
    }

    /// A copy of the setup, so no lock is held across a long HTTP call.
    pub fn get(&self) -> Option<Setup> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Setup>> {
        // A poisoned lock means a panic, which traps the instance; the data is still whole.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Default for Slot {
    fn default() -> Self {
        Slot::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(endpoint: &str, key: Option<&str>) -> Settings {
        Settings {
            model: "m".into(),
            endpoint: endpoint.into(),
            api_key: key.map(str::to_string),
            config: r#"{"stream":true}"#.into(),
        }
    }

    fn add_v1(path: &str) -> String {
        format!("{path}/v1")
    }

    #[test]
    fn an_empty_endpoint_means_the_providers_own() {
        let setup =
            Setup::new(settings(" ", Some("")), "https://api.example.com/", add_v1).unwrap();
        assert_eq!(setup.endpoint.display(), "https://api.example.com/v1");
        assert_eq!(setup.api_key, None);
        assert!(setup.config.stream);
    }

    #[test]
    fn a_bad_endpoint_fails_configure() {
        assert!(Setup::new(settings("localhost:8080", None), "", add_v1).is_err());
    }

    #[test]
    fn the_key_is_redacted() {
        let setup = Setup::new(settings("", Some("sk-123")), "http://h", add_v1).unwrap();
        assert_eq!(
            setup.redact("bad key sk-123!".into()),
            "bad key [redacted]!"
        );
    }
}
