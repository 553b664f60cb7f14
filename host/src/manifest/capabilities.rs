//! `capabilities`: network, filesystem, shell, environment and limits.

use std::path::Path;

use super::fields::{Cx, Section};
use super::network::net_rules;
use super::tree::show;
use super::{Capabilities, Result};
use crate::confine::{Class, Network as ShellNetwork};
use crate::limits::Limits;

pub(super) fn capabilities(cx: &mut Cx, top: &Section) -> Result<Capabilities> {
    let sec = top.sub(cx, "capabilities")?;
    let net = sec.sub(cx, "network")?;
    let fs = sec.sub(cx, "filesystem")?;
    let shell = sec.sub(cx, "shell")?;
    let env = sec.sub(cx, "env")?;
    let limits = sec.sub(cx, "limits")?;
    shell.str_list(cx, "strip_env")?;
    shell.str_list(cx, "baseline_env")?;
    let d = Capabilities::default();
    Ok(Capabilities {
        network_allow: net_rules(cx, &net)?,
        filesystem_scope: scope(cx, &fs)?,
        shell_allow: shell_allow(cx, &shell)?,
        containment: sec.opt_enum(cx, "containment", Class::NAMES)?,
        shell_network: shell
            .opt_enum(cx, "network", ShellNetwork::NAMES)?
            .unwrap_or_default(),
        workdir_exec: fs.opt_bool(cx, "workdir_exec")?.unwrap_or(false),
        env_allow: env.str_list(cx, "allow")?,
        memory_bytes: limits
            .opt_uint(cx, "memory_bytes", 1, u64::MAX)?
            .unwrap_or(d.memory_bytes),
        deadline_seconds: limits
            .opt_uint(cx, "deadline_seconds", 1, u64::MAX)?
            .unwrap_or(d.deadline_seconds),
        limits: budget(cx, &limits)?,
    })
}

/// The size and call-count keys of `capabilities.limits`; each at least 1.
fn budget(cx: &Cx, limits: &Section) -> Result<Limits> {
    let d = Limits::default();
    let key = |name: &str, default: u64| -> Result<u64> {
        Ok(limits.opt_uint(cx, name, 1, u64::MAX)?.unwrap_or(default))
    };
    Ok(Limits {
        max_chunk_bytes: key("max_chunk_bytes", d.max_chunk_bytes)?,
        max_tool_result_bytes: key("max_tool_result_bytes", d.max_tool_result_bytes)?,
        max_driver_reply_bytes: key("max_driver_reply_bytes", d.max_driver_reply_bytes)?,
        max_tool_calls_per_reply: key("max_tool_calls_per_reply", d.max_tool_calls_per_reply)?,
        max_tool_calls_per_task: key("max_tool_calls_per_task", d.max_tool_calls_per_task)?,
        max_trace_bytes: key("max_trace_bytes", d.max_trace_bytes)?,
        workdir_bytes: key("workdir_bytes", d.workdir_bytes)?,
        max_records_bytes: key("max_records_bytes", d.max_records_bytes)?,
        max_answer_bytes: key("max_answer_bytes", d.max_answer_bytes)?,
        max_conversation_bytes: key("max_conversation_bytes", d.max_conversation_bytes)?,
        max_conversation_messages: key("max_conversation_messages", d.max_conversation_messages)?,
        max_conversation_blocks: key("max_conversation_blocks", d.max_conversation_blocks)?,
        max_hook_artifact_bytes: key("max_hook_artifact_bytes", d.max_hook_artifact_bytes)?,
        shell_cpu_seconds: key("shell_cpu_seconds", d.shell_cpu_seconds)?,
        shell_open_files: key("shell_open_files", d.shell_open_files)?,
        shell_processes: key("shell_processes", d.shell_processes)?,
        shell_concurrency: key("shell_concurrency", d.shell_concurrency)?,
    })
}

pub(super) fn scope(cx: &Cx, fs: &Section) -> Result<Option<String>> {
    let Some((scope, line)) = fs.opt_str(cx, "scope")? else {
        return Ok(None);
    };
    let has_drive = scope.as_bytes().get(1) == Some(&b':');
    let why = if scope.trim().is_empty() {
        Some("must not be empty")
    } else if scope.starts_with(['/', '\\']) || has_drive || Path::new(&scope).is_absolute() {
        Some("must be relative to the workdir, not absolute")
    } else if scope.split(['/', '\\']).any(|part| part == "..") {
        Some("must not contain '..'")
    } else {
        None
    };
    match why {
        None => Ok(Some(scope)),
        Some(why) => {
            let why = format!("'{}' {why}", show(&scope));
            let hint = "use a path inside the workdir, e.g. 'scope: memory'";
            Err(cx
                .invalid_as("E-CAP-002", line, "capabilities.filesystem.scope", why)
                .hint(hint))
        }
    }
}

fn shell_allow(cx: &Cx, shell: &Section) -> Result<Vec<String>> {
    let Some(items) = shell.opt_list(cx, "allow")? else {
        return Ok(Vec::new());
    };
    if items.is_empty() {
        let line = shell.field("allow").map_or(0, |f| f.line);
        let hint = "remove 'shell.allow' to grant no shell, or list binaries, e.g. [bash]";
        let why = "an empty list grants nothing";
        return Err(cx.invalid(line, "capabilities.shell.allow", why).hint(hint));
    }
    let mut names: Vec<String> = Vec::new();
    for item in &items {
        let name = item.string(cx)?;
        let bare = !name.is_empty()
            && name != "."
            && name != ".."
            && !name.contains(['/', '\\'])
            && !name.chars().any(|c| c.is_whitespace() || c.is_control());
        if !bare {
            let why = format!(
                "expected a bare binary name such as 'bash', found '{}'",
                show(&name)
            );
            let hint = "list the binary's name only; it is looked up on PATH";
            return Err(cx.invalid(item.line, &item.path, why).hint(hint));
        }
        if names.contains(&name) {
            return Err(cx.invalid(item.line, &item.path, format!("'{name}' is listed twice")));
        }
        names.push(name);
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::*;

    #[test]
    fn filesystem_scope_rules() {
        let s = Scratch::new();
        for good in ["memory", "./data/notes", "a/b.c"] {
            let yaml = caps(&format!("  filesystem:\n    scope: {good}\n"));
            let m = s.ok(&yaml).manifest;
            assert_eq!(m.capabilities.filesystem_scope.as_deref(), Some(good));
        }
        let bad = [
            ("/etc", "must be relative to the workdir, not absolute"),
            ("../up", "must not contain '..'"),
            ("a/../../b", "must not contain '..'"),
            ("C:\\\\x", "must be relative to the workdir, not absolute"),
            ("\"\"", "must not be empty"),
        ];
        for (scope, why) in bad {
            let e = s.err(&caps(&format!("  filesystem:\n    scope: {scope}\n")));
            assert_eq!(e.code, "E-CAP-002", "{scope}");
            let head = "murmur.yaml:8: invalid capabilities config for \
                        'capabilities.filesystem.scope': ";
            assert!(e.message.starts_with(head), "{e}");
            assert!(e.message.ends_with(why), "{scope}: {e}");
        }
    }

    #[test]
    fn shell_allow_rules() {
        let s = Scratch::new();
        let m = s
            .ok(&caps("  shell:\n    allow: [bash, python3]\n"))
            .manifest;
        assert_eq!(m.capabilities.shell_allow, vec!["bash", "python3"]);
        let e = s.err(&caps("  shell:\n    allow: [bash, /bin/sh]\n"));
        let want = "murmur.yaml:8: invalid capabilities config for \
                    'capabilities.shell.allow[1]': expected a bare binary name such as 'bash', \
                    found '/bin/sh'";
        assert_eq!(e.message, want);
        let e = s.err(&caps("  shell:\n    allow: []\n"));
        let want = "error[E-MAN-003]: murmur.yaml:8: invalid capabilities config for \
                    'capabilities.shell.allow': an empty list grants nothing\n  hint: remove \
                    'shell.allow' to grant no shell, or list binaries, e.g. [bash]";
        assert_eq!(text(&e), want);
    }

    #[test]
    fn other_capability_keys_typed() {
        let s = Scratch::new();
        let yaml = caps(
            "  env:\n    allow: [HOME]\n  limits:\n    memory_bytes: 1024\n    \
             deadline_seconds: 5\n  filesystem:\n    workdir_exec: true\n  shell:\n    \
             strip_env: ['AWS_*']\n",
        );
        let c = s.ok(&yaml).manifest.capabilities;
        assert_eq!(c.env_allow, vec!["HOME"]);
        assert_eq!((c.memory_bytes, c.deadline_seconds), (1024, 5));
        let e = s.err(&caps("  filesystem:\n    workdir_exec: 1\n"));
        assert!(
            e.message.ends_with("expected true or false, found '1'"),
            "{e}"
        );
        let e = s.err(&caps("  limits:\n    memory_bytes: -1\n"));
        assert!(e.message.ends_with("must be at least 1, found -1"), "{e}");
    }

    #[test]
    fn budget_limits_typed_with_defaults() {
        let s = Scratch::new();
        let c = s.ok(&caps("  env:\n    allow: []\n")).manifest.capabilities;
        assert_eq!(c.limits, Limits::default());
        assert_eq!(c.limits.max_tool_result_bytes, 4_194_304);
        assert_eq!(c.limits.max_tool_calls_per_reply, 64);
        let yaml = caps(
            "  limits:\n    max_chunk_bytes: 10\n    max_tool_result_bytes: 11\n    \
             max_driver_reply_bytes: 12\n    max_tool_calls_per_reply: 13\n    \
             max_tool_calls_per_task: 14\n    max_trace_bytes: 15\n    \
             workdir_bytes: 16\n",
        );
        let l = s.ok(&yaml).manifest.capabilities.limits;
        assert_eq!(
            [
                l.max_chunk_bytes,
                l.max_tool_result_bytes,
                l.max_driver_reply_bytes,
                l.max_tool_calls_per_reply,
                l.max_tool_calls_per_task,
                l.max_trace_bytes,
                l.workdir_bytes
            ],
            [10, 11, 12, 13, 14, 15, 16]
        );
        let yaml = caps(
            "  limits:\n    max_records_bytes: 20\n    max_answer_bytes: 21\n    \
             max_conversation_bytes: 22\n    max_conversation_messages: 23\n    \
             max_conversation_blocks: 24\n    max_hook_artifact_bytes: 25\n",
        );
        let l = s.ok(&yaml).manifest.capabilities.limits;
        assert_eq!(
            [
                l.max_records_bytes,
                l.max_answer_bytes,
                l.max_conversation_bytes,
                l.max_conversation_messages,
                l.max_conversation_blocks,
                l.max_hook_artifact_bytes
            ],
            [20, 21, 22, 23, 24, 25]
        );
        let e = s.err(&caps("  limits:\n    max_answer_bytes: 0\n"));
        assert!(e.message.ends_with("must be at least 1, found 0"), "{e}");
        let e = s.err(&caps("  limits:\n    max_tool_calls_per_reply: 0\n"));
        assert!(e.message.ends_with("must be at least 1, found 0"), "{e}");
    }
}
