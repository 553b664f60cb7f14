//! A hosted capsule's queue across a crash: the tasks its queue's file (see
//! [`crate::queue::backlog`]) says were waiting when the process died run again, in
//! their lanes and order, under the ids their clients hold; the ones that cannot end
//! `FAILED` saying why. Nothing queued is silently gone.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use ::a2a::{Message, Part, Role, Task};

use crate::queue::backlog::{self, Backlog, Fate, REQUEUE_FAILED, Saved};
use crate::queue::{Pending, Queue, Source};
use crate::task_store::{self, Journal, Tasks};

/// Why the task that was running when the process died failed.
pub const RAN_WHEN_STOPPED: &str = "the server stopped while the task ran";

/// The queue's file beside the task store's `journal`, both in the capsule's records.
pub fn backlog_path(journal: &Path) -> PathBuf {
    journal.with_file_name(backlog::FILE)
}

/// Restores the task store from `journal` and `earlier`, and the queue from its file at
/// `path`, which from then on keeps every change to what waits. `log` hears what the
/// operator should know (the capsule's log).
pub(super) fn restore(
    path: &Path,
    queue: &Queue,
    tasks: &Tasks,
    (journal, earlier): (Journal, Vec<Task>),
    log: &dyn Fn(&str),
) {
    let read = backlog::read(path);
    report(path, &read, log);
    let waiting: HashSet<String> = read.waiting.iter().map(|s| s.id.clone()).collect();
    let ran = read.last_started.clone();
    tasks.keep_in_with(journal, earlier, &|id| {
        unended(id, &waiting, ran.as_deref())
    });
    let ended = |id: &str| {
        tasks
            .state(id)
            .is_some_and(|(state, _)| state.is_terminal())
    };
    let mut requeued: Vec<Pending> = Vec::new();
    for fate in backlog::plan(read.waiting, queue.policy(), ended) {
        match fate {
            Fate::Run(task) => {
                if task.source == Source::A2a {
                    // The store holds the task as it was submitted, unless its line
                    // was lost with the crash: then it is made again from the queue's.
                    let message = user_message(&task.text, task.message_id.as_deref());
                    tasks.submitted(&task.id, &task.context_id, Some(message));
                }
                queue.push_own(task.clone());
                requeued.push(task);
            }
            Fate::Fail { saved, why } => {
                fail(tasks, &saved, &why);
                log(&format!("queue: task {} fails: {why}", saved.id));
            }
            Fate::Ended(id) => log(&format!(
                "queue: task {id} was still on the queue's file but had already ended"
            )),
        }
    }
    let backlog = Backlog::open(path, &requeued.iter().collect::<Vec<_>>());
    queue.keep_in(backlog);
    if !requeued.is_empty() {
        let ids: Vec<&str> = requeued.iter().map(|t| t.id.as_str()).collect();
        log(&format!(
            "queue: {} task(s) waiting when the server stopped are queued again: {}",
            ids.len(),
            ids.join(", ")
        ));
    }
}

/// A capsule the server does not start again (stopped, or unable to start): every task
/// waiting in its queue ends `FAILED` with `why` in its task store on disk, where its
/// address answers for it once it is started. Returns how many did.
pub fn fail_waiting(journal: &Path, why: &str, label: &str) -> usize {
    let path = backlog_path(journal);
    let read = backlog::read(&path);
    report(&path, &read, &|line| {
        eprintln!(
            "warning[W-QUEUE-002]: capsule {label}: {line}\n  hint: nothing to do: what could not be read is dropped, and the file now holds nothing"
        );
    });
    if read.waiting.is_empty() {
        return 0;
    }
    let waiting: HashSet<String> = read.waiting.iter().map(|s| s.id.clone()).collect();
    let ran = read.last_started.clone();
    // Nothing it held may fall out of the store here: the manifest, which bounds it,
    // may not even load.
    // (A quarter of the range: the journal adds to it when it counts its lines.)
    let (journal, earlier) = Journal::open(journal, usize::MAX / 8);
    let tasks = Tasks::new(earlier.len() + waiting.len() + 1);
    tasks.keep_in_with(journal, earlier, &|id| {
        unended(id, &waiting, ran.as_deref())
    });
    let why = format!("{REQUEUE_FAILED}: {why}");
    let mut failed = 0;
    for saved in &read.waiting {
        if tasks
            .state(&saved.id)
            .is_some_and(|(state, _)| state.is_terminal())
        {
            continue;
        }
        fail(&tasks, saved, &why);
        failed += 1;
    }
    Backlog::open(&path, &[]);
    failed
}

/// Why a task the journal holds unended failed; `None` for one still waiting.
fn unended(id: &str, waiting: &HashSet<String>, ran: Option<&str>) -> Option<&'static str> {
    if waiting.contains(id) {
        None
    } else if ran == Some(id) {
        Some(RAN_WHEN_STOPPED)
    } else {
        Some(task_store::STOPPED_BEFORE_END)
    }
}

fn fail(tasks: &Tasks, saved: &Saved, why: &str) {
    let message = (saved.source == "a2a")
        .then(|| {
            let text = saved.text.as_deref()?;
            Some(user_message(text, saved.message_id.as_deref()))
        })
        .flatten();
    tasks.failed_unstarted(&saved.id, &saved.context_id, message, why);
}

/// The client's message as the queue kept it: its parts joined as one text part.
fn user_message(text: &str, message_id: Option<&str>) -> Message {
    let mut message = Message::new(Role::User, vec![Part::text(text)]);
    message.message_id = message_id.map_or_else(crate::ids::message, str::to_string);
    message
}

/// Says what of the file could not be read.
fn report(path: &Path, read: &backlog::Read, log: &dyn Fn(&str)) {
    if let Some(why) = &read.refused {
        log(&format!(
            "queue: the queue's file was not read ({why}); a task it held that had not ended is failed by the task store"
        ));
    }
    if read.skipped > 0 {
        log(&format!(
            "queue: skipped {} line(s) of {} that are not queue records (cut short by a crash, or damaged)",
            read.skipped,
            path.display()
        ));
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::time::Duration;

    use ::a2a::{PartContent, TaskState};

    use super::*;
    use crate::queue::{Acceptance, AfterTask, Origin, Policy};

    struct Dir(PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn dir() -> Dir {
        let dir = std::env::temp_dir().join(format!("mur-requeue-{}", crate::ids::event()));
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    /// One session of a hosted capsule: its queue and task store, restored from `dir`.
    struct Session {
        queue: Queue,
        tasks: Tasks,
        log: Vec<String>,
    }

    fn session(dir: &Dir, depth: usize) -> Session {
        let journal = dir.0.join(task_store::JOURNAL_FILE);
        let queue = Queue::new(Policy {
            acceptance: Acceptance::Queue,
            after_task: AfterTask::Sleep,
            depth,
            idle: Duration::from_secs(1),
        });
        let tasks = Tasks::new(100);
        let log = RefCell::new(Vec::new());
        restore(
            &backlog_path(&journal),
            &queue,
            &tasks,
            Journal::open(&journal, 100),
            &|line| log.borrow_mut().push(line.to_string()),
        );
        Session {
            queue,
            tasks,
            log: log.into_inner(),
        }
    }

    fn id(n: u32) -> String {
        format!("tsk_{n:04}")
    }

    impl Session {
        /// What the door does with a new task: the store first, then the queue.
        fn submit(&self, n: u32, origin: Origin) {
            let task = Pending {
                id: id(n),
                context_id: format!("ctx-{n}"),
                text: format!("task {n}"),
                origin,
                source: Source::A2a,
                message_id: Some(format!("m-{n}")),
                breach: None,
                traceparent: None,
            };
            let message = user_message(&task.text, task.message_id.as_deref());
            self.tasks
                .submitted(&task.id, &task.context_id, Some(message));
            self.queue.submit(task).unwrap();
        }

        fn status(&self, n: u32) -> (TaskState, String) {
            let (task, _) = self.tasks.snapshot(&id(n)).expect("a task");
            let text = task
                .status
                .message
                .and_then(|m| match &m.parts.first()?.content {
                    PartContent::Text(text) => Some(text.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            (task.status.state, text)
        }

        /// What waits, in the order it would run (taken out).
        fn order(&self) -> Vec<String> {
            self.queue.drain().into_iter().map(|t| t.id).collect()
        }
    }

    fn no_room(depth: usize, waiting: usize) -> String {
        format!(
            "{REQUEUE_FAILED}: the capsule's queue now holds at most {depth} task{} waiting (lifecycle.queue_depth, or its queued_tasks limit) and {waiting} were waiting",
            if depth == 1 { "" } else { "s" }
        )
    }

    #[tokio::test]
    async fn a_crash_queues_again_what_waited_and_fails_what_ran() {
        let d = dir();
        let first = session(&d, 4);
        first.submit(1, Origin::Event);
        let running = first.queue.next().await.unwrap();
        first.tasks.begin(&running.id, &running.context_id);
        first.submit(2, Origin::Event);
        first.submit(3, Origin::Peer);
        first.submit(4, Origin::Event);
        first.submit(5, Origin::Event);
        let canceled = first.queue.remove(&id(5)).unwrap();
        first
            .tasks
            .canceled_queued(&canceled.id, &canceled.context_id, "task canceled");
        drop(first);

        let again = session(&d, 4);
        assert_eq!(
            again.status(1),
            (TaskState::Failed, RAN_WHEN_STOPPED.to_string())
        );
        for n in [2, 3, 4] {
            assert_eq!(again.status(n).0, TaskState::Submitted, "task {n}");
        }
        assert_eq!(again.status(5).0, TaskState::Canceled);
        assert!(
            again.log[0]
                .starts_with("queue: 3 task(s) waiting when the server stopped are queued again"),
            "{:?}",
            again.log
        );
        assert_eq!(again.order(), [id(3), id(2), id(4)]);
    }

    #[test]
    fn a_smaller_queue_after_a_crash_fails_the_surplus_saying_why() {
        let d = dir();
        let first = session(&d, 4);
        first.submit(2, Origin::Event);
        first.submit(3, Origin::Peer);
        first.submit(4, Origin::Event);
        drop(first);

        let smaller = session(&d, 1);
        assert_eq!(smaller.status(3).0, TaskState::Submitted);
        for n in [2, 4] {
            assert_eq!(smaller.status(n), (TaskState::Failed, no_room(1, 3)));
        }
        drop(smaller);

        // Killed again before it ran: it is still the one waiting.
        let again = session(&d, 4);
        assert_eq!(again.status(3).0, TaskState::Submitted);
        assert_eq!(again.status(2).0, TaskState::Failed);
        assert_eq!(again.order(), [id(3)]);
    }

    #[test]
    fn a_task_the_store_lost_is_made_again_from_the_queue_and_garbage_is_skipped() {
        let d = dir();
        let first = session(&d, 4);
        first.submit(2, Origin::Event);
        drop(first);
        std::fs::remove_file(d.0.join(task_store::JOURNAL_FILE)).unwrap();
        let backlog = d.0.join(backlog::FILE);
        let mut bytes = std::fs::read(&backlog).unwrap();
        bytes.extend_from_slice(b"\x00\x01 not a record\n");
        std::fs::write(&backlog, bytes).unwrap();

        let again = session(&d, 4);
        let (task, _) = again.tasks.snapshot(&id(2)).unwrap();
        assert_eq!(task.status.state, TaskState::Submitted);
        let history = task.history.unwrap_or_default();
        assert_eq!(history.len(), 1);
        assert_eq!(history[0].message_id, "m-2");
        assert!(
            again
                .log
                .iter()
                .any(|l| l.starts_with("queue: skipped 1 line(s)")),
            "{:?}",
            again.log
        );
        assert_eq!(again.order(), [id(2)]);
    }

    #[test]
    fn a_capsule_not_started_again_fails_what_waited_in_its_store() {
        let d = dir();
        let first = session(&d, 4);
        first.submit(2, Origin::Event);
        first.submit(3, Origin::Event);
        drop(first);
        let journal = d.0.join(task_store::JOURNAL_FILE);
        assert_eq!(fail_waiting(&journal, "the capsule is stopped", "cap_x"), 2);
        assert_eq!(fail_waiting(&journal, "the capsule is stopped", "cap_x"), 0);

        let started = session(&d, 4);
        let why = format!("{REQUEUE_FAILED}: the capsule is stopped");
        assert_eq!(started.status(2), (TaskState::Failed, why.clone()));
        assert_eq!(started.status(3), (TaskState::Failed, why));
        assert!(started.order().is_empty());
    }
}
