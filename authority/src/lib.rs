//! Where a URL or an allow-list entry points: its scheme, host and port.
//!
//! The manifest (the model server's endpoint and `capabilities.network.allow`), the host's
//! outbound checks and the drivers' endpoints all read these parts here, so that they agree
//! on where one URL ends and the next part begins. Cutting is all this module does; what
//! each caller accepts (which hosts, which schemes) and how it words a refusal stay with it.
//!
//! The cuts follow RFC 3986: the scheme ends at the first `://`, the authority at the first
//! `/`, `?` or `#`, user information at the authority's last `@`, and a host in brackets
//! (an IPv6 address) at its `]`, so the colons inside it are not taken for a port.

mod origin;
mod rule;

use std::net::{Ipv4Addr, Ipv6Addr};

pub use origin::Origin;
pub use rule::{NetRule, RuleError};

/// A URL cut at its delimiters; nothing in it is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Url<'a> {
    /// The text before the first `://`, as written; `None` when there is none.
    pub scheme: Option<&'a str>,
    /// Up to the first `/`, `?` or `#` after the scheme.
    pub authority: &'a str,
    /// From the authority's end up to `?` or `#`; empty or starting with `/`.
    pub path: &'a str,
    /// After the first `?` of the path, up to `#`.
    pub query: Option<&'a str>,
    /// After the first `#`.
    pub fragment: Option<&'a str>,
}

impl<'a> Url<'a> {
    pub fn split(text: &'a str) -> Url<'a> {
        let (scheme, rest) = match text.split_once("://") {
            Some((scheme, rest)) => (Some(scheme), rest),
            None => (None, text),
        };
        let (rest, fragment) = match rest.split_once('#') {
            Some((rest, fragment)) => (rest, Some(fragment)),
            None => (rest, None),
        };
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(query)),
            None => (rest, None),
        };
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        Url {
            scheme,
            authority,
            path,
            query,
            fragment,
        }
    }

    /// `scheme://authority` of `text` (or the authority alone when it has no scheme): the
    /// URL without its path, query and fragment.
    pub fn head(text: &str) -> &str {
        let start = text.find("://").map_or(0, |i| i + 3);
        match text[start..].find(['/', '?', '#']) {
            Some(end) => &text[..start + end],
            None => text,
        }
    }
}

/// An authority cut into `userinfo@host:port`; nothing in it is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Authority<'a> {
    /// Before the last `@`.
    pub userinfo: Option<&'a str>,
    /// `[v6]` with its brackets (up to the first `]`, or to the end when there is none);
    /// otherwise up to the first `:`.
    pub host: &'a str,
    /// After the `:` that follows the host.
    pub port: Option<&'a str>,
    /// What follows a bracketed host when it is not `:port` (`[::1]x` leaves `x`).
    pub junk: &'a str,
}

impl<'a> Authority<'a> {
    pub fn split(authority: &'a str) -> Authority<'a> {
        let (userinfo, host_port) = match authority.rsplit_once('@') {
            Some((userinfo, rest)) => (Some(userinfo), rest),
            None => (None, authority),
        };
        let host_end = if host_port.starts_with('[') {
            host_port.find(']').map_or(host_port.len(), |i| i + 1)
        } else {
            host_port.find(':').unwrap_or(host_port.len())
        };
        let (host, after) = host_port.split_at(host_end);
        let (port, junk) = match after.strip_prefix(':') {
            Some(port) => (Some(port), ""),
            None => (None, after),
        };
        Authority {
            userinfo,
            host,
            port,
            junk,
        }
    }
}

/// A port written as digits only, from 1 to 65535.
pub fn port_number(text: &str) -> Option<u16> {
    let digits = !text.is_empty() && text.chars().all(|c| c.is_ascii_digit());
    text.parse::<u16>().ok().filter(|p| digits && *p > 0)
}

/// The port a scheme uses when none is written: 80 for `http`, 443 otherwise.
pub fn default_port(scheme: &str) -> u16 {
    if scheme == "http" { 80 } else { 443 }
}

/// The address inside `[…]`, when `host` is a bracketed IPv6 address.
pub fn ipv6_literal(host: &str) -> Option<Ipv6Addr> {
    host.strip_prefix('[')?.strip_suffix(']')?.parse().ok()
}

/// Whether `host` is `localhost`, a 127.x.x.x address or `[::1]`.
pub fn is_loopback(host: &str) -> bool {
    if host == "localhost" {
        return true;
    }
    if host.starts_with('[') {
        return ipv6_literal(host).is_some_and(|ip| ip.is_loopback());
    }
    host.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

/// A DNS name or an IPv4 address: letters, digits, `-` and `.`, in labels that are not
/// empty and neither start nor end with `-`, at most 253 characters.
pub fn is_host_name(host: &str) -> bool {
    let chars_ok = host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    let labels_ok = host
        .split('.')
        .all(|l| !l.is_empty() && !l.starts_with('-') && !l.ends_with('-'));
    chars_ok && labels_ok && host.len() <= 253
}

#[cfg(test)]
mod tests;
