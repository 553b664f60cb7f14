//! A deliberately different session loop: one inference per task, no tools.
//! It exists to prove that `mur run --loop` really swaps the loop.
//!
//! It sends the model the task text alone: the hooks' seed and a threaded context's
//! history are left out on purpose, so a test can show the trace saying the seed was
//! offered but not carried.

wit_bindgen::generate!({
    path: ["../../wit/message", "../../wit/text", "../../wit/session"],
    world: "murmur:session/session-loop",
    // `murmur:message` and `murmur:text` are other packages: their bindings are asked for.
    generate_all,
});

use exports::murmur::session::loop_::{Config, Guest};
use murmur::message::types::{Block, Message, Role};
use murmur::session::host;
use murmur::session::types::{InferenceRequest, Params, StopReason, TaskOutcome};

struct Component;

impl Guest for Component {
    // One turn per attempt can never exceed `max_turns`, so the limit is not consulted.
    fn run(_config: Config) -> Result<(), String> {
        while let Some(task) = host::next_task() {
            let mut messages = vec![user(task.text)];
            loop {
                let outcome = answer(&mut messages);
                // A reopened task gets one more turn, with the hook's feedback.
                match host::finish_task(&outcome, Some(&messages))? {
                    Some(feedback) => messages.push(user(feedback)),
                    None => break,
                }
            }
        }
        Ok(())
    }
}

fn user(text: String) -> Message {
    Message {
        role: Role::User,
        content: vec![Block::Text(text)],
    }
}

/// One turn; the reply joins `messages`, the conversation a threaded context keeps.
fn answer(messages: &mut Vec<Message>) -> TaskOutcome {
    // Tools are withheld so the model has no reason to ask for a second turn.
    let request = InferenceRequest {
        messages: messages.clone(),
        system: None,
        tools: Some(Vec::new()),
        max_tokens: None,
        params: Params {
            temperature: None,
            top_p: None,
            stop: Vec::new(),
        },
    };
    match host::infer(&request) {
        Err(e) => TaskOutcome::InferenceFailed(e),
        Ok(reply) => {
            messages.push(reply.message);
            match reply.stop_reason {
                // The prefix makes it visible in any output which loop produced the answer.
                StopReason::EndTurn | StopReason::MaxTokens => {
                    TaskOutcome::Completed(format!("[oneshot] {}", reply.text))
                }
                StopReason::ToolCall => TaskOutcome::Failed(
                    "the oneshot loop answers in one turn and calls no tools".into(),
                ),
            }
        }
    }
}

export!(Component);
