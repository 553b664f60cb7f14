//! Naming one session among many: the vocabulary `mur run --resume` and `mur trace` share.
//!
//! A selector is a full `ses_` id, a case-insensitive suffix of 4 or more characters, or
//! `@N` (1 = the newest). Session ids are UUIDv7, so sorting their names sorts them by
//! creation time and `@N` counts back from the end of that order. Each command wraps a
//! miss in its own error code; the texts here are the same for both.

use std::fmt;
use std::path::Path;

/// Why a selector named no single session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Miss {
    /// The selector looks like a path; sessions are named by id here.
    Path,
    /// `@N` with N not a number from 1.
    BadOrdinal,
    /// `@N` past the oldest session; the count there is.
    OutOfRange(usize),
    /// A full `ses_` id that is not there.
    NoSuchSession,
    /// A suffix shorter than 4 characters.
    ShortSuffix,
    /// A suffix no session ends with.
    NoSuffixMatch,
    /// A suffix more than one session ends with, oldest first.
    Ambiguous(Vec<String>),
}

impl fmt::Display for Miss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Miss::Path => write!(f, "a session is named by its id, not a path"),
            Miss::BadOrdinal => write!(f, "@N takes a number from 1 (the newest)"),
            Miss::OutOfRange(0) => write!(f, "there are no sessions"),
            Miss::OutOfRange(n) => write!(f, "there are only {n} sessions"),
            Miss::NoSuchSession => write!(f, "no such session"),
            Miss::ShortSuffix => write!(f, "a suffix must have at least 4 characters"),
            Miss::NoSuffixMatch => write!(f, "no session ends with it"),
            Miss::Ambiguous(many) => {
                write!(f, "it names {} sessions ({})", many.len(), many.join(", "))
            }
        }
    }
}

/// The `ses_*` directory names under `root`, oldest first; none when it cannot be read.
pub fn session_dirs(root: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| name.starts_with("ses_"))
        .collect();
    names.sort();
    names
}

/// The session `selector` names among `sessions` (names sorted oldest first).
///
/// # Errors
///
/// A [`Miss`] saying why no single session is named.
pub fn pick(sessions: &[String], selector: &str) -> Result<String, Miss> {
    if selector.contains(['/', '\\', '\0']) || selector.contains("..") {
        return Err(Miss::Path);
    }
    if let Some(n) = selector.strip_prefix('@') {
        let n: usize = n.parse().ok().filter(|n| *n >= 1).ok_or(Miss::BadOrdinal)?;
        return sessions
            .len()
            .checked_sub(n)
            .map(|i| sessions[i].clone())
            .ok_or(Miss::OutOfRange(sessions.len()));
    }
    if selector.starts_with("ses_") {
        return sessions
            .iter()
            .find(|s| *s == selector)
            .cloned()
            .ok_or(Miss::NoSuchSession);
    }
    if selector.chars().count() < 4 {
        return Err(Miss::ShortSuffix);
    }
    let wanted = selector.to_ascii_lowercase();
    let matches: Vec<String> = sessions
        .iter()
        .filter(|s| s.to_ascii_lowercase().ends_with(&wanted))
        .cloned()
        .collect();
    match matches.len() {
        1 => Ok(matches.into_iter().next().unwrap_or_default()),
        0 => Err(Miss::NoSuffixMatch),
        _ => Err(Miss::Ambiguous(matches)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_pick_by_id_suffix_and_age() {
        let sessions: Vec<String> = ["ses_0001aaaa", "ses_0002bbbb", "ses_0003cbbbb"]
            .map(String::from)
            .to_vec();
        assert_eq!(pick(&sessions, "@1").unwrap(), "ses_0003cbbbb");
        assert_eq!(pick(&sessions, "@3").unwrap(), "ses_0001aaaa");
        assert!(pick(&sessions, "@4").is_err());
        assert!(pick(&sessions, "@0").is_err());
        assert_eq!(pick(&sessions, "ses_0002bbbb").unwrap(), "ses_0002bbbb");
        assert!(pick(&sessions, "ses_0009").is_err());
        assert_eq!(pick(&sessions, "AAAA").unwrap(), "ses_0001aaaa");
        assert!(
            pick(&sessions, "bbbb")
                .unwrap_err()
                .to_string()
                .contains("2 sessions")
        );
        assert!(pick(&sessions, "bbb").is_err());
        assert!(pick(&sessions, "../ses_0001aaaa").is_err());
    }

    #[test]
    fn misses_read_as_resume_always_printed_them() {
        let sessions: Vec<String> = ["ses_01abcd", "ses_02abcd"].map(String::from).to_vec();
        let text = |s: &str| pick(&sessions, s).unwrap_err().to_string();
        assert_eq!(text("@3"), "there are only 2 sessions");
        assert_eq!(
            pick(&[], "@1").unwrap_err().to_string(),
            "there are no sessions"
        );
        assert_eq!(text("@x"), "@N takes a number from 1 (the newest)");
        assert_eq!(text("a/b"), "a session is named by its id, not a path");
        assert_eq!(text("ses_03"), "no such session");
        assert_eq!(text("abc"), "a suffix must have at least 4 characters");
        assert_eq!(text("zzzz"), "no session ends with it");
        assert_eq!(text("ABCD"), "it names 2 sessions (ses_01abcd, ses_02abcd)");
    }
}
