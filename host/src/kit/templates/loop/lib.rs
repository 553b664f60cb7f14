//! `{{name}}`: a session loop (world `murmur:session/session-loop`).
//!
//! It converses with the model, running the tool calls it asks for, until the model
//! ends its turn; then it hands the answer to the host and waits for the next task. It
//! is the built-in loop's strategy, written out so you can change it: what the model
//! reads first, which tools it is offered, when to compact, what a task's answer is.
//!
//! The host owns the rest: it counts every `infer` against `inference.max_turns` and
//! refuses turns past it, runs the hooks and writes frames and the trace.

wit_bindgen::generate!({
    path: ["wit/message", "wit/text", "wit/session"],
    world: "murmur:session/session-loop",
    // `murmur:message` and `murmur:text` are packages of their own: ask for their bindings.
    generate_all,
});

use exports::murmur::session::loop_::{Config, Guest};
use murmur::message::types::{Block, Message, Role, ToolResult};
use murmur::session::host;
use murmur::session::types::{
    InferenceError, InferenceRequest, Params, StopReason, Task, TaskOutcome, Usage,
};

struct Component;

impl Guest for Component {
    // `config.max_turns` is `inference.max_turns`. The loop need not count turns
    // itself: the host counts every `infer` across a task's attempts and refuses
    // the turn past the limit, which ends the task below as the seed says.
    fn run(_config: Config) -> Result<(), String> {
        // `next-task` blocks until a task arrives and says `none` when the session is over.
        while let Some(task) = host::next_task() {
            let mut messages = opening(task);
            loop {
                let outcome = run_task(&mut messages);
                // `finish-task` writes the answer; `some(feedback)` means an
                // `on-task-end` hook reopened the task, which goes on in the same
                // conversation (and the same turn budget) with the feedback.
                match host::finish_task(&outcome, Some(&messages))? {
                    Some(feedback) => messages.push(user(feedback)),
                    None => break,
                }
            }
        }
        Ok(())
    }
}

/// What the model reads first: what the hooks seeded (memory), the context's earlier
/// conversation (`lifecycle.conversation: threaded`), then the task.
fn opening(task: Task) -> Vec<Message> {
    let mut messages = task.seed;
    messages.extend(task.history);
    messages.push(user(task.text));
    messages
}

/// Turns until the model ends its turn, or something ends the task for it.
fn run_task(messages: &mut Vec<Message>) -> TaskOutcome {
    loop {
        let reply = match host::infer(&request(messages)) {
            Ok(reply) => reply,
            // Past `max_turns` the host refuses the turn (`turns-exhausted`), and a
            // canceled task's turns are refused too. Reported as they are, the task
            // ends `max_turns_reached` or `canceled` as the seed says.
            Err(e) => return TaskOutcome::InferenceFailed(e),
        };
        // The provider must see its own tool calls before the results that answer them.
        messages.push(reply.message);
        if let Err(outcome) = compact_if_due(messages, reply.usage) {
            return outcome;
        }
        match reply.stop_reason {
            StopReason::EndTurn | StopReason::MaxTokens => {
                return TaskOutcome::Completed(reply.text);
            }
            // Every call of the reply at once: the host runs up to
            // `lifecycle.parallel_tools` side by side and returns the results in call order.
            StopReason::ToolCall => match host::call_tools(&reply.tool_calls) {
                Ok(results) => messages.push(tool_results(results)),
                Err(why) => return TaskOutcome::Failed(why),
            },
        }
    }
}

/// The conversation, with every tool of the capsule and the manifest's prompt and limits.
fn request(messages: &[Message]) -> InferenceRequest {
    InferenceRequest {
        messages: messages.to_vec(),
        system: None,
        tools: None,
        max_tokens: None,
        params: Params {
            temperature: None,
            top_p: None,
            stop: Vec::new(),
        },
    }
}

/// Once a reply's tokens reach `inference.compaction.threshold` of `context.max_tokens`,
/// the `on-compaction` hooks may replace the conversation. `Err` is the outcome that
/// ends the task (a compaction hook failed).
fn compact_if_due(messages: &mut Vec<Message>, usage: Usage) -> Result<(), TaskOutcome> {
    let budget = host::budget(&[]).map_err(TaskOutcome::Failed)?;
    let Some(window) = budget.window else {
        return Ok(());
    };
    let size = usage.input_tokens + usage.output_tokens;
    if (size as f64) < budget.threshold * f64::from(window) {
        return Ok(());
    }
    match host::compact(messages, Some(usage)) {
        Ok(Some(compacted)) => *messages = compacted,
        Ok(None) => {}
        Err(why) => return Err(TaskOutcome::InferenceFailed(InferenceError::Failed(why))),
    }
    Ok(())
}

/// A user message of one text block: the task, or a hook's feedback.
fn user(text: String) -> Message {
    Message {
        role: Role::User,
        content: vec![Block::Text(text)],
    }
}

/// One `tool` message holding every result of a reply's calls, in call order.
fn tool_results(results: Vec<ToolResult>) -> Message {
    Message {
        role: Role::Tool,
        content: results.into_iter().map(Block::ToolResult).collect(),
    }
}

export!(Component);
