//! One harness run as a process: started confined like an MCP server (the capsule's
//! class, namespaces, rlimits, seccomp, its own Landlock ruleset with its installation
//! and its home), its output read line by line within bounds, its standard error kept
//! in its log and the end of it for the exit's classification, and stopped by
//! interrupting it, then killing it with everything it started.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::mpsc;

use crate::confine::spawn::{self, Process};
use crate::confine::{Confined, Installation, Jail};

/// The longest line read whole; a longer one is skipped to its end and reported.
pub const MAX_LINE: usize = 4 * 1024 * 1024;
/// How much of the end of standard error is kept for `classify-exit`.
const STDERR_TAIL: usize = 4096;
/// Lines read ahead of the run: at most this many of [`MAX_LINE`] wait in memory.
const LINES_AHEAD: usize = 8;
/// How long the harness has to read what its plan writes to its standard input.
const INPUT_WITHIN: Duration = Duration::from_secs(10);
/// How long an interrupted harness has to exit before it is killed.
pub const INTERRUPT_GRACE: Duration = Duration::from_millis(700);

/// What the harness printed, one line at a time.
pub enum Line {
    Text(String),
    /// A line longer than [`MAX_LINE`], of this many bytes, was skipped.
    TooLong(usize),
    /// A line that is not UTF-8 was skipped.
    NotText,
}

/// What to start.
pub struct Start<'a> {
    pub program: &'a str,
    pub args: &'a [String],
    pub env: &'a [(String, String)],
    pub cwd: &'a std::path::Path,
    pub installation: &'a Installation,
    pub stdin: Option<&'a str>,
    pub keep_stdin_open: bool,
    /// Where its standard error goes.
    pub log: crate::guest_log::Target,
}

/// A started harness. Dropped, it is killed with everything it started.
pub struct Running {
    process: Process,
    _confined: Confined,
    stdin: Option<pipe::Sender>,
    pub lines: mpsc::Receiver<Line>,
    stderr: Arc<Mutex<Vec<u8>>>,
    stderr_done: tokio::task::JoinHandle<()>,
}

/// Starts the harness in `jail`, or as a plain process in a group of its own when the
/// capsule's class is `advisory`.
///
/// # Errors
///
/// It could not be started, in words.
pub async fn start(jail: &Arc<Jail>, start: Start<'_>) -> Result<Running, String> {
    let request = spawn::Request {
        program: start.program,
        args: start.args,
        env: start.env,
        cwd: start.cwd,
    };
    let (served, confined) = jail.spawn_server(&request, start.installation).await?;
    // Its output is read before its input is written: a harness that prints before it
    // reads cannot block the write.
    let (tx, lines) = mpsc::channel(LINES_AHEAD);
    tokio::spawn(read_lines(served.stdout, tx));
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let stderr_done = tokio::spawn(keep_stderr(served.stderr, stderr.clone(), start.log));
    let mut stdin = Some(served.stdin);
    if let (Some(text), Some(pipe)) = (start.stdin, stdin.as_mut()) {
        let written = tokio::time::timeout(INPUT_WITHIN, pipe.write_all(text.as_bytes())).await;
        match written {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("could not write the harness's input: {e}")),
            Err(_) => {
                return Err(format!(
                    "the harness did not read its input within {} s",
                    INPUT_WITHIN.as_secs()
                ));
            }
        }
    }
    if !start.keep_stdin_open {
        stdin = None;
    }
    Ok(Running {
        process: served.process,
        _confined: confined,
        stdin,
        lines,
        stderr,
        stderr_done,
    })
}

impl Running {
    /// Asks the harness to stop: `SIGINT`, or its standard input closed.
    pub fn interrupt(&mut self, by_signal: bool) {
        if by_signal {
            self.process.interrupt();
        } else {
            self.stdin = None;
        }
    }

    /// Waits at most `within` for it to exit; past that (or if waiting fails) it is
    /// killed. `None` for a harness that had to be killed.
    pub async fn exit(mut self, within: Duration) -> (Option<std::process::ExitStatus>, String) {
        self.stdin = None;
        let status = tokio::time::timeout(within, self.process.wait())
            .await
            .ok()
            .and_then(Result::ok);
        // Dropping the process kills what is left: its namespace, or its group.
        drop(self.process);
        drop(self._confined);
        let _ = tokio::time::timeout(Duration::from_millis(200), self.stderr_done).await;
        let tail = self.stderr.lock().map(|t| t.clone()).unwrap_or_default();
        (status, String::from_utf8_lossy(&tail).into_owned())
    }
}

async fn read_lines(mut stdout: pipe::Receiver, tx: mpsc::Sender<Line>) {
    let mut buffer: Vec<u8> = Vec::new();
    // Bytes of a line being skipped for its length, or `None` while reading one.
    let mut skipping: Option<usize> = None;
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match stdout.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut rest = &chunk[..n];
        while let Some(at) = rest.iter().position(|b| *b == b'\n') {
            let (head, tail) = rest.split_at(at);
            rest = &tail[1..];
            let line = match skipping.take() {
                Some(skipped) => Line::TooLong(skipped + head.len()),
                None if buffer.len() + head.len() > MAX_LINE => {
                    let long = buffer.len() + head.len();
                    buffer = Vec::new();
                    Line::TooLong(long)
                }
                None => {
                    buffer.extend_from_slice(head);
                    whole(std::mem::take(&mut buffer))
                }
            };
            if tx.send(line).await.is_err() {
                return;
            }
        }
        match &mut skipping {
            Some(skipped) => *skipped += rest.len(),
            None if buffer.len() + rest.len() > MAX_LINE => {
                skipping = Some(buffer.len() + rest.len());
                buffer = Vec::new();
            }
            None => buffer.extend_from_slice(rest),
        }
    }
    if let Some(skipped) = skipping {
        let _ = tx.send(Line::TooLong(skipped)).await;
    } else if !buffer.is_empty() {
        let _ = tx.send(whole(buffer)).await;
    }
}

fn whole(bytes: Vec<u8>) -> Line {
    let bytes = match bytes.last() {
        Some(b'\r') => bytes[..bytes.len() - 1].to_vec(),
        _ => bytes,
    };
    match String::from_utf8(bytes) {
        Ok(text) => Line::Text(text),
        Err(_) => Line::NotText,
    }
}

/// Copies standard error into the harness's log and keeps its end.
async fn keep_stderr(
    mut stderr: pipe::Receiver,
    tail: Arc<Mutex<Vec<u8>>>,
    log: crate::guest_log::Target,
) {
    let output = crate::guest_log::Output::new(&log);
    let mut sink = output.stderr();
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let n = match stderr.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let _ = sink.write_all(&chunk[..n]).await;
        if let Ok(mut kept) = tail.lock() {
            kept.extend_from_slice(&chunk[..n]);
            if kept.len() > STDERR_TAIL {
                let cut = kept.len() - STDERR_TAIL;
                kept.drain(..cut);
            }
        }
    }
    let _ = sink.flush().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines_of(pieces: Vec<Vec<u8>>) -> Vec<String> {
        let (mut writer, reader) = {
            let (r, w) = std::io::pipe().expect("pipe");
            let w = pipe::Sender::from_owned_fd(std::os::fd::OwnedFd::from(w)).expect("sender");
            let r = pipe::Receiver::from_owned_fd(std::os::fd::OwnedFd::from(r)).expect("receiver");
            (w, r)
        };
        let (tx, mut rx) = mpsc::channel(4);
        let reading = tokio::spawn(read_lines(reader, tx));
        let writing = tokio::spawn(async move {
            for piece in pieces {
                writer.write_all(&piece).await.expect("write");
            }
        });
        let mut seen = Vec::new();
        while let Some(line) = rx.recv().await {
            seen.push(match line {
                Line::Text(t) if t.len() > 100 => format!("<text of {} bytes>", t.len()),
                Line::Text(t) => t,
                Line::TooLong(n) => format!("<too long: {n}>"),
                Line::NotText => "<not text>".into(),
            });
        }
        writing.await.expect("writer");
        reading.await.expect("reader");
        seen
    }

    #[tokio::test]
    async fn lines_are_cut_at_newlines_and_a_flood_is_skipped_not_kept() {
        let seen = lines_of(vec![b"one\ntw".to_vec(), b"o\r\n\xff\xfe\nlast".to_vec()]).await;
        assert_eq!(seen, ["one", "two", "<not text>", "last"]);
        let flood = vec![b'x'; MAX_LINE + 10];
        let seen = lines_of(vec![flood.clone(), b"\nafter\n".to_vec()]).await;
        assert_eq!(
            seen,
            [format!("<too long: {}>", MAX_LINE + 10), "after".into()]
        );
    }
}
