//! The files the host writes for a command beneath the workdir: `shell-<unix-ms>.log` for
//! output past the cap, and the creating and removing of any log there without following a
//! link out.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::io::AsyncWriteExt as _;

use super::ShellRequest;
use super::capture::Capture;

/// How many later millisecond stamps to try when a log name is taken by a concurrent command.
const LOG_NAME_ATTEMPTS: u64 = 1000;

/// Writes `logs_dir/shell-<unix-ms>.log`; `None` (and no partial file) when that fails.
pub(super) async fn write_log(
    req: &ShellRequest,
    display: &str,
    exit_code: i32,
    out: &Capture,
    err: &Capture,
) -> Option<PathBuf> {
    let (path, mut file) = create_log_file(&req.workdir, &req.logs_dir)?;
    let header = format!("Command: {display}\nExit code: {exit_code}\n\nStdout:\n");
    let written = file.write_all(header.as_bytes()).await.is_ok()
        && out.copy_into(&mut file).await
        && file.write_all(b"\n\nStderr:\n").await.is_ok()
        && err.copy_into(&mut file).await
        && file.write_all(b"\n").await.is_ok()
        && file.flush().await.is_ok();
    if written {
        Some(path)
    } else {
        drop(file);
        remove_log(&req.workdir, &path);
        None
    }
}

/// Creates a fresh `shell-<unix-ms>.log`, stepping the stamp forward when two commands finish
/// in the same millisecond, so neither overwrites the other.
fn create_log_file(workdir: &Path, logs_dir: &Path) -> Option<(PathBuf, tokio::fs::File)> {
    let base = unix_ms();
    for offset in 0..LOG_NAME_ATTEMPTS {
        let name = format!("shell-{}.log", base.saturating_add(offset));
        match create_log(workdir, logs_dir, &name) {
            Ok((path, file)) => return Some((path, tokio::fs::File::from_std(file))),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(_) => return None,
        }
    }
    None
}

/// Removes a log the host created, beneath the workdir: a folder on the way may since
/// have become a link. Best effort.
pub(super) fn remove_log(workdir: &Path, path: &Path) {
    let workdir = std::path::absolute(workdir).unwrap_or_else(|_| workdir.to_path_buf());
    if let Ok(rel) = path.strip_prefix(&workdir) {
        let _ = crate::rooted::Rooted::open(&workdir)
            .and_then(|view| view.remove_file(&rel.to_string_lossy()));
    }
}

/// A new file `name` in `logs_dir`, created beneath `workdir` (never through a link that
/// leads out, never over anything already there), and its absolute path.
pub(super) fn create_log(
    workdir: &Path,
    logs_dir: &Path,
    name: &str,
) -> std::io::Result<(PathBuf, std::fs::File)> {
    let inside = logs_dir.strip_prefix(workdir).map_err(|_| {
        std::io::Error::other(format!(
            "{} is not inside the workdir {}",
            logs_dir.display(),
            workdir.display()
        ))
    })?;
    let rel = inside.join(name);
    let file = crate::rooted::Rooted::open(workdir)?.create_new(&rel.to_string_lossy())?;
    let dir = std::path::absolute(logs_dir).unwrap_or_else(|_| logs_dir.to_path_buf());
    Ok((dir.join(name), file))
}

pub(super) fn unix_ms() -> u64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
}
