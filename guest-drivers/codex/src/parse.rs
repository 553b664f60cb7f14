//! `codex exec --json` output, one JSON object a line (`thread.started`,
//! `turn.started`, `item.started` / `item.completed`, `turn.completed` /
//! `turn.failed`, `error`), read into the harness's events.
//!
//! Codex prints no line per model call: a model call is taken to begin at the first
//! item of a turn and at the first new item after a tool item completed (the model
//! is called again with the tool's result).

use mur_process_kit::event::{first_chars, read_json, str_of};
use mur_process_kit::{Class, Event, Failure, Parse, Usage};
use serde_json::{Map, Value};
use std::collections::HashSet;

/// What one run's earlier lines told the parser.
#[derive(Debug, Default)]
pub struct Parser {
    /// The bridge's MCP server name.
    server_name: Option<String>,
    /// A model call is due: the next new item begins it.
    turn_due: bool,
    /// Items started and not yet completed.
    open_items: HashSet<String>,
    /// The text of the last `agent_message`: the answer when the turn completes.
    last_message: Option<String>,
}

/// The item types that are tool calls: the model is called again after them.
const TOOL_ITEMS: &[&str] = &[
    "mcp_tool_call",
    "command_execution",
    "file_change",
    "web_search",
];

impl Parse for Parser {
    fn parse(&mut self, line: &str) -> Vec<Event> {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            return Vec::new();
        }
        let Ok(Value::Object(object)) = read_json(trimmed) else {
            return vec![Event::Note(format!(
                "codex printed a line that is not its JSON output: {}",
                first_chars(trimmed, 200)
            ))];
        };
        match str_of(&object, "type") {
            Some("thread.started") => match str_of(&object, "thread_id") {
                Some(id) => vec![Event::Session {
                    id: id.to_string(),
                    auth: "api-key".into(),
                    model: None,
                }],
                None => Vec::new(),
            },
            Some("turn.started") => {
                self.turn_due = true;
                self.open_items.clear();
                Vec::new()
            }
            Some("item.started") => match object.get("item") {
                Some(Value::Object(item)) => self.item_started(item),
                _ => Vec::new(),
            },
            Some("item.completed") => match object.get("item") {
                Some(Value::Object(item)) => self.item_completed(item),
                _ => Vec::new(),
            },
            Some("turn.completed") => self.turn_completed(&object),
            Some("turn.failed") => {
                let message = object
                    .get("error")
                    .and_then(|error| error.get("message"))
                    .and_then(Value::as_str)
                    .filter(|message| !message.trim().is_empty())
                    .unwrap_or("codex's turn failed without a message")
                    .to_string();
                vec![Event::Failed(Failure {
                    class: crate::exit::WORDING
                        .class_of_text(&message)
                        .unwrap_or(Class::Crashed),
                    message,
                })]
            }
            Some("error") => match str_of(&object, "message") {
                Some(message) => vec![Event::Note(format!("codex: {message}"))],
                None => Vec::new(),
            },
            _ => Vec::new(),
        }
    }
}

impl Parser {
    pub fn new(server_name: Option<String>) -> Parser {
        Parser {
            server_name,
            ..Parser::default()
        }
    }

    /// A `turn-started` if a model call is due.
    fn begin_item(&mut self, events: &mut Vec<Event>) {
        if self.turn_due {
            self.turn_due = false;
            events.push(Event::TurnStarted);
        }
    }

    fn item_started(&mut self, item: &Map<String, Value>) -> Vec<Event> {
        let mut events = Vec::new();
        if str_of(item, "type") == Some("error") {
            return events;
        }
        self.begin_item(&mut events);
        if let Some(id) = str_of(item, "id") {
            self.open_items.insert(id.to_string());
        }
        events
    }

    fn item_completed(&mut self, item: &Map<String, Value>) -> Vec<Event> {
        let mut events = Vec::new();
        let kind = str_of(item, "type").unwrap_or_default();
        if kind == "error" {
            if let Some(message) = str_of(item, "message") {
                events.push(Event::Note(format!("codex: {message}")));
            }
            return events;
        }
        let id = str_of(item, "id").unwrap_or_default().to_string();
        // An item seen starting belongs to the model call it started in.
        if !self.open_items.remove(&id) {
            self.begin_item(&mut events);
        }
        match kind {
            "agent_message" => {
                let text = str_of(item, "text").unwrap_or_default();
                if !text.is_empty() {
                    events.push(Event::Text(text.to_string()));
                }
                self.last_message = Some(text.to_string());
            }
            "reasoning" => {
                if let Some(text) = str_of(item, "text").filter(|text| !text.is_empty()) {
                    events.push(Event::Thinking(text.to_string()));
                }
            }
            "mcp_tool_call" => {
                let server = str_of(item, "server").unwrap_or_default();
                let arguments = item
                    .get("arguments")
                    .filter(|arguments| !arguments.is_null())
                    .cloned()
                    .unwrap_or(Value::Object(Map::new()));
                let error = item
                    .get("error")
                    .filter(|error| !error.is_null())
                    .map(|error| match error.get("message").and_then(Value::as_str) {
                        Some(message) => message.to_string(),
                        None => error.to_string(),
                    });
                let output = match &error {
                    Some(message) => message.clone(),
                    None => mcp_result_text(item.get("result")),
                };
                let result_is_error = item
                    .get("result")
                    .and_then(|result| result.get("is_error").or(result.get("isError")))
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                events.push(Event::ToolCall {
                    id: id.clone(),
                    name: str_of(item, "tool").unwrap_or_default().to_string(),
                    input: arguments.to_string(),
                    bridged: self.server_name.as_deref() == Some(server),
                });
                events.push(Event::ToolResult {
                    id,
                    output,
                    is_error: error.is_some()
                        || result_is_error
                        || str_of(item, "status") != Some("completed"),
                });
            }
            "command_execution" => {
                let command = str_of(item, "command").unwrap_or_default();
                let exit_code = item.get("exit_code").and_then(Value::as_i64);
                events.push(Event::ToolCall {
                    id: id.clone(),
                    name: "shell".into(),
                    input: serde_json::json!({ "command": command }).to_string(),
                    bridged: false,
                });
                events.push(Event::ToolResult {
                    id,
                    output: str_of(item, "aggregated_output")
                        .unwrap_or_default()
                        .to_string(),
                    is_error: exit_code != Some(0)
                        || matches!(str_of(item, "status"), Some("failed" | "declined")),
                });
            }
            "file_change" => {
                let changes = item.get("changes").cloned().unwrap_or(Value::Array(vec![]));
                let summary = changes
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|change| {
                        format!(
                            "{} {}",
                            change
                                .get("kind")
                                .and_then(Value::as_str)
                                .unwrap_or("change"),
                            change.get("path").and_then(Value::as_str).unwrap_or("?")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                let status = str_of(item, "status").unwrap_or("completed");
                events.push(Event::ToolCall {
                    id: id.clone(),
                    name: "apply_patch".into(),
                    input: changes.to_string(),
                    bridged: false,
                });
                events.push(Event::ToolResult {
                    id,
                    output: if status == "completed" {
                        summary
                    } else {
                        format!("the patch {status}: {summary}")
                    },
                    is_error: status != "completed",
                });
            }
            "web_search" => {
                let query = str_of(item, "query").unwrap_or_default();
                events.push(Event::ToolCall {
                    id: id.clone(),
                    name: "web_search".into(),
                    input: serde_json::json!({ "query": query }).to_string(),
                    bridged: false,
                });
                events.push(Event::ToolResult {
                    id,
                    output: String::new(),
                    is_error: false,
                });
            }
            _ => {}
        }
        if TOOL_ITEMS.contains(&kind) {
            self.turn_due = true;
        }
        events
    }

    fn turn_completed(&mut self, object: &Map<String, Value>) -> Vec<Event> {
        let mut events = Vec::new();
        self.turn_due = false;
        if let Some(Value::Object(usage)) = object.get("usage") {
            // Codex's counts are its thread's totals so far, a resumed thread's earlier
            // runs included: the driver says so (`usage-covers-session`) and the host
            // counts the growth.
            let read = |key: &str| usage.get(key).and_then(Value::as_u64);
            let cached = read("cached_input_tokens");
            events.push(Event::Usage(Usage {
                input: read("input_tokens").map(|input| input.saturating_sub(cached.unwrap_or(0))),
                output: read("output_tokens"),
                cache_read: cached,
                cache_write: read("cache_write_input_tokens"),
                thinking: read("reasoning_output_tokens"),
            }));
        }
        events.push(Event::Answer(self.last_message.take().unwrap_or_default()));
        events
    }
}

/// The text of an MCP tool result: its text parts, else its structured content.
fn mcp_result_text(result: Option<&Value>) -> String {
    let Some(Value::Object(result)) = result else {
        return String::new();
    };
    let texts: Vec<&str> = result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|part| part.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|part| part.get("text").and_then(Value::as_str))
        .collect();
    if !texts.is_empty() {
        return texts.join("\n");
    }
    match result.get("structured_content") {
        Some(Value::Null) | None => String::new(),
        Some(structured) => structured.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(parser: &mut Parser, lines: &str) -> Vec<Event> {
        lines.lines().flat_map(|line| parser.parse(line)).collect()
    }

    const FALLBACK: &str = "codex: Model metadata for `test-model` not found. Defaulting to \
                            fallback metadata; this can degrade performance and cause issues.";

    fn usage(input: u64, output: u64) -> Event {
        Event::Usage(Usage {
            input: Some(input),
            output: Some(output),
            cache_read: Some(0),
            cache_write: Some(0),
            thinking: Some(0),
        })
    }

    #[test]
    fn an_mcp_tool_call_through_the_bridge() {
        let mut parser = Parser::new(Some("mur".into()));
        assert_eq!(
            run(&mut parser, include_str!("../testdata/codex-mcp.jsonl")),
            [
                Event::Session {
                    id: "01a25177-bde4-70c3-8353-eea9373ed12f".into(),
                    auth: "api-key".into(),
                    model: None,
                },
                Event::Note(FALLBACK.into()),
                Event::TurnStarted,
                Event::ToolCall {
                    id: "item_1".into(),
                    name: "wordcount".into(),
                    input: r#"{"text":"one two three"}"#.into(),
                    bridged: true,
                },
                Event::ToolResult {
                    id: "item_1".into(),
                    output: "3 words".into(),
                    is_error: false,
                },
                Event::TurnStarted,
                Event::Text("There are three words.".into()),
                usage(40, 12),
                Event::Answer("There are three words.".into()),
            ]
        );
    }

    #[test]
    fn its_own_shell() {
        let mut parser = Parser::new(Some("mur".into()));
        let events = run(&mut parser, include_str!("../testdata/codex-bash.jsonl"));
        assert_eq!(
            events[2..],
            [
                Event::TurnStarted,
                Event::ToolCall {
                    id: "item_1".into(),
                    name: "shell".into(),
                    input: r#"{"command":"/bin/bash -lc 'echo hi'"}"#.into(),
                    bridged: false,
                },
                Event::ToolResult {
                    id: "item_1".into(),
                    output: "hi\n".into(),
                    is_error: false,
                },
                Event::TurnStarted,
                Event::Text("Done.".into()),
                usage(40, 12),
                Event::Answer("Done.".into()),
            ]
        );
    }

    #[test]
    fn an_unreachable_model_server() {
        let mut parser = Parser::new(None);
        let events = run(&mut parser, include_str!("../testdata/codex-down.jsonl"));
        assert_eq!(
            events[1..],
            [
                Event::Note(FALLBACK.into()),
                Event::Note("codex: Connection failed: error sending request".into()),
                Event::Failed(Failure {
                    class: Class::Crashed,
                    message: "Connection failed: error sending request".into(),
                }),
            ]
        );
    }

    #[test]
    fn a_rejected_key() {
        let mut parser = Parser::new(None);
        let events = run(&mut parser, include_str!("../testdata/codex-401.jsonl"));
        match events.last() {
            Some(Event::Failed(failure)) => {
                assert_eq!(failure.class, Class::Auth);
                assert!(
                    failure
                        .message
                        .starts_with("unexpected status 401 Unauthorized")
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(!events.contains(&Event::TurnStarted));
    }

    #[test]
    fn a_resumed_thread() {
        let mut parser = Parser::new(None);
        let events = run(&mut parser, include_str!("../testdata/codex-resume.jsonl"));
        assert_eq!(
            events[0],
            Event::Session {
                id: "01a2517f-47c2-7a82-8e9b-32d7b0d76f07".into(),
                auth: "api-key".into(),
                model: None,
            }
        );
        assert_eq!(
            events[2..5],
            [
                Event::TurnStarted,
                Event::Text("no more script".into()),
                usage(60, 18),
            ]
        );
        assert_eq!(events[5], Event::Answer("no more script".into()));
    }

    #[test]
    fn parallel_tool_items_make_one_model_call() {
        let mut parser = Parser::new(None);
        let events = run(
            &mut parser,
            r#"{"type":"turn.started"}
{"type":"item.completed","item":{"id":"r","type":"reasoning","text":"Two at once."}}
{"type":"item.started","item":{"id":"a","type":"command_execution","command":"a","status":"in_progress"}}
{"type":"item.started","item":{"id":"b","type":"command_execution","command":"b","status":"in_progress"}}
{"type":"item.completed","item":{"id":"a","type":"command_execution","command":"a","aggregated_output":"","exit_code":0,"status":"completed"}}
{"type":"item.completed","item":{"id":"b","type":"command_execution","command":"b","aggregated_output":"no","exit_code":2,"status":"failed"}}
{"type":"item.completed","item":{"id":"f","type":"file_change","changes":[{"path":"x.rs","kind":"update"}],"status":"completed"}}
{"type":"item.completed","item":{"id":"m","type":"mcp_tool_call","server":"other","tool":"t","arguments":{},"result":null,"error":{"message":"boom"},"status":"failed"}}
{"type":"item.completed","item":{"id":"z","type":"agent_message","text":"ok"}}
{"type":"turn.completed","usage":{"input_tokens":100,"cached_input_tokens":60,"output_tokens":9,"reasoning_output_tokens":4}}"#,
        );
        let turns = |events: &[Event]| {
            events
                .iter()
                .filter(|e| matches!(e, Event::TurnStarted))
                .count()
        };
        // The reasoning and both commands; the file change; the MCP call; the message.
        assert_eq!(turns(&events), 4, "{events:#?}");
        assert_eq!(events[1], Event::Thinking("Two at once.".into()));
        assert!(events.contains(&Event::ToolResult {
            id: "b".into(),
            output: "no".into(),
            is_error: true,
        }));
        assert!(events.contains(&Event::ToolCall {
            id: "f".into(),
            name: "apply_patch".into(),
            input: r#"[{"path":"x.rs","kind":"update"}]"#.into(),
            bridged: false,
        }));
        assert!(events.contains(&Event::ToolResult {
            id: "m".into(),
            output: "boom".into(),
            is_error: true,
        }));
        assert!(events.contains(&Event::Usage(Usage {
            input: Some(40),
            output: Some(9),
            cache_read: Some(60),
            cache_write: None,
            thinking: Some(4),
        })));
        assert_eq!(events.last(), Some(&Event::Answer("ok".into())));
    }

    #[test]
    fn failures_and_other_lines() {
        let failed = |message: &str| {
            let line = serde_json::json!({"type": "turn.failed", "error": {"message": message}});
            match Parser::default().parse(&line.to_string()).as_slice() {
                [Event::Failed(failure)] => failure.class,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(
            failed("exceeded retry limit, last status: 429 Too Many Requests"),
            Class::RateLimit
        );
        assert_eq!(failed("You exceeded your current quota"), Class::RateLimit);
        assert_eq!(failed("unexpected status 401 Unauthorized"), Class::Auth);
        assert_eq!(failed("stream disconnected"), Class::Crashed);
        let mut parser = Parser::default();
        assert_eq!(
            parser.parse("Reading additional input from stdin..."),
            [Event::Note(
                "codex printed a line that is not its JSON output: Reading additional input from stdin..."
                    .into()
            )]
        );
        assert!(parser.parse("").is_empty());
        assert!(
            parser
                .parse(r#"{"type":"item.updated","item":{}}"#)
                .is_empty()
        );
    }
}
