//! A session loop built against `murmur:session@0.2.0`, a version of the session
//! interface this host does not serve. It exists so the host can prove that it
//! refuses such a component up front. Were it ever run, it would behave like the
//! oneshot loop.

// The WIT is inlined rather than read from `wit/session` because that directory
// is the version the host serves; this is a verbatim copy with only the package
// version bumped to 0.2.0.
wit_bindgen::generate!({
    world: "session-loop",
    inline: r#"
package murmur:session@0.2.0;

/// What the host and a session loop exchange.
interface types {
    /// One task, handed to the loop by `next-task`.
    record task {
        /// `tsk_` + 32 hex.
        id: string,
        context-id: string,
        /// `user`, `peer`, `event`, `completion`, ...
        origin: string,
        /// The task text the model is given.
        text: string,
    }

    /// A call the model asked for.
    record tool-call {
        /// The provider's id; empty when it gave none.
        id: string,
        name: string,
        /// The JSON object the model sent.
        input: string,
    }

    enum stop-reason {
        end-turn,
        tool-call,
        max-tokens,
    }

    record usage {
        input-tokens: u64,
        output-tokens: u64,
    }

    record inference-request {
        /// The conversation, a JSON array of messages in the driver shapes.
        messages: string,
        /// Offer the capsule's tools to the model.
        with-tools: bool,
    }

    record inference-reply {
        stop-reason: stop-reason,
        /// The reply's text blocks joined with `\n`.
        text: string,
        /// In the order the model asked for them.
        tool-calls: list<tool-call>,
        /// The assistant message to append to the conversation, as JSON.
        assistant-message: string,
        usage: usage,
    }

    variant inference-error {
        /// The driver could not be called (trap, deadline, memory, link).
        invocation(string),
        /// The driver or the model answered with a failure, or an unusable reply.
        failed(string),
        /// The task has used all of its inference turns; the number is the limit.
        turns-exhausted(u32),
    }

    record tool-outcome {
        /// Exactly the text the model receives (fenced when the call reached a tool).
        content: string,
        is-error: bool,
    }

    variant task-outcome {
        /// The task's answer.
        completed(string),
        /// The task ended on an inference error, reported as the seed says.
        inference-failed(inference-error),
        /// The loop gave up for a reason of its own.
        failed(string),
    }
}

/// Imported by a session loop: everything it needs from the host.
interface host {
    use types.{task, inference-request, inference-reply, inference-error, tool-call, tool-outcome, task-outcome};

    /// Waits for the next task; `none` when the session is over.
    next-task: func() -> option<task>;

    /// One inference turn of the current task. The host counts the turn, reports it on
    /// the wire and in the trace, and refuses calls past `inference.max_turns`.
    infer: func(request: inference-request) -> result<inference-reply, inference-error>;

    /// Dispatches one tool call of the current task.
    call-tool: func(call: tool-call) -> tool-outcome;

    /// Ends the current task: the host writes its result, final status and trace line.
    finish-task: func(outcome: task-outcome);
}

/// Exported by a session loop.
interface %loop {
    record config {
        /// `inference.max_turns`.
        max-turns: u32,
    }

    /// Runs the whole session; returns when `next-task` says it is over.
    run: func(config: config) -> result<_, string>;
}

world session-loop {
    import host;
    export %loop;
}
"#,
});

use exports::murmur::session::loop_::{Config, Guest};
use murmur::session::host;
use murmur::session::types::{InferenceRequest, StopReason, TaskOutcome};
use serde_json::json;

struct Component;

impl Guest for Component {
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
    let request = InferenceRequest {
        messages: messages.to_string(),
        with_tools: false,
    };
    match host::infer(&request) {
        Err(e) => TaskOutcome::InferenceFailed(e),
        Ok(reply) => match reply.stop_reason {
            StopReason::EndTurn | StopReason::MaxTokens => {
                TaskOutcome::Completed(format!("[future] {}", reply.text))
            }
            StopReason::ToolCall => {
                TaskOutcome::Failed("the future loop answers in one turn and calls no tools".into())
            }
        },
    }
}

export!(Component);
