//! The calls that need a task, made before the first `next-task`: each should be
//! refused, in the host's words. `enqueue` is not among them: between tasks it queues
//! a task in a new context (see the `finish-then-enqueue` command).

use crate::command::{one_message, plain_request};
use crate::murmur::message::types::ToolCall;
use crate::murmur::session::host;
use crate::murmur::session::types::TaskOutcome;
use crate::words;

/// One note per call: `outside <call>: <answer>`.
pub fn probe() -> Vec<String> {
    let call = ToolCall {
        id: "probe-0".into(),
        name: "probe".into(),
        input: "{}".into(),
    };
    let outcome = TaskOutcome::Completed("no task runs".into());
    let answers = [
        ("infer", words::inference(&host::infer(&plain_request()))),
        ("status", words::plain(&host::status("probing"))),
        ("budget", words::budget(&host::budget(&one_message()))),
        (
            "compact",
            words::plain(&host::compact(&one_message(), None)),
        ),
        // One call, so the refusal is about the task, not about an empty list.
        ("call-tools", words::plain(&host::call_tools(&[call]))),
        (
            "finish-task",
            words::plain(&host::finish_task(&outcome, None)),
        ),
    ];
    answers
        .into_iter()
        .map(|(name, answer)| format!("outside {name}: {answer}"))
        .collect()
}
