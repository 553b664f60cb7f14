//! What a guest hands the host, checked against the capsule's own limits before the
//! host builds anything from it: a list of messages (a seed, a compaction's
//! replacement, a conversation to keep, an inference request) by its messages, blocks
//! and text, and an answer by its bytes. wasmtime's hostcall fuel (`Limits::
//! hostcall_bytes`) already refused anything larger while lifting it; these checks name
//! the key a capsule's author would raise.

use crate::bindings::message::{Block, Message};
use crate::limits::{Limits, over};

/// `Err` names the first bound `messages` passes (`what` says which list it is).
pub fn messages(what: &str, messages: &[Message], limits: &Limits) -> Result<(), String> {
    let count = messages.len() as u64;
    if count > limits.max_conversation_messages {
        return Err(format!(
            "{what} of {count} messages is over capabilities.limits.max_conversation_messages ({})",
            limits.max_conversation_messages
        ));
    }
    let blocks: u64 = messages.iter().map(|m| m.content.len() as u64).sum();
    if blocks > limits.max_conversation_blocks {
        return Err(format!(
            "{what} of {blocks} blocks is over capabilities.limits.max_conversation_blocks ({})",
            limits.max_conversation_blocks
        ));
    }
    let bytes = text_bytes(messages);
    if bytes > limits.max_conversation_bytes {
        return Err(over(
            what,
            bytes,
            "max_conversation_bytes",
            limits.max_conversation_bytes,
        ));
    }
    Ok(())
}

/// `Err` when a task's answer is over `max_answer_bytes`.
pub fn answer(answer: &str, limits: &Limits) -> Result<(), String> {
    let bytes = answer.len() as u64;
    if bytes > limits.max_answer_bytes {
        return Err(over(
            "the task's answer",
            bytes,
            "max_answer_bytes",
            limits.max_answer_bytes,
        ));
    }
    Ok(())
}

/// The text the messages hold, every string of every block.
pub fn text_bytes(messages: &[Message]) -> u64 {
    messages
        .iter()
        .flat_map(|m| &m.content)
        .map(|block| match block {
            Block::Text(text) => text.len(),
            Block::Thinking(t) => t.text.len() + t.signature.as_ref().map_or(0, String::len),
            Block::ToolCall(c) => c.id.len() + c.name.len() + c.input.len(),
            Block::ToolResult(r) => r.call_id.len() + r.content.len(),
        } as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::message::Role;

    fn text(n: usize, each: &str) -> Vec<Message> {
        (0..n)
            .map(|_| Message {
                role: Role::User,
                content: vec![Block::Text(each.into())],
            })
            .collect()
    }

    fn limits() -> Limits {
        Limits {
            max_conversation_messages: 3,
            max_conversation_blocks: 4,
            max_conversation_bytes: 10,
            max_answer_bytes: 5,
            ..Limits::default()
        }
    }

    #[test]
    fn counts_messages_then_blocks_then_bytes() {
        let l = limits();
        assert_eq!(messages("a seed", &text(3, "abc"), &l), Ok(()));
        assert_eq!(
            messages("a seed", &text(4, ""), &l).unwrap_err(),
            "a seed of 4 messages is over capabilities.limits.max_conversation_messages (3)"
        );
        let mut wide = text(1, "");
        wide[0].content = vec![Block::Text(String::new()); 5];
        assert_eq!(
            messages("a conversation", &wide, &l).unwrap_err(),
            "a conversation of 5 blocks is over capabilities.limits.max_conversation_blocks (4)"
        );
        assert_eq!(
            messages("a replacement", &text(2, "abcdef"), &l).unwrap_err(),
            "a replacement of 12 bytes is over capabilities.limits.max_conversation_bytes (10)"
        );
        assert_eq!(
            answer("abcdef", &l).unwrap_err(),
            "the task's answer of 6 bytes is over capabilities.limits.max_answer_bytes (5)"
        );
        assert_eq!(answer("abcde", &l), Ok(()));
    }

    #[test]
    fn the_fuel_covers_what_the_limits_let_through() {
        // The fuel counts each lifted element at its Rust size: the per-element costs
        // `Limits::hostcall_bytes` assumes must not be smaller.
        assert!(
            size_of::<Message>() as u64 <= 32,
            "{}",
            size_of::<Message>()
        );
        assert!(size_of::<Block>() as u64 <= 80, "{}", size_of::<Block>());
        let d = Limits::default();
        assert!(d.hostcall_bytes() >= d.max_answer_bytes + d.max_conversation_bytes);
        assert!(
            d.hostcall_bytes() < 128 * 1024 * 1024,
            "below wasmtime's default"
        );
    }
}
