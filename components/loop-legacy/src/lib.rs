//! A session loop built against the released `murmur:session@0.1.0`, which this host no
//! longer serves (it serves 0.2.0). It exists so the host can prove that it refuses a
//! loop of an older version up front, with a version error naming the served one.
//!
//! Were it ever run, it would behave like the oneshot loop of that version: one inference
//! per task, no tools, the answer prefixed `[legacy]`.

// Read from the retired copy, which `wit/versions.lock` holds to its released bytes; the
// file stands alone (it uses no other package), so it is given by its path.
wit_bindgen::generate!({
    path: "../../wit/retired/0.1.0/session.wit",
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
            // A reopen's feedback is dropped: this loop answers in one turn.
            host::finish_task(&outcome);
        }
        Ok(())
    }
}

fn answer(text: &str) -> TaskOutcome {
    let messages = json!([{"role": "user", "content": [{"type": "text", "text": text}]}]);
    let request = InferenceRequest {
        messages: messages.to_string(),
        with_tools: false,
    };
    match host::infer(&request) {
        Err(e) => TaskOutcome::InferenceFailed(e),
        Ok(reply) => match reply.stop_reason {
            StopReason::EndTurn | StopReason::MaxTokens => {
                TaskOutcome::Completed(format!("[legacy] {}", reply.text))
            }
            StopReason::ToolCall => {
                TaskOutcome::Failed("the legacy loop answers in one turn and calls no tools".into())
            }
        },
    }
}

export!(Component);
