//! The task queue: three lanes (`user` > `peer` > `bg`), arrival order within a lane,
//! and the lifecycle rules that decide when a capsule takes no more tasks. Under
//! `mur serve` it also writes down what waits ([`backlog`]), so a crash loses none of it.

pub mod backlog;

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use backlog::{Backlog, Note};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acceptance {
    None,
    Single,
    Queue,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterTask {
    Exit,
    Sleep,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Lane {
    User = 0,
    Peer = 1,
    Bg = 2,
}

/// Where a task came from: it decides the task's lane and its trust class. These are
/// the origins something in this host produces (the launch task, requests, detached
/// commands, the session loop's follow-ups); a scheduler's `schedule` would join them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    User,
    Peer,
    Event,
    Completion,
    System,
}

impl Origin {
    /// What an inbound request's `x-murmur-task-origin` header makes of it: only `peer`
    /// and `completion` are taken as claimed, so an HTTP caller never reaches the `user`
    /// lane; anything else is an `event`.
    pub fn claimed(header: Option<&str>) -> Origin {
        match header.map(str::trim) {
            Some("peer") => Origin::Peer,
            Some("completion") => Origin::Completion,
            _ => Origin::Event,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Origin::User => "user",
            Origin::Peer => "peer",
            Origin::Event => "event",
            Origin::Completion => "completion",
            Origin::System => "system",
        }
    }

    /// The seed's mapping from a task's origin to the lane it waits in.
    pub fn lane(self) -> Lane {
        match self {
            Origin::User => Lane::User,
            Origin::Peer => Lane::Peer,
            _ => Lane::Bg,
        }
    }

    /// Whether the task's text comes from someone the capsule trusts.
    pub fn trusted(self) -> bool {
        self == Origin::User
    }
}

/// How a task reached the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The launch task (`--task`, or `task.md` in the workdir).
    TaskMd,
    /// A `message/stream` request.
    A2a,
    /// A detached shell command ended.
    DetachedShell,
    /// `--resume` reports commands a killed runtime left behind.
    DetachedLost,
    /// The session loop queued a follow-up (`enqueue`).
    Loop,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::TaskMd => "task_md",
            Source::A2a => "a2a",
            Source::DetachedShell => "detached_shell",
            Source::DetachedLost => "detached_lost",
            Source::Loop => "loop",
        }
    }
}

impl Lane {
    pub fn as_str(self) -> &'static str {
        match self {
            Lane::User => "user",
            Lane::Peer => "peer",
            Lane::Bg => "bg",
        }
    }
}

/// A task waiting to run.
#[derive(Clone, Debug, PartialEq)]
pub struct Pending {
    pub id: String,
    pub context_id: String,
    pub text: String,
    pub origin: Origin,
    pub source: Source,
    pub message_id: Option<String>,
    /// The W3C `traceparent` it arrived with, well formed: its spans' parent.
    pub traceparent: Option<String>,
    /// Set when the task must fail as it starts: the workdir passed its quota while
    /// the detached command it reports on ran.
    pub breach: Option<String>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The capsule cannot take another task (the seed's `rejected` status).
    Busy,
    /// The queue is closed: the session is ending.
    Closed,
}

pub struct Policy {
    pub acceptance: Acceptance,
    pub after_task: AfterTask,
    pub depth: usize,
    /// How long a capsule that may still end waits for a task before it ends.
    pub idle: Duration,
}

pub struct Queue {
    policy: Policy,
    state: Mutex<State>,
    /// A task arrived (or the queue closed): for the loop waiting in `next`.
    notify: Notify,
    /// The queue closed: for whoever waits for the session to be stopped.
    closing: Notify,
}

#[derive(Default)]
struct State {
    lanes: [VecDeque<Pending>; 3],
    /// Tasks handed to the loop so far.
    taken: usize,
    closed: bool,
    /// Where what waits is written down, when the host keeps it across a crash.
    backlog: Option<Backlog>,
}

impl State {
    fn waiting(&self) -> usize {
        self.lanes.iter().map(VecDeque::len).sum()
    }

    fn pop(&mut self) -> Option<Pending> {
        self.lanes.iter_mut().find_map(VecDeque::pop_front)
    }

    /// Queues `task` in its lane, written down first when a backlog keeps the queue:
    /// the caller acknowledges the task only once this returns.
    fn push(&mut self, task: Pending) {
        let lane = task.origin.lane() as usize;
        self.lanes[lane].push_back(task);
        if let (Some(backlog), Some(task)) = (&mut self.backlog, self.lanes[lane].back()) {
            backlog.note(Note::Queued(task), &self.lanes);
        }
    }

    fn note(&mut self, note: Note<'_>) {
        if let Some(backlog) = &mut self.backlog {
            backlog.note(note, &self.lanes);
        }
    }
}

impl Queue {
    pub fn new(policy: Policy) -> Self {
        Queue {
            policy,
            state: Mutex::new(State::default()),
            notify: Notify::new(),
            closing: Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Writes down every later change to what waits in `backlog` (opened with what
    /// waits now: see [`backlog::Backlog::open`]).
    pub fn keep_in(&self, backlog: Backlog) {
        self.state().backlog = Some(backlog);
    }

    /// Tasks the capsule gives itself (the launch task, reports) are never refused.
    pub fn push_own(&self, task: Pending) {
        let lane = task.origin.lane();
        self.state().lanes[lane as usize].push_back(task);
        self.notify.notify_one();
    }

    /// A follow-up the session loop gives the capsule: taken under any acceptance, as
    /// the capsule's own tasks are, but only while fewer than `queue_depth` wait.
    pub fn push_follow_up(&self, task: Pending) -> Result<(), Refusal> {
        let mut state = self.state();
        if state.closed {
            return Err(Refusal::Closed);
        }
        if state.waiting() >= self.policy.depth {
            return Err(Refusal::Busy);
        }
        state.push(task);
        drop(state);
        self.notify.notify_one();
        Ok(())
    }

    /// A task from a client, refused when the lifecycle has no room for it.
    pub fn submit(&self, task: Pending) -> Result<(), Refusal> {
        let mut state = self.state();
        let room = match self.policy.acceptance {
            Acceptance::None => false,
            Acceptance::Single => state.taken == 0 && state.waiting() == 0,
            Acceptance::Queue => state.waiting() < self.policy.depth,
        };
        if !room {
            return Err(Refusal::Busy);
        }
        if state.closed {
            return Err(Refusal::Closed);
        }
        state.push(task);
        drop(state);
        self.notify.notify_one();
        Ok(())
    }

    /// The next task for the loop, or `None` when the session is over.
    pub async fn next(&self) -> Option<Pending> {
        loop {
            let notified = self.notify.notified();
            if let Some(next) = self.try_next() {
                return next;
            }
            match (self.policy.acceptance, self.policy.after_task) {
                (Acceptance::Queue, AfterTask::Sleep) => notified.await,
                _ => {
                    if tokio::time::timeout(self.policy.idle, notified)
                        .await
                        .is_err()
                    {
                        // One last look: a task may have arrived as the clock ran out.
                        return self.try_next().flatten();
                    }
                }
            }
        }
    }

    /// `Some(task)`, `Some(None)` when the session is over, `None` to wait.
    fn try_next(&self) -> Option<Option<Pending>> {
        let mut state = self.state();
        if state.closed {
            return Some(None);
        }
        if let Some(task) = state.pop() {
            state.taken += 1;
            state.note(Note::Started(&task.id));
            return Some(Some(task));
        }
        let over = match self.policy.acceptance {
            Acceptance::None => true,
            Acceptance::Single => state.taken > 0,
            Acceptance::Queue => false,
        };
        over.then_some(None)
    }

    /// Takes a waiting task out of its lane (a queued task canceled before it started).
    pub fn remove(&self, task_id: &str) -> Option<Pending> {
        let mut state = self.state();
        let removed = state.lanes.iter_mut().find_map(|lane| {
            let at = lane.iter().position(|t| t.id == task_id)?;
            lane.remove(at)
        })?;
        state.note(Note::Removed(&removed.id));
        Some(removed)
    }

    /// The tasks still waiting, taken out (the session is ending without them).
    /// How many tasks wait in the queue.
    pub fn waiting(&self) -> usize {
        self.state().lanes.iter().map(|lane| lane.len()).sum()
    }

    pub fn drain(&self) -> Vec<Pending> {
        let mut state = self.state();
        let drained: Vec<Pending> = state
            .lanes
            .iter_mut()
            .flat_map(|lane| lane.drain(..))
            .collect();
        // Each one ends (canceled or failed) as it is drained: none waits any more.
        for task in &drained {
            state.note(Note::Removed(&task.id));
        }
        drained
    }

    /// Completes once the queue is closed (the session was stopped).
    pub async fn closed(&self) {
        loop {
            let notified = self.closing.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.state().closed {
                return;
            }
            notified.await;
        }
    }

    pub fn is_closed(&self) -> bool {
        self.state().closed
    }

    /// Ends the session: the loop's next `next-task` answers `None`.
    pub fn close(&self) {
        self.state().closed = true;
        self.notify.notify_waiters();
        self.notify.notify_one();
        self.closing.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, origin: Origin) -> Pending {
        Pending {
            breach: None,
            traceparent: None,
            id: id.into(),
            context_id: "ctx".into(),
            text: String::new(),
            origin,
            source: Source::A2a,
            message_id: None,
        }
    }

    fn queue(acceptance: Acceptance, depth: usize) -> Queue {
        Queue::new(Policy {
            acceptance,
            after_task: AfterTask::Sleep,
            depth,
            idle: Duration::from_millis(20),
        })
    }

    #[tokio::test]
    async fn lanes_run_user_then_peer_then_bg_in_arrival_order() {
        let q = queue(Acceptance::Queue, 10);
        q.submit(task("b1", Origin::Event)).unwrap();
        q.submit(task("p1", Origin::Peer)).unwrap();
        q.submit(task("b2", Origin::Completion)).unwrap();
        q.push_own(task("u1", Origin::User));
        q.submit(task("p2", Origin::Peer)).unwrap();
        let mut order = Vec::new();
        for _ in 0..5 {
            order.push(q.next().await.unwrap().id);
        }
        assert_eq!(order, ["u1", "p1", "p2", "b1", "b2"]);
    }

    #[tokio::test]
    async fn single_takes_one_task_then_ends() {
        let q = queue(Acceptance::Single, 1);
        q.submit(task("a", Origin::Event)).unwrap();
        assert_eq!(q.submit(task("b", Origin::Event)), Err(Refusal::Busy));
        assert_eq!(q.next().await.unwrap().id, "a");
        assert_eq!(q.submit(task("c", Origin::Event)), Err(Refusal::Busy));
        assert_eq!(q.next().await, None);
    }

    #[tokio::test]
    async fn queue_depth_bounds_waiting_tasks() {
        let q = queue(Acceptance::Queue, 2);
        q.submit(task("a", Origin::Event)).unwrap();
        q.submit(task("b", Origin::Event)).unwrap();
        assert_eq!(q.submit(task("c", Origin::Event)), Err(Refusal::Busy));
        q.next().await.unwrap();
        q.submit(task("c", Origin::Event)).unwrap();
    }

    #[tokio::test]
    async fn none_runs_only_its_own_tasks() {
        let q = queue(Acceptance::None, 1);
        assert_eq!(q.submit(task("a", Origin::Event)), Err(Refusal::Busy));
        q.push_own(task("launch", Origin::User));
        assert_eq!(q.next().await.unwrap().id, "launch");
        assert_eq!(q.next().await, None);
    }

    #[tokio::test]
    async fn idle_capsule_ends_after_the_idle_wait_unless_it_sleeps() {
        let q = Queue::new(Policy {
            acceptance: Acceptance::Queue,
            after_task: AfterTask::Exit,
            depth: 1,
            idle: Duration::from_millis(10),
        });
        assert_eq!(q.next().await, None);
        let sleeping = queue(Acceptance::Queue, 1);
        let waited = tokio::time::timeout(Duration::from_millis(50), sleeping.next()).await;
        assert!(waited.is_err(), "queue+sleep waits for the next task");
        sleeping.close();
        assert_eq!(sleeping.next().await, None);
    }
}
