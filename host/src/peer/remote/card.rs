//! The peer's agent card: fetched once, bounded, and read as hostile input for the one
//! thing a call needs, the URL of its A2A 1.0 JSON-RPC interface.
//!
//! A 1.0 card lists its interfaces in `supportedInterfaces[]`, each with its
//! `protocolBinding` and `protocolVersion`; that is what our door and the Python
//! `a2a-sdk` 1.3.0 server publish (the SDK's card has no top-level `url`). A 0.3 card
//! names one `url` and speaks 0.3's methods, which this client does not: it is refused
//! by name rather than called and misunderstood.

use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION};
use http::{Method, Request};
use http_body_util::Full;
use serde_json::Value;

use super::wire::{self, Trouble};
use super::{Remote, failure};
use crate::peer::{Failure, FailureKind};

/// The most of a card read.
const MAX_CARD: usize = 256 * 1024;
/// How long fetching the card may take, whole.
const CARD_WITHIN: Duration = Duration::from_secs(10);

/// Where a call goes: the interface's URL, and the tenant its requests name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Endpoint {
    pub url: String,
    pub tenant: Option<String>,
}

/// Fetches `remote`'s card and reads its interface, both URLs checked against the
/// allow rules.
pub(super) async fn endpoint(remote: &Remote) -> Result<Endpoint, Failure> {
    let name = &remote.name;
    if !reachable(remote, &remote.card_url) {
        return Err(Failure::new(
            FailureKind::Unreachable,
            format!(
                "{name}'s agent card is outside capabilities.network.allow: add its origin there to call {name}"
            ),
        ));
    }
    let card = tokio::time::timeout(CARD_WITHIN, fetch(remote))
        .await
        .map_err(|_| {
            Failure::new(
                FailureKind::Unreachable,
                format!("{name} could not be reached: its agent card did not come within 10 s"),
            )
        })??;
    let endpoint = interface(&card).map_err(|why| {
        Failure::new(
            FailureKind::Unreachable,
            format!("{name}'s agent card {why}"),
        )
    })?;
    if !reachable(remote, &endpoint.url) {
        return Err(Failure::new(
            FailureKind::Unreachable,
            format!(
                "{name}'s agent card names an interface outside capabilities.network.allow: add that origin there to call {name}"
            ),
        ));
    }
    Ok(endpoint)
}

/// An `http` or `https` URL the allow rules reach.
fn reachable(remote: &Remote, url: &str) -> bool {
    let web = url.starts_with("http://") || url.starts_with("https://");
    web && crate::outbound::allowed(&remote.allow, url)
}

async fn fetch(remote: &Remote) -> Result<Value, Failure> {
    let mut request = Request::builder()
        .method(Method::GET)
        .uri(remote.card_url.as_str())
        .header(ACCEPT, "application/json");
    if let Some(token) = &remote.token {
        let value = wire::bearer(token).map_err(|()| bad_token(&remote.name))?;
        request = request.header(AUTHORIZATION, value);
    }
    let request = request
        .body(Full::new(Bytes::new()))
        .map_err(|_| unreadable(&remote.name, "URL is not one mur can send a request to"))?;
    let read = async {
        let response = wire::send(&remote.allow, request).await?;
        wire::read_bounded(&mut response.into_body(), MAX_CARD).await
    };
    let bytes = read.await.map_err(|trouble| match trouble {
        Trouble::Garbled(_) => unreadable(&remote.name, "is larger than 256 KiB"),
        trouble => failure(&remote.name, trouble, false),
    })?;
    serde_json::from_slice(&bytes).map_err(|_| unreadable(&remote.name, "is not JSON"))
}

/// The card's JSON-RPC interface for A2A 1.x; `Err` says why there is none.
fn interface(card: &Value) -> Result<Endpoint, String> {
    if !card.is_object() {
        return Err("is not a JSON object".into());
    }
    let listed = card
        .get("supportedInterfaces")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let jsonrpc = |i: &&Value| {
        i.get("protocolBinding")
            .and_then(Value::as_str)
            .is_some_and(|b| b.eq_ignore_ascii_case(::a2a::TRANSPORT_PROTOCOL_JSONRPC))
    };
    let speaks_1 = |i: &&Value| {
        i.get("protocolVersion")
            .and_then(Value::as_str)
            .is_none_or(|v| v.trim() == "1" || v.trim().starts_with("1."))
    };
    if let Some(found) = listed.iter().filter(jsonrpc).find(speaks_1) {
        let url = found.get("url").and_then(Value::as_str).unwrap_or_default();
        if url.is_empty() {
            return Err("names a JSON-RPC interface without a URL".into());
        }
        let tenant = found
            .get("tenant")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .map(str::to_string);
        return Ok(Endpoint {
            url: url.to_string(),
            tenant,
        });
    }
    let old = card.get("protocolVersion").and_then(Value::as_str);
    if listed.is_empty() && old.is_some_and(|v| v.starts_with("0.")) {
        return Err(
            "is an A2A 0.3 card: mur calls A2A 1.0 agents only (supportedInterfaces with a JSONRPC binding)"
                .into(),
        );
    }
    Err(
        "offers no A2A 1.0 JSON-RPC interface (supportedInterfaces with protocolBinding JSONRPC)"
            .into(),
    )
}

fn unreadable(name: &str, why: &str) -> Failure {
    Failure::new(
        FailureKind::Unreachable,
        format!("{name}'s agent card {why}"),
    )
}

pub(super) fn bad_token(name: &str) -> Failure {
    Failure::new(
        FailureKind::Refused,
        format!("{name}'s token cannot be sent: it holds characters a header cannot carry"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_first_jsonrpc_interface_of_version_1_is_taken() {
        let card = json!({"supportedInterfaces": [
            {"url": "http://a/grpc", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
            {"url": "http://a/old", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {"url": "http://a/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0", "tenant": "t1"},
        ]});
        assert_eq!(
            interface(&card),
            Ok(Endpoint {
                url: "http://a/rpc".into(),
                tenant: Some("t1".into())
            })
        );
    }

    #[test]
    fn a_card_without_a_usable_interface_says_why() {
        let old = json!({"url": "http://a/", "protocolVersion": "0.3.0"});
        assert!(interface(&old).unwrap_err().contains("A2A 0.3 card"));
        let grpc = json!({"supportedInterfaces": [{"url": "x", "protocolBinding": "GRPC"}]});
        assert!(
            interface(&grpc)
                .unwrap_err()
                .contains("no A2A 1.0 JSON-RPC")
        );
        assert!(interface(&json!([1, 2])).is_err());
        let no_url = json!({"supportedInterfaces": [{"protocolBinding": "JSONRPC"}]});
        assert!(interface(&no_url).unwrap_err().contains("without a URL"));
    }
}
