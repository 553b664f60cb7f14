//! A hook artifact's contract: its binding, execution mode and commit policy, checked
//! against each other as upstream checks them, and its async queue's overflow rule.

use super::capabilities::scope;
use super::fields::{Cx, Section};
use super::tree::join;
use super::{Binding, CommitPolicy, ExecutionMode, HookContract, OnOverflow, Result, Runtime};

const BINDINGS: &[(&str, Binding)] = &[
    ("on-stage", Binding::Stage),
    ("on-session-start", Binding::SessionStart),
    ("on-task-start", Binding::TaskStart),
    ("on-inference", Binding::Inference),
    ("on-tool-call", Binding::ToolCall),
    ("on-shell", Binding::Shell),
    ("on-compaction", Binding::Compaction),
    ("on-task-end", Binding::TaskEnd),
    ("on-session-end", Binding::SessionEnd),
];

const POLICIES: &[(&str, CommitPolicy)] = &[
    ("none", CommitPolicy::None),
    ("write-manifests", CommitPolicy::WriteManifests),
    ("replace-context", CommitPolicy::ReplaceContext),
    ("reopen-task", CommitPolicy::ReopenTask),
    ("seed-context", CommitPolicy::SeedContext),
    ("deny", CommitPolicy::Deny),
];

impl Binding {
    pub fn as_str(self) -> &'static str {
        BINDINGS
            .iter()
            .find(|(_, b)| *b == self)
            .map_or("", |(name, _)| name)
    }
}

impl CommitPolicy {
    pub fn as_str(self) -> &'static str {
        POLICIES
            .iter()
            .find(|(_, p)| *p == self)
            .map_or("", |(name, _)| name)
    }

    /// The binding a policy commits at; `None` for `none`.
    fn binding(self) -> Option<Binding> {
        match self {
            CommitPolicy::None => None,
            CommitPolicy::WriteManifests => Some(Binding::Stage),
            CommitPolicy::ReplaceContext => Some(Binding::Compaction),
            CommitPolicy::ReopenTask => Some(Binding::TaskEnd),
            CommitPolicy::SeedContext => Some(Binding::TaskStart),
            CommitPolicy::Deny => Some(Binding::ToolCall),
        }
    }
}

const HOOK_KEYS: &[&str] = &["binding", "execution_mode", "commit_policy"];

/// A hook's binding, mode and policy, checked against each other as upstream checks
/// them, so a mismatch fails before anything is compiled.
pub(super) fn hook_contract(cx: &mut Cx, sec: &Section) -> Result<HookContract> {
    let binding = sec.opt_enum(cx, "binding", BINDINGS)?;
    let modes = [
        ("blocking", ExecutionMode::Blocking),
        ("async", ExecutionMode::Async),
    ];
    let mode = sec
        .opt_enum(cx, "execution_mode", &modes)?
        .unwrap_or(ExecutionMode::Blocking);
    let policy = sec
        .opt_enum(cx, "commit_policy", POLICIES)?
        .unwrap_or(CommitPolicy::None);
    let line = |key: &str| sec.field(key).map_or(sec.line.unwrap_or(0), |f| f.line);
    let bad = |key: &str, why: String, hint: &str| {
        cx.invalid(line(key), &join(&sec.path, key), why)
            .hint(hint.to_string())
    };
    if mode == ExecutionMode::Async && policy != CommitPolicy::None {
        return Err(bad(
            "commit_policy",
            format!("an async hook commits nothing, found '{}'", policy.as_str()),
            "use 'execution_mode: blocking', or 'commit_policy: none'",
        ));
    }
    if mode == ExecutionMode::Async && binding == Some(Binding::Stage) {
        return Err(bad(
            "execution_mode",
            "on-stage hooks must be blocking".into(),
            "use 'execution_mode: blocking'",
        ));
    }
    policy_fits_binding(policy, binding).map_err(|(why, hint)| bad("commit_policy", why, &hint))?;
    let caps = sec.sub(cx, "capabilities")?;
    let fs = caps.sub(cx, "filesystem")?;
    let limits = caps.sub(cx, "limits")?;
    Ok(HookContract {
        binding,
        mode,
        policy,
        scope: scope(cx, &fs)?,
        deadline_seconds: limits
            .opt_uint(cx, "deadline_seconds", 1, 86_400)?
            .unwrap_or(30),
    })
}

/// Which binding each commit policy belongs to (`CommitPolicy::binding`): a policy
/// commits only there, except `deny`, which also commits at `on-shell`; `none` fits any.
fn policy_fits_binding(
    policy: CommitPolicy,
    binding: Option<Binding>,
) -> std::result::Result<(), (String, String)> {
    let Some(needs) = policy.binding() else {
        return Ok(());
    };
    match binding {
        None if policy == CommitPolicy::Deny => Err((
            "'deny' needs an explicit binding".into(),
            "set 'binding: on-tool-call' or 'binding: on-shell'".into(),
        )),
        None => Ok(()),
        Some(Binding::Shell) if policy == CommitPolicy::Deny => Ok(()),
        Some(b) if b == needs => Ok(()),
        Some(b) => Err((
            format!("'{}' cannot commit at {}", policy.as_str(), b.as_str()),
            format!(
                "'{}' belongs to binding {}; at {} use 'commit_policy: none'",
                policy.as_str(),
                needs.as_str(),
                b.as_str()
            ),
        )),
    }
}

pub(super) fn no_hook_keys(cx: &Cx, sec: &Section, runtime: Runtime) -> Result<()> {
    for key in HOOK_KEYS {
        if let Some(field) = sec.field(key) {
            let why = format!("only hooks have a {key}; this is a {}", runtime.as_str());
            return Err(cx
                .invalid(field.line, &field.path, why)
                .hint(format!("remove '{key}', or set 'runtime: hook'")));
        }
    }
    Ok(())
}

pub(super) fn on_overflow(cx: &Cx, sec: &Section, runtime: Runtime) -> Result<OnOverflow> {
    let options = [("drop", OnOverflow::Drop), ("block", OnOverflow::Block)];
    let Some(value) = sec.opt_enum(cx, "on_overflow", &options)? else {
        return Ok(OnOverflow::Drop);
    };
    if runtime != Runtime::Hook {
        let line = sec.field("on_overflow").map_or(0, |f| f.line);
        let path = join(&sec.path, "on_overflow");
        let why = format!(
            "only hooks have an async queue; this is a {}",
            runtime.as_str()
        );
        return Err(cx
            .invalid(line, &path, why)
            .hint("remove 'on_overflow' from this entry"));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::*;

    #[test]
    fn a_hooks_contract_is_read_with_upstreams_defaults() {
        let s = Scratch::new();
        s.file("h.wasm", "");
        let m = s.ok(&hook_entry("")).manifest;
        let contract = m.artifacts[0].hook.clone().expect("a hook has a contract");
        assert_eq!(
            contract,
            HookContract {
                binding: None,
                mode: ExecutionMode::Blocking,
                policy: CommitPolicy::None,
                scope: None,
                deadline_seconds: 30,
            }
        );
        let m = s
            .ok(&hook_entry(
                "    binding: on-shell\n    commit_policy: deny\n    capabilities:\n      \
                 filesystem: {scope: policy}\n      limits: {deadline_seconds: 5}\n",
            ))
            .manifest;
        let contract = m.artifacts[0].hook.clone().expect("contract");
        assert_eq!(contract.binding, Some(Binding::Shell));
        assert_eq!(contract.policy, CommitPolicy::Deny);
        assert_eq!(contract.scope.as_deref(), Some("policy"));
        assert_eq!(contract.deadline_seconds, 5);
    }

    #[test]
    fn a_policy_that_does_not_fit_its_binding_or_mode_is_refused() {
        let s = Scratch::new();
        s.file("h.wasm", "");
        let cases = [
            (
                "    binding: on-task-start\n    commit_policy: reopen-task\n",
                "'reopen-task' cannot commit at on-task-start",
            ),
            (
                "    execution_mode: async\n    commit_policy: seed-context\n",
                "an async hook commits nothing, found 'seed-context'",
            ),
            (
                "    commit_policy: deny\n",
                "'deny' needs an explicit binding",
            ),
            (
                "    binding: on-stage\n    execution_mode: async\n",
                "on-stage hooks must be blocking",
            ),
            (
                "    binding: on-tool-cal\n",
                "expected one of on-stage, on-session-start",
            ),
        ];
        for (extra, why) in cases {
            let e = s.err(&hook_entry(extra));
            assert_eq!(e.code, "E-MAN-003", "{extra}");
            assert!(e.message.contains(why), "{extra}: {e}");
        }
        let e = s.err(&hook_entry(
            "    capabilities:\n      filesystem: {scope: ../escape}\n",
        ));
        assert_eq!(e.code, "E-CAP-002");
    }

    #[test]
    fn hook_keys_on_other_artifacts_are_refused() {
        let s = Scratch::new();
        s.file("t.wasm", "");
        let yaml = format!(
            "{BASE}artifacts:\n  - name: t\n    source: t.wasm\n    binding: on-task-end\n"
        );
        let e = s.err(&yaml);
        assert!(
            e.message
                .contains("only hooks have a binding; this is a tool"),
            "{e}"
        );
    }
}
