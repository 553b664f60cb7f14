//! Claude Code's `--output-format stream-json --verbose --include-partial-messages`
//! output, one JSON object a line, read into the harness's events.
//!
//! The streamed model events (`stream_event`) carry the text, the thinking, the turn
//! boundaries and the usage; the whole `assistant` messages that follow carry the tool
//! calls, `user` messages the tool results, and the closing `result` line the answer.

use mur_process_kit::event::{first_chars, read_json, str_of};
use mur_process_kit::{Class, Event, Failure, Parse, Usage};
use serde_json::{Map, Value};

/// The usage counts of one model message: `message_start` gives them, a later
/// `message_delta` may update any of them (each is the message's total so far).
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    input: Option<u64>,
    output: Option<u64>,
    cache_read: Option<u64>,
    cache_write: Option<u64>,
}

impl Counts {
    fn update(&mut self, usage: &Map<String, Value>) {
        let read = |key: &str| usage.get(key).and_then(Value::as_u64);
        if let Some(n) = read("input_tokens") {
            self.input = Some(n);
        }
        if let Some(n) = read("output_tokens") {
            self.output = Some(n);
        }
        if let Some(n) = read("cache_read_input_tokens") {
            self.cache_read = Some(n);
        }
        if let Some(n) = read("cache_creation_input_tokens") {
            self.cache_write = Some(n);
        }
    }

    fn add(&mut self, other: &Counts) {
        fn sum(a: Option<u64>, b: Option<u64>) -> Option<u64> {
            match (a, b) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
            }
        }
        self.input = sum(self.input, other.input);
        self.output = sum(self.output, other.output);
        self.cache_read = sum(self.cache_read, other.cache_read);
        self.cache_write = sum(self.cache_write, other.cache_write);
    }
}

/// What one run's earlier lines told the parser.
#[derive(Debug, Default)]
pub struct Parser {
    /// The bridge's server name: its tools reach Claude Code as `mcp__<name>__<tool>`.
    server_name: Option<String>,
    max_turns: u32,
    /// The messages finished before the current one.
    finished: Counts,
    /// The message being streamed, if one began.
    current: Option<Counts>,
}

impl Parse for Parser {
    fn parse(&mut self, line: &str) -> Vec<Event> {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            return Vec::new();
        }
        let Ok(Value::Object(object)) = read_json(trimmed) else {
            return vec![Event::Note(format!(
                "claude-code printed a line that is not its stream-json: {}",
                first_chars(trimmed, 200)
            ))];
        };
        match str_of(&object, "type") {
            Some("system") => self.system(&object),
            Some("stream_event") => match object.get("event") {
                Some(Value::Object(event)) => self.stream_event(event),
                _ => Vec::new(),
            },
            Some("assistant") => self.assistant(&object),
            Some("user") => user(&object),
            Some("result") => self.result(&object),
            _ => Vec::new(),
        }
    }
}

impl Parser {
    pub fn new(server_name: Option<String>, max_turns: u32) -> Parser {
        Parser {
            server_name,
            max_turns,
            ..Parser::default()
        }
    }

    fn system(&self, object: &Map<String, Value>) -> Vec<Event> {
        match str_of(object, "subtype") {
            Some("init") => {}
            Some("api_retry") => {
                let number = |key: &str| object.get(key).and_then(Value::as_u64);
                let mut note = "claude-code retries a model call".to_string();
                if let (Some(attempt), Some(max)) = (number("attempt"), number("max_retries")) {
                    note.push_str(&format!(" ({attempt} of {max})"));
                }
                match (number("error_status"), str_of(object, "error")) {
                    (Some(status), Some(error)) => note.push_str(&format!(": {status} {error}")),
                    (Some(status), None) => note.push_str(&format!(": {status}")),
                    (None, Some(error)) => note.push_str(&format!(": {error}")),
                    (None, None) => {}
                }
                return vec![Event::Note(note)];
            }
            _ => return Vec::new(),
        }
        let Some(id) = str_of(object, "session_id") else {
            return Vec::new();
        };
        let auth = match str_of(object, "apiKeySource") {
            Some("none") => "subscription",
            Some(_) => "api-key",
            None => "unknown",
        };
        vec![Event::Session {
            id: id.to_string(),
            auth: auth.to_string(),
            model: str_of(object, "model").map(str::to_string),
        }]
    }

    fn stream_event(&mut self, event: &Map<String, Value>) -> Vec<Event> {
        match str_of(event, "type") {
            Some("message_start") => {
                if let Some(previous) = self.current.take() {
                    self.finished.add(&previous);
                }
                let mut counts = Counts::default();
                if let Some(Value::Object(usage)) = event
                    .get("message")
                    .and_then(|message| message.get("usage"))
                {
                    counts.update(usage);
                }
                self.current = Some(counts);
                vec![Event::TurnStarted, Event::Usage(self.usage())]
            }
            Some("message_delta") => match event.get("usage") {
                Some(Value::Object(usage)) => {
                    self.current.get_or_insert_default().update(usage);
                    vec![Event::Usage(self.usage())]
                }
                _ => Vec::new(),
            },
            Some("content_block_delta") => {
                let Some(Value::Object(delta)) = event.get("delta") else {
                    return Vec::new();
                };
                match (
                    str_of(delta, "type"),
                    str_of(delta, "text"),
                    str_of(delta, "thinking"),
                ) {
                    (Some("text_delta"), Some(text), _) if !text.is_empty() => {
                        vec![Event::Text(text.to_string())]
                    }
                    (Some("thinking_delta"), _, Some(thinking)) if !thinking.is_empty() => {
                        vec![Event::Thinking(thinking.to_string())]
                    }
                    _ => Vec::new(),
                }
            }
            _ => Vec::new(),
        }
    }

    /// The run's totals: every finished message and the current one.
    fn usage(&self) -> Usage {
        let mut total = self.finished;
        if let Some(current) = &self.current {
            total.add(current);
        }
        Usage {
            input: total.input,
            output: total.output,
            cache_read: total.cache_read,
            cache_write: total.cache_write,
            thinking: None,
        }
    }

    /// A whole model message: its tool calls (its text and thinking were streamed).
    fn assistant(&self, object: &Map<String, Value>) -> Vec<Event> {
        let mut events = Vec::new();
        for block in content_blocks(object) {
            if str_of(block, "type") != Some("tool_use") {
                continue;
            }
            let (Some(id), Some(name)) = (str_of(block, "id"), str_of(block, "name")) else {
                continue;
            };
            let input = block
                .get("input")
                .cloned()
                .unwrap_or(Value::Object(Map::new()));
            let bridged_name = self.server_name.as_deref().and_then(|server| {
                name.strip_prefix("mcp__")?
                    .strip_prefix(server)?
                    .strip_prefix("__")
                    .filter(|tool| !tool.is_empty())
            });
            events.push(Event::ToolCall {
                id: id.to_string(),
                name: bridged_name.unwrap_or(name).to_string(),
                input: input.to_string(),
                bridged: bridged_name.is_some(),
            });
        }
        events
    }

    fn result(&self, object: &Map<String, Value>) -> Vec<Event> {
        let subtype = str_of(object, "subtype");
        let is_error = object
            .get("is_error")
            .and_then(Value::as_bool)
            .unwrap_or(subtype != Some("success"));
        if subtype == Some("error_max_turns") {
            return vec![Event::Failed(Failure {
                class: Class::Crashed,
                message: format!(
                    "claude-code stopped at its turn limit ({} turns)",
                    self.max_turns
                ),
            })];
        }
        if !is_error {
            let answer = str_of(object, "result").unwrap_or_default();
            return vec![Event::Answer(answer.to_string())];
        }
        let message = str_of(object, "result")
            .filter(|text| !text.trim().is_empty())
            .map(str::to_string)
            .or_else(|| match object.get("errors") {
                Some(Value::Array(errors)) if !errors.is_empty() => Some(
                    errors
                        .iter()
                        .map(|error| match error {
                            Value::String(text) => text.clone(),
                            other => other.to_string(),
                        })
                        .collect::<Vec<_>>()
                        .join("; "),
                ),
                _ => None,
            })
            .unwrap_or_else(|| {
                format!(
                    "claude-code failed ({})",
                    subtype.unwrap_or("no reason given")
                )
            });
        let status = match object.get("api_error_status") {
            Some(Value::Number(n)) => n.as_u64(),
            Some(Value::String(text)) => text.trim().parse().ok(),
            _ => None,
        };
        let class = match status {
            Some(401 | 403) => Class::Auth,
            Some(429) => Class::RateLimit,
            Some(_) => Class::Crashed,
            None => crate::exit::WORDING
                .class_of_text(&message)
                .unwrap_or(Class::Crashed),
        };
        vec![Event::Failed(Failure { class, message })]
    }
}

/// The tool results a `user` message carries.
fn user(object: &Map<String, Value>) -> Vec<Event> {
    let mut events = Vec::new();
    for block in content_blocks(object) {
        if str_of(block, "type") != Some("tool_result") {
            continue;
        }
        let Some(id) = str_of(block, "tool_use_id") else {
            continue;
        };
        events.push(Event::ToolResult {
            id: id.to_string(),
            output: text_of(block.get("content")),
            is_error: block
                .get("is_error")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        });
    }
    events
}

/// A tool result's content: a string, or the text of its text parts.
fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|part| match part {
                Value::String(text) => Some(text.as_str()),
                Value::Object(part) if str_of(part, "type") == Some("text") => str_of(part, "text"),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        None | Some(Value::Null) => String::new(),
        Some(other) => other.to_string(),
    }
}

/// The content blocks of an `assistant` or `user` line's message.
fn content_blocks(object: &Map<String, Value>) -> impl Iterator<Item = &Map<String, Value>> {
    object
        .get("message")
        .and_then(|message| message.get("content"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(parser: &mut Parser, lines: &str) -> Vec<Event> {
        lines.lines().flat_map(|line| parser.parse(line)).collect()
    }

    fn without_usage(events: Vec<Event>) -> Vec<Event> {
        events
            .into_iter()
            .filter(|event| !matches!(event, Event::Usage(_)))
            .collect()
    }

    fn last_usage(events: &[Event]) -> Usage {
        events
            .iter()
            .rev()
            .find_map(|event| match event {
                Event::Usage(usage) => Some(usage.clone()),
                _ => None,
            })
            .unwrap()
    }

    const SESSION: &str = "11111111-2222-4333-8444-555555555556";

    #[test]
    fn an_mcp_tool_call_through_the_bridge() {
        let mut parser = Parser::new(Some("mur".into()), 8);
        let events = run(&mut parser, include_str!("../testdata/claude-mcp.jsonl"));
        assert_eq!(
            last_usage(&events),
            Usage {
                input: Some(22),
                output: Some(12),
                cache_read: None,
                cache_write: None,
                thinking: None,
            }
        );
        assert_eq!(
            without_usage(events),
            [
                Event::Session {
                    id: SESSION.into(),
                    auth: "api-key".into(),
                    model: Some("claude-test".into()),
                },
                Event::TurnStarted,
                Event::Thinking("I should count.".into()),
                Event::ToolCall {
                    id: "toolu_1".into(),
                    name: "wordcount".into(),
                    input: r#"{"text":"one two three"}"#.into(),
                    bridged: true,
                },
                Event::ToolResult {
                    id: "toolu_1".into(),
                    output: "3 words".into(),
                    is_error: false,
                },
                Event::TurnStarted,
                Event::Text("There ".into()),
                Event::Text("are ".into()),
                Event::Text("three ".into()),
                Event::Text("words. ".into()),
                Event::Answer("There are three words. ".into()),
            ]
        );
    }

    #[test]
    fn its_own_bash_tool() {
        let mut parser = Parser::new(Some("mur".into()), 8);
        let events = without_usage(run(
            &mut parser,
            include_str!("../testdata/claude-bash.jsonl"),
        ));
        assert!(events.contains(&Event::ToolCall {
            id: "toolu_1".into(),
            name: "Bash".into(),
            input: r#"{"command":"echo hi","description":"say hi"}"#.into(),
            bridged: false,
        }));
        assert!(events.contains(&Event::ToolResult {
            id: "toolu_1".into(),
            output: "hi".into(),
            is_error: false,
        }));
        assert_eq!(events.last(), Some(&Event::Answer("Done. ".into())));
        assert_eq!(
            events
                .iter()
                .filter(|e| matches!(e, Event::TurnStarted))
                .count(),
            2
        );
    }

    #[test]
    fn an_unreachable_model_server() {
        let mut parser = Parser::new(None, 8);
        let events = run(&mut parser, include_str!("../testdata/claude-down.jsonl"));
        assert_eq!(events.len(), 2, "{events:?}");
        assert!(matches!(events[0], Event::Session { .. }));
        assert_eq!(
            events[1],
            Event::Failed(Failure {
                class: Class::Crashed,
                message: "API Error: Unable to connect to API (ConnectionRefused)".into(),
            })
        );
    }

    #[test]
    fn a_rejected_key() {
        let mut parser = Parser::new(None, 8);
        let events = run(&mut parser, include_str!("../testdata/claude-401.jsonl"));
        assert!(events.contains(&Event::Note(
            "claude-code retries a model call (1 of 1): 401 authentication_failed".into()
        )));
        assert_eq!(
            events.last(),
            Some(&Event::Failed(Failure {
                class: Class::Auth,
                message: "Failed to authenticate. API Error: 401 Incorrect API key provided".into(),
            }))
        );
    }

    #[test]
    fn usage_is_summed_over_messages_with_the_latest_delta_of_each() {
        let mut parser = Parser::new(None, 8);
        let events = run(
            &mut parser,
            r#"{"type":"stream_event","event":{"type":"message_start","message":{"usage":{"input_tokens":5,"cache_read_input_tokens":100,"cache_creation_input_tokens":20,"output_tokens":1}}}}
{"type":"stream_event","event":{"type":"message_delta","usage":{"output_tokens":3}}}
{"type":"stream_event","event":{"type":"message_delta","usage":{"output_tokens":9}}}
{"type":"stream_event","event":{"type":"message_start","message":{"usage":{"input_tokens":7,"cache_read_input_tokens":120,"cache_creation_input_tokens":0,"output_tokens":1}}}}
{"type":"stream_event","event":{"type":"message_delta","usage":{"output_tokens":4}}}"#,
        );
        assert_eq!(
            last_usage(&events),
            Usage {
                input: Some(12),
                output: Some(13),
                cache_read: Some(220),
                cache_write: Some(20),
                thinking: None,
            }
        );
    }

    #[test]
    fn failures_are_classed_by_their_status() {
        let failed = |line: &str| {
            let mut parser = Parser::new(None, 3);
            match parser.parse(line).as_slice() {
                [Event::Failed(failure)] => failure.clone(),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(
            failed(r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":401,"result":"Invalid API key"}"#).class,
            Class::Auth
        );
        assert_eq!(
            failed(r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"result":"slow down"}"#).class,
            Class::RateLimit
        );
        assert_eq!(
            failed(r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":500,"result":"overloaded"}"#).class,
            Class::Crashed
        );
        let turns = failed(
            r#"{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":4}"#,
        );
        assert_eq!(turns.class, Class::Crashed);
        assert!(
            turns.message.contains("turn limit (3 turns)"),
            "{}",
            turns.message
        );
        let resume = failed(
            r#"{"type":"result","subtype":"error_during_execution","is_error":true,"errors":["No conversation found"]}"#,
        );
        assert_eq!(resume.message, "No conversation found");
    }

    #[test]
    fn other_lines() {
        let mut parser = Parser::new(None, 3);
        assert_eq!(
            parser.parse("Error: something broke"),
            [Event::Note(
                "claude-code printed a line that is not its stream-json: Error: something broke"
                    .into()
            )]
        );
        assert!(parser.parse("").is_empty());
        assert!(parser.parse(r#"{"type":"rate_limit_event"}"#).is_empty());
        assert!(
            parser
                .parse(r#"{"type":"system","subtype":"status"}"#)
                .is_empty()
        );
        assert_eq!(
            parser.parse(
                r#"{"type":"system","subtype":"init","session_id":"s","apiKeySource":"none"}"#
            ),
            [Event::Session {
                id: "s".into(),
                auth: "subscription".into(),
                model: None,
            }]
        );
        let long = "x".repeat(500);
        match parser.parse(&long).as_slice() {
            [Event::Note(note)] => assert!(note.ends_with(&"x".repeat(200)) && note.len() < 300),
            other => panic!("{other:?}"),
        }
        // A tool of another MCP server, or no bridge at all, is not bridged.
        let call = r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t","name":"mcp__other__x","input":{}}]}}"#;
        assert_eq!(
            Parser::new(Some("mur".into()), 3).parse(call),
            [Event::ToolCall {
                id: "t".into(),
                name: "mcp__other__x".into(),
                input: "{}".into(),
                bridged: false,
            }]
        );
        // Tool results made of several text parts, and errors.
        let result = r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t","is_error":true,"content":[{"type":"text","text":"a"},{"type":"image"},{"type":"text","text":"b"}]}]}}"#;
        assert_eq!(
            parser.parse(result),
            [Event::ToolResult {
                id: "t".into(),
                output: "a\nb".into(),
                is_error: true,
            }]
        );
    }
}
