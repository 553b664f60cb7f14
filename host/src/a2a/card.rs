//! The agent card at `/.well-known/agent-card.json`: who the capsule is, where its
//! JSON-RPC interface answers, and what it can do, as A2A v1.0 clients resolve it
//! before their first call.

use std::collections::HashMap;

use ::a2a::{
    AgentCapabilities, AgentCard, AgentInterface, AgentSkill, HttpAuthSecurityScheme,
    SecurityRequirement, SecurityScheme,
};
use bytes::Bytes;
use serde_json::Value;

use crate::http1::Request;
use crate::manifest::Manifest;

/// Where clients look for the card, relative to the capsule's address.
pub const PATH: &str = ".well-known/agent-card.json";

/// The path of the capsule's agent card, beneath its address.
pub fn is_card(request: &Request) -> bool {
    request
        .path
        .strip_suffix(PATH)
        .is_some_and(|address| address.ends_with('/'))
}

/// The name the card gives the address's bearer token.
const BEARER: &str = "bearer";

/// Whether callers need the address's bearer token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    Open,
    Bearer,
}

/// The card of the capsule `m` served at `url` (ending in `/`), its skills from the
/// tools its model is given (`[{name, description?}]`).
pub fn encode(m: &Manifest, url: &str, tools: &[Value], guard: Guard) -> Bytes {
    let card = AgentCard {
        name: m.name.clone(),
        description: m
            .description
            .clone()
            .unwrap_or_else(|| format!("{} {}, an agent capsule served by mur", m.name, m.version)),
        version: m.version.clone(),
        supported_interfaces: vec![AgentInterface::new(url, ::a2a::TRANSPORT_PROTOCOL_JSONRPC)],
        capabilities: AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(false),
            extensions: None,
            extended_agent_card: Some(false),
        },
        default_input_modes: vec!["text/plain".into()],
        default_output_modes: vec!["text/plain".into()],
        skills: tools.iter().filter_map(skill).collect(),
        provider: None,
        documentation_url: None,
        icon_url: None,
        security_schemes: (guard == Guard::Bearer).then(bearer_scheme),
        security_requirements: (guard == Guard::Bearer).then(bearer_requirement),
        signatures: None,
    };
    Bytes::from(serde_json::to_vec(&card).unwrap_or_default())
}

fn skill(tool: &Value) -> Option<AgentSkill> {
    let name = tool.get("name")?.as_str()?;
    let description = tool
        .get("description")
        .and_then(Value::as_str)
        .filter(|d| !d.is_empty())
        .map_or_else(|| format!("The capsule's {name} tool"), str::to_string);
    Some(AgentSkill {
        id: name.to_string(),
        name: name.to_string(),
        description,
        tags: vec!["tool".into()],
        examples: None,
        input_modes: None,
        output_modes: None,
        security_requirements: None,
    })
}

fn bearer_scheme() -> HashMap<String, SecurityScheme> {
    let scheme = HttpAuthSecurityScheme {
        scheme: "Bearer".into(),
        bearer_format: None,
        description: Some("The capsule's token, as its operator handed it out".into()),
    };
    HashMap::from([(BEARER.to_string(), SecurityScheme::HttpAuth(scheme))])
}

fn bearer_requirement() -> Vec<SecurityRequirement> {
    let requirement: SecurityRequirement = HashMap::from([(BEARER.to_string(), Vec::new())]);
    vec![requirement]
}
