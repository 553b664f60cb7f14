//! The lines of a call between peers, one on each side, joined by the call id.

use serde_json::json;

use super::Line;

/// What the caller's `member_call` line records.
pub struct MemberCall<'a> {
    pub call_id: &'a str,
    pub member: &'a str,
    /// `answered`, or the failure's kind (`refused`, `busy`, `failed`, `unreachable`).
    pub status: &'a str,
    pub member_task_id: Option<&'a str>,
    pub duration_ms: u64,
    /// The same, finer: a call between members takes well under a millisecond.
    pub duration_us: u64,
    pub answer_bytes: usize,
    pub truncated: bool,
    /// The chain the call carried, the caller last.
    pub chain: &'a str,
}

/// `member_call` (upstream's name): a call this capsule made, once it ended.
pub fn member_call(call: &MemberCall<'_>) -> Line {
    Line::new(
        "member_call",
        json!({
            "call_id": call.call_id,
            "member": call.member,
            "status": call.status,
            "member_task_id": call.member_task_id,
            "duration_ms": call.duration_ms,
            "duration_us": call.duration_us,
            "answer_bytes": call.answer_bytes,
            "truncated": call.truncated,
            "chain": call.chain,
        }),
    )
}

/// What the callee's `peer_task_received` line records.
pub struct PeerTask<'a> {
    pub call_id: Option<&'a str>,
    /// The roster name of the member that sent it, inside a formation.
    pub caller: Option<&'a str>,
    pub caller_task_id: Option<&'a str>,
    pub chain: &'a str,
}

/// `peer_task_received`: a peer task this capsule took (the line's task).
pub fn peer_task_received(task: &PeerTask<'_>) -> Line {
    Line::new(
        "peer_task_received",
        json!({
            "call_id": task.call_id,
            "caller": task.caller,
            "caller_task_id": task.caller_task_id,
            "chain": task.chain,
        }),
    )
}

/// What the callee's `peer_task_answered` line records.
pub struct PeerAnswered<'a> {
    pub call_id: Option<&'a str>,
    pub caller: Option<&'a str>,
    pub caller_task_id: Option<&'a str>,
    pub duration_ms: u64,
    /// The task's exit status: `ok` when it answered.
    pub outcome: &'a str,
}

/// `peer_task_answered`: a peer task this capsule took has ended (the line's task).
pub fn peer_task_answered(task: &PeerAnswered<'_>) -> Line {
    Line::new(
        "peer_task_answered",
        json!({
            "call_id": task.call_id,
            "caller": task.caller,
            "caller_task_id": task.caller_task_id,
            "duration_ms": task.duration_ms,
            "outcome": task.outcome,
        }),
    )
}
