//! Where a request asks to go, read from its method and target, and written back as
//! `host:port` the way a URL would.

use http::{Method, Uri};

use super::Destination;

/// What could be read of a request that names no destination this proxy serves.
pub(super) struct NotProxyable {
    pub(super) destination: Destination,
    pub(super) reason: &'static str,
}

/// The destination a proxy request names: `host:port` for CONNECT, an absolute `http://`
/// URL otherwise.
pub(super) fn parse_destination(method: &Method, uri: &Uri) -> Result<Destination, NotProxyable> {
    let named = uri.authority().map(|a| (a.host(), a.port_u16()));
    if method == Method::CONNECT {
        return match named {
            Some((host, Some(port))) => Ok(destination("CONNECT", "https", host, port)),
            _ => Err(NotProxyable {
                destination: destination("CONNECT", "https", "", 0),
                reason: "CONNECT needs host:port",
            }),
        };
    }
    let (scheme, Some((host, port))) = (uri.scheme_str().unwrap_or(""), named) else {
        return Err(NotProxyable {
            destination: destination(method.as_str(), "http", "", 0),
            reason: "not a proxy request",
        });
    };
    if scheme.eq_ignore_ascii_case("http") {
        Ok(destination(
            method.as_str(),
            "http",
            host,
            port.unwrap_or(80),
        ))
    } else if scheme.eq_ignore_ascii_case("https") {
        // We cannot speak TLS for the client; it has to tunnel instead.
        Err(NotProxyable {
            destination: destination(method.as_str(), "https", host, port.unwrap_or(443)),
            reason: "https:// URLs must be tunnelled with CONNECT",
        })
    } else {
        Err(NotProxyable {
            destination: destination(method.as_str(), "http", "", 0),
            reason: "only http:// URLs can be forwarded",
        })
    }
}

fn destination(method: &str, scheme: &'static str, host: &str, port: u16) -> Destination {
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Destination {
        method: method.to_owned(),
        scheme,
        host: host.to_ascii_lowercase(),
        port,
    }
}

/// `host:port` as it would be written in a URL, so IPv6 stays readable.
pub(super) fn authority(destination: &Destination) -> String {
    format!("{}:{}", bracketed(&destination.host), destination.port)
}

pub(super) fn bracketed(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}
