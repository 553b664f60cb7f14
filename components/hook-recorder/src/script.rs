//! The answer script: `/script.json` maps an event kind to the answers for that kind's
//! calls, consumed in order; a kind without answers left gets `none`.
//!
//! Answer forms: `"none"`, `"trap"`, `"spin"`, `{"seed": [msg...]}`,
//! `{"replace": [msg...]}`, `{"replace_keep_last": n}` (compaction only), `{"deny": "..."}`,
//! `{"reopen": "..."}`, `{"artifact": {...}}`, `{"manifests": [{"binary_name", "content"}...]}`
//! and `{"error": "..."}`, where a msg is `{"role", "content"}`: a message of one text
//! block, in the flat form of `flat.rs`. In a `replace` answer to a compaction, a msg equal
//! to one of the event's messages in that form stands for that message, returned as it
//! came (tool calls, ids and all), as the host matched them before messages were typed.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::exports::murmur::hook::lifecycle::{Event, ManifestFile, Verdict};
use crate::flat;
use crate::murmur::message::types::Message;

/// The first message of a `replace_keep_last` answer.
const SUMMARY: &str = "Summary of earlier conversation.";

/// Answers consumed so far, per kind. The host keeps one instance for the whole session,
/// so this lives as long as the session does.
static CURSORS: Mutex<Cursors> = Mutex::new(Cursors(BTreeMap::new()));

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Answer {
    None,
    /// Traps the instance (a deliberate panic).
    Trap,
    /// Loops forever without calling the host, to run into the hook deadline.
    Spin,
    Seed(Vec<ScriptMessage>),
    Replace(Vec<ScriptMessage>),
    /// Keeps the compaction event's last n messages behind a one-line summary.
    ReplaceKeepLast(usize),
    Deny(String),
    Reopen(String),
    Artifact(Map<String, Value>),
    Manifests(Vec<ScriptManifest>),
    /// Fails the call with this text.
    Error(String),
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct ScriptMessage {
    role: String,
    content: String,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct ScriptManifest {
    binary_name: String,
    content: String,
}

#[derive(Debug, Default)]
struct Cursors(BTreeMap<String, usize>);

impl Cursors {
    /// The next unconsumed answer for `kind`, consuming it. A malformed script consumes
    /// nothing, so a test that fixes the file mid-run starts where it left off.
    fn next(&mut self, script: &Value, kind: &str) -> Result<Option<Value>, String> {
        let Value::Object(kinds) = script else {
            return Err(
                "script.json must be a JSON object mapping event kinds to answer lists".into(),
            );
        };
        let answers = match kinds.get(kind) {
            None => return Ok(None),
            Some(Value::Array(answers)) => answers,
            Some(_) => return Err(format!("script.json: \"{kind}\" must be a list of answers")),
        };
        let cursor = self.0.entry(kind.to_string()).or_insert(0);
        let Some(answer) = answers.get(*cursor) else {
            return Ok(None);
        };
        *cursor += 1;
        Ok(Some(answer.clone()))
    }

    /// Answers consumed so far for `kind`.
    fn consumed(&self, kind: &str) -> usize {
        self.0.get(kind).copied().unwrap_or(0)
    }
}

/// The verdict for one event of `kind`, from the script text.
pub fn answer(text: &str, kind: &str, event: &Event) -> Result<Verdict, String> {
    let script: Value =
        serde_json::from_str(text).map_err(|e| format!("script.json is not valid JSON: {e}"))?;
    // A trap inside `answer` poisons nothing that matters: the instance is gone with it.
    let mut cursors = CURSORS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(raw) = cursors.next(&script, kind)? else {
        return Ok(Verdict::None);
    };
    let number = cursors.consumed(kind);
    drop(cursors);
    let answer = parse_answer(raw)
        .map_err(|e| format!("script.json: answer {number} for \"{kind}\": {e}"))?;
    apply(answer, event)
}

fn parse_answer(raw: Value) -> Result<Answer, String> {
    serde_json::from_value(raw).map_err(|e| e.to_string())
}

fn apply(answer: Answer, event: &Event) -> Result<Verdict, String> {
    Ok(match answer {
        Answer::None => Verdict::None,
        Answer::Trap => panic!("hook-recorder: scripted trap"),
        Answer::Spin => spin(),
        Answer::Seed(messages) => Verdict::SeedContext(
            messages
                .iter()
                .map(|m| flat::message(&m.role, &m.content))
                .collect(),
        ),
        Answer::Replace(messages) => Verdict::ReplaceContext(replacement(event, &messages)),
        Answer::ReplaceKeepLast(n) => Verdict::ReplaceContext(keep_last(event, n)?),
        Answer::Deny(reason) => Verdict::Deny(reason),
        Answer::Reopen(feedback) => Verdict::ReopenTask(feedback),
        Answer::Artifact(object) => Verdict::Artifact(Value::Object(object).to_string()),
        Answer::Manifests(files) => Verdict::WriteManifests(
            files
                .into_iter()
                .map(|f| ManifestFile {
                    binary_name: f.binary_name,
                    content: f.content,
                })
                .collect(),
        ),
        Answer::Error(text) => return Err(text),
    })
}

/// Busy-loops without touching the host, so only the host's deadline can end the call.
fn spin() -> ! {
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

/// A summary message followed by the compaction's last `n` messages, unchanged.
fn keep_last(event: &Event, n: usize) -> Result<Vec<Message>, String> {
    let Event::Compaction(compaction) = event else {
        return Err("script.json: replace_keep_last answers only compaction events".into());
    };
    let start = compaction.messages.len().saturating_sub(n);
    let mut messages = vec![flat::message("user", SUMMARY)];
    messages.extend(compaction.messages[start..].iter().cloned());
    Ok(messages)
}

/// The script's messages as a replacement. At a compaction, each one equal in flat form
/// to a message of the event not matched yet is that message, unchanged; any other is a
/// new text message.
fn replacement(event: &Event, script: &[ScriptMessage]) -> Vec<Message> {
    let originals: &[Message] = match event {
        Event::Compaction(compaction) => &compaction.messages,
        _ => &[],
    };
    let flattened: Vec<(&str, String)> = originals
        .iter()
        .map(|m| (flat::role_name(m.role), flat::text(m)))
        .collect();
    let mut used = vec![false; originals.len()];
    script
        .iter()
        .map(|m| {
            let found = (0..originals.len())
                .find(|&i| !used[i] && flattened[i].0 == m.role && flattened[i].1 == m.content);
            match found {
                Some(i) => {
                    used[i] = true;
                    originals[i].clone()
                }
                None => flat::message(&m.role, &m.content),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exports::murmur::hook::lifecycle::{Compaction, TaskEnd};
    use crate::murmur::message::types::{Block, Role, Thinking, ToolCall, ToolResult};
    use serde_json::json;

    fn compaction_of(messages: Vec<Message>) -> Event {
        Event::Compaction(Compaction {
            messages,
            session_tokens: 100,
            threshold: 0.8,
            model: None,
            system_prompt: None,
        })
    }

    fn compaction(contents: &[&str]) -> Event {
        compaction_of(
            contents
                .iter()
                .map(|c| flat::message("assistant", c))
                .collect(),
        )
    }

    /// An assistant message asking for `ls`, with a reasoning block the flat form leaves out.
    fn asking(id: &str) -> Message {
        Message {
            role: Role::Assistant,
            content: vec![
                Block::Thinking(Thinking {
                    text: "hmm".into(),
                    signature: Some("sig".into()),
                }),
                Block::ToolCall(ToolCall {
                    id: id.into(),
                    name: "ls".into(),
                    input: "{}".into(),
                }),
            ],
        }
    }

    fn result(id: &str) -> Message {
        Message {
            role: Role::Tool,
            content: vec![Block::ToolResult(ToolResult {
                call_id: id.into(),
                content: "a.txt".into(),
                is_error: false,
            })],
        }
    }

    fn script_message(role: &str, content: &str) -> ScriptMessage {
        ScriptMessage {
            role: role.into(),
            content: content.into(),
        }
    }

    /// Whether two messages are the same, block for block (the bindings derive no `PartialEq`).
    fn same(a: &Message, b: &Message) -> bool {
        format!("{a:?}") == format!("{b:?}")
    }

    fn task_end() -> Event {
        Event::TaskEnd(TaskEnd {
            task_id: "t".into(),
            exit_status: "ok".into(),
            result: "r".into(),
            attempt: 1,
        })
    }

    #[test]
    fn answers_are_consumed_in_order_per_kind() {
        let script =
            json!({"deny": "x", "tool-call": ["none", {"deny": "no"}], "shell": [{"error": "e"}]});
        let mut cursors = Cursors::default();
        assert_eq!(
            cursors.next(&script, "tool-call").unwrap(),
            Some(json!("none"))
        );
        assert_eq!(
            cursors.next(&script, "shell").unwrap(),
            Some(json!({"error": "e"}))
        );
        assert_eq!(
            cursors.next(&script, "tool-call").unwrap(),
            Some(json!({"deny": "no"}))
        );
        assert_eq!(cursors.next(&script, "tool-call").unwrap(), None);
        assert_eq!(cursors.next(&script, "task-end").unwrap(), None);
        assert_eq!(cursors.consumed("tool-call"), 2);
        // A kind whose value is not a list is an error, and consumes nothing.
        assert!(
            cursors
                .next(&script, "deny")
                .unwrap_err()
                .contains("must be a list")
        );
        assert!(
            cursors
                .next(&json!([1]), "shell")
                .unwrap_err()
                .contains("JSON object")
        );
    }

    #[test]
    fn every_answer_form_parses() {
        let cases = [
            (json!("none"), Answer::None),
            (json!("trap"), Answer::Trap),
            (json!("spin"), Answer::Spin),
            (json!({"deny": "r"}), Answer::Deny("r".into())),
            (json!({"reopen": "f"}), Answer::Reopen("f".into())),
            (json!({"error": "e"}), Answer::Error("e".into())),
            (json!({"replace_keep_last": 2}), Answer::ReplaceKeepLast(2)),
        ];
        for (raw, expected) in cases {
            assert_eq!(parse_answer(raw).unwrap(), expected);
        }
        assert!(matches!(
            parse_answer(json!({"seed": [{"role": "user", "content": "c"}]})),
            Ok(Answer::Seed(m)) if m.len() == 1
        ));
        assert!(matches!(
            parse_answer(json!({"manifests": [{"binary_name": "jq", "content": "name: jq"}]})),
            Ok(Answer::Manifests(m)) if m[0].binary_name == "jq"
        ));
    }

    #[test]
    fn malformed_answers_are_errors() {
        assert!(parse_answer(json!("maybe")).is_err());
        assert!(parse_answer(json!({"deny": 3})).is_err());
        assert!(parse_answer(json!({"artifact": "not an object"})).is_err());
        assert!(parse_answer(json!({"seed": [{"role": "user"}]})).is_err());
        assert!(parse_answer(json!({"deny": "a", "reopen": "b"})).is_err());
    }

    #[test]
    fn artifact_is_serialized_and_error_fails_the_call() {
        let artifact = parse_answer(json!({"artifact": {"kind": "chart", "n": 1}})).unwrap();
        assert!(matches!(
            apply(artifact, &task_end()),
            Ok(Verdict::Artifact(s)) if s == r#"{"kind":"chart","n":1}"#
        ));
        assert_eq!(
            apply(Answer::Error("boom".into()), &task_end())
                .err()
                .as_deref(),
            Some("boom")
        );
    }

    #[test]
    fn replace_keep_last_keeps_the_tail_behind_a_summary() {
        let Ok(Verdict::ReplaceContext(messages)) =
            apply(Answer::ReplaceKeepLast(2), &compaction(&["a", "b", "c"]))
        else {
            panic!("expected a replacement");
        };
        let contents: Vec<_> = messages.iter().map(flat::text).collect();
        assert_eq!(contents, [SUMMARY, "b", "c"]);
        assert_eq!(messages[0].role, Role::User);
        let Ok(Verdict::ReplaceContext(all)) =
            apply(Answer::ReplaceKeepLast(9), &compaction(&["a"]))
        else {
            panic!("expected a replacement");
        };
        assert_eq!(all.len(), 2);
        assert!(apply(Answer::ReplaceKeepLast(1), &task_end()).is_err());
    }

    #[test]
    fn replace_keeps_restated_messages_whole_and_makes_the_rest_text() {
        let event = compaction_of(vec![
            flat::message("user", "task"),
            asking("c1"),
            result("c1"),
        ]);
        let script = [
            script_message("user", "Summary."),
            script_message("assistant", "[tool call c1] ls {}"),
            script_message("tool", "a.txt"),
            // Said again: the one original is taken already.
            script_message("tool", "a.txt"),
        ];
        let Ok(Verdict::ReplaceContext(out)) = apply(Answer::Replace(script.into()), &event) else {
            panic!("expected a replacement");
        };
        assert_eq!(out.len(), 4);
        assert!(same(&out[0], &flat::message("user", "Summary.")));
        assert!(same(&out[1], &asking("c1")), "{:?}", out[1]);
        assert!(same(&out[2], &result("c1")), "{:?}", out[2]);
        assert!(same(&out[3], &flat::message("tool", "a.txt")));
    }

    #[test]
    fn seeds_are_text_messages_even_when_they_restate_one() {
        let script = vec![script_message("system", "[tool call c1] ls {}")];
        let event = compaction_of(vec![asking("c1")]);
        let Ok(Verdict::SeedContext(out)) = apply(Answer::Seed(script), &event) else {
            panic!("expected a seed");
        };
        assert!(same(
            &out[0],
            &flat::message("user", "[tool call c1] ls {}")
        ));
    }

    #[test]
    fn answer_reports_which_answer_is_malformed() {
        let err = answer(
            r#"{"session-end": [{"reopen": 1}]}"#,
            "session-end",
            &task_end(),
        )
        .unwrap_err();
        assert!(
            err.starts_with("script.json: answer 1 for \"session-end\""),
            "{err}"
        );
        assert!(
            answer("{", "task-end", &task_end())
                .unwrap_err()
                .contains("not valid JSON")
        );
    }

    #[test]
    #[should_panic(expected = "scripted trap")]
    fn trap_panics() {
        let _ = apply(Answer::Trap, &task_end());
    }
}
