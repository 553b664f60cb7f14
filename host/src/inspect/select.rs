//! Which `trace.jsonl` a selector names.
//!
//! Sessions are looked for in two layouts:
//! - ours: `<records root>/<ses>/trace.jsonl`, the root being the one `mur run` picks for
//!   the same `--manifest`, `--workdir` and `--records` (`workdir::RecordsChoice`), and
//!   with `--workdir D` also `D/.murmur` (D given as `<manifest-dir>/workdir`, or a
//!   directory upstream ran in);
//! - upstream's default: `<manifest-dir>/workdir/<ses>/.murmur/<ses>/trace.jsonl`, so a
//!   user in an upstream capsule's folder finds its sessions too.
//!
//! A session found in both is taken from the first place listed. Links are not
//! followed into a session directory of the upstream layout: that directory was the
//! capsule's own workdir, where its commands could plant one.

use std::path::{Path, PathBuf};

use super::Where;
use super::parse;
use crate::error::Error;
use crate::selector::{self, Miss};
use crate::workdir::RecordsChoice;

/// One session's trace, by its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub id: String,
    pub path: PathBuf,
    /// The user typed the path: a link there is theirs to follow. A trace found by
    /// looking (in upstream's layout, inside a capsule's own folder) is read only when it
    /// is no link.
    pub typed: bool,
}

impl Found {
    /// The trace, parsed.
    ///
    /// # Errors
    ///
    /// As [`parse::read`].
    pub fn read(&self) -> Result<parse::Parsed, Error> {
        let links = if self.typed {
            parse::Links::Follow
        } else {
            parse::Links::Refuse
        };
        parse::read(&self.path, links)
    }
}

/// Where sessions are looked for.
pub struct Places {
    /// Roots holding `<ses>/trace.jsonl`.
    records: Vec<PathBuf>,
    /// Roots holding `<ses>/.murmur/<ses>/trace.jsonl` (upstream's default layout).
    nested: Vec<PathBuf>,
}

impl Places {
    pub fn new(w: &Where) -> Self {
        let manifest_dir = match w.manifest.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let ours = RecordsChoice {
            manifest_dir: &manifest_dir,
            workdir: w.workdir.as_deref(),
            records: w.records.as_deref(),
        }
        .root();
        let workdir = w
            .workdir
            .clone()
            .unwrap_or_else(|| manifest_dir.join("workdir"));
        let mut records = vec![ours];
        if w.records.is_none() && w.workdir.is_some() {
            records.push(absolute(&workdir.join(".murmur")));
        }
        records.dedup();
        Places {
            records,
            nested: vec![absolute(&workdir)],
        }
    }

    /// Every session with a trace, oldest first (ids are UUIDv7).
    pub fn sessions(&self) -> Vec<Found> {
        let mut found: Vec<Found> = Vec::new();
        let mut add = |id: String, path: PathBuf| {
            if path.is_file() && !found.iter().any(|f| f.id == id) {
                found.push(Found {
                    id,
                    path,
                    typed: false,
                });
            }
        };
        for root in &self.records {
            for id in selector::session_dirs(root) {
                let path = root.join(&id).join("trace.jsonl");
                add(id, path);
            }
        }
        for root in &self.nested {
            for id in selector::session_dirs(root) {
                if let Some(path) = nested_trace(root, &id) {
                    add(id, path);
                }
            }
        }
        found.sort_by(|a, b| a.id.cmp(&b.id));
        found
    }

    /// The places, for messages.
    pub fn describe(&self) -> String {
        let mut shown: Vec<String> = self
            .records
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        shown.extend(
            self.nested
                .iter()
                .map(|p| format!("{}/<ses>/.murmur", p.display())),
        );
        shown.join(", ")
    }

    /// The trace `selector` names; none = the newest.
    ///
    /// # Errors
    ///
    /// `E-TRC-002` when it names no session, or more than one.
    pub fn resolve(&self, selector: Option<&str>) -> Result<Found, Error> {
        let selector = selector.unwrap_or("@1");
        if is_path(selector) {
            return by_path(selector);
        }
        let sessions = self.sessions();
        let ids: Vec<String> = sessions.iter().map(|s| s.id.clone()).collect();
        match selector::pick(&ids, selector) {
            Ok(id) => Ok(sessions.into_iter().find(|s| s.id == id).unwrap_or(Found {
                path: PathBuf::new(),
                id,
                typed: false,
            })),
            Err(miss) => Err(self.missed(selector, miss)),
        }
    }

    fn missed(&self, selector: &str, miss: Miss) -> Error {
        let hint = "name a session by its full ses_ id, a suffix of 4 or more characters, @N \
                    (@1 = the newest) or a path to its trace.jsonl; --manifest, --workdir and \
                    --records look where mur run was told to keep it";
        match miss {
            Miss::Ambiguous(many) => Error::new(
                "E-TRC-002",
                format!(
                    "'{selector}' names {} sessions:\n{}",
                    many.len(),
                    many.iter()
                        .map(|id| format!("  {id}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                ),
            )
            .hint("give more characters of the id"),
            Miss::OutOfRange(0) => Error::new(
                "E-TRC-002",
                format!("no sessions under {}", self.describe()),
            )
            .hint(
                "run mur trace in the capsule's folder, or pass --manifest, --workdir or \
                 --records as mur run was given them; a path to a trace.jsonl works too",
            ),
            miss => Error::new(
                "E-TRC-002",
                format!(
                    "no session matches '{selector}' under {}: {miss}",
                    self.describe()
                ),
            )
            .hint(hint),
        }
    }
}

/// A selector spelled as a path: it has a `/` or ends `.jsonl`, and is not `@N`.
pub(super) fn is_path(selector: &str) -> bool {
    !selector.starts_with('@') && (selector.contains('/') || selector.ends_with(".jsonl"))
}

/// A trace named by path: the file, or `trace.jsonl` in a session directory.
fn by_path(selector: &str) -> Result<Found, Error> {
    let given = PathBuf::from(selector);
    let path = if given.is_dir() {
        given.join("trace.jsonl")
    } else {
        given
    };
    if !path.is_file() {
        return Err(Error::new(
            "E-TRC-002",
            format!("{}: no such trace file", path.display()),
        )
        .hint("a path names a trace.jsonl, or the session directory that holds one"));
    }
    let id = session_of(&path);
    Ok(Found {
        id,
        path,
        typed: true,
    })
}

/// A session's id from where its trace sits: the directory's name when it is a `ses_`
/// one, else the file's name.
fn session_of(path: &Path) -> String {
    let dir = path
        .parent()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned());
    match dir {
        Some(name) if name.starts_with("ses_") => name,
        _ => path.display().to_string(),
    }
}

/// `root/<id>/.murmur/<id>/trace.jsonl`, when no directory on the way is a link.
fn nested_trace(root: &Path, id: &str) -> Option<PathBuf> {
    let mut at = root.to_path_buf();
    for part in [id, ".murmur", id] {
        at.push(part);
        if !std::fs::symlink_metadata(&at).ok()?.is_dir() {
            return None;
        }
    }
    let path = at.join("trace.jsonl");
    std::fs::symlink_metadata(&path)
        .ok()?
        .is_file()
        .then_some(path)
}

fn absolute(dir: &Path) -> PathBuf {
    std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_told_from_ids_suffixes_and_ordinals() {
        assert!(is_path("./trace.jsonl"));
        assert!(is_path("trace.jsonl"));
        assert!(is_path("workdir/.murmur/ses_1"));
        assert!(!is_path("@2"));
        assert!(!is_path("ses_0123"));
        assert!(!is_path("a1b2"));
    }

    #[test]
    fn a_trace_is_named_by_its_session_directory() {
        assert_eq!(
            session_of(Path::new("/w/.murmur/ses_01ab/trace.jsonl")),
            "ses_01ab"
        );
        assert_eq!(session_of(Path::new("/tmp/x.jsonl")), "/tmp/x.jsonl");
    }
}
