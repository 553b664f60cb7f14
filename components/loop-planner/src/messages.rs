//! Building blocks of a conversation and of a request.

use crate::murmur::message::types::{Block, Message, Role, ToolResult};
use crate::murmur::session::types::{
    InferenceError, InferenceReply, InferenceRequest, Params, StopReason, TaskOutcome,
};

/// A user message of one text block: the task, an instruction of the loop, a hook's
/// feedback.
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

/// The text of a turn that was offered no tools. A model that asks for one anyway
/// cannot be answered, so the task ends: the reply stays out of the conversation,
/// where its calls would be left without results.
pub fn text_only(
    reply: Result<InferenceReply, InferenceError>,
    phase: &str,
    messages: &mut Vec<Message>,
) -> Result<String, TaskOutcome> {
    let reply = reply.map_err(TaskOutcome::InferenceFailed)?;
    if matches!(reply.stop_reason, StopReason::ToolCall) {
        return Err(TaskOutcome::Failed(format!(
            "the model asked for a tool while {phase}, when it was offered none"
        )));
    }
    messages.push(reply.message);
    Ok(reply.text)
}
