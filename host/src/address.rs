//! A capsule's address as the user types it: `host:port`, `localhost:port` or
//! `http://host:port`.

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
}

/// Parses `host:port`, `localhost:port` or `http://host:port`, with an optional
/// trailing `/`. Used as clap's value parser, so a bad address is a usage error.
pub fn parse_address(typed: &str) -> Result<Address, String> {
    let trimmed = typed.trim();
    let rest = match trimmed.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
        Some((scheme, _)) => {
            return Err(format!(
                "'{scheme}://' is not supported: a capsule's address is plain http (HOST:PORT or http://HOST:PORT)"
            ));
        }
        None => trimmed,
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains('/') {
        return Err("expected HOST:PORT with no path (the capsule answers on /)".into());
    }
    let (host, port) = authority
        .rsplit_once(':')
        .ok_or_else(|| "expected HOST:PORT, for example localhost:52222".to_string())?;
    let host = match host.strip_prefix('[') {
        Some(inner) => inner
            .strip_suffix(']')
            .ok_or_else(|| format!("'{host}' is not a valid host"))?,
        None if host.contains(':') => {
            return Err("write an IPv6 address in brackets, for example [::1]:52222".into());
        }
        None => host,
    };
    if host.is_empty() {
        return Err("the host is missing: expected HOST:PORT, for example localhost:52222".into());
    }
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("'{port}' is not a port (1-65535)"))?;
    Ok(Address {
        typed: typed.to_string(),
        host: host.to_string(),
        port,
        authority: authority.to_string(),
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
            "http://localhost:1/path",
            "::1:80",
        ] {
            assert!(parse_address(bad).is_err(), "{bad}");
        }
    }
}
