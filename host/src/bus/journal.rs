//! The replay journal: the frames that enter a bus's replay ring, appended to a file as
//! they are published, so a process restarted after a crash replays what the one before
//! it had buffered.
//!
//! The file is an 8-byte magic, then one record per frame: its length as a little-endian
//! u32, its id as a little-endian u64, a flags byte (bit 0: the frame ends a
//! `message/stream` connection), then the frame's SSE bytes exactly as they went out,
//! already scrubbed of secrets. Each record is one write and nothing is synced: a process
//! killed mid-write leaves at most a torn last record, which opening drops.

use std::fs::{File, OpenOptions, Permissions};
use std::io::{self, BufReader, BufWriter, IoSlice, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::{REPLAY_BYTES, REPLAY_CAPACITY, REPLAY_FRAME_BYTES};
use crate::error::Error;
use crate::frames::Frame;

/// Names the format, so a file that is something else is never read as frames.
const MAGIC: &[u8; 8] = b"MURJNL1\n";
/// Length, id, flags.
const HEADER: usize = 4 + 8 + 1;
const ENDS_STREAM: u8 = 1;
const MODE: u32 = 0o600;
const CODE: &str = "E-IO-004";

/// Past twice the ring's ceilings the file is rewritten to the ring's contents: often
/// enough that it stays bounded, rarely enough that the rewrite costs little per frame.
const MAX_RECORDS: usize = 2 * REPLAY_CAPACITY;
const MAX_BYTES: u64 = 2 * REPLAY_BYTES as u64;

pub(super) struct Journal {
    path: PathBuf,
    file: File,
    /// The records in the file and their frames' bytes, to know when to rewrite it.
    records: usize,
    bytes: u64,
}

/// What opening a journal found.
pub(super) struct Opened {
    /// `None` when the file could not be made ready to append to: the bus is then not
    /// journaled, and `reason` says why.
    pub(super) journal: Option<Journal>,
    /// The file was unreadable or corrupt and has been emptied: the frames already
    /// handed to `restore` are to be forgotten.
    pub(super) discard: bool,
    /// Why the ring starts empty or is not journaled, for the caller to log.
    pub(super) reason: Option<String>,
}

/// How far the file reads as records.
struct Scan {
    /// The end of the last whole record; 0 when even the magic is missing.
    end: u64,
    len: u64,
    records: usize,
    bytes: u64,
}

impl Journal {
    /// Opens or creates the journal at `path`, handing each frame it holds to `restore`
    /// in order. Fails only when there is no file to journal into: a symbolic link at
    /// `path`, something other than a regular file, or one that cannot be opened.
    pub(super) fn open(path: &Path, restore: impl FnMut(Frame)) -> Result<Opened, Error> {
        let mut file = open_file(path)?;
        let shown = path.display();
        let scanned = scan(&file, restore);
        let (end, len, discard, why) = match &scanned {
            Ok(s) => (s.end, s.len, false, None),
            Err(why) => (0, 0, true, Some(why.clone())),
        };
        // Appends must start at a record boundary: a torn tail is cut off, and a file
        // that is not a journal starts over.
        let settled = settle(&mut file, end, len);
        let reason = match (why, &settled) {
            (None, Ok(())) => None,
            (Some(why), Ok(())) => Some(format!(
                "the replay journal {shown} could not be read ({why}); the replay ring starts empty"
            )),
            (None, Err(e)) => Some(format!(
                "the replay journal {shown} cannot be appended to ({e}); frames are not journaled"
            )),
            (Some(why), Err(e)) => Some(format!(
                "the replay journal {shown} could not be read ({why}) nor reset ({e}); the replay ring starts empty and frames are not journaled"
            )),
        };
        let journal = settled.ok().map(|()| {
            let (records, bytes) = scanned.map(|s| (s.records, s.bytes)).unwrap_or((0, 0));
            Journal {
                path: path.to_path_buf(),
                file,
                records,
                bytes,
            }
        });
        Ok(Opened {
            journal,
            discard,
            reason,
        })
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one frame that entered the ring, in one write.
    pub(super) fn append(&mut self, frame: &Frame) -> io::Result<()> {
        let header = header(frame)?;
        let mut parts = [IoSlice::new(&header), IoSlice::new(&frame.bytes)];
        let mut parts = &mut parts[..];
        while !parts.is_empty() {
            match self.file.write_vectored(parts) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => IoSlice::advance_slices(&mut parts, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.records += 1;
        self.bytes += frame.bytes.len() as u64;
        Ok(())
    }

    /// The file holds much more than a ring can: time to `compact` it.
    pub(super) fn oversized(&self) -> bool {
        self.records > MAX_RECORDS || self.bytes > MAX_BYTES
    }

    /// Rewrites the file to hold exactly `ring`: a new file renamed over the old one, so
    /// a crash midway leaves the old file whole.
    pub(super) fn compact<'a>(
        &mut self,
        ring: impl IntoIterator<Item = &'a Frame>,
    ) -> io::Result<()> {
        let mut side = self.path.clone().into_os_string();
        side.push(".compact");
        let side = PathBuf::from(side);
        let written = write_fresh(&side, ring);
        let (file, records, bytes) = match written.and_then(|w| {
            std::fs::rename(&side, &self.path)?;
            Ok(w)
        }) {
            Ok(w) => w,
            Err(e) => {
                let _ = std::fs::remove_file(&side);
                return Err(e);
            }
        };
        self.file = file;
        self.records = records;
        self.bytes = bytes;
        Ok(())
    }
}

/// Opens without following a link at the last component (a link there could point the
/// server's writes anywhere), and without blocking on a FIFO planted at the name.
fn open_file(path: &Path) -> Result<File, Error> {
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| open_error(path, &e))?;
    let meta = file.metadata().map_err(|e| open_error(path, &e))?;
    if !meta.is_file() {
        return Err(Error::new(
            CODE,
            format!(
                "the replay journal {} is not a regular file",
                path.display()
            ),
        )
        .hint("remove it: the journal is created when the capsule starts"));
    }
    // A file created by someone else, or under another umask, is made private again:
    // its frames are what the capsule's clients were sent.
    if meta.permissions().mode() & 0o777 != MODE {
        file.set_permissions(Permissions::from_mode(MODE))
            .map_err(|e| open_error(path, &e))?;
    }
    Ok(file)
}

fn open_error(path: &Path, e: &io::Error) -> Error {
    let shown = path.display();
    if e.raw_os_error() == Some(libc::ELOOP) {
        return Error::new(
            CODE,
            format!("the replay journal {shown} is a symbolic link; it is not followed"),
        )
        .hint("remove the link: the journal is created when the capsule starts");
    }
    Error::new(CODE, format!("cannot open the replay journal {shown}: {e}"))
        .hint("check that its directory exists and this process may write there")
}

/// Reads the records in order, handing each frame to `restore`. A record cut short by
/// the end of the file is the write the process died in: it is left out. Anything else
/// that does not read as a record is corruption, and says where.
fn scan(file: &File, mut restore: impl FnMut(Frame)) -> Result<Scan, String> {
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    let mut reader = BufReader::new(file);
    let mut magic = [0; MAGIC.len()];
    let got = read_full(&mut reader, &mut magic)?;
    let mut scan = Scan {
        end: 0,
        len,
        records: 0,
        bytes: 0,
    };
    if got < MAGIC.len() && magic[..got] == MAGIC[..got] {
        // Empty, or the process died writing the magic.
        return Ok(scan);
    }
    if &magic != MAGIC {
        return Err("it is not a replay journal".into());
    }
    scan.end = MAGIC.len() as u64;
    loop {
        let mut header = [0; HEADER];
        if read_full(&mut reader, &mut header)? < HEADER {
            return Ok(scan);
        }
        let corrupt = || format!("a corrupt record at byte {}", scan.end);
        let (size, id, flags) = parse_header(&header);
        if size == 0 || size > REPLAY_FRAME_BYTES || flags & !ENDS_STREAM != 0 {
            return Err(corrupt());
        }
        let record_end = scan.end + (HEADER + size) as u64;
        if record_end > len {
            return Ok(scan);
        }
        let mut body = vec![0; size];
        if read_full(&mut reader, &mut body)? < size {
            return Ok(scan);
        }
        if !well_formed(id, &body) {
            return Err(corrupt());
        }
        scan.end = record_end;
        scan.records += 1;
        scan.bytes += size as u64;
        restore(Frame {
            id: Some(id),
            bytes: Bytes::from(body),
            ends_stream: flags & ENDS_STREAM != 0,
        });
    }
}

/// Fills `buf` unless the file ends first; returns how much it read.
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> Result<usize, String> {
    let mut got = 0;
    while got < buf.len() {
        match reader.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read failed: {e}")),
        }
    }
    Ok(got)
}

fn parse_header(header: &[u8; HEADER]) -> (usize, u64, u8) {
    let [l0, l1, l2, l3, i0, i1, i2, i3, i4, i5, i6, i7, flags] = *header;
    let size = u32::from_le_bytes([l0, l1, l2, l3]) as usize;
    let id = u64::from_le_bytes([i0, i1, i2, i3, i4, i5, i6, i7]);
    (size, id, flags)
}

/// A frame's bytes name its own id, so a record whose header and body disagree is
/// caught even without a checksum.
fn well_formed(id: u64, body: &[u8]) -> bool {
    body.starts_with(format!("id: {id}\nevent: ").as_bytes()) && body.ends_with(b"\n\n")
}

fn header(frame: &Frame) -> io::Result<[u8; HEADER]> {
    let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_string());
    // Only ring frames come here, and the ring takes only frames with an id and under
    // its per-frame ceiling.
    let id = frame.id.ok_or_else(|| invalid("a frame without an id"))?;
    let size = u32::try_from(frame.bytes.len())
        .ok()
        .filter(|&n| n as usize <= REPLAY_FRAME_BYTES)
        .ok_or_else(|| invalid("a frame too big for the replay ring"))?;
    let mut header = [0; HEADER];
    header[..4].copy_from_slice(&size.to_le_bytes());
    header[4..12].copy_from_slice(&id.to_le_bytes());
    header[12] = if frame.ends_stream { ENDS_STREAM } else { 0 };
    Ok(header)
}

/// Makes the file a journal holding only whole records up to `end`.
fn settle(file: &mut File, end: u64, len: u64) -> io::Result<()> {
    if end == 0 {
        file.set_len(0)?;
        // Append mode: the write lands at the new end, the start.
        return file.write_all(MAGIC);
    }
    if len > end {
        file.set_len(end)?;
    }
    Ok(())
}

/// A new journal at `side` holding `ring`; returns it open for appending, with its
/// record and byte counts.
fn write_fresh<'a>(
    side: &Path,
    ring: impl IntoIterator<Item = &'a Frame>,
) -> io::Result<(File, usize, u64)> {
    // A leftover from a rewrite that died is stale; removing a link removes the link.
    match std::fs::remove_file(side) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let file = OpenOptions::new()
        .append(true)
        .create_new(true)
        .mode(MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(side)?;
    let mut out = BufWriter::new(file);
    out.write_all(MAGIC)?;
    let (mut records, mut bytes) = (0, 0);
    for frame in ring {
        out.write_all(&header(frame)?)?;
        out.write_all(&frame.bytes)?;
        records += 1;
        bytes += frame.bytes.len() as u64;
    }
    let file = out.into_inner().map_err(|e| e.into_error())?;
    Ok((file, records, bytes))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::{Bus, Next, lock};
    use super::*;
    use crate::frames::{self, State, status};

    /// A directory of its own under the system temp dir, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new() -> Self {
            let dir = std::env::temp_dir().join(format!("mur-journal-{}", crate::ids::event()));
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }

        fn journal(&self) -> PathBuf {
            self.0.join("replay.journal")
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

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

    fn done(id: u64) -> Frame {
        status(
            id,
            "tsk_a",
            "ctx_a",
            State::Completed,
            "session ended",
            Some("ok"),
        )
    }

    /// Opens a journal that should read cleanly.
    fn open(path: &Path) -> Arc<Bus> {
        let (bus, reason) = Bus::journaled(path).unwrap();
        assert_eq!(reason, None);
        bus
    }

    fn replay(bus: &Bus, from: u64) -> Vec<Frame> {
        bus.subscribe(Some(from)).0
    }

    fn ids(frames: &[Frame]) -> Vec<Option<u64>> {
        frames.iter().map(|f| f.id).collect()
    }

    /// The file's size when it holds exactly `frames`.
    fn size_of(frames: &[Frame]) -> u64 {
        let records: usize = frames.iter().map(|f| HEADER + f.bytes.len()).sum();
        (MAGIC.len() + records) as u64
    }

    fn file_len(path: &Path) -> u64 {
        std::fs::metadata(path).unwrap().len()
    }

    #[test]
    fn a_reopened_journal_replays_what_the_old_bus_did() {
        let scratch = Scratch::new();
        let path = scratch.journal();
        let bus = open(&path);
        for id in [0, 1, 2, 0, 1] {
            bus.publish(st(id));
        }
        bus.publish(frames::text(2, "tsk_a", "a chunk", false));
        bus.publish(done(3));
        let froms = [0, 1, 2, 5];
        let before: Vec<_> = froms.iter().map(|&n| replay(&bus, n)).collect();
        assert_eq!(before[0].len(), 5);
        drop(bus);

        let bus = open(&path);
        let after: Vec<_> = froms.iter().map(|&n| replay(&bus, n)).collect();
        assert_eq!(after, before);
        assert!(after[0].last().unwrap().ends_stream);
        assert!(!after[0][0].ends_stream);
        // Restoring is not publishing: a connection opened now has nothing waiting.
        let (_, conn) = bus.subscribe(None);
        assert_eq!(conn.try_next(), None);

        // The reopened bus appends after what it restored.
        bus.publish(st(4));
        drop((conn, bus));
        let bus = open(&path);
        assert_eq!(
            ids(&replay(&bus, 2)),
            vec![Some(3), Some(4)],
            "{:?}",
            ids(&replay(&bus, 0))
        );
    }

    #[test]
    fn a_reopened_journal_writes_a_gap_where_the_old_bus_did() {
        let scratch = Scratch::new();
        let path = scratch.journal();
        let bus = open(&path);
        for id in 10..15 {
            bus.publish(st(id));
        }
        drop(bus);
        let bus = open(&path);
        let replayed = replay(&bus, 8);
        assert_eq!(replayed[0], frames::gap(10));
        assert_eq!(replayed[1..], (10..15).map(st).collect::<Vec<_>>()[..]);
        assert_eq!(
            ids(&replay(&bus, 9)),
            vec![Some(10), Some(11), Some(12), Some(13), Some(14)]
        );
    }

    #[test]
    fn restoring_keeps_the_rings_ceiling_of_512_frames() {
        let scratch = Scratch::new();
        let path = scratch.journal();
        let bus = open(&path);
        for id in 0..600 {
            bus.publish(st(id));
        }
        let before = replay(&bus, 0);
        drop(bus);
        let bus = open(&path);
        let after = replay(&bus, 0);
        assert_eq!(after[0], frames::gap(88));
        assert_eq!(after.len(), 513);
        assert_eq!(after, before);
    }

    #[test]
    fn a_torn_last_record_is_dropped_and_appends_go_after_the_whole_ones() {
        let scratch = Scratch::new();
        let path = scratch.journal();
        let bus = open(&path);
        for id in 1..=3 {
            bus.publish(st(id));
        }
        drop(bus);
        let whole = file_len(&path);
        let two = size_of(&[st(1), st(2)]);
        // Cut inside the last record's body, inside its header, and right after it began.
        for cut in [whole - 5, two + 5, two + 1] {
            let scratch = Scratch::new();
            let copy = scratch.journal();
            std::fs::copy(&path, &copy).unwrap();
            OpenOptions::new()
                .write(true)
                .open(&copy)
                .unwrap()
                .set_len(cut)
                .unwrap();
            let bus = open(&copy);
            assert_eq!(
                ids(&replay(&bus, 0)),
                vec![Some(1), Some(2)],
                "cut at {cut}"
            );
            assert_eq!(file_len(&copy), two, "the torn tail is cut off");
            bus.publish(st(4));
            drop(bus);
            let bus = open(&copy);
            assert_eq!(replay(&bus, 0), vec![st(1), st(2), st(4)], "cut at {cut}");
        }
    }

    #[test]
    fn a_file_that_is_not_a_journal_starts_an_empty_ring_and_says_why() {
        let scratch = Scratch::new();
        let path = scratch.journal();
        std::fs::write(&path, "id: 1\nevent: status\ndata: {}\n\n").unwrap();
        let (bus, reason) = Bus::journaled(&path).unwrap();
        let reason = reason.expect("a reason");
        assert!(reason.contains("not a replay journal"), "{reason}");
        assert!(reason.contains("starts empty"), "{reason}");
        assert!(replay(&bus, 0).is_empty());
        // The file was started over and journals again.
        bus.publish(st(1));
        drop(bus);
        assert_eq!(replay(&open(&path), 0), vec![st(1)]);
    }

    #[test]
    fn a_corrupt_record_starts_an_empty_ring_and_says_where() {
        let scratch = Scratch::new();
        let path = scratch.journal();
        let bus = open(&path);
        for id in 1..=3 {
            bus.publish(st(id));
        }
        drop(bus);
        // The second record's body names id 2; make it name 7.
        let mut bytes = std::fs::read(&path).unwrap();
        let at = size_of(&[st(1)]) as usize + HEADER + "id: ".len();
        assert_eq!(bytes[at], b'2');
        bytes[at] = b'7';
        std::fs::write(&path, &bytes).unwrap();

        let (bus, reason) = Bus::journaled(&path).unwrap();
        let reason = reason.expect("a reason");
        let second = size_of(&[st(1)]);
        assert!(
            reason.contains(&format!("a corrupt record at byte {second}")),
            "{reason}"
        );
        assert!(
            replay(&bus, 0).is_empty(),
            "frames read before it are forgotten"
        );
        assert_eq!(file_len(&path), MAGIC.len() as u64);
    }

    #[test]
    fn a_journal_past_twice_the_ring_is_rewritten_to_the_ring() {
        let scratch = Scratch::new();
        let path = scratch.journal();
        let bus = open(&path);
        let last = MAX_RECORDS as u64;
        for id in 0..last {
            bus.publish(st(id));
        }
        let all: Vec<Frame> = (0..last).map(st).collect();
        assert_eq!(file_len(&path), size_of(&all), "not yet past the bound");
        bus.publish(st(last));
        let ring = replay(&bus, 0)[1..].to_vec();
        assert_eq!(ring.len(), REPLAY_CAPACITY);
        assert_eq!(file_len(&path), size_of(&ring));
        let mut side = path.clone().into_os_string();
        side.push(".compact");
        assert!(!Path::new(&side).exists());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);

        // It goes on appending to the rewritten file.
        bus.publish(st(last + 1));
        let before = replay(&bus, 0);
        drop(bus);
        assert_eq!(replay(&open(&path), 0), before);
    }

    #[test]
    fn a_symbolic_link_at_the_path_is_refused() {
        let scratch = Scratch::new();
        let target = scratch.0.join("elsewhere");
        std::fs::write(&target, "keep").unwrap();
        let path = scratch.journal();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let Err(e) = Bus::journaled(&path) else {
            panic!("a link was followed")
        };
        assert_eq!(e.code, "E-IO-004");
        assert!(e.message.contains("symbolic link"), "{}", e.message);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    }

    #[test]
    fn a_directory_at_the_path_is_refused() {
        let scratch = Scratch::new();
        let path = scratch.journal();
        std::fs::create_dir(&path).unwrap();
        let Err(e) = Bus::journaled(&path) else {
            panic!("a directory was taken for a journal")
        };
        assert_eq!(e.code, "E-IO-004");
    }

    #[test]
    fn the_journal_is_private_to_its_owner() {
        let scratch = Scratch::new();
        let path = scratch.journal();
        drop(open(&path));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        std::fs::set_permissions(&path, Permissions::from_mode(0o644)).unwrap();
        drop(open(&path));
        assert_eq!(mode(&path), 0o600);
    }

    #[test]
    fn frames_that_never_enter_the_ring_never_reach_the_journal() {
        let scratch = Scratch::new();
        let path = scratch.journal();
        let bus = open(&path);
        bus.publish(frames::connection_ack("stateless"));
        bus.publish(frames::gap(3));
        bus.publish(frames::error("Invalid params: x"));
        bus.publish(frames::capsule_closed());
        let huge = "x".repeat(REPLAY_FRAME_BYTES);
        bus.publish(frames::text(2, "tsk_a", &huge, false));
        bus.publish(st(1));
        assert_eq!(file_len(&path), size_of(&[st(1)]));
        drop(bus);
        assert_eq!(replay(&open(&path), 0), vec![st(1)]);
    }

    #[tokio::test]
    async fn a_write_error_stops_the_journal_but_not_the_stream() {
        let scratch = Scratch::new();
        let path = scratch.journal();
        let bus = open(&path);
        bus.publish(st(1));
        let (_, conn) = bus.subscribe(None);
        // A handle that cannot write stands in for a full or failing disk.
        lock(&bus.inner).journal.as_mut().unwrap().file = File::open(&path).unwrap();
        bus.publish(st(2));
        bus.publish(st(3));
        assert_eq!(conn.next().await, Next::Frame(st(2)));
        assert_eq!(conn.next().await, Next::Frame(st(3)));
        assert_eq!(replay(&bus, 0), vec![st(1), st(2), st(3)]);
        assert!(lock(&bus.inner).journal.is_none(), "journaling stopped");
        drop((conn, bus));
        assert_eq!(replay(&open(&path), 0), vec![st(1)]);
    }

    #[test]
    fn an_unjournaled_bus_has_no_journal() {
        assert!(lock(&Bus::new().inner).journal.is_none());
    }
}
