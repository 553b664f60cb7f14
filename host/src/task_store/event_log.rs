//! Each task's kept events: numbered as the store logs them, trimmed to its caps, and
//! read after a cursor by the connections that follow the task.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ::a2a::StreamResponse;
use bytes::Bytes;

use super::Tasks;
use super::book::{Book, Record};
use super::cap::Cap;
use super::events::{encode_event, ends_stream, numbered};

/// One numbered event of a task, encoded once for every connection that reads it.
#[derive(Clone, Debug)]
pub struct Event {
    pub seq: u64,
    /// The `StreamResponse` JSON.
    pub json: Bytes,
    /// A terminal or interrupted state: where a stream of the task ends.
    pub ends: bool,
}

/// What a reader asked for past what is kept.
#[derive(Debug, PartialEq, Eq)]
pub enum Missed {
    UnknownTask,
    /// The events after the reader's are no longer buffered; this is the first that is.
    Gone {
        first_available: u64,
    },
}

impl Tasks {
    /// A connection following `id` from after `after`: what it has not read is kept
    /// for it (see [`Cap`]) until it is dropped.
    pub fn follow(&self, id: &str, after: u64) -> Follower<'_> {
        let cursor = Arc::new(AtomicU64::new(after));
        if let Some(record) = self.book().records.get_mut(id) {
            record.followers.push(cursor.clone());
        }
        Follower {
            tasks: self,
            id: id.to_string(),
            cursor,
        }
    }

    /// The events of `id` after `after`, and whether the task has ended. `Err` when the
    /// task is unknown or the first of them is no longer kept.
    pub fn events_after(&self, id: &str, after: u64) -> Result<(Vec<Event>, bool), Missed> {
        let book = self.book();
        let record = book.records.get(id).ok_or(Missed::UnknownTask)?;
        let first = record.log.front().map_or(record.seq + 1, |e| e.seq);
        if after.saturating_add(1) < first && after < record.seq {
            return Err(Missed::Gone {
                first_available: first,
            });
        }
        // The log holds consecutive numbers from `first`: the reader's place is an
        // index, so a reader that keeps up pays for what it reads, not for the log.
        let skip = usize::try_from(after.saturating_add(1).saturating_sub(first))
            .unwrap_or(usize::MAX)
            .min(record.log.len());
        let events = record.log.range(skip..).cloned().collect();
        Ok((events, record.task.status.state.is_terminal()))
    }
}

/// A connection following a task; see [`Tasks::follow`].
pub struct Follower<'t> {
    tasks: &'t Tasks,
    id: String,
    cursor: Arc<AtomicU64>,
}

impl Follower<'_> {
    /// The events it has not read yet (now counted as read), and whether the task ended.
    pub fn next(&self) -> Result<(Vec<Event>, bool), Missed> {
        let after = self.cursor.load(Ordering::Acquire);
        let read = self.tasks.events_after(&self.id, after)?;
        if let Some(last) = read.0.last() {
            self.cursor.store(last.seq, Ordering::Release);
        }
        Ok(read)
    }

    pub fn after(&self) -> u64 {
        self.cursor.load(Ordering::Acquire)
    }
}

impl Drop for Follower<'_> {
    /// What only this connection was keeping can go now.
    fn drop(&mut self) {
        let mut book = self.tasks.book();
        let cap = book.cap;
        if let Some(record) = book.records.get_mut(&self.id) {
            record.followers.retain(|f| !Arc::ptr_eq(f, &self.cursor));
            let events = record.kept_events(&cap);
            record.trim(events, &cap);
        }
    }
}

impl Book {
    /// Numbers `event` for its task and keeps it.
    pub(super) fn log(&mut self, id: &str, event: StreamResponse) {
        let cap = self.cap;
        let Some(record) = self.records.get_mut(id) else {
            return;
        };
        record.seq += 1;
        let seq = record.seq;
        let ends = ends_stream(&event);
        let json = encode_event(numbered(event, seq));
        record.log_bytes += json.len();
        record.log.push_back(Event { seq, json, ends });
        let events = record.kept_events(&cap);
        record.trim(events, &cap);
    }
}

impl Record {
    /// Drops the oldest events past `events` or `bytes` that every follower has read,
    /// then, whoever has read them, those past the hard caps (always keeping the newest).
    fn trim(&mut self, events: usize, cap: &Cap) {
        let read_by_all = self
            .followers
            .iter()
            .map(|f| f.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX);
        let over = |r: &Record, events: usize, bytes: usize| {
            r.log.len() > events.max(1) || (r.log_bytes > bytes && r.log.len() > 1)
        };
        while over(self, events, cap.bytes)
            && self.log.front().is_some_and(|e| e.seq <= read_by_all)
        {
            self.pop();
        }
        while over(self, cap.hard_events, cap.hard_bytes) {
            self.pop();
        }
    }

    fn pop(&mut self) {
        if let Some(gone) = self.log.pop_front() {
            self.log_bytes -= gone.json.len();
        }
    }

    /// How many events the task keeps now: fewer once it has ended.
    fn kept_events(&self, cap: &Cap) -> usize {
        if self.task.status.state.is_terminal() {
            cap.ended
        } else {
            cap.events
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::short_log;
    use super::*;
    use crate::frames::State;

    #[test]
    fn a_reader_past_the_kept_events_is_told_which_is_first() {
        let tasks = Tasks::with_cap(10, short_log());
        tasks.submitted("tsk_1", "ctx_1", None);
        tasks.begin("tsk_1", "ctx_1");
        for n in 1..=5 {
            tasks.status(
                "tsk_1",
                State::Working,
                &format!("inference turn {n}"),
                None,
            );
        }
        // Six events written, the last four kept: 3, 4, 5, 6.
        assert_eq!(
            tasks.events_after("tsk_1", 1).unwrap_err(),
            Missed::Gone { first_available: 3 }
        );
        assert_eq!(tasks.events_after("tsk_1", 2).unwrap().0.len(), 4);
        tasks.status("tsk_1", State::Completed, "session ended", Some("done"));
        tasks.end();
        // Ended: only the last two are kept (the answer and the end).
        assert_eq!(
            tasks.events_after("tsk_1", 5).unwrap_err(),
            Missed::Gone { first_available: 7 }
        );
        assert_eq!(tasks.events_after("tsk_1", 6).unwrap().0.len(), 2);
        assert_eq!(
            tasks.events_after("tsk_9", 0).unwrap_err(),
            Missed::UnknownTask
        );
    }

    #[test]
    fn a_follower_keeps_what_it_has_not_read_up_to_the_hard_cap() {
        let tasks = Tasks::with_cap(10, short_log());
        tasks.submitted("tsk_1", "ctx_1", None);
        let follower = tasks.follow("tsk_1", 0);
        assert_eq!(follower.next().unwrap().0.len(), 1);
        tasks.begin("tsk_1", "ctx_1");
        for n in 1..=5 {
            tasks.status(
                "tsk_1",
                State::Working,
                &format!("inference turn {n}"),
                None,
            );
        }
        tasks.status("tsk_1", State::Completed, "session ended", Some("done"));
        tasks.end();
        // Eight events; past the running and the ended caps, but the follower has read
        // only the first, so the seven after it stay for it.
        let (events, ended) = follower.next().unwrap();
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [2, 3, 4, 5, 6, 7, 8]);
        assert!(ended);
        drop(follower);
        // Once it is gone, the ended cap applies.
        assert_eq!(
            tasks.events_after("tsk_1", 5).unwrap_err(),
            Missed::Gone { first_available: 7 }
        );

        // A follower that stalls is not waited for past the hard cap.
        tasks.submitted("tsk_2", "ctx_1", None);
        let stalled = tasks.follow("tsk_2", 0);
        tasks.begin("tsk_2", "ctx_1");
        for n in 1..=9 {
            tasks.status(
                "tsk_2",
                State::Working,
                &format!("inference turn {n}"),
                None,
            );
        }
        assert_eq!(
            stalled.next().unwrap_err(),
            Missed::Gone { first_available: 3 }
        );
    }
}
