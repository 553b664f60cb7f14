//! A foreground command's output: both pipes read at once, the first bytes of each kept
//! for the result and, past the cap, the whole stream spilled to a file for the log.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};

use super::ShellRequest;
use super::logs::{create_log, remove_log, unix_ms};
use super::process::{KILL_DRAIN, KILL_REAP, Proc, wait_failed};

/// Bytes of each stream kept for the result text; the rest only reaches the log file.
const STREAM_CAP: usize = 16 * 1024;
pub(super) const READ_CHUNK: usize = 8 * 1024;

/// Reads both pipes to their end, then reaps the leader.
pub(super) async fn collect<O, E>(
    child: &mut Proc,
    stdout: &mut O,
    stderr: &mut E,
    out: &mut Capture,
    err: &mut Capture,
) -> Result<ExitStatus, String>
where
    O: AsyncRead + Unpin,
    E: AsyncRead + Unpin,
{
    let (read_out, read_err) = pump_both(stdout, stderr, out, err).await;
    read_out.map_err(|e| format!("failed to read stdout: {e}"))?;
    read_err.map_err(|e| format!("failed to read stderr: {e}"))?;
    child.wait().await.map_err(wait_failed)
}

/// Reads what the killed group left in the pipes, then reaps the leader; both bounded.
/// `None` when the leader could not be reaped in time.
pub(super) async fn drain_after_kill<O, E>(
    child: &mut Proc,
    stdout: &mut O,
    stderr: &mut E,
    out: &mut Capture,
    err: &mut Capture,
) -> Option<ExitStatus>
where
    O: AsyncRead + Unpin,
    E: AsyncRead + Unpin,
{
    let drain = pump_both(stdout, stderr, out, err);
    // Output lost here only shortens the report; the kill already happened.
    let _ = tokio::time::timeout(KILL_DRAIN, drain).await;
    tokio::time::timeout(KILL_REAP, child.wait())
        .await
        .ok()
        .and_then(Result::ok)
}

/// Both pipes at once: reading them in turn would deadlock a command that fills one while
/// the other is being waited on.
async fn pump_both<O, E>(
    stdout: &mut O,
    stderr: &mut E,
    out: &mut Capture,
    err: &mut Capture,
) -> (std::io::Result<()>, std::io::Result<()>)
where
    O: AsyncRead + Unpin,
    E: AsyncRead + Unpin,
{
    tokio::join!(pump(stdout, out), pump(stderr, err))
}

async fn pump<R: AsyncRead + Unpin>(reader: &mut R, capture: &mut Capture) -> std::io::Result<()> {
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let n = reader.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        capture.push(&buf[..n]);
    }
}

/// One output stream: the first [`STREAM_CAP`] bytes in memory, and once the stream passes
/// the cap, all of it in a spill file so memory stays bounded whatever the command prints.
pub(super) struct Capture {
    head: Vec<u8>,
    pub(super) total: u64,
    spill: Option<Spill>,
    /// A spill write failed, so no complete copy of the stream exists for the log.
    spill_failed: bool,
    workdir: PathBuf,
    logs_dir: PathBuf,
    label: &'static str,
}

impl Capture {
    pub(super) fn new(req: &ShellRequest, label: &'static str) -> Self {
        Self {
            head: Vec::new(),
            total: 0,
            spill: None,
            spill_failed: false,
            workdir: req.workdir.clone(),
            logs_dir: req.logs_dir.clone(),
            label,
        }
    }

    /// Synchronous on purpose: nothing awaits between a chunk being read and recorded, which
    /// is what makes `collect` safe to cancel at its timeout.
    fn push(&mut self, chunk: &[u8]) {
        let room = STREAM_CAP.saturating_sub(self.head.len());
        let kept = room.min(chunk.len());
        self.head.extend_from_slice(&chunk[..kept]);
        self.total = self.total.saturating_add(chunk.len() as u64);
        if !self.over_cap() || self.spill_failed {
            return;
        }
        if self.spill.is_none() {
            // The head already holds this chunk's first `kept` bytes.
            self.spill = Spill::create(&self.workdir, &self.logs_dir, self.label, &self.head);
        }
        let written = self
            .spill
            .as_mut()
            .is_some_and(|spill| spill.file.write_all(&chunk[kept..]).is_ok());
        if !written {
            self.spill = None;
            self.spill_failed = true;
        }
    }

    pub(super) fn over_cap(&self) -> bool {
        self.total > STREAM_CAP as u64
    }

    pub(super) fn text(&self) -> String {
        String::from_utf8_lossy(&self.head).into_owned()
    }

    /// Appends the whole stream to `log`. `false` when no complete copy exists or writing fails.
    pub(super) async fn copy_into(&self, log: &mut tokio::fs::File) -> bool {
        if self.spill_failed {
            return false;
        }
        match &self.spill {
            None => log.write_all(&self.head).await.is_ok(),
            // Through the handle that wrote it: the name may since have become a link.
            Some(spill) => match spill.file.try_clone() {
                Ok(file) => {
                    use tokio::io::AsyncSeekExt as _;
                    let mut file = tokio::fs::File::from_std(file);
                    file.seek(std::io::SeekFrom::Start(0)).await.is_ok()
                        && tokio::io::copy(&mut file, log).await.is_ok()
                }
                Err(_) => false,
            },
        }
    }
}

/// A temp file in the logs dir holding one stream's full output; removed when dropped, so an
/// abandoned or finished run leaves only the assembled log behind.
struct Spill {
    workdir: PathBuf,
    path: PathBuf,
    file: std::fs::File,
}

static SPILL_SEQ: AtomicU64 = AtomicU64::new(0);

impl Spill {
    fn create(workdir: &Path, logs_dir: &Path, label: &str, head: &[u8]) -> Option<Self> {
        let seq = SPILL_SEQ.fetch_add(1, Ordering::Relaxed);
        let name = format!(
            ".shell-{}-{}-{seq}-{label}.tmp",
            unix_ms(),
            std::process::id()
        );
        let (path, file) = create_log(workdir, logs_dir, &name).ok()?;
        let mut spill = Self {
            workdir: workdir.to_path_buf(),
            path,
            file,
        };
        spill.file.write_all(head).ok()?;
        Some(spill)
    }
}

impl Drop for Spill {
    fn drop(&mut self) {
        // Best effort: a leftover temp file is harmless, and there is no one to report to.
        remove_log(&self.workdir, &self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shell::test_support::{request, run_ok};

    #[tokio::test]
    async fn large_output_is_truncated_and_logged() {
        let command = "head -c 102400 /dev/zero | tr '\\0' a; echo tail >&2";
        let (_scratch, req) = request("bash", command);
        let outcome = run_ok(&req).await;
        assert!(outcome.truncated);
        assert_eq!(outcome.stdout_bytes, 102_400);
        assert_eq!(outcome.stderr_bytes, 5);
        let log_path = outcome.log_path.clone().expect("log written");
        assert!(log_path.is_absolute());
        assert_eq!(log_path.parent(), Some(req.logs_dir.as_path()));
        let name = log_path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let stamp = name
            .strip_prefix("shell-")
            .and_then(|rest| rest.strip_suffix(".log"))
            .expect("shell-<ms>.log");
        assert!(stamp.parse::<u64>().is_ok(), "{name}");

        let log = std::fs::read(&log_path).expect("read log");
        let mut expected = format!("Command: {command}\nExit code: 0\n\nStdout:\n").into_bytes();
        expected.extend(std::iter::repeat_n(b'a', 102_400));
        expected.extend_from_slice(b"\n\nStderr:\ntail\n\n");
        assert!(log == expected, "log content differs ({} bytes)", log.len());

        let head = "a".repeat(STREAM_CAP);
        let expected_text = format!(
            "$ {command}\nExit code: 0\nStdout:\n{head}\nStderr:\ntail\n\n\nOutput truncated. Full output written to {}",
            log_path.display()
        );
        assert_eq!(outcome.text, expected_text);

        let leftovers: Vec<_> = std::fs::read_dir(&req.logs_dir)
            .expect("logs dir")
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect();
        assert_eq!(
            leftovers.len(),
            1,
            "temp spill files removed: {leftovers:?}"
        );
    }

    #[tokio::test]
    async fn exactly_cap_bytes_is_not_truncated() {
        let outcome = run_ok(&request("bash", "head -c 16384 /dev/zero").1).await;
        assert!(!outcome.truncated);
        assert_eq!(outcome.stdout_bytes, 16_384);
        assert_eq!(outcome.log_path, None);
    }

    #[tokio::test]
    async fn both_streams_large_do_not_deadlock() {
        // Writing all of stderr before any stdout blocks forever if the pipes were read in turn.
        let command = "head -c 1048576 /dev/zero >&2; head -c 1048576 /dev/zero";
        let (_scratch, req) = request("bash", command);
        let outcome = run_ok(&req).await;
        assert_eq!(outcome.stdout_bytes, 1_048_576);
        assert_eq!(outcome.stderr_bytes, 1_048_576);
        assert!(outcome.truncated);
        let log = std::fs::metadata(outcome.log_path.expect("log")).expect("stat");
        let header = format!("Command: {command}\nExit code: 0\n\nStdout:\n").len() as u64;
        assert_eq!(
            log.len(),
            header + 2 * 1_048_576 + "\n\nStderr:\n\n".len() as u64
        );
    }

    #[tokio::test]
    async fn truncation_without_log_says_so() {
        let (_scratch, mut req) = request("bash", "head -c 20000 /dev/zero");
        let blocker = req.logs_dir.clone();
        // A regular file where the logs dir should be makes every log write fail.
        std::fs::write(&blocker, "").expect("write blocker");
        req.logs_dir = blocker.join("logs");
        let outcome = run_ok(&req).await;
        assert!(outcome.truncated);
        assert_eq!(outcome.log_path, None);
        assert!(outcome.text.ends_with("\nStderr:\n\n\nOutput truncated."));
    }

    #[tokio::test]
    async fn invalid_utf8_is_decoded_lossily() {
        let outcome = run_ok(&request("bash", "printf 'a\\377b'").1).await;
        assert!(outcome.text.contains("Stdout:\na\u{FFFD}b\nStderr:"));
    }
}
