//! The frame bus: one replay ring shared by both endpoints, and one bounded queue per
//! open connection, so a slow client never slows the capsule or another client. A
//! journaled bus also appends its ring to a file, so a restarted process replays it.

mod journal;

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use crate::error::Error;
use crate::frames::{self, Frame};
use journal::Journal;

pub const REPLAY_CAPACITY: usize = 512;
pub const QUEUE_CAPACITY: usize = 128;

/// The ring's byte ceiling besides its 512 frames: a guest streaming big frames cannot
/// make it hold 512 of them. The oldest frames go first to stay under it.
pub const REPLAY_BYTES: usize = 64 * 1024 * 1024;
/// A frame bigger than this is sent live and never buffered for replay, so one huge
/// frame cannot empty the ring of everything a reconnecting client needs.
pub const REPLAY_FRAME_BYTES: usize = REPLAY_BYTES / 4;
/// What one connection's queue may hold, so a stalled client cannot pin gigabytes: the
/// oldest frames are dropped (and a `lagged` frame says how many), as at 128 frames.
/// A single frame bigger than this is still queued alone: it is what the client is owed.
pub const QUEUE_BYTES: usize = 32 * 1024 * 1024;

/// One process serves many buses; its metrics are their sum.
static FRAMES_WRITTEN: AtomicU64 = AtomicU64::new(0);
static FRAMES_DROPPED: AtomicU64 = AtomicU64::new(0);

/// What every bus in this process has done since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
// Read by the server's metrics, which land in the same change.
pub struct Totals {
    /// Published frames a connection took and reported written ([`Connection::written`]).
    /// A `lagged` frame is the bus's note, not a published frame, and is not counted.
    pub frames_written: u64,
    /// Frames a connection's queue dropped because its reader fell behind: what its
    /// `lagged` frames report.
    pub frames_dropped: u64,
}

// Read by the server's metrics, which land in the same change.
pub fn totals() -> Totals {
    Totals {
        frames_written: FRAMES_WRITTEN.load(Ordering::Relaxed),
        frames_dropped: FRAMES_DROPPED.load(Ordering::Relaxed),
    }
}

#[derive(Default)]
pub struct Bus {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    ring: VecDeque<Frame>,
    /// The bytes of the frames in `ring`.
    ring_bytes: usize,
    connections: Vec<Weak<Connection>>,
    closed: bool,
    /// Where the ring's frames are appended on a journaled bus; dropped at the first
    /// write error, since the live stream matters more than its copy.
    journal: Option<Journal>,
}

/// One connection's live frames. Dropping it unsubscribes.
pub struct Connection {
    state: Mutex<Queue>,
    notify: Notify,
    /// The reader took frames: for a writer waiting on a crowded queue.
    drained: Notify,
}

#[derive(Default)]
struct Queue {
    frames: VecDeque<Frame>,
    /// The bytes of the frames in `frames`.
    bytes: usize,
    missed: u64,
    /// Frames handed out since the server last reported a write: it writes them in
    /// batches.
    taken: u64,
    closed: bool,
    /// The reader did not keep up when it was waited for: it is not waited for again
    /// until it has emptied its queue, so a stalled client never slows the capsule.
    stalled: bool,
    /// A frame `next` handed out that the server has not reported written yet: until
    /// it is, exiting could cut it off.
    writing: bool,
}

/// What a connection reads next.
#[derive(Debug, PartialEq)]
pub enum Next {
    Frame(Frame),
    /// The capsule closed its frame stream; nothing more will come.
    Closed,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind, still usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Bus {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A bus whose replay ring outlives the process: every frame that enters the ring
    /// is appended to the journal at `path`, and an existing journal fills the ring
    /// again (within its ceilings), so a `Last-Event-ID` replay after a restart gives
    /// what the previous process had buffered.
    ///
    /// Fails only when there is no file to journal into: a symbolic link at `path`
    /// (never followed), something other than a regular file, or a file that cannot be
    /// opened or created (mode 0600). A journal that cannot be read, or is not one,
    /// starts an empty ring instead, and the reason is returned for the caller to log;
    /// so is a journal that cannot be appended to, and the bus then runs without one.
    // Called by the serve command, which lands in the same change.
    pub fn journaled(path: &Path) -> Result<(Arc<Self>, Option<String>), Error> {
        let mut inner = Inner::default();
        let opened = Journal::open(path, |frame| inner.buffer(frame))?;
        if opened.discard {
            inner = Inner::default();
        }
        inner.journal = opened.journal;
        let bus = Bus {
            inner: Mutex::new(inner),
        };
        Ok((Arc::new(bus), opened.reason))
    }

    /// Writes a frame to every open connection; frames with an id also enter the ring.
    /// Returns how many frames the fullest connection queue now holds.
    pub fn publish(&self, frame: Frame) -> usize {
        let mut inner = lock(&self.inner);
        if inner.closed {
            return 0;
        }
        if frame.id.is_some() && frame.bytes.len() <= REPLAY_FRAME_BYTES {
            inner.buffer(frame.clone());
        }
        let mut fullest = 0;
        inner.connections.retain(|weak| match weak.upgrade() {
            Some(conn) => {
                fullest = fullest.max(conn.push(frame.clone()));
                true
            }
            None => false,
        });
        fullest
    }

    /// Gives readers that are keeping up the chance to take their frames before a
    /// burst fills their queues: waits while a connection holds `crowded` frames or
    /// more, at most `patience` for each. A reader that does not drain in that time
    /// is marked stalled and loses frames as the seed says (with a `lagged` frame).
    pub async fn make_room(&self, crowded: usize, patience: Duration) {
        loop {
            let waiting_on = lock(&self.inner)
                .connections
                .iter()
                .filter_map(Weak::upgrade)
                .find(|c| c.crowded(crowded));
            let Some(conn) = waiting_on else { return };
            let drained = conn.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if !conn.crowded(crowded) {
                continue;
            }
            if tokio::time::timeout(patience, drained).await.is_err() {
                lock(&conn.state).stalled = true;
            }
        }
    }

    /// Opens a connection. With `replay_from`, the replay is taken under the same lock
    /// that registers the connection, so no frame falls between replay and live.
    pub fn subscribe(&self, replay_from: Option<u64>) -> (Vec<Frame>, Arc<Connection>) {
        let mut inner = lock(&self.inner);
        let replay = replay_from
            .map(|n| replay(&inner.ring, n))
            .unwrap_or_default();
        let conn = Arc::new(Connection {
            state: Mutex::new(Queue {
                closed: inner.closed,
                ..Queue::default()
            }),
            notify: Notify::new(),
            drained: Notify::new(),
        });
        inner.connections.push(Arc::downgrade(&conn));
        (replay, conn)
    }

    /// The capsule closed its frame stream: every connection ends after what it holds.
    pub fn close(&self) {
        let mut inner = lock(&self.inner);
        inner.closed = true;
        for conn in inner.connections.drain(..).filter_map(|w| w.upgrade()) {
            lock(&conn.state).closed = true;
            conn.notify.notify_one();
        }
    }

    /// Waits, at most `limit`, until every open connection has written every frame
    /// published so far. A process about to exit calls it so that its last task's
    /// frames reach their clients before the sockets close; a stalled client costs
    /// the limit, never a hang.
    pub async fn flush(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let settled = lock(&self.inner)
                .connections
                .iter()
                .filter_map(Weak::upgrade)
                .all(|conn| conn.settled());
            if settled || tokio::time::Instant::now() >= deadline {
                return;
            }
            // Exit is rare and short: polling keeps the hot path free of a second notify.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[cfg(test)]
    pub fn open_connections(&self) -> usize {
        lock(&self.inner)
            .connections
            .iter()
            .filter(|w| w.strong_count() > 0)
            .count()
    }
}

impl Inner {
    /// Into the ring, evicting the oldest frames past 512 or past the byte ceiling; and
    /// into the journal, if there is one.
    fn buffer(&mut self, frame: Frame) {
        if let Some(journal) = self.journal.as_mut()
            && let Err(e) = journal.append(&frame)
        {
            self.stop_journal(&e);
        }
        self.ring_bytes += frame.bytes.len();
        self.ring.push_back(frame);
        while self.ring.len() > REPLAY_CAPACITY || self.ring_bytes > REPLAY_BYTES {
            match self.ring.pop_front() {
                Some(old) => self.ring_bytes -= old.bytes.len(),
                None => break,
            }
        }
        if let Some(journal) = self.journal.as_mut()
            && journal.oversized()
            && let Err(e) = journal.compact(&self.ring)
        {
            self.stop_journal(&e);
        }
    }

    /// Said once, since the journal is gone after it.
    fn stop_journal(&mut self, e: &std::io::Error) {
        if let Some(journal) = self.journal.take() {
            eprintln!(
                "[murmur] warning: the replay journal {} stopped: {e}; frames still go out live, but a restart replays none published from now on",
                journal.path().display()
            );
        }
    }
}

/// The seed's replay rule: compare ids, not positions.
fn replay(ring: &VecDeque<Frame>, n: u64) -> Vec<Frame> {
    let Some(oldest) = ring.front().and_then(|f| f.id) else {
        return Vec::new();
    };
    if oldest > n.saturating_add(1) {
        let mut out = Vec::with_capacity(ring.len() + 1);
        out.push(frames::gap(oldest));
        out.extend(ring.iter().cloned());
        return out;
    }
    ring.iter()
        .filter(|f| f.id.is_some_and(|id| id > n))
        .cloned()
        .collect()
}

impl Connection {
    /// Queues a frame; returns how many are now waiting.
    fn push(&self, frame: Frame) -> usize {
        let mut q = lock(&self.state);
        let mut dropped = 0;
        q.bytes += frame.bytes.len();
        q.frames.push_back(frame);
        while q.frames.len() > QUEUE_CAPACITY || (q.bytes > QUEUE_BYTES && q.frames.len() > 1) {
            if let Some(old) = q.frames.pop_front() {
                q.bytes -= old.bytes.len();
                q.missed += 1;
                dropped += 1;
            }
        }
        let waiting = q.frames.len();
        drop(q);
        if dropped > 0 {
            FRAMES_DROPPED.fetch_add(dropped, Ordering::Relaxed);
        }
        self.notify.notify_one();
        waiting
    }

    /// The next frame; a `lagged` frame first where frames were dropped.
    pub async fn next(&self) -> Next {
        loop {
            if let Some(next) = self.try_next() {
                return next;
            }
            self.notify.notified().await;
        }
    }

    /// The next frame if one is waiting, without blocking. The caller reports it
    /// `written` once it is on the socket.
    pub fn try_next(&self) -> Option<Next> {
        let mut q = lock(&self.state);
        if q.missed > 0 {
            let missed = std::mem::take(&mut q.missed);
            q.writing = true;
            return Some(Next::Frame(frames::lagged(missed)));
        }
        if let Some(frame) = q.frames.pop_front() {
            q.bytes -= frame.bytes.len();
            q.writing = true;
            q.taken += 1;
            if q.frames.is_empty() {
                q.stalled = false;
            }
            drop(q);
            self.drained.notify_waiters();
            return Some(Next::Frame(frame));
        }
        q.closed.then_some(Next::Closed)
    }

    /// The frame `next` gave out is written.
    pub fn written(&self) {
        let mut q = lock(&self.state);
        q.writing = false;
        let taken = std::mem::take(&mut q.taken);
        drop(q);
        if taken > 0 {
            FRAMES_WRITTEN.fetch_add(taken, Ordering::Relaxed);
        }
    }

    /// Holding `at_least` frames, with a reader worth waiting for.
    fn crowded(&self, at_least: usize) -> bool {
        let q = lock(&self.state);
        !q.stalled && q.frames.len() >= at_least
    }

    /// Nothing waiting and nothing being written.
    fn settled(&self) -> bool {
        let q = lock(&self.state);
        q.frames.is_empty() && q.missed == 0 && !q.writing
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::{State, status};

    fn st(id: u64) -> Frame {
        status(
            id,
            "tsk_a",
            "ctx_a",
            State::Working,
            "inference turn 1",
            None,
        )
    }

    impl Next {
        fn frame_id(&self) -> Option<u64> {
            match self {
                Next::Frame(f) => f.id,
                Next::Closed => None,
            }
        }
    }

    fn ids(frames: &[Frame]) -> Vec<Option<u64>> {
        frames.iter().map(|f| f.id).collect()
    }

    #[test]
    fn replay_from_zero_skips_id_zero_frames() {
        let bus = Bus::new();
        for id in [0, 1, 2, 0, 1, 2] {
            bus.publish(st(id));
        }
        let (replay, _c) = bus.subscribe(Some(0));
        assert_eq!(ids(&replay), vec![Some(1), Some(2), Some(1), Some(2)]);
    }

    #[test]
    fn gap_when_oldest_is_more_than_one_above() {
        let bus = Bus::new();
        for id in 10..15 {
            bus.publish(st(id));
        }
        let (replay, _c) = bus.subscribe(Some(8));
        assert_eq!(replay[0], frames::gap(10));
        assert_eq!(replay.len(), 6);
        let (replay, _c) = bus.subscribe(Some(9));
        assert_eq!(
            ids(&replay),
            vec![Some(10), Some(11), Some(12), Some(13), Some(14)]
        );
    }

    #[test]
    fn ring_keeps_the_latest_512_frames_with_ids() {
        let bus = Bus::new();
        for id in 0..600 {
            bus.publish(st(id));
        }
        bus.publish(frames::gap(1));
        let (replay, _c) = bus.subscribe(Some(0));
        assert_eq!(replay[0], frames::gap(88));
        assert_eq!(replay.len(), 513);
        assert_eq!(replay[1].id, Some(88));
    }

    #[test]
    fn empty_ring_replays_nothing() {
        let bus = Bus::new();
        assert!(bus.subscribe(Some(0)).0.is_empty());
        assert!(bus.subscribe(None).0.is_empty());
    }

    #[tokio::test]
    async fn slow_connection_drops_oldest_and_is_told() {
        let bus = Bus::new();
        let (_, conn) = bus.subscribe(None);
        for id in 0..200 {
            bus.publish(st(id));
        }
        assert_eq!(conn.next().await, Next::Frame(frames::lagged(72)));
        assert_eq!(conn.next().await, Next::Frame(st(72)));
    }

    #[tokio::test]
    async fn close_ends_connections_after_their_frames() {
        let bus = Bus::new();
        let (_, conn) = bus.subscribe(None);
        bus.publish(st(0));
        bus.close();
        assert_eq!(conn.next().await, Next::Frame(st(0)));
        assert_eq!(conn.next().await, Next::Closed);
        let (_, late) = bus.subscribe(None);
        assert_eq!(late.next().await, Next::Closed);
    }

    #[tokio::test]
    async fn flush_waits_until_every_frame_is_written() {
        let bus = Bus::new();
        let (_, conn) = bus.subscribe(None);
        bus.flush(Duration::from_secs(5)).await;
        bus.publish(st(0));
        let started = std::time::Instant::now();
        bus.flush(Duration::from_millis(30)).await;
        assert!(
            started.elapsed() >= Duration::from_millis(30),
            "gave up at the limit"
        );
        assert_eq!(conn.next().await, Next::Frame(st(0)));
        assert!(!conn.settled(), "taken is not yet written");
        let flushed = tokio::spawn({
            let bus = bus.clone();
            async move { bus.flush(Duration::from_secs(5)).await }
        });
        // The flush has polled the connection several times (this runtime has one
        // thread, so it runs only while this test sleeps) and still waits: the frame
        // taken but not written holds it, though the queue is empty.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!flushed.is_finished(), "flush ignored the frame in flight");
        conn.written();
        tokio::time::timeout(Duration::from_secs(1), flushed)
            .await
            .unwrap()
            .unwrap();
    }

    fn big(id: u64, bytes: usize) -> Frame {
        frames::text(id, "tsk_a", &"x".repeat(bytes), false)
    }

    #[tokio::test]
    async fn a_frame_too_big_to_buffer_goes_out_live_only() {
        let bus = Bus::new();
        let (_, conn) = bus.subscribe(None);
        bus.publish(st(0));
        bus.publish(big(1, REPLAY_FRAME_BYTES));
        bus.publish(st(2));
        assert_eq!(ids(&bus.subscribe(Some(0)).0), vec![Some(2)]);
        assert_eq!(conn.next().await, Next::Frame(st(0)));
        let Next::Frame(live) = conn.next().await else {
            panic!("closed")
        };
        assert_eq!(live.id, Some(1));
        assert!(live.bytes.len() > REPLAY_FRAME_BYTES);
    }

    #[test]
    fn ring_evicts_the_oldest_frames_to_stay_under_its_byte_ceiling() {
        let bus = Bus::new();
        let each = REPLAY_FRAME_BYTES / 2;
        for id in 0..20 {
            bus.publish(big(id, each));
        }
        let (replay, _c) = bus.subscribe(Some(0));
        let held: usize = replay.iter().skip(1).map(|f| f.bytes.len()).sum();
        assert!(held <= REPLAY_BYTES, "{held}");
        let frame = replay[1].bytes.len();
        assert_eq!(replay.len() - 1, REPLAY_BYTES / frame, "{:?}", ids(&replay));
        assert_eq!(replay[0], frames::gap(replay[1].id.unwrap()));
        assert_eq!(replay.last().unwrap().id, Some(19));
    }

    #[tokio::test]
    async fn a_stalled_connection_holds_at_most_its_byte_bound() {
        let bus = Bus::new();
        let (_, conn) = bus.subscribe(None);
        let each = QUEUE_BYTES / 4;
        for id in 0..10 {
            bus.publish(big(id, each));
        }
        let kept = lock(&conn.state).bytes;
        assert!(kept <= QUEUE_BYTES, "{kept}");
        assert_eq!(conn.next().await, Next::Frame(frames::lagged(7)));
        assert_eq!(conn.next().await.frame_id(), Some(7));
        // One frame bigger than the bound still reaches the client.
        bus.publish(big(10, QUEUE_BYTES + 1));
        assert_eq!(conn.next().await, Next::Frame(frames::lagged(2)));
        assert_eq!(conn.next().await.frame_id(), Some(10));
        assert_eq!(lock(&conn.state).bytes, 0);
    }

    #[tokio::test]
    async fn totals_count_frames_written_and_dropped() {
        // Other tests move the process-wide counters too: only growth is certain.
        let before = totals();
        let bus = Bus::new();
        let (_, conn) = bus.subscribe(None);
        for id in 0..(QUEUE_CAPACITY as u64 + 5) {
            bus.publish(st(id));
        }
        let dropped = totals().frames_dropped - before.frames_dropped;
        assert!(dropped >= 5, "{dropped}");
        // The server writes a batch, then reports it once.
        assert_eq!(conn.next().await, Next::Frame(frames::lagged(5)));
        for _ in 0..3 {
            assert!(matches!(conn.try_next(), Some(Next::Frame(_))));
        }
        assert_eq!(lock(&conn.state).taken, 3, "the lagged note is not a frame");
        conn.written();
        assert_eq!(lock(&conn.state).taken, 0);
        let written = totals().frames_written - before.frames_written;
        assert!(written >= 3, "{written}");
    }

    #[test]
    fn dropped_connections_unsubscribe() {
        let bus = Bus::new();
        let (_, conn) = bus.subscribe(None);
        assert_eq!(bus.open_connections(), 1);
        drop(conn);
        bus.publish(st(0));
        assert_eq!(bus.open_connections(), 0);
    }
}
