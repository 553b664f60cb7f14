//! `network.authentication`: how a caller of the capsule's door proves it may call, in
//! upstream Murmur 0.8.0's form (`scheme: bearer`, optional `credentials`). This mur
//! mints one operator token, which holds every scope; declared credentials, which
//! upstream mints beside it with fewer scopes and which reach only the tasks they
//! started, are read and checked as upstream does, then refused, so that no manifest
//! believes its door hands out less than it does.

use super::Result;
use super::fields::{Cx, Section};
use super::tree::{Val, is_null, show};

/// How the door checks its callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `Authorization: Bearer <token>`, the token minted at launch.
    Bearer,
}

/// A declared `network.authentication`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Authentication {
    pub scheme: Scheme,
}

/// Upstream's scopes: the door's methods a token may be limited to, and its file plane.
const SCOPES: &[&str] = &[
    "SendMessage",
    "SendStreamingMessage",
    "murmur.WatchSession",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
    "murmur.StopSession",
    "resources/files",
];

/// Method names upstream retired, each with the scope that replaces it.
const RETIRED: &[(&str, &str)] = &[
    ("message/send", "SendMessage"),
    ("message/stream", "SendStreamingMessage"),
    ("tasks/get", "GetTask"),
    ("tasks/cancel", "CancelTask"),
    ("stream/watch", "murmur.WatchSession"),
    ("session/stop", "murmur.StopSession"),
];

/// The credential upstream always mints; no declared one may take its name.
const OPERATOR: &str = "operator";

const SCHEMES: &str = "bearer";
const SCHEME_PATH: &str = "network.authentication.scheme";
const CREDENTIALS_PATH: &str = "network.authentication.credentials";

/// `network.authentication` under `network`; absent or null is a public door.
pub(super) fn read(cx: &mut Cx, network: &Section) -> Result<Option<Authentication>> {
    let Some(field) = network.field("authentication") else {
        return Ok(None);
    };
    let sec = field.section(cx, "network.authentication")?;
    let scheme_hint = "write 'scheme: bearer': callers then present the token mur token \
                       prints, as Authorization: Bearer <token>";
    let scheme = match sec.field("scheme") {
        None => None,
        Some(f) => Some((f.string(cx)?, f.line)),
    };
    let scheme = match scheme {
        Some((written, _)) if written.trim() == "bearer" => Scheme::Bearer,
        Some((written, line)) if !written.trim().is_empty() => {
            let why = format!(
                "'{}' is not a door authentication scheme; the schemes are: {SCHEMES}",
                show(written.trim())
            );
            return Err(cx.invalid(line, SCHEME_PATH, why).hint(scheme_hint));
        }
        written => {
            let line = written.map_or(field.line, |(_, line)| line);
            let why = format!("is required; the schemes are: {SCHEMES}");
            return Err(cx.invalid(line, SCHEME_PATH, why).hint(scheme_hint));
        }
    };
    credentials(cx, &sec)?;
    Ok(Some(Authentication { scheme }))
}

/// `credentials`: none (absent, null or `{}`) is the operator token alone, which is
/// all this mur mints. Declared ones are checked as upstream checks them, so a typo is
/// named as such, and then refused.
fn credentials(cx: &Cx, sec: &Section) -> Result<()> {
    let Some(field) = sec.field("credentials") else {
        return Ok(());
    };
    let Val::Map(entries) = &field.node.val else {
        return Err(field.expected(cx, "a mapping of credential names to {scopes: [...]}"));
    };
    for entry in entries {
        let refuse = |why: String| cx.invalid(entry.line, CREDENTIALS_PATH, why);
        if entry.key == OPERATOR {
            return Err(refuse(format!(
                "'{OPERATOR}' is reserved: the runtime always mints the operator token, which holds every scope"
            )));
        }
        if !is_credential_name(&entry.key) {
            return Err(refuse(format!(
                "'{}' is not a credential name; a name is a lowercase letter followed by at most 31 lowercase letters, digits, '_' or '-'",
                show(&entry.key)
            )));
        }
        scopes(cx, &entry.key, entry.line, &entry.node)?;
    }
    let Some(first) = entries.first() else {
        return Ok(());
    };
    let why = format!(
        "declares '{}', but this mur mints one operator token, which holds every scope, and no credential beside it",
        show(&first.key)
    );
    Err(cx.invalid(field.line, CREDENTIALS_PATH, why).hint(
        "remove 'credentials' and hand out the operator token (mur token SESSION prints it), \
         or host the capsule under mur serve, which gives each capsule a token of its own",
    ))
}

/// `^[a-z][a-z0-9_-]{0,31}$`.
fn is_credential_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && name.len() <= 32
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// One credential's `scopes`: required, a non-empty list of upstream's scopes, each once.
fn scopes(cx: &Cx, name: &str, line: usize, node: &super::tree::Node) -> Result<()> {
    let path = format!("{CREDENTIALS_PATH}.{name}.scopes");
    let refuse = |line: usize, why: String| cx.invalid(line, &path, why);
    let value = match &node.val {
        Val::Map(entries) => entries.iter().find(|e| e.key == "scopes"),
        _ => None,
    };
    let Some(value) = value.filter(|e| !is_null(&e.node)) else {
        let why = "is required: a credential reaches only the scopes it lists";
        return Err(refuse(line, why.to_string()));
    };
    let Val::Seq(items) = &value.node.val else {
        return Err(refuse(value.line, "must be a list of scopes".to_string()));
    };
    if items.is_empty() {
        let why = "lists no scope; a credential must reach at least one";
        return Err(refuse(value.line, why.to_string()));
    }
    let mut seen: Vec<&str> = Vec::new();
    for item in items {
        let Val::Scalar { text, .. } = &item.val else {
            return Err(refuse(item.line, "must be a list of scopes".to_string()));
        };
        let scope = text.trim();
        if let Some((_, replacement)) = RETIRED.iter().find(|(old, _)| *old == scope) {
            let why = format!(
                "'{scope}' is a retired name of a door method, and the door answers only the names its card lists"
            );
            return Err(refuse(item.line, why).hint(format!("write '{replacement}'")));
        }
        if !SCOPES.contains(&scope) {
            let why = format!(
                "'{}' is not a door scope; the scopes are: {}",
                show(scope),
                SCOPES.join(", ")
            );
            return Err(refuse(item.line, why));
        }
        if seen.contains(&scope) {
            return Err(refuse(
                item.line,
                format!("'{scope}' is listed more than once"),
            ));
        }
        seen.push(scope);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn auth(block: &str) -> String {
        base(&format!("network:\n  authentication:\n{block}"))
    }

    #[test]
    fn bearer_alone_and_empty_credentials_are_the_operator_token() {
        let s = Scratch::new();
        let want = Some(Authentication {
            scheme: Scheme::Bearer,
        });
        for block in [
            "    scheme: bearer\n",
            "    scheme: \" bearer \"\n",
            "    scheme: bearer\n    credentials: {}\n",
            "    scheme: bearer\n    credentials:\n",
        ] {
            let loaded = s.ok(&auth(block));
            assert_eq!(loaded.manifest.network.authentication, want, "{block}");
            assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        }
        let public = s.ok(&base("network:\n  authentication:\n  internal_port: 9\n"));
        assert_eq!(public.manifest.network.authentication, None);
        assert_eq!(s.ok(BASE).manifest.network.authentication, None);
    }

    #[test]
    fn a_missing_or_unknown_scheme_is_refused_naming_bearer() {
        let s = Scratch::new();
        let e = s.err(&base("network:\n  authentication: {}\n"));
        assert_eq!(
            text(&e).lines().next().unwrap(),
            "error[E-MAN-003]: murmur.yaml:7: invalid network config for \
             'network.authentication.scheme': is required; the schemes are: bearer"
        );
        assert!(e.hint.unwrap().contains("scheme: bearer"));
        let e = s.err(&auth("    credentials: {}\n"));
        assert!(e.message.starts_with("murmur.yaml:7: "), "{e}");
        for scheme in ["Bearer", "mtls", "basic"] {
            let e = s.err(&auth(&format!("    scheme: {scheme}\n")));
            assert_eq!(
                e.message,
                format!(
                    "murmur.yaml:8: invalid network config for 'network.authentication.scheme': \
                     '{scheme}' is not a door authentication scheme; the schemes are: bearer"
                )
            );
        }
        let e = s.err(&base("network:\n  authentication: bearer\n"));
        assert!(
            e.message.ends_with("expected a mapping, found 'bearer'"),
            "{e}"
        );
    }

    #[test]
    fn declared_credentials_are_checked_then_refused() {
        let s = Scratch::new();
        let cred = |body: &str| auth(&format!("    scheme: bearer\n    credentials:\n{body}"));
        let e = s.err(&cred(
            "      watcher:\n        scopes: [GetTask, murmur.WatchSession]\n",
        ));
        assert_eq!(
            text(&e),
            "error[E-MAN-003]: murmur.yaml:9: invalid network config for \
             'network.authentication.credentials': declares 'watcher', but this mur mints one \
             operator token, which holds every scope, and no credential beside it\n  hint: \
             remove 'credentials' and hand out the operator token (mur token SESSION prints \
             it), or host the capsule under mur serve, which gives each capsule a token of its own"
        );
        let cases = [
            (
                "      operator:\n        scopes: [GetTask]\n",
                "'operator' is reserved",
            ),
            (
                "      Watcher:\n        scopes: [GetTask]\n",
                "'Watcher' is not a credential name",
            ),
            ("      w:\n        {}\n", "scopes': is required"),
            ("      w:\n        scopes: []\n", "lists no scope"),
            (
                "      w:\n        scopes: [tasks/list]\n",
                "'tasks/list' is not a door scope",
            ),
            (
                "      w:\n        scopes: [stream/watch]\n",
                "'stream/watch' is a retired name",
            ),
            (
                "      w:\n        scopes: [GetTask, GetTask]\n",
                "listed more than once",
            ),
        ];
        for (body, want) in cases {
            let e = s.err(&cred(body));
            assert_eq!(e.code, "E-MAN-003");
            assert!(e.message.contains(want), "{want}: {e}");
        }
        let long = format!("a{}", "b".repeat(31));
        let e = s.err(&cred(&format!(
            "      {long}:\n        scopes: [GetTask]\n"
        )));
        assert!(e.message.contains("mints one operator token"), "{e}");
    }
}
