//! Compaction: a hook's replacement of the conversation, checked before it is
//! committed. A message returned unchanged keeps everything it had (tool calls, ids,
//! signed reasoning); a tool result survives only unchanged, every result must still
//! follow its call, and a last message asking for tools must stay last, unchanged,
//! since its results come next. Otherwise the replacement is declined.

use crate::bindings::message::{Block, Message, Role};
use crate::conversation;

/// Why a replacement was not committed, in the trace's words.
pub const UNRESOLVED_TOOL_CALL: &str = "unresolved_tool_call";

/// The replacement, or why it cannot be committed.
pub fn check(
    originals: &[Message],
    replacement: Vec<Message>,
) -> Result<Vec<Message>, &'static str> {
    let mut used = vec![false; originals.len()];
    for message in &replacement {
        let found = (0..originals.len()).find(|&i| !used[i] && originals[i] == *message);
        match found {
            Some(i) => used[i] = true,
            // A changed or invented tool result cannot be tied to its call any more.
            None if message.role == Role::Tool || has_result(message) => {
                return Err(UNRESOLVED_TOOL_CALL);
            }
            None => {}
        }
    }
    if let Some(current) = originals.last()
        && conversation::call_ids(current).next().is_some()
        && replacement.last() != Some(current)
    {
        return Err(UNRESOLVED_TOOL_CALL);
    }
    if !conversation::calls_meet_results(&replacement) {
        return Err(UNRESOLVED_TOOL_CALL);
    }
    Ok(replacement)
}

fn has_result(message: &Message) -> bool {
    message
        .content
        .iter()
        .any(|b| matches!(b, Block::ToolResult(_)))
}

/// What a committed replacement wrote in place of the dropped messages: the text of
/// each message that was not in the conversation before.
pub fn summary(old: &[Message], new: &[Message]) -> String {
    new.iter()
        .filter(|message| !old.contains(message))
        .map(conversation::text)
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::samples::{asking, result, user};

    #[test]
    fn unchanged_messages_and_new_text_are_committed() {
        let originals = vec![user("task"), asking("c1"), result("c1", "a"), asking("c2")];
        let mut replacement = vec![user("Summary.")];
        replacement.extend_from_slice(&originals[1..]);
        assert_eq!(
            check(&originals, replacement.clone()),
            Ok(replacement.clone())
        );
        assert_eq!(summary(&originals, &replacement), "Summary.");
    }

    #[test]
    fn a_dropped_call_or_a_changed_result_is_declined() {
        let originals = vec![user("task"), asking("c1"), result("c1", "a"), asking("c2")];
        // The result of c1 kept without the message that asked for it.
        let orphan = originals[2..].to_vec();
        assert_eq!(check(&originals, orphan), Err(UNRESOLVED_TOOL_CALL));
        // The current call dropped.
        assert_eq!(
            check(&originals, originals[..1].to_vec()),
            Err(UNRESOLVED_TOOL_CALL)
        );
        let changed = vec![asking("c1"), result("c1", "edited"), asking("c2")];
        assert_eq!(check(&originals, changed), Err(UNRESOLVED_TOOL_CALL));
    }

    #[test]
    fn a_conversation_ending_in_an_answer_may_be_replaced_whole() {
        let originals = vec![
            user("task"),
            Message {
                role: Role::Assistant,
                content: vec![Block::Text("done".into())],
            },
        ];
        assert_eq!(
            check(&originals, vec![user("short")]),
            Ok(vec![user("short")])
        );
    }
}
