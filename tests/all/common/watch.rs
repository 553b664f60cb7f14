//! `mur watch` run in the background by a test, read as it prints.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use super::{Run, mur};

/// How long a background `mur watch` may take to attach, and to print what a test
/// waits for.
const WATCH_WAIT: Duration = Duration::from_secs(60);

/// A `mur watch` in the background: its stderr read line by line and its stdout piece
/// by piece, as they come. Killed when dropped.
pub struct Watch {
    child: Child,
    /// Its stderr, a line at a time.
    pub stderr: Receiver<String>,
    /// Pieces of stdout as they are read; `None` when the reader closed it.
    stdout: Option<Receiver<String>>,
    /// What stdout said so far.
    seen: String,
}

impl Watch {
    /// `mur watch <address> [--token T]`. With `read_stdout` false its stdout is closed
    /// before anything is written to it, as by a reader that went away.
    pub fn start(address: &str, token: Option<&str>, read_stdout: bool) -> Watch {
        let mut cmd = mur();
        cmd.args(["watch", address])
            .args(token.map(|t| ["--token", t]).into_iter().flatten());
        Watch::start_with(cmd, read_stdout)
    }

    /// `cmd`, a whole `mur watch ...` command line, in the background.
    pub fn start_with(mut cmd: Command, read_stdout: bool) -> Watch {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mur watch starts");
        let (tx, stderr) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let out = child.stdout.take().unwrap();
        let stdout = if read_stdout {
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let mut out = out;
                let mut chunk = [0u8; 4096];
                while let Ok(n) = out.read(&mut chunk) {
                    if n == 0
                        || tx
                            .send(String::from_utf8_lossy(&chunk[..n]).into_owned())
                            .is_err()
                    {
                        break;
                    }
                }
            });
            Some(rx)
        } else {
            drop(out);
            None
        };
        Watch {
            child,
            stderr,
            stdout,
            seen: String::new(),
        }
    }

    /// Waits for the start line, printed once the capsule answered the watch: from
    /// then on every frame the capsule writes reaches it.
    pub fn attached(&self) -> String {
        let line = self
            .stderr
            .recv_timeout(WATCH_WAIT)
            .expect("mur watch printed its start line");
        assert!(line.starts_with("[murmur] watching "), "{line}");
        line
    }

    /// Waits until stdout holds `needle`, so the watch has printed that far.
    pub fn printed(&mut self, needle: &str) {
        let deadline = Instant::now() + WATCH_WAIT;
        let rx = self.stdout.as_ref().expect("stdout is read");
        while !self.seen.contains(needle) {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(piece) => self.seen.push_str(&piece),
                Err(_) => panic!(
                    "mur watch never printed {needle:?}; it printed:\n{}",
                    self.seen
                ),
            }
        }
    }

    /// Its exit code, all it printed and the rest of its stderr; it must exit within
    /// `within` of the call (else it is killed and the test fails).
    pub fn finish(mut self, within: Duration) -> Run {
        let deadline = Instant::now() + within;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "mur watch did not exit within {within:?}; it printed:\n{}",
                    self.seen
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Some(rx) = &self.stdout {
            // The reader ends at the pipe's end, which the exit has closed.
            while let Ok(piece) = rx.recv_timeout(WATCH_WAIT) {
                self.seen.push_str(&piece);
            }
        }
        let stdout = std::mem::take(&mut self.seen);
        let mut stderr = String::new();
        while let Ok(line) = self.stderr.recv_timeout(Duration::from_secs(5)) {
            stderr.push_str(&line);
            stderr.push('\n');
        }
        Run {
            status: status.code().unwrap_or(-1),
            stdout,
            stderr,
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
