use super::*;
use std::os::unix::fs::{PermissionsExt, symlink};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mur-etc-rules-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

fn mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn paths(rules: &[Rule]) -> Vec<PathBuf> {
    rules.iter().map(|rule| rule.path.clone()).collect()
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
    let target = outside.join("resolv.conf");
    let rules = walk(&dir, None, i64::MAX).rules;
    assert_eq!(
        rules,
        vec![
            Rule {
                path: dir.clone(),
                dir: true
            },
            Rule {
                path: target,
                dir: false
            }
        ]
    );
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
    let real = outside.join("real");
    let mut rules = readable(&dir);
    rules.sort();
    assert_eq!(
        rules,
        vec![dir.clone(), real.join("a.pem"), real.join("b.pem")]
    );
    for link in ["a", "b", "b-link", "s", "loop-a"] {
        let mut resolver = Resolver::new(None);
        assert_eq!(
            resolver.resolve(&dir.join(link)).target,
            dir.join(link).canonicalize().ok(),
            "{link}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&outside).unwrap();
}

/// Every link under `entry` the walk looks at.
fn links_of(entry: &Entry, depth: usize, out: &mut Vec<PathBuf>) {
    for e in &entry.entries {
        if e.is_link() {
            out.push(e.path.clone());
        } else if e.entered(depth) {
            links_of(e, depth + 1, out);
        }
    }
}

#[test]
fn the_machine_s_etc_gives_the_rules_a_plain_walk_gives() {
    // The walk as it was first written: each link canonicalized on its own.
    let etc = Path::new(CONFIG_DIR);
    let root = Entry::scan_root(etc).unwrap();
    let mut plain = Vec::new();
    root.collect_readable(0, &mut plain);
    let mut links = Vec::new();
    links_of(&root, 0, &mut links);
    let outside: BTreeSet<PathBuf> = links
        .iter()
        .filter_map(|l| l.canonicalize().ok())
        .filter(|t| !allowed(t))
        .filter_map(readable_by_all)
        .collect();
    plain.extend(outside.into_iter().map(|path| Rule { path, dir: false }));
    assert_eq!(walk(etc, None, i64::MAX).rules, plain);
    // And each link, one by one, leads where `canonicalize` says.
    let mut resolver = Resolver::new(Some(&root));
    for link in &links {
        assert_eq!(
            resolver.resolve(link).target,
            link.canonicalize().ok(),
            "{}",
            link.display()
        );
    }
}

#[test]
fn a_kept_walk_of_the_machine_s_etc_gives_what_a_fresh_walk_gives() {
    let etc = Path::new(CONFIG_DIR);
    let fresh = walk(etc, None, i64::MAX);
    let kept = Memo::parse(&fresh.memo.to_bytes("k"), "k").expect("reads back");
    let again = walk(etc, Some(&kept), i64::MAX);
    assert_eq!(again.rules, fresh.rules);
    assert_eq!(
        again.memo, fresh.memo,
        "nothing changed, nothing to rewrite"
    );
    // Only the links the memo cannot vouch for (those that add a rule, or lead
    // through `/proc`) are resolved again.
    assert_eq!(again.resolved, fresh.resolved - kept.links.len());
}

/// A tree for the memo's tests: a secret, a wholly readable folder, a link into the system
/// directories, a link through an outside folder that leads back into them, and the
/// outside folder with a readable file. Links are relative where they can be, so that
/// no answer is read from the busy temporary folder all this sits in.
struct Fixture {
    base: PathBuf,
    etc: PathBuf,
    outside: PathBuf,
}

impl Fixture {
    fn new(name: &str) -> Fixture {
        let base = scratch(name);
        let etc = base.join("etc");
        let outside = base.join("outside");
        std::fs::create_dir_all(etc.join("conf")).unwrap();
        std::fs::create_dir(&outside).unwrap();
        for file in ["passwd", "conf/a", "conf/b"] {
            std::fs::write(etc.join(file), "x").unwrap();
            mode(&etc.join(file), 0o644);
        }
        // A secret splits `etc` into its readable parts: `conf` is one rule.
        std::fs::write(etc.join("shadow"), "s").unwrap();
        mode(&etc.join("shadow"), 0o600);
        std::fs::write(outside.join("public"), "p").unwrap();
        mode(&outside.join("public"), 0o644);
        symlink("/usr/bin", outside.join("hop")).unwrap();
        symlink("/usr/bin/env", etc.join("env")).unwrap();
        symlink("../outside/hop/env", etc.join("via")).unwrap();
        for dir in [&base, &etc, &etc.join("conf"), &outside] {
            mode(dir, 0o755);
        }
        Fixture { base, etc, outside }
    }

    /// Walks with `kept` and checks the rules are a fresh walk's.
    fn walk_checked(&self, kept: &Memo) -> Walked {
        let walked = walk(&self.etc, Some(kept), i64::MAX);
        assert_eq!(walked.rules, walk(&self.etc, None, i64::MAX).rules);
        walked
    }

    /// Runs `change` once the folders' clocks have moved on, and checks it shows in the
    /// stamp of `folder`: what the memo is keyed by.
    fn change(&self, folder: &Path, change: impl FnOnce()) {
        let before = Stamp::of(&std::fs::symlink_metadata(folder).unwrap());
        std::thread::sleep(Duration::from_millis(20));
        change();
        let after = Stamp::of(&std::fs::symlink_metadata(folder).unwrap());
        assert_ne!(before, after, "the change shows in {}", folder.display());
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

#[test]
fn an_unchanged_tree_is_not_resolved_again() {
    let f = Fixture::new("unchanged");
    let first = walk(&f.etc, None, i64::MAX);
    assert_eq!(first.resolved, 2);
    assert_eq!(first.memo.links.len(), 2, "both links add nothing");
    let again = f.walk_checked(&first.memo);
    assert_eq!(again.resolved, 0);
    assert_eq!(again.memo, first.memo);
}

#[test]
fn a_mode_changed_inside_etc_is_seen_though_no_folder_changed() {
    let f = Fixture::new("chmod");
    let kept = walk(&f.etc, None, i64::MAX).memo;
    let whole = Rule {
        path: f.etc.join("conf"),
        dir: true,
    };
    assert!(walk(&f.etc, Some(&kept), i64::MAX).rules.contains(&whole));
    mode(&f.etc.join("conf/b"), 0o600);
    let walked = f.walk_checked(&kept);
    assert!(!walked.rules.contains(&whole), "{:?}", walked.rules);
    assert!(paths(&walked.rules).contains(&f.etc.join("conf/a")));
}

#[test]
fn a_link_replaced_in_etc_is_resolved_again() {
    let f = Fixture::new("relinked");
    let kept = walk(&f.etc, None, i64::MAX).memo;
    f.change(&f.etc, || {
        std::fs::remove_file(f.etc.join("env")).unwrap();
        symlink(f.outside.join("public"), f.etc.join("env")).unwrap();
    });
    let walked = f.walk_checked(&kept);
    // Both links of the changed folder, whose listing each answer was read from.
    assert_eq!(walked.resolved, 2);
    assert!(paths(&walked.rules).contains(&f.outside.join("public")));
}

#[test]
fn a_folder_changed_on_a_link_s_way_outside_etc_is_resolved_again() {
    let f = Fixture::new("outside");
    let kept = walk(&f.etc, None, i64::MAX).memo;
    // `via` led through `hop` into /usr/bin; now `hop` is a folder of readable files.
    f.change(&f.outside, || {
        std::fs::remove_file(f.outside.join("hop")).unwrap();
        std::fs::create_dir(f.outside.join("hop")).unwrap();
        std::fs::write(f.outside.join("hop/env"), "e").unwrap();
        mode(&f.outside.join("hop/env"), 0o644);
    });
    let walked = f.walk_checked(&kept);
    assert!(paths(&walked.rules).contains(&f.outside.join("hop/env")));
}

#[test]
fn a_kept_memo_however_forged_never_adds_a_rule() {
    let f = Fixture::new("forged");
    symlink(f.outside.join("public"), f.etc.join("resolv.conf")).unwrap();
    let fresh = walk(&f.etc, None, i64::MAX);
    // Folders as they are now, so the forged claims pass every check of the stamps.
    let mut resolver = Resolver::new(None);
    let folders: Vec<(PathBuf, Stamp)> = [&f.etc, &f.outside, Path::new("/")]
        .iter()
        .map(|p| (p.to_path_buf(), resolver.stamp(p).unwrap()))
        .collect();
    let claim = |links: &[&str]| Memo {
        folders: folders.clone(),
        links: links
            .iter()
            .map(|l| (f.etc.join(l), vec![0, 1, 2]))
            .collect(),
    };
    let forged = [
        // That the link to an outside file adds nothing: it is left out.
        claim(&["resolv.conf", "env", "via"]),
        // That the secret is a link adding nothing, and a link that is not there.
        claim(&["shadow", "ghost"]),
        Memo::default(),
    ];
    for memo in &forged {
        let rules = walk(&f.etc, Some(memo), i64::MAX).rules;
        for rule in &rules {
            assert!(
                fresh.rules.contains(rule),
                "{rule:?} not in {:?}",
                fresh.rules
            );
        }
        assert!(
            !paths(&rules).contains(&f.etc),
            "the secret's folder stays split"
        );
    }
}

#[test]
fn a_corrupt_linked_or_huge_kept_file_is_walked_past_and_replaced() {
    let cache = scratch("kept-cache");
    let folder = || kept::Folder::open_in(&cache).unwrap();
    let file = cache.join("confine").join("etc-walk");
    let etc = Path::new(CONFIG_DIR);
    let fresh = walk(etc, None, i64::MAX).rules;
    let key = memo::key(etc).expect("a boot id");
    let elsewhere = scratch("kept-elsewhere").join("target");
    drop(folder());
    let hostile: [&dyn Fn(); 4] = [
        &|| std::fs::write(&file, b"mur-etc-walk 1\nkey x\nfolder 1\n").unwrap(),
        &|| std::fs::write(&file, [0xffu8; 64]).unwrap(),
        &|| {
            std::fs::write(&elsewhere, b"not a memo").unwrap();
            symlink(&elsewhere, &file).unwrap();
        },
        &|| {
            let huge = std::fs::File::create(&file).unwrap();
            huge.set_len(memo::MAX_BYTES + 1).unwrap();
        },
    ];
    for plant in hostile {
        let _ = std::fs::remove_file(&file);
        plant();
        assert_eq!(walk_kept(etc, Some(folder())), fresh);
        let bytes = folder()
            .read(memo::NAME, memo::MAX_BYTES)
            .expect("rewritten");
        assert!(Memo::parse(&bytes, &key).is_some(), "a memo in its place");
        // The second run takes it, and gives the same rules.
        assert_eq!(walk_kept(etc, Some(folder())), fresh);
    }
    assert_eq!(std::fs::read(&elsewhere).unwrap(), b"not a memo");
    std::fs::remove_dir_all(&cache).unwrap();
    std::fs::remove_dir_all(elsewhere.parent().unwrap()).unwrap();
}
