//! The default session loop: it converses with the model, running the tool calls it
//! asks for, until the model ends its turn. Past the compaction threshold it asks the
//! host to compact the conversation, as the seed always did.

wit_bindgen::generate!({
    path: ["../wit/message", "../wit/text", "../wit/session"],
    world: "murmur:session/session-loop",
    // `murmur:message` and `murmur:text` are other packages: their bindings are asked for.
    generate_all,
});

mod compaction;
mod conversation;

use exports::murmur::session::loop_::{Config, Guest};
use murmur::message::types::Message;
use murmur::session::host;
use murmur::session::types::{InferenceRequest, Params, StopReason, Task, TaskOutcome};

use conversation::{tool_results, user};

struct Component;

impl Guest for Component {
    // `max_turns` is not consulted here: the host counts every `infer` and refuses
    // turns past the limit, so the loop cannot overrun it even if it tried.
    fn run(_config: Config) -> Result<(), String> {
        while let Some(task) = host::next_task() {
            let mut messages = opening(task);
            loop {
                let outcome = run_task(&mut messages);
                // A reopened task goes on in the same conversation, the hook's feedback
                // being the next thing the model reads.
                match host::finish_task(&outcome, Some(&messages))? {
                    Some(feedback) => messages.push(user(feedback)),
                    None => break,
                }
            }
        }
        Ok(())
    }
}

/// What the model reads first: the hooks' seed, the context's earlier conversation,
/// then the task.
fn opening(task: Task) -> Vec<Message> {
    let mut messages = task.seed;
    messages.extend(task.history);
    messages.push(user(task.text));
    messages
}

/// Turns until the model ends its turn (or something ends the task for it).
fn run_task(messages: &mut Vec<Message>) -> TaskOutcome {
    loop {
        let reply = match host::infer(&request(messages)) {
            Ok(reply) => reply,
            // Turn exhaustion arrives here too; the host words it, the loop just reports it.
            Err(e) => return TaskOutcome::InferenceFailed(e),
        };
        // The provider needs to see its own tool calls before the results that answer them.
        messages.push(reply.message);
        if let Err(outcome) = compaction::after_reply(messages, reply.usage) {
            return outcome;
        }
        match reply.stop_reason {
            StopReason::EndTurn | StopReason::MaxTokens => {
                return TaskOutcome::Completed(reply.text);
            }
            StopReason::ToolCall => match host::call_tools(&reply.tool_calls) {
                // In call order, one message: the results line up with the calls.
                Ok(results) => messages.push(tool_results(results)),
                Err(why) => return TaskOutcome::Failed(why),
            },
        }
    }
}

/// The conversation with every tool of the capsule, the manifest's prompt and limits.
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

export!(Component);
