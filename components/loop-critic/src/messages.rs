//! Building blocks of a conversation and of a request.

use crate::murmur::message::types::{Block, Message, Role, ToolResult};
use crate::murmur::session::types::{InferenceRequest, Params};

/// A user message of one text block.
pub fn user(text: impl Into<String>) -> Message {
    Message {
        role: Role::User,
        content: vec![Block::Text(text.into())],
    }
}

/// One `tool` message holding every result of a reply's calls, in call order.
pub fn tool_results(results: Vec<ToolResult>) -> Message {
    Message {
        role: Role::Tool,
        content: results.into_iter().map(Block::ToolResult).collect(),
    }
}

/// A request for `messages` with the manifest's model parameters and output cap: only
/// the system addition and the tools offered are the loop's.
pub fn request(
    messages: &[Message],
    system: Option<String>,
    tools: Option<Vec<String>>,
) -> InferenceRequest {
    InferenceRequest {
        messages: messages.to_vec(),
        system,
        tools,
        max_tokens: None,
        params: Params {
            temperature: None,
            top_p: None,
            stop: Vec::new(),
        },
    }
}
