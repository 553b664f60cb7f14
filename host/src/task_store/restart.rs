//! What the task store carries over a restart: the tasks its journal held, each one
//! that had not ended failed with the reason the host knows, and the queued tasks that
//! cannot run again failed with theirs.

use ::a2a::{Message, Task, TaskState};

use super::artifacts::task_size;
use super::book::{Book, Record};
use super::events::saved_seq;
use super::journal::Journal;
use super::messages::{agent_message, status_now};
use super::{STOPPED_BEFORE_END, Tasks};

impl Tasks {
    /// Takes the tasks `journal` holds, then keeps every later change in it.
    pub fn keep_in(&self, journal: Journal, earlier: Vec<Task>) {
        self.keep_in_with(journal, earlier, &|_| Some(STOPPED_BEFORE_END));
    }

    /// [`Tasks::keep_in`], where the host knows more of the tasks that had not ended:
    /// `unended` says why each one failed, or `None` to keep it as it stands (a task
    /// still queued, which runs again or is failed with a reason of its own).
    pub fn keep_in_with(
        &self,
        journal: Journal,
        earlier: Vec<Task>,
        unended: &dyn Fn(&str) -> Option<&'static str>,
    ) {
        let mut book = self.book();
        for task in earlier {
            let why = unended(&task.id);
            book.restore(task, why);
        }
        book.journal = Some(journal);
        let kept = book.kept();
        if let Some(journal) = &mut book.journal {
            // A new session with nothing to carry over has nothing to write: its file
            // is made by its first task, not in the launch's path.
            if !(kept.is_empty() && journal.is_empty()) {
                journal.rewrite(&kept);
            }
        }
    }

    /// A task that waited in the queue when the host stopped and cannot run again: it
    /// ends `FAILED` with `why` (recorded afresh, with `message`, if the store lost it).
    pub fn failed_unstarted(&self, id: &str, context: &str, message: Option<Message>, why: &str) {
        let mut book = self.book();
        book.create(id, context, message);
        if book
            .records
            .get(id)
            .is_some_and(|r| r.task.status.state.is_terminal())
        {
            // v1 states never leave a terminal one.
            return;
        }
        book.finish(id, TaskState::Failed, agent_message(id, context, why));
        drop(book);
        self.bump();
    }
}

impl Book {
    /// A task read back from the journal. One that had not ended when its capsule
    /// stopped never will: it is failed with `why` (unless that is `None`).
    fn restore(&mut self, mut task: Task, why: Option<&str>) {
        let mut seq = saved_seq(&task);
        task.metadata = None;
        if let (false, Some(why)) = (task.status.state.is_terminal(), why) {
            seq += 1;
            task.status = status_now(
                TaskState::Failed,
                Some(agent_message(&task.id, &task.context_id, why)),
            );
        }
        self.forget(&task.id);
        let held = task_size(&task);
        let id = task.id.clone();
        self.insert(Record {
            seq,
            ..Record::new(task)
        });
        self.hold(&id, held);
    }
}

#[cfg(test)]
mod tests {
    use super::super::Missed;
    use super::super::testing::{run_to_completion, user};
    use super::*;

    #[test]
    fn a_new_session_writes_its_journal_with_its_first_task_not_at_launch() {
        let dir = std::env::temp_dir().join(format!("mur-a2a-lazy-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join(super::super::journal::FILE);
        let tasks = Tasks::new(10);
        let (journal, earlier) = Journal::open(&path, 10);
        tasks.keep_in(journal, earlier);
        assert!(!dir.exists(), "nothing is written before a task");
        tasks.submitted("tsk_1", "ctx_1", Some(user("one")));
        let text = std::fs::read_to_string(&path).expect("the first task made the file");
        assert!(text.contains("\"tsk_1\""), "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_journal_brings_tasks_back_and_fails_the_unfinished() {
        let dir = std::env::temp_dir().join(format!("mur-a2a-journal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join(super::super::journal::FILE);
        let first = Tasks::new(10);
        let (journal, earlier) = Journal::open(&path, 10);
        first.keep_in(journal, earlier);
        first.submitted("tsk_done", "ctx_1", Some(user("one")));
        run_to_completion(&first, "tsk_done", "answer one");
        first.submitted("tsk_cut", "ctx_1", Some(user("two")));
        drop(first);

        let again = Tasks::new(10);
        let (journal, earlier) = Journal::open(&path, 10);
        again.keep_in(journal, earlier);
        let (done, seq) = again.snapshot("tsk_done").unwrap();
        assert_eq!(done.status.state, TaskState::Completed);
        assert_eq!(seq, 4, "its numbering goes on where it was");
        assert!(done.metadata.is_none());
        let (cut, seq) = again.snapshot("tsk_cut").unwrap();
        assert_eq!(cut.status.state, TaskState::Failed);
        assert_eq!(
            cut.status.message.unwrap().text(),
            Some("the capsule stopped before the task ended")
        );
        assert_eq!(seq, 2, "its failure counts as an event it never streamed");
        assert_eq!(
            again.events_after("tsk_cut", 0).unwrap_err(),
            Missed::Gone { first_available: 3 }
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
