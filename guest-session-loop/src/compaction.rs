//! The seed's compaction rule, now the loop's: once a reply's tokens reach
//! `inference.compaction.threshold` of `context.max_tokens`, the `on-compaction`
//! hooks may replace the conversation. Another loop may choose another rule.

use crate::murmur::message::types::Message;
use crate::murmur::session::host;
use crate::murmur::session::types::{InferenceError, TaskOutcome, Usage};

/// After a reply has joined `messages`: compacts them when the reply's size crossed the
/// threshold. `Err` is the outcome that ends the task (the hook failed).
pub fn after_reply(messages: &mut Vec<Message>, usage: Usage) -> Result<(), TaskOutcome> {
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
        // As before: a failed compaction ends the task like a failed inference.
        Err(why) => return Err(TaskOutcome::InferenceFailed(InferenceError::Failed(why))),
    }
    Ok(())
}
