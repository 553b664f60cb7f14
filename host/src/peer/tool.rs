//! `call-member`: the tool a capsule's model hands a task to a peer with, under
//! upstream Murmur's name and input (`{"member", "task"}`). Unlike upstream's, the
//! call waits for the answer within the turn, holding no thread, so a model that calls
//! several peers in one reply has them work side by side and reads every answer at
//! once. The answer comes back fenced with a source naming the peer.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use super::desk::{Desk, Peer, Target};
use super::{Answer, Ask, Failure, FailureKind, Watcher, call_id, member};
use crate::frames::State;
use crate::input::Port;
use crate::wire::Wire;

/// The tool's name, as upstream's.
pub const NAME: &str = "call-member";

/// What the model reads about the tool.
pub fn description(callees: &[&str]) -> String {
    format!(
        "Hand one task to another agent and wait for its answer. `member` is one of: {}. \
         `task` is the whole of what that agent is told, so state it in full and include the \
         content of any file it needs: agents do not share files. The result is the agent's \
         answer. Calling several agents in one reply has them work at the same time.",
        callees.join(", ")
    )
}

/// The input schema, with the callees built in.
pub fn schema(callees: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": {
            "member": {"type": "string", "enum": callees},
            "task": {"type": "string"}
        },
        "required": ["member", "task"]
    })
}

/// The fence source of a peer's answer.
pub fn source(peer: &str) -> String {
    format!("peer:{peer}")
}

/// A call's input, read. A refusal is what the model is told; nothing was sent.
pub fn parse<'d>(desk: &'d Desk, input: &str) -> Result<(&'d Peer, String), String> {
    let value: Value = serde_json::from_str(input)
        .map_err(|_| format!("tool '{NAME}' input must be a JSON object"))?;
    let member = value.get("member").and_then(Value::as_str);
    let task = value.get("task").and_then(Value::as_str);
    let (Some(member), Some(task)) = (member, task) else {
        return Err(format!(
            "tool '{NAME}' input needs \"member\" and \"task\", both strings"
        ));
    };
    if task.trim().is_empty() {
        return Err(format!(
            "tool '{NAME}': \"task\" is empty; state the whole task"
        ));
    }
    let peer = desk
        .peer(member)
        .ok_or_else(|| not_a_callee(desk, member))?;
    Ok((peer, task.to_string()))
}

/// Upstream's sentence for a member the capsule may not call.
fn not_a_callee(desk: &Desk, member: &str) -> String {
    let member = crate::escape::line(member);
    let names: Vec<&str> = desk.peers().iter().map(|p| p.name.as_str()).collect();
    if names.is_empty() {
        format!("'{member}' is not a member this capsule may call; it may call none")
    } else {
        format!(
            "'{member}' is not a member this capsule may call; it may call: {}",
            names.join(", ")
        )
    }
}

/// What one call did, for the caller's trace and frames.
pub struct Called {
    pub call_id: String,
    pub peer: String,
    /// The chain the call carried, as its header shows it.
    pub chain: String,
    /// How long the call took, from sending to the answer.
    pub took: Duration,
    pub outcome: Result<Answer, Failure>,
}

/// One call as the caller's tool makes it.
pub struct Outgoing<'a> {
    pub text: String,
    /// The caller's task.
    pub task: &'a str,
    pub traceparent: Option<String>,
    pub max_answer_bytes: usize,
    /// `capabilities.limits.deadline_seconds`: past it the call ends and the callee's
    /// task is canceled.
    pub deadline: Duration,
}

/// Sends `out` to `peer`, reporting on `wire` and asking the caller's person through
/// `port` when the callee asks for input.
pub async fn call(
    desk: &Desk,
    peer: &Peer,
    out: Outgoing<'_>,
    wire: &Arc<Wire>,
    port: Option<&Port>,
) -> Called {
    let ask = Ask {
        call_id: call_id(),
        caller_task: out.task.to_string(),
        text: out.text,
        chain: desk.chain_for(out.task),
        traceparent: out.traceparent,
        max_answer_bytes: out.max_answer_bytes,
    };
    let watcher = Waiting {
        peer: &peer.name,
        wire,
        port,
    };
    let started = std::time::Instant::now();
    let reached = async {
        match &peer.target {
            Target::Member { callee, credential } => match callee.get() {
                Some(callee) => {
                    member::call(&peer.name, callee.as_ref(), credential, &ask, &watcher).await
                }
                None => Err(Failure::new(
                    FailureKind::Unreachable,
                    format!("{} is not open yet", peer.name),
                )),
            },
            Target::Remote(remote) => remote.call(&ask, &watcher).await,
        }
    };
    // Dropping the call on its deadline cancels the callee's task.
    let outcome = match tokio::time::timeout(out.deadline, reached).await {
        Ok(outcome) => outcome,
        Err(_) => {
            if let Target::Remote(remote) = &peer.target {
                remote.settled().await;
            }
            Err(Failure::new(
                FailureKind::Failed,
                format!(
                    "{} did not answer within {} s (capabilities.limits.deadline_seconds); its task was canceled",
                    peer.name,
                    out.deadline.as_secs()
                ),
            ))
        }
    };
    Called {
        took: started.elapsed(),
        chain: ask.chain.header(),
        call_id: ask.call_id,
        peer: peer.name.clone(),
        outcome,
    }
}

/// The caller's side of a running call: its frames say which peer it waits on, and a
/// callee's question goes to the caller's person.
struct Waiting<'a> {
    peer: &'a str,
    wire: &'a Arc<Wire>,
    port: Option<&'a Port>,
}

impl Watcher for Waiting<'_> {
    fn taken(&self, task_id: &str, page: Option<&str>) {
        let message = match page {
            Some(page) => format!(
                "waiting on peer {} (its task {task_id}, at {page})",
                self.peer
            ),
            None => format!("waiting on peer {} (its task {task_id})", self.peer),
        };
        self.wire.status(State::Working, &message, None);
    }

    fn input<'a>(&'a self, prompt: &'a str) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            match self.port {
                Some(port) => port.ask(&format!("{} asks: {prompt}", self.peer)).await,
                None => Err(crate::input::no_a2a_task()),
            }
        })
    }
}
