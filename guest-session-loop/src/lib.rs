//! The default session loop: it converses with the model, dispatching the tool
//! calls it asks for, until the model ends its turn.

wit_bindgen::generate!({
    path: "../wit/session",
    world: "murmur:session/session-loop",
});

use exports::murmur::session::loop_::{Config, Guest};
use murmur::session::host;
use murmur::session::types::{InferenceRequest, StopReason, TaskOutcome};
use serde_json::{Value, json};

struct Component;

impl Guest for Component {
    // `max_turns` is not consulted here: the host counts every `infer` and refuses
    // turns past the limit, so the loop cannot overrun it even if it tried.
    fn run(_config: Config) -> Result<(), String> {
        while let Some(task) = host::next_task() {
            let mut messages = match history(&task.history) {
                Ok(history) => history,
                Err(why) => {
                    host::finish_task(&TaskOutcome::Failed(why));
                    continue;
                }
            };
            let mut text = task.text;
            loop {
                messages.push(user(&text));
                let outcome = run_task(&mut messages);
                // A reopened task goes on in the same conversation, the hook's feedback
                // being the next thing the model reads.
                match host::finish_task(&outcome) {
                    Some(feedback) => text = feedback,
                    None => break,
                }
            }
        }
        Ok(())
    }
}

/// The context's earlier conversation, which the host keeps (empty for a stateless one).
fn history(json: &str) -> Result<Vec<Value>, String> {
    match serde_json::from_str::<Value>(json) {
        Ok(Value::Array(messages)) => Ok(messages),
        Ok(_) => Err("the host's conversation history is JSON but not a list".into()),
        Err(e) => Err(format!(
            "the host's conversation history is not valid JSON: {e}"
        )),
    }
}

fn user(text: &str) -> Value {
    json!({
        "role": "user",
        "content": [{"type": "text", "text": text}],
    })
}

fn run_task(messages: &mut Vec<Value>) -> TaskOutcome {
    loop {
        let messages_json = match serde_json::to_string(&messages) {
            Ok(s) => s,
            Err(e) => {
                return TaskOutcome::Failed(format!("could not encode the conversation: {e}"));
            }
        };
        let request = InferenceRequest {
            messages: messages_json,
            with_tools: true,
        };
        let reply = match host::infer(&request) {
            Ok(reply) => reply,
            // Turn exhaustion arrives here too; the host words it, the loop just reports it.
            Err(e) => return TaskOutcome::InferenceFailed(e),
        };
        if let Some(context) = &reply.context {
            // A compaction hook replaced the conversation; it ends with this reply.
            match history(context) {
                Ok(compacted) => *messages = compacted,
                Err(why) => return TaskOutcome::Failed(why),
            }
        }
        let assistant = match serde_json::from_str::<Value>(&reply.assistant_message) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => {
                return TaskOutcome::Failed(
                    "the host's assistant message is JSON but not an object, so it cannot join the conversation".into(),
                );
            }
            Err(e) => {
                return TaskOutcome::Failed(format!(
                    "the host's assistant message is not valid JSON, so the conversation cannot go on: {e}"
                ));
            }
        };
        // The provider needs to see its own tool calls before the results that answer them.
        if reply.context.is_none() {
            messages.push(assistant);
        }
        match reply.stop_reason {
            StopReason::EndTurn | StopReason::MaxTokens => {
                return TaskOutcome::Completed(reply.text);
            }
            StopReason::ToolCall => {
                // In order: the results must line up with the calls the model made.
                for call in &reply.tool_calls {
                    let out = host::call_tool(call);
                    messages.push(json!({
                        "role": "tool",
                        "tool_call_id": call.id,
                        "is_error": out.is_error,
                        "content": [{"type": "text", "text": out.content}],
                    }));
                }
            }
        }
    }
}

export!(Component);
