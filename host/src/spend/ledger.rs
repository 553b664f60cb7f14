//! The day ledger: the tokens counted against a daily ceiling on one UTC day, in one
//! small file that every `mur` process of the user shares (`$MURMUR_HOME/spend/`) or
//! that one hosted capsule keeps in its records. It is read and changed only under an
//! exclusive `flock` on the file, so a check and the reservation that follows it are
//! one step for every process at once.
//!
//! The file is one line of a fixed width, `murmur-spend 1 YYYY-MM-DD <20 digits>\n`,
//! rewritten in place by a single positioned write: no temporary file and no rename,
//! which would leave a lock holder locking a file nobody reads any more; no truncate,
//! since every record is the same length. Anything else found there (another length,
//! another text, a link, a FIFO, a directory) is an error naming the file, never read
//! further and never followed.
//!
//! A session keeps the file open between its checks (opening it twice per inference
//! call was most of the check's cost); each check, once it holds the lock, makes sure
//! the file it holds still has a name (removed, or replaced by a rename, it has none)
//! and opens the name afresh when not, so every process counts in the one file the
//! name holds.

use std::fs::{DirBuilder, File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use chrono::{Datelike, NaiveDate};

use crate::error::Error;

const MAGIC: &str = "murmur-spend 1";
/// `MAGIC`, a space, the day, a space, 20 digits (any `u64`) and the newline.
const RECORD_LEN: usize = MAGIC.len() + 1 + 10 + 1 + 20 + 1;
/// How long a check waits for another process's turn. Each holds the lock for a read
/// and a write of one line; a holder past this is stuck, and the call is refused
/// rather than made uncounted.
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// The UTC day now: the day the daily ceilings count.
pub fn today() -> NaiveDate {
    chrono::Utc::now().date_naive()
}

/// A ledger file, and the file itself once a check has opened it.
#[derive(Debug)]
pub struct Ledger {
    path: PathBuf,
    open: Mutex<Option<File>>,
}

/// The ledger, locked until this drops: both the `flock` (against other processes)
/// and the mutex (against other threads using the same `Ledger`).
pub struct Locked<'a> {
    open: MutexGuard<'a, Option<File>>,
    ledger: &'a Ledger,
}

impl Ledger {
    pub fn new(path: PathBuf) -> Ledger {
        Ledger {
            path,
            open: Mutex::new(None),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Locks the ledger, opening it (made, owner-only, with its folder, when missing)
    /// when it is not open yet or the file held was removed or replaced.
    pub fn lock(&self) -> Result<Locked<'_>, Error> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = open.take() {
            lock_within(&held, LOCK_WAIT).map_err(|e| self.unusable(e))?;
            // The file's own links, not a lookup of the name: an `fstat`, cheaper.
            match held.metadata() {
                Ok(meta) if meta.nlink() > 0 => {
                    *open = Some(held);
                    return Ok(Locked { open, ledger: self });
                }
                // Removed or replaced: closing the old file releases its lock.
                _ => drop(held),
            }
        }
        let held = self.open_file()?;
        lock_within(&held, LOCK_WAIT).map_err(|e| self.unusable(e))?;
        *open = Some(held);
        Ok(Locked { open, ledger: self })
    }

    fn open_file(&self) -> Result<File, Error> {
        if let Some(dir) = self.path.parent() {
            ensure_dir(dir).map_err(|e| self.unusable(format!("its folder: {e}")))?;
        }
        // O_NOFOLLOW: a link at the name fails the open instead of being followed;
        // O_NONBLOCK: a FIFO planted there cannot hang the open (it is refused below).
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&self.path)
            .map_err(|e| self.unusable(opened(&e)))?;
        let meta = file.metadata().map_err(|e| self.unusable(e))?;
        if !meta.file_type().is_file() {
            return Err(self.unusable("it is not a regular file"));
        }
        Ok(file)
    }

    /// The tokens counted on `day`, without making the file when there is none (0).
    pub fn used_on(&self, day: NaiveDate) -> Result<u64, Error> {
        match std::fs::symlink_metadata(&self.path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
            _ => self.lock()?.used_on(day),
        }
    }

    fn unusable(&self, why: impl std::fmt::Display) -> Error {
        Error::new(
            "E-SPEND-001",
            format!(
                "the spend ledger {} is unusable: {why}",
                self.path.display()
            ),
        )
        .hint(
            "it must be a file mur wrote, in a folder of yours; remove it (the day's count \
             starts again from 0) or set MURMUR_HOME to another folder",
        )
    }
}

/// `open` names a link it refused as one.
fn opened(e: &io::Error) -> String {
    if e.raw_os_error() == Some(libc::ELOOP) {
        "it is a symbolic link, which is not followed".to_string()
    } else {
        e.to_string()
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        if let Some(held) = self.open.as_ref() {
            // Failing, the lock still goes when the file is closed.
            let _ = held.unlock();
        }
    }
}

impl Locked<'_> {
    fn file(&self) -> Result<&File, Error> {
        self.open
            .as_ref()
            .ok_or_else(|| self.ledger.unusable("it is not open"))
    }

    /// The tokens counted on `day`: 0 when the file is new or holds another day.
    pub fn used_on(&self, day: NaiveDate) -> Result<u64, Error> {
        Ok(match self.record()? {
            Some((counted, used)) if counted == day => used,
            _ => 0,
        })
    }

    /// Records `used` tokens for `day`, replacing what the file held.
    pub fn set(&self, day: NaiveDate, used: u64) -> Result<(), Error> {
        let line = record(day, used);
        if line.len() != RECORD_LEN {
            return Err(self
                .ledger
                .unusable(format!("the day {day} does not fit a record")));
        }
        self.file()?
            .write_all_at(line.as_bytes(), 0)
            .map_err(|e| self.ledger.unusable(e))
    }

    /// The day and count the file holds, `None` for a new (empty) file. At most one
    /// byte more than a record is read, so a huge file costs no more than a right one.
    pub fn record(&self) -> Result<Option<(NaiveDate, u64)>, Error> {
        let file = self.file()?;
        let mut buf = [0u8; RECORD_LEN + 1];
        // One read: a regular file returns all it has up to the buffer's size.
        let len = loop {
            match file.read_at(&mut buf, 0) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.ledger.unusable(e)),
            }
        };
        if len == 0 {
            return Ok(None);
        }
        parse(&buf[..len])
            .map(Some)
            .ok_or_else(|| self.ledger.unusable("it does not hold a record mur wrote"))
    }
}

fn record(day: NaiveDate, used: u64) -> String {
    // By hand: chrono's formatter is a good share of the check's time.
    let (y, m, d) = (day.year(), day.month(), day.day());
    format!("{MAGIC} {y:04}-{m:02}-{d:02} {used:020}\n")
}

fn parse(bytes: &[u8]) -> Option<(NaiveDate, u64)> {
    if bytes.len() != RECORD_LEN {
        return None;
    }
    let text = std::str::from_utf8(bytes).ok()?;
    let rest = text.strip_prefix(MAGIC)?.strip_prefix(' ')?;
    let rest = rest.strip_suffix('\n')?;
    let (day, used) = rest.split_once(' ')?;
    if used.len() != 20 || !used.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((parse_day(day)?, used.parse().ok()?))
}

/// `YYYY-MM-DD`, by hand for the same reason as `record`.
fn parse_day(text: &str) -> Option<NaiveDate> {
    let b = text.as_bytes();
    let digits = |r: std::ops::Range<usize>| -> Option<u32> {
        b.get(r)?.iter().try_fold(0u32, |n, c| {
            c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0'))
        })
    };
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let year = i32::try_from(digits(0..4)?).ok()?;
    NaiveDate::from_ymd_opt(year, digits(5..7)?, digits(8..10)?)
}

/// The exclusive lock, taken without blocking the thread for good: a holder that never
/// lets go makes this an error after `wait`.
fn lock_within(file: &File, wait: Duration) -> io::Result<()> {
    let until = Instant::now() + wait;
    let mut tries: u32 = 0;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(TryLockError::WouldBlock) if Instant::now() < until => {
                // A holder keeps the lock for a read and a write: yielding usually
                // outlasts it; a sleep, which the timer makes 50 µs or more, only
                // once that failed.
                tries += 1;
                if tries < 64 {
                    std::thread::yield_now();
                } else {
                    let micros = 50u64 << (tries - 64).min(5);
                    std::thread::sleep(Duration::from_micros(micros));
                }
            }
            Err(TryLockError::WouldBlock) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("another process has held its lock for {} s", wait.as_secs()),
                ));
            }
            Err(TryLockError::Error(e)) => return Err(e),
        }
    }
}

/// The ledger's folder: made owner-only when missing; a link or a non-folder there is
/// refused rather than followed (a folder that exists is left as it is).
fn ensure_dir(dir: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.file_type().is_dir() => Ok(()),
        Ok(_) => Err(io::Error::other(
            "it is not a folder (a link is not followed)",
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            match DirBuilder::new().recursive(true).mode(0o700).create(dir) {
                Ok(()) => ensure_made(dir),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => ensure_made(dir),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// Another process may have made it meanwhile: what is there now must be a folder.
fn ensure_made(dir: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.file_type().is_dir() => Ok(()),
        Ok(_) => Err(io::Error::other(
            "it is not a folder (a link is not followed)",
        )),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mur-ledger-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_record_is_one_width_and_reads_back() {
        let line = record(day("2026-05-01"), u64::MAX);
        assert_eq!(line.len(), RECORD_LEN);
        assert_eq!(parse(line.as_bytes()), Some((day("2026-05-01"), u64::MAX)));
        assert_eq!(
            record(day("2026-05-01"), 7),
            "murmur-spend 1 2026-05-01 00000000000000000007\n"
        );
        for bad in [
            "2026-02-30",
            "2026-13-01",
            "20x6-01-01",
            "2026/01/01",
            "+2026-01-1",
        ] {
            let line = format!("{MAGIC} {bad} {:020}\n", 5);
            assert_eq!(line.len(), RECORD_LEN);
            assert_eq!(parse(line.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn a_new_ledger_counts_from_zero_and_keeps_what_is_set() {
        let dir = scratch("new");
        let ledger = Ledger::new(dir.join("spend").join("machine-day"));
        assert_eq!(ledger.used_on(day("2026-05-01")).unwrap(), 0);
        assert!(!ledger.path().exists(), "reading makes no file");
        let locked = ledger.lock().unwrap();
        assert_eq!(locked.used_on(day("2026-05-01")).unwrap(), 0);
        locked.set(day("2026-05-01"), 1234).unwrap();
        drop(locked);
        assert_eq!(ledger.used_on(day("2026-05-01")).unwrap(), 1234);
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(ledger.path()), 0o600);
        assert_eq!(mode(ledger.path().parent().unwrap()), 0o700);
    }

    #[test]
    fn the_next_utc_day_starts_from_zero() {
        let dir = scratch("rollover");
        let ledger = Ledger::new(dir.join("day"));
        ledger.lock().unwrap().set(day("2026-05-01"), 900).unwrap();
        assert_eq!(ledger.used_on(day("2026-05-02")).unwrap(), 0);
        // A clock set back counts afresh too: only the recorded day's tokens count.
        assert_eq!(ledger.used_on(day("2026-04-30")).unwrap(), 0);
        assert_eq!(ledger.used_on(day("2026-05-01")).unwrap(), 900);
    }

    #[test]
    fn garbage_a_huge_file_a_link_and_a_fifo_are_errors_naming_the_file() {
        let dir = scratch("hostile");
        let today = day("2026-05-01");
        type Plant = Box<dyn Fn(&Path)>;
        let cases: [(&str, Plant); 6] = [
            (
                "garbage",
                Box::new(|p| std::fs::write(p, "not a ledger").unwrap()),
            ),
            (
                "a record with a bad digit",
                Box::new(|p| {
                    let mut line = record(day("2026-05-01"), 5).into_bytes();
                    line[RECORD_LEN - 2] = b'x';
                    std::fs::write(p, line).unwrap()
                }),
            ),
            (
                "a huge file",
                Box::new(|p| {
                    let f = File::create(p).unwrap();
                    f.set_len(1 << 40).unwrap();
                }),
            ),
            (
                "a link",
                Box::new(|p| std::os::unix::fs::symlink("/etc/passwd", p).unwrap()),
            ),
            (
                "a fifo",
                Box::new(|p| {
                    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
                    // SAFETY: mkfifo reads a NUL-terminated path.
                    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
                }),
            ),
            ("a folder", Box::new(|p| std::fs::create_dir(p).unwrap())),
        ];
        for (n, (what, plant)) in cases.iter().enumerate() {
            let path = dir.join(format!("day-{n}"));
            plant(&path);
            let ledger = Ledger::new(path.clone());
            let e = ledger
                .lock()
                .and_then(|l| l.used_on(today))
                .expect_err(what);
            assert_eq!(e.code, "E-SPEND-001", "{what}");
            assert!(
                e.message.starts_with(&format!(
                    "the spend ledger {} is unusable: ",
                    path.display()
                )),
                "{what}: {e}"
            );
        }
    }

    #[test]
    fn a_linked_folder_is_refused() {
        let dir = scratch("linked-dir");
        std::fs::create_dir(dir.join("real")).unwrap();
        std::os::unix::fs::symlink(dir.join("real"), dir.join("spend")).unwrap();
        let ledger = Ledger::new(dir.join("spend").join("day"));
        let e = ledger.lock().err().expect("refused");
        assert!(e.message.contains("its folder: it is not a folder"), "{e}");
        assert!(!dir.join("real").join("day").exists());
    }

    /// While one holder has the lock, another open of the same file waits; it gets the
    /// lock the moment the first lets go.
    #[test]
    fn the_lock_is_exclusive_across_open_files() {
        let dir = scratch("lock");
        let ledger = Ledger::new(dir.join("day"));
        let held = ledger.lock().unwrap();
        let other = OpenOptions::new().read(true).open(ledger.path()).unwrap();
        assert!(matches!(other.try_lock(), Err(TryLockError::WouldBlock)));
        let e = lock_within(&other, Duration::from_millis(30)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        drop(held);
        lock_within(&other, Duration::from_millis(30)).unwrap();
    }

    /// The file stays open between checks; one removed or replaced meanwhile is
    /// noticed at the next check, which counts in what the name now holds.
    #[test]
    fn a_removed_or_replaced_ledger_is_opened_afresh() {
        let dir = scratch("replaced");
        let path = dir.join("day");
        let ledger = Ledger::new(path.clone());
        ledger.lock().unwrap().set(day("2026-05-01"), 500).unwrap();
        std::fs::remove_file(&path).unwrap();
        let locked = ledger.lock().unwrap();
        assert_eq!(locked.used_on(day("2026-05-01")).unwrap(), 0);
        locked.set(day("2026-05-01"), 7).unwrap();
        drop(locked);
        assert_eq!(
            Ledger::new(path.clone())
                .used_on(day("2026-05-01"))
                .unwrap(),
            7
        );
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", &path).unwrap();
        let e = ledger.lock().err().expect("a link is refused");
        assert!(
            e.message
                .ends_with("it is a symbolic link, which is not followed"),
            "{e}"
        );
    }
}
