//! The queue on disk, under `mur serve`: every task a client (or the session loop)
//! queues is written down before it is acknowledged, and its start or removal after,
//! so a server killed with tasks waiting runs them (or fails them, saying why) when it
//! comes back instead of losing them.
//!
//! One JSON object a line, appended: `queued` (the whole task), `started` and `removed`
//! (its id). What waits is every `queued` line no later line took out, in file order,
//! which is arrival order within each lane. A `queued` line is synced to disk before
//! the task is taken, so it outlives a power cut too; `started` and `removed` are only
//! written (a process that dies keeps what it wrote), and the next `queued` sync
//! carries them. The file is rewritten with only what waits once it has grown well
//! past that, and at every start.
//!
//! The file is the host's (a capsule's records, out of every guest's view), but it is
//! read as if anyone had written it: a bounded size, bounded lines, and a line that is
//! not a record is skipped and counted, never a reason to stop.

use std::collections::{HashMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Read as _, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Acceptance, Origin, Pending, Policy, Source};

/// The file's name in a capsule's records.
pub const FILE: &str = "queue.jsonl";

/// A file larger than this was not written by a backlog, which rewrites itself once
/// it holds twice what waits: it is not read.
const MAX_READ: u64 = 1 << 30;

/// The longest line read: a task's text is at most 1 MiB (a request body, or a
/// follow-up), which JSON escaping can make six times longer.
const MAX_LINE: usize = 8 << 20;

/// The task text kept while reading: past it, a waiting task keeps its id only and
/// is failed (its input cannot be read back) rather than held in memory.
const MAX_TEXT: usize = 256 << 20;

/// Lines past twice what waits, plus this, make the next write a rewrite.
const SLACK: usize = 64;

/// One line of the file.
#[derive(Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Line {
    Queued(Saved),
    Started { id: String },
    Removed { id: String },
}

/// A waiting task as the file keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Saved {
    pub id: String,
    pub context_id: String,
    pub origin: String,
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// `None` only when read back past [`MAX_TEXT`].
    #[serde(default)]
    pub text: Option<String>,
    /// When it was queued, in milliseconds since the Unix epoch (for the operator).
    #[serde(default)]
    pub at: u64,
}

impl Saved {
    fn of(task: &Pending) -> Saved {
        Saved {
            id: task.id.clone(),
            context_id: task.context_id.clone(),
            origin: task.origin.as_str().to_string(),
            source: task.source.as_str().to_string(),
            message_id: task.message_id.clone(),
            traceparent: task.traceparent.clone(),
            text: Some(task.text.clone()),
            at: now_ms(),
        }
    }

    /// The task to queue again, or why it cannot be.
    pub fn pending(&self) -> Result<Pending, String> {
        let origin = origin(&self.origin)
            .ok_or_else(|| format!("its record names an unknown origin '{}'", self.origin))?;
        let source = match self.source.as_str() {
            "a2a" => Source::A2a,
            "loop" => Source::Loop,
            other => return Err(format!("its record names an unknown source '{other}'")),
        };
        let text = self
            .text
            .clone()
            .ok_or("its text could not be read back from the queue's file")?;
        Ok(Pending {
            id: self.id.clone(),
            context_id: self.context_id.clone(),
            text,
            origin,
            source,
            message_id: self.message_id.clone(),
            traceparent: self.traceparent.clone(),
            breach: None,
        })
    }
}

fn origin(name: &str) -> Option<Origin> {
    [
        Origin::User,
        Origin::Peer,
        Origin::Event,
        Origin::Completion,
        Origin::System,
    ]
    .into_iter()
    .find(|o| o.as_str() == name)
}

/// Whether a task's queue record is written down: the tasks that came through the
/// address and the loop's follow-ups. The launch task and a detached command's report
/// are the capsule's own, made again by the next session (a resume reports lost
/// commands itself).
fn kept(task: &Pending) -> bool {
    matches!(task.source, Source::A2a | Source::Loop) && task.breach.is_none()
}

/// Whether `id` could be one the host minted: a task id is also a path segment in
/// the trace and a key clients send back, so a hostile line's id is not trusted.
fn plausible_id(id: &str) -> bool {
    (5..=64).contains(&id.len())
        && id.starts_with("tsk_")
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// What a file held.
#[derive(Debug, Default)]
pub struct Read {
    /// The tasks still waiting, in the order they were queued.
    pub waiting: Vec<Saved>,
    /// The task started last, if its start is on record: the one running when the
    /// process died, if that task never ended.
    pub last_started: Option<String>,
    /// Lines that were not records (cut short by a crash, or garbage).
    pub skipped: usize,
    /// Why the file was not read at all, when it was not.
    pub refused: Option<String>,
}

/// Reads the file at `path`; a missing file waits nothing.
pub fn read(path: &Path) -> Read {
    let mut out = Read::default();
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return out,
        Err(e) => {
            out.refused = Some(format!("could not open {}: {e}", path.display()));
            return out;
        }
    };
    match file.metadata() {
        Ok(m) if m.len() > MAX_READ => {
            out.refused = Some(format!(
                "{} holds {} bytes, more than a queue's file ever holds ({MAX_READ})",
                path.display(),
                m.len()
            ));
            return out;
        }
        Ok(_) => {}
        Err(e) => {
            out.refused = Some(format!("could not read {}: {e}", path.display()));
            return out;
        }
    }
    let mut reader = BufReader::new(file.take(MAX_READ));
    let mut order: Vec<String> = Vec::new();
    let mut waiting: HashMap<String, Saved> = HashMap::new();
    let mut text_kept = 0usize;
    let mut buf = Vec::new();
    loop {
        let long = match bounded_line(&mut reader, &mut buf) {
            Ok(Some(long)) => long,
            Ok(None) => break,
            Err(e) => {
                // What was read so far stands; the rest is as good as cut short.
                out.refused = Some(format!("could not read {}: {e}", path.display()));
                break;
            }
        };
        if buf.iter().all(u8::is_ascii_whitespace) && !long {
            continue;
        }
        let line = (!long)
            .then(|| serde_json::from_slice::<Line>(&buf).ok())
            .flatten();
        match line {
            Some(Line::Queued(mut saved)) if plausible_id(&saved.id) => {
                if waiting.contains_key(&saved.id) {
                    continue;
                }
                let size = saved.text.as_ref().map_or(0, String::len);
                if text_kept + size > MAX_TEXT {
                    saved.text = None;
                } else {
                    text_kept += size;
                }
                order.push(saved.id.clone());
                waiting.insert(saved.id.clone(), saved);
            }
            Some(Line::Started { id }) if plausible_id(&id) => {
                if let Some(gone) = waiting.remove(&id) {
                    text_kept -= gone.text.as_ref().map_or(0, String::len);
                }
                out.last_started = Some(id);
            }
            Some(Line::Removed { id }) if plausible_id(&id) => {
                if let Some(gone) = waiting.remove(&id) {
                    text_kept -= gone.text.as_ref().map_or(0, String::len);
                }
            }
            _ => out.skipped += 1,
        }
    }
    out.waiting = order
        .into_iter()
        .filter_map(|id| waiting.remove(&id))
        .collect();
    out
}

/// The next line into `buf` (without its newline): `Some(true)` when it was longer
/// than [`MAX_LINE`] (then `buf` is empty and the line was skipped), `None` at the end.
fn bounded_line(reader: &mut impl BufRead, buf: &mut Vec<u8>) -> std::io::Result<Option<bool>> {
    buf.clear();
    let (mut long, mut any) = (false, false);
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok(any.then_some(long));
        }
        any = true;
        let end = chunk.iter().position(|b| *b == b'\n');
        let part = &chunk[..end.unwrap_or(chunk.len())];
        if !long {
            if buf.len() + part.len() > MAX_LINE {
                long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(part);
            }
        }
        let used = end.map_or(chunk.len(), |at| at + 1);
        reader.consume(used);
        if end.is_some() {
            return Ok(Some(long));
        }
    }
}

/// What becomes of a task the file says was waiting.
#[derive(Debug, PartialEq)]
pub enum Fate {
    /// It is queued again, in its lane, behind the ones before it.
    Run(Pending),
    /// It cannot run; its record ends `FAILED` with `why`.
    Fail { saved: Saved, why: String },
    /// Its record already ended (its `removed` line was lost): nothing to do.
    Ended(String),
}

/// Decides which of the waiting tasks (in arrival order) run again under `policy`:
/// when the queue has less room than before, those that would have run first (by
/// lane, then arrival) keep it. `ended` says whether the task store already holds a
/// task as ended. The fates come in arrival order.
pub fn plan(waiting: Vec<Saved>, policy: &Policy, ended: impl Fn(&str) -> bool) -> Vec<Fate> {
    let room = match policy.acceptance {
        Acceptance::Queue => policy.depth,
        Acceptance::Single => 1,
        Acceptance::None => 0,
    };
    let total = waiting.len();
    let mut fates: Vec<Fate> = waiting
        .into_iter()
        .map(|saved| {
            if ended(&saved.id) {
                return Fate::Ended(saved.id);
            }
            match saved.pending() {
                Ok(pending) => Fate::Run(pending),
                Err(why) => {
                    let why = format!("{REQUEUE_FAILED}: {why}");
                    Fate::Fail { saved, why }
                }
            }
        })
        .collect();
    let mut runs: Vec<usize> = (0..fates.len())
        .filter(|at| matches!(fates[*at], Fate::Run(_)))
        .collect();
    // Stable: arrival order stays within each lane.
    runs.sort_by_key(|at| match &fates[*at] {
        Fate::Run(task) => task.origin.lane(),
        _ => super::Lane::Bg,
    });
    for at in runs.into_iter().skip(room) {
        if let Fate::Run(task) = &fates[at] {
            let saved = Saved::of(task);
            fates[at] = Fate::Fail {
                saved,
                why: no_room(policy, total),
            };
        }
    }
    fates
}

pub const REQUEUE_FAILED: &str =
    "the task was waiting in the queue when the server stopped and could not be queued again";

fn no_room(policy: &Policy, waiting: usize) -> String {
    let why = match policy.acceptance {
        Acceptance::Queue => format!(
            "the capsule's queue now holds at most {} waiting (lifecycle.queue_depth, or its queued_tasks limit) and {waiting} were waiting",
            match policy.depth {
                1 => "1 task".to_string(),
                n => format!("{n} tasks"),
            }
        ),
        Acceptance::Single => {
            "the capsule now takes a single task (lifecycle.task_acceptance: single)".to_string()
        }
        Acceptance::None => {
            "the capsule no longer takes tasks at its address (lifecycle.task_acceptance: none)"
                .to_string()
        }
    };
    format!("{REQUEUE_FAILED}: {why}")
}

/// Whether an accepted task is synced to disk (`fdatasync`) before it is acknowledged,
/// as `mur serve --sync-queue` asks. Written to the file it always is, before the
/// acknowledgement, which is what outlives the process (`kill -9`, a crash); the sync
/// is what outlives the machine (a power cut), and costs a disk flush on the accepting
/// thread for every task: 0.3 ms on a quiet disk here, tens of milliseconds on a busy
/// one, which every tenant's requests would wait behind. So it is the operator's choice.
static SYNC: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets [`SYNC`] for every backlog of this process.
pub fn sync_accepted(on: bool) {
    SYNC.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// A change to what waits, for [`Backlog::note`].
pub enum Note<'a> {
    Queued(&'a Pending),
    Started(&'a str),
    Removed(&'a str),
}

/// The file a queue writes down what waits in.
pub struct Backlog {
    path: PathBuf,
    file: Option<File>,
    /// Lines in the file since it was last rewritten.
    lines: usize,
    last_started: Option<String>,
    /// A write failed part way: the file may end in half a line, so the next write
    /// rewrites it whole.
    torn: bool,
    warned: bool,
}

impl Backlog {
    /// The backlog at `path`, holding exactly `waiting` from now on. With nothing
    /// waiting the file is removed rather than written: a capsule's start (and its
    /// first one above all) pays for no write, and the first task makes the file.
    pub fn open(path: &Path, waiting: &[&Pending]) -> Backlog {
        let mut backlog = Backlog {
            path: path.to_path_buf(),
            file: None,
            lines: 0,
            last_started: None,
            torn: true,
            warned: false,
        };
        if !waiting.is_empty() {
            backlog.rewrite(waiting);
            return backlog;
        }
        match fs::remove_file(path) {
            Ok(()) => backlog.torn = false,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => backlog.torn = false,
            // Left torn: the first write tries to replace it whole.
            Err(e) => backlog.warn(&e),
        }
        backlog
    }

    /// Writes down `note`; `lanes` is what waits once it is made. A failure to write is
    /// said once, on stderr: the task is still taken, as the task store's journal
    /// keeps serving when its file cannot be written.
    pub fn note(&mut self, note: Note<'_>, lanes: &[VecDeque<Pending>; 3]) {
        let line = match &note {
            Note::Queued(task) if !kept(task) => return,
            Note::Queued(task) => Line::Queued(Saved::of(task)),
            Note::Started(id) => {
                self.last_started = Some((*id).to_string());
                Line::Started {
                    id: (*id).to_string(),
                }
            }
            Note::Removed(id) => Line::Removed {
                id: (*id).to_string(),
            },
        };
        let waiting: usize = lanes.iter().map(VecDeque::len).sum();
        if self.torn || self.lines > waiting.saturating_mul(2) + SLACK {
            let all: Vec<&Pending> = lanes.iter().flatten().collect();
            return self.rewrite(&all);
        }
        let synced =
            matches!(note, Note::Queued(_)) && SYNC.load(std::sync::atomic::Ordering::Relaxed);
        if let Err(e) = self.append(&line, synced) {
            self.torn = true;
            self.warn(&e);
        }
        if waiting == 0 {
            // An idle capsule holds no more open files than it did without a backlog.
            self.file = None;
        }
    }

    fn append(&mut self, line: &Line, synced: bool) -> std::io::Result<()> {
        let text = line_of(line)?;
        let file = self.file()?;
        file.write_all(text.as_bytes())?;
        if synced {
            file.sync_data()?;
        }
        self.lines += 1;
        Ok(())
    }

    /// Replaces the file with `waiting` (in order) and the last start, synced and
    /// renamed into place.
    fn rewrite(&mut self, waiting: &[&Pending]) {
        self.file = None;
        let tmp = self.path.with_extension("jsonl.tmp");
        let started = self.last_started.clone();
        let written = (|| -> std::io::Result<usize> {
            let mut file = File::create(&tmp)?;
            let mut lines = 0;
            for task in waiting.iter().filter(|t| kept(t)) {
                file.write_all(line_of(&Line::Queued(Saved::of(task)))?.as_bytes())?;
                lines += 1;
            }
            if let Some(id) = started {
                file.write_all(line_of(&Line::Started { id })?.as_bytes())?;
                lines += 1;
            }
            file.sync_all()?;
            fs::rename(&tmp, &self.path)?;
            // The rename itself outlives a power cut only once its folder is synced.
            if let Some(dir) = self.path.parent() {
                File::open(dir)?.sync_all()?;
            }
            Ok(lines)
        })();
        match written {
            Ok(lines) => {
                self.lines = lines;
                self.torn = false;
            }
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                self.warn(&e);
            }
        }
    }

    fn file(&mut self) -> std::io::Result<&mut File> {
        if self.file.is_none() {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)?;
            self.file = Some(file);
        }
        self.file
            .as_mut()
            .ok_or_else(|| std::io::Error::other("the queue's file is not open"))
    }

    fn warn(&mut self, e: &std::io::Error) {
        if !std::mem::replace(&mut self.warned, true) {
            eprintln!(
                "warning[W-QUEUE-001]: could not write the queue down in {}: {e}\n  hint: queued tasks still run, but a crash now loses those waiting; check that the records folder is writable and has room",
                self.path.display()
            );
        }
    }
}

/// One record, as one line; the secrets the host knows never reach the disk.
fn line_of(line: &Line) -> std::io::Result<String> {
    let json = serde_json::to_string(line).map_err(std::io::Error::other)?;
    let mut text = crate::secret::scrub(&json).into_owned();
    text.push('\n');
    Ok(text)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::AfterTask;
    use super::*;

    struct Dir(PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn dir() -> Dir {
        let dir = std::env::temp_dir().join(format!("mur-backlog-{}", crate::ids::event()));
        fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    fn task(n: u32, origin: Origin) -> Pending {
        Pending {
            id: format!("tsk_{n:04}"),
            context_id: format!("ctx-{n}"),
            text: format!("task {n}\nwith \"quotes\" and \u{1F980}"),
            origin,
            source: Source::A2a,
            message_id: Some(format!("m-{n}")),
            breach: None,
            traceparent: None,
        }
    }

    fn policy(acceptance: Acceptance, depth: usize) -> Policy {
        Policy {
            acceptance,
            after_task: AfterTask::Sleep,
            depth,
            idle: Duration::from_secs(1),
        }
    }

    fn lanes(tasks: &[&Pending]) -> [VecDeque<Pending>; 3] {
        let mut lanes: [VecDeque<Pending>; 3] = Default::default();
        for t in tasks {
            lanes[t.origin.lane() as usize].push_back((*t).clone());
        }
        lanes
    }

    fn ids(read: &Read) -> Vec<&str> {
        read.waiting.iter().map(|s| s.id.as_str()).collect()
    }

    #[test]
    fn what_waits_is_read_back_whole_in_arrival_order() {
        let d = dir();
        let path = d.0.join(FILE);
        let mut backlog = Backlog::open(&path, &[]);
        let (a, b, c) = (
            task(1, Origin::Event),
            task(2, Origin::Peer),
            task(3, Origin::Event),
        );
        backlog.note(Note::Queued(&a), &lanes(&[&a]));
        backlog.note(Note::Queued(&b), &lanes(&[&a, &b]));
        backlog.note(Note::Queued(&c), &lanes(&[&a, &b, &c]));
        backlog.note(Note::Started("tsk_0002"), &lanes(&[&a, &c]));
        let read = read(&path);
        assert_eq!(ids(&read), ["tsk_0001", "tsk_0003"]);
        assert_eq!(read.last_started.as_deref(), Some("tsk_0002"));
        assert_eq!(read.skipped, 0);
        assert_eq!(read.waiting[0].pending().unwrap(), a);
        assert_eq!(read.waiting[1].pending().unwrap(), c);
    }

    #[test]
    fn a_removed_task_no_longer_waits_and_the_capsules_own_tasks_are_not_kept() {
        let d = dir();
        let path = d.0.join(FILE);
        let mut backlog = Backlog::open(&path, &[]);
        let a = task(1, Origin::Event);
        let mut own = task(2, Origin::User);
        own.source = Source::TaskMd;
        let mut follow_up = task(3, Origin::System);
        follow_up.source = Source::Loop;
        backlog.note(Note::Queued(&a), &lanes(&[&a]));
        backlog.note(Note::Queued(&own), &lanes(&[&a, &own]));
        backlog.note(Note::Queued(&follow_up), &lanes(&[&a, &own, &follow_up]));
        backlog.note(Note::Removed("tsk_0001"), &lanes(&[&own, &follow_up]));
        let read = read(&path);
        assert_eq!(ids(&read), ["tsk_0003"]);
        assert_eq!(read.waiting[0].pending().unwrap(), follow_up);
    }

    #[test]
    fn the_file_is_rewritten_once_it_grows_past_what_waits() {
        let d = dir();
        let path = d.0.join(FILE);
        let mut backlog = Backlog::open(&path, &[]);
        for n in 0..1000 {
            let t = task(n, Origin::Event);
            backlog.note(Note::Queued(&t), &lanes(&[&t]));
            backlog.note(Note::Started(&t.id), &lanes(&[]));
        }
        let last = task(1000, Origin::Peer);
        backlog.note(Note::Queued(&last), &lanes(&[&last]));
        let lines = fs::read_to_string(&path).unwrap().lines().count();
        assert!(lines <= 2 * SLACK + 4, "{lines} lines");
        let read = read(&path);
        assert_eq!(ids(&read), ["tsk_1000"]);
        assert_eq!(read.last_started.as_deref(), Some("tsk_0999"));
    }

    #[test]
    fn garbage_cut_lines_and_forged_ids_are_skipped_and_counted() {
        let d = dir();
        let path = d.0.join(FILE);
        let good = serde_json::to_string(&Line::Queued(Saved::of(&task(7, Origin::Peer)))).unwrap();
        let forged = good.replace("tsk_0007", "../../etc/passwd");
        let mut bytes = Vec::new();
        bytes.extend_from_slice(b"not json at all\n\xff\xfe\x00binary\n");
        bytes.extend_from_slice(b"{\"op\":\"exploded\",\"id\":\"tsk_1\"}\n");
        bytes.extend_from_slice(format!("{forged}\n").as_bytes());
        bytes.extend_from_slice(&vec![b'x'; MAX_LINE + 10]);
        bytes.extend_from_slice(b"\n\n   \n");
        bytes.extend_from_slice(format!("{good}\n").as_bytes());
        bytes.extend_from_slice(&good.as_bytes()[..good.len() / 2]);
        fs::write(&path, &bytes).unwrap();
        let read = read(&path);
        assert_eq!(ids(&read), ["tsk_0007"]);
        assert_eq!(read.skipped, 6, "{read:?}");
        assert!(read.refused.is_none());
    }

    #[test]
    fn a_file_too_big_for_a_backlog_is_not_read() {
        let d = dir();
        let path = d.0.join(FILE);
        let file = File::create(&path).unwrap();
        file.set_len(MAX_READ + 1).unwrap();
        let read = read(&path);
        assert!(read.waiting.is_empty());
        assert!(
            read.refused
                .as_deref()
                .is_some_and(|r| r.contains("more than a queue's file ever holds")),
            "{read:?}"
        );
    }

    #[test]
    fn a_rewrite_keeps_only_what_waits_and_a_torn_write_is_repaired_by_the_next() {
        let d = dir();
        let path = d.0.join(FILE);
        let (a, b) = (task(1, Origin::Event), task(2, Origin::Event));
        fs::write(&path, b"{\"op\":\"queued\",\"id\":\"tsk_0").unwrap();
        let mut backlog = Backlog::open(&path, &[&a]);
        backlog.note(Note::Queued(&b), &lanes(&[&a, &b]));
        let read = read(&path);
        assert_eq!(ids(&read), ["tsk_0001", "tsk_0002"]);
        assert_eq!(read.skipped, 0);
    }

    #[test]
    fn the_plan_keeps_arrival_order_up_to_the_room_and_says_why_for_the_rest() {
        let mut bad = Saved::of(&task(4, Origin::Event));
        bad.origin = "martian".into();
        let mut lost = Saved::of(&task(5, Origin::Event));
        lost.text = None;
        let waiting = vec![
            Saved::of(&task(1, Origin::Event)),
            Saved::of(&task(2, Origin::Peer)),
            Saved::of(&task(3, Origin::Event)),
            bad,
            lost,
            Saved::of(&task(6, Origin::Event)),
        ];
        let fates = plan(waiting, &policy(Acceptance::Queue, 2), |id| {
            id == "tsk_0003"
        });
        assert_eq!(fates[0], Fate::Run(task(1, Origin::Event)));
        assert_eq!(fates[1], Fate::Run(task(2, Origin::Peer)));
        assert_eq!(fates[2], Fate::Ended("tsk_0003".into()));
        let why = |f: &Fate| match f {
            Fate::Fail { why, .. } => why.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            why(&fates[3]),
            format!("{REQUEUE_FAILED}: its record names an unknown origin 'martian'")
        );
        assert_eq!(
            why(&fates[4]),
            format!("{REQUEUE_FAILED}: its text could not be read back from the queue's file")
        );
        assert_eq!(
            why(&fates[5]),
            format!(
                "{REQUEUE_FAILED}: the capsule's queue now holds at most 2 tasks waiting (lifecycle.queue_depth, or its queued_tasks limit) and 6 were waiting"
            )
        );
        // With room for one, the task that would have run first keeps it: the peer's,
        // though it came last.
        let single = plan(
            vec![
                Saved::of(&task(1, Origin::Event)),
                Saved::of(&task(2, Origin::Peer)),
            ],
            &policy(Acceptance::Single, 4),
            |_| false,
        );
        assert!(
            matches!(&single[0], Fate::Fail { why, .. } if why.ends_with("(lifecycle.task_acceptance: single)"))
        );
        assert_eq!(single[1], Fate::Run(task(2, Origin::Peer)));
    }

    #[test]
    fn a_known_secret_never_reaches_the_file() {
        let d = dir();
        let path = d.0.join(FILE);
        crate::secret::set("sk-backlog-test-0123456789");
        let mut t = task(1, Origin::Event);
        t.text = "the key is sk-backlog-test-0123456789".into();
        let mut backlog = Backlog::open(&path, &[]);
        backlog.note(Note::Queued(&t), &lanes(&[&t]));
        let on_disk = fs::read_to_string(&path).unwrap();
        assert!(!on_disk.contains("sk-backlog-test"), "{on_disk}");
    }
}
