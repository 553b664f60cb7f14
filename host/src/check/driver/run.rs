//! One capsule serving one task over the wire, for the driver and hook scenarios: this
//! same binary as `mur run --json --port 0` in a scratch directory (no task on the
//! command line, so the capsule takes one task over HTTP and ends), the task sent as
//! `message/stream`, and everything a user sees kept: the frames, the exit status,
//! stderr, and the session's trace (from `--records`, outside the capsule's workdir).
//! Every wait is bounded; a capsule that outlives its bound is killed.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A directory of its own for one run, removed when dropped.
pub struct Scratch {
    pub dir: PathBuf,
}

impl Scratch {
    pub fn new(what: &str) -> Result<Scratch, String> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("mur-check-{what}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("no scratch directory at {}: {e}", dir.display()))?;
        Ok(Scratch { dir })
    }

    /// A file of the capsule (its manifest, a script) before it runs.
    pub fn write(&self, rel: &str, text: &str) -> Result<(), String> {
        let path = self.dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// `records/`: the host's records of the runs, hook scope folders among them.
    pub fn records(&self) -> PathBuf {
        self.dir.join("records")
    }

    /// Runs `murmur.yaml` as a single capsule, sends it `task` and reads the stream to
    /// its end; all within `limit`. `Err` when the run could not be observed at all.
    pub fn stream_one(self, task: &str, limit: Duration) -> Result<Ran, String> {
        let deadline = Instant::now() + limit;
        let exe = std::env::current_exe().map_err(|e| format!("cannot find mur itself: {e}"))?;
        let mut child = Command::new(exe)
            .args(["run", "--json", "--port", "0", "--manifest"])
            .arg(self.dir.join("murmur.yaml"))
            .arg("--workdir")
            .arg(self.dir.join("wd"))
            .arg("--records")
            .arg(self.records())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start mur run: {e}"))?;
        let stderr = drain(child.stderr.take());
        let launch = launch_line(&mut child, deadline);
        let launch = match launch {
            Ok(launch) => launch,
            Err(why) => {
                let status = finish(&mut child, deadline);
                let stderr = stderr.join().unwrap_or_default();
                return Ok(Ran::unstarted(self, status, stderr, why));
            }
        };
        let body = launch["address"]
            .as_str()
            .map(|a| a.trim_start_matches("http://").to_string())
            .ok_or_else(|| format!("the launch line has no address: {launch}"))
            .and_then(|address| exchange(&address, task, deadline));
        let status = finish(&mut child, deadline);
        let stderr = stderr.join().unwrap_or_default();
        let records = launch["records_dir"].as_str().map(PathBuf::from);
        let (frames, problem) = match body {
            Ok(body) => (frames(&body), None),
            Err(why) => (Vec::new(), Some(why)),
        };
        Ok(Ran {
            _scratch: self,
            status,
            stderr,
            frames,
            records,
            problem,
        })
    }
}

impl Drop for Scratch {
    /// `MUR_CHECK_KEEP=1` keeps the directory, to read what a scenario saw.
    fn drop(&mut self) {
        if std::env::var_os("MUR_CHECK_KEEP").is_some() {
            return;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One frame of the stream.
#[derive(Debug, Clone)]
pub struct Frame {
    pub event: String,
    pub data: Value,
}

/// What a run left for a user to see.
pub struct Ran {
    /// Kept until the run has been judged: its records are in there.
    _scratch: Scratch,
    /// The exit status; `None` when it was killed at its bound.
    pub status: Option<i32>,
    pub stderr: String,
    pub frames: Vec<Frame>,
    /// The session's records (`trace.jsonl`, `logs/`), from the launch line.
    pub records: Option<PathBuf>,
    /// Why the stream could not be read, when it could not.
    pub problem: Option<String>,
}

impl Ran {
    fn unstarted(scratch: Scratch, status: Option<i32>, stderr: String, why: String) -> Ran {
        Ran {
            _scratch: scratch,
            status,
            stderr,
            frames: Vec::new(),
            records: None,
            problem: Some(why),
        }
    }

    /// The trace, read after the process ended; unreadable lines are skipped.
    pub fn trace(&self) -> Vec<Value> {
        let Some(records) = &self.records else {
            return Vec::new();
        };
        std::fs::read_to_string(records.join("trace.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The trace lines of one `event_type`.
    pub fn lines(&self, kind: &str) -> Vec<Value> {
        self.trace()
            .into_iter()
            .filter(|l| l["event_type"] == kind)
            .collect()
    }

    /// A file of the session's records (`logs/hook-x.log`); empty when absent.
    pub fn record(&self, rel: &str) -> String {
        self.records
            .as_ref()
            .and_then(|r| std::fs::read_to_string(r.join(rel)).ok())
            .unwrap_or_default()
    }

    fn last_status(&self) -> Option<&Value> {
        self.frames
            .iter()
            .rev()
            .find(|f| f.event == "status")
            .map(|f| &f.data["status"])
    }

    /// The state of the last status frame (`completed`, `failed`, ...).
    pub fn final_state(&self) -> Option<String> {
        self.last_status()
            .and_then(|s| s["state"].as_str())
            .map(str::to_string)
    }

    /// The completed task's answer.
    pub fn response(&self) -> String {
        self.last_status()
            .and_then(|s| s["response"].as_str())
            .unwrap_or_default()
            .to_string()
    }

    /// Why the task failed, in the host's words: its `task_failed` reason, else the
    /// failed inference's error, else the last status message.
    pub fn failure(&self) -> String {
        let trace = self.trace();
        let said = |kind: &str, key: &str| {
            trace
                .iter()
                .rev()
                .find(|l| l["event_type"] == kind && l[key].is_string())
                .and_then(|l| l[key].as_str())
                .map(str::to_string)
        };
        said("task_failed", "reason")
            .or_else(|| said("inference", "error"))
            .or_else(|| {
                self.last_status()
                    .and_then(|s| s["message"].as_str())
                    .map(str::to_string)
            })
            .unwrap_or_default()
    }

    /// The text of each non-final `text` frame, in order.
    pub fn text_pieces(&self) -> Vec<String> {
        self.frames
            .iter()
            .filter(|f| f.event == "text" && f.data["final"] != true)
            .map(|f| f.data["text"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// How the run ended, for a failure message.
    pub fn ending(&self) -> String {
        let status = match self.status {
            Some(code) => format!("mur exited {code}"),
            None => "mur was stopped at its time limit".to_string(),
        };
        let mut out = match self.final_state() {
            Some(state) if state == "completed" => format!("completed ({status})"),
            Some(state) => format!("ended {state}: {} ({status})", self.failure()),
            None => format!("sent no final status ({status})"),
        };
        if let Some(problem) = &self.problem {
            out.push_str(&format!("; {problem}"));
        }
        if let Some(error) = self.stderr.lines().find(|l| l.starts_with("error[")) {
            out.push_str(&format!("; {error}"));
        }
        out
    }
}

/// Reads stderr to its end on a thread of its own, so a chatty child never blocks.
fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut pipe) = pipe {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        text
    })
}

/// The `--json` launch line, waited for until `deadline`.
fn launch_line(child: &mut Child, deadline: Instant) -> Result<Value, String> {
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let _ = reader.read_line(&mut line);
        let _ = tx.send(line);
        // Keep reading, so the child never blocks on a full pipe.
        let _ = std::io::copy(&mut reader, &mut std::io::sink());
    });
    let left = deadline.saturating_duration_since(Instant::now());
    match rx.recv_timeout(left) {
        Ok(line) if line.trim().is_empty() => Err("mur run did not start".into()),
        Ok(line) => serde_json::from_str(&line)
            .map_err(|e| format!("the launch line is not JSON ({e}): {line}")),
        Err(_) => Err("mur run printed no launch line in time".into()),
    }
}

/// Posts `message/stream` with `task` and reads the answer until the server closes;
/// the event stream's body.
fn exchange(address: &str, task: &str, deadline: Instant) -> Result<String, String> {
    let mut socket =
        TcpStream::connect(address).map_err(|e| format!("cannot reach {address}: {e}"))?;
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "message/stream",
        "params": {"message": {"messageId": "check-1", "role": "user", "parts": [{"text": task}]}}
    })
    .to_string();
    let request = format!(
        "POST / HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    socket
        .write_all(request.as_bytes())
        .map_err(|e| format!("cannot send the task: {e}"))?;
    let mut out = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("the task's stream did not end in time".into());
        }
        let _ = socket.set_read_timeout(Some(left));
        match socket.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading the task's stream: {e}")),
        }
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    match text.split_once("\r\n\r\n") {
        Some((_, body)) => Ok(body.to_string()),
        None => Err(format!("no HTTP answer to the task: {text:?}")),
    }
}

fn frames(body: &str) -> Vec<Frame> {
    crate::sse::FrameReader::default()
        .feed(body.as_bytes())
        .into_iter()
        .filter_map(|e| {
            let data = serde_json::from_str(&e.data).ok()?;
            Some(Frame {
                event: e.event,
                data,
            })
        })
        .collect()
}

/// The child's exit status, waited for until `deadline`; past it the child is killed.
fn finish(child: &mut Child, deadline: Instant) -> Option<i32> {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.code(),
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// A path as a quoted YAML scalar, for an artifact's `source`.
pub fn source(path: &Path) -> String {
    json!(path.to_string_lossy()).to_string()
}
