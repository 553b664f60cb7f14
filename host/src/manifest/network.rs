//! Where the capsule may reach: the model server's endpoint and the
//! `capabilities.network.allow` entries. Both are cut by `mur_authority`, the parser the
//! outbound checks and the drivers use too; the rules and the words of a refusal are here.

use mur_authority::{Authority, NetRule, RuleError, Url, is_loopback};

use super::Result;
use super::fields::{Cx, Field, Section, substitute};
use super::tree::show;

/// A usable `inference.endpoint`: http(s), with a host, and plain http only to this
/// machine. The driver checks the rest of the URL when it starts.
pub(super) fn check_endpoint(url: &str) -> std::result::Result<(), String> {
    let lower = url.to_ascii_lowercase();
    let parts = Url::split(&lower);
    let secure = match parts.scheme {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(format!("'{}' is not an http(s):// URL", show(url))),
    };
    let host = Authority::split(parts.authority).host;
    if host.is_empty() {
        return Err(format!("'{}' has no host", show(url)));
    }
    if secure || is_loopback(host) {
        return Ok(());
    }
    Err(format!(
        "plain http:// may only reach this machine, found host '{}'",
        show(host)
    ))
}

pub(super) fn net_rules(cx: &Cx, net: &Section) -> Result<Vec<NetRule>> {
    let items = net.opt_list(cx, "allow")?.unwrap_or_default();
    let rule = |item: &Field| {
        let written = item.string(cx)?;
        let mut text = substitute(cx, &written, item.line, &item.path)?;
        if text != written {
            // `${OPENAI_BASE_URL}` is usually the endpoint itself: one variable names the
            // server for both keys, and only its scheme, host and port count here.
            text = Url::head(&text).to_string();
        }
        NetRule::parse(&text).map_err(|e| {
            let why = format!("'{}': {}", show(&text), refusal(&e));
            let hint = "use host, host:port or http(s)://host[:port], e.g. \
                        http://127.0.0.1:11434";
            cx.invalid_as("E-CAP-001", item.line, &item.path, why)
                .hint(hint)
        })
    };
    items.iter().map(rule).collect()
}

fn refusal(e: &RuleError) -> String {
    match e {
        RuleError::Scheme(scheme) => format!("scheme '{}' is not http or https", show(scheme)),
        RuleError::Path => "a path is not allowed, only host[:port]".to_string(),
        RuleError::Credentials => "credentials are not allowed".to_string(),
        RuleError::UnclosedBracket => "unclosed '['".to_string(),
        RuleError::NotIpv6(host) => format!("'{}' is not an IPv6 address", show(host)),
        RuleError::JunkAfterBracket => "junk after ']'".to_string(),
        RuleError::UnbracketedIpv6 => "an IPv6 address needs brackets, e.g. [::1]:8080".to_string(),
        RuleError::Port(port) => format!("port '{}' is not a number from 1 to 65535", show(port)),
        RuleError::NoHost => "no host".to_string(),
        RuleError::NotHost(host) => format!("'{}' is not a host name or address", show(host)),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::*;

    #[test]
    fn env_names_the_model_server_for_endpoint_model_and_allow_list() {
        let s = Scratch::new();
        let yaml = "name: t\nversion: \"1\"\ninference:\n  driver: openai\n  \
                    endpoint: ${MODEL_URL}\n  model: ${MODEL_NAME}\ncapabilities:\n  \
                    network:\n    allow: [\"${MODEL_URL}\"]\n";
        let m = s.ok(yaml).manifest;
        assert_eq!(
            m.inference.endpoint.as_deref(),
            Some("http://127.0.0.1:11434/v1")
        );
        assert_eq!(m.inference.model, "qwen2.5-coder");
        let rule = NetRule {
            scheme: Some("http".into()),
            host: "127.0.0.1".into(),
            port: Some(11434),
        };
        assert_eq!(m.capabilities.network_allow, vec![rule]);
        let e = s.err(&yaml.replace("${MODEL_NAME}", "${NO_SUCH_MODEL}"));
        assert!(
            e.message
                .ends_with("'inference.model': environment variable NO_SUCH_MODEL is not set"),
            "{e}"
        );
    }

    #[test]
    fn endpoint_rules() {
        let s = Scratch::new();
        let good = [
            "https://api.example.com/v1",
            "HTTPS://API.EXAMPLE.COM",
            "http://localhost:11434",
            "http://127.0.0.1:8080/v1",
            "http://127.9.8.7",
            "http://[::1]:8080",
        ];
        for url in good {
            let m = s.ok(&base(&format!("  endpoint: {url}\n"))).manifest;
            assert_eq!(m.inference.endpoint.as_deref(), Some(url));
        }
        let bad = [
            ("http://example.com", "found host 'example.com'"),
            ("http://localhost@evil.com/", "found host 'evil.com'"),
            ("http://10.0.0.1:80", "found host '10.0.0.1'"),
            ("http://[::2]", "found host '[::2]'"),
            (
                "ftp://localhost",
                "'ftp://localhost' is not an http(s):// URL",
            ),
            ("https://", "'https://' has no host"),
        ];
        for (url, why) in bad {
            let e = s.err(&base(&format!("  endpoint: \"{url}\"\n")));
            assert_eq!(e.code, "E-MAN-003", "{url}");
            let want = "murmur.yaml:6: invalid inference config for 'inference.endpoint': ";
            assert!(e.message.starts_with(want), "{e}");
            assert!(e.message.ends_with(why), "{url}: {e}");
            assert!(e.hint.is_some());
        }
    }

    #[test]
    fn network_allow_forms() {
        let s = Scratch::new();
        let yaml = caps(
            "  network:\n    allow:\n      - api.example.com\n      - Example.COM:8443\n      \
             - https://api.openai.com\n      - http://127.0.0.1:11434/\n      - \"[::1]:9000\"\n",
        );
        let rules = s.ok(&yaml).manifest.capabilities.network_allow;
        let rule = |scheme: Option<&str>, host: &str, port: Option<u16>| NetRule {
            scheme: scheme.map(str::to_string),
            host: host.to_string(),
            port,
        };
        let want = vec![
            rule(None, "api.example.com", None),
            rule(None, "example.com", Some(8443)),
            rule(Some("https"), "api.openai.com", None),
            rule(Some("http"), "127.0.0.1", Some(11434)),
            rule(None, "[::1]", Some(9000)),
        ];
        assert_eq!(rules, want);
    }

    #[test]
    fn network_allow_bad_entries() {
        let s = Scratch::new();
        let bad = [
            (
                "https://api.example.com/v1",
                "a path is not allowed, only host[:port]",
            ),
            ("ftp://example.com", "scheme 'ftp' is not http or https"),
            ("example.com:0", "port '0' is not a number from 1 to 65535"),
            (
                "example.com:70000",
                "port '70000' is not a number from 1 to 65535",
            ),
            ("example.com:", "port '' is not a number from 1 to 65535"),
            ("http://", "no host"),
            (
                "exa mple.com",
                "'exa mple.com' is not a host name or address",
            ),
            ("::1", "an IPv6 address needs brackets, e.g. [::1]:8080"),
            ("user@example.com", "credentials are not allowed"),
            (
                "*.example.com",
                "'*.example.com' is not a host name or address",
            ),
        ];
        for (entry, why) in bad {
            let yaml = caps(&format!(
                "  network:\n    allow:\n      - ok.example\n      - \"{entry}\"\n"
            ));
            let e = s.err(&yaml);
            let want = format!(
                "murmur.yaml:10: invalid capabilities config for \
                 'capabilities.network.allow[1]': '{entry}': {why}"
            );
            assert_eq!((e.code, e.message.as_str()), ("E-CAP-001", want.as_str()));
            assert!(e.hint.is_some());
        }
    }
}
