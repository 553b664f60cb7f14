//! Released WIT is never edited in place: `wit/versions.lock` holds the sha256 of every
//! released package's file, and a change is a new version. These tests fail when a
//! released file changes, when a `.wit` file is not in the lock, and when a package this
//! host serves has no entry at the version it serves.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::VERSION;

/// The packages every world of this host is built from.
const PACKAGES: [&str; 7] = [
    "murmur:message",
    "murmur:text",
    "murmur:task",
    "murmur:tool",
    "murmur:driver",
    "murmur:hook",
    "murmur:session",
];

fn wit() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit")
}

/// (package@version, path under wit/, sha256) per line of the lock.
fn lock() -> Vec<(String, String, String)> {
    let text = std::fs::read_to_string(wit().join("versions.lock")).expect("wit/versions.lock");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(
                fields.len(),
                3,
                "a lock line is 'package@version path sha256': {l}"
            );
            (fields[0].into(), fields[1].into(), fields[2].into())
        })
        .collect()
}

fn sha256(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Every `.wit` file of ours under wit/ (WASI's, in `deps/`, are not ours).
fn wit_files(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).expect("wit/ reads") {
        let path = entry.expect("an entry").path();
        if path.is_dir() && path.file_name().is_some_and(|n| n != "deps") {
            wit_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "wit") {
            let rel = path.strip_prefix(wit()).expect("under wit/");
            out.push(rel.to_string_lossy().into_owned());
        }
    }
}

#[test]
fn no_released_wit_file_has_changed() {
    for (package, file, hash) in lock() {
        assert_eq!(
            sha256(&wit().join(&file)),
            hash,
            "wit/{file} ({package}) was edited after its release; a released version never \
             changes: restore it and put the change in a new version"
        );
        let text = std::fs::read_to_string(wit().join(&file)).expect("reads");
        assert!(
            text.starts_with(&format!("package {package};")),
            "wit/{file} is locked as {package}"
        );
    }
}

#[test]
fn every_wit_file_is_in_the_lock() {
    let locked: Vec<String> = lock().into_iter().map(|(_, file, _)| file).collect();
    let mut files = Vec::new();
    wit_files(&wit(), &mut files);
    for file in files {
        assert!(
            locked.contains(&file),
            "wit/{file} is not in wit/versions.lock: a released package's file is locked \
             with its sha256"
        );
    }
}

#[test]
fn every_package_is_locked_at_the_version_served() {
    let locked: Vec<String> = lock().into_iter().map(|(package, _, _)| package).collect();
    for package in PACKAGES {
        let served = format!("{package}@{VERSION}");
        assert!(
            locked.contains(&served),
            "{served} is not in wit/versions.lock"
        );
    }
}

/// Upstream Murmur's packages this host serves to upstream's components (`wit/upstream/`).
const UPSTREAM: [&str; 4] = [
    "murmur:tool@0.1.0",
    "murmur:task@0.1.0",
    "murmur:%stream@0.1.0",
    "murmur:hook@0.9.0",
];

#[test]
fn every_upstream_package_is_locked_under_upstream() {
    for package in UPSTREAM {
        assert!(
            lock()
                .iter()
                .any(|(p, file, _)| p == package && file.starts_with("upstream/")),
            "{package} is not in wit/versions.lock under upstream/"
        );
    }
}

/// The same package@version may be locked twice only as our retired shape and
/// upstream's, which differ: any other repeat is a second file for one release.
#[test]
fn a_package_version_locked_twice_is_retired_and_upstream_in_two_shapes() {
    let lock = lock();
    for (package, file, hash) in &lock {
        let same: Vec<_> = lock.iter().filter(|(p, _, _)| p == package).collect();
        match same.len() {
            1 => {}
            2 => {
                let other = same.iter().find(|(_, f, _)| f != file).expect("two files");
                let mut places = [file.split('/').next(), other.1.split('/').next()];
                places.sort();
                assert_eq!(
                    places,
                    [Some("retired"), Some("upstream")],
                    "{package} is locked twice: {file} and {}",
                    other.1
                );
                assert_ne!(hash, &other.2, "{package}: the two shapes are one file");
            }
            n => panic!("{package} is locked {n} times"),
        }
    }
}
