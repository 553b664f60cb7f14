//! `inference`: the driver, the model server, the prompt and the retry, timeout and
//! compaction settings.

use std::time::Duration;

use serde_json::Value as Json;

use super::fields::{Cx, Field, Section, substitute};
use super::network::check_endpoint;
use super::schema::suggest;
use super::tree::{Located, Val, join, show};
use super::{
    Artifact, Compaction, DriverRef, Inference, Result, Retry, Runtime, Timeouts, Transport,
};
use crate::error::Error;

const BUILTIN_DRIVERS: &[&str] = &["scripted", "openai", "anthropic", "claude-code", "codex"];

pub(super) fn inference(cx: &mut Cx, top: &Section, artifacts: &[Artifact]) -> Result<Inference> {
    let sec = top.sub(cx, "inference")?;
    let transports = [("http", Transport::Http), ("process", Transport::Process)];
    let transport = sec.opt_enum(cx, "transport", &transports)?;
    let transport = transport.unwrap_or(Transport::Http);
    let driver = driver(cx, &sec, artifacts)?;
    super::harness::transport_fits(cx, &sec, transport, &driver)?;
    let temperature = sec.opt_f64(
        cx,
        "temperature",
        |v| (0.0..=2.0).contains(&v),
        "a number from 0 to 2",
    )?;
    let top_p = sec.opt_fraction(cx, "top_p")?;
    let gateway = gateway_of(&driver, artifacts);
    let inference = Inference {
        transport,
        endpoint: match endpoint(cx, &sec, &driver, transport, gateway.is_some())? {
            None => gateway.map(|g| g.endpoint.clone()),
            given => given,
        },
        model: model(cx, &sec, &driver, transport)?,
        api_key: api_key(cx, &sec)?.or_else(|| gateway.and_then(|g| g.api_key.clone())),
        max_turns: max_turns(cx, &sec)?,
        max_tokens: sec.opt_u32(cx, "max_tokens", 1)?.unwrap_or(8192),
        max_session_tokens: max_session_tokens(cx, &sec)?,
        system_prompt: system_prompt(cx, &sec)?,
        system_prompt_from_cli: false,
        temperature,
        top_p,
        stream: sec.opt_bool(cx, "stream")?.unwrap_or(true),
        retry: retry(cx, &sec)?,
        timeouts: timeouts(cx, &sec)?,
        compaction: compaction(cx, &sec)?,
        command: super::harness::command(cx, &sec, transport)?,
        home: super::harness::home(cx, &sec, transport)?,
        driver,
    };
    Ok(inference)
}

fn max_turns(cx: &Cx, sec: &Section) -> Result<u32> {
    let turns = sec.opt_u32(cx, "max_turns", 1);
    let hint = "max_turns caps the inference calls of one task; use 1 or more";
    Ok(turns.map_err(|e| e.hint(hint))?.unwrap_or(10))
}

/// `inference.max_session_tokens`: at least 1, since 0 would refuse every call.
fn max_session_tokens(cx: &Cx, sec: &Section) -> Result<Option<u64>> {
    let tokens = sec.opt_uint(cx, "max_session_tokens", 1, u64::MAX);
    let hint = "max_session_tokens caps the tokens one session's inference may use, input \
                and output together; use 1 or more, or leave it out for no ceiling";
    tokens.map_err(|e| e.hint(hint))
}

/// `inference.retry`: how often and how patiently 429, 5xx and refused connections
/// are retried. Upstream Murmur's keys (`max_retries`, `initial_delay_ms`,
/// `max_delay_ms`, with its bounds) are read beside ours; one setting written both ways
/// is refused.
fn retry(cx: &mut Cx, sec: &Section) -> Result<Retry> {
    let retry = sec.sub(cx, "retry")?;
    let default = Retry::default();
    let ms = |v: Option<u64>, d: Duration| v.map_or(d, Duration::from_millis);
    let max_attempts = retry.opt_u32(cx, "max_attempts", 1)?;
    let max_retries = retry.opt_uint(cx, "max_retries", 0, 20)?;
    let initial = retry.opt_uint(cx, "initial_backoff_ms", 0, 3_600_000)?;
    let initial_delay = retry.opt_uint(cx, "initial_delay_ms", 1, 60_000)?;
    let max = retry.opt_uint(cx, "max_backoff_ms", 0, 3_600_000)?;
    let max_delay = retry.opt_uint(cx, "max_delay_ms", 1, 3_600_000)?;
    let one_of = |cx: &Cx, ours: &str, upstreams: &str, a: bool, b: bool| -> Result<()> {
        match retry.field(upstreams).filter(|_| a && b) {
            Some(f) => Err(cx
                .invalid(
                    f.line,
                    &f.path,
                    format!("'{ours}' and '{upstreams}' say the same; write one"),
                )
                .hint(format!(
                    "keep '{upstreams}' (upstream Murmur's name) or '{ours}'"
                ))),
            None => Ok(()),
        }
    };
    one_of(
        cx,
        "max_attempts",
        "max_retries",
        max_attempts.is_some(),
        max_retries.is_some(),
    )?;
    one_of(
        cx,
        "initial_backoff_ms",
        "initial_delay_ms",
        initial.is_some(),
        initial_delay.is_some(),
    )?;
    one_of(
        cx,
        "max_backoff_ms",
        "max_delay_ms",
        max.is_some(),
        max_delay.is_some(),
    )?;
    let attempts = max_attempts.or(max_retries.map(|r| u32::try_from(r + 1).unwrap_or(21)));
    let initial = initial.or(initial_delay);
    let max = max.or(max_delay);
    if let (Some(first), Some(most), Some(f)) =
        (initial_delay, max_delay, retry.field("max_delay_ms"))
        && most < first
    {
        let why = format!("must be at least inference.retry.initial_delay_ms ({first})");
        return Err(cx.invalid(f.line, &f.path, why));
    }
    Ok(Retry {
        max_attempts: attempts.unwrap_or(default.max_attempts).min(100),
        initial_backoff: ms(initial, default.initial_backoff),
        max_backoff: ms(max, default.max_backoff),
    })
}

fn timeouts(cx: &mut Cx, sec: &Section) -> Result<Timeouts> {
    let timeouts = sec.sub(cx, "timeouts")?;
    let default = Timeouts::default();
    let secs = |v: Option<u64>, d: Duration| v.map_or(d, Duration::from_secs);
    let connect = timeouts.opt_uint(cx, "connect_secs", 1, 86_400)?;
    let read = timeouts.opt_uint(cx, "read_secs", 1, 86_400)?;
    Ok(Timeouts {
        connect: secs(connect, default.connect),
        read: secs(read, default.read),
    })
}

fn driver(cx: &mut Cx, sec: &Section, artifacts: &[Artifact]) -> Result<DriverRef> {
    let script = sec.opt_str(cx, "script")?;
    let Some(field) = sec.field("driver") else {
        return match script {
            Some(script) => scripted(cx, sec, Some(script)),
            None => Err(not_configured(
                cx,
                sec.line,
                "'inference.driver' is not set",
            )),
        };
    };
    let driver = if matches!(field.node.val, Val::Map(_)) {
        artifact_driver(cx, &field, artifacts)?
    } else {
        builtin_driver(cx, sec, &field, script.clone(), artifacts)?
    };
    match (&driver, script) {
        (DriverRef::Builtin { name, .. }, Some(_)) if name == "scripted" => Ok(driver),
        (_, Some((_, line))) => {
            let why = "only the built-in 'scripted' driver reads a script";
            let hint = "remove 'inference.script', or set 'inference.driver: scripted'";
            Err(cx.invalid(line, "inference.script", why).hint(hint))
        }
        (_, None) => Ok(driver),
    }
}

fn not_configured(cx: &Cx, line: Option<usize>, why: &str) -> Error {
    let message = format!("{}: driver not configured: {why}", cx.loc(line));
    let hint = "set 'inference.driver: {artifact: NAME}' naming an artifacts[] entry with \
                'runtime: driver', or 'inference.driver: scripted' with 'inference.script: PATH'";
    Error::new("E-RUN-005", message).hint(hint)
}

fn builtin_driver(
    cx: &Cx,
    sec: &Section,
    field: &Field,
    script: Option<Located>,
    artifacts: &[Artifact],
) -> Result<DriverRef> {
    let name = field.string(cx)?;
    match name.as_str() {
        "scripted" => scripted(cx, sec, script),
        "openai" | "anthropic" | "claude-code" | "codex" => {
            Ok(DriverRef::Builtin { name, script: None })
        }
        _ => {
            let why = format!(
                "expected one of scripted, openai, anthropic, claude-code, codex, or \
                 {{artifact: NAME}}, found '{}'",
                show(&name)
            );
            let err = cx.invalid(field.line, &field.path, why);
            let hint = if artifacts.iter().any(|a| a.name == name) {
                Some(format!(
                    "to use the artifact write 'driver: {{artifact: {name}}}'"
                ))
            } else {
                suggest(&name, BUILTIN_DRIVERS).map(|g| format!("did you mean '{g}'?"))
            };
            Err(match hint {
                Some(h) => err.hint(h),
                None => err,
            })
        }
    }
}

fn scripted(cx: &Cx, sec: &Section, script: Option<Located>) -> Result<DriverRef> {
    let Some((rel, line)) = script else {
        let hint = "the scripted driver replays a script: set 'inference.script: PATH', \
                    relative to the manifest directory";
        return Err(cx.missing(sec.line, "inference.script").hint(hint));
    };
    let abs = cx.resolve(&rel);
    if !abs.exists() {
        let what = format!("driver script not found at {}", abs.display());
        let hint = format!(
            "'inference.script' is resolved against {}",
            cx.dir.display()
        );
        return Err(cx.not_found(line, what).hint(hint));
    }
    if abs.is_dir() {
        let why = format!("{} is a directory, not a script file", abs.display());
        return Err(cx.invalid(line, "inference.script", why));
    }
    Ok(DriverRef::Builtin {
        name: "scripted".to_string(),
        script: Some(abs),
    })
}

fn artifact_driver(cx: &mut Cx, field: &Field, artifacts: &[Artifact]) -> Result<DriverRef> {
    let sec = field.section(cx, "inference.driver")?;
    let Some((name, line)) = sec.opt_str(cx, "artifact")? else {
        let why = "'inference.driver.artifact' is not set";
        return Err(not_configured(cx, sec.line, why));
    };
    let Some(found) = artifacts
        .iter()
        .find(|a| a.name == name || a.full_name == name)
    else {
        return Err(unknown_driver_artifact(cx, &name, line, artifacts));
    };
    let name = found.name.clone();
    if found.runtime != Runtime::Driver {
        let why = format!(
            "artifact '{name}' has runtime {}, not driver",
            found.runtime.as_str()
        );
        let hint = format!(
            "set 'runtime: driver' on the artifact at line {}",
            found.line
        );
        return Err(cx
            .invalid(line, "inference.driver.artifact", why)
            .hint(hint));
    }
    let config = match sec.field("config") {
        None => Json::Object(serde_json::Map::new()),
        Some(f) if matches!(f.node.val, Val::Map(_)) => f.json(cx)?,
        Some(f) => return Err(f.expected(cx, "a mapping")),
    };
    Ok(DriverRef::Artifact { name, config })
}

fn unknown_driver_artifact(cx: &Cx, name: &str, line: usize, artifacts: &[Artifact]) -> Error {
    let why = format!(
        "'inference.driver.artifact' names '{}', which no artifacts[] entry declares",
        show(name)
    );
    let err = not_configured(cx, Some(line), &why);
    let names: Vec<&str> = artifacts.iter().map(|a| a.name.as_str()).collect();
    match suggest(name, &names) {
        Some(g) => err.hint(format!("did you mean '{g}'?")),
        None => err.hint(format!(
            "add an artifacts[] entry with 'name: {}', 'runtime: driver' and 'source: PATH.wasm'",
            show(name)
        )),
    }
}

/// The `gateway` of the driver artifact `driver` names, if it has one.
fn gateway_of<'a>(driver: &DriverRef, artifacts: &'a [Artifact]) -> Option<&'a super::Gateway> {
    let DriverRef::Artifact { name, .. } = driver else {
        return None;
    };
    artifacts
        .iter()
        .find(|a| &a.name == name)
        .and_then(|a| a.gateway.as_ref())
}

fn endpoint(
    cx: &Cx,
    sec: &Section,
    driver: &DriverRef,
    transport: Transport,
    has_gateway: bool,
) -> Result<Option<String>> {
    let Some((url, line)) = sec.opt_str(cx, "endpoint")? else {
        let needs = transport == Transport::Http
            && matches!(driver, DriverRef::Artifact { .. })
            && !has_gateway;
        if needs {
            let hint = "the driver needs the model server's URL, e.g. \
                        'endpoint: http://127.0.0.1:11434'";
            return Err(cx.missing(sec.line, "inference.endpoint").hint(hint));
        }
        return Ok(None);
    };
    let url = substitute(cx, &url, line, "inference.endpoint")?;
    check_endpoint(&url).map_err(|why| {
        let hint = "use an https:// URL; plain http:// is allowed only to localhost, 127.x.x.x \
                    or [::1]";
        cx.invalid(line, "inference.endpoint", why).hint(hint)
    })?;
    Ok(Some(url))
}

fn model(cx: &Cx, sec: &Section, driver: &DriverRef, transport: Transport) -> Result<String> {
    if let Some((model, line)) = sec.opt_str(cx, "model")? {
        return substitute(cx, &model, line, "inference.model");
    }
    match driver {
        DriverRef::Builtin { name, .. } if name == "scripted" => Ok("scripted".to_string()),
        // A harness has a model of its own choosing.
        _ if transport == Transport::Process => Ok(String::new()),
        _ => {
            let hint = "set the model id the driver should request, e.g. 'model: qwen2.5-coder'";
            Err(cx.missing(sec.line, "inference.model").hint(hint))
        }
    }
}

fn api_key(cx: &Cx, sec: &Section) -> Result<Option<String>> {
    let Some((value, line)) = sec.opt_str(cx, "api_key")? else {
        return Ok(None);
    };
    substitute(cx, &value, line, "inference.api_key").map(Some)
}

/// At most one of `<prefix>system_prompt` / `<prefix>system_prompt_file`.
fn prompt_pair(cx: &Cx, sec: &Section) -> Result<(Option<Located>, Option<Located>)> {
    let inline = sec.opt_str(cx, "system_prompt")?;
    let file = sec.opt_str(cx, "system_prompt_file")?;
    if let (Some((_, a)), Some((_, b))) = (&inline, &file) {
        let path = join(&sec.path, "system_prompt_file");
        let why = format!(
            "set at most one of '{}' and '{path}'",
            join(&sec.path, "system_prompt")
        );
        return Err(cx
            .invalid(*a.max(b), &path, why)
            .hint("keep one prompt source"));
    }
    Ok((inline, file))
}

fn system_prompt(cx: &Cx, sec: &Section) -> Result<Option<String>> {
    match prompt_pair(cx, sec)? {
        // Replaced by the command line's: the file is not read.
        _ if cx.prompt_from_cli => Ok(None),
        (Some((text, _)), _) => Ok(Some(text.trim().to_string())),
        (None, Some((rel, line))) => read_prompt(cx, &rel, line).map(Some),
        (None, None) => Ok(None),
    }
}

fn read_prompt(cx: &Cx, rel: &str, line: usize) -> Result<String> {
    let abs = cx.resolve(rel);
    std::fs::read_to_string(&abs).map_err(|e| {
        let message = format!(
            "{}: system prompt file {} is unreadable: {e}",
            cx.loc(Some(line)),
            abs.display()
        );
        let hint = format!(
            "'inference.system_prompt_file' is resolved against {}",
            cx.dir.display()
        );
        Error::new("E-RUN-009", message).hint(hint)
    })
}

fn compaction(cx: &mut Cx, inference: &Section) -> Result<Compaction> {
    let sec = inference.sub(cx, "compaction")?;
    let threshold = sec.opt_f64(
        cx,
        "threshold",
        |v| v > 0.0 && v <= 1.0,
        "a number above 0 and at most 1",
    )?;
    let (prompt, file) = prompt_pair(cx, &sec)?;
    Ok(Compaction {
        threshold: threshold.unwrap_or(0.98),
        model: sec.opt_str(cx, "model")?.map(|(m, _)| m),
        system_prompt: prompt.map(|(p, _)| p),
        system_prompt_file: file.map(|(f, _)| cx.resolve(&f)),
        dump_summaries: sec.opt_bool(cx, "dump_summaries")?.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::*;

    #[test]
    fn retry_timeouts_and_stream_are_read() {
        let s = Scratch::new();
        let m = s.ok(&base(""));
        let inf = &m.manifest.inference;
        assert_eq!(
            (inf.retry, inf.timeouts),
            (Retry::default(), Timeouts::default())
        );
        assert!(inf.stream);
        let m = s.ok(&base(
            "  stream: false\n  retry:\n    max_attempts: 5\n    initial_backoff_ms: 0\n    \
             max_backoff_ms: 2000\n  timeouts: {connect_secs: 3, read_secs: 45}\n",
        ));
        let inf = &m.manifest.inference;
        assert!(!inf.stream);
        assert_eq!(
            inf.retry,
            Retry {
                max_attempts: 5,
                initial_backoff: Duration::ZERO,
                max_backoff: Duration::from_secs(2),
            }
        );
        assert_eq!(
            inf.timeouts,
            Timeouts {
                connect: Duration::from_secs(3),
                read: Duration::from_secs(45),
            }
        );
        let e = s.err(&base("  retry: {max_attempts: 0}\n"));
        assert!(e.message.contains("'inference.retry.max_attempts'"), "{e}");
        // Upstream Murmur's keys, with its bounds.
        let m = s.ok(&base(
            "  retry:\n    max_retries: 2\n    initial_delay_ms: 10\n    max_delay_ms: 2000\n",
        ));
        assert_eq!(
            m.manifest.inference.retry,
            Retry {
                max_attempts: 3,
                initial_backoff: Duration::from_millis(10),
                max_backoff: Duration::from_secs(2),
            }
        );
        assert!(m.warnings.is_empty(), "{:?}", m.warnings);
        for (yaml, key) in [
            ("{max_retries: 21}", "'inference.retry.max_retries'"),
            (
                "{initial_delay_ms: 0}",
                "'inference.retry.initial_delay_ms'",
            ),
            (
                "{initial_delay_ms: 5000, max_delay_ms: 1000}",
                "'inference.retry.max_delay_ms'",
            ),
            (
                "{max_retries: 2, max_attempts: 3}",
                "'inference.retry.max_retries'",
            ),
        ] {
            let e = s.err(&base(&format!("  retry: {yaml}\n")));
            assert!(e.message.contains(key), "{yaml}: {e}");
        }
        let e = s.err(&base("  timeouts: {read_secs: 0}\n"));
        assert!(e.message.contains("'inference.timeouts.read_secs'"), "{e}");
    }

    #[test]
    fn compaction_threshold_range() {
        let s = Scratch::new();
        let e = s.err(&base("  compaction:\n    threshold: 0\n"));
        assert!(
            e.message.contains("'inference.compaction.threshold'"),
            "{e}"
        );
        let yaml =
            base("  compaction:\n    threshold: 1\n    dump_summaries: true\n    model: m\n");
        let c = s.ok(&yaml).manifest.inference.compaction;
        assert_eq!(
            (c.threshold, c.dump_summaries, c.model.as_deref()),
            (1.0, true, Some("m"))
        );
    }

    #[test]
    fn driver_config_is_json_and_keys_are_free() {
        let s = Scratch::new();
        s.file("d.wasm", "");
        let yaml = "name: t\nversion: \"1\"\nartifacts:\n  - name: d\n    runtime: driver\n    \
                    source: d.wasm\ninference:\n  endpoint: https://x.example\n  model: m\n  \
                    driver:\n    artifact: d\n    confg: 1\n    config:\n      n: 3\n      f: 1.5\n      \
                    s: \"07\"\n      b: false\n      z: ~\n      l: [a, 2]\n      nest: {k: v}\n";
        let loaded = s.ok(yaml);
        let config = serde_json::json!({
            "n": 3, "f": 1.5, "s": "07", "b": false, "z": null, "l": ["a", 2], "nest": {"k": "v"}
        });
        let want = DriverRef::Artifact {
            name: "d".into(),
            config,
        };
        assert_eq!(loaded.manifest.inference.driver, want);
        let w = &loaded.warnings[0];
        assert_eq!(w.key, "inference.driver.confg");
        assert!(
            w.text
                .ends_with("(did you mean 'inference.driver.config'?)")
        );
    }

    #[test]
    fn endpoint_required_for_artifact_driver() {
        let s = Scratch::new();
        s.file("d.wasm", "");
        let yaml = "name: t\nversion: \"1\"\nartifacts:\n  - {name: d, runtime: driver, source: \
                    d.wasm}\ninference:\n  model: m\n  driver: {artifact: d}\n";
        let e = s.err(yaml);
        assert_eq!(
            e.message,
            "murmur.yaml:5: missing required field 'inference.endpoint'"
        );
        let m = s
            .ok(&format!("{yaml}  endpoint: https://x.example\n"))
            .manifest;
        let want = DriverRef::Artifact {
            name: "d".into(),
            config: serde_json::json!({}),
        };
        assert_eq!(m.inference.driver, want);
    }

    #[test]
    fn driver_not_configured() {
        let s = Scratch::new();
        let e = s.err("name: t\nversion: \"1\"\ninference:\n  model: m\n");
        let want = "error[E-RUN-005]: murmur.yaml:3: driver not configured: 'inference.driver' \
                    is not set\n  hint: set 'inference.driver: {artifact: NAME}' naming an \
                    artifacts[] entry with 'runtime: driver', or 'inference.driver: scripted' \
                    with 'inference.script: PATH'";
        assert_eq!(text(&e), want);
        let e = s.err("name: t\nversion: \"1\"\n");
        assert_eq!(e.code, "E-RUN-005");
        assert!(
            e.message.starts_with("murmur.yaml: driver not configured"),
            "{e}"
        );
    }

    #[test]
    fn script_alone_selects_scripted() {
        let s = Scratch::new();
        let m = s
            .ok("name: t\nversion: \"1\"\ninference:\n  script: s.json\n")
            .manifest;
        assert!(
            matches!(m.inference.driver, DriverRef::Builtin { ref name, .. } if name == "scripted")
        );
    }

    #[test]
    fn driver_artifact_lookup() {
        let s = Scratch::new();
        s.file("t.wasm", "");
        let head = "name: t\nversion: \"1\"\nartifacts:\n  - name: drv\n    source: t.wasm\n\
                    inference:\n  endpoint: https://x.example\n  model: m\n";
        let e = s.err(&format!("{head}  driver: {{artifact: dvr}}\n"));
        let want = "error[E-RUN-005]: murmur.yaml:9: driver not configured: \
                    'inference.driver.artifact' names 'dvr', which no artifacts[] entry \
                    declares\n  hint: did you mean 'drv'?";
        assert_eq!(text(&e), want);
        let e = s.err(&format!("{head}  driver:\n    artifact: drv\n"));
        let want = "error[E-MAN-003]: murmur.yaml:10: invalid inference config for \
                    'inference.driver.artifact': artifact 'drv' has runtime tool, not driver\n  \
                    hint: set 'runtime: driver' on the artifact at line 4";
        assert_eq!(text(&e), want);
        let e = s.err(&format!("{head}  driver: {{config: {{}}}}\n"));
        assert_eq!(e.code, "E-RUN-005");
        let e = s.err(&format!("{head}  driver: drv\n"));
        assert_eq!(e.code, "E-MAN-003");
        let hint = "to use the artifact write 'driver: {artifact: drv}'";
        assert_eq!(e.hint.as_deref(), Some(hint));
    }

    #[test]
    fn builtin_driver_names() {
        let s = Scratch::new();
        let yaml = "name: t\nversion: \"1\"\ninference:\n  model: gpt\n  driver: openai\n";
        let m = s.ok(yaml).manifest;
        let want = DriverRef::Builtin {
            name: "openai".into(),
            script: None,
        };
        assert_eq!(m.inference.driver, want);
        let e = s.err("name: t\nversion: \"1\"\ninference:\n  model: m\n  driver: opneai\n");
        assert_eq!(e.hint.as_deref(), Some("did you mean 'openai'?"));
        let e = s.err(&format!("{yaml}  script: s.json\n"));
        assert!(
            e.message
                .starts_with("murmur.yaml:6: invalid inference config for 'inference.script'")
        );
    }

    #[test]
    fn scripted_driver_needs_an_existing_script() {
        let s = Scratch::new();
        let e = s.err("name: t\nversion: \"1\"\ninference:\n  driver: scripted\n");
        assert_eq!(
            e.message,
            "murmur.yaml:3: missing required field 'inference.script'"
        );
        assert_eq!(e.code, "E-MAN-001");
        let e = s.err(
            "name: t\nversion: \"1\"\ninference:\n  driver: scripted\n  script: x/gone.json\n",
        );
        let want = format!(
            "error[E-IO-001]: murmur.yaml:5: driver script not found at {}\n  hint: \
             'inference.script' is resolved against {}",
            s.path("x/gone.json"),
            s.0.display()
        );
        assert_eq!(text(&e), want);
    }

    #[test]
    fn system_prompt_sources() {
        let s = Scratch::new();
        let m = s
            .ok(&base("  system_prompt: \"  Be brief.  \\n\"\n"))
            .manifest;
        assert_eq!(m.inference.system_prompt.as_deref(), Some("Be brief."));
        s.file("prompt.md", "  Verbatim.\n");
        let m = s.ok(&base("  system_prompt_file: prompt.md\n")).manifest;
        assert_eq!(m.inference.system_prompt.as_deref(), Some("  Verbatim.\n"));
        let e = s.err(&base(
            "  system_prompt: a\n  system_prompt_file: prompt.md\n",
        ));
        let want = "error[E-MAN-003]: murmur.yaml:7: invalid inference config for \
                    'inference.system_prompt_file': set at most one of 'inference.system_prompt' \
                    and 'inference.system_prompt_file'\n  hint: keep one prompt source";
        assert_eq!(text(&e), want);
        let e = s.err(&base("  system_prompt_file: nope.md\n"));
        assert_eq!(e.code, "E-RUN-009");
        let head = format!(
            "murmur.yaml:6: system prompt file {} is unreadable: ",
            s.path("nope.md")
        );
        assert!(e.message.starts_with(&head), "{e}");
    }
}
