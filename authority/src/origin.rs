//! Where a request goes, as the allow list speaks of it: `scheme://host:port`.

use std::fmt;

/// A request's scheme and host (both lower-case) and its port, the default one filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub scheme: String,
    pub host: String,
    pub port: u16,
}

#[cfg(feature = "uri")]
impl Origin {
    /// The origin of a parsed request URI; a URI without a scheme is taken as https.
    pub fn of(uri: &http::Uri) -> Origin {
        let scheme = uri.scheme_str().unwrap_or("https").to_ascii_lowercase();
        let port = uri
            .port_u16()
            .unwrap_or_else(|| crate::default_port(&scheme));
        Origin {
            host: uri.host().unwrap_or_default().to_ascii_lowercase(),
            scheme,
            port,
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
    }
}
