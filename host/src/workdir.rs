//! The session workdir: where the capsule works and where the host keeps its records.

use std::path::{Path, PathBuf};

use crate::error::Error;

pub struct Workdir {
    /// What the capsule (its loop, tools and shell commands) sees as its directory.
    pub root: PathBuf,
    /// Where the host writes the session's files: the root itself by default, or
    /// `<root>/.murmur/<session-id>` when the user named a workdir with `--workdir`.
    pub records: PathBuf,
}

impl Workdir {
    /// Where the session's directories go. Default: `<manifest-dir>/workdir/<session-id>`.
    pub fn plan(manifest_dir: &Path, chosen: Option<&Path>, session_id: &str) -> Self {
        let (root, records) = match chosen {
            Some(dir) => {
                let root = absolute(dir);
                let records = root.join(".murmur").join(session_id);
                (root, records)
            }
            None => {
                let root = manifest_dir.join("workdir").join(session_id);
                (root.clone(), root)
            }
        };
        Workdir { root, records }
    }

    /// Creates the directories, once staging has succeeded.
    pub fn create(&self) -> Result<(), Error> {
        for dir in [
            self.root.clone(),
            self.out_dir(),
            self.logs_dir(),
            self.tools_dir(),
        ] {
            std::fs::create_dir_all(&dir).map_err(|e| {
                Error::new(
                    "E-IO-003",
                    format!("could not create {}: {e}", dir.display()),
                )
                .hint("check that the directory is writable, or pass --workdir DIR")
            })?;
        }
        Ok(())
    }

    pub fn task_md(&self) -> PathBuf {
        self.root.join("task.md")
    }

    pub fn input_txt(&self) -> PathBuf {
        self.root.join("input.txt")
    }

    /// Threaded conversations, shared by every session of this workdir: beside the
    /// session directories (`<manifest-dir>/workdir/conversations`), or
    /// `DIR/.murmur/conversations` under `--workdir DIR`.
    pub fn conversations_dir(&self) -> PathBuf {
        match self.records.parent() {
            Some(sessions) => sessions.join("conversations"),
            None => self.records.join("conversations"),
        }
    }

    pub fn capsule_home(&self) -> PathBuf {
        self.root.join(".capsule-home")
    }

    pub fn out_dir(&self) -> PathBuf {
        self.records.join("out")
    }

    pub fn result_txt(&self) -> PathBuf {
        self.out_dir().join("result.txt")
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.records.join("logs")
    }

    pub fn bootstrap_log(&self) -> PathBuf {
        self.logs_dir().join("bootstrap.log")
    }

    pub fn trace(&self) -> PathBuf {
        self.records.join("trace.jsonl")
    }

    pub fn murmur_md(&self) -> PathBuf {
        self.records.join("MURMUR.md")
    }

    pub fn tools_dir(&self) -> PathBuf {
        self.records.join("tools")
    }

    /// A line in `logs/bootstrap.log`; diagnostics only, so a failed write is not fatal.
    pub fn log(&self, line: &str) {
        use std::io::Write;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.bootstrap_log());
        if let Ok(mut file) = file {
            let _ = writeln!(file, "{}", crate::secret::scrub(line));
        }
    }
}

fn absolute(dir: &Path) -> PathBuf {
    std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf())
}
