//! The Chat Completions request a typed request becomes, serialized straight from
//! structs that borrow the request's text.

use mur_driver_kit::config::Config;
use mur_driver_kit::json::{ANY_OBJECT, Object};
use mur_driver_kit::request::{joined_text, max_tokens, results, system, texts};
use mur_driver_kit::types::{Block, Message, Request, Role, ToolSpec};
use serde::{Serialize, Serializer};
use std::borrow::Cow;

/// The body, its keys in the order the API's documentation gives them.
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: Vec<Out<'a>>,
    /// `max_tokens` rather than `max_completion_tokens`: the local servers know only it.
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop: &'a [String],
    stream: bool,
    /// Without it a stream carries no token counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// One message of the API's conversation.
#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum Out<'a> {
    System {
        content: &'a str,
    },
    User {
        content: Cow<'a, str>,
    },
    Assistant {
        /// Null content is meant for a message that only calls tools; elsewhere servers
        /// want a string, even an empty one.
        content: Option<Cow<'a, str>>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<Call<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

#[derive(Serialize)]
struct Call<'a> {
    id: &'a str,
    r#type: &'static str,
    function: Function<'a>,
}

#[derive(Serialize)]
struct Function<'a> {
    name: &'a str,
    /// The input object's JSON text, as a string.
    #[serde(serialize_with = "as_text")]
    arguments: Object<'a>,
}

#[derive(Serialize)]
struct Tool<'a> {
    r#type: &'static str,
    function: ToolFunction<'a>,
}

#[derive(Serialize)]
struct ToolFunction<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    parameters: Object<'a>,
}

fn as_text<S: Serializer>(object: &Object<'_>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(object.as_str())
}

/// The request body for `request`, asking for `model`.
pub fn body(request: &Request, model: &str, config: &Config) -> Result<Vec<u8>, String> {
    let sampling = config.sampling(&request.params);
    let body = Body {
        model,
        messages: messages(request),
        max_tokens: max_tokens(request),
        tools: request.tools.iter().map(tool).collect(),
        temperature: sampling.temperature,
        top_p: sampling.top_p,
        stop: sampling.stop,
        stream: config.stream,
        stream_options: config.stream.then_some(StreamOptions {
            include_usage: true,
        }),
    };
    serde_json::to_vec(&body).map_err(|e| format!("could not write the request: {e}"))
}

fn messages(request: &Request) -> Vec<Out<'_>> {
    let mut out = Vec::with_capacity(request.messages.len() + 1);
    if let Some(content) = system(request) {
        out.push(Out::System { content });
    }
    for message in &request.messages {
        match message.role {
            Role::Assistant => out.push(assistant(message)),
            Role::User | Role::Tool => said(message, &mut out),
        }
    }
    out
}

/// A user or tool message: one `tool` message per tool result (the API wants them right
/// after the call), then the words, if any, as a user message. A user message with
/// neither is still sent, empty, as it always was.
fn said<'a>(message: &'a Message, out: &mut Vec<Out<'a>>) {
    let mut answered = false;
    for result in results(message) {
        answered = true;
        out.push(Out::Tool {
            tool_call_id: &result.call_id,
            content: &result.content,
        });
    }
    let speaks = texts(message).next().is_some();
    if speaks || (matches!(message.role, Role::User) && !answered) {
        out.push(Out::User {
            content: joined_text(message),
        });
    }
}

/// An earlier answer. Reasoning is not sent back: the API has no place for it and some
/// servers refuse it.
fn assistant(message: &Message) -> Out<'_> {
    let tool_calls: Vec<Call<'_>> = message
        .content
        .iter()
        .filter_map(|block| match block {
            Block::ToolCall(call) => Some(Call {
                id: &call.id,
                r#type: "function",
                function: Function {
                    name: &call.name,
                    arguments: Object::or(&call.input, "{}"),
                },
            }),
            _ => None,
        })
        .collect();
    let text = joined_text(message);
    let content = if text.is_empty() && !tool_calls.is_empty() {
        None
    } else {
        Some(text)
    };
    Out::Assistant {
        content,
        tool_calls,
    }
}

fn tool(spec: &ToolSpec) -> Tool<'_> {
    Tool {
        r#type: "function",
        function: ToolFunction {
            name: &spec.name,
            description: Some(spec.description.as_str()).filter(|d| !d.is_empty()),
            parameters: Object::or(&spec.input_schema, ANY_OBJECT),
        },
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

    fn call(id: &str, name: &str, input: &str) -> Block {
        Block::ToolCall(ToolCall {
            id: id.into(),
            name: name.into(),
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

    fn no_params() -> Params {
        Params {
            temperature: None,
            top_p: None,
            stop: vec![],
        }
    }

    fn request(messages: Vec<Message>) -> Request {
        Request {
            model: "m".into(),
            max_tokens: 50,
            system: Some("sys".into()),
            messages,
            tools: vec![ToolSpec {
                name: "ls".into(),
                description: "list".into(),
                input_schema: r#"{"type":"object"}"#.into(),
            }],
            params: no_params(),
        }
    }

    fn conversation() -> Request {
        request(vec![
            message(Role::User, vec![text("a"), text("b")]),
            message(
                Role::Assistant,
                vec![
                    Block::Thinking(Thinking {
                        text: "hm".into(),
                        signature: None,
                    }),
                    call("c1", "ls", r#"{"p":"/"}"#),
                ],
            ),
            message(Role::Tool, vec![result("c1", "x", false)]),
            message(Role::Assistant, vec![text("done")]),
        ])
    }

    fn sent(request: &Request, config: &Config) -> String {
        String::from_utf8(body(request, "m", config).unwrap()).unwrap()
    }

    #[test]
    fn the_request_body() {
        let config = Config {
            stream: true,
            temperature: Some(0.5),
            top_p: None,
        };
        assert_eq!(
            sent(&conversation(), &config),
            json!({
                "model": "m",
                "messages": [
                    {"role": "system", "content": "sys"},
                    {"role": "user", "content": "a\nb"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{\"p\":\"/\"}"}}]},
                    {"role": "tool", "tool_call_id": "c1", "content": "x"},
                    {"role": "assistant", "content": "done"},
                ],
                "max_tokens": 50,
                "tools": [{"type": "function", "function": {"name": "ls", "description": "list", "parameters": {"type": "object"}}}],
                "temperature": 0.5,
                "stream": true,
                "stream_options": {"include_usage": true},
            })
            .to_string()
        );
        let mut plain = request(vec![]);
        plain.system = None;
        plain.max_tokens = 0;
        plain.tools.clear();
        assert_eq!(
            sent(&plain, &Config::default()),
            r#"{"model":"m","messages":[],"stream":false}"#
        );
    }

    #[test]
    fn params_override_the_config_and_add_stop() {
        let config = Config {
            stream: false,
            temperature: Some(0.5),
            top_p: Some(0.9),
        };
        let mut asked = request(vec![message(Role::User, vec![text("q")])]);
        asked.system = None;
        asked.tools.clear();
        asked.params = Params {
            temperature: Some(0.0),
            top_p: None,
            stop: vec!["END".into(), "\n\n".into()],
        };
        assert_eq!(
            sent(&asked, &config),
            r#"{"model":"m","messages":[{"role":"user","content":"q"}],"max_tokens":50,"temperature":0.0,"top_p":0.9,"stop":["END","\n\n"],"stream":false}"#
        );
    }

    #[test]
    fn a_tool_message_of_several_results_is_one_tool_message_each() {
        let asked = request(vec![
            message(Role::User, vec![text("q")]),
            message(
                Role::Assistant,
                vec![text("two"), call("a", "ls", "{}"), call("b", "ls", "{}")],
            ),
            message(
                Role::Tool,
                vec![result("a", "ra", false), result("b", "rb", true)],
            ),
            message(
                Role::User,
                vec![result("c", "rc", false), text("and"), text("more")],
            ),
        ]);
        let body: serde_json::Value =
            serde_json::from_str(&sent(&asked, &Config::default())).unwrap();
        assert_eq!(
            body["messages"],
            json!([
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "two", "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
                    {"id": "b", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "a", "content": "ra"},
                {"role": "tool", "tool_call_id": "b", "content": "rb"},
                {"role": "tool", "tool_call_id": "c", "content": "rc"},
                {"role": "user", "content": "and\nmore"},
            ])
        );
    }

    #[test]
    fn inputs_and_schemas_that_are_not_objects_are_replaced() {
        let mut asked = request(vec![message(
            Role::Assistant,
            vec![call("a", "ls", "[1]"), call("b", "ls", "{ \"x\" : 1 }")],
        )]);
        asked.tools[0].input_schema = "nope".into();
        asked.tools[0].description.clear();
        let body: serde_json::Value =
            serde_json::from_str(&sent(&asked, &Config::default())).unwrap();
        let calls = &body["messages"][1]["tool_calls"];
        assert_eq!(calls[0]["function"]["arguments"], "{}");
        assert_eq!(calls[1]["function"]["arguments"], r#"{"x":1}"#);
        assert_eq!(
            body["tools"][0],
            json!({"type": "function", "function": {"name": "ls", "parameters": {"type": "object", "properties": {}}}})
        );
    }
}
