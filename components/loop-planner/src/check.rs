//! The self-check: one more turn, with no tools, in which the model compares its answer
//! with its plan and gives the final answer.

use crate::messages::{request, text_only, user};
use crate::murmur::message::types::Message;
use crate::murmur::session::host;
use crate::murmur::session::types::TaskOutcome;

/// The system addition of the check.
const CHECK: &str = "Check the answer you just gave against the plan you made: every step \
                     carried out, the task answered. Reply with the final answer only, \
                     corrected if the check found a fault.";

/// What the model is told after its answer.
const ASK: &str = "Check your answer against your plan and give the final answer.";

/// The final answer; the check and its reply join `messages`.
pub fn run(messages: &mut Vec<Message>) -> Result<String, TaskOutcome> {
    messages.push(user(ASK));
    let asked = host::infer(&request(messages, Some(CHECK.into()), Some(Vec::new())));
    text_only(asked, "checking its answer", messages)
}
