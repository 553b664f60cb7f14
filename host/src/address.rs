//! A capsule's address as the user types it: `host:port`, `localhost:port` or
//! `http://host:port`, with the path of a capsule `mur serve` hosts
//! (`http://host:port/c/<id>/`) when there is one, cut by the one URL parser the manifest, the outbound checks and
//! the drivers share.

use mur_authority::{Authority, Url, port_number};

/// A capsule's address as the user typed it, and where it points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Address {
    /// Exactly what was typed: messages name the address this way.
    pub typed: String,
    /// The host to connect to (an IPv6 literal without its brackets).
    pub host: String,
    pub port: u16,
    /// `host:port` as the `Host` header wants it (IPv6 literals keep their brackets).
    pub authority: String,
    /// The path requests go to: `/` for `mur run`, `/c/<id>/` under `mur serve`.
    pub path: String,
}

/// Parses `host:port`, `localhost:port` or `http://host:port`, with an optional
/// path (`/` when there is none). Used as clap's value parser, so a bad address is a usage error.
pub fn parse_address(typed: &str) -> Result<Address, String> {
    let url = Url::split(typed.trim());
    if let Some(scheme) = url.scheme.filter(|s| !s.eq_ignore_ascii_case("http")) {
        return Err(format!(
            "'{scheme}://' is not supported: a capsule's address is plain http (HOST:PORT or http://HOST:PORT)"
        ));
    }
    if url.query.is_some() || url.fragment.is_some() {
        return Err("expected HOST:PORT or HOST:PORT/PATH, with no ?query or #fragment".into());
    }
    let path_ok = url.path.is_empty()
        || (url.path.starts_with('/') && !url.path.bytes().any(|b| b <= b' ' || b == 0x7f));
    if !path_ok {
        return Err(format!(
            "'{}' is not a path: it starts with / and has no spaces or control characters",
            url.path.escape_debug()
        ));
    }
    let parts = Authority::split(url.authority);
    let port = match parts.port {
        Some(port) if !parts.host.starts_with('[') && port.contains(':') => {
            return Err("write an IPv6 address in brackets, for example [::1]:52222".into());
        }
        Some(port) => port,
        None => return Err("expected HOST:PORT, for example localhost:52222".into()),
    };
    let host = match parts.host.strip_prefix('[') {
        Some(inner) => inner
            .strip_suffix(']')
            .filter(|_| parts.junk.is_empty())
            .ok_or_else(|| format!("'{}{}' is not a valid host", parts.host, parts.junk))?,
        None => parts.host,
    };
    if parts.userinfo.is_some() {
        return Err(format!("'{}' is not a valid host", url.authority));
    }
    if host.is_empty() {
        return Err("the host is missing: expected HOST:PORT, for example localhost:52222".into());
    }
    let port = port_number(port).ok_or_else(|| format!("'{port}' is not a port (1-65535)"))?;
    Ok(Address {
        typed: typed.to_string(),
        host: host.to_string(),
        port,
        authority: url.authority.to_string(),
        path: if url.path.is_empty() {
            "/".into()
        } else {
            url.path.to_string()
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_as_typed() {
        let a = parse_address("localhost:52222").unwrap();
        assert_eq!((a.host.as_str(), a.port), ("localhost", 52222));
        assert_eq!(a.typed, "localhost:52222");
        let a = parse_address("http://127.0.0.1:8080/").unwrap();
        assert_eq!((a.host.as_str(), a.port), ("127.0.0.1", 8080));
        assert_eq!(a.authority, "127.0.0.1:8080");
        assert_eq!(a.typed, "http://127.0.0.1:8080/");
        assert_eq!(a.path, "/");
        let a = parse_address("http://127.0.0.1:8080/c/cap_1/").unwrap();
        assert_eq!((a.port, a.path.as_str()), (8080, "/c/cap_1/"));
        let a = parse_address("HTTP://[::1]:9").unwrap();
        assert_eq!(
            (a.host.as_str(), a.port, a.authority.as_str()),
            ("::1", 9, "[::1]:9")
        );
        for bad in [
            "localhost",
            "localhost:",
            ":80",
            "localhost:0",
            "localhost:70000",
            "https://localhost:1",
            "::1:80",
            "localhost:1?x",
            "http://localhost:1/a b",
            "localhost:1#x",
            "user@localhost:1",
            "[::1]x:1",
            "localhost:+1",
        ] {
            assert!(parse_address(bad).is_err(), "{bad}");
        }
    }
}
