//! The running-session registry: `$MURMUR_HOME/running/<session_id>.json`, one file per
//! `mur run` process while it serves, so `mur ps`, `mur stop SESSION` and `mur watch
//! SESSION` can find a capsule by its session.
//!
//! A file names a process by its pid *and* its start time (field 22 of
//! `/proc/<pid>/stat`): a pid the kernel has since given to another process is seen as
//! stale, and is never signalled. Entries are pruned by whoever lists them, so a
//! capsule killed outright leaves a file only until the next `mur ps`.
//!
//! The directory is 0700 and every file 0600; a file is written to a fresh temporary
//! name and renamed into place, which replaces (never follows) a link planted there.
//! `mur serve`'s capsules live inside its process and are not registered.
//!
//! A formation (`mur run --roster`) registers each member as a session of its own, each
//! entry naming the formation, so `mur ps` can group them and `mur stop frm_…` can find
//! the one process that runs them all.

use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::door::DoorToken;
use crate::error::Error;
use crate::workdir::murmur_home;

/// A registry file larger than this is not ours.
const MAX_ENTRY_BYTES: u64 = 64 * 1024;

/// One running `mur run`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub session_id: String,
    pub pid: u32,
    /// The process's start time in clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub start_time: u64,
    /// When the session started, unix milliseconds.
    pub started_at: u64,
    /// `http://127.0.0.1:PORT` as bound: what clients dial.
    pub address: String,
    /// `localhost:PORT`, as the launch line prints it.
    pub url: String,
    pub workdir: PathBuf,
    pub records_dir: PathBuf,
    pub capsule_name: String,
    pub capsule_version: String,
    /// The operator token of a capsule that declares `network.authentication`: the one
    /// place it is kept, read by `mur token`, `mur watch` and `mur stop` (this is why
    /// the file is 0600). Absent for a public door.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub door_token: Option<DoorToken>,
    /// The formation this session is a member of; absent for a capsule run alone, and
    /// in every entry written before formations were listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formation: Option<Membership>,
}

/// A session's place in the formation its process runs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Membership {
    /// `frm_` and 32 hex characters.
    pub id: String,
    /// The member's name in the roster.
    pub member: String,
    /// Whether it is the entry member: its session ending ends the formation.
    #[serde(default)]
    pub entry: bool,
    /// The roster file the formation was started from.
    #[serde(default)]
    pub roster: PathBuf,
}

/// The formation this process runs, once `mur run --roster` said so.
struct Formation {
    id: String,
    roster: PathBuf,
    entry: String,
    /// Roster names of the members other than the entry, by session id.
    members: Mutex<std::collections::HashMap<String, String>>,
}

static FORMATION: OnceLock<Formation> = OnceLock::new();

/// This process runs formation `id`, from `roster`, whose entry member is `entry`.
/// The entry member registers where `mur run` registers any capsule, before its session
/// id is known here: a session this process registers without a seat of its own (see
/// [`seat_member`]) is therefore the entry member.
pub fn join_formation(id: &str, roster: &Path, entry: &str) {
    let _ = FORMATION.set(Formation {
        id: id.to_string(),
        roster: roster.to_path_buf(),
        entry: entry.to_string(),
        members: Mutex::new(std::collections::HashMap::new()),
    });
}

/// Session `session_id` is the formation's member `member` (not its entry).
pub fn seat_member(session_id: &str, member: &str) {
    if let Some(formation) = FORMATION.get() {
        formation
            .members
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(session_id.to_string(), member.to_string());
    }
}

/// The membership of `session_id` in this process's formation, if it runs one.
fn membership_of(session_id: &str) -> Option<Membership> {
    let formation = FORMATION.get()?;
    let seated = formation
        .members
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(session_id)
        .cloned();
    Some(Membership {
        id: formation.id.clone(),
        entry: seated.is_none(),
        member: seated.unwrap_or_else(|| formation.entry.clone()),
        roster: formation.roster.clone(),
    })
}

impl Entry {
    /// An entry for this process, started now.
    pub fn for_this_process(session_id: &str, address: &str) -> Result<Self, String> {
        let pid = std::process::id();
        let start_time = start_time(pid)
            .ok_or_else(|| format!("could not read the start time of pid {pid} from /proc"))?;
        let port = address.rsplit(':').next().unwrap_or_default();
        Ok(Entry {
            session_id: session_id.to_string(),
            pid,
            start_time,
            started_at: now_ms(),
            address: address.to_string(),
            url: format!("localhost:{port}"),
            workdir: PathBuf::new(),
            records_dir: PathBuf::new(),
            capsule_name: String::new(),
            capsule_version: String::new(),
            door_token: None,
            formation: None,
        })
    }

    /// Whether the process this entry names still runs.
    pub fn state(&self) -> Process {
        process_state(self.pid, self.start_time)
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

/// `$MURMUR_HOME/running`.
pub fn dir() -> PathBuf {
    murmur_home().join("running")
}

fn unusable(dir: &Path, why: impl std::fmt::Display) -> Error {
    Error::new(
        "E-REG-001",
        format!(
            "the running-session registry {} is unusable: {why}",
            dir.display()
        ),
    )
    .hint("it must be a directory of yours (mode 0700); remove what is there, or set MURMUR_HOME to another folder")
}

/// The registry directory, made 0700 when missing; a link or a non-directory there is
/// refused rather than followed.
fn ensure_dir(dir: &Path) -> Result<(), Error> {
    match fs::symlink_metadata(dir) {
        Ok(meta) if meta.file_type().is_dir() => {
            if meta.permissions().mode() & 0o777 != 0o700 {
                fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
                    .map_err(|e| unusable(dir, e))?;
            }
            Ok(())
        }
        Ok(_) => Err(unusable(
            dir,
            "it is not a directory (a link is not followed)",
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent() {
                DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(parent)
                    .map_err(|e| unusable(dir, e))?;
            }
            match DirBuilder::new().mode(0o700).create(dir) {
                Ok(()) => Ok(()),
                // Another run made it meanwhile: check what is there now.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => ensure_dir_made(dir),
                Err(e) => Err(unusable(dir, e)),
            }
        }
        Err(e) => Err(unusable(dir, e)),
    }
}

fn ensure_dir_made(dir: &Path) -> Result<(), Error> {
    match fs::symlink_metadata(dir) {
        Ok(meta) if meta.file_type().is_dir() => Ok(()),
        _ => Err(unusable(
            dir,
            "it is not a directory (a link is not followed)",
        )),
    }
}

/// The file of `session_id`; ids are `ses_` and hex, so the name is safe.
fn path_of(dir: &Path, session_id: &str) -> PathBuf {
    dir.join(format!("{session_id}.json"))
}

/// While it lives, the session is listed; dropping it removes the file.
pub struct Registration {
    path: PathBuf,
}

impl Registration {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// Writes `entry` atomically under `$MURMUR_HOME/running`.
///
/// # Errors
///
/// `E-REG-001` when the directory cannot be made or the file written.
pub fn register(entry: &Entry) -> Result<Registration, Error> {
    match (&entry.formation, membership_of(&entry.session_id)) {
        (None, Some(membership)) => register_in(
            &dir(),
            &Entry {
                formation: Some(membership),
                ..entry.clone()
            },
        ),
        _ => register_in(&dir(), entry),
    }
}

fn register_in(dir: &Path, entry: &Entry) -> Result<Registration, Error> {
    ensure_dir(dir)?;
    let path = path_of(dir, &entry.session_id);
    let temp = dir.join(format!(".{}.{}.tmp", entry.session_id, entry.pid));
    let text = serde_json::to_vec_pretty(entry).map_err(|e| unusable(dir, e))?;
    let written = (|| {
        // O_EXCL: a link planted at the temporary name fails the open, never redirects it.
        let _ = fs::remove_file(&temp);
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&temp)?;
        // No fsync: the rename makes the entry whole or absent, and after a crash the
        // entry would be stale anyway. Launch time is not spent on the disk.
        file.write_all(&text)?;
        file.write_all(b"\n")?;
        // rename replaces whatever sits at `path`, a link included, without following it.
        fs::rename(&temp, &path)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(unusable(
            dir,
            format!("could not write {}: {e}", path.display()),
        ));
    }
    Ok(Registration { path })
}

/// What became of a registered process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Process {
    Running,
    /// No such pid, or it has exited and awaits its parent (a zombie).
    Gone,
    /// The pid runs another process now: its start time differs.
    Reused,
}

impl Process {
    pub fn is_running(&self) -> bool {
        *self == Process::Running
    }

    /// Why an entry in this state was removed.
    pub fn why_pruned(&self) -> &'static str {
        match self {
            Process::Running => "it is running",
            Process::Gone => "its process has exited",
            Process::Reused => "its pid now runs another process",
        }
    }
}

/// The state and start time of `pid`, from `/proc/<pid>/stat`.
fn stat(pid: u32) -> Option<(char, u64)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces or ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: field 3 (state) is fields[0], field 22 (starttime) fields[19].
    let state = fields.first()?.chars().next()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((state, start))
}

/// The start time of `pid` in clock ticks since boot.
pub fn start_time(pid: u32) -> Option<u64> {
    stat(pid).map(|(_, start)| start)
}

/// Whether `pid` is still the process that started at `start_time`.
pub fn process_state(pid: u32, start_time: u64) -> Process {
    match stat(pid) {
        None => Process::Gone,
        Some((_, start)) if start != start_time => Process::Reused,
        Some(('Z' | 'X' | 'x', _)) => Process::Gone,
        Some(_) => Process::Running,
    }
}

/// Removes the file of `entry`.
pub fn prune(entry: &Entry) {
    let _ = fs::remove_file(path_of(&dir(), &entry.session_id));
}

/// The registry as listed: what runs, and what was removed while listing it.
#[derive(Default)]
pub struct Listing {
    /// Newest first.
    pub live: Vec<Entry>,
    /// Entries whose process has exited or whose pid runs another process now.
    pub pruned: Vec<(Entry, Process)>,
}

/// Every registered session whose process still runs, newest first. Entries whose process
/// is gone or whose pid was reused are removed; a file that does not read as an entry is
/// removed with a warning on stderr.
///
/// # Errors
///
/// `E-REG-001` when the directory exists but cannot be read.
pub fn list() -> Result<Listing, Error> {
    list_in(&dir(), &mut |warning| eprintln!("{warning}"))
}

fn list_in(dir: &Path, warn: &mut dyn FnMut(String)) -> Result<Listing, Error> {
    // Listing removes files: never in a folder a link leads to.
    match fs::symlink_metadata(dir) {
        Ok(meta) if !meta.file_type().is_dir() => {
            return Err(unusable(
                dir,
                "it is not a directory (a link is not followed)",
            ));
        }
        _ => {}
    }
    let items = match fs::read_dir(dir) {
        Ok(items) => items,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Listing::default()),
        Err(e) => return Err(unusable(dir, e)),
    };
    let mut listing = Listing::default();
    for item in items.filter_map(Result::ok) {
        let name = item.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !name.ends_with(".json") {
            continue;
        }
        let path = item.path();
        match read_entry(&path) {
            Ok(entry) => match entry.state() {
                Process::Running => listing.live.push(entry),
                gone => {
                    let _ = fs::remove_file(&path);
                    listing.pruned.push((entry, gone));
                }
            },
            Err(why) => {
                warn(format!(
                    "[capsule-runtime] warning[W-REG-001]: {} is not a running-session entry ({why}); removed it",
                    path.display()
                ));
                let _ = fs::remove_file(&path);
            }
        }
    }
    listing
        .live
        .sort_by(|a, b| (b.started_at, &b.session_id).cmp(&(a.started_at, &a.session_id)));
    Ok(listing)
}

/// One entry: a regular file (a link is not followed) of at most 64 KiB whose name is its
/// session id.
fn read_entry(path: &Path) -> Result<Entry, String> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let mut bytes = Vec::new();
    file.take(MAX_ENTRY_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_ENTRY_BYTES {
        return Err(format!("larger than {MAX_ENTRY_BYTES} bytes"));
    }
    let entry: Entry = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    if stem != entry.session_id {
        return Err(format!("it names session {}", entry.session_id));
    }
    Ok(entry)
}

/// What sending a signal came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Signaled {
    Sent,
    /// The process had exited (or its pid runs another process): nothing was sent.
    AlreadyGone,
    /// The kernel refused, with why.
    Refused(String),
}

/// Sends `signal` to the process `entry` names, and only to it: the pid is pinned with
/// a pidfd first, then its start time checked, so a pid reused between the check and
/// the signal cannot receive it.
pub fn signal(entry: &Entry, signal: libc::c_int) -> Signaled {
    let pid = entry.pid as libc::pid_t;
    if pid <= 0 {
        return Signaled::AlreadyGone;
    }
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as libc::c_int;
    if fd < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ESRCH) => Signaled::AlreadyGone,
            // A kernel without pidfds (before 5.3): check, then kill.
            Some(libc::ENOSYS) => {
                if !entry.state().is_running() {
                    return Signaled::AlreadyGone;
                }
                // SAFETY: kill sends a signal to a pid; no memory is involved.
                match unsafe { libc::kill(pid, signal) } {
                    0 => Signaled::Sent,
                    _ => refused(io::Error::last_os_error()),
                }
            }
            _ => Signaled::Refused(e.to_string()),
        };
    }
    // The descriptor now holds whichever process had the pid; it is ours to signal
    // only if that process is the entry's.
    let sent = if entry.state().is_running() {
        // SAFETY: fd is the pidfd opened above; the info pointer may be null.
        match unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd,
                signal,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        } {
            0 => Signaled::Sent,
            _ => refused(io::Error::last_os_error()),
        }
    } else {
        Signaled::AlreadyGone
    };
    // SAFETY: fd was opened above and is closed once.
    unsafe { libc::close(fd) };
    sent
}

fn refused(e: io::Error) -> Signaled {
    match e.raw_os_error() {
        Some(libc::ESRCH) => Signaled::AlreadyGone,
        _ => Signaled::Refused(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh folder under the temp dir, removed when dropped.
    struct Scratch(PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn scratch(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("mur-running-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn entry(id: &str, pid: u32, start_time: u64, started_at: u64) -> Entry {
        Entry {
            session_id: id.into(),
            pid,
            start_time,
            started_at,
            address: "http://127.0.0.1:1".into(),
            url: "localhost:1".into(),
            workdir: "/w".into(),
            records_dir: "/r".into(),
            capsule_name: "c".into(),
            capsule_version: "1.0.0".into(),
            door_token: None,
            formation: None,
        }
    }

    fn me(id: &str, started_at: u64) -> Entry {
        let pid = std::process::id();
        entry(id, pid, start_time(pid).unwrap(), started_at)
    }

    #[test]
    fn this_process_is_running_and_a_changed_start_time_is_reuse() {
        let pid = std::process::id();
        let start = start_time(pid).unwrap();
        assert_eq!(process_state(pid, start), Process::Running);
        assert_eq!(process_state(pid, start + 1), Process::Reused);
        assert_eq!(process_state(u32::MAX / 2, start), Process::Gone);
    }

    #[test]
    fn entries_are_private_listed_newest_first_and_removed_on_drop() {
        let scratch = scratch("list");
        let root = &scratch.0;
        let dir = root.join("home").join("running");
        let older = register_in(&dir, &me("ses_aaaa", 1)).unwrap();
        let newer = register_in(&dir, &me("ses_bbbb", 2)).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(older.path()), 0o600);
        let ids: Vec<String> = list_in(&dir, &mut |w| panic!("{w}"))
            .unwrap()
            .live
            .into_iter()
            .map(|e| e.session_id)
            .collect();
        assert_eq!(ids, ["ses_bbbb", "ses_aaaa"]);
        let path = newer.path().to_path_buf();
        drop(newer);
        assert!(!path.exists());
        drop(older);
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
    }

    #[test]
    fn a_door_token_is_kept_in_the_private_entry_and_in_no_debug_output() {
        let scratch = scratch("token");
        let dir = scratch.0.join("running");
        let token = DoorToken::mint();
        let with_token = Entry {
            door_token: Some(token.clone()),
            ..me("ses_tokn", 1)
        };
        let registration = register_in(&dir, &with_token).unwrap();
        let path = registration.path();
        assert_eq!(
            fs::metadata(path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let text = fs::read_to_string(path).unwrap();
        assert!(text.contains(&format!("\"door_token\": \"{}\"", token.expose())));
        assert_eq!(read_entry(path).unwrap(), with_token);
        assert!(!format!("{with_token:?}").contains(token.expose()));
        // A public door's entry says nothing of a token.
        let public = register_in(&dir, &me("ses_publ", 2)).unwrap();
        let text = fs::read_to_string(public.path()).unwrap();
        assert!(!text.contains("door_token"), "{text}");
    }

    #[test]
    fn stale_and_unreadable_entries_are_pruned_with_a_warning_for_the_unreadable() {
        let scratch = scratch("prune");
        let dir = &scratch.0;
        let pid = std::process::id();
        let reused = entry("ses_reused", pid, start_time(pid).unwrap() + 7, 1);
        fs::write(
            dir.join("ses_reused.json"),
            serde_json::to_vec(&reused).unwrap(),
        )
        .unwrap();
        fs::write(dir.join("ses_torn.json"), b"{\"session_id\": \"ses_to").unwrap();
        let _live = register_in(dir, &me("ses_live", 3)).unwrap();
        let mut warnings = Vec::new();
        let listing = list_in(dir, &mut |w| warnings.push(w)).unwrap();
        assert_eq!(listing.live.len(), 1);
        assert_eq!(listing.live[0].session_id, "ses_live");
        assert_eq!(listing.pruned.len(), 1);
        assert_eq!(listing.pruned[0].0.session_id, "ses_reused");
        assert_eq!(listing.pruned[0].1, Process::Reused);
        assert!(!dir.join("ses_reused.json").exists());
        assert!(!dir.join("ses_torn.json").exists());
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("W-REG-001") && warnings[0].contains("ses_torn.json"));
    }

    #[test]
    fn an_entry_written_before_formations_reads_as_a_capsule_run_alone() {
        let scratch = scratch("membership");
        let dir = &scratch.0;
        let mut old = serde_json::to_value(me("ses_old", 1)).unwrap();
        old.as_object_mut().unwrap().remove("formation");
        fs::write(dir.join("ses_old.json"), old.to_string()).unwrap();
        assert_eq!(
            read_entry(&dir.join("ses_old.json")).unwrap().formation,
            None
        );
        let member = Entry {
            formation: Some(Membership {
                id: "frm_0123".into(),
                member: "worker".into(),
                entry: false,
                roster: "/f/roster.yaml".into(),
            }),
            ..me("ses_member", 2)
        };
        let registration = register_in(dir, &member).unwrap();
        assert_eq!(read_entry(registration.path()).unwrap(), member);
    }

    #[test]
    fn a_link_at_the_entry_path_is_replaced_not_followed() {
        let scratch = scratch("link");
        let root = &scratch.0;
        let dir = root.join("running");
        fs::create_dir(&dir).unwrap();
        let victim = root.join("victim");
        fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("ses_link.json")).unwrap();
        std::os::unix::fs::symlink(
            &victim,
            dir.join(format!(".ses_link.{}.tmp", std::process::id())),
        )
        .unwrap();
        let registration = register_in(&dir, &me("ses_link", 1)).unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"keep");
        assert!(fs::symlink_metadata(registration.path()).unwrap().is_file());
    }

    #[test]
    fn a_link_as_the_registry_directory_is_refused() {
        let scratch = scratch("dirlink");
        let root = &scratch.0;
        fs::create_dir(root.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(root.join("elsewhere"), root.join("running")).unwrap();
        let e = register_in(&root.join("running"), &me("ses_x", 1))
            .err()
            .unwrap();
        assert_eq!(e.code, "E-REG-001");
        std::fs::write(root.join("elsewhere").join("notes.json"), b"not an entry").unwrap();
        let e = list_in(&root.join("running"), &mut |w| panic!("{w}"))
            .err()
            .unwrap();
        assert_eq!(e.code, "E-REG-001");
        fs::remove_file(root.join("elsewhere").join("notes.json")).unwrap();
        assert_eq!(fs::read_dir(root.join("elsewhere")).unwrap().count(), 0);
    }

    #[test]
    fn a_refusal_is_reported_and_a_vanished_process_is_gone() {
        let eperm = refused(io::Error::from_raw_os_error(libc::EPERM));
        assert!(
            matches!(&eperm, Signaled::Refused(why) if why.contains("not permitted")),
            "{eperm:?}"
        );
        assert_eq!(
            refused(io::Error::from_raw_os_error(libc::ESRCH)),
            Signaled::AlreadyGone
        );
        let gone = entry("ses_g", u32::MAX / 2, 1, 1);
        assert_eq!(signal(&gone, libc::SIGTERM), Signaled::AlreadyGone);
    }

    #[test]
    fn a_reused_pid_is_never_signalled() {
        let pid = std::process::id();
        // This very process, under another start time: signal 0 would succeed if sent.
        let reused = entry("ses_r", pid, start_time(pid).unwrap() + 1, 1);
        assert_eq!(signal(&reused, 0), Signaled::AlreadyGone);
        assert_eq!(signal(&me("ses_m", 1), 0), Signaled::Sent);
    }
}
