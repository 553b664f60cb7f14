//! The v1.0 methods: what each reads from its params, what it does to the capsule,
//! and what it answers.

use std::time::Duration;

use ::a2a::{
    CancelTaskRequest, GetTaskRequest, ListTasksRequest, ListTasksResponse, Message, PartContent,
    Role, SendMessageRequest, StreamResponse, SubscribeToTaskRequest, Task, TaskState,
};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::net::TcpStream;

use super::rpc::{self, Fault};
use super::stream::{self, reply};
use crate::control::CancelError;
use crate::http1::Request;
use crate::intake::{Arrived, Served};
use crate::queue::{Acceptance, Refusal};
use crate::task_store::{Event, Missed, Tasks, numbered, with_seq};

/// How long `CancelTask` waits for a running task to reach its canceled state before
/// it answers with the task as it stands.
const CANCEL_SETTLES: Duration = Duration::from_secs(10);

const DEFAULT_PAGE: usize = 50;
const MAX_PAGE: usize = 100;

/// Answers one call; returns the task it was about, when it named or made one.
pub async fn call(
    socket: TcpStream,
    request: &Request,
    served: &Served,
    method: &str,
    id: Value,
    params: Value,
) -> Option<String> {
    let tasks = served.wire.tasks();
    let named = params.get("id").and_then(Value::as_str).map(str::to_string);
    let answered = match method {
        "SendMessage" | "SendStreamingMessage" => {
            let streaming = method == "SendStreamingMessage";
            return send(socket, request, served, id, params, streaming).await;
        }
        "SubscribeToTask" => {
            subscribe(socket, request, tasks, id, params).await;
            return named;
        }
        "GetTask" => get(tasks, params),
        "ListTasks" => list(tasks, params),
        "CancelTask" => cancel(served, params).await,
        "GetExtendedAgentCard" => Err(Fault::unsupported(
            "this capsule has no extended agent card: its public card is all there is",
        )),
        _ => Err(Fault::push_not_supported()),
    };
    let body = match answered {
        Ok(result) => rpc::result(&id, &result),
        Err(fault) => rpc::error(&id, &fault),
    };
    reply(socket, body).await;
    named
}

fn params<T: DeserializeOwned>(params: Value) -> Result<T, Fault> {
    serde_json::from_value(params).map_err(Fault::invalid_params)
}

/// A result as JSON, with every secret the host knows redacted, as in the seed's frames.
fn encode(value: &impl serde::Serialize) -> String {
    let json = serde_json::to_string(value).unwrap_or_else(|_| "null".into());
    crate::secret::scrub(&json).into_owned()
}

/// `SendMessage` and `SendStreamingMessage`: a new task, or the answer to a task that
/// waits for input (the message names it with `taskId`).
async fn send(
    socket: TcpStream,
    request: &Request,
    served: &Served,
    id: Value,
    params: Value,
    streaming: bool,
) -> Option<String> {
    let tasks = served.wire.tasks();
    let started = sent(request, served, params);
    let (task, after, config) = match started {
        Ok(started) => started,
        Err(fault) => {
            reply(socket, rpc::error(&id, &fault)).await;
            return None;
        }
    };
    if streaming {
        // A new task's own first event is its snapshot; a continued one gets the
        // task as it stands, then what follows.
        let first = (after > 0).then(|| snapshot_event(tasks, &task)).flatten();
        let after = first.as_ref().map_or(after, |e| e.seq);
        stream::follow(socket, tasks, &task, &id, first, after).await;
        return Some(task);
    }
    if !config.return_immediately {
        settle(tasks, &task, after).await;
    }
    let body = match tasks.snapshot(&task) {
        Some((snapshot, seq)) => {
            let shaped = shaped(with_seq(snapshot, seq), config.history_length, true);
            rpc::result(&id, &encode(&StreamResponse::Task(shaped)))
        }
        None => rpc::error(&id, &Fault::task_not_found(&task)),
    };
    reply(socket, body).await;
    Some(task)
}

/// What `configuration` asked of a send.
#[derive(Default)]
struct Config {
    history_length: Option<i32>,
    return_immediately: bool,
}

/// Reads and acts on a send: the task it is about, the sequence number its caller has
/// already seen (0 for a new task), and its configuration.
fn sent(request: &Request, served: &Served, params: Value) -> Result<(String, u64, Config), Fault> {
    let send: SendMessageRequest = self::params(params)?;
    if served.queue.policy().acceptance == Acceptance::None {
        return Err(Fault::unsupported(
            "this capsule takes no tasks at its address (lifecycle.task_acceptance: none)",
        ));
    }
    let config = send
        .configuration
        .as_ref()
        .map_or_else(Config::default, |c| Config {
            history_length: c.history_length,
            return_immediately: c.return_immediately.unwrap_or(false),
        });
    let text = message_text(&send.message)?;
    match send.message.task_id.clone() {
        Some(task) => {
            let after = answer_input(served, &task, send.message, text)?;
            Ok((task, after, config))
        }
        None => submit(request, served, send.message, text).map(|task| (task, 0, config)),
    }
}

/// The message's text: its text parts, and its data parts as JSON, joined by lines.
fn message_text(message: &Message) -> Result<String, Fault> {
    if message.role != Role::User {
        return Err(Fault::invalid_params("message.role must be ROLE_USER"));
    }
    if message.parts.is_empty() {
        return Err(Fault::invalid_params("message.parts is empty"));
    }
    let mut lines = Vec::with_capacity(message.parts.len());
    for part in &message.parts {
        match &part.content {
            PartContent::Text(text) => lines.push(text.clone()),
            PartContent::Data(data) => lines.push(data.to_string()),
            PartContent::Raw(_) | PartContent::Url(_) => {
                return Err(Fault::content_type(
                    "this capsule reads text and data parts only; send a file's contents as text",
                ));
            }
        }
    }
    Ok(lines.join("\n"))
}

/// A new task, handed to the capsule's queue. A capsule that cannot take it answers
/// with the task `REJECTED`, as the seed's wire rejects it.
fn submit(
    request: &Request,
    served: &Served,
    message: Message,
    text: String,
) -> Result<String, Fault> {
    let arrived = Arrived {
        message_id: message.message_id.clone(),
        context_id: message.context_id.clone(),
        text,
        v1: message,
    };
    match served.take(request, arrived) {
        (task, _, Ok(()) | Err(Refusal::Busy)) => Ok(task),
        (_, _, Err(Refusal::Closed)) => Err(Fault::internal(
            "the capsule is stopping and takes no more tasks",
        )),
    }
}

/// The answer to a task waiting in `request-input`: handed to the waiting tool.
/// Returns the task's sequence number before the answer.
fn answer_input(served: &Served, task: &str, message: Message, text: String) -> Result<u64, Fault> {
    let tasks = served.wire.tasks();
    let (snapshot, seq) = tasks
        .snapshot(task)
        .ok_or_else(|| Fault::task_not_found(task))?;
    let state = snapshot.status.state.clone();
    if state.is_terminal() {
        return Err(Fault::unsupported(format!(
            "task {task} has ended ({}); send a message without taskId to start a new task",
            state_name(&state)
        )));
    }
    if state != TaskState::InputRequired {
        return Err(Fault::unsupported(format!(
            "task {task} is not waiting for input ({}); only a task in TASK_STATE_INPUT_REQUIRED takes a follow-up message",
            state_name(&state)
        )));
    }
    if message
        .context_id
        .as_deref()
        .is_some_and(|c| c != snapshot.context_id)
    {
        return Err(Fault::invalid_params(format!(
            "message.contextId is not the context of task {task} ({})",
            snapshot.context_id
        )));
    }
    served
        .inbox
        .deliver(&snapshot.context_id, text)
        .map_err(|_| Fault::unsupported(format!("task {task} is no longer waiting for input")))?;
    tasks.answered(task, message);
    Ok(seq)
}

/// Waits until the task ends, or waits for input at an event past `after`.
async fn settle(tasks: &Tasks, task: &str, after: u64) {
    let mut changes = tasks.watch();
    while let Some((state, seq)) = tasks.state(task) {
        let waits = state == TaskState::InputRequired && seq > after;
        if state.is_terminal() || waits || changes.changed().await.is_err() {
            return;
        }
    }
}

/// Waits until the task is in a terminal state.
async fn ended(tasks: &Tasks, task: &str) {
    let mut changes = tasks.watch();
    while tasks
        .state(task)
        .is_some_and(|(state, _)| !state.is_terminal())
    {
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// `GetTask`: the task, its history cut to `historyLength`.
fn get(tasks: &Tasks, params: Value) -> Result<String, Fault> {
    let get: GetTaskRequest = self::params(params)?;
    let (task, seq) = tasks
        .snapshot(&get.id)
        .ok_or_else(|| Fault::task_not_found(&get.id))?;
    history_length(get.history_length)?;
    Ok(encode(&shaped(
        with_seq(task, seq),
        get.history_length,
        true,
    )))
}

fn history_length(n: Option<i32>) -> Result<(), Fault> {
    match n {
        Some(n) if n < 0 => Err(Fault::invalid_params("historyLength must not be negative")),
        _ => Ok(()),
    }
}

/// `ListTasks`: the kept tasks, most recently updated first, a page at a time.
fn list(tasks: &Tasks, params: Value) -> Result<String, Fault> {
    let list: ListTasksRequest = self::params(params)?;
    history_length(list.history_length)?;
    let size = match list.page_size {
        None | Some(0) => DEFAULT_PAGE,
        Some(n) if n < 0 => return Err(Fault::invalid_params("pageSize must not be negative")),
        Some(n) => (n as usize).min(MAX_PAGE),
    };
    let offset = match list.page_token.as_deref().filter(|t| !t.is_empty()) {
        None => 0,
        Some(token) => token.parse::<usize>().map_err(|_| {
            Fault::invalid_params(format!("pageToken {token:?} is not one this capsule gave"))
        })?,
    };
    let mut found: Vec<Task> = tasks
        .all()
        .into_iter()
        .rev()
        .filter(|(t, _)| list.context_id.as_ref().is_none_or(|c| &t.context_id == c))
        .filter(|(t, _)| list.status.as_ref().is_none_or(|s| &t.status.state == s))
        .filter(|(t, _)| {
            list.status_timestamp_after
                .is_none_or(|after| t.status.timestamp.is_some_and(|at| at > after))
        })
        .map(|(t, seq)| with_seq(t, seq))
        .collect();
    // Stable: tasks updated at the same instant stay newest-created first.
    found.sort_by_key(|t| std::cmp::Reverse(t.status.timestamp));
    let total = found.len();
    let include_artifacts = list.include_artifacts.unwrap_or(false);
    let page: Vec<Task> = found
        .into_iter()
        .skip(offset)
        .take(size)
        .map(|t| shaped(t, list.history_length, include_artifacts))
        .collect();
    let next = offset + size;
    let response = ListTasksResponse {
        tasks: page,
        next_page_token: if next < total {
            next.to_string()
        } else {
            String::new()
        },
        page_size: size as i32,
        total_size: i32::try_from(total).unwrap_or(i32::MAX),
    };
    Ok(encode(&response))
}

/// `CancelTask`: a queued task ends at once, a running one at its next wait; the
/// answer is the task once it has ended (or as it stands after a grace).
async fn cancel(served: &Served, params: Value) -> Result<String, Fault> {
    let cancel: CancelTaskRequest = self::params(params)?;
    let tasks = served.wire.tasks();
    let id = cancel.id.as_str();
    match served.control.cancel(id) {
        Ok(()) => {
            let _ = tokio::time::timeout(CANCEL_SETTLES, ended(tasks, id)).await;
            let (task, seq) = tasks
                .snapshot(id)
                .ok_or_else(|| Fault::task_not_found(id))?;
            Ok(encode(&with_seq(task, seq)))
        }
        Err(CancelError::NotCancelable | CancelError::NotFound) => match tasks.snapshot(id) {
            // A task of an earlier session of this capsule is known only to the store.
            Some((task, _)) => Err(Fault::not_cancelable(id, &state_name(&task.status.state))),
            None => Err(Fault::task_not_found(id)),
        },
    }
}

/// `SubscribeToTask`: without `Last-Event-ID`, the task as it stands and then its
/// events; with it, exactly the events after that one.
async fn subscribe(socket: TcpStream, request: &Request, tasks: &Tasks, id: Value, params: Value) {
    match subscription(request, tasks, params) {
        Ok((task, first, after)) => stream::follow(socket, tasks, &task, &id, first, after).await,
        Err(fault) => reply(socket, rpc::error(&id, &fault)).await,
    }
}

fn subscription(
    request: &Request,
    tasks: &Tasks,
    params: Value,
) -> Result<(String, Option<Event>, u64), Fault> {
    let sub: SubscribeToTaskRequest = self::params(params)?;
    let task = sub.id;
    let (snapshot, seq) = tasks
        .snapshot(&task)
        .ok_or_else(|| Fault::task_not_found(&task))?;
    let ended = || {
        Fault::unsupported(format!(
            "task {task} has ended ({}); read it with GetTask",
            state_name(&snapshot.status.state)
        ))
    };
    let Some(last) = request.header("last-event-id") else {
        if snapshot.status.state.is_terminal() {
            return Err(ended());
        }
        let first = snapshot_event(tasks, &task);
        let after = first.as_ref().map_or(seq, |e| e.seq);
        return Ok((task.clone(), first, after));
    };
    let last: u64 = last.trim().parse().map_err(|_| {
        Fault::invalid_params("Last-Event-ID must be a sequence number this task gave")
    })?;
    if last > seq {
        return Err(Fault::invalid_params(format!(
            "Last-Event-ID {last} is past task {task}'s last event ({seq})"
        )));
    }
    match tasks.events_after(&task, last) {
        Ok((events, true)) if events.is_empty() => Err(ended()),
        Ok(_) => Ok((task, None, last)),
        Err(Missed::Gone { first_available }) => {
            Err(Fault::events_gone(&task, last, first_available))
        }
        Err(Missed::UnknownTask) => Err(Fault::task_not_found(&task)),
    }
}

/// The task as it stands, as a stream event numbered with its last event's number.
fn snapshot_event(tasks: &Tasks, task: &str) -> Option<Event> {
    let (snapshot, seq) = tasks.snapshot(task)?;
    let event = numbered(StreamResponse::Task(snapshot), seq);
    let json = serde_json::to_string(&event).ok()?;
    Some(Event {
        seq,
        json: crate::secret::scrub(&json).into_owned().into(),
        ends: false,
    })
}

/// `task` as a reader asked for it: its history cut to the last `history` messages
/// (none for 0), its artifacts left out unless asked for.
fn shaped(mut task: Task, history: Option<i32>, artifacts: bool) -> Task {
    if let (Some(n), Some(messages)) = (history, task.history.as_mut()) {
        let n = usize::try_from(n).unwrap_or(0);
        let cut = messages.len().saturating_sub(n);
        messages.drain(..cut);
    }
    if task.history.as_ref().is_some_and(Vec::is_empty) {
        task.history = None;
    }
    if !artifacts {
        task.artifacts = None;
    }
    task
}

pub(super) fn state_name(state: &TaskState) -> String {
    serde_json::to_value(state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}
