//! The session workdir, and the host's records kept apart from it.
//!
//! Two places, never one inside the other:
//! - the **view**: what the capsule sees as its directory (its components' `/`, its
//!   commands' current directory). The host writes what the model works with there
//!   (`task.md`, `MURMUR.md`, `out/`, `tools/`, the output of long commands) through a
//!   handle that never follows a link out ([`Rooted`]).
//! - the **records**: the trace, the host's diagnostics, threaded conversations, hook
//!   data and every other session's records, where no component preopen and no
//!   command's directory reaches, so nothing a guest does can forge or read them.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use sha2::{Digest, Sha256};

use crate::error::Error;
use crate::host_log;
use crate::rooted::Rooted;

/// Bytes of one `bootstrap.log` line kept: room for the `tools:` line of a capsule
/// with many tools, while one guest's text cannot spend the whole log.
const BOOTSTRAP_LINE: usize = 64 * 1024;

pub struct Workdir {
    /// What the capsule (its loop, tools and shell commands) sees as its directory.
    pub root: PathBuf,
    /// The session's own records: `trace.jsonl`, `logs/`.
    pub records: PathBuf,
    /// Every session's records of this capsule, with `conversations/` and `hooks/`.
    pub records_root: PathBuf,
    view: OnceLock<Rooted>,
    /// `logs/bootstrap.log`, capped for the session.
    log: Mutex<host_log::Log>,
}

/// Where a capsule's records go, from the command line and the environment.
pub struct RecordsChoice<'a> {
    pub manifest_dir: &'a Path,
    /// `--workdir DIR`.
    pub workdir: Option<&'a Path>,
    /// `--records DIR`.
    pub records: Option<&'a Path>,
}

impl RecordsChoice<'_> {
    /// `--records DIR`; else `<manifest-dir>/workdir/.murmur` beside the session
    /// directories; else, with `--workdir DIR` (whose every file the capsule sees),
    /// `$MURMUR_HOME/records/<name>-<hash of DIR>` (`MURMUR_HOME` = `~/.murmur`).
    pub fn root(&self) -> PathBuf {
        if let Some(dir) = self.records {
            return absolute(dir);
        }
        match self.workdir {
            None => absolute(&self.manifest_dir.join("workdir").join(".murmur")),
            Some(dir) => murmur_home().join("records").join(slug(&absolute(dir))),
        }
    }
}

impl Workdir {
    /// Where the session's directories go. Default: `<manifest-dir>/workdir/<session-id>`.
    ///
    /// # Errors
    ///
    /// `E-RUN-019` when the records would sit inside the capsule's view.
    pub fn plan(choice: &RecordsChoice<'_>, session_id: &str) -> Result<Self, Error> {
        let root = match choice.workdir {
            Some(dir) => absolute(dir),
            None => absolute(&choice.manifest_dir.join("workdir").join(session_id)),
        };
        let records_root = choice.root();
        if resolved(&records_root).starts_with(resolved(&root)) {
            return Err(Error::new(
                "E-RUN-019",
                format!(
                    "the host's records ({}) would sit inside the capsule's workdir ({}), where its tools could rewrite them",
                    records_root.display(),
                    root.display()
                ),
            )
            .hint("pass --records DIR outside the workdir, or set MURMUR_HOME to such a folder"));
        }
        let records = records_root.join(session_id);
        let log = host_log::Log::new(records.join("logs").join("bootstrap.log"), BOOTSTRAP_LINE);
        Ok(Workdir {
            records,
            records_root,
            root,
            view: OnceLock::new(),
            log: Mutex::new(log),
        })
    }

    /// `E-RUN-025` when the capsule's view would hold `cache`, the folder of compiled
    /// components the host maps and runs as native code: a command or a component that
    /// rewrote a file there would run outside every sandbox at the next launch.
    pub fn refuse_holding_cache(&self, cache: &Path) -> Result<(), Error> {
        if !resolved(cache).starts_with(resolved(&self.root)) {
            return Ok(());
        }
        Err(Error::new(
            "E-RUN-025",
            format!(
                "the component cache ({}) would sit inside the capsule's workdir ({}), where its tools could rewrite the native code mur runs",
                cache.display(),
                self.root.display()
            ),
        )
        .hint("pass --workdir DIR outside the cache, or set MUR_CACHE_DIR to a folder outside the workdir"))
    }

    /// Creates the directories, once staging has succeeded.
    pub fn create(&self) -> Result<(), Error> {
        for dir in [&self.root, &self.logs_dir()] {
            std::fs::create_dir_all(dir).map_err(|e| {
                Error::new(
                    "E-IO-003",
                    format!("could not create {}: {e}", dir.display()),
                )
                .hint("check that the directory is writable, or pass --workdir DIR")
            })?;
        }
        let view = Rooted::open(&self.root).map_err(|e| {
            Error::new(
                "E-IO-003",
                format!("could not open {}: {e}", self.root.display()),
            )
        })?;
        for dir in ["out", "tools"] {
            view.create_dir_all(dir).map_err(|e| {
                Error::new(
                    "E-IO-003",
                    format!("could not create {dir}/ in {}: {e}", self.root.display()),
                )
                .hint("a link there that leads outside the workdir is refused: remove it")
            })?;
        }
        let _ = self.view.set(view);
        Ok(())
    }

    /// The capsule's directory, for the host's own writes there. Before `create`, an
    /// error (nothing may be written before staging succeeded).
    pub fn view(&self) -> io::Result<&Rooted> {
        self.view
            .get()
            .ok_or_else(|| io::Error::other("the workdir has not been created yet"))
    }

    /// Writes `rel` in the capsule's directory, logging (not failing on) a refusal.
    pub fn write_view(&self, rel: &str, text: &str) -> io::Result<()> {
        let written = self
            .view()
            .and_then(|view| view.write(rel, text.as_bytes()));
        if let Err(e) = &written {
            self.log(&format!("could not write {rel}: {e}"));
        }
        written
    }

    /// The text of `rel` in the capsule's directory, if it is there and stays inside.
    pub fn read_view(&self, rel: &str) -> Option<String> {
        match self.view() {
            Ok(view) => view.read_to_string(rel).ok(),
            // At launch, before `create`: open the folder just for this read.
            Err(_) => Rooted::open(&self.root)
                .and_then(|view| view.read_to_string(rel))
                .ok(),
        }
    }

    /// Threaded conversations, shared by every session of this capsule.
    pub fn conversations_dir(&self) -> PathBuf {
        self.records_root.join("conversations")
    }

    /// Hook data: each hook's scope folder, shared by the capsule's sessions.
    pub fn hooks_dir(&self) -> PathBuf {
        self.records_root.join("hooks")
    }

    pub fn capsule_home(&self) -> PathBuf {
        self.root.join(".capsule-home")
    }

    /// The host's diagnostics (`bootstrap.log`, hook and component logs): records.
    pub fn logs_dir(&self) -> PathBuf {
        self.records.join("logs")
    }

    /// Full output of long or chatty shell commands, for the model to read: view.
    pub fn shell_logs_dir(&self) -> PathBuf {
        self.root.join("logs")
    }

    fn lock_log(&self) -> std::sync::MutexGuard<'_, host_log::Log> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn trace(&self) -> PathBuf {
        self.records.join("trace.jsonl")
    }

    /// A line in `logs/bootstrap.log`; diagnostics only, so a failed write is not fatal.
    /// Callers quote guest text (hook names and verdicts, reasons, paths): the line is
    /// escaped whole, line ends included, so it stays one line, and the log is capped.
    pub fn log(&self, line: &str) {
        self.lock_log().append(line);
    }
}

fn absolute(dir: &Path) -> PathBuf {
    std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf())
}

/// `path` with its deepest existing ancestor resolved (links and `..` included), so
/// two paths can be compared for nesting before either exists.
fn resolved(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            return rest.iter().rev().fold(real, |p, part| p.join(part));
        }
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_os_string());
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

pub fn murmur_home() -> PathBuf {
    if let Some(home) = std::env::var_os("MURMUR_HOME").filter(|h| !h.is_empty()) {
        return absolute(Path::new(&home));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(home) => PathBuf::from(home).join(".murmur"),
        None => absolute(Path::new(".murmur")),
    }
}

/// A folder name for a chosen workdir: readable, and unique to its absolute path.
fn slug(dir: &Path) -> String {
    let name: String = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".into())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let hash = Sha256::digest(dir.as_os_str().as_encoded_bytes());
    let hex: String = hash[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{hex}", name.trim_start_matches('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice<'a>(
        manifest_dir: &'a Path,
        workdir: Option<&'a Path>,
        records: Option<&'a Path>,
    ) -> RecordsChoice<'a> {
        RecordsChoice {
            manifest_dir,
            workdir,
            records,
        }
    }

    #[test]
    fn by_default_records_sit_beside_the_session_directories() {
        let w = Workdir::plan(&choice(Path::new("/caps/a"), None, None), "ses_1").unwrap();
        assert_eq!(w.root, Path::new("/caps/a/workdir/ses_1"));
        assert_eq!(w.records, Path::new("/caps/a/workdir/.murmur/ses_1"));
        assert_eq!(
            w.trace(),
            Path::new("/caps/a/workdir/.murmur/ses_1/trace.jsonl")
        );
        assert_eq!(
            w.conversations_dir(),
            Path::new("/caps/a/workdir/.murmur/conversations")
        );
    }

    #[test]
    fn a_chosen_workdir_keeps_no_records_inside() {
        let w = Workdir::plan(
            &choice(Path::new("/caps/a"), Some(Path::new("/proj")), None),
            "ses_1",
        )
        .unwrap();
        assert_eq!(w.root, Path::new("/proj"));
        assert!(!w.records.starts_with("/proj"), "{}", w.records.display());
        let again = choice(Path::new("/other"), Some(Path::new("/proj")), None).root();
        assert_eq!(again, w.records_root, "the same DIR finds the same records");
        let name = w
            .records_root
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(
            name.starts_with("proj-") && name.len() == "proj-".len() + 16,
            "{name}"
        );
    }

    #[test]
    fn a_workdir_holding_the_component_cache_is_refused() {
        let choice = choice(
            Path::new("/caps/a"),
            Some(Path::new("/home/u")),
            Some(Path::new("/records")),
        );
        let w = Workdir::plan(&choice, "ses_1").unwrap();
        let e = w
            .refuse_holding_cache(Path::new("/home/u/.cache/mur"))
            .unwrap_err();
        assert_eq!(e.code, "E-RUN-025");
        assert!(e.message.contains("/home/u/.cache/mur"), "{}", e.message);
        assert!(
            w.refuse_holding_cache(Path::new("/home/v/.cache/mur"))
                .is_ok()
        );
    }

    #[test]
    fn records_inside_the_view_are_refused() {
        let e = Workdir::plan(
            &choice(
                Path::new("/caps/a"),
                Some(Path::new("/proj")),
                Some(Path::new("/proj/.records")),
            ),
            "ses_1",
        )
        .err()
        .unwrap();
        assert_eq!(e.code, "E-RUN-019");
        assert!(
            e.message.contains("inside the capsule's workdir"),
            "{}",
            e.message
        );
    }
}
