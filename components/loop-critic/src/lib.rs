//! A session loop that has its answers reviewed.
//!
//! Each attempt at a task:
//! 1. runs the default strategy ([`converse`]) to a draft answer;
//! 2. asks for a critique of the draft in a side inference ([`critique`]): a
//!    conversation of its own, with a critic's system addition and no tools;
//! 3. tells the main conversation what the reviewer said and converses once more; that
//!    answer is the task's.
//!
//! The side inference never joins the main conversation, and the main conversation is
//! what the loop hands to `finish-task`: a threaded context keeps the task, the draft,
//! the reviewer's words and the revision, not the critic's exchange.

wit_bindgen::generate!({
    path: ["../../wit/message", "../../wit/text", "../../wit/session"],
    world: "murmur:session/session-loop",
    // `murmur:message` and `murmur:text` are other packages: their bindings are asked for.
    generate_all,
});

mod converse;
mod critique;
mod messages;

use exports::murmur::session::loop_::{Config, Guest};
use murmur::message::types::Message;
use murmur::session::host;
use murmur::session::types::{Task, TaskOutcome};

use messages::user;

struct Component;

impl Guest for Component {
    // The host counts every `infer`, the side inference too, against
    // `inference.max_turns`, so the loop need not count them.
    fn run(_config: Config) -> Result<(), String> {
        while let Some(task) = host::next_task() {
            run_task(task)?;
        }
        Ok(())
    }
}

/// One task, over all its attempts. `Err` only when the host refuses to end it.
fn run_task(task: Task) -> Result<(), String> {
    // What the model reads first: the hooks' seed, the context's earlier
    // conversation, then the task.
    let mut messages = task.seed;
    messages.extend(task.history);
    messages.push(user(task.text.clone()));
    loop {
        let outcome = match attempt(&task.text, &mut messages) {
            Ok(answer) => TaskOutcome::Completed(answer),
            Err(outcome) => outcome,
        };
        // An `on-task-end` hook may reopen the task with feedback; the next attempt
        // drafts, hears the critic and revises again.
        match host::finish_task(&outcome, Some(&messages))? {
            Some(feedback) => messages.push(user(feedback)),
            None => return Ok(()),
        }
    }
}

/// Draft, critique, revision. `Err` is how the task ended instead.
fn attempt(task: &str, messages: &mut Vec<Message>) -> Result<String, TaskOutcome> {
    let draft = converse::answer(messages)?;
    let review = critique::of(task, &draft)?;
    messages.push(user(format!(
        "A reviewer said: {review}\nRevise your answer."
    )));
    converse::answer(messages)
}

export!(Component);
