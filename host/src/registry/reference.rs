//! A registry reference, `host[:port]/namespace/name:tag` or `…@sha256:<hex>`, read by
//! the OCI distribution grammar so that what reaches a URL is only what a registry
//! would accept.

use std::fmt;

use crate::error::Error;

/// Where a component lives: its registry, its repository there, and a tag or a digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// `host[:port]`, as the URL and the credentials are keyed.
    pub registry: String,
    /// `namespace/name`, one or more path components.
    pub repository: String,
    pub tag: Option<String>,
    /// `sha256:<64 hex>`.
    pub digest: Option<String>,
}

impl Reference {
    pub fn parse(text: &str) -> Result<Reference, Error> {
        let bad = |why: &str| {
            Error::new(
                "E-REG-001",
                format!("'{}' is not a registry reference: {why}", shown(text)),
            )
            .hint("write host[:port]/namespace/name:version, e.g. 127.0.0.1:5000/tools/echo:1.0.0")
        };
        let (rest, digest) = match text.split_once('@') {
            Some((rest, digest)) => {
                if !is_digest(digest) {
                    return Err(bad("the part after '@' is not sha256:<64 hex digits>"));
                }
                (rest, Some(digest.to_string()))
            }
            None => (text, None),
        };
        let Some((registry, path)) = rest.split_once('/') else {
            return Err(bad("it names no registry host"));
        };
        if !is_host(registry) {
            return Err(bad("the registry host is not host[:port]"));
        }
        // A tag's ':' comes after the last '/', so a port's never counts.
        let (repository, tag) = match path.rsplit_once(':') {
            Some((repo, tag)) if !tag.contains('/') => (repo, Some(tag.to_string())),
            _ => (path, None),
        };
        if !repository.split('/').all(is_path_component) {
            return Err(bad(
                "the repository must be lower-case letters and digits, separated by '/', '.', \
                 '_' or '-'",
            ));
        }
        if repository.len() > 255 {
            return Err(bad("the repository is longer than 255 characters"));
        }
        if let Some(tag) = &tag
            && !is_tag(tag)
        {
            return Err(bad(
                "the version (tag) must be letters, digits, '_', '.' or '-', at most 128, not \
                 starting with '.' or '-'",
            ));
        }
        if tag.is_none() && digest.is_none() {
            return Err(bad("it names no version: add ':<version>'"));
        }
        Ok(Reference {
            registry: registry.to_string(),
            repository: repository.to_string(),
            tag,
            digest,
        })
    }

    /// What a request for the manifest names: the digest when there is one.
    pub fn manifest_key(&self) -> &str {
        self.digest
            .as_deref()
            .or(self.tag.as_deref())
            .unwrap_or("latest")
    }

    /// Whether requests may go over plain HTTP: only to a loopback host, or one the
    /// configuration names as insecure.
    pub fn plain_http(&self, insecure: &[String]) -> bool {
        is_loopback(&self.registry) || insecure.iter().any(|h| h == &self.registry)
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

/// `sha256:` and 64 lower-case hex digits.
pub fn is_digest(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

fn is_host(text: &str) -> bool {
    let (host, port) = match text.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || text.starts_with('[') => (host, Some(port)),
        _ => (text, None),
    };
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    let bracketed = host.starts_with('[') && host.ends_with(']') && host.len() > 2;
    let named = !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
    port_ok && (bracketed || named)
}

fn is_loopback(registry: &str) -> bool {
    let host = match registry.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => registry,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`
fn is_path_component(part: &str) -> bool {
    let bytes = part.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    if !alnum(first) || !alnum(last) {
        return false;
    }
    let mut run = String::new();
    for &b in bytes {
        if alnum(&b) {
            if !matches!(run.as_str(), "" | "." | "_" | "__") && !run.bytes().all(|c| c == b'-') {
                return false;
            }
            run.clear();
        } else if matches!(b, b'.' | b'_' | b'-') {
            run.push(b as char);
        } else {
            return false;
        }
    }
    true
}

/// `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`
fn is_tag(tag: &str) -> bool {
    let ok = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    tag.len() <= 128
        && tag.bytes().next().is_some_and(ok)
        && tag.bytes().all(|b| ok(b) || b == b'.' || b == b'-')
}

/// Text from the command line or a manifest, shown safely in one line.
fn shown(text: &str) -> String {
    crate::escape::cut(&crate::escape::line(text), 200).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_is_read_into_its_parts() {
        let r = Reference::parse("127.0.0.1:5000/tools/echo:1.0.0").unwrap();
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.tag.as_deref()),
            ("127.0.0.1:5000", "tools/echo", Some("1.0.0"))
        );
        assert_eq!(r.to_string(), "127.0.0.1:5000/tools/echo:1.0.0");
        let d = format!("sha256:{}", "a".repeat(64));
        let r = Reference::parse(&format!("ghcr.io/acme/murmur/driver-anthropic@{d}")).unwrap();
        assert_eq!(r.repository, "acme/murmur/driver-anthropic");
        assert_eq!(r.manifest_key(), d);
        assert!(!r.plain_http(&[]));
        assert!(
            Reference::parse("localhost:5000/a:1")
                .unwrap()
                .plain_http(&[])
        );
        assert!(Reference::parse("[::1]:5000/a:1").unwrap().plain_http(&[]));
        let lan = Reference::parse("registry.lan:5000/a:1").unwrap();
        assert!(lan.plain_http(&["registry.lan:5000".into()]));
        assert!(!lan.plain_http(&["registry.lan".into()]));
    }

    #[test]
    fn what_a_registry_would_refuse_is_refused_here() {
        for (text, why) in [
            ("echo:1", "it names no registry host"),
            ("host/Echo:1", "the repository must be lower-case"),
            ("host/a//b:1", "the repository must be lower-case"),
            ("host/a/../b:1", "the repository must be lower-case"),
            ("host/a:-1", "the version (tag) must be"),
            ("host/a", "it names no version"),
            ("host/a@sha256:12", "the part after '@'"),
            ("ho st/a:1", "the registry host is not"),
            ("host:5x/a:1", "the registry host is not"),
        ] {
            let e = Reference::parse(text).unwrap_err();
            assert_eq!(e.code, "E-REG-001");
            assert!(e.message.contains(why), "{text}: {}", e.message);
        }
        let e = Reference::parse("h/a:1\u{1b}[31m").unwrap_err();
        assert!(!e.message.contains('\u{1b}'), "{}", e.message);
    }
}
