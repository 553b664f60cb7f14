//! What the task store carries over a restart: the tasks its journal held, each one
//! that had not ended failed with the reason the host knows, and the queued tasks that
//! cannot run again failed with theirs.

use ::a2a::{Message, Task, TaskState};

use super::super::artifacts::task_size;
use super::super::events::saved_seq;
use super::super::journal::Journal;
use super::{Book, Record, STOPPED_BEFORE_END, Tasks, agent_message, status_now};

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
