//! What one walk of `/etc` hands the next, kept in a file across runs: each link that
//! added no rule (it leads into an allowed place, or nowhere), with the folders its
//! answer was read from and their stamps (device, inode, mode, owner, times).
//!
//! Only that is kept, because only that can be trusted from a file anyone with the
//! user's rights may have rewritten: a kept answer can only leave a rule out. Listings
//! and modes are always read afresh (a `chmod` inside `/etc` touches no folder's times),
//! and a link that added a rule is always resolved afresh, so no kept file, however
//! made, gives a command more than a fresh walk would.

use std::ffi::CStr;
use std::fmt::Write as _;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use super::resolve::{MAX_CHAIN, Resolver};
use super::{MAX_DEPTH, NEVER_LINKED, Stamp};
use crate::confine::filesystem::{CONFIG_DIR, SYSTEM_DIRS};
use crate::confine::kept;

/// The kept file, in the confined shell's cache folder.
pub const NAME: &CStr = c"etc-walk";
/// A desktop's `/etc` keeps ~100 KiB; anything much larger is not ours.
pub const MAX_BYTES: u64 = 8 << 20;
/// The format, and what a kept answer means: a change to either is a new number, so an
/// older mur's file is walked past.
const HEAD: &str = "mur-etc-walk 1";

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Memo {
    pub folders: Vec<(PathBuf, Stamp)>,
    /// Each link that added no rule, with the indices of the folders it depends on.
    pub links: Vec<(PathBuf, Vec<u32>)>,
}

/// What a kept memo must have been made under to be used: this boot (device and inode
/// numbers mean nothing across boots), this user (what a link leads to depends on what
/// they may search), this mount namespace, this root and this walk.
pub fn key(root: &Path) -> Option<String> {
    let boot = kept::boot_id()?;
    // SAFETY: geteuid cannot fail and takes no arguments.
    let uid = unsafe { libc::geteuid() };
    let allowed: Vec<&str> = SYSTEM_DIRS
        .iter()
        .chain(&[CONFIG_DIR])
        .chain(NEVER_LINKED)
        .copied()
        .collect();
    Some(format!(
        "boot={boot} uid={uid} mnt={} root={} depth={MAX_DEPTH} chain={MAX_CHAIN} allowed={}",
        kept::namespace("mnt"),
        root.display(),
        allowed.join(":")
    ))
}

impl Memo {
    /// The memo of a walk: its links but those read from a folder changed at or after
    /// `since` (a change in the same tick as the walk may leave the times as they were)
    /// or from a kernel view (`/proc/<pid>` differs in every process).
    pub fn new(folders: &[(PathBuf, Stamp)], links: Vec<(PathBuf, Vec<u32>)>, since: i64) -> Memo {
        let unsteady: Vec<bool> = folders
            .iter()
            .map(|(path, stamp)| {
                stamp.recent(since) || NEVER_LINKED.iter().any(|root| path.starts_with(root))
            })
            .collect();
        let mut renumbered = vec![None; folders.len()];
        let mut memo = Memo::default();
        for (link, deps) in links {
            let steady = deps
                .iter()
                .all(|&d| unsteady.get(d as usize).is_some_and(|u| !u));
            if !steady {
                continue;
            }
            let deps = deps
                .iter()
                .map(|&d| {
                    *renumbered[d as usize].get_or_insert_with(|| {
                        memo.folders.push(folders[d as usize].clone());
                        u32::try_from(memo.folders.len() - 1).unwrap_or(u32::MAX)
                    })
                })
                .collect();
            memo.links.push((link, deps));
        }
        memo
    }

    /// What this memo still vouches for: the links whose every folder is as it was.
    /// The folders are looked at now, each once.
    pub fn vouched(&self, resolver: &mut Resolver<'_>) -> Vouched<'_> {
        let folders = self
            .folders
            .iter()
            .map(|(path, stamp)| {
                (resolver.stamp(path) == Some(*stamp)).then(|| resolver.adopt(path, *stamp))
            })
            .collect();
        Vouched {
            links: &self.links,
            folders,
            next: 0,
        }
    }

    pub fn to_bytes(&self, key: &str) -> Vec<u8> {
        let mut out = format!("{HEAD}\nkey {}\n", kept::escape(key.as_bytes()));
        for (path, s) in &self.folders {
            let _ = writeln!(
                out,
                "folder {} {} {} {} {} {} {} {} {} {}",
                s.dev,
                s.ino,
                s.mode,
                s.uid,
                s.gid,
                s.mtime,
                s.mtime_ns,
                s.ctime,
                s.ctime_ns,
                kept::escape(path.as_os_str().as_encoded_bytes())
            );
        }
        for (path, deps) in &self.links {
            let deps: Vec<String> = deps.iter().map(u32::to_string).collect();
            let deps = if deps.is_empty() {
                "-".to_string()
            } else {
                deps.join(",")
            };
            let _ = writeln!(
                out,
                "link {} {deps}",
                kept::escape(path.as_os_str().as_encoded_bytes())
            );
        }
        let _ = writeln!(out, "end {} {}", self.folders.len(), self.links.len());
        out.into_bytes()
    }

    /// A memo written by [`Memo::to_bytes`] under `key`; `None` for anything else
    /// (another key, a truncated or altered file, a dependency that names no folder).
    pub fn parse(bytes: &[u8], key: &str) -> Option<Memo> {
        // The last line's newline too: a file cut anywhere is refused.
        let text = std::str::from_utf8(bytes).ok()?.strip_suffix('\n')?;
        let mut lines = text.split('\n');
        if lines.next()? != HEAD || lines.next()? != format!("key {}", kept::escape(key.as_bytes()))
        {
            return None;
        }
        let mut memo = Memo::default();
        for line in lines.by_ref() {
            let mut fields = line.split(' ');
            match fields.next()? {
                "folder" => {
                    let mut n = || fields.next()?.parse::<i64>().ok();
                    let stamp = Stamp {
                        dev: u64::try_from(n()?).ok()?,
                        ino: u64::try_from(n()?).ok()?,
                        mode: u32::try_from(n()?).ok()?,
                        uid: u32::try_from(n()?).ok()?,
                        gid: u32::try_from(n()?).ok()?,
                        mtime: n()?,
                        mtime_ns: n()?,
                        ctime: n()?,
                        ctime_ns: n()?,
                    };
                    let path = absolute(fields.next()?)?;
                    fields.next().is_none().then_some(())?;
                    memo.folders.push((path, stamp));
                }
                "link" => {
                    let path = absolute(fields.next()?)?;
                    let deps = match fields.next()? {
                        "-" => Vec::new(),
                        list => list
                            .split(',')
                            .map(|d| d.parse::<u32>().ok())
                            .collect::<Option<Vec<u32>>>()?,
                    };
                    let known = deps.iter().all(|&d| (d as usize) < memo.folders.len());
                    (known && fields.next().is_none()).then_some(())?;
                    memo.links.push((path, deps));
                }
                "end" => {
                    let counts = format!("{} {}", memo.folders.len(), memo.links.len());
                    let rest: Vec<&str> = fields.collect();
                    return (rest.join(" ") == counts && lines.next().is_none()).then_some(memo);
                }
                _ => return None,
            }
        }
        // No `end`: cut short.
        None
    }
}

/// A kept memo's links, asked one by one in the walk's order.
pub struct Vouched<'m> {
    links: &'m [(PathBuf, Vec<u32>)],
    /// Each kept folder's index in the resolver, while it is as it was.
    folders: Vec<Option<u32>>,
    next: usize,
}

impl Vouched<'_> {
    /// The folders (the resolver's indices) of `link`'s kept answer, when it still holds.
    /// Links come in the walk's order, which is the order they were kept in (paths in
    /// order, name by name): one pass over the memo. A memo in any other order only
    /// vouches for less.
    pub fn deps(&mut self, link: &Path) -> Option<Vec<u32>> {
        while self
            .links
            .get(self.next)
            .is_some_and(|(kept, _)| kept.as_path() < link)
        {
            self.next += 1;
        }
        let (kept, deps) = self.links.get(self.next)?;
        if kept != link {
            return None;
        }
        self.next += 1;
        deps.iter()
            .map(|&d| self.folders.get(d as usize).copied().flatten())
            .collect()
    }
}

fn absolute(token: &str) -> Option<PathBuf> {
    let path = PathBuf::from(std::ffi::OsString::from_vec(kept::unescape(token)?));
    path.is_absolute().then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(n: i64) -> Stamp {
        Stamp {
            dev: 1,
            ino: 2,
            mode: 0o40755,
            uid: 0,
            gid: 0,
            mtime: n,
            mtime_ns: 5,
            ctime: n,
            ctime_ns: 6,
        }
    }

    fn sample() -> Memo {
        Memo {
            folders: vec![
                (PathBuf::from("/etc/ssl/certs"), stamp(10)),
                (PathBuf::from("/usr/share/a b\nc"), stamp(20)),
            ],
            links: vec![
                (PathBuf::from("/etc/ssl/certs/x.pem"), vec![0, 1]),
                (PathBuf::from("/etc/dangling"), vec![]),
            ],
        }
    }

    #[test]
    fn a_memo_reads_back_as_written_under_its_key_only() {
        let bytes = sample().to_bytes("k");
        assert_eq!(Memo::parse(&bytes, "k"), Some(sample()));
        assert_eq!(Memo::parse(&bytes, "another boot"), None);
    }

    #[test]
    fn a_truncated_altered_or_foreign_memo_reads_as_none() {
        let bytes = sample().to_bytes("k");
        let text = String::from_utf8(bytes.clone()).unwrap();
        for cut in 0..bytes.len() {
            assert_eq!(Memo::parse(&bytes[..cut], "k"), None, "cut at {cut}");
        }
        let altered = [
            text.replace("end 2 2", "end 2 3"),
            text.replace("0,1", "0,7"),
            text.replace("0,1", "0,-1"),
            text.replace("link /etc/dangling", "link etc/dangling"),
            text.replace("folder 1 2", "folder 1 x"),
            format!("{text}link /etc/late -\n"),
            text.replacen("mur-etc-walk 1", "mur-etc-walk 2", 1),
            text.replace('\n', "\r\n"),
        ];
        for bad in altered {
            assert_eq!(Memo::parse(bad.as_bytes(), "k"), None, "{bad}");
        }
        assert_eq!(Memo::parse(&[0xff, 0xfe, 0], "k"), None);
        assert_eq!(Memo::parse(b"", "k"), None);
    }

    #[test]
    fn links_read_from_a_recently_changed_folder_or_a_kernel_view_are_not_kept() {
        let folders = vec![
            (PathBuf::from("/etc"), stamp(100)),
            (PathBuf::from("/usr"), stamp(500)),
            (PathBuf::from("/proc/42"), stamp(100)),
        ];
        let links = vec![
            (PathBuf::from("/etc/steady"), vec![0]),
            (PathBuf::from("/etc/recent"), vec![0, 1]),
            (PathBuf::from("/etc/mtab"), vec![0, 2]),
        ];
        let memo = Memo::new(&folders, links, 400);
        assert_eq!(
            memo,
            Memo {
                folders: vec![(PathBuf::from("/etc"), stamp(100))],
                links: vec![(PathBuf::from("/etc/steady"), vec![0])],
            }
        );
    }
}
