//! The parts of `/etc` a confined command may read: everything every user of the
//! machine may read, and not the secrets (`shadow`, `sudoers`, host keys).
//!
//! A wholly readable directory is one rule; below one that hides something, its
//! readable entries are rules one by one. A symbolic link needs no rule of its own,
//! since Landlock checks the file it leads to: one into the system directories is
//! readable through them, and one to a secret is not. Only a link to a readable file
//! outside every allowed place (`resolv.conf -> /run/...`) adds that file.
//!
//! The walk reads each directory once, and looks at each entry but the links, on every
//! launch: a mode changed inside `/etc` shows in no folder's times, so only reading it
//! again sees it. Where the links lead is most of the walk's cost (a desktop's `/etc`
//! holds hundreds of them), and that is kept across runs (`memo`): a link whose answer
//! added no rule is not resolved again while every folder the answer was read from is
//! unchanged.

mod listing;
mod memo;
mod resolve;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs::Metadata;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use super::filesystem::{CONFIG_DIR, SYSTEM_DIRS};
use super::kept;
use listing::Dir;
use memo::Memo;
use resolve::Resolver;

/// Where a link in `/etc` may lead without its target being allowed: kernel views of
/// the host (`/etc/mtab -> /proc/self/mounts`) and devices.
const NEVER_LINKED: &[&str] = &["/proc", "/sys", "/dev"];

/// How deep the walk goes to find a directory wholly readable by everyone; past it, a
/// directory that hides something is left out whole.
const MAX_DEPTH: usize = 4;
/// The walk stops adding rules past this many; a larger `/etc` is left out beyond it.
const MAX_RULES: usize = 4096;

/// How long a walk of `/etc` stands for the sessions that start after it.
const FRESH: Duration = Duration::from_secs(30);
/// A folder changed this recently may change again within the same tick of its clock
/// (a second on some filesystems) and keep its times: what was read from it is not kept.
const UNSETTLED_SECS: i64 = 3;

/// One rule: a path a command may read, a folder (and everything below) or a file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rule {
    pub path: PathBuf,
    pub dir: bool,
}

/// The rules for `/etc`, walked at most once per [`FRESH`]: a server that starts a
/// hundred sessions a second walks it once, and a change to `/etc` reaches the
/// sessions started after that long.
pub fn config_rules() -> Arc<[Rule]> {
    static WALKED: Mutex<Option<(Instant, Arc<[Rule]>)>> = Mutex::new(None);
    let mut walked = WALKED.lock().unwrap_or_else(PoisonError::into_inner);
    match &*walked {
        Some((at, rules)) if at.elapsed() < FRESH => rules.clone(),
        _ => {
            let rules: Arc<[Rule]> = walk_kept(Path::new(CONFIG_DIR), kept::Folder::open()).into();
            *walked = Some((Instant::now(), rules.clone()));
            rules
        }
    }
}

/// Starts [`config_rules`] on a thread of its own, so that the walk overlaps with
/// loading the components instead of adding to the launch: the ruleset, built once the
/// workdir exists, waits for it at most.
pub fn walk_ahead() {
    let _ = std::thread::Builder::new()
        .name("mur-etc-walk".into())
        .spawn(|| drop(config_rules()));
}

/// The rules for `root`, with what the last walk kept in `folder`, which then keeps
/// this walk's for the next. Without a folder (or a boot id to key it by), a plain walk.
fn walk_kept(root: &Path, folder: Option<kept::Folder>) -> Vec<Rule> {
    let folder = folder.zip(memo::key(root));
    let read = folder
        .as_ref()
        .and_then(|(folder, _)| folder.read(memo::NAME, memo::MAX_BYTES));
    let kept = read
        .as_deref()
        .zip(folder.as_ref())
        .and_then(|(bytes, (_, key))| Memo::parse(bytes, key));
    let walked = walk(root, kept.as_ref(), unsettled_since());
    if let Some((folder, key)) = &folder
        && kept.as_ref() != Some(&walked.memo)
    {
        let _ = folder.write(memo::NAME, &walked.memo.to_bytes(key));
    }
    walked.rules
}

/// Times at or after this are too recent to tell a later change by.
fn unsettled_since() -> i64 {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    now - UNSETTLED_SECS
}

/// What one walk found.
struct Walked {
    rules: Vec<Rule>,
    /// What the next walk may take from this one.
    memo: Memo,
    /// How many links this walk resolved itself.
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "what the tests check the memo by")
    )]
    resolved: usize,
}

/// The rules for what everyone may read under `root`, then the readable files outside
/// every allowed place that links there lead to; `kept` spares resolving the links
/// whose answer it still vouches for. Folders changed at or after `since` are not
/// vouched for in the memo handed on.
fn walk(root: &Path, kept: Option<&Memo>, since: i64) -> Walked {
    let Some(tree) = Entry::scan_root(root) else {
        return Walked {
            rules: Vec::new(),
            memo: Memo::default(),
            resolved: 0,
        };
    };
    let mut rules = Vec::new();
    tree.collect_readable(0, &mut rules);
    let mut resolver = Resolver::new(Some(&tree));
    let vouched = kept.map(|memo| memo.vouched(&mut resolver));
    let mut links = Links {
        resolver,
        vouched,
        outside: BTreeSet::new(),
        kept: Vec::new(),
        resolved: 0,
    };
    tree.link_targets(0, &mut links);
    rules.extend(
        links
            .outside
            .into_iter()
            .map(|path| Rule { path, dir: false }),
    );
    let folders = links.resolver.into_folders();
    Walked {
        rules,
        memo: Memo::new(&folders, links.kept, since),
        resolved: links.resolved,
    }
}

/// The readable paths under `dir`, as [`walk`] finds them with nothing kept.
#[cfg(test)]
fn readable(dir: &Path) -> Vec<PathBuf> {
    walk(dir, None, i64::MAX)
        .rules
        .into_iter()
        .map(|rule| rule.path)
        .collect()
}

/// What an inode was when read: enough to tell it changed, whatever changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: i64,
    mtime_ns: i64,
    ctime: i64,
    ctime_ns: i64,
}

impl Stamp {
    fn from_stat(stat: &libc::stat) -> Stamp {
        Stamp {
            dev: stat.st_dev,
            ino: stat.st_ino,
            mode: stat.st_mode,
            uid: stat.st_uid,
            gid: stat.st_gid,
            mtime: stat.st_mtime,
            mtime_ns: stat.st_mtime_nsec,
            ctime: stat.st_ctime,
            ctime_ns: stat.st_ctime_nsec,
        }
    }

    fn of(meta: &Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            mode: meta.mode(),
            uid: meta.uid(),
            gid: meta.gid(),
            mtime: meta.mtime(),
            mtime_ns: meta.mtime_nsec(),
            ctime: meta.ctime(),
            ctime_ns: meta.ctime_nsec(),
        }
    }

    fn kind(&self) -> u32 {
        self.mode & libc::S_IFMT
    }

    fn is_dir(&self) -> bool {
        self.kind() == libc::S_IFDIR
    }

    fn is_file(&self) -> bool {
        self.kind() == libc::S_IFREG
    }

    fn recent(&self, since: i64) -> bool {
        self.mtime >= since || self.ctime >= since
    }

    fn world_readable(&self) -> bool {
        self.mode & 0o004 != 0
    }

    fn world_enterable(&self) -> bool {
        self.mode & 0o005 == 0o005
    }
}

/// One entry of the tree as read; a directory's entries are read when the walk may need
/// them (everyone may enter it, and it is not too deep).
struct Entry {
    path: PathBuf,
    /// `None` for a symbolic link: the walk never needs a link's own inode.
    stamp: Option<Stamp>,
    /// Whether `entries` is the directory's whole listing: one that could not be read
    /// is never taken for wholly readable.
    listed: bool,
    entries: Vec<Entry>,
}

impl Entry {
    /// The root is read whatever its mode: it is the walk's own starting point.
    fn scan_root(dir: &Path) -> Option<Entry> {
        let meta = std::fs::symlink_metadata(dir).ok()?;
        let stamp = (!meta.file_type().is_symlink()).then(|| Stamp::of(&meta));
        let entries = Dir::open(dir)
            .filter(|_| meta.is_dir())
            .and_then(|open| read_sorted(&open, dir, 0, &mut vec![0; listing::BUFFER]));
        Some(Entry {
            path: dir.to_path_buf(),
            stamp,
            listed: entries.is_some(),
            entries: entries.unwrap_or_default(),
        })
    }

    fn is_link(&self) -> bool {
        self.stamp.is_none()
    }

    fn is_dir(&self) -> bool {
        self.stamp.is_some_and(|s| s.is_dir())
    }

    /// A directory the walk reads and goes into at `depth`.
    fn entered(&self, depth: usize) -> bool {
        self.stamp
            .is_some_and(|s| s.is_dir() && s.world_enterable())
            && depth < MAX_DEPTH
    }

    /// A directory whose whole tree everyone may read (links aside, as above).
    fn wholly_readable(&self, depth: usize) -> bool {
        let enterable = self.stamp.is_some_and(|s| s.world_enterable());
        if !self.is_dir() || !enterable || !self.listed || depth > MAX_DEPTH {
            return false;
        }
        self.entries.iter().all(|entry| match entry.stamp {
            None => true,
            Some(stamp) if stamp.is_dir() => entry.wholly_readable(depth + 1),
            Some(stamp) => stamp.world_readable(),
        })
    }

    fn collect_readable(&self, depth: usize, found: &mut Vec<Rule>) {
        if self.wholly_readable(depth) {
            found.push(Rule {
                path: self.path.clone(),
                dir: true,
            });
            return;
        }
        for entry in &self.entries {
            if found.len() >= MAX_RULES {
                return;
            }
            if entry.entered(depth) {
                entry.collect_readable(depth + 1, found);
            } else if entry
                .stamp
                .is_some_and(|s| s.is_file() && s.world_readable())
            {
                found.push(Rule {
                    path: entry.path.clone(),
                    dir: false,
                });
            }
        }
    }

    /// The entry read at `path`, found through the sorted listings on the way.
    fn find(&self, path: &Path) -> Option<&Entry> {
        let mut at = self;
        for name in path.strip_prefix(&self.path).ok()?.components() {
            let Component::Normal(name) = name else {
                return None;
            };
            let i = at
                .entries
                .binary_search_by(|e| e.path.file_name().unwrap_or_default().cmp(name))
                .ok()?;
            at = &at.entries[i];
        }
        Some(at)
    }

    /// Readable files outside the allowed places that links under this directory lead to.
    fn link_targets(&self, depth: usize, links: &mut Links<'_, '_>) {
        for entry in &self.entries {
            if links.outside.len() >= MAX_RULES {
                return;
            }
            if entry.is_link() {
                links.visit(&entry.path);
            } else if entry.entered(depth) {
                entry.link_targets(depth + 1, links);
            }
        }
    }
}

/// The links of one walk: what the last walk vouches for, what this one finds.
struct Links<'t, 'm> {
    resolver: Resolver<'t>,
    /// What the kept memo still vouches for.
    vouched: Option<memo::Vouched<'m>>,
    outside: BTreeSet<PathBuf>,
    /// Links that added nothing, for the next walk.
    kept: Vec<(PathBuf, Vec<u32>)>,
    resolved: usize,
}

impl Links<'_, '_> {
    fn visit(&mut self, link: &Path) {
        if let Some(deps) = self.vouched.as_mut().and_then(|v| v.deps(link)) {
            self.kept.push((link.to_path_buf(), deps));
            return;
        }
        self.resolved += 1;
        let resolved = self.resolver.resolve(link);
        match resolved.target {
            Some(target) if !allowed(&target) => {
                // Never kept: what it adds is decided afresh on every walk.
                if let Some(target) = readable_by_all(target) {
                    self.outside.insert(target);
                }
            }
            _ => self.kept.push((link.to_path_buf(), resolved.deps)),
        }
    }
}

/// The entries of `dir` (open, at `path`), sorted by path, each with its stamp (none
/// for a link) and, for a directory the walk may enter, its entries in turn. `depth` is
/// `dir`'s. `None` when the listing could not be read.
fn read_sorted(dir: &Dir, path: &Path, depth: usize, buffer: &mut [u8]) -> Option<Vec<Entry>> {
    let mut listed = dir.entries(buffer)?;
    // Names in byte order are paths in order, within one directory.
    listed.sort_by(|a, b| a.name.cmp(&b.name));
    let entries = listed
        .into_iter()
        .map(|entry| {
            let stamp = entry.stat.as_ref().map(Stamp::from_stat);
            let path = path.join(OsStr::from_bytes(entry.name.to_bytes()));
            let enter = stamp.is_some_and(|s| s.is_dir() && s.world_enterable());
            let entries = if enter && depth < MAX_DEPTH {
                dir.open_in(&entry.name)
                    .and_then(|sub| read_sorted(&sub, &path, depth + 1, buffer))
            } else {
                None
            };
            Entry {
                path,
                stamp,
                listed: entries.is_some(),
                entries: entries.unwrap_or_default(),
            }
        })
        .collect();
    Some(entries)
}

/// Inside a place commands may read anyway, or one no link may add.
fn allowed(target: &Path) -> bool {
    SYSTEM_DIRS
        .iter()
        .chain(&[CONFIG_DIR])
        .chain(NEVER_LINKED)
        .any(|root| target.starts_with(root))
}

/// `target`, when it is a readable file that anyone can reach.
fn readable_by_all(target: PathBuf) -> Option<PathBuf> {
    let meta = std::fs::metadata(&target).ok()?;
    let stamp = Stamp::of(&meta);
    (stamp.is_file() && stamp.world_readable() && reachable_by_all(&target)).then_some(target)
}

/// Every folder on the way lets anyone through.
fn reachable_by_all(path: &Path) -> bool {
    path.ancestors()
        .skip(1)
        .all(|dir| std::fs::metadata(dir).is_ok_and(|m| m.mode() & 0o001 != 0))
}

#[cfg(test)]
mod tests;
