//! What writing a queued task down before it is acknowledged costs
//! (`cargo bench -p mur --bench backlog`): the release `mur serve` on 127.0.0.1, one
//! capsule whose first task blocks (its bash call sleeps), then `TASKS` more sent
//! with A2A `SendMessage` (`returnImmediately`), each timed from connecting to having
//! read the whole answer: every one is accepted into the queue, so each answer waits
//! for its `queued` line to be written and synced. Servers run alternately with the
//! backlog and without it (`MUR_BENCH_NO_BACKLOG`, which only this benchmark sets),
//! `ROUNDS` of each; the figure is the difference of the medians. Beside it, the bare
//! mechanism on the same disk: an append of a line of the same size and its
//! `fdatasync`, `SYNCS` times.
//!
//! `--data` lives under `target/`, on the disk a server's data would be on.
//! `MUR_BENCH_BACKLOG_DIR` puts it elsewhere (say `/dev/shm`, to see the cost without
//! a disk). Results are plain lines on stdout.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const TASKS: usize = 200;
const ROUNDS: usize = 3;
const SYNCS: usize = 1000;
const LIMIT: Duration = Duration::from_secs(120);

fn root() -> PathBuf {
    match std::env::var_os("MUR_BENCH_BACKLOG_DIR") {
        Some(dir) => PathBuf::from(dir).join("mur-bench-backlog"),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap()
            .join("target")
            .join("bench-backlog"),
    }
}

/// A `mur serve`, killed (with the command its capsule left sleeping) when dropped.
struct Server {
    child: Child,
    addr: String,
    admin: String,
    marker: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for pid in running(&self.marker) {
            // SAFETY: kill takes plain integers; the pid runs this bench's own marker.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

fn serve(dir: &Path, backlog: bool, marker: &str) -> Server {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mur"));
    if !backlog {
        cmd.env("MUR_BENCH_NO_BACKLOG", "1");
    }
    let mut child = cmd
        .args(["serve", "--json", "--bind", "127.0.0.1", "--port", "0"])
        .arg("--data")
        .arg(dir.join("data"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join("mur.stderr")).unwrap())
        .spawn()
        .expect("mur serve starts");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let _ = stdout.read_line(&mut line);
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let launch: Value = serde_json::from_str(&line).unwrap_or_else(|_| {
        let _ = child.kill();
        panic!("mur serve printed no launch line: {line:?}")
    });
    let addr = launch["address"].as_str().unwrap()["http://".len()..].to_string();
    let admin = std::fs::read_to_string(dir.join("data").join("admin-token")).unwrap();
    Server {
        child,
        addr,
        admin: admin.trim().to_string(),
        marker: marker.to_string(),
    }
}

/// One request answered and closed: the status code and the body.
fn exchange(addr: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut socket = TcpStream::connect(addr).unwrap();
    socket.set_read_timeout(Some(LIMIT)).unwrap();
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    socket.write_all(request.as_bytes()).unwrap();
    let mut reply = String::new();
    socket.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, body.to_string())
}

/// Creates the capsule; its address's path and its token.
fn create(server: &Server, dir: &Path) -> (String, String) {
    let script = dir.join("script.yaml");
    let command = format!("exec sleep {}", server.marker);
    std::fs::write(
        &script,
        format!("turns:\n  - tool_calls: [{{id: t1, name: bash, input: {{command: {command:?}}}}}]\n  - text: done\n"),
    )
    .unwrap();
    let manifest = format!(
        "name: backlog-bench\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  script: {}\n  model: bench\ncapabilities:\n  shell:\n    allow: [bash]\nlifecycle:\n  task_acceptance: queue\n  after_task: sleep\n  queue_depth: {}\n",
        script.display(),
        TASKS + 1
    );
    let auth = format!("Bearer {}", server.admin);
    let (status, body) = exchange(
        &server.addr,
        "/admin/capsules",
        &[("authorization", &auth)],
        &json!({ "manifest": manifest }).to_string(),
    );
    assert_eq!(status, 201, "{body}");
    let created: Value = serde_json::from_str(&body).unwrap();
    (
        created["path"].as_str().unwrap().to_string(),
        created["token"].as_str().unwrap().to_string(),
    )
}

/// `SendMessage` answered at once; the task's state.
fn send(server: &Server, path: &str, token: &str, n: usize) -> String {
    let body = json!({"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {
        "message": {"messageId": format!("m-{n}"), "role": "ROLE_USER",
            "parts": [{"text": format!("task number {n}: summarise what the workdir holds")}]},
        "configuration": {"returnImmediately": true}}})
    .to_string();
    let auth = format!("Bearer {token}");
    let (status, answer) = exchange(
        &server.addr,
        path,
        &[("authorization", &auth), ("a2a-version", "1.0")],
        &body,
    );
    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    let task = answer["result"].get("task").unwrap_or(&answer["result"]);
    task["status"]["state"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// One server: the microseconds each accepted task's `SendMessage` took.
fn round(backlog: bool, n: usize) -> Vec<f64> {
    let dir = root().join(format!("round-{n}-{backlog}"));
    let marker = format!("600.{}{n}", std::process::id());
    let server = serve(&dir, backlog, &marker);
    let (path, token) = create(&server, &dir);
    // The first task runs (and blocks): every later one waits in the queue.
    send(&server, &path, &token, 0);
    let until = Instant::now() + LIMIT;
    while running(&marker).is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut samples = Vec::with_capacity(TASKS);
    for n in 1..=TASKS {
        let started = Instant::now();
        let state = send(&server, &path, &token, n);
        samples.push(started.elapsed().as_secs_f64() * 1e6);
        assert_eq!(state, "TASK_STATE_SUBMITTED", "task {n} was queued");
    }
    let queue = dir.join("data").join("capsules");
    let files = walk(&queue, "queue.jsonl");
    assert_eq!(files.is_empty(), !backlog, "{files:?}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    samples
}

/// The pids of the processes with `marker` among their arguments (the first task's
/// `sleep`, in whatever namespace its sandbox gave it).
fn running(marker: &str) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<i32>().ok()?;
            let args = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            args.split(|b| *b == 0)
                .any(|a| a == marker.as_bytes())
                .then_some(pid)
        })
        .collect()
}

fn walk(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path, name));
        } else if path.file_name().is_some_and(|n| n == name) {
            found.push(path);
        }
    }
    found
}

/// The bare mechanism: an append of `bytes` and its `fdatasync`, in microseconds.
fn syncs(bytes: usize) -> Vec<f64> {
    let dir = root().join("syncs");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("queue.jsonl"))
        .unwrap();
    let line = format!("{}\n", "x".repeat(bytes.saturating_sub(1)));
    let samples = (0..SYNCS)
        .map(|_| {
            let started = Instant::now();
            file.write_all(line.as_bytes()).unwrap();
            file.sync_data().unwrap();
            started.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    samples
}

fn median(samples: &[f64]) -> f64 {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

fn p90(samples: &[f64]) -> f64 {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    s[(s.len() * 9).div_ceil(10).max(1) - 1]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    std::fs::create_dir_all(root()).unwrap();
    println!("backlog bench: data under {}", root().display());
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for n in 0..ROUNDS {
        // Alternated, so the machine's drift falls on both alike.
        with.extend(round(true, n));
        without.extend(round(false, n));
    }
    let (m_with, m_without) = (median(&with), median(&without));
    println!(
        "SendMessage (queued), with the backlog:    median {m_with:.0} us, p90 {:.0} us ({} tasks)",
        p90(&with),
        with.len()
    );
    println!(
        "SendMessage (queued), without the backlog: median {m_without:.0} us, p90 {:.0} us ({} tasks)",
        p90(&without),
        without.len()
    );
    println!(
        "write-before-ack: median {:.0} us per accepted task",
        m_with - m_without
    );
    let bare = syncs(330);
    println!(
        "bare append + fdatasync of a 330-byte line: median {:.0} us, p90 {:.0} us ({SYNCS} times)",
        median(&bare),
        p90(&bare)
    );
}
