            Event::Compaction(compaction) => Ok(compact(compaction.messages)),
//--
use murmur::message::types::{Message, Role};

/// `replace-context`: keeps the first message (the task) and the conversation from the
/// newest assistant message on. Starting at an assistant message keeps every tool
/// result after the call it answers, as the host requires of a replacement.
fn compact(messages: Vec<Message>) -> Verdict {
    let Some(newest) = messages.iter().rposition(|m| m.role == Role::Assistant) else {
        return Verdict::None;
    };
    if newest <= 1 {
        return Verdict::None;
    }
    let mut kept = vec![messages[0].clone()];
    kept.extend_from_slice(&messages[newest..]);
    Verdict::ReplaceContext(kept)
}
