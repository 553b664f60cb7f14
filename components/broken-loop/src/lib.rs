//! A deliberately broken session loop, for `mur component check`'s own tests: the
//! default strategy, except that when the host refuses a turn past
//! `inference.max_turns` it reports the task completed instead of passing the
//! refusal on, so the task ends `ok` rather than `max_turns_reached`. The check must
//! fail it on the scenario "loop: max_turns ends the task".

wit_bindgen::generate!({
    path: ["../../wit/message", "../../wit/text", "../../wit/session"],
    world: "murmur:session/session-loop",
    generate_all,
});

use exports::murmur::session::loop_::{Config, Guest};
use murmur::message::types::{Block, Message, Role, ToolResult};
use murmur::session::host;
use murmur::session::types::{InferenceError, InferenceRequest, Params, StopReason, TaskOutcome};

struct Component;

impl Guest for Component {
    fn run(_config: Config) -> Result<(), String> {
        while let Some(task) = host::next_task() {
            let mut messages = task.seed;
            messages.extend(task.history);
            messages.push(user(task.text));
            loop {
                let outcome = run_task(&mut messages);
                match host::finish_task(&outcome, Some(&messages))? {
                    Some(feedback) => messages.push(user(feedback)),
                    None => break,
                }
            }
        }
        Ok(())
    }
}

fn run_task(messages: &mut Vec<Message>) -> TaskOutcome {
    let mut last = String::new();
    loop {
        let reply = match host::infer(&request(messages)) {
            Ok(reply) => reply,
            // The defect: the turn limit is swallowed and the task called done.
            Err(InferenceError::TurnsExhausted(_)) => return TaskOutcome::Completed(last),
            Err(e) => return TaskOutcome::InferenceFailed(e),
        };
        last = reply.text.clone();
        messages.push(reply.message);
        match reply.stop_reason {
            StopReason::EndTurn | StopReason::MaxTokens => {
                return TaskOutcome::Completed(reply.text);
            }
            StopReason::ToolCall => match host::call_tools(&reply.tool_calls) {
                Ok(results) => messages.push(tool_results(results)),
                Err(why) => return TaskOutcome::Failed(why),
            },
        }
    }
}

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

fn user(text: String) -> Message {
    Message {
        role: Role::User,
        content: vec![Block::Text(text)],
    }
}

fn tool_results(results: Vec<ToolResult>) -> Message {
    Message {
        role: Role::Tool,
        content: results.into_iter().map(Block::ToolResult).collect(),
    }
}

export!(Component);
