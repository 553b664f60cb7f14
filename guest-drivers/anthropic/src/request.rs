//! The Messages API request a typed request becomes, serialized straight from structs
//! that borrow the request's text.

use mur_driver_kit::config::Config;
use mur_driver_kit::json::{ANY_OBJECT, Object};
use mur_driver_kit::request::{max_tokens, system};
use mur_driver_kit::types::{Block, Message, Request, Role, ToolSpec};
use serde::Serialize;

/// The API requires `max_tokens`; this is the host's own default, for a request without.
const DEFAULT_MAX_TOKENS: u32 = 8192;

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<&'a str>,
    messages: Vec<Turn<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
    stream: bool,
}

/// One message of the API's conversation.
#[derive(Serialize)]
struct Turn<'a> {
    role: &'static str,
    content: Vec<Part<'a>>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part<'a> {
    Text {
        text: &'a str,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Object<'a>,
    },
    ToolResult {
        tool_use_id: &'a str,
        /// Content is optional and an empty text is refused.
        #[serde(skip_serializing_if = "Option::is_none")]
        content: Option<&'a str>,
        is_error: bool,
    },
}

#[derive(Serialize)]
struct Tool<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    input_schema: Object<'a>,
}

/// The request body for `request`, asking for `model`.
pub fn body(request: &Request, model: &str, config: &Config) -> Result<Vec<u8>, String> {
    let sampling = config.sampling(&request.params);
    let body = Body {
        model,
        max_tokens: max_tokens(request).unwrap_or(DEFAULT_MAX_TOKENS),
        system: system(request),
        messages: turns(&request.messages),
        tools: request.tools.iter().map(tool).collect(),
        temperature: sampling.temperature,
        top_p: sampling.top_p,
        stop_sequences: sampling.stop,
        stream: config.stream,
    };
    serde_json::to_vec(&body).map_err(|e| format!("could not write the request: {e}"))
}

/// The conversation in Anthropic's shape. The API wants user and assistant turns to
/// alternate and has no tool role, so tool results become user content (each result a
/// `tool_result` block, in order) and neighbours of the same role are merged into one
/// message. Empty text blocks are refused by the API and left out, and a message left
/// with nothing is dropped.
fn turns(messages: &[Message]) -> Vec<Turn<'_>> {
    let mut turns: Vec<Turn<'_>> = Vec::with_capacity(messages.len());
    for message in messages {
        let (role, content): (_, Vec<Part<'_>>) = match message.role {
            Role::Assistant => (
                "assistant",
                message.content.iter().filter_map(assistant_part).collect(),
            ),
            Role::User | Role::Tool => ("user", message.content.iter().filter_map(said).collect()),
        };
        if content.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some(last) if last.role == role => last.content.extend(content),
            _ => turns.push(Turn { role, content }),
        }
    }
    turns
}

/// One block of a user or tool message: its words and its tool results.
fn said(block: &Block) -> Option<Part<'_>> {
    match block {
        Block::Text(text) if !text.is_empty() => Some(Part::Text { text }),
        Block::ToolResult(result) => Some(Part::ToolResult {
            tool_use_id: &result.call_id,
            content: Some(result.content.as_str()).filter(|c| !c.is_empty()),
            is_error: result.is_error,
        }),
        _ => None,
    }
}

/// One block of an earlier answer. Reasoning goes back only with its signature: the
/// API refuses unsigned thinking, and reasoning from another provider has none.
fn assistant_part(block: &Block) -> Option<Part<'_>> {
    match block {
        Block::Text(text) if !text.is_empty() => Some(Part::Text { text }),
        Block::ToolCall(call) => Some(Part::ToolUse {
            id: &call.id,
            name: &call.name,
            input: Object::or(&call.input, "{}"),
        }),
        Block::Thinking(thinking) => match thinking.signature.as_deref() {
            Some(signature) if !signature.is_empty() => Some(Part::Thinking {
                thinking: &thinking.text,
                signature,
            }),
            _ => None,
        },
        _ => None,
    }
}

fn tool(spec: &ToolSpec) -> Tool<'_> {
    Tool {
        name: &spec.name,
        description: Some(spec.description.as_str()).filter(|d| !d.is_empty()),
        input_schema: Object::or(&spec.input_schema, ANY_OBJECT),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mur_driver_kit::types::{Params, Thinking, ToolCall, ToolResult};
    use serde_json::json;

    fn text(text: &str) -> Block {
        Block::Text(text.into())
    }

    fn thinking(text: &str, signature: Option<&str>) -> Block {
        Block::Thinking(Thinking {
            text: text.into(),
            signature: signature.map(str::to_string),
        })
    }

    fn call(id: &str, input: &str) -> Block {
        Block::ToolCall(ToolCall {
            id: id.into(),
            name: "ls".into(),
            input: input.into(),
        })
    }

    fn result(id: &str, content: &str, is_error: bool) -> Block {
        Block::ToolResult(ToolResult {
            call_id: id.into(),
            content: content.into(),
            is_error,
        })
    }

    fn message(role: Role, content: Vec<Block>) -> Message {
        Message { role, content }
    }

    fn request(messages: Vec<Message>) -> Request {
        Request {
            model: "m".into(),
            max_tokens: 0,
            system: Some("sys".into()),
            messages,
            tools: vec![ToolSpec {
                name: "ls".into(),
                description: String::new(),
                input_schema: r#"{"type":"object"}"#.into(),
            }],
            params: Params {
                temperature: None,
                top_p: None,
                stop: vec![],
            },
        }
    }

    fn sent(request: &Request, config: &Config) -> String {
        String::from_utf8(body(request, "m", config).unwrap()).unwrap()
    }

    #[test]
    fn the_request_body_alternates_roles() {
        let asked = request(vec![
            message(Role::User, vec![text("a"), text("")]),
            message(
                Role::Assistant,
                vec![
                    thinking("hm", Some("s")),
                    thinking("unsigned", None),
                    thinking("empty signature", Some("")),
                    text("ok"),
                    call("c1", "{}"),
                    call("c2", r#"{"p":1}"#),
                ],
            ),
            message(Role::Tool, vec![result("c1", "r1", false)]),
            message(Role::Tool, vec![result("c2", "", true)]),
            message(Role::User, vec![text("more")]),
        ]);
        let config = Config {
            stream: false,
            temperature: None,
            top_p: Some(0.9),
        };
        assert_eq!(
            sent(&asked, &config),
            json!({
                "model": "m",
                "max_tokens": 8192,
                "system": "sys",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "a"}]},
                    {"role": "assistant", "content": [
                        {"type": "thinking", "thinking": "hm", "signature": "s"},
                        {"type": "text", "text": "ok"},
                        {"type": "tool_use", "id": "c1", "name": "ls", "input": {}},
                        {"type": "tool_use", "id": "c2", "name": "ls", "input": {"p": 1}}]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "c1", "content": "r1", "is_error": false},
                        {"type": "tool_result", "tool_use_id": "c2", "is_error": true},
                        {"type": "text", "text": "more"}]},
                ],
                "tools": [{"name": "ls", "input_schema": {"type": "object"}}],
                "top_p": 0.9,
                "stream": false,
            })
            .to_string()
        );
    }

    #[test]
    fn params_override_the_config_and_stop_becomes_stop_sequences() {
        let mut asked = request(vec![message(Role::User, vec![text("q")])]);
        asked.system = None;
        asked.tools.clear();
        asked.max_tokens = 100;
        asked.params = Params {
            temperature: Some(1.0),
            top_p: Some(0.25),
            stop: vec!["STOP".into()],
        };
        let config = Config {
            stream: true,
            temperature: Some(0.3),
            top_p: Some(0.9),
        };
        assert_eq!(
            sent(&asked, &config),
            r#"{"model":"m","max_tokens":100,"messages":[{"role":"user","content":[{"type":"text","text":"q"}]}],"temperature":1.0,"top_p":0.25,"stop_sequences":["STOP"],"stream":true}"#
        );
    }

    #[test]
    fn a_tool_message_of_several_results_merges_into_one_user_message() {
        let asked = request(vec![
            message(Role::User, vec![text("q")]),
            message(Role::Assistant, vec![call("a", "{}"), call("b", "{}")]),
            message(
                Role::Tool,
                vec![result("a", "ra", false), result("b", "rb", true)],
            ),
            message(Role::User, vec![text("go on")]),
            message(Role::Assistant, vec![text("")]),
            message(Role::User, vec![text("again")]),
        ]);
        let body: serde_json::Value =
            serde_json::from_str(&sent(&asked, &Config::default())).unwrap();
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "q"}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "a", "name": "ls", "input": {}},
                    {"type": "tool_use", "id": "b", "name": "ls", "input": {}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "a", "content": "ra", "is_error": false},
                    {"type": "tool_result", "tool_use_id": "b", "content": "rb", "is_error": true},
                    {"type": "text", "text": "go on"},
                    {"type": "text", "text": "again"}]},
            ])
        );
    }
}
