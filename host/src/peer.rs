//! Peers: the agents a capsule may hand a task to, and the capsule's own side of a peer
//! task it is handed. A call is an A2A v1.0 task sent by the host, never by a guest:
//! to another member of the same formation through the same door code without a
//! socket ([`member`]), or to a remote A2A agent over HTTP through the allow-list
//! ([`remote`]). The model names a callee by its roster or manifest name only; where it
//! lives and how it is reached stay with the host.
//!
//! Both kinds answer the same way: an [`Answer`], or a [`Failure`] the caller's model
//! reads as a tool error. While a call runs, what the callee does that the caller's
//! side must see (it took the task, it asks for input) reaches a [`Watcher`].

pub mod chain;
pub mod desk;
pub mod member;
pub mod remote;
pub mod roster;
pub mod tool;

use futures_util::future::BoxFuture;

pub use chain::Chain;

/// The header that marks a task as sent by another capsule's host.
pub const ORIGIN_HEADER: &str = "x-murmur-task-origin";
/// The header that carries the chain of capsules waiting on a peer task.
pub const CHAIN_HEADER: &str = "x-murmur-call-chain";
/// The header that carries the caller's call id, for both sides' traces.
pub const CALL_HEADER: &str = "x-murmur-call-id";
/// The header that carries the caller's task id, for both sides' traces.
pub const CALLER_TASK_HEADER: &str = "x-murmur-caller-task";

/// One call, as the caller's host sends it.
#[derive(Debug, Clone)]
pub struct Ask {
    /// `mcl_…`: the same on both sides' trace lines.
    pub call_id: String,
    /// The caller's task, waiting on this call.
    pub caller_task: String,
    /// The whole task the callee is told.
    pub text: String,
    /// Every capsule waiting on this call, the caller last.
    pub chain: Chain,
    /// The caller's W3C trace context, passed on so one request can be followed.
    pub traceparent: Option<String>,
    /// The most of the callee's answer the caller keeps; the rest is cut and said so.
    pub max_answer_bytes: usize,
}

/// What a callee answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The callee's final answer, cut to [`Ask::max_answer_bytes`].
    pub text: String,
    /// The callee's task id.
    pub task_id: String,
    /// Whether `text` was cut.
    pub truncated: bool,
}

/// Why a call gave no answer. Every message names the peer by its name only and is
/// what the caller's model reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
    /// The callee's task, when it took one.
    pub task_id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The callee did not take the task: no consent, a refused credential, a cycle,
    /// a chain too deep, or a rule of the caller's own roster.
    Refused,
    /// The callee had no room for the task.
    Busy,
    /// The callee took the task and it ended without an answer (failed, canceled,
    /// rejected).
    Failed,
    /// The callee could not be reached, or stopped answering and could not be
    /// reattached.
    Unreachable,
}

impl FailureKind {
    /// The word trace lines and the caller's frames use.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Refused => "refused",
            FailureKind::Busy => "busy",
            FailureKind::Failed => "failed",
            FailureKind::Unreachable => "unreachable",
        }
    }
}

impl Failure {
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Failure {
            kind,
            message: message.into(),
            task_id: None,
        }
    }

    pub fn of_task(mut self, task_id: &str) -> Self {
        self.task_id = Some(task_id.to_string());
        self
    }
}

/// What the caller's side hears while a call runs.
pub trait Watcher: Send + Sync {
    /// The callee holds the task: its id, and the callee's page when it is a member
    /// whose address the caller's person may open.
    fn taken(&self, task_id: &str, page: Option<&str>);
    /// The callee asks for input: the caller's person is asked the same, and the
    /// reply (or why there is none) comes back.
    fn input<'a>(&'a self, prompt: &'a str) -> BoxFuture<'a, Result<String, String>>;
}

/// A new call id.
pub fn call_id() -> String {
    format!("mcl_{}", uuid::Uuid::now_v7().simple())
}

/// `text` cut to at most `max` bytes, on a character boundary; whether it was cut.
pub fn bounded(mut text: String, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    (text, true)
}
