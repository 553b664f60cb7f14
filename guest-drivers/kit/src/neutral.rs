//! The neutral request and reply the host and every driver speak (the JSON shapes of
//! `murmur:driver/inference`, which upstream Murmur's drivers use too), as Rust types a
//! driver translates from and to.

use serde_json::{Map, Value, json};

/// One inference call as the host asks for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub model: String,
    pub max_tokens: Option<u64>,
    pub system: Option<String>,
    pub messages: Vec<Message>,
    pub tools: Vec<Tool>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// The texts of a user message, one per text block.
    User(Vec<String>),
    /// The blocks a driver returned earlier, handed back unchanged.
    Assistant(Vec<Block>),
    /// What one tool call gave back.
    Tool {
        call_id: String,
        is_error: bool,
        texts: Vec<String>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// A JSON Schema for the tool's input.
    pub parameters: Value,
}

/// A piece of a model's answer, in the host's words.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Text(String),
    ToolCall {
        id: String,
        name: String,
        /// Always a JSON object.
        input: Value,
    },
    Thinking {
        text: String,
        /// The provider's proof that it wrote this reasoning (Anthropic), needed to send
        /// it back.
        signature: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    EndTurn,
    ToolCall,
    MaxTokens,
}

/// Token counts; `None` where the provider did not say (absent is not zero).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
    pub cache_write_tokens: Option<u64>,
    pub thinking_tokens: Option<u64>,
}

/// One answer as the host reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub stop_reason: StopReason,
    pub content: Vec<Block>,
    pub usage: Usage,
}

impl Request {
    /// Reads the host's request JSON. Unknown block types in the history are skipped;
    /// anything that would make the conversation wrong (an unknown role, a tool result
    /// without its call id) is refused.
    pub fn parse(json: &str) -> Result<Request, String> {
        let value: Value =
            serde_json::from_str(json).map_err(|e| format!("the request is not JSON: {e}"))?;
        let messages = match value.get("messages") {
            Some(Value::Array(messages)) => messages,
            None | Some(Value::Null) => &Vec::new(),
            Some(_) => return Err("the request's 'messages' is not a list".into()),
        };
        let messages = messages
            .iter()
            .enumerate()
            .map(|(i, m)| parse_message(m).map_err(|e| format!("request message {}: {e}", i + 1)))
            .collect::<Result<_, _>>()?;
        let tools = match value.get("tools") {
            Some(Value::Array(tools)) => tools.iter().map(parse_tool).collect::<Result<_, _>>()?,
            None | Some(Value::Null) => Vec::new(),
            Some(_) => return Err("the request's 'tools' is not a list".into()),
        };
        Ok(Request {
            model: string(&value, "model").unwrap_or_default(),
            max_tokens: value.get("max_tokens").and_then(Value::as_u64),
            system: string(&value, "system").filter(|s| !s.is_empty()),
            messages,
            tools,
        })
    }
}

fn parse_message(value: &Value) -> Result<Message, String> {
    match value.get("role").and_then(Value::as_str) {
        Some("user") => Ok(Message::User(texts(value.get("content")))),
        Some("assistant") => assistant_blocks(value.get("content")).map(Message::Assistant),
        Some("tool") => Ok(Message::Tool {
            call_id: string(value, "tool_call_id").ok_or("a tool result has no 'tool_call_id'")?,
            is_error: value
                .get("is_error")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            texts: texts(value.get("content")),
        }),
        Some(role) => Err(format!(
            "unknown role '{role}' (known: user, assistant, tool)"
        )),
        None => Err("it has no 'role'".into()),
    }
}

/// The texts of `content`, which may be a plain string or a list of blocks.
fn texts(content: Option<&Value>) -> Vec<String> {
    match content {
        Some(Value::String(text)) => vec![text.clone()],
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter(|b| matches!(b.get("type").and_then(Value::as_str), None | Some("text")))
            .filter_map(|b| string(b, "text"))
            .collect(),
        _ => Vec::new(),
    }
}

fn assistant_blocks(content: Option<&Value>) -> Result<Vec<Block>, String> {
    let blocks = match content {
        Some(Value::String(text)) => return Ok(vec![Block::Text(text.clone())]),
        Some(Value::Array(blocks)) => blocks,
        _ => return Ok(Vec::new()),
    };
    let mut out = Vec::new();
    for block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => out.push(Block::Text(string(block, "text").unwrap_or_default())),
            Some("tool_call") => out.push(Block::ToolCall {
                id: string(block, "id").unwrap_or_default(),
                name: string(block, "name").ok_or("a tool_call block has no 'name'")?,
                input: match block.get("input") {
                    Some(input @ Value::Object(_)) => input.clone(),
                    _ => Value::Object(Map::new()),
                },
            }),
            Some("thinking") => out.push(Block::Thinking {
                text: string(block, "text").unwrap_or_default(),
                signature: string(block, "signature").filter(|s| !s.is_empty()),
            }),
            // Blocks a later host might add mean nothing to a provider that never sent them.
            _ => {}
        }
    }
    Ok(out)
}

fn parse_tool(value: &Value) -> Result<Tool, String> {
    let name = string(value, "name").ok_or("a tool in the request has no 'name'")?;
    Ok(Tool {
        description: string(value, "description").filter(|d| !d.is_empty()),
        parameters: match value.get("parameters") {
            Some(schema @ Value::Object(_)) => schema.clone(),
            _ => json!({"type": "object", "properties": {}}),
        },
        name,
    })
}

fn string(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(str::to_string)
}

impl StopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::ToolCall => "tool_call",
            StopReason::MaxTokens => "max_tokens",
        }
    }
}

impl Usage {
    fn to_json(&self) -> Map<String, Value> {
        let mut map = Map::new();
        let counts = [
            ("input_tokens", self.input_tokens),
            ("output_tokens", self.output_tokens),
            ("cached_tokens", self.cached_tokens),
            ("cache_write_tokens", self.cache_write_tokens),
            ("thinking_tokens", self.thinking_tokens),
        ];
        for (key, count) in counts {
            if let Some(count) = count {
                map.insert(key.into(), count.into());
            }
        }
        map
    }
}

impl Block {
    pub fn to_json(&self) -> Value {
        match self {
            Block::Text(text) => json!({"type": "text", "text": text}),
            Block::ToolCall { id, name, input } => {
                json!({"type": "tool_call", "id": id, "name": name, "input": input})
            }
            Block::Thinking { text, signature } => {
                let mut block = json!({"type": "thinking", "text": text});
                if let (Some(signature), Value::Object(map)) = (signature, &mut block) {
                    map.insert("signature".into(), signature.clone().into());
                }
                block
            }
        }
    }
}

impl Reply {
    /// The reply JSON; `usage` is left out when the provider reported no count at all.
    pub fn to_json(&self) -> String {
        let mut reply = Map::new();
        reply.insert("stop_reason".into(), self.stop_reason.as_str().into());
        let content = self.content.iter().map(Block::to_json).collect();
        reply.insert("content".into(), Value::Array(content));
        let usage = self.usage.to_json();
        if !usage.is_empty() {
            reply.insert("usage".into(), Value::Object(usage));
        }
        Value::Object(reply).to_string()
    }
}

/// Reads tool-call arguments a model produced as text. Empty means no arguments; a
/// JSON string holding an object (some models encode twice) is unwrapped.
pub fn tool_input(name: &str, arguments: &str) -> Result<Value, String> {
    if arguments.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    let value: Value = serde_json::from_str(arguments).map_err(|e| {
        format!(
            "the model sent tool-call arguments for '{name}' that are not JSON ({e}): {}",
            clip(arguments, 300)
        )
    })?;
    match value {
        Value::Object(_) => Ok(value),
        Value::Null => Ok(Value::Object(Map::new())),
        Value::String(inner) if inner.trim_start().starts_with('{') => tool_input(name, &inner),
        _ => Err(format!(
            "the model sent tool-call arguments for '{name}' that are not a JSON object: {}",
            clip(arguments, 300)
        )),
    }
}

/// At most `max` characters of `text`, marked when cut, for quoting in messages.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_read() {
        let request = Request::parse(
            r#"{"model":"m","max_tokens":100,"system":"be brief","params":{},
            "messages":[
              {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
              {"role":"assistant","content":[
                {"type":"thinking","text":"hm","signature":"sig"},
                {"type":"text","text":"ok"},
                {"type":"tool_call","id":"c1","name":"ls","input":{"p":1}},
                {"type":"future","x":1}]},
              {"role":"tool","tool_call_id":"c1","is_error":true,"content":"boom"},
              {"role":"user","content":"plain"}],
            "tools":[{"name":"ls","parameters":{"type":"object"}},{"name":"x","description":""}]}"#,
        )
        .unwrap();
        assert_eq!(request.model, "m");
        assert_eq!(request.max_tokens, Some(100));
        assert_eq!(request.system.as_deref(), Some("be brief"));
        assert_eq!(
            request.messages,
            vec![
                Message::User(vec!["a".into(), "b".into()]),
                Message::Assistant(vec![
                    Block::Thinking {
                        text: "hm".into(),
                        signature: Some("sig".into())
                    },
                    Block::Text("ok".into()),
                    Block::ToolCall {
                        id: "c1".into(),
                        name: "ls".into(),
                        input: json!({"p":1})
                    },
                ]),
                Message::Tool {
                    call_id: "c1".into(),
                    is_error: true,
                    texts: vec!["boom".into()]
                },
                Message::User(vec!["plain".into()]),
            ]
        );
        assert_eq!(request.tools[1].description, None);
        assert_eq!(
            request.tools[1].parameters,
            json!({"type":"object","properties":{}})
        );
    }

    #[test]
    fn a_broken_request_is_refused_in_words() {
        assert!(Request::parse("{").unwrap_err().contains("not JSON"));
        let err = Request::parse(r#"{"messages":[{"role":"user"},{"role":"bot"}]}"#).unwrap_err();
        assert!(err.contains("message 2") && err.contains("bot"), "{err}");
        assert!(Request::parse(r#"{"messages":[{"role":"tool"}]}"#).is_err());
    }

    #[test]
    fn a_reply_leaves_out_what_was_not_reported() {
        let reply = Reply {
            stop_reason: StopReason::ToolCall,
            content: vec![
                Block::Thinking {
                    text: "t".into(),
                    signature: None,
                },
                Block::ToolCall {
                    id: "1".into(),
                    name: "n".into(),
                    input: json!({}),
                },
            ],
            usage: Usage {
                input_tokens: Some(3),
                ..Usage::default()
            },
        };
        assert_eq!(
            reply.to_json(),
            r#"{"stop_reason":"tool_call","content":[{"type":"thinking","text":"t"},{"type":"tool_call","id":"1","name":"n","input":{}}],"usage":{"input_tokens":3}}"#
        );
        let bare = Reply {
            stop_reason: StopReason::EndTurn,
            content: vec![],
            usage: Usage::default(),
        };
        assert_eq!(bare.to_json(), r#"{"stop_reason":"end_turn","content":[]}"#);
    }

    #[test]
    fn tool_arguments_are_read_tolerantly() {
        assert_eq!(tool_input("t", "").unwrap(), json!({}));
        assert_eq!(tool_input("t", "null").unwrap(), json!({}));
        assert_eq!(tool_input("t", r#""{\"a\":1}""#).unwrap(), json!({"a":1}));
        assert!(tool_input("t", "{\"a\":").unwrap_err().contains("not JSON"));
        assert!(
            tool_input("t", "[1]")
                .unwrap_err()
                .contains("not a JSON object")
        );
    }

    #[test]
    fn clip_marks_the_cut() {
        assert_eq!(clip("héllo", 2), "hé…");
        assert_eq!(clip("hé", 2), "hé");
    }
}
