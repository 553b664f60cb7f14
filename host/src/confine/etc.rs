//! The parts of `/etc` a confined command may read: everything every user of the
//! machine may read, and not the secrets (`shadow`, `sudoers`, host keys).
//!
//! A wholly readable directory is one rule; below one that hides something, its
//! readable entries are rules one by one. A symbolic link needs no rule of its own,
//! since Landlock checks the file it leads to: one into the system directories is
//! readable through them, and one to a secret is not. Only a link to a readable file
//! outside every allowed place (`resolv.conf -> /run/...`) adds that file.
//!
//! The walk reads each directory once into memory and works from that copy; a
//! desktop's `/etc` holds a thousand entries and more, hundreds of them links, so what
//! it costs is part of every launch.

use std::collections::{BTreeSet, HashMap};
use std::fs::Metadata;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::filesystem::{CONFIG_DIR, SYSTEM_DIRS};

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

/// [`readable`] of `/etc`, walked at most once per [`FRESH`]: a server that starts a
/// hundred sessions a second walks it once, and a change to `/etc` reaches the
/// sessions started after that long.
pub fn config_rules() -> Vec<PathBuf> {
    static WALKED: Mutex<Option<(Instant, Vec<PathBuf>)>> = Mutex::new(None);
    let mut walked = WALKED.lock().unwrap_or_else(PoisonError::into_inner);
    match &*walked {
        Some((at, rules)) if at.elapsed() < FRESH => rules.clone(),
        _ => {
            let rules = readable(Path::new(CONFIG_DIR));
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

/// The rules for what everyone may read under `dir`, then the readable files outside
/// every allowed place that links there lead to.
pub fn readable(dir: &Path) -> Vec<PathBuf> {
    let Some(root) = Entry::scan_root(dir) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    root.collect_readable(0, &mut found);
    let mut outside = BTreeSet::new();
    let mut resolver = Resolver::default();
    root.outside_link_targets(0, &mut resolver, &mut outside);
    found.extend(outside);
    found
}

/// One entry of the tree as read, a link as the link; a directory's entries are read
/// when the walk may need them (everyone may enter it, and it is not too deep).
struct Entry {
    path: PathBuf,
    meta: Metadata,
    entries: Vec<Entry>,
}

impl Entry {
    /// The root is read whatever its mode: it is the walk's own starting point.
    fn scan_root(dir: &Path) -> Option<Entry> {
        let meta = std::fs::symlink_metadata(dir).ok()?;
        let entries = if meta.is_dir() {
            read_sorted(dir, 0)
        } else {
            Vec::new()
        };
        Some(Entry {
            path: dir.to_path_buf(),
            meta,
            entries,
        })
    }

    /// A directory whose whole tree everyone may read (links aside, as above).
    fn wholly_readable(&self, depth: usize) -> bool {
        if !self.meta.is_dir() || !world_enterable(&self.meta) || depth > MAX_DEPTH {
            return false;
        }
        self.entries.iter().all(|entry| {
            if entry.meta.file_type().is_symlink() {
                true
            } else if entry.meta.is_dir() {
                entry.wholly_readable(depth + 1)
            } else {
                world_readable(&entry.meta)
            }
        })
    }

    fn collect_readable(&self, depth: usize, found: &mut Vec<PathBuf>) {
        if self.wholly_readable(depth) {
            found.push(self.path.clone());
            return;
        }
        for entry in &self.entries {
            if found.len() >= MAX_RULES {
                return;
            }
            if entry.meta.is_dir() && world_enterable(&entry.meta) && depth < MAX_DEPTH {
                entry.collect_readable(depth + 1, found);
            } else if entry.meta.is_file() && world_readable(&entry.meta) {
                found.push(entry.path.clone());
            }
        }
    }

    /// Readable files outside the allowed places that links under this directory lead to.
    fn outside_link_targets(
        &self,
        depth: usize,
        resolver: &mut Resolver,
        out: &mut BTreeSet<PathBuf>,
    ) {
        for entry in &self.entries {
            if out.len() >= MAX_RULES {
                return;
            }
            if entry.meta.file_type().is_symlink() {
                if let Some(target) = resolver.resolve(&entry.path).and_then(outside_target) {
                    out.insert(target);
                }
            } else if entry.meta.is_dir() && world_enterable(&entry.meta) && depth < MAX_DEPTH {
                entry.outside_link_targets(depth + 1, resolver, out);
            }
        }
    }
}

/// `dir`'s entries, sorted by path, each with its own metadata (a link as the link),
/// and, for a directory the walk may enter, its entries in turn. `depth` is `dir`'s.
fn read_sorted(dir: &Path, depth: usize) -> Vec<Entry> {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    // `DirEntry::metadata` asks relative to the open directory: no path walk per entry.
    let mut entries: Vec<(PathBuf, Metadata)> = listing
        .filter_map(Result::ok)
        .filter_map(|e| e.metadata().ok().map(|m| (e.path(), m)))
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    entries
        .into_iter()
        .map(|(path, meta)| {
            let entries = if meta.is_dir() && world_enterable(&meta) && depth < MAX_DEPTH {
                read_sorted(&path, depth + 1)
            } else {
                Vec::new()
            };
            Entry {
                path,
                meta,
                entries,
            }
        })
        .collect()
}

/// Where links lead, as `canonicalize` says, with each folder on the way and each link
/// resolved once for all the links that go through them (`ssl/certs` holds hundreds of
/// links to links).
#[derive(Default)]
struct Resolver {
    dirs: HashMap<PathBuf, Option<PathBuf>>,
    links: HashMap<PathBuf, Option<PathBuf>>,
}

/// As many links in a row as the kernel follows before it gives up (`ELOOP`).
const MAX_CHAIN: usize = 40;

impl Resolver {
    fn resolve(&mut self, link: &Path) -> Option<PathBuf> {
        self.resolve_chain(link, 0)
    }

    fn resolve_chain(&mut self, link: &Path, chain: usize) -> Option<PathBuf> {
        if let Some(known) = self.links.get(link) {
            return known.clone();
        }
        let resolved = self.follow(link, chain);
        self.links.insert(link.to_path_buf(), resolved.clone());
        resolved
    }

    fn follow(&mut self, link: &Path, chain: usize) -> Option<PathBuf> {
        if chain >= MAX_CHAIN {
            return None;
        }
        let joined = link.parent()?.join(std::fs::read_link(link).ok()?);
        let (Some(parent), Some(name)) = (joined.parent(), joined.file_name()) else {
            return joined.canonicalize().ok();
        };
        let real_parent = self.real_dir(parent)?;
        let candidate = real_parent.join(name);
        let meta = std::fs::symlink_metadata(&candidate).ok()?;
        if meta.file_type().is_symlink() {
            self.resolve_chain(&candidate, chain + 1)
        } else {
            Some(candidate)
        }
    }

    fn real_dir(&mut self, dir: &Path) -> Option<PathBuf> {
        self.dirs
            .entry(dir.to_path_buf())
            .or_insert_with(|| dir.canonicalize().ok())
            .clone()
    }
}

/// `target`, when it is a readable file outside every allowed place that anyone can
/// reach.
fn outside_target(target: PathBuf) -> Option<PathBuf> {
    let allowed = SYSTEM_DIRS
        .iter()
        .chain(&[CONFIG_DIR])
        .chain(NEVER_LINKED)
        .any(|root| target.starts_with(root));
    if allowed {
        return None;
    }
    let meta = std::fs::metadata(&target).ok()?;
    (meta.is_file() && world_readable(&meta) && reachable_by_all(&target)).then_some(target)
}

/// Every folder on the way lets anyone through.
fn reachable_by_all(path: &Path) -> bool {
    path.ancestors()
        .skip(1)
        .all(|dir| std::fs::metadata(dir).is_ok_and(|m| m.mode() & 0o001 != 0))
}

fn world_readable(meta: &Metadata) -> bool {
    meta.permissions().mode() & 0o004 != 0
}

fn world_enterable(meta: &Metadata) -> bool {
    meta.mode() & 0o005 == 0o005
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mur-etc-rules-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn mode(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_wholly_readable_tree_is_one_rule() {
        let dir = scratch("whole");
        std::fs::create_dir(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/a"), "a").unwrap();
        mode(&dir.join("sub/a"), 0o644);
        mode(&dir, 0o755);
        assert_eq!(readable(&dir), vec![dir.clone()]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_secret_file_is_left_out_and_its_neighbours_kept() {
        let dir = scratch("secret");
        std::fs::write(dir.join("passwd"), "p").unwrap();
        std::fs::write(dir.join("shadow"), "s").unwrap();
        std::fs::create_dir(dir.join("ssh")).unwrap();
        std::fs::write(dir.join("ssh/host_key"), "k").unwrap();
        std::fs::write(dir.join("ssh/host_key.pub"), "k").unwrap();
        std::fs::create_dir(dir.join("private")).unwrap();
        mode(&dir, 0o755);
        mode(&dir.join("passwd"), 0o644);
        mode(&dir.join("shadow"), 0o640);
        mode(&dir.join("ssh"), 0o755);
        mode(&dir.join("ssh/host_key"), 0o600);
        mode(&dir.join("ssh/host_key.pub"), 0o644);
        mode(&dir.join("private"), 0o700);
        assert_eq!(
            readable(&dir),
            vec![dir.join("passwd"), dir.join("ssh/host_key.pub")]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_link_to_a_secret_or_the_host_s_proc_adds_nothing() {
        let dir = scratch("links");
        std::fs::write(dir.join("hidden"), "h").unwrap();
        mode(&dir.join("hidden"), 0o600);
        symlink("/proc/self/mounts", dir.join("mtab")).unwrap();
        symlink(dir.join("nowhere"), dir.join("dangling")).unwrap();
        mode(&dir, 0o755);
        // Neither link leads to a readable file anywhere a rule could add.
        assert_eq!(readable(&dir), Vec::<PathBuf>::new());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn links_keep_a_tree_whole_and_only_outside_targets_are_added() {
        let dir = scratch("whole-links");
        let outside = scratch("outside-target");
        std::fs::write(outside.join("resolv.conf"), "nameserver 127.0.0.1\n").unwrap();
        mode(&outside.join("resolv.conf"), 0o644);
        mode(&outside, 0o755);
        symlink("/usr/bin/env", dir.join("env")).unwrap();
        symlink(outside.join("resolv.conf"), dir.join("resolv.conf")).unwrap();
        mode(&dir, 0o755);
        let target = outside.join("resolv.conf").canonicalize().unwrap();
        assert_eq!(readable(&dir), vec![dir.clone(), target]);
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&outside).unwrap();
    }

    #[test]
    fn links_through_shared_and_linked_folders_resolve_as_the_kernel_resolves_them() {
        let dir = scratch("resolver");
        let outside = scratch("resolver-outside");
        std::fs::create_dir(outside.join("real")).unwrap();
        std::fs::write(outside.join("real/a.pem"), "a").unwrap();
        std::fs::write(outside.join("real/b.pem"), "b").unwrap();
        std::fs::write(outside.join("real/secret"), "s").unwrap();
        mode(&outside.join("real/a.pem"), 0o644);
        mode(&outside.join("real/b.pem"), 0o644);
        mode(&outside.join("real/secret"), 0o600);
        mode(&outside.join("real"), 0o755);
        mode(&outside, 0o755);
        // A folder reached through a link, a relative link, a chain, and a `..`.
        symlink(outside.join("real"), outside.join("via")).unwrap();
        symlink(outside.join("via/a.pem"), dir.join("a")).unwrap();
        symlink("b-link", dir.join("b")).unwrap();
        symlink(outside.join("via/b.pem"), dir.join("b-link")).unwrap();
        symlink(outside.join("via/../real/secret"), dir.join("s")).unwrap();
        symlink("loop-b", dir.join("loop-a")).unwrap();
        symlink("loop-a", dir.join("loop-b")).unwrap();
        mode(&dir, 0o755);
        let real = outside.join("real").canonicalize().unwrap();
        let mut rules = readable(&dir);
        rules.sort();
        assert_eq!(
            rules,
            vec![dir.clone(), real.join("a.pem"), real.join("b.pem")]
        );
        for link in ["a", "b", "b-link", "s", "loop-a"] {
            let mut resolver = Resolver::default();
            assert_eq!(
                resolver.resolve(&dir.join(link)),
                dir.join(link).canonicalize().ok(),
                "{link}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&outside).unwrap();
    }

    #[test]
    fn the_machine_s_etc_gives_the_rules_a_plain_walk_gives() {
        // The walk as it was first written: each question answered from the disk, each
        // link canonicalized on its own.
        fn plain(dir: &Path) -> Vec<PathBuf> {
            let mut found = Vec::new();
            let mut outside = BTreeSet::new();
            let root = Entry::scan_root(dir).unwrap();
            root.collect_readable(0, &mut found);
            fn links(entry: &Entry, depth: usize, out: &mut BTreeSet<PathBuf>) {
                for e in &entry.entries {
                    if e.meta.file_type().is_symlink() {
                        if let Some(t) = e.path.canonicalize().ok().and_then(outside_target) {
                            out.insert(t);
                        }
                    } else if e.meta.is_dir() && world_enterable(&e.meta) && depth < MAX_DEPTH {
                        links(e, depth + 1, out);
                    }
                }
            }
            links(&root, 0, &mut outside);
            found.extend(outside);
            found
        }
        let etc = Path::new(CONFIG_DIR);
        assert_eq!(readable(etc), plain(etc));
    }
}
