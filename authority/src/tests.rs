use super::*;

#[test]
fn a_url_is_cut_at_its_delimiters() {
    let url = Url::split("HTTP://u:p@Host:8080/v1/x?api-version=1#top");
    assert_eq!(
        url,
        Url {
            scheme: Some("HTTP"),
            authority: "u:p@Host:8080",
            path: "/v1/x",
            query: Some("api-version=1"),
            fragment: Some("top"),
        }
    );
    let bare = Url::split("example.com");
    assert_eq!(
        (bare.scheme, bare.authority, bare.path),
        (None, "example.com", "")
    );
    // The authority ends at `?` or `#` as well as at `/`.
    assert_eq!(Url::split("http://h?q/x").authority, "h");
    assert_eq!(Url::split("http://h?q/x").query, Some("q/x"));
    assert_eq!(Url::split("http://h#f?q").query, None);
    assert_eq!(Url::split("http://h/p#f?q").path, "/p");
    // The scheme ends at the first `://`, wherever it is.
    assert_eq!(Url::split("h/p?u=http://x").scheme, Some("h/p?u=http"));
    assert_eq!(Url::split("https://").authority, "");
}

#[test]
fn the_head_of_a_url_drops_path_query_and_fragment() {
    assert_eq!(
        Url::head("http://127.0.0.1:11434/v1"),
        "http://127.0.0.1:11434"
    );
    assert_eq!(Url::head("https://h?key=1"), "https://h");
    assert_eq!(Url::head("https://h#x"), "https://h");
    assert_eq!(Url::head("h:80/x"), "h:80");
    assert_eq!(Url::head("https://h"), "https://h");
}

#[test]
fn an_authority_is_cut_into_userinfo_host_and_port() {
    let cut = |text| {
        let a = Authority::split(text);
        (a.userinfo, a.host, a.port, a.junk)
    };
    assert_eq!(cut("example.com"), (None, "example.com", None, ""));
    assert_eq!(
        cut("example.com:8443"),
        (None, "example.com", Some("8443"), "")
    );
    assert_eq!(cut("h:"), (None, "h", Some(""), ""));
    assert_eq!(cut("h:1:2"), (None, "h", Some("1:2"), ""));
    assert_eq!(
        cut("a@b@evil.com:1"),
        (Some("a@b"), "evil.com", Some("1"), "")
    );
    assert_eq!(cut("[::1]:9000"), (None, "[::1]", Some("9000"), ""));
    assert_eq!(cut("[::1]"), (None, "[::1]", None, ""));
    assert_eq!(cut("[::1]x"), (None, "[::1]", None, "x"));
    assert_eq!(cut("[::1"), (None, "[::1", None, ""));
    assert_eq!(cut(""), (None, "", None, ""));
}

#[test]
fn ports_are_digits_from_1_to_65535() {
    assert_eq!(port_number("1"), Some(1));
    assert_eq!(port_number("65535"), Some(65535));
    assert_eq!(port_number("08080"), Some(8080));
    for bad in ["", "0", "65536", "70000", "+80", "-1", "8o", " 80"] {
        assert_eq!(port_number(bad), None, "{bad}");
    }
    assert_eq!((default_port("http"), default_port("https")), (80, 443));
}

#[test]
fn hosts_are_told_apart() {
    assert_eq!(ipv6_literal("[::1]"), Some(std::net::Ipv6Addr::LOCALHOST));
    assert_eq!(ipv6_literal("::1"), None);
    assert_eq!(ipv6_literal("[::1"), None);
    assert_eq!(ipv6_literal("[1.2.3.4]"), None);
    for host in ["localhost", "127.0.0.1", "127.9.8.7", "[::1]"] {
        assert!(is_loopback(host), "{host}");
    }
    for host in [
        "10.0.0.1",
        "[::2]",
        "::1",
        "[::1",
        "localhost.",
        "example.com",
        "",
    ] {
        assert!(!is_loopback(host), "{host}");
    }
    for host in ["example.com", "a-b.c", "127.0.0.1", "x"] {
        assert!(is_host_name(host), "{host}");
    }
    let long = format!("{}.com", "a.".repeat(125));
    for host in [
        "",
        "a..b",
        "-a.b",
        "a-.b",
        "a_b",
        "a b",
        "*.example.com",
        &long,
    ] {
        assert!(!is_host_name(host), "{host}");
    }
}

fn rule(scheme: Option<&str>, host: &str, port: Option<u16>) -> NetRule {
    NetRule {
        scheme: scheme.map(str::to_string),
        host: host.to_string(),
        port,
    }
}

#[test]
fn allow_entries_in_every_form() {
    for (entry, want) in [
        ("api.example.com", rule(None, "api.example.com", None)),
        ("Example.COM:8443", rule(None, "example.com", Some(8443))),
        (
            "https://api.openai.com",
            rule(Some("https"), "api.openai.com", None),
        ),
        (
            "HTTP://127.0.0.1:11434/",
            rule(Some("http"), "127.0.0.1", Some(11434)),
        ),
        ("[::1]:9000", rule(None, "[::1]", Some(9000))),
        ("http://[FE80::1]", rule(Some("http"), "[fe80::1]", None)),
    ] {
        assert_eq!(NetRule::parse(entry), Ok(want), "{entry}");
    }
}

#[test]
fn allow_entries_refused_and_why() {
    use RuleError::*;
    for (entry, why) in [
        ("ftp://example.com", Scheme("ftp".into())),
        ("https://api.example.com/v1", Path),
        ("h?x", Path),
        ("h#x", Path),
        ("h//", Path),
        ("user@example.com", Credentials),
        ("[::1", UnclosedBracket),
        ("[x]:80", NotIpv6("x".into())),
        ("[::1]x", JunkAfterBracket),
        ("[::1]:", Port(String::new())),
        ("::1", UnbracketedIpv6),
        ("example.com:0", Port("0".into())),
        ("example.com:70000", Port("70000".into())),
        ("example.com:+80", Port("+80".into())),
        ("example.com:", Port(String::new())),
        ("exa mple.com:0", Port("0".into())),
        ("http://", NoHost),
        (":80", NoHost),
        ("exa mple.com", NotHost("exa mple.com".into())),
        ("*.example.com", NotHost("*.example.com".into())),
    ] {
        assert_eq!(NetRule::parse(entry), Err(why), "{entry}");
    }
}

fn origin(scheme: &str, host: &str, port: u16) -> Origin {
    Origin {
        scheme: scheme.into(),
        host: host.into(),
        port,
    }
}

#[test]
fn rules_match_scheme_host_and_port() {
    let exact = rule(Some("http"), "127.0.0.1", Some(11434));
    assert!(exact.allows(&origin("http", "127.0.0.1", 11434)));
    assert!(!exact.allows(&origin("https", "127.0.0.1", 11434)));
    assert!(!exact.allows(&origin("http", "127.0.0.1", 11435)));
    assert!(!exact.allows(&origin("http", "127.0.0.2", 11434)));
    // Without a port: the default port of the rule's scheme, or of the request's.
    let host = rule(None, "api.openai.com", None);
    assert!(host.allows(&origin("https", "api.openai.com", 443)));
    assert!(host.allows(&origin("http", "api.openai.com", 80)));
    assert!(!host.allows(&origin("https", "api.openai.com", 8443)));
    let https = rule(Some("https"), "api.anthropic.com", None);
    assert!(!https.allows(&origin("http", "api.anthropic.com", 443)));
    assert_eq!(origin("http", "[::1]", 80).to_string(), "http://[::1]:80");
}

#[cfg(feature = "uri")]
#[test]
fn the_origin_of_a_request_uri() {
    let of = |url: &str| Origin::of(&url.parse().expect("test URL")).to_string();
    assert_eq!(
        of("https://API.example.com/v1?k=s"),
        "https://api.example.com:443"
    );
    assert_eq!(of("HTTP://127.0.0.1:11434/"), "http://127.0.0.1:11434");
    assert_eq!(of("http://[::1]/"), "http://[::1]:80");
    assert_eq!(of("/relative"), "https://:443");
}
