//! The task store on disk: one JSON line per saved task, the last line of a task
//! winning, so a resumed capsule (or one `mur serve` restarted) still answers for the
//! tasks before it. Appends are small; the file is rewritten with only the kept tasks
//! once it has grown well past them.
//!
//! The file sits in the host's records, outside every capsule's view, so plain file
//! calls are safe here: no component can plant a link where it is written.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ::a2a::Task;

use crate::records;

/// The file's name in a records folder.
pub const FILE: &str = "a2a-tasks.jsonl";

/// A journal larger than this is not read back: a file that big was not written by
/// a store that keeps its tasks bounded (256 MiB of text, rewritten once appends
/// pass `REWRITE_BYTES`).
const MAX_READ: u64 = 512 * 1024 * 1024;

/// Appends past this many bytes since the last rewrite make the next write a rewrite.
const REWRITE_BYTES: usize = 64 * 1024 * 1024;

pub struct Journal {
    path: PathBuf,
    file: Option<File>,
    lines: usize,
    /// Bytes appended since the file was last rewritten.
    appended: usize,
    keep: usize,
    warned: bool,
    /// What the file holds now, as the records budget counts it.
    size: u64,
    records: Arc<records::Budget>,
}

impl Journal {
    /// The journal at `path` (created when first written), and the tasks it holds.
    pub fn open(path: &Path, keep: usize) -> (Journal, Vec<Task>) {
        let tasks = read(path);
        let journal = Journal {
            path: path.to_path_buf(),
            file: None,
            lines: 0,
            appended: 0,
            keep: keep.max(1),
            warned: false,
            size: records::size_on_disk(path),
            records: Arc::new(records::Budget::unlimited()),
        };
        (journal, tasks)
    }

    /// Its writes ask `records` first; one the budget refuses is not made.
    pub fn within(mut self, records: Arc<records::Budget>) -> Self {
        records.add_existing(self.size);
        self.records = records;
        self
    }

    /// Whether the file holds nothing (or does not exist yet).
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Keeps `task` as it stands; `kept` lists every task the store holds, asked only
    /// when the file is due to be rewritten.
    pub fn append(&mut self, task: &Task, kept: impl FnOnce() -> Vec<Task>) {
        if self.lines > self.keep.saturating_mul(4) + 16 || self.appended > REWRITE_BYTES {
            return self.rewrite(&kept());
        }
        let line = match line_of(task) {
            Ok(line) => line,
            Err(e) => return self.warn(&e),
        };
        let bytes = line.len() as u64;
        if self
            .records
            .resize(WHAT, self.size, self.size + bytes)
            .is_err()
        {
            // The budget kept the refusal: the session ends on it.
            return;
        }
        let written = self.file().and_then(|file| file.write_all(line.as_bytes()));
        match written {
            Ok(()) => {
                self.lines += 1;
                self.appended += line.len();
                self.size += bytes;
            }
            Err(e) => self.warn(&e),
        }
    }

    /// Replaces the file with exactly `kept`.
    pub fn rewrite(&mut self, kept: &[Task]) {
        self.file = None;
        let tmp = self.path.with_extension("jsonl.tmp");
        // One line at a time: the kept tasks may hold hundreds of MiB of text.
        let written = (|| {
            if let Some(dir) = self.path.parent() {
                fs::create_dir_all(dir)?;
            }
            let mut file = File::create(&tmp)?;
            let mut total = 0u64;
            for task in kept {
                let line = line_of(task)?;
                file.write_all(line.as_bytes())?;
                total += line.len() as u64;
            }
            file.sync_all()?;
            Ok(total)
        })();
        let total = match written {
            Ok(total) => total,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return self.warn(&e);
            }
        };
        if self.records.resize(WHAT, self.size, total).is_err() {
            let _ = fs::remove_file(&tmp);
            return;
        }
        match fs::rename(&tmp, &self.path) {
            Ok(()) => {
                self.lines = kept.len();
                self.appended = 0;
                self.size = total;
            }
            Err(e) => {
                // The budget counted the new file: give back what it did not replace.
                let _ = self.records.resize(WHAT, total, self.size);
                self.warn(&e);
            }
        }
    }

    fn file(&mut self) -> std::io::Result<&mut File> {
        if self.file.is_none() {
            if let Some(dir) = self.path.parent() {
                fs::create_dir_all(dir)?;
            }
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)?;
            self.file = Some(file);
        }
        self.file
            .as_mut()
            .ok_or_else(|| std::io::Error::other("the journal is not open"))
    }

    /// A journal that cannot be written leaves the tasks in memory; say so once.
    fn warn(&mut self, e: &std::io::Error) {
        if !std::mem::replace(&mut self.warned, true) {
            eprintln!(
                "warning[W-A2A-001]: could not keep the A2A task store in {}: {e}\n  hint: the tasks are still answered until the capsule stops; check that the records folder is writable",
                self.path.display()
            );
        }
    }
}

/// How a refusal names this store.
const WHAT: &str = "writing the A2A task store's journal";

/// One task, as one line; the secrets the host knows never reach the disk.
fn line_of(task: &Task) -> std::io::Result<String> {
    let json = serde_json::to_string(task).map_err(std::io::Error::other)?;
    let mut line = crate::secret::scrub(&json).into_owned();
    line.push('\n');
    Ok(line)
}

/// The tasks a journal holds, oldest first, each as last written. A line that does
/// not parse (a write cut short by a crash) is skipped.
pub fn read(path: &Path) -> Vec<Task> {
    let Ok(file) = File::open(path) else {
        return Vec::new();
    };
    if file.metadata().map_or(true, |m| m.len() > MAX_READ) {
        return Vec::new();
    }
    let mut order: Vec<String> = Vec::new();
    let mut latest: std::collections::HashMap<String, Task> = std::collections::HashMap::new();
    for line in BufReader::new(file).lines() {
        let Ok(line) = line else { break };
        let Ok(task) = serde_json::from_str::<Task>(&line) else {
            continue;
        };
        if !latest.contains_key(&task.id) {
            order.push(task.id.clone());
        }
        latest.insert(task.id.clone(), task);
    }
    order
        .into_iter()
        .filter_map(|id| latest.remove(&id))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::Tasks;
    use super::super::testing::{run_to_completion, user};
    use super::*;

    #[test]
    fn the_journal_stops_at_the_records_budget_and_says_so() {
        let dir = std::env::temp_dir().join(format!("mur-a2a-budget-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join(FILE);
        let budget = std::sync::Arc::new(crate::records::Budget::new(4096, 0));
        let tasks = Tasks::new(10);
        let (journal, earlier) = Journal::open(&path, 10);
        tasks.keep_in(journal.within(budget.clone()), earlier);
        for n in 0..20 {
            let id = format!("tsk_{n}");
            tasks.submitted(&id, "ctx_1", Some(user("one")));
            run_to_completion(&tasks, &id, &"x".repeat(500));
        }
        let size = std::fs::metadata(&path).map_or(0, |m| m.len());
        assert!(size <= 4096, "the journal holds {size} bytes");
        let why = budget.failure().expect("the refusal is kept");
        assert!(
            why.starts_with(
                "writing the A2A task store's journal would take the capsule's records"
            ) && why.ends_with("over capabilities.limits.max_records_bytes (4096)"),
            "{why}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
