//! Where links lead, as the kernel resolves them, and which folders each answer was read
//! from, so that an answer kept across runs is used again only while those folders are
//! as they were.
//!
//! A path is resolved one name at a time, as the kernel does: each name is looked up
//! once for all the links that pass through it (`ssl/certs` holds hundreds of links to
//! links), each link is resolved once, and every folder a name was looked up in is a
//! dependency of the answer. A link's text never changes for its inode, and which inode
//! a name leads to changes only with the folder holding the name (its times change, or
//! its inode when it is replaced), so those folders are all an answer depends on.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use super::{Entry, Stamp};

/// As many links in a row as the kernel follows before it gives up (`ELOOP`).
pub const MAX_CHAIN: usize = 40;

/// What a path names, as `lstat` says.
#[derive(Clone, Copy)]
enum Seen {
    Missing,
    Link,
    Node(Stamp),
}

/// Where a link leads (`None` where `canonicalize` fails), and the folders the answer was
/// read from, as indices into the resolver's folders.
#[derive(Clone, Debug, Default)]
pub struct Resolved {
    pub target: Option<PathBuf>,
    pub deps: Vec<u32>,
}

pub struct Resolver<'t> {
    /// The tree the walk read: no second `lstat` for what is in it.
    tree: Option<&'t Entry>,
    seen: HashMap<PathBuf, Seen>,
    texts: HashMap<PathBuf, Option<Vec<u8>>>,
    links: HashMap<PathBuf, Resolved>,
    /// Every folder a name was looked up in, with its stamp as read.
    folders: Vec<(PathBuf, Stamp)>,
    index: HashMap<PathBuf, u32>,
}

impl<'t> Resolver<'t> {
    pub fn new(tree: Option<&'t Entry>) -> Resolver<'t> {
        Resolver {
            tree,
            seen: HashMap::new(),
            texts: HashMap::new(),
            links: HashMap::new(),
            folders: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// `path`'s stamp as it is now (`None` for a link or nothing).
    pub fn stamp(&mut self, path: &Path) -> Option<Stamp> {
        match self.seen(path) {
            Seen::Node(stamp) => Some(stamp),
            Seen::Missing | Seen::Link => None,
        }
    }

    /// Takes `folder` as read with `stamp` (an earlier walk's, found unchanged).
    pub fn adopt(&mut self, folder: &Path, stamp: Stamp) -> u32 {
        if let Some(&i) = self.index.get(folder) {
            return i;
        }
        let i = u32::try_from(self.folders.len()).unwrap_or(u32::MAX);
        self.folders.push((folder.to_path_buf(), stamp));
        self.index.insert(folder.to_path_buf(), i);
        i
    }

    pub fn into_folders(self) -> Vec<(PathBuf, Stamp)> {
        self.folders
    }

    /// Where `link` leads.
    pub fn resolve(&mut self, link: &Path) -> Resolved {
        self.resolve_at(link, 0)
    }

    fn resolve_at(&mut self, link: &Path, depth: usize) -> Resolved {
        if let Some(known) = self.links.get(link) {
            return known.clone();
        }
        if depth >= MAX_CHAIN {
            return Resolved::default();
        }
        // Met again while being resolved, it is a loop, which the kernel ends with
        // ELOOP: the placeholder answers nowhere.
        self.links.insert(link.to_path_buf(), Resolved::default());
        let resolved = self.follow(link, depth);
        self.links.insert(link.to_path_buf(), resolved.clone());
        resolved
    }

    fn follow(&mut self, link: &Path, depth: usize) -> Resolved {
        let mut deps = Vec::new();
        let Some(parent) = link.parent() else {
            return Resolved::default();
        };
        // The link's text is its inode's, which its folder names.
        let Some(folder) = self.consult(parent) else {
            return Resolved::default();
        };
        deps.push(folder);
        let target = match self.text(link) {
            Some(text) => {
                let from = if text.starts_with(b"/") {
                    PathBuf::from("/")
                } else {
                    parent.to_path_buf()
                };
                self.walk(from, &text, depth, &mut deps)
            }
            None => None,
        };
        deps.sort_unstable();
        deps.dedup();
        Resolved { target, deps }
    }

    /// Resolves `path` (a link's text) from the folder `at`, following every link on
    /// the way as the kernel does, `..` included.
    fn walk(
        &mut self,
        mut at: PathBuf,
        path: &[u8],
        depth: usize,
        deps: &mut Vec<u32>,
    ) -> Option<PathBuf> {
        let mut at_dir = true;
        for name in path.split(|b| *b == b'/').filter(|n| !n.is_empty()) {
            if !at_dir {
                return None; // ENOTDIR
            }
            match name {
                b"." => continue,
                b".." => {
                    at.pop();
                    continue;
                }
                _ => {}
            }
            deps.push(self.consult(&at)?);
            let next = at.join(OsStr::from_bytes(name));
            match self.seen(&next) {
                Seen::Missing => return None,
                Seen::Node(stamp) => {
                    at_dir = stamp.is_dir();
                    at = next;
                }
                Seen::Link => {
                    let sub = self.resolve_at(&next, depth + 1);
                    deps.extend_from_slice(&sub.deps);
                    at = sub.target?;
                    at_dir = self.stamp(&at).is_some_and(|s| s.is_dir());
                }
            }
        }
        // A trailing slash asks for a folder.
        (at_dir || !path.ends_with(b"/")).then_some(at)
    }

    /// The index of `folder`, which a name is being looked up in.
    fn consult(&mut self, folder: &Path) -> Option<u32> {
        if let Some(&i) = self.index.get(folder) {
            return Some(i);
        }
        let stamp = self.stamp(folder)?;
        Some(self.adopt(folder, stamp))
    }

    fn seen(&mut self, path: &Path) -> Seen {
        if let Some(entry) = self.tree.and_then(|tree| tree.find(path)) {
            return entry.stamp.map_or(Seen::Link, Seen::Node);
        }
        if let Some(seen) = self.seen.get(path) {
            return *seen;
        }
        let seen = match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_symlink() => Seen::Link,
            Ok(meta) => Seen::Node(Stamp::of(&meta)),
            Err(_) => Seen::Missing,
        };
        self.seen.insert(path.to_path_buf(), seen);
        seen
    }

    fn text(&mut self, link: &Path) -> Option<Vec<u8>> {
        if let Some(text) = self.texts.get(link) {
            return text.clone();
        }
        let text = std::fs::read_link(link)
            .ok()
            .map(|t| t.into_os_string().into_vec())
            .filter(|t| !t.is_empty());
        self.texts.insert(link.to_path_buf(), text.clone());
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn links_resolve_as_the_kernel_resolves_them_and_name_the_folders_read() {
        let dir = std::env::temp_dir().join(format!("mur-etc-resolve-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("real/sub")).unwrap();
        std::fs::write(dir.join("real/f"), "f").unwrap();
        symlink(dir.join("real"), dir.join("via")).unwrap();
        symlink("via/sub/../f", dir.join("dots")).unwrap();
        symlink("real/f/", dir.join("slash")).unwrap();
        symlink("real/f/..", dir.join("through-a-file")).unwrap();
        symlink("real/", dir.join("folder")).unwrap();
        symlink("nowhere", dir.join("dangling")).unwrap();
        symlink("self", dir.join("self")).unwrap();
        let dir = dir.canonicalize().unwrap();
        let mut resolver = Resolver::new(None);
        for link in [
            "dots",
            "slash",
            "through-a-file",
            "folder",
            "dangling",
            "self",
            "via",
        ] {
            let path = dir.join(link);
            assert_eq!(
                resolver.resolve(&path).target,
                path.canonicalize().ok(),
                "{link}"
            );
        }
        // `dots` was read from the scratch folder (`via`, and the link itself) and from
        // `real` (`sub`, then `f` once `..` led back): `..` reads no listing.
        let resolved = resolver.resolve(&dir.join("dots"));
        let folders = resolver.into_folders();
        let read: Vec<&Path> = resolved
            .deps
            .iter()
            .map(|&i| folders[i as usize].0.as_path())
            .collect();
        for folder in [dir.clone(), dir.join("real")] {
            assert!(
                read.contains(&folder.as_path()),
                "{read:?} lacks {folder:?}"
            );
        }
        assert!(!read.contains(&dir.join("real/sub").as_path()), "{read:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
