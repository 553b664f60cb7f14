//! `tools/call`: the task goes to the capsule through the intake the A2A door uses
//! ([`Served::take`]), so its lanes, queue depth, consent, spend ceilings, frames and
//! trace all apply as to any task that came over HTTP; the call then follows the task
//! until it ends and answers with its answer (or, `isError`, why there is none).
//!
//! While the task runs, a client that sent `_meta.progressToken` and reads event
//! streams is sent `notifications/progress`: the task's event number as the progress,
//! its working status (`inference turn 2`) as the message. A client that goes away
//! mid-call cancels the task: the stateless era says so (closing the stream is how it
//! cancels), and in either era nobody could read the answer any more, as the stream
//! cannot be resumed.
//!
//! A task that asks for input ends the call: in the stateless era, for a client that
//! can elicit, as an `input_required` result whose answer (the retried call, carrying
//! the task's id as `requestState`) resumes the task; otherwise as an error saying
//! what the capsule asks and how to answer it over A2A.

use std::time::Instant;

use ::a2a::{Message, Part, Role, StreamResponse, TaskState};
use serde_json::{Value, json};
use tokio::time::sleep_until;

use super::out::Out;
use super::sessions::table;
use super::tool::Capsule;
use super::wire::{self, Fault};
use super::{Era, methods};
use crate::http1::Request;
use crate::http1::event_stream::heartbeat_every;
use crate::intake::{Arrived, Served};
use crate::queue::{Acceptance, Refusal};
use crate::task_store::{Follower, Tasks};

/// The key of the one input this door asks a client to elicit.
const ANSWER: &str = "answer";

/// One call, as the request made it.
pub struct Call<'a> {
    pub request: &'a Request,
    pub served: &'a Served,
    pub era: &'a Era,
    pub capsule: &'a Capsule,
    pub id: Value,
}

pub async fn run(mut out: Out, call: Call<'_>, params: Value) {
    let answered = match started(&call, &params) {
        Ok(Started::Task { task, after }) => {
            let _held = Held::begin(call.era, &call.id, &task);
            let token = progress_token(&params).filter(|_| out.streams());
            match follow(&mut out, call.served, &task, after, token).await {
                Some(end) => Ok(end.result(&call, &task)),
                None => {
                    let _ = call.served.control.cancel(&task);
                    return;
                }
            }
        }
        Ok(Started::Refused(why)) => Ok(tool_result(&why, true)),
        Err(fault) => Err(fault),
    };
    let (status, body) = methods::written(call.era, call.capsule, &call.id, answered);
    out.finish(status, body).await;
}

/// What the call set going.
enum Started {
    /// A task to follow, from after its event `after`.
    Task { task: String, after: u64 },
    /// Nothing: the tool's error, for the client's model to read.
    Refused(String),
}

fn started(call: &Call<'_>, params: &Value) -> Result<Started, Fault> {
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let capsule = &call.capsule.name;
    if name != capsule {
        return Err(Fault::invalid_params(format!(
            "Unknown tool: {name} (this server's one tool is {capsule})"
        )));
    }
    if let Some(state) = params.get("requestState") {
        let Some(task) = state.as_str() else {
            return Err(Fault::invalid_params("requestState must be a string"));
        };
        return Ok(resumed(call, task, params.get("inputResponses")));
    }
    if call.served.queue.policy().acceptance == Acceptance::None {
        return Ok(Started::Refused(format!(
            "The capsule {capsule} takes no tasks at its address (lifecycle.task_acceptance: none)."
        )));
    }
    if let Era::Handshake { session, .. } = call.era
        && !table().can_call(session)
    {
        return Ok(Started::Refused(format!(
            "This MCP session already has {} calls in flight: wait for one to end.",
            super::sessions::CALLS_PER_SESSION
        )));
    }
    let task = params
        .get("arguments")
        .and_then(|a| a.get("task"))
        .and_then(Value::as_str)
        .filter(|t| !t.trim().is_empty());
    let Some(task) = task else {
        return Ok(Started::Refused(format!(
            "{capsule} takes one argument, task: the task for the capsule, as text (arguments.task is missing, empty or not a string)."
        )));
    };
    // SEP-414: an MCP client's trace context rides in `_meta`, before any header.
    let traceparent = wire::meta(params)
        .and_then(|m| m.get("traceparent"))
        .and_then(Value::as_str);
    Ok(submitted(call, task, traceparent))
}

/// The task handed to the queue, as a message of its own context.
fn submitted(call: &Call<'_>, text: &str, traceparent: Option<&str>) -> Started {
    let mut message = Message::new(Role::User, vec![Part::text(text)]);
    message.message_id = crate::ids::message();
    let arrived = Arrived {
        message_id: message.message_id.clone(),
        context_id: None,
        text: text.to_string(),
        v1: message,
    };
    let capsule = &call.capsule.name;
    match call.served.take_traced(call.request, arrived, traceparent) {
        (task, _, Ok(())) => Started::Task { task, after: 0 },
        (_, _, Err(Refusal::Busy)) => Started::Refused(format!(
            "The capsule {capsule} is busy with other work and did not take the task: try again once it is free."
        )),
        (_, _, Err(Refusal::Closed)) => Started::Refused(format!(
            "The capsule {capsule} is stopping and takes no more tasks."
        )),
    }
}

/// The stateless era's retried call: the answer the client elicited goes to the task
/// waiting for it, which the call follows again from where it stands.
fn resumed(call: &Call<'_>, task: &str, responses: Option<&Value>) -> Started {
    let tasks = call.served.wire.tasks();
    let Some((snapshot, seq)) = tasks.snapshot(task) else {
        return Started::Refused(format!(
            "The capsule no longer knows task {task}: call the tool again with the whole task."
        ));
    };
    if snapshot.status.state == TaskState::InputRequired {
        let response = responses.and_then(|r| r.get(ANSWER));
        let action = response
            .and_then(|r| r.get("action"))
            .and_then(Value::as_str);
        let answer = response
            .and_then(|r| r.get("content"))
            .and_then(|c| c.get(ANSWER))
            .and_then(Value::as_str);
        match (action, answer) {
            (Some("accept"), Some(answer)) => {
                let mut message = Message::new(Role::User, vec![Part::text(answer)]);
                message.message_id = crate::ids::message();
                message.task_id = Some(task.to_string());
                message.context_id = Some(snapshot.context_id.clone());
                let context = &snapshot.context_id;
                if call
                    .served
                    .inbox
                    .deliver(context, answer.to_string())
                    .is_ok()
                {
                    tasks.answered(task, message);
                }
            }
            // The person would not answer: the task cannot go on.
            (Some("decline" | "cancel"), _) => {
                let _ = call.served.control.cancel(task);
            }
            // No answer: the task still waits, and the call says so again.
            _ => {}
        }
    }
    Started::Task {
        task: task.to_string(),
        after: seq,
    }
}

/// A call of a session, counted while it runs so `DELETE` and
/// `notifications/cancelled` reach its task and the session is not forgotten under it.
struct Held {
    at: Option<(String, Value)>,
}

impl Held {
    fn begin(era: &Era, request: &Value, task: &str) -> Held {
        let at = match era {
            Era::Handshake { session, .. } if table().call_began(session, request, task) => {
                Some((session.clone(), request.clone()))
            }
            _ => None,
        };
        Held { at }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some((session, request)) = &self.at {
            table().call_ended(session, request, Instant::now());
        }
    }
}

/// The request's `_meta.progressToken`, a string or an integer.
fn progress_token(params: &Value) -> Option<&Value> {
    wire::meta(params)?
        .get("progressToken")
        .filter(|t| t.is_string() || t.is_i64() || t.is_u64())
}

/// How a followed task stands at the call's end.
enum End {
    Answer(String),
    Failed(String),
    Canceled(String),
    Rejected(String),
    Input {
        prompt: String,
        context: String,
    },
    /// The store no longer has it (the capsule stopped and forgot it).
    Gone,
}

/// Follows the task until it ends or waits for input past `after`, sending progress
/// to `token`; `None` when the client went away first.
async fn follow(
    out: &mut Out,
    served: &Served,
    task: &str,
    after: u64,
    token: Option<&Value>,
) -> Option<End> {
    let tasks = served.wire.tasks();
    // Followed before the first read, so no status of the task can be trimmed away
    // before this call has read it.
    let mut follower = token.map(|_| tasks.follow(task, after));
    let mut changes = tasks.watch();
    let every = heartbeat_every();
    let mut beat_at = tokio::time::Instant::now() + every;
    loop {
        // The end is looked at before the progress is read, so a task that ends between
        // the two still has every status before its end sent.
        let end = ended(tasks, task, after);
        if let (Some(reading), Some(token)) = (&follower, token) {
            match working(reading) {
                Some(notes) => {
                    for (seq, text) in notes {
                        let params =
                            json!({"progressToken": token, "progress": seq, "message": text});
                        let note = wire::notification("notifications/progress", params);
                        out.send(&note).await.ok()?;
                    }
                }
                // Fell behind what the store keeps: no more progress, the end still.
                None => follower = None,
            }
        }
        if let Some(end) = end {
            return Some(end);
        }
        let woke = tokio::select! {
            changed = changes.changed() => Woke::Changed(changed.is_ok()),
            () = sleep_until(beat_at) => Woke::Beat,
            () = out.gone() => Woke::Gone,
        };
        match woke {
            Woke::Changed(true) => {}
            Woke::Changed(false) => return Some(End::Gone),
            Woke::Beat => {
                beat_at += every;
                out.beat().await.ok()?;
            }
            Woke::Gone => return None,
        }
    }
}

enum Woke {
    Changed(bool),
    Beat,
    Gone,
}

/// The working statuses among the task's events the follower has not read: each
/// event's number and its status text. `None` once they are no longer kept.
fn working(follower: &Follower<'_>) -> Option<Vec<(u64, String)>> {
    let (events, _) = follower.next().ok()?;
    let notes = events
        .iter()
        // Only status updates are read back; a streamed reply may be megabytes.
        .filter(|e| e.json.starts_with(b"{\"statusUpdate\":"))
        .filter_map(|e| match serde_json::from_slice(&e.json).ok()? {
            StreamResponse::StatusUpdate(update) if update.status.state == TaskState::Working => {
                Some((e.seq, status_text(&update.status.message)))
            }
            _ => None,
        })
        .filter(|(_, text)| !text.is_empty())
        .collect();
    Some(notes)
}

/// The task's end, or its wait for input past `after`; `None` while it runs.
fn ended(tasks: &Tasks, task: &str, after: u64) -> Option<End> {
    let Some((state, seq)) = tasks.state(task) else {
        return Some(End::Gone);
    };
    let waits = state == TaskState::InputRequired && seq > after;
    if !state.is_terminal() && !waits {
        return None;
    }
    let Some((snapshot, _)) = tasks.snapshot(task) else {
        return Some(End::Gone);
    };
    let text = status_text(&snapshot.status.message);
    Some(match state {
        TaskState::Completed => End::Answer(text),
        TaskState::Canceled => End::Canceled(text),
        TaskState::Rejected => End::Rejected(text),
        TaskState::InputRequired => End::Input {
            prompt: text,
            context: snapshot.context_id,
        },
        _ => End::Failed(text),
    })
}

/// The text parts of a status message, joined.
fn status_text(message: &Option<Message>) -> String {
    let Some(message) = message else {
        return String::new();
    };
    let texts: Vec<&str> = message.parts.iter().filter_map(|p| p.as_text()).collect();
    texts.join("\n")
}

impl End {
    fn result(self, call: &Call<'_>, task: &str) -> Value {
        let why = |text: String| {
            if text.is_empty() {
                "no reason was given".to_string()
            } else {
                text
            }
        };
        match self {
            End::Answer(text) => tool_result(&text, false),
            End::Failed(text) => {
                tool_result(&format!("The capsule's task failed: {}", why(text)), true)
            }
            End::Canceled(text) => tool_result(
                &format!("The capsule's task was canceled: {}", why(text)),
                true,
            ),
            End::Rejected(text) => tool_result(
                &format!("The capsule did not take the task: {}", why(text)),
                true,
            ),
            End::Input { prompt, context } => input_needed(call, task, &prompt, &context),
            End::Gone => tool_result(
                "The capsule no longer knows the task: it stopped, or forgot the task before it ended.",
                true,
            ),
        }
    }
}

/// A task waiting for input: an elicitation for a stateless-era client that can
/// elicit, else the tool's error saying what the capsule asks and how to answer it.
fn input_needed(call: &Call<'_>, task: &str, prompt: &str, context: &str) -> Value {
    let elicits = match call.era {
        Era::Modern { capabilities } => capabilities.get("elicitation").is_some(),
        Era::Handshake { .. } => false,
    };
    if elicits {
        let schema = json!({
            "type": "object",
            "properties": {ANSWER: {"type": "string", "title": "Answer", "description": "Your answer to the capsule"}},
            "required": [ANSWER]
        });
        let ask = json!({"mode": "form", "message": scrubbed(prompt), "requestedSchema": schema});
        return json!({
            "resultType": "input_required",
            "inputRequests": {ANSWER: {"method": "elicitation/create", "params": ask}},
            "requestState": task
        });
    }
    let text = format!(
        "The capsule {name} needs input to go on: {prompt}\n\nIts task {task} waits for the answer until its input timeout. To answer, send the answer as an A2A message to the capsule's address {address}: SendMessage with taskId {task}, or message/stream in context {context}. Calling {name} again starts a new task.",
        name = call.capsule.name,
        address = call.served.address,
    );
    tool_result(&text, true)
}

/// A tool result of one text, with every secret the host knows redacted.
fn tool_result(text: &str, is_error: bool) -> Value {
    json!({"content": [{"type": "text", "text": scrubbed(text)}], "isError": is_error})
}

fn scrubbed(text: &str) -> String {
    crate::secret::scrub(text).into_owned()
}
