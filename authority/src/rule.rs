//! One `capabilities.network.allow` entry: `host`, `host:port` or `scheme://host[:port]`.

use crate::{Authority, Origin, default_port, ipv6_literal, is_host_name, port_number};

/// An allow-list entry. `host` is lower-case; an IPv6 host keeps its brackets (`[::1]`),
/// as in a URL, so `host:port` stays unambiguous.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetRule {
    pub scheme: Option<String>,
    pub host: String,
    pub port: Option<u16>,
}

/// Why an entry is not one; the caller words it (and bounds the echoed text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleError {
    /// A scheme other than http or https (lower-cased).
    Scheme(String),
    /// Anything after the authority but a single `/`.
    Path,
    /// `user@host`.
    Credentials,
    /// `[` without `]`.
    UnclosedBracket,
    /// Brackets around what is not an IPv6 address (the text inside them).
    NotIpv6(String),
    /// Something other than `:port` after `]`.
    JunkAfterBracket,
    /// More than one `:` outside brackets.
    UnbracketedIpv6,
    /// Not a number from 1 to 65535 (the text after the `:`).
    Port(String),
    /// Nothing where the host should be.
    NoHost,
    /// Not a host name or address (the host as written).
    NotHost(String),
}

impl NetRule {
    pub fn parse(entry: &str) -> Result<NetRule, RuleError> {
        let (scheme, rest) = match entry.split_once("://") {
            Some((scheme, rest)) => {
                let scheme = scheme.to_ascii_lowercase();
                if scheme != "http" && scheme != "https" {
                    return Err(RuleError::Scheme(scheme));
                }
                (Some(scheme), rest)
            }
            None => (None, entry),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#']) {
            return Err(RuleError::Path);
        }
        if rest.contains('@') {
            return Err(RuleError::Credentials);
        }
        let (host, port) = host_port(rest)?;
        Ok(NetRule { scheme, host, port })
    }

    /// Whether a request to `to` is allowed. An entry without a port allows the default
    /// port of its scheme (or, without a scheme, of the request's), so `api.openai.com`
    /// means https on 443, not every port.
    pub fn allows(&self, to: &Origin) -> bool {
        let scheme = self.scheme.as_deref().unwrap_or(&to.scheme);
        self.host == to.host
            && scheme == to.scheme
            && self.port.unwrap_or(default_port(scheme)) == to.port
    }
}

/// The host (lower-cased) and port of an authority without user information.
fn host_port(text: &str) -> Result<(String, Option<u16>), RuleError> {
    let parts = Authority::split(text);
    if parts.host.starts_with('[') {
        let inner = &parts.host[1..];
        let inner = inner.strip_suffix(']').ok_or(RuleError::UnclosedBracket)?;
        if ipv6_literal(parts.host).is_none() {
            return Err(RuleError::NotIpv6(inner.to_string()));
        }
        if !parts.junk.is_empty() {
            return Err(RuleError::JunkAfterBracket);
        }
        let port = parts.port.map(port).transpose()?;
        return Ok((format!("[{}]", inner.to_ascii_lowercase()), port));
    }
    if text.matches(':').count() > 1 {
        return Err(RuleError::UnbracketedIpv6);
    }
    let port = parts.port.map(port).transpose()?;
    if parts.host.is_empty() {
        return Err(RuleError::NoHost);
    }
    if !is_host_name(parts.host) {
        return Err(RuleError::NotHost(parts.host.to_string()));
    }
    Ok((parts.host.to_ascii_lowercase(), port))
}

fn port(text: &str) -> Result<u16, RuleError> {
    port_number(text).ok_or_else(|| RuleError::Port(text.to_string()))
}
