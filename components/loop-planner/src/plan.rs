//! The planning turn: the model, offered no tools, writes a short numbered plan naming
//! the tools it will use. The plan is streamed as text, reported as the task's status,
//! and decides which tools the execution may use.

use crate::messages::{request, text_only, user};
use crate::murmur::message::types::{Message, ToolSpec};
use crate::murmur::session::host;
use crate::murmur::session::types::TaskOutcome;
use crate::murmur::text::chunks;

/// What the model is told once its plan is written.
const CARRY_OUT: &str = "Carry out your plan now, then give your answer.";

pub struct Plan {
    /// The capsule's tools the plan names, in the capsule's order.
    pub tools: Vec<String>,
}

/// Asks for the plan; the plan (an assistant message) and the instruction to carry it
/// out join `messages`. `Err` is how the task ended instead.
pub fn make(messages: &mut Vec<Message>) -> Result<Plan, TaskOutcome> {
    let tools = host::tools();
    // `Some(vec![])`: no tools at all, so the model can only write.
    let asked = host::infer(&request(
        messages,
        Some(instructions(&tools)),
        Some(Vec::new()),
    ));
    let plan = text_only(asked, "planning", messages)?;

    // The plan goes to whoever watches the task: as reply text, and as its status.
    for line in plan.lines() {
        chunks::text(&format!("{line}\n"));
    }
    let first = plan.lines().map(str::trim).find(|l| !l.is_empty());
    let status = format!("plan: {}", first.unwrap_or("(empty)"));
    host::status(&status).map_err(TaskOutcome::Failed)?;

    messages.push(user(CARRY_OUT));
    Ok(Plan {
        tools: tools
            .into_iter()
            .map(|t| t.name)
            .filter(|name| names(&plan, name))
            .collect(),
    })
}

/// The system addition of the planning turn: what to write, and the tools to choose
/// from (by name, with the first line of their description).
fn instructions(tools: &[ToolSpec]) -> String {
    let mut text = String::from(
        "Before you act, plan. Reply with a short numbered plan (at most five steps) and \
         nothing else; do not carry it out yet. Name every tool a step will use exactly \
         as it is written below; a tool the plan does not name will not be available.\n",
    );
    if tools.is_empty() {
        text.push_str("You have no tools: plan to answer from what you know.\n");
    } else {
        text.push_str("Your tools:\n");
        for tool in tools {
            let about = tool.description.lines().next().unwrap_or_default();
            text.push_str(&format!("- {}: {about}\n", tool.name));
        }
    }
    text
}

/// Whether `plan` names `tool` as a word of its own: `sh` is not named by "shell".
fn names(plan: &str, tool: &str) -> bool {
    let part_of_a_name = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
    plan.match_indices(tool).any(|(at, _)| {
        let before = plan[..at].chars().next_back();
        let after = plan[at + tool.len()..].chars().next();
        !before.is_some_and(part_of_a_name) && !after.is_some_and(part_of_a_name)
    })
}

#[cfg(test)]
mod tests {
    use super::names;

    #[test]
    fn a_tool_is_named_only_as_a_word_of_its_own() {
        let plan = "1. Run `echo` twice.\n2. Use the shell-tool, then word_count.";
        assert!(names(plan, "echo"));
        assert!(names(plan, "shell-tool"));
        assert!(names(plan, "word_count"));
        assert!(!names(plan, "shell"));
        assert!(!names(plan, "word"));
        assert!(!names(plan, "ech"));
        assert!(!names(plan, "sleep"));
    }

    #[test]
    fn a_name_at_either_end_of_the_plan_counts() {
        assert!(names("echo", "echo"));
        assert!(names("use echo", "echo"));
        assert!(names("echo it", "echo"));
    }
}
