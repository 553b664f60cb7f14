//! The URL a driver posts to: wasi:http wants scheme, authority and path apart. The URL is
//! cut by `mur_authority`, the parser the host's manifest and allow list use, so a driver
//! and the host agree on its host and port; what a driver accepts is checked here.

use mur_authority::{Authority, Url, default_port};

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
        // A fragment never reaches a server, so it is dropped.
        let parts = Url::split(url);
        let scheme = parts
            .scheme
            .ok_or_else(|| bad("it must start with http:// or https://"))?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "https" => true,
            "http" => false,
            _ => return Err(bad("the scheme must be http or https")),
        };
        check_authority(parts.authority).map_err(|why| bad(&why))?;
        Ok(Endpoint {
            tls,
            authority: parts.authority.to_string(),
            path: parts.path.trim_end_matches('/').to_string(),
            query: parts.query.filter(|q| !q.is_empty()).map(str::to_string),
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
        if Authority::split(&self.authority).port.is_some() {
            format!("{scheme}://{}", self.authority)
        } else {
            format!("{scheme}://{}:{}", self.authority, default_port(scheme))
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

/// A driver is lenient with host names (`_` is common in container networks) and leaves
/// the rest to the name lookup.
fn check_authority(authority: &str) -> Result<(), String> {
    let Authority {
        userinfo,
        host,
        port,
        ..
    } = Authority::split(authority);
    if userinfo.is_some() {
        return Err("user names and passwords do not belong in it; use inference.api_key".into());
    }
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

/// The URL as messages may show it: no query, fragment or user information, any of
/// which may carry a secret.
fn redact(url: &str) -> String {
    let parts = Url::split(url);
    let authority = Authority::split(parts.authority);
    let host_port = match authority.userinfo {
        Some(userinfo) => &parts.authority[userinfo.len() + 1..],
        None => parts.authority,
    };
    match parts.scheme {
        Some(scheme) => format!("{scheme}://{host_port}{}", parts.path),
        None => format!("{host_port}{}", parts.path),
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
            ("http://h:1:2/", "not a port"),
            ("http://[::1/", "not a host"),
            ("http://[]/", "no host"),
            ("://h/", "scheme must be"),
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
    fn hosts_as_containers_and_servers_name_them() {
        let e = Endpoint::parse("http://model_server:8080/v1#top").unwrap();
        assert_eq!(e.authority, "model_server:8080");
        assert_eq!(e.path_with_query(), "/v1");
        let e = Endpoint::parse("https://h?").unwrap();
        assert_eq!((e.origin(), e.query), ("https://h:443".to_string(), None));
        let err = Endpoint::parse("https://h/p?k=secret#frag").map(|_| ());
        assert_eq!(err, Ok(()));
        let err = Endpoint::parse("gopher://u:pw@h/p?k=secret#f").unwrap_err();
        assert_eq!(
            err,
            "the endpoint 'gopher://h/p' is not a usable URL: the scheme must be http or https"
        );
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
