//! The v1 messages the task store writes into a task's history and status.

use ::a2a::{Message, Part, Role, TaskState, TaskStatus};
use chrono::Utc;

/// A message stamped with the task and context it belongs to.
pub(super) fn joined(mut message: Message, id: &str, context: &str) -> Message {
    message.task_id = Some(id.to_string());
    message.context_id = Some(context.to_string());
    message
}

/// A message from the agent: one text part.
pub(super) fn agent_message(id: &str, context: &str, text: &str) -> Message {
    let mut message = Message::new(Role::Agent, vec![Part::text(text)]);
    message.message_id = crate::ids::message();
    joined(message, id, context)
}

pub(super) fn status_now(state: TaskState, message: Option<Message>) -> TaskStatus {
    TaskStatus {
        state,
        message,
        timestamp: Some(Utc::now()),
    }
}
