//! Upstream's hook world, `murmur:hook/lifecycle@0.9.0`, as an ordinary hook: each of
//! our events calls the matching upstream function, and its `hook-output` becomes our
//! verdict, which the host then commits or refuses per `commit_policy` exactly as for
//! its own hooks. The WIT is `wit/upstream/hook/hook.wit`.
//!
//! | Ours (`event`) | Upstream | Filled as |
//! |---|---|---|
//! | `stage` | `on-stage` | `shell-allow` unchanged |
//! | `session-start` | `on-session-start` | `capabilities`: the names of the granted categories (the keys of our JSON object whose grant is not empty: `filesystem` always, `network` and `shell` when they allow something) |
//! | `task-start` | `on-task-start` | unchanged; `origin` and `text` have no field there |
//! | `inference` | `on-inference` | `output`: the reply's text; `prompt`, `tools`: `none` (the host does not keep them as one string) |
//! | `tool-call` | `on-tool-call` | `input-bytes`: the input's length |
//! | `shell` | `on-shell` | `argv`: `shell::argv` of the command (as the host passes it); `script`, `recipe`: `none`; outcome's `exit-code` -1 when there was none, `stdout`/`stderr` empty |
//! | `compaction` | `on-compaction` | `messages` flattened (`flat`) |
//! | `task-end` | `on-task-end` | `result` and `attempt` have no field there |
//! | `session-end` | `on-session-end` | unchanged |
//!
//! Every `hook-output` arm has a verdict of the same name; flat messages come back as
//! one text block each, and a role outside `user`/`assistant`/`tool` is the hook's
//! error. In `replace-context`, a message returned exactly as it was sent is the
//! original, so tool calls and results a hook keeps survive the round trip.

use wasmtime::Store;

use crate::bindings::message::{Block, Message, Role};
use crate::bindings::upstream_hook::Hook as Bindings;
use crate::bindings::upstream_hook::exports::murmur::hook::lifecycle as up;
use crate::hooks::{Event, ManifestFile, Verdict};

/// One event through an upstream hook. The outer `Err` is a trap (the host words it);
/// the inner one the hook's own failure.
pub async fn call<T: Send>(
    bindings: &Bindings,
    store: &mut Store<T>,
    event: &Event,
) -> wasmtime::Result<Result<Verdict, String>> {
    let hook = bindings.murmur_hook_lifecycle();
    let mut sent = Vec::new();
    let output = match event {
        Event::Stage(e) => {
            let event = up::StageEvent {
                shell_allow: e.shell_allow.clone(),
            };
            hook.call_on_stage(store, &event).await?
        }
        Event::SessionStart(e) => {
            let ctx = up::SessionContext {
                capsule_name: e.capsule_name.clone(),
                capsule_version: e.capsule_version.clone(),
                session_id: e.session_id.clone(),
                model: e.model.clone(),
                capabilities: categories(&e.capabilities),
            };
            hook.call_on_session_start(store, &ctx).await?
        }
        Event::TaskStart(e) => {
            let event = up::TaskStartEvent {
                task_id: e.task_id.clone(),
                context_id: e.context_id.clone(),
                source: e.source.clone(),
                input_bytes: e.input_bytes,
                budget_tokens: e.budget_tokens,
                context_window: e.context_window,
                prior_tokens: e.prior_tokens,
            };
            hook.call_on_task_start(store, &event).await?
        }
        Event::Inference(e) => {
            let event = up::InferenceEvent {
                turn: e.turn,
                input_tokens: e.input_tokens,
                output_tokens: e.output_tokens,
                decision: e.decision.clone(),
                tool_name: e.tool_name.clone(),
                prompt: None,
                output: Some(e.output.clone()),
                tools: None,
            };
            hook.call_on_inference(store, &event).await?
        }
        Event::ToolCall(e) => {
            let event = up::ToolEvent {
                turn: e.turn,
                tool_name: e.tool_name.clone(),
                input_bytes: e.input.len() as u64,
                input: e.input.clone(),
                outcome: e.outcome.as_ref().map(|o| up::ToolOutcome {
                    output_bytes: o.output_bytes,
                    duration_ms: o.duration_ms,
                    status: o.status.clone(),
                }),
            };
            hook.call_on_tool_call(store, &event).await?
        }
        Event::Shell(e) => {
            let event = up::ShellEvent {
                turn: e.turn,
                binary: e.binary.clone(),
                command: e.command.clone(),
                argv: crate::shell::argv(&e.binary, &e.command),
                script: None,
                recipe: None,
                outcome: e.outcome.as_ref().map(|o| up::ShellOutcome {
                    exit_code: o.exit_code.unwrap_or(-1),
                    stdout: String::new(),
                    stderr: String::new(),
                    stdout_bytes: o.stdout_bytes,
                    stderr_bytes: o.stderr_bytes,
                    duration_ms: o.duration_ms,
                }),
            };
            hook.call_on_shell(store, &event).await?
        }
        Event::Compaction(e) => {
            sent = e.messages.clone();
            let event = up::CompactionEvent {
                messages: e.messages.iter().map(flat::message).collect(),
                session_tokens: e.session_tokens,
                threshold: e.threshold,
                model: e.model.clone(),
                system_prompt: e.system_prompt.clone(),
            };
            hook.call_on_compaction(store, &event).await?
        }
        Event::TaskEnd(e) => {
            let event = up::TaskEndEvent {
                task_id: e.task_id.clone(),
                exit_status: e.exit_status.clone(),
            };
            hook.call_on_task_end(store, &event).await?
        }
        Event::SessionEnd(e) => {
            let event = up::SessionEndEvent {
                total_turns: e.total_turns,
                total_input_tokens: e.total_input_tokens,
                total_output_tokens: e.total_output_tokens,
                total_tool_calls: e.total_tool_calls,
                total_shell_calls: e.total_shell_calls,
                duration_ms: e.duration_ms,
                exit_status: e.exit_status.clone(),
            };
            hook.call_on_session_end(store, &event).await?
        }
    };
    Ok(output.and_then(|o| verdict(o, &sent)))
}

/// The granted capability categories, from the capsule's `capabilities` JSON object
/// (`{"network": [..], "filesystem": ".", "shell": [..]}`): those whose grant is not
/// empty, as `session_start.capabilities` records them. `filesystem` is always granted
/// (the workdir, at least).
fn categories(capabilities: &str) -> Vec<String> {
    serde_json::from_str::<serde_json::Value>(capabilities)
        .map(|grants| {
            crate::trace::line::granted_categories(&grants)
                .into_iter()
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// Our verdict for upstream's output; `sent` is the conversation a compaction event
/// carried (empty for any other event).
fn verdict(output: up::HookOutput, sent: &[Message]) -> Result<Verdict, String> {
    Ok(match output {
        up::HookOutput::None => Verdict::None,
        up::HookOutput::ReplaceContext(messages) => {
            Verdict::ReplaceContext(flat::unflatten(messages, sent)?)
        }
        up::HookOutput::SeedContext(messages) => {
            Verdict::SeedContext(flat::unflatten(messages, &[])?)
        }
        up::HookOutput::WriteManifests(files) => Verdict::WriteManifests(
            files
                .into_iter()
                .map(|f| ManifestFile {
                    binary_name: f.binary_name,
                    content: f.content,
                })
                .collect(),
        ),
        up::HookOutput::Artifact(json) => Verdict::Artifact(json),
        up::HookOutput::ReopenTask(feedback) => Verdict::ReopenTask(feedback),
        up::HookOutput::Deny(reason) => Verdict::Deny(reason),
    })
}

/// Typed messages to upstream's flat ones and back.
mod flat {
    use super::*;

    pub fn message(m: &Message) -> up::Message {
        up::Message {
            role: role_name(m.role).to_string(),
            content: content(m),
            id: None,
            source_id: None,
            inserted_by: None,
        }
    }

    fn role_name(role: Role) -> &'static str {
        match role {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    /// The text blocks, tool calls and results, one per line; reasoning is left out.
    fn content(m: &Message) -> String {
        let lines: Vec<String> = m
            .content
            .iter()
            .filter_map(|block| match block {
                Block::Text(text) => Some(text.clone()),
                Block::Thinking(_) => None,
                Block::ToolCall(c) => Some(format!("[tool call {}] {} {}", c.id, c.name, c.input)),
                Block::ToolResult(r) if r.is_error => {
                    Some(format!("[tool error {}] {}", r.call_id, r.content))
                }
                Block::ToolResult(r) => Some(format!("[tool result {}] {}", r.call_id, r.content)),
            })
            .collect();
        lines.join("\n")
    }

    /// Flat messages as ours: one returned exactly as one of `sent` was flattened is
    /// that original (each original once); any other is one text block.
    pub fn unflatten(messages: Vec<up::Message>, sent: &[Message]) -> Result<Vec<Message>, String> {
        let mut used = vec![false; sent.len()];
        messages
            .into_iter()
            .map(|m| {
                let same = |o: &Message| role_name(o.role) == m.role && content(o) == m.content;
                if let Some(i) = (0..sent.len()).find(|&i| !used[i] && same(&sent[i])) {
                    used[i] = true;
                    return Ok(sent[i].clone());
                }
                let role = match m.role.as_str() {
                    "user" => Role::User,
                    "assistant" => Role::Assistant,
                    "tool" => Role::Tool,
                    other => {
                        return Err(format!(
                            "a message has role '{other}'; a message's role is user, assistant or tool"
                        ));
                    }
                };
                Ok(Message {
                    role,
                    content: vec![Block::Text(m.content)],
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::message::{ToolCall, ToolResult};

    fn flat(role: &str, content: &str) -> up::Message {
        up::Message {
            role: role.into(),
            content: content.into(),
            id: None,
            source_id: None,
            inserted_by: None,
        }
    }

    fn conversation() -> Vec<Message> {
        vec![
            Message {
                role: Role::User,
                content: vec![Block::Text("count".into())],
            },
            Message {
                role: Role::Assistant,
                content: vec![
                    Block::Text("I will".into()),
                    Block::ToolCall(ToolCall {
                        id: "c1".into(),
                        name: "wc".into(),
                        input: "{}".into(),
                    }),
                ],
            },
            Message {
                role: Role::Tool,
                content: vec![Block::ToolResult(ToolResult {
                    call_id: "c1".into(),
                    content: "3".into(),
                    is_error: true,
                })],
            },
        ]
    }

    #[test]
    fn calls_and_results_are_written_as_lines() {
        let flat: Vec<_> = conversation().iter().map(flat::message).collect();
        let seen: Vec<_> = flat
            .iter()
            .map(|m| (m.role.as_str(), m.content.as_str()))
            .collect();
        assert_eq!(
            seen,
            [
                ("user", "count"),
                ("assistant", "I will\n[tool call c1] wc {}"),
                ("tool", "[tool error c1] 3"),
            ]
        );
    }

    #[test]
    fn a_message_returned_as_sent_is_the_original_and_a_new_one_is_text() {
        let sent = conversation();
        let back = vec![
            flat("user", "summary"),
            flat::message(&sent[1]),
            flat::message(&sent[2]),
        ];
        let Ok(Verdict::ReplaceContext(got)) = verdict(up::HookOutput::ReplaceContext(back), &sent)
        else {
            panic!("not a replacement");
        };
        assert_eq!(got[0].content, vec![Block::Text("summary".into())]);
        assert_eq!(got[1..], sent[1..]);
    }

    #[test]
    fn a_role_outside_the_three_is_the_hooks_error() {
        let out = up::HookOutput::SeedContext(vec![flat("system", "be brief")]);
        assert_eq!(
            verdict(out, &[]).err().as_deref(),
            Some("a message has role 'system'; a message's role is user, assistant or tool")
        );
    }

    #[test]
    fn granted_categories_are_the_objects_keys() {
        assert_eq!(
            categories(r#"{"network":[],"filesystem":".","shell":["echo","bash"]}"#),
            ["filesystem", "shell"]
        );
        assert!(categories("not json").is_empty());
    }
}
