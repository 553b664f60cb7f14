//! The host's own logs in the session's records: `logs/bootstrap.log` and each hook's
//! `logs/hook-<name>.log` of its failures.
//!
//! Their lines quote what guests chose (a hook's error text, a verdict's reason, the
//! name of a manifest a hook wrote), so one entry is one line: escaped by
//! `crate::escape`'s rule, line ends included, so no guest can add a line that reads
//! as the host's; cut when long, saying how long it was; and each file is capped for
//! the session, then one line says the rest was dropped, so a guest failing with
//! megabytes of text, again and again, cannot fill the disk.

use std::fs::File;
use std::io::Write as _;
use std::path::PathBuf;

use crate::escape;

/// Bytes one host log may hold per session, as a component's output log.
pub const CAP: u64 = crate::guest_log::LOG_CAP;

/// One log file and what the session has written to it.
pub struct Log {
    path: PathBuf,
    /// Bytes of one entry kept before it is cut.
    entry_cap: usize,
    file: Option<File>,
    written: u64,
    capped: bool,
}

impl Log {
    pub fn new(path: PathBuf, entry_cap: usize) -> Self {
        Log {
            path,
            entry_cap,
            file: None,
            written: 0,
            capped: false,
        }
    }

    /// Appends `entry` as one line; diagnostics only, so a failed write is not fatal.
    pub fn append(&mut self, entry: &str) {
        if self.capped {
            return;
        }
        let mut line = one_line(&crate::secret::scrub(entry), self.entry_cap);
        line.push('\n');
        let len = line.len() as u64;
        let over = self.written + len > CAP;
        if over {
            line = format!(
                "[log capped at {CAP} bytes: the rest of this session's entries were dropped]\n"
            );
        }
        let Some(file) = self.open() else {
            return;
        };
        if file.write_all(line.as_bytes()).is_ok() {
            self.written += len;
        }
        self.capped = over;
    }

    /// Opened on first use; a failure (the folder not made yet) is tried again later.
    fn open(&mut self) -> Option<&mut File> {
        if self.file.is_none() {
            self.file = crate::guest_log::open_log(&self.path).ok();
        }
        self.file.as_mut()
    }
}

/// `entry` escaped, line ends included, and cut to `cap` bytes (never inside an
/// escape), saying how long the entry was.
fn one_line(entry: &str, cap: usize) -> String {
    let escaped = escape::line(entry);
    if escaped.len() <= cap {
        return escaped.into_owned();
    }
    let mut at = escaped.floor_char_boundary(cap);
    if let Some(open) = escaped[..at].rfind("\\u{")
        && !escaped[open..at].contains('}')
    {
        at = open;
    }
    format!("{}… [cut: {} bytes in all]", &escaped[..at], entry.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mur-host-log-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn an_entry_is_one_escaped_line_and_a_long_one_is_cut() {
        let dir = scratch("lines");
        let path = dir.join("bootstrap.log");
        // The cut falls inside the `\u{1b}`: it is made before it.
        let mut log = Log::new(path.clone(), 58);
        log.append("hook 'x' wrote a manifest for 'bash\n[murmur] FORGED\x1b[0m' and more");
        log.append("short \u{9b}");
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "hook 'x' wrote a manifest for 'bash\\u{a}[murmur] FORGED… [cut: 65 bytes in all]\n\
             short \\u{9b}\n"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_flood_stops_at_the_cap_with_one_line_saying_so() {
        let dir = scratch("cap");
        let path = dir.join("hook-flood.log");
        let mut log = Log::new(path.clone(), 4096);
        let entry = format!("on-task-end: {}", "\x1b[31mx\n".repeat(10_000));
        for _ in 0..1000 {
            log.append(&entry);
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let last =
            "[log capped at 1048576 bytes: the rest of this session's entries were dropped]\n";
        assert!(text.ends_with(last), "{}", &text[text.len() - 200..]);
        assert!(
            text.len() as u64 <= CAP + last.len() as u64,
            "{}",
            text.len()
        );
        assert_eq!(text.matches("[log capped").count(), 1);
        assert!(!text.contains('\x1b'));
        for line in text.lines() {
            assert!(line.starts_with("on-task-end: ") || line == last.trim_end());
            assert!(line.len() <= 4096 + 64, "{}", line.len());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
