//! A driver artifact's `gateway {endpoint, api_key, keyless}`: upstream Murmur's way of
//! saying where a driver sends inference and with which key, read as upstream reads
//! it, so its quickstart manifest loads unchanged.

use super::fields::{Cx, Section, substitute};
use super::network::check_endpoint;
use super::tree::join;
use super::{Gateway, Result, Runtime};

pub(super) fn gateway(cx: &mut Cx, sec: &Section, runtime: Runtime) -> Result<Option<Gateway>> {
    if sec.field("gateway").is_none() {
        return Ok(None);
    }
    let g = sec.sub(cx, "gateway")?;
    let path = join(&sec.path, "gateway");
    let line = g.line.unwrap_or(1);
    if runtime != Runtime::Driver {
        let why = format!(
            "only a driver has a gateway, and this is a {}",
            runtime.as_str()
        );
        return Err(cx
            .invalid(line, &path, why)
            .hint("move 'gateway' to the driver's artifacts[] entry"));
    }
    let Some((endpoint, at)) = g.opt_str(cx, "endpoint")? else {
        let hint = "the block needs the URL the driver sends inference to, e.g. \
                    'endpoint: https://api.anthropic.com'";
        return Err(cx.missing(g.line, &join(&path, "endpoint")).hint(hint));
    };
    let endpoint_path = join(&path, "endpoint");
    let endpoint = substitute(cx, endpoint.trim(), at, &endpoint_path)?;
    check_endpoint(&endpoint).map_err(|why| {
        let hint = "use an https:// URL; plain http:// is allowed only to localhost, 127.x.x.x \
                    or [::1]";
        cx.invalid(at, &endpoint_path, why).hint(hint)
    })?;
    let keyless = g.opt_bool(cx, "keyless")?.unwrap_or(false);
    let api_key = g.opt_str(cx, "api_key")?;
    let key_path = join(&path, "api_key");
    match (keyless, api_key) {
        (true, Some((_, at))) => Err(cx
            .invalid(
                at,
                &key_path,
                "a gateway either presents a key or is keyless: true, not both",
            )
            .hint("remove 'api_key' for a provider that takes no key, or 'keyless'")),
        (true, None) => Ok(Some(Gateway {
            endpoint,
            api_key: None,
            keyless: true,
        })),
        (false, Some((key, at))) if !key.trim().is_empty() => Ok(Some(Gateway {
            endpoint,
            api_key: Some(substitute(cx, key.trim(), at, &key_path)?),
            keyless: false,
        })),
        (false, _) => Err(cx.missing(g.line, &key_path).hint(
            "bind the provider's key, e.g. 'api_key: ${ANTHROPIC_API_KEY}', or write \
             'keyless: true' for a provider that takes none",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    fn driver(gateway: &str) -> String {
        base(&format!(
            "artifacts:\n  - name: murmur/driver-anthropic\n    version: \"0.8.0\"\n    runtime: driver\n{gateway}"
        ))
    }

    #[test]
    fn a_gateway_is_read_with_its_key_from_the_environment() {
        let s = Scratch::new();
        let m = s
            .ok(&driver(
                "    gateway:\n      endpoint: https://api.anthropic.com\n      api_key: ${ANTHROPIC_API_KEY}\n",
            ))
            .manifest;
        let a = &m.artifacts[0];
        assert_eq!(
            (a.name.as_str(), a.full_name.as_str()),
            ("driver-anthropic", "murmur/driver-anthropic")
        );
        let g = a.gateway.as_ref().unwrap();
        assert_eq!(
            (g.endpoint.as_str(), g.api_key.as_deref(), g.keyless),
            ("https://api.anthropic.com", Some("sk-test"), false)
        );
        let keyless = s
            .ok(&driver(
                "    gateway:\n      endpoint: http://127.0.0.1:11434\n      keyless: true\n",
            ))
            .manifest;
        assert!(keyless.artifacts[0].gateway.as_ref().unwrap().keyless);
    }

    #[test]
    fn a_gateway_without_a_key_or_with_both_is_refused() {
        let s = Scratch::new();
        let e = s.err(&driver(
            "    gateway:\n      endpoint: https://api.anthropic.com\n",
        ));
        assert_eq!(e.code, "E-MAN-001");
        assert!(
            e.message
                .ends_with("missing required field 'artifacts[0].gateway.api_key'"),
            "{e}"
        );
        let e = s.err(&driver(
            "    gateway:\n      endpoint: http://127.0.0.1:1\n      keyless: true\n      api_key: k\n",
        ));
        assert!(
            e.message.contains("either presents a key or is keyless"),
            "{e}"
        );
        let e = s.err(&driver(
            "    gateway:\n      endpoint: http://api.example.com\n      keyless: true\n",
        ));
        assert!(e.message.contains("'artifacts[0].gateway.endpoint'"), "{e}");
        let e = s.err(&base(
            "artifacts:\n  - name: t\n    version: \"1\"\n    gateway:\n      endpoint: https://x.example\n      keyless: true\n",
        ));
        assert!(e.message.contains("only a driver has a gateway"), "{e}");
    }
}
