//! The URL a driver posts to, parsed by hand: wasi:http wants scheme, authority and
//! path apart, and a full URL crate would be most of a driver's size for this.

/// A parsed `http://` or `https://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Whether the scheme is `https`.
    pub tls: bool,
    /// `host` or `host:port`, as written (IPv6 hosts keep their brackets).
    pub authority: String,
    /// The path, without a trailing `/`; empty for the root.
    pub path: String,
    /// The query without its `?`, kept for servers that need one (`?api-version=`).
    pub query: Option<String>,
}

impl Endpoint {
    /// Parses `scheme://authority[/path][?query]`. Surrounding spaces are ignored and a
    /// trailing `/` on the path is dropped, so `…/v1/` and `…/v1` mean the same.
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let url = url.trim();
        let bad = |why: &str| format!("the endpoint '{}' is not a usable URL: {why}", redact(url));
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("it must start with http:// or https://"))?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "https" => true,
            "http" => false,
            _ => return Err(bad("the scheme must be http or https")),
        };
        // A fragment never reaches a server.
        let rest = rest.split_once('#').map_or(rest, |(before, _)| before);
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, (!query.is_empty()).then(|| query.to_string())),
            None => (rest, None),
        };
        let (authority, path) = match rest.find('/') {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        check_authority(authority).map_err(|why| bad(&why))?;
        Ok(Endpoint {
            tls,
            authority: authority.to_string(),
            path: path.trim_end_matches('/').to_string(),
            query,
        })
    }

    /// The same server with another path (the query is kept).
    pub fn with_path(&self, path: String) -> Endpoint {
        Endpoint {
            path,
            ..self.clone()
        }
    }

    /// `scheme://host:port`, the words the host's allow list uses; the port is explicit.
    pub fn origin(&self) -> String {
        let scheme = self.scheme();
        if has_port(&self.authority) {
            format!("{scheme}://{}", self.authority)
        } else {
            let port = if self.tls { 443 } else { 80 };
            format!("{scheme}://{}:{port}", self.authority)
        }
    }

    /// The URL for messages: without the query, which may carry a key.
    pub fn display(&self) -> String {
        format!("{}://{}{}", self.scheme(), self.authority, self.path)
    }

    /// What wasi:http calls path-with-query: never empty, always starting with `/`.
    pub fn path_with_query(&self) -> String {
        let path = if self.path.is_empty() {
            "/"
        } else {
            &self.path
        };
        match &self.query {
            Some(query) => format!("{path}?{query}"),
            None => path.to_string(),
        }
    }

    fn scheme(&self) -> &'static str {
        if self.tls { "https" } else { "http" }
    }
}

fn check_authority(authority: &str) -> Result<(), String> {
    if authority.contains('@') {
        return Err("user names and passwords do not belong in it; use inference.api_key".into());
    }
    let (host, port) = split_host_port(authority);
    if host.is_empty() || host == "[]" {
        return Err("it has no host".into());
    }
    let host_ok = if let Some(inner) = host.strip_prefix('[') {
        inner.strip_suffix(']').is_some_and(|ip| {
            ip.chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
        })
    } else {
        host.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_')
    };
    if !host_ok {
        return Err(format!("'{host}' is not a host name or address"));
    }
    match port {
        Some(port) if port.parse::<u16>().map_or(true, |p| p == 0) => {
            Err(format!("'{port}' is not a port number"))
        }
        _ => Ok(()),
    }
}

/// Splits `host[:port]`, minding the colons inside `[v6]`.
fn split_host_port(authority: &str) -> (&str, Option<&str>) {
    let host_end = if authority.starts_with('[') {
        authority.find(']').map_or(authority.len(), |i| i + 1)
    } else {
        authority.find(':').unwrap_or(authority.len())
    };
    let (host, rest) = authority.split_at(host_end);
    (host, rest.strip_prefix(':'))
}

fn has_port(authority: &str) -> bool {
    split_host_port(authority).1.is_some()
}

/// The URL as messages may show it: no query and no user information, either of
/// which may carry a secret.
fn redact(url: &str) -> String {
    let url = url.split_once('?').map_or(url, |(before, _)| before);
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let rest = match rest[..authority_end].rfind('@') {
        Some(at) => &rest[at + 1..],
        None => rest,
    };
    if scheme.is_empty() {
        rest.to_string()
    } else {
        format!("{scheme}://{rest}")
    }
}

/// The path of an API call (`call`, e.g. `/chat/completions`) for an endpoint's path.
/// Endpoints are written every which way: the call's own path, `…/v1`, or a bare host
/// or proxy prefix, so all three are accepted.
pub fn api_path(path: &str, call: &str) -> String {
    if path.ends_with(call) {
        path.to_string()
    } else if path.ends_with("/v1") {
        format!("{path}{call}")
    } else {
        format!("{path}/v1{call}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_split() {
        let e = Endpoint::parse(" HTTP://127.0.0.1:8080/v1/?api-version=1 ").unwrap();
        assert!(!e.tls);
        assert_eq!(e.authority, "127.0.0.1:8080");
        assert_eq!(e.path, "/v1");
        assert_eq!(e.path_with_query(), "/v1?api-version=1");
        assert_eq!(e.origin(), "http://127.0.0.1:8080");
        assert_eq!(e.display(), "http://127.0.0.1:8080/v1");
    }

    #[test]
    fn the_root_and_default_ports() {
        let e = Endpoint::parse("https://api.openai.com").unwrap();
        assert_eq!(e.path, "");
        assert_eq!(e.path_with_query(), "/");
        assert_eq!(e.origin(), "https://api.openai.com:443");
        let v6 = Endpoint::parse("http://[::1]:11434/").unwrap();
        assert_eq!(v6.origin(), "http://[::1]:11434");
        assert_eq!(
            Endpoint::parse("http://[::1]").unwrap().origin(),
            "http://[::1]:80"
        );
    }

    #[test]
    fn bad_urls_are_refused_in_words() {
        for (url, why) in [
            ("api.openai.com/v1", "must start with http"),
            ("ftp://x/", "scheme must be"),
            ("http:///v1", "no host"),
            ("http://h:99999/", "not a port"),
            ("http://h:0/", "not a port"),
            ("http://u:secret@h/", "api_key"),
            ("http://a b/", "not a host"),
        ] {
            let err = Endpoint::parse(url).unwrap_err();
            assert!(err.contains(why), "{url}: {err}");
        }
        for url in ["ftp://h/?key=secret", "http://u:secret@h/v1"] {
            let err = Endpoint::parse(url).unwrap_err();
            assert!(!err.contains("secret"), "{err}");
        }
    }

    #[test]
    fn an_api_call_path_is_found_whatever_the_endpoint_names() {
        assert_eq!(api_path("", "/messages"), "/v1/messages");
        assert_eq!(api_path("/v1", "/messages"), "/v1/messages");
        assert_eq!(api_path("/x/v1/messages", "/messages"), "/x/v1/messages");
        assert_eq!(
            api_path("/proxy", "/chat/completions"),
            "/proxy/v1/chat/completions"
        );
    }
}
