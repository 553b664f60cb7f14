//! A call to another member of the same formation: the callee's door code runs in
//! this process, without a socket. The callee takes the task as any peer task (its
//! desk's consent, edge and chain checks, its queue's `peer` lane, its task store),
//! and the caller follows that task's states until it ends.

use futures_util::future::BoxFuture;

use super::{Answer, Ask, Failure, FailureKind, Watcher, bounded};

/// What a member's door does for a call from another member. The door implements it;
/// this module only drives it.
pub trait Callee: Send + Sync {
    /// Takes `ask` as a peer task presenting `credential`: its task id, or why not.
    fn take(&self, ask: &Ask, credential: &str) -> Result<String, Failure>;
    /// Waits for what `task` does after its event `after`.
    fn next<'a>(&'a self, task: &'a str, after: u64) -> BoxFuture<'a, Progress>;
    /// The caller's reply to a task waiting for input.
    fn reply(&self, task: &str, text: String) -> Result<(), String>;
    /// The caller gave up on `task`: its task was canceled or ran out of time.
    fn cancel(&self, task: &str);
    /// The member's address, where its page is: shown beside the caller's wait.
    fn page(&self) -> Option<String>;
}

/// What a followed task did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// It waits for input, at event `seq`.
    Input { prompt: String, seq: u64 },
    /// It completed with this answer.
    Completed(String),
    /// It ended otherwise: its state's name and message.
    Ended { state: String, message: String },
    /// The task store no longer knows it (the member's session ended).
    Gone,
}

/// Cancels the callee's task if the call is dropped before the task ended.
struct Hold<'a> {
    callee: &'a dyn Callee,
    task: String,
    ended: bool,
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.callee.cancel(&self.task);
        }
    }
}

/// Calls `name` (reached through `callee`) with `ask`, presenting `credential`.
pub async fn call(
    name: &str,
    callee: &dyn Callee,
    credential: &str,
    ask: &Ask,
    watcher: &dyn Watcher,
) -> Result<Answer, Failure> {
    let task = callee.take(ask, credential)?;
    watcher.taken(&task, callee.page().as_deref());
    let mut hold = Hold {
        callee,
        task: task.clone(),
        ended: false,
    };
    let mut after = 0;
    loop {
        match callee.next(&task, after).await {
            Progress::Input { prompt, seq } => {
                after = seq;
                let reply = watcher.input(&prompt).await.map_err(|why| {
                    Failure::new(
                        FailureKind::Failed,
                        format!("{name} asked for input and got none: {why}"),
                    )
                    .of_task(&task)
                })?;
                callee.reply(&task, reply).map_err(|why| {
                    Failure::new(FailureKind::Failed, format!("{name} took no reply: {why}"))
                        .of_task(&task)
                })?;
            }
            Progress::Completed(text) => {
                hold.ended = true;
                let (text, truncated) = bounded(text, ask.max_answer_bytes);
                return Ok(Answer {
                    text,
                    task_id: task,
                    truncated,
                });
            }
            Progress::Ended { state, message } => {
                hold.ended = true;
                let told = format!("{name}'s task ended {state}: {message}");
                return Err(Failure::new(FailureKind::Failed, told).of_task(&task));
            }
            Progress::Gone => {
                hold.ended = true;
                let told = format!("{name} ended its session before it answered");
                return Err(Failure::new(FailureKind::Unreachable, told).of_task(&task));
            }
        }
    }
}
