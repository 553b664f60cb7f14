//! Reading the typed request the way every provider needs it: which parts of a message
//! are said in words and which answer tool calls, and the request's optional settings.

use crate::types::{Block, Message, Request, ToolResult};

/// The system prompt, unless it is empty.
pub fn system(request: &Request) -> Option<&str> {
    request
        .system
        .as_deref()
        .filter(|system| !system.is_empty())
}

/// The output cap; `None` when the request leaves it to the provider (0).
pub fn max_tokens(request: &Request) -> Option<u32> {
    (request.max_tokens > 0).then_some(request.max_tokens)
}

/// The texts of a message's text blocks, in order.
pub fn texts(message: &Message) -> impl Iterator<Item = &str> {
    message.content.iter().filter_map(|block| match block {
        Block::Text(text) => Some(text.as_str()),
        _ => None,
    })
}

/// A message's tool results, in order.
pub fn results(message: &Message) -> impl Iterator<Item = &ToolResult> {
    message.content.iter().filter_map(|block| match block {
        Block::ToolResult(result) => Some(result),
        _ => None,
    })
}

/// The texts of a message joined by newlines, borrowed when there is just one.
pub fn joined_text(message: &Message) -> std::borrow::Cow<'_, str> {
    let mut texts = texts(message);
    let Some(first) = texts.next() else {
        return "".into();
    };
    match texts.next() {
        None => first.into(),
        Some(second) => {
            let mut joined = format!("{first}\n{second}");
            for text in texts {
                joined.push('\n');
                joined.push_str(text);
            }
            joined.into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Params, Role, ToolCall};

    fn message(content: Vec<Block>) -> Message {
        Message {
            role: Role::User,
            content,
        }
    }

    fn result(id: &str) -> Block {
        Block::ToolResult(ToolResult {
            call_id: id.into(),
            content: "r".into(),
            is_error: false,
        })
    }

    #[test]
    fn texts_and_results_are_told_apart_in_order() {
        let m = message(vec![
            result("a"),
            Block::Text("x".into()),
            Block::ToolCall(ToolCall {
                id: "c".into(),
                name: "n".into(),
                input: "{}".into(),
            }),
            result("b"),
            Block::Text("y".into()),
        ]);
        assert_eq!(texts(&m).collect::<Vec<_>>(), ["x", "y"]);
        let ids: Vec<&str> = results(&m).map(|r| r.call_id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(joined_text(&m), "x\ny");
        assert_eq!(joined_text(&message(vec![])), "");
        let one = message(vec![Block::Text("only".into())]);
        assert!(matches!(
            joined_text(&one),
            std::borrow::Cow::Borrowed("only")
        ));
    }

    #[test]
    fn empty_settings_mean_none() {
        let mut request = Request {
            model: String::new(),
            max_tokens: 0,
            system: Some(String::new()),
            messages: vec![],
            tools: vec![],
            params: Params {
                temperature: None,
                top_p: None,
                stop: vec![],
            },
        };
        assert_eq!((system(&request), max_tokens(&request)), (None, None));
        request.system = Some("s".into());
        request.max_tokens = 9;
        assert_eq!(
            (system(&request), max_tokens(&request)),
            (Some("s"), Some(9))
        );
    }
}
