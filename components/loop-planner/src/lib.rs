//! A session loop that plans before it acts.
//!
//! Each attempt at a task goes through three phases, each in its own module:
//! 1. [`plan`]: one inference with no tools and a system addition asking for a short
//!    numbered plan that names the tools it will use; the plan is streamed as text and
//!    its first line becomes the task's status;
//! 2. [`execute`]: the usual tool loop, but the model is offered only the tools the
//!    plan named;
//! 3. [`check`]: one inference with no tools that checks the answer against the plan;
//!    its text is the task's answer.
//!
//! Everything the loop says and the model answers stays in one conversation, which is
//! what a threaded context keeps when the task ends.

wit_bindgen::generate!({
    path: ["../../wit/message", "../../wit/text", "../../wit/session"],
    world: "murmur:session/session-loop",
    // `murmur:message` and `murmur:text` are other packages: their bindings are asked for.
    generate_all,
});

mod check;
mod execute;
mod messages;
mod plan;

use exports::murmur::session::loop_::{Config, Guest};
use murmur::message::types::Message;
use murmur::session::host;
use murmur::session::types::{Task, TaskOutcome};

use messages::user;
use plan::Plan;

struct Component;

impl Guest for Component {
    // The host counts every `infer` against `inference.max_turns` and refuses turns
    // past it, so the loop need not count them.
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
    messages.push(user(task.text));
    let mut plan = None;
    loop {
        let outcome = match attempt(&mut messages, &mut plan) {
            Ok(answer) => TaskOutcome::Completed(answer),
            Err(outcome) => outcome,
        };
        // The whole conversation, plan and check included, is what a threaded
        // context keeps. An `on-task-end` hook may reopen the task with feedback.
        match host::finish_task(&outcome, Some(&messages))? {
            Some(feedback) => messages.push(user(feedback)),
            None => return Ok(()),
        }
    }
}

/// Plans (on the first attempt only: a reopened task keeps its plan), executes the
/// plan, then checks the answer against it. `Err` is how the task ended instead.
fn attempt(messages: &mut Vec<Message>, plan: &mut Option<Plan>) -> Result<String, TaskOutcome> {
    let plan = match plan {
        Some(plan) => plan,
        None => plan.insert(plan::make(messages)?),
    };
    execute::run(messages, &plan.tools)?;
    check::run(messages)
}

export!(Component);
