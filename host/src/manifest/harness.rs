//! `inference.transport: process`: which drivers run a harness, the harness's program
//! and home, and what of the capsule's environment it may not be handed.

use super::fields::{Cx, Section, substitute};
use super::tree::show;
use super::{Capabilities, DriverRef, Inference, Result, Transport};

/// The built-in process drivers, for `inference.transport: process`.
pub const PROCESS_DRIVERS: &[&str] = &["claude-code", "codex"];

/// A built-in HTTP driver under `transport: process`, or a process driver under `http`.
pub(super) fn transport_fits(
    cx: &Cx,
    sec: &Section,
    transport: Transport,
    driver: &DriverRef,
) -> Result<()> {
    let DriverRef::Builtin { name, .. } = driver else {
        return Ok(());
    };
    let process = PROCESS_DRIVERS.contains(&name.as_str());
    let line = sec
        .field("driver")
        .map_or(sec.line.unwrap_or(0), |f| f.line);
    match (transport, process) {
        (Transport::Process, false) => Err(cx
            .invalid(
                line,
                "inference.driver",
                format!("'{name}' is an HTTP driver, but inference.transport is process"),
            )
            .hint("under transport: process name a process driver: claude-code, codex, or {artifact: NAME}")),
        (Transport::Http, true) => Err(cx
            .invalid(
                line,
                "inference.driver",
                format!("'{name}' drives a harness CLI, which runs under inference.transport: process"),
            )
            .hint("set 'inference.transport: process'")),
        _ => Ok(()),
    }
}

/// `inference.command`: the harness program, by absolute path or a bare name on PATH.
pub(super) fn command(cx: &Cx, sec: &Section, transport: Transport) -> Result<Option<String>> {
    let Some((command, line)) = sec.opt_str(cx, "command")? else {
        return Ok(None);
    };
    if transport != Transport::Process {
        let why = "only a harness run under inference.transport: process has a command";
        return Err(cx.invalid(line, "inference.command", why));
    }
    let command = substitute(cx, &command, line, "inference.command")?;
    if command.is_empty() || (command.contains('/') && !command.starts_with('/')) {
        let why = format!(
            "'{}' is neither an absolute path nor a bare name",
            show(&command)
        );
        let hint = "name the program by its absolute path, or by a name looked up on PATH";
        return Err(cx.invalid(line, "inference.command", why).hint(hint));
    }
    Ok(Some(command))
}

/// `inference.home`: where the harness keeps its login and sessions, relative to the
/// manifest directory.
pub(super) fn home(
    cx: &Cx,
    sec: &Section,
    transport: Transport,
) -> Result<Option<std::path::PathBuf>> {
    let Some((home, line)) = sec.opt_str(cx, "home")? else {
        return Ok(None);
    };
    if transport != Transport::Process {
        let why = "only a harness run under inference.transport: process has a home";
        return Err(cx.invalid(line, "inference.home", why));
    }
    let home = substitute(cx, &home, line, "inference.home")?;
    Ok(Some(cx.resolve(&home)))
}

/// Under `transport: process` the harness and every command it runs get the shell's
/// environment: a credential-shaped variable passed there (`capabilities.env.allow`)
/// would reach them all. The model key is `inference.api_key`, which only the harness
/// gets; anything else secret stays out.
pub(super) fn no_credentials_to_harness(
    cx: &mut Cx,
    top: &Section,
    inference: &Inference,
    capabilities: &Capabilities,
) -> Result<()> {
    if inference.transport != Transport::Process {
        return Ok(());
    }
    let Some(name) = capabilities.env_allow.iter().find(|n| credential_shaped(n)) else {
        return Ok(());
    };
    let line = top
        .sub(cx, "capabilities")?
        .sub(cx, "env")?
        .field("allow")
        .map_or(0, |f| f.line);
    let why = format!(
        "'{}' looks like a credential, and under inference.transport: process the harness and \
         every command it runs would get it",
        show(name)
    );
    Err(cx
        .invalid_as("E-CAP-016", line, "capabilities.env.allow", why)
        .hint("give the model key as 'inference.api_key: ${VAR}': only the harness gets it; leave other secrets out"))
}

/// A variable whose name says it holds a secret, or belongs to a model provider's CLI.
fn credential_shaped(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    const WORDS: &[&str] = &[
        "KEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "CREDENTIAL",
        "AUTH",
        "COOKIE",
    ];
    const PREFIXES: &[&str] = &[
        "ANTHROPIC_",
        "OPENAI_",
        "CLAUDE_",
        "CODEX_",
        "AWS_",
        "GOOGLE_",
    ];
    WORDS.iter().any(|w| upper.contains(w)) || PREFIXES.iter().any(|p| upper.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::super::testing::Scratch;

    fn process(lines: &str) -> String {
        format!(
            "name: t\nversion: \"1\"\ninference:\n  transport: process\n  driver: claude-code\n{lines}"
        )
    }

    #[test]
    fn a_harness_capsule_needs_no_model_and_names_its_program_and_home() {
        let s = Scratch::new();
        let m = s
            .ok(&process(
                "  command: /opt/claude/bin/claude\n  home: ./home\n",
            ))
            .manifest;
        assert_eq!(m.inference.model, "");
        assert_eq!(
            m.inference.command.as_deref(),
            Some("/opt/claude/bin/claude")
        );
        assert_eq!(m.inference.home, Some(s.0.join("home")));
        let m = s.ok(&process("  command: claude\n")).manifest;
        assert_eq!(m.inference.command.as_deref(), Some("claude"));
    }

    #[test]
    fn drivers_and_transports_must_match() {
        let s = Scratch::new();
        let e = s.err("name: t\nversion: \"1\"\ninference:\n  transport: process\n  driver: openai\n  model: m\n");
        assert!(e.message.contains("'openai' is an HTTP driver"), "{e}");
        assert!(
            e.hint
                .as_deref()
                .unwrap_or("")
                .contains("claude-code, codex"),
            "{e}"
        );
        let e = s.err("name: t\nversion: \"1\"\ninference:\n  driver: codex\n  model: m\n");
        assert!(e.message.contains("inference.transport: process"), "{e}");
        let e = s.err("name: t\nversion: \"1\"\ninference:\n  driver: openai\n  model: m\n  command: claude\n");
        assert!(e.message.contains("'inference.command'"), "{e}");
        let e = s.err(&process("  command: bin/claude\n"));
        assert!(
            e.message
                .contains("neither an absolute path nor a bare name"),
            "{e}"
        );
    }

    #[test]
    fn a_credential_passed_to_the_shell_is_refused_under_a_harness() {
        let s = Scratch::new();
        for name in [
            "ANTHROPIC_API_KEY",
            "GITHUB_TOKEN",
            "DB_PASSWORD",
            "OPENAI_ORG",
        ] {
            let yaml = format!(
                "{}capabilities:\n  env:\n    allow: [LANG, {name}]\n",
                process("")
            );
            let e = s.err(&yaml);
            assert_eq!(e.code, "E-CAP-016", "{name}: {e}");
            assert!(e.message.contains(name), "{e}");
            assert!(
                e.hint
                    .as_deref()
                    .unwrap_or("")
                    .contains("inference.api_key"),
                "{e}"
            );
        }
        s.ok(&format!(
            "{}capabilities:\n  env:\n    allow: [LANG, TZ]\n",
            process("")
        ));
        let http = "name: t\nversion: \"1\"\ninference:\n  driver: openai\n  model: m\n  \
                    endpoint: https://x.example\ncapabilities:\n  env:\n    allow: [GITHUB_TOKEN]\n";
        s.ok(http);
    }
}
