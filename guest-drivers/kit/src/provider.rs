//! A built-in driver is a [`Provider`] — its name, default endpoint, headers and wire
//! format — and the kit around it: [`export_driver!`] exports `murmur:driver/inference`
//! for a provider, keeping its setup between calls, sending each request and reading the
//! answer whole or streamed.

use crate::answer::{self, Draft, Fault};
use crate::config::Config;
use crate::setup::{Setup, Slot};
use crate::types::{InferError, Request, Response, Settings};

/// A whole answer bigger than this is not a chat answer.
const MAX_ANSWER: usize = 32 * 1024 * 1024;

/// What one provider's API asks of a driver.
pub trait Provider {
    /// Every error starts with this, so a reader knows which driver speaks.
    const NAME: &'static str;
    /// Where requests go when the manifest names no endpoint.
    const DEFAULT_ENDPOINT: &'static str;
    /// The answer as this provider sends it.
    type Draft: Draft;

    /// The path of the API call for an endpoint's path.
    fn api_path(endpoint_path: &str) -> String;

    /// The request body (JSON) for `request`, asking for `model`.
    fn request_body(request: &Request, model: &str, config: &Config) -> Result<Vec<u8>, String>;

    /// The headers that come after `content-type`: the API's version, and the key in the
    /// provider's form when there is one.
    fn headers(api_key: Option<&str>) -> Vec<(&'static str, String)>;
}

/// A driver's `configure`: its setup kept in `slot`, a failure named after the driver.
pub fn configure<P: Provider>(slot: &Slot, settings: Settings) -> Result<(), String> {
    let setup = Setup::new(settings, P::DEFAULT_ENDPOINT, P::api_path)
        .map_err(|e| format!("{}: {e}", P::NAME))?;
    slot.set(setup);
    Ok(())
}

/// A driver's `infer` with the configured setup. A failure is named after the driver and
/// never shows the key; an answer that could not be read says so first, as the host words
/// a driver's unreadable answer.
pub fn infer<P: Provider>(slot: &Slot, request: &Request) -> Result<Response, InferError> {
    let Some(setup) = slot.get() else {
        return Err(InferError::Failed(format!(
            "{}: infer was called before configure",
            P::NAME
        )));
    };
    call::<P>(&setup, request).map_err(|fault| match fault {
        Fault::Failed(why) => InferError::Failed(setup.redact(format!("{}: {why}", P::NAME))),
        Fault::Malformed(why) => InferError::Malformed(setup.redact(format!(
            "failed to parse driver response: {}: {why}",
            P::NAME
        ))),
    })
}

fn call<P: Provider>(setup: &Setup, request: &Request) -> Result<Response, Fault> {
    let body = P::request_body(request, setup.model(request), &setup.config)?;
    let own = P::headers(setup.api_key.as_deref());
    let mut headers = vec![("content-type", "application/json")];
    headers.extend(own.iter().map(|(name, value)| (*name, value.as_str())));
    if setup.config.stream {
        headers.push(("accept", "text/event-stream"));
    }
    let response = setup.post_json(&headers, &body)?;
    answer::read::<P::Draft>(setup, response, MAX_ANSWER)
}

/// Exports `murmur:driver/inference` for a [`Provider`]: `export_driver!(OpenAi);` is a
/// driver crate's whole component.
#[macro_export]
macro_rules! export_driver {
    ($provider:ty) => {
        /// The provider's setup between `configure` and every `infer`.
        static SETUP: $crate::setup::Slot = $crate::setup::Slot::new();

        struct Driver;

        impl $crate::exports::murmur::driver::inference::Guest for Driver {
            fn configure(settings: $crate::types::Settings) -> Result<(), String> {
                $crate::provider::configure::<$provider>(&SETUP, settings)
            }

            fn infer(
                request: $crate::types::Request,
            ) -> Result<$crate::types::Response, $crate::types::InferError> {
                $crate::provider::infer::<$provider>(&SETUP, &request)
            }
        }

        $crate::export!(Driver);
    };
}
