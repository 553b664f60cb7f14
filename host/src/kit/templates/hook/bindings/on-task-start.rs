            Event::TaskStart(task) => Ok(seed(&task.context_id)),
//--
use murmur::message::types::{Block, Message, Role};

/// `seed-context`: messages that go ahead of the task, oldest first (memory, say).
/// Only text blocks are seeded, within `context.seed_budget`.
fn seed(context_id: &str) -> Verdict {
    Verdict::SeedContext(vec![Message {
        role: Role::User,
        content: vec![Block::Text(format!(
            "Remembered for context {context_id}: answer briefly."
        ))],
    }])
}
