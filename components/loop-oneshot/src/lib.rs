//! A deliberately different session loop: one inference per task, no tools.
//! It exists to prove that `mur run --loop` really swaps the loop.

wit_bindgen::generate!({
    path: "../../wit/session",
    world: "murmur:session/session-loop",
});

use exports::murmur::session::loop_::{Config, Guest};
use murmur::session::host;
use murmur::session::types::{InferenceRequest, StopReason, TaskOutcome};
use serde_json::json;

struct Component;

impl Guest for Component {
    // One turn per task can never exceed `max_turns`, so the limit is not consulted.
    fn run(_config: Config) -> Result<(), String> {
        while let Some(task) = host::next_task() {
            let outcome = answer(&task.text);
            host::finish_task(&outcome);
        }
        Ok(())
    }
}

fn answer(text: &str) -> TaskOutcome {
    let messages = json!([{"role": "user", "content": [{"type": "text", "text": text}]}]);
    // Tools are withheld so the model has no reason to ask for a second turn.
    let request = InferenceRequest {
        messages: messages.to_string(),
        with_tools: false,
    };
    match host::infer(&request) {
        Err(e) => TaskOutcome::InferenceFailed(e),
        Ok(reply) => match reply.stop_reason {
            // The prefix makes it visible in any output which loop produced the answer.
            StopReason::EndTurn | StopReason::MaxTokens => {
                TaskOutcome::Completed(format!("[oneshot] {}", reply.text))
            }
            StopReason::ToolCall => TaskOutcome::Failed(
                "the oneshot loop answers in one turn and calls no tools".into(),
            ),
        },
    }
}

export!(Component);
