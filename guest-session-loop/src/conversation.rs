//! The messages the loop itself adds to a conversation.

use crate::murmur::message::types::{Block, Message, Role, ToolResult};

/// A user message of one text block: the task, or a hook's feedback.
pub fn user(text: String) -> Message {
    Message {
        role: Role::User,
        content: vec![Block::Text(text)],
    }
}

/// One `tool` message holding every result of a reply's calls, in call order.
pub fn tool_results(results: Vec<ToolResult>) -> Message {
    Message {
        role: Role::Tool,
        content: results.into_iter().map(Block::ToolResult).collect(),
    }
}
