//! The default strategy: infer with every tool, run the calls the model asks for, go
//! on until it ends its turn; past the compaction threshold, let the `on-compaction`
//! hooks replace the conversation.

use crate::messages::{request, tool_results};
use crate::murmur::message::types::Message;
use crate::murmur::session::host;
use crate::murmur::session::types::{InferenceError, StopReason, TaskOutcome, Usage};

/// The model's answer once it ends its turn; every reply and tool result joins
/// `messages`. `Err` is how the task ended instead.
pub fn answer(messages: &mut Vec<Message>) -> Result<String, TaskOutcome> {
    loop {
        let asked = host::infer(&request(messages, None, None));
        let reply = asked.map_err(TaskOutcome::InferenceFailed)?;
        // The provider needs to see its own tool calls before the results that answer them.
        messages.push(reply.message);
        compact(messages, reply.usage)?;
        match reply.stop_reason {
            StopReason::EndTurn | StopReason::MaxTokens => return Ok(reply.text),
            StopReason::ToolCall => {
                let results = host::call_tools(&reply.tool_calls);
                messages.push(tool_results(results.map_err(TaskOutcome::Failed)?));
            }
        }
    }
}

/// The seed's rule: once a reply's tokens reach `inference.compaction.threshold` of
/// `context.max_tokens`, the hooks may replace the conversation.
fn compact(messages: &mut Vec<Message>, usage: Usage) -> Result<(), TaskOutcome> {
    let budget = host::budget(messages).map_err(TaskOutcome::Failed)?;
    let Some(window) = budget.window else {
        return Ok(());
    };
    let size = usage.input_tokens + usage.output_tokens;
    if (size as f64) < budget.threshold * f64::from(window) {
        return Ok(());
    }
    match host::compact(messages, Some(usage)) {
        Ok(Some(compacted)) => *messages = compacted,
        Ok(None) => {}
        Err(why) => return Err(TaskOutcome::InferenceFailed(InferenceError::Failed(why))),
    }
    Ok(())
}
