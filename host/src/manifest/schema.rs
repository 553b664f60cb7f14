//! The keys each section knows, for the unknown-key warnings and their "did you mean".

use super::Warning;
use super::tree::{join, show};
use crate::error::Error;

#[rustfmt::skip]
const SCHEMA: &[(&str, &[&str])] = &[
    ("", &["name", "version", "description", "artifacts", "loop", "inference", "context", "lifecycle",
           "capabilities", "network", "trace", "exports", "peers", "mcp_servers",
           "registry", "runtime", "observability"]),
    ("observability", &["otel_endpoint", "capture_content"]),
    ("exports", &["peer_tasks"]),
    ("exports.peer_tasks", &["accept"]),
    ("peers[]", &["name", "card", "token_env"]),
    (super::mcp::SCHEMA, &["command", "args", "env", "install", "cwd", "url",
                           "bearer_token_env_var", "enabled_tools", "disabled_tools",
                           "startup_timeout_sec", "tool_timeout_sec"]),
    ("artifacts[]", &["name", "version", "runtime", "source", "local_source", "capabilities",
                      "description", "on_overflow", "binding", "execution_mode",
                      "commit_policy", "gateway"]),
    ("artifacts[].gateway", &["endpoint", "api_key", "keyless"]),
    ("inference", &["transport", "endpoint", "model", "api_key", "driver", "script", "command", "home", "max_turns",
                    "max_tokens", "system_prompt", "system_prompt_file", "temperature", "top_p",
                    "stream", "compaction", "retry", "timeouts", "max_session_tokens"]),
    ("inference.driver", &["artifact", "config"]),
    ("inference.compaction", &["threshold", "model", "system_prompt", "system_prompt_file",
                               "dump_summaries"]),
    ("inference.retry", &["max_attempts", "initial_backoff_ms", "max_backoff_ms",
                          "max_retries", "initial_delay_ms", "max_delay_ms"]),
    ("inference.timeouts", &["connect_secs", "read_secs"]),
    ("context", &["max_tokens", "seed_budget", "seed_overflow_margin"]),
    ("lifecycle", &["task_acceptance", "after_task", "queue_depth", "conversation",
                    "max_task_reopens", "shell_grace_secs", "input_timeout_secs",
                    "parallel_tools", "task_history"]),
    ("capabilities", &["network", "filesystem", "shell", "env", "limits", "containment"]),
    ("capabilities.network", &["allow"]),
    ("capabilities.filesystem", &["scope", "workdir_exec"]),
    ("capabilities.shell", &["allow", "strip_env", "baseline_env", "network"]),
    ("capabilities.env", &["allow"]),
    ("capabilities.limits", &["memory_bytes", "deadline_seconds", "max_chunk_bytes",
                              "max_tool_result_bytes", "max_driver_reply_bytes",
                              "max_tool_calls_per_reply", "max_tool_calls_per_task",
                              "max_trace_bytes", "workdir_bytes", "shell_cpu_seconds",
                              "shell_open_files", "shell_processes", "shell_concurrency",
                              "max_records_bytes", "max_answer_bytes",
                              "max_conversation_bytes", "max_conversation_messages",
                              "max_conversation_blocks", "max_hook_artifact_bytes"]),
    ("network", &["internal_port", "authentication"]),
    ("network.authentication", &["scheme", "credentials"]),
    ("trace", &["include_tool_output"]),
];

pub(super) fn known_keys(schema: &str) -> Option<&'static [&'static str]> {
    SCHEMA
        .iter()
        .find(|(s, _)| *s == schema)
        .map(|(_, keys)| *keys)
}

/// A known key close to `key`: same up to case or `-`/`_`, or within edit distance 2.
pub(super) fn suggest<'k>(key: &str, known: &[&'k str]) -> Option<&'k str> {
    let norm = |s: &str| s.to_lowercase().replace('-', "_");
    let key_len = key.chars().count();
    known
        .iter()
        .filter_map(|&k| {
            if norm(k) == norm(key) {
                return Some((0, k));
            }
            if k.chars().count().abs_diff(key_len) > 2 {
                return None;
            }
            let d = edit_distance(key, k);
            (d <= 2).then_some((d, k))
        })
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// A key sitting in the wrong section, e.g. `inference.max_task_reopens` (a v0.2.0 docs
/// spelling): the one other section that knows it, if exactly one does.
pub(super) fn misplaced(key: &str, schema: &str) -> Option<String> {
    let mut homes = SCHEMA
        .iter()
        // An entry's keys are no home for a misplaced one: `env` stays `capabilities.env`.
        .filter(|(s, keys)| {
            *s != schema && *s != "artifacts[]" && *s != super::mcp::SCHEMA && keys.contains(&key)
        });
    let (home, _) = homes.next()?;
    homes.next().is_none().then(|| join(home, key))
}

/// At most this many unknown keys are named in one error's hint.
const NAMED_AT_MOST: usize = 3;

/// `err` with the unknown keys that may have caused it named first in its hint: those whose
/// "did you mean" is a key the error names or a section holding one (`inferenc` for a missing
/// `inference.driver`); failing those, the top-level ones with a "did you mean", since a
/// misspelt section is ignored whole and anything may follow from that.
pub(super) fn name_unknown_keys(mut err: Error, warnings: &[Warning]) -> Error {
    let named = named_keys(&err);
    let guessed = || {
        warnings
            .iter()
            .filter_map(|w| w.guess.as_deref().map(|guess| (w, guess)))
    };
    let mut causes: Vec<(&Warning, &str)> = guessed()
        .filter(|(_, guess)| named.iter().any(|key| holds(guess, key)))
        .collect();
    if causes.is_empty() {
        causes = guessed()
            .filter(|(w, _)| !w.key.contains(['.', '[']))
            .collect();
    }
    let note = match causes.as_slice() {
        [] => return err,
        [(w, guess)] => format!(
            "the manifest has an unknown key '{}' at line {}: did you mean '{}'?",
            show(&w.key),
            w.line,
            show(guess)
        ),
        many => {
            let each = many.iter().take(NAMED_AT_MOST).map(|(w, guess)| {
                let (key, guess) = (show(&w.key), show(guess));
                format!("'{key}' at line {} (did you mean '{guess}'?)", w.line)
            });
            let mut each: Vec<String> = each.collect();
            if many.len() > NAMED_AT_MOST {
                each.push(format!("{} more", many.len() - NAMED_AT_MOST));
            }
            format!("the manifest has unknown keys {}", each.join(", "))
        }
    };
    err.hint = Some(match err.hint.take() {
        Some(hint) => format!("{note} Otherwise: {hint}"),
        None => note,
    });
    err
}

/// What an error names in quotes, each cut to its leading dotted key: `inference.driver`
/// from `'inference.driver' is not set` and from `'inference.driver: scripted'`.
fn named_keys(err: &Error) -> Vec<&str> {
    let key_char = |c: char| c.is_ascii_alphanumeric() || "_-.[]".contains(c);
    [Some(err.message.as_str()), err.hint.as_deref()]
        .into_iter()
        .flatten()
        // Every piece after a quote: an apostrophe in the prose does no harm here, as a
        // piece that is not a key matches no suggestion.
        .flat_map(|text| text.split('\'').skip(1))
        .map(|piece| &piece[..piece.find(|c| !key_char(c)).unwrap_or(piece.len())])
        .filter(|key| !key.is_empty())
        .collect()
}

/// Whether `outer` is `key` or a section (or list) holding it.
fn holds(outer: &str, key: &str) -> bool {
    key.strip_prefix(outer)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::super::Lifecycle;
    use super::super::testing::*;
    use super::*;

    #[test]
    fn unknown_keys_warn_with_did_you_mean_and_line() {
        let s = Scratch::new();
        let yaml = base(
            "lifecycle:\n  queu_depth: 3\n  task-acceptance: queue\n  Conversation: threaded\n\
             telemetry:\n  otel: true\ntrace:\n  include_tool_outputs: true\n",
        );
        let loaded = s.ok(&yaml);
        let keys: Vec<(usize, &str)> = loaded
            .warnings
            .iter()
            .map(|w| (w.line, w.key.as_str()))
            .collect();
        let want_keys = [
            (7, "lifecycle.queu_depth"),
            (8, "lifecycle.task-acceptance"),
            (9, "lifecycle.Conversation"),
            (10, "telemetry"),
            (13, "trace.include_tool_outputs"),
        ];
        assert_eq!(keys, want_keys);
        let w = "[capsule-runtime] warning[W-MAN-001]: murmur.yaml";
        let texts: Vec<&str> = loaded.warnings.iter().map(|w| w.text.as_str()).collect();
        let want_texts = [
            format!(
                "{w}:7: unknown key 'lifecycle.queu_depth' ignored (did you mean \
                 'lifecycle.queue_depth'?)"
            ),
            format!(
                "{w}:8: unknown key 'lifecycle.task-acceptance' ignored (did you mean \
                 'lifecycle.task_acceptance'?)"
            ),
            format!(
                "{w}:9: unknown key 'lifecycle.Conversation' ignored (did you mean \
                 'lifecycle.conversation'?)"
            ),
            format!("{w}:10: unknown key 'telemetry' ignored"),
            format!(
                "{w}:13: unknown key 'trace.include_tool_outputs' ignored (did you mean \
                 'trace.include_tool_output'?)"
            ),
        ];
        assert_eq!(texts, want_texts);
        // Unknown keys are ignored: the misspelt values did not apply.
        assert_eq!(loaded.manifest.lifecycle, Lifecycle::default());
    }

    #[test]
    fn misplaced_key_suggests_its_section() {
        let s = Scratch::new();
        let loaded = s.ok(&base("  max_task_reopens: 2\n"));
        let w = &loaded.warnings[0];
        assert_eq!((w.line, w.key.as_str()), (6, "inference.max_task_reopens"));
        assert!(
            w.text
                .ends_with("ignored (did you mean 'lifecycle.max_task_reopens'?)"),
            "{}",
            w.text
        );
    }

    #[test]
    fn unknown_keys_in_artifacts_and_driver_map() {
        let s = Scratch::new();
        s.file("d.wasm", "");
        let yaml = "name: t\nversion: \"1\"\nartifacts:\n  - name: d\n    runtme: driver\n    \
                    source: d.wasm\n";
        let e = s.err(yaml);
        // runtime defaulted to tool, so the driver lookup fails; the warning was still raised
        // first, but errors win. Check the warning on a manifest that loads.
        assert_eq!(e.code, "E-RUN-005");
        let yaml = format!("{yaml}inference:\n  driver: scripted\n  script: s.json\n");
        let loaded = s.ok(&yaml);
        let w = &loaded.warnings[0];
        assert_eq!((w.line, w.key.as_str()), (5, "artifacts[0].runtme"));
        assert!(
            w.text.ends_with("(did you mean 'artifacts[0].runtime'?)"),
            "{}",
            w.text
        );
    }

    #[test]
    fn suggestions() {
        let known = ["queue_depth", "task_acceptance", "after_task"];
        assert_eq!(suggest("queu_depth", &known), Some("queue_depth"));
        assert_eq!(suggest("QUEUE-DEPTH", &known), Some("queue_depth"));
        assert_eq!(suggest("after_tsak", &known), Some("after_task"));
        assert_eq!(suggest("completely_else", &known), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(
            misplaced("max_turns", "lifecycle").as_deref(),
            Some("inference.max_turns")
        );
        assert_eq!(misplaced("allow", ""), None);
    }
}
