//! A capsule's address as both doors reach it ([`Served`]), and the one way a message
//! becomes a task there, whether it came through the seed's wire, the A2A v1.0 door or
//! from another member of a formation ([`peer_door`]).

pub mod peer_door;

use std::sync::Arc;

use crate::control::Control;
use crate::http1::Request;
use crate::ids;
use crate::input::Inbox;
use crate::manifest::Conversation;
use crate::peer::{self, desk::Desk};
use crate::queue::{Origin, Pending, Queue, Refusal, Source};
use crate::trace::{SessionTrace, line};
use crate::wire::Wire;
use peer_door::Sent;

/// What the address serves: the session's id and the handles its methods reach.
pub struct Served {
    pub session_id: String,
    /// The conversation mode `stream/watch` announces.
    pub mode: Conversation,
    pub queue: Arc<Queue>,
    pub wire: Arc<Wire>,
    pub trace: Arc<SessionTrace>,
    /// Where a message answering an open `request-input` wait goes.
    pub inbox: Arc<Inbox>,
    /// `tasks/cancel` and `murmur/stop`.
    pub control: Arc<Control>,
    /// The agent card, encoded once.
    pub card: bytes::Bytes,
    /// Where it is served (`http://HOST:PORT/`, or a hosted capsule's `/c/<id>/`).
    pub address: String,
    /// Whether and from whom it takes peer tasks, and the chains of those it holds.
    pub desk: Arc<Desk>,
}

/// A message that is to become a task, from either door.
pub struct Arrived {
    pub message_id: String,
    pub context_id: Option<String>,
    /// The task's text, from the message's parts.
    pub text: String,
    /// The message as the task's history keeps it.
    pub v1: ::a2a::Message,
}

/// How long a request's span waits for its task's state to settle.
const SETTLES: std::time::Duration = std::time::Duration::from_millis(200);

impl Served {
    /// Hands a new task to the queue: its arrival traced and kept by the task store, and
    /// if the capsule cannot take it, its refusal too. Returns the task's id and context.
    /// A peer task has passed the desk already (the server's `handle`); its chain is held
    /// here.
    pub fn take(
        &self,
        request: &Request,
        arrived: Arrived,
    ) -> (String, String, Result<(), Refusal>) {
        self.take_traced(request, arrived, None)
    }

    /// [`Served::take`], with the trace context the request's body carried (an MCP
    /// call's `_meta.traceparent`), which comes before its `traceparent` header.
    pub fn take_traced(
        &self,
        request: &Request,
        arrived: Arrived,
        traceparent: Option<&str>,
    ) -> (String, String, Result<(), Refusal>) {
        let origin = Origin::claimed(request.header(peer::ORIGIN_HEADER));
        let peer = (origin == Origin::Peer)
            .then(|| peer_door::admitted(&self.desk, request).ok())
            .flatten()
            .map(|admitted| Sent {
                call_id: request.header(peer::CALL_HEADER).map(str::to_string),
                caller_task: request.header(peer::CALLER_TASK_HEADER).map(str::to_string),
                admitted,
            });
        let traceparent = traceparent.or_else(|| request.header("traceparent"));
        self.enter(arrived, origin, traceparent, peer)
    }

    /// A request either door answered, as a server span when export is on: named for
    /// its method, under the caller's `traceparent`, with the task it was about and
    /// that task's state once the answer was done. A stream that ended on the task's
    /// final frame is answered a moment before the task store settles: its state is
    /// read once it has (waiting at most [`SETTLES`]).
    pub fn traced(
        &self,
        request: &Request,
        method: &str,
        started: std::time::SystemTime,
        task: Option<&str>,
    ) {
        if self.trace.feed().is_none() {
            return;
        }
        // On a task of its own: the connection's handler may be dropped right after its
        // last frame (a capsule stopped the moment it answered), and the span must not
        // go with it.
        let trace = self.trace.clone();
        let wire = self.wire.clone();
        let traceparent = request.header("traceparent").map(str::to_string);
        let method = method.to_string();
        let task = task.map(str::to_string);
        tokio::spawn(async move {
            let tasks = wire.tasks();
            if let Some(task) = &task {
                let settled = async {
                    let mut changes = tasks.watch();
                    while tasks
                        .state(task)
                        .is_some_and(|(s, _)| s == ::a2a::TaskState::Working)
                    {
                        if changes.changed().await.is_err() {
                            return;
                        }
                    }
                };
                let _ = tokio::time::timeout(SETTLES, settled).await;
            }
            let state = task
                .as_deref()
                .and_then(|t| tasks.snapshot(t))
                .map(|(snapshot, _)| crate::a2a::state_word(&snapshot.status.state));
            if let Some(feed) = trace.feed() {
                feed.request(&crate::telemetry::Served {
                    method: &method,
                    traceparent: traceparent.as_deref(),
                    started,
                    task: task.as_deref(),
                    state: state.as_deref(),
                });
            }
        });
    }

    /// A new task of `origin` into the queue, from either door or another member.
    fn enter(
        &self,
        arrived: Arrived,
        origin: Origin,
        traceparent: Option<&str>,
        peer: Option<Sent>,
    ) -> (String, String, Result<(), Refusal>) {
        let task = Pending {
            breach: None,
            traceparent: traceparent
                .filter(|t| crate::telemetry::context::is_traceparent(t))
                .map(str::to_string),
            id: ids::task(),
            context_id: arrived.context_id.unwrap_or_else(ids::context),
            text: arrived.text,
            origin,
            source: Source::A2a,
            message_id: Some(arrived.message_id),
        };
        let (task_id, context_id) = (task.id.clone(), task.context_id.clone());
        let received = line::a2a_task_received(&task, traceparent);
        // A failed trace write is kept by the trace: the loop's next step ends on it.
        let _ = self.trace.under_session(Some(&task_id), received);
        match peer {
            Some(sent) => peer_door::hold(self, &task_id, sent, traceparent),
            None => self.desk.arrived(&task_id, None, traceparent),
        }
        let tasks = self.wire.tasks();
        tasks.submitted(&task_id, &context_id, Some(arrived.v1));
        let taken = self.queue.submit(task);
        match &taken {
            Ok(()) => {}
            Err(Refusal::Busy) => {
                // The trace says what became of every task it saw arrive.
                let rejected = line::task_rejected(&task_id, line::Rejected::Busy);
                let _ = self.trace.under_session(Some(&task_id), rejected);
                tasks.rejected(&task_id, &context_id, None, REJECTED_BUSY);
            }
            Err(Refusal::Closed) => tasks.rejected(&task_id, &context_id, None, QUEUE_CLOSED),
        }
        (task_id, context_id, taken)
    }
}

const REJECTED_BUSY: &str = "task rejected: capsule is busy";
pub const QUEUE_CLOSED: &str = "internal error: queue send failed";
