//! A driver's typed answer read into the reply a session loop receives: the assistant
//! message (its tool calls cut at the task's bound), its text, its calls, and the usage
//! the provider reported, with the host's estimates where it reported none.

use serde_json::{Map, Value};

use crate::bindings::driver::exports::murmur::driver::inference::{
    Response, StopReason as Stop, Usage as Reported,
};
use crate::bindings::message::{Block, Message, Role, ToolCall};
use crate::bindings::session_loop::murmur::session::types::{
    InferenceError, InferenceReply, StopReason, Usage,
};
use crate::conversation;

/// A reply the loop can use, what the provider reported of its usage (as the trace
/// records it), and the host's estimate of the reply's size.
pub struct Parsed {
    pub reply: InferenceReply,
    pub reported: Map<String, Value>,
    pub output_estimate: u64,
}

/// Reads `response`, the driver's answer to a request the host estimated at
/// `input_estimate` tokens. At most `keep_calls` tool calls are kept, the first ones:
/// past the task's bound every further call would be refused unrun, so a reply asking
/// for more is cut before the loop or the conversation holds it.
pub fn read(
    response: Response,
    input_estimate: u64,
    keep_calls: u64,
) -> Result<Parsed, InferenceError> {
    let stop_reason = match response.stop_reason {
        Stop::EndTurn => StopReason::EndTurn,
        Stop::ToolCall => StopReason::ToolCall,
        Stop::MaxTokens => StopReason::MaxTokens,
    };
    let message = Message {
        role: Role::Assistant,
        content: first_calls(response.content, keep_calls),
    };
    let tool_calls: Vec<ToolCall> = message
        .content
        .iter()
        .filter_map(|b| match b {
            Block::ToolCall(call) => Some(call.clone()),
            _ => None,
        })
        .collect();
    if stop_reason == StopReason::ToolCall && tool_calls.is_empty() {
        return Err(InferenceError::Failed(
            "response stop_reason=tool_call but no tool_call blocks were present".into(),
        ));
    }
    let output_estimate = conversation::tokens(&message);
    let reported = reported(&response.usage);
    let usage = Usage {
        input_tokens: response.usage.input_tokens.unwrap_or(input_estimate),
        output_tokens: response.usage.output_tokens.unwrap_or(output_estimate),
        reported: response.usage.input_tokens.is_some() && response.usage.output_tokens.is_some(),
    };
    let reply = InferenceReply {
        stop_reason,
        text: conversation::text(&message),
        message,
        tool_calls,
        usage,
    };
    Ok(Parsed {
        reply,
        reported,
        output_estimate,
    })
}

/// The counts the provider reported, in the trace's order and names.
fn reported(usage: &Reported) -> Map<String, Value> {
    [
        ("input_tokens", usage.input_tokens),
        ("output_tokens", usage.output_tokens),
        ("cached_tokens", usage.cached_tokens),
        ("cache_write_tokens", usage.cache_write_tokens),
        ("thinking_tokens", usage.thinking_tokens),
    ]
    .into_iter()
    .filter_map(|(key, n)| Some((key.to_string(), n?.into())))
    .collect()
}

/// The blocks with at most `keep` tool calls, the first ones; a call without input
/// gets an empty object.
fn first_calls(blocks: Vec<Block>, keep: u64) -> Vec<Block> {
    let mut calls = 0u64;
    blocks
        .into_iter()
        .filter_map(|block| match block {
            Block::ToolCall(mut call) => {
                calls += 1;
                if call.input.trim().is_empty() {
                    call.input = "{}".into();
                }
                (calls <= keep).then_some(Block::ToolCall(call))
            }
            other => Some(other),
        })
        .collect()
}

/// The trace's `decision` of a reply, and the first tool it asks for.
pub fn decision(reply: &InferenceReply) -> (&'static str, Option<String>) {
    match reply.stop_reason {
        StopReason::ToolCall => (
            "tool_call",
            reply.tool_calls.first().map(|c| c.name.clone()),
        ),
        StopReason::EndTurn => ("end_turn", None),
        StopReason::MaxTokens => ("text", None),
    }
}

/// A stop reason as the trace names it.
pub fn stop_reason_name(reason: StopReason) -> &'static str {
    match reason {
        StopReason::EndTurn => "end_turn",
        StopReason::ToolCall => "tool_call",
        StopReason::MaxTokens => "max_tokens",
    }
}

#[cfg(test)]
mod tests;
