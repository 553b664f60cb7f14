//! Whether and where spans go: the OpenTelemetry standard environment first, then the
//! manifest's `observability` (under `mur run`) or `mur serve`'s flags.
//!
//! The environment names the same things for `mur` as for any instrumented program:
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is) or `OTEL_EXPORTER_OTLP_ENDPOINT`
//! (`/v1/traces` added), `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf`, the default, or
//! `http/json`), `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_EXPORTER_OTLP_TIMEOUT` (read by
//! the exporter), `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_BSP_*` for
//! the batches, `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` to switch it off,
//! and `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` to send prompt and reply
//! text.

use crate::error::Error;

/// How spans are encoded on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Protobuf,
    Json,
}

/// Export is on: where to, how, and what may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The full URL spans are posted to (`…/v1/traces`).
    pub endpoint: String,
    pub encoding: Encoding,
    /// Prompt and reply text (the task's text and answer, tools' arguments and
    /// results) go on the spans. Off unless the operator opts in.
    pub capture_content: bool,
}

/// What the manifest's `observability` says (upstream's `otel_endpoint`, plus ours).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observability {
    /// A collector's base URL; spans go to its `/v1/traces`.
    pub otel_endpoint: Option<String>,
    pub capture_content: bool,
}

/// Reads the process environment through `var`, so tests need not set the real one.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The real process environment.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The settings, from the environment, else from `fallback` (the manifest's endpoint,
/// or `mur serve --otel-endpoint`). `Ok(None)`: export is off. A warning about a value
/// the environment holds that `mur` does not use goes to `warn`.
pub fn resolve(
    env: Env<'_>,
    fallback: &Observability,
    warn: &mut dyn FnMut(String),
) -> Result<Option<Settings>, Error> {
    if env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    if let Some(exporter) = env("OTEL_TRACES_EXPORTER") {
        match exporter.trim() {
            "none" => return Ok(None),
            "otlp" => {}
            other => warn(format!(
                "OTEL_TRACES_EXPORTER={other} is not one mur has; spans go over OTLP/HTTP when \
                 an endpoint is set"
            )),
        }
    }
    let endpoint = match (
        env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        env("OTEL_EXPORTER_OTLP_ENDPOINT"),
        &fallback.otel_endpoint,
    ) {
        (Some(full), _, _) => checked(&full, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")?,
        (None, Some(base), _) => traces_url(&checked(&base, "OTEL_EXPORTER_OTLP_ENDPOINT")?),
        (None, None, Some(base)) => traces_url(&checked(base, "observability.otel_endpoint")?),
        (None, None, None) => return Ok(None),
    };
    let protocol =
        env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"));
    let encoding = match protocol.as_deref().map(str::trim) {
        None | Some("http/protobuf") => Encoding::Protobuf,
        Some("http/json") => Encoding::Json,
        Some(other) => {
            warn(format!(
                "OTEL_EXPORTER_OTLP_PROTOCOL={other} is not one mur speaks; spans go as \
                 http/protobuf (point the endpoint at the collector's OTLP/HTTP port, 4318)"
            ));
            Encoding::Protobuf
        }
    };
    let capture_content = env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
        .map(|v| v.trim().eq_ignore_ascii_case("true"))
        .unwrap_or(fallback.capture_content);
    Ok(Some(Settings {
        endpoint,
        encoding,
        capture_content,
    }))
}

/// An endpoint is an `http://` or `https://` URL with a host.
pub fn checked(url: &str, source: &str) -> Result<String, Error> {
    let url = url.trim();
    let parsed = url.parse::<http::Uri>().ok();
    let scheme_ok = parsed
        .as_ref()
        .and_then(|u| u.scheme_str())
        .is_some_and(|s| s == "http" || s == "https");
    let host_ok = parsed.as_ref().and_then(|u| u.host()).is_some();
    if scheme_ok && host_ok {
        return Ok(url.trim_end_matches('/').to_string());
    }
    Err(Error::new(
        "E-OTEL-001",
        format!(
            "{source} is not an http:// or https:// URL: {}",
            crate::escape::line(&crate::escape::cut(url, 200))
        ),
    )
    .hint("name the collector's OTLP/HTTP address, e.g. http://127.0.0.1:4318"))
}

/// A base endpoint's traces URL, as the OTLP exporter specification builds it; one that
/// already ends in `/v1/traces` is kept.
fn traces_url(base: &str) -> String {
    if base.ends_with("/v1/traces") {
        base.to_string()
    } else {
        format!("{base}/v1/traces")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve_with(
        vars: &[(&str, &str)],
        fallback: &Observability,
    ) -> (Result<Option<Settings>, Error>, Vec<String>) {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let env = move |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let mut warnings = Vec::new();
        let resolved = resolve(&env, fallback, &mut |w| warnings.push(w));
        (resolved, warnings)
    }

    #[test]
    fn the_environment_switches_export_on_and_wins() {
        let manifest = Observability {
            otel_endpoint: Some("http://manifest:4318".into()),
            capture_content: false,
        };
        let (s, _) = resolve_with(
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/")],
            &manifest,
        );
        let s = s.unwrap().unwrap();
        assert_eq!(s.endpoint, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(s.encoding, Encoding::Protobuf);
        assert!(!s.capture_content);
        let (s, _) = resolve_with(
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"),
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://b/custom"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
                ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "TRUE"),
            ],
            &manifest,
        );
        let s = s.unwrap().unwrap();
        assert_eq!(s.endpoint, "https://b/custom");
        assert_eq!(s.encoding, Encoding::Json);
        assert!(s.capture_content);
        let (s, _) = resolve_with(&[], &manifest);
        assert_eq!(
            s.unwrap().unwrap().endpoint,
            "http://manifest:4318/v1/traces"
        );
    }

    #[test]
    fn off_unless_an_endpoint_is_named_and_export_is_not_disabled() {
        assert_eq!(
            resolve_with(&[], &Observability::default()).0.unwrap(),
            None
        );
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            let (s, _) = resolve_with(
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:1"), off],
                &Observability::default(),
            );
            assert_eq!(s.unwrap(), None, "{off:?}");
        }
    }

    #[test]
    fn a_bad_endpoint_is_refused_and_a_foreign_protocol_warned_about() {
        let (s, _) = resolve_with(
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")],
            &Observability::default(),
        );
        let e = s.unwrap_err();
        assert_eq!(e.code, "E-OTEL-001");
        assert!(
            e.message
                .starts_with("OTEL_EXPORTER_OTLP_ENDPOINT is not an http:// or https:// URL"),
            "{}",
            e.message
        );
        let (s, warnings) = resolve_with(
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4317"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ],
            &Observability::default(),
        );
        assert_eq!(s.unwrap().unwrap().encoding, Encoding::Protobuf);
        assert!(
            warnings[0].starts_with("OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not one mur speaks"),
            "{warnings:?}"
        );
    }
}
