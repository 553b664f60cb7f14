//! The side inference: a critic reads the task and the draft, alone, and says what is
//! wrong with it. Its conversation is its own and is not kept.

use crate::messages::{request, user};
use crate::murmur::session::host;
use crate::murmur::session::types::TaskOutcome;

/// The critic's system addition.
const CRITIC: &str = "You are a critic. Say briefly what is wrong, missing or unclear in \
                      the answer; do not write a new answer.";

/// The critique of `draft`. `Err` is how the task ended instead (the turn counts
/// against the task like any other, so its failure ends the task the same way).
pub fn of(task: &str, draft: &str) -> Result<String, TaskOutcome> {
    let side = [user(format!(
        "Critique this answer to the task.\n\nThe task:\n{task}\n\nThe answer:\n{draft}"
    ))];
    // No tools: the critic only reads. Whatever it answers, its words are the critique.
    let reply = host::infer(&request(&side, Some(CRITIC.into()), Some(Vec::new())));
    Ok(reply.map_err(TaskOutcome::InferenceFailed)?.text)
}
