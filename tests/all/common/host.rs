//! Where a seed test's capsule runs: in a `mur run` of its own, at `/`, or hosted by a
//! `mur serve`, at `/c/<id>/` behind its token. The seed protocol is the same at both
//! addresses, so the seed tests are compiled twice (`stream` and `stream_served`, one
//! file) and ask this module for their capsule; what only one host shows (a process's
//! exit status, the admin API's state) is read through accessors that mean the same
//! thing under both.
//!
//! The `mur serve` harness here is the minimum the seed tests need: one server per
//! capsule (so the environment a test sets reaches only its capsule), created from a
//! manifest on disk, its state read through the admin API.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Capsule, LIMIT, Running, Session, mur, read_to_close, scratch, wait_bounded};

/// Which host a test module's capsules run under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Host {
    /// `mur run`, one process per capsule.
    Run,
    /// A capsule created in a `mur serve`.
    Serve,
}

impl Host {
    /// The host a module asks for by its name: a module whose name ends in `_served`
    /// (the seed file compiled a second time, see `main.rs`) hosts its capsules in a
    /// `mur serve`; any other runs them with `mur run`. Pass `module_path!()`.
    pub fn of_module(module_path: &str) -> Host {
        let name = module_path.rsplit("::").next().unwrap_or(module_path);
        if name.ends_with("_served") {
            Host::Serve
        } else {
            Host::Run
        }
    }
}

/// Where a capsule's requests go.
#[derive(Clone, Debug)]
pub struct At {
    /// `HOST:PORT`, what a socket connects to.
    pub address: String,
    /// The capsule's path: `/` under `mur run`, `/c/<id>/` under `mur serve`.
    pub path: String,
    /// `Bearer <token>` when the address wants a token.
    pub authorization: Option<String>,
}

impl At {
    /// `headers`, with the capsule's token first when it has one: every request a
    /// seed test sends is one its capsule's owner could send.
    pub fn headers<'a>(&'a self, headers: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut all = Vec::with_capacity(headers.len() + 1);
        if let Some(token) = &self.authorization {
            all.push(("authorization", token.as_str()));
        }
        all.extend_from_slice(headers);
        all
    }

    /// The bytes of a `method` request to the capsule's path with `suffix` appended
    /// (`""` for the address itself), its token and `headers`, and `body`.
    pub fn request(
        &self,
        method: &str,
        suffix: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> String {
        let mut request = format!(
            "{method} {}{suffix} HTTP/1.1\r\nhost: {}\r\n",
            self.path, self.address
        );
        if method != "GET" || !body.is_empty() {
            request.push_str(&format!("content-length: {}\r\n", body.len()));
        }
        for (name, value) in self.headers(headers) {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(body);
        request
    }

    /// The address as `mur watch` and `mur stop` take it: `http://HOST:PORT` for a
    /// `mur run`, `http://HOST:PORT/c/<id>/` for a hosted capsule.
    pub fn url(&self) -> String {
        let path = if self.path == "/" { "" } else { &self.path };
        format!("http://{}{path}", self.address)
    }

    /// The token alone, for `mur watch --token` and `mur stop --token`.
    pub fn token(&self) -> Option<&str> {
        self.authorization
            .as_deref()
            .and_then(|a| a.strip_prefix("Bearer "))
    }
}

/// A capsule started under one host or the other; it goes away when dropped.
pub struct Live {
    pub at: At,
    how: How,
}

enum How {
    Run(Running),
    Serve {
        server: Server,
        id: String,
        session: Session,
    },
}

impl Live {
    /// Starts `capsule` as `mur run --manifest <its murmur.yaml> <args>` would, with
    /// `env` set for the `mur` process. Under `mur serve` the environment goes to the
    /// server (one per capsule) and the lifecycle flags in `args` become the manifest's
    /// `lifecycle` keys; any other flag has no hosted equivalent and fails the test.
    pub fn start(host: Host, capsule: &Capsule, args: &[&str], env: &[(&str, &str)]) -> Live {
        match host {
            Host::Run => {
                let running = capsule.spawn_env(args, env);
                let at = At {
                    address: running.address.clone(),
                    path: "/".to_string(),
                    authorization: None,
                };
                Live {
                    at,
                    how: How::Run(running),
                }
            }
            Host::Serve => {
                let server = Server::start(env);
                let manifest = hosted_manifest(capsule, args);
                let created = server.create(&json!({"path": manifest}));
                let id = created["id"].as_str().expect("an id").to_string();
                let described = server.capsule(&id);
                let session_id = described["session_id"]
                    .as_str()
                    .unwrap_or_else(|| panic!("a running capsule has a session: {described}"));
                let session = Session {
                    id: session_id.to_string(),
                    workdir: PathBuf::from(described["workdir"].as_str().expect("a workdir")),
                    records: server
                        .data
                        .join("capsules")
                        .join(&id)
                        .join("records")
                        .join(session_id),
                };
                // The layout the seed tests read the trace through: a wrong guess here
                // would fail every trace read later, less clearly.
                assert!(
                    session.records.join("trace.jsonl").is_file(),
                    "no trace at {}",
                    session.records.display()
                );
                assert_eq!(created["workdir"], described["workdir"]);
                let at = At {
                    address: server.address.clone(),
                    path: format!("/c/{id}/"),
                    authorization: created["token"].as_str().map(|t| format!("Bearer {t}")),
                };
                Live {
                    at,
                    how: How::Serve {
                        server,
                        id,
                        session,
                    },
                }
            }
        }
    }

    /// What a `mur serve` answers when asked to host `capsule` (started with
    /// `args`) and it must refuse: the status and the error body.
    pub fn refused(capsule: &Capsule, args: &[&str]) -> (u16, Value) {
        let server = Server::start(&[]);
        let manifest = hosted_manifest(capsule, args);
        server.admin("POST", "/admin/capsules", Some(&json!({"path": manifest})))
    }

    /// The session's id, workdir and records: from the launch line of `mur run`, from
    /// the admin API and the records layout of `mur serve`
    /// (`DATA/capsules/<id>/records/<session id>/`).
    pub fn session(&self) -> Session {
        match &self.how {
            How::Run(running) => running.session(),
            How::Serve { session, .. } => Session {
                id: session.id.clone(),
                workdir: session.workdir.clone(),
                records: session.records.clone(),
            },
        }
    }

    /// Whether the capsule still serves: its `mur run` has not exited; its server has
    /// not exited and holds it `running` or `idle`.
    pub fn serving(&mut self) -> bool {
        match &mut self.how {
            How::Run(running) => running.child.try_wait().unwrap().is_none(),
            How::Serve { server, id, .. } => {
                server.child.try_wait().unwrap().is_none()
                    && matches!(
                        server.capsule(id)["state"].as_str(),
                        Some("running" | "idle")
                    )
            }
        }
    }

    /// Waits, at most `within`, for the session to end by itself (after its task, or
    /// through `murmur/stop`), and checks that it ended cleanly: `mur run` exits with
    /// status 0; a hosted capsule turns `ended` with the reason `session ended: ok`
    /// and its address answers 503 naming why, while the server goes on. Returns
    /// what the `mur` process wrote to stderr (for a server: so far).
    pub fn ends_cleanly(self, within: Duration) -> String {
        match self.how {
            How::Run(running) => {
                let run = running.wait(within);
                assert_eq!(run.status, 0, "{}", run.stderr);
                run.stderr
            }
            How::Serve { mut server, id, .. } => {
                let ended = server.until_state(&id, within, |s| s != "running" && s != "idle");
                assert_eq!(
                    (ended["state"].as_str(), ended["reason"].as_str()),
                    (Some("ended"), Some("session ended: ok")),
                    "{ended}\nserver stderr:\n{}",
                    server.stderr()
                );
                let reply = exchange(&self.at, &self.at.request("POST", "", &[JSON], WATCH));
                let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32000, "message": format!("capsule {id} has ended its session")}}).to_string();
                assert_eq!(
                    reply,
                    format!(
                        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                );
                assert!(
                    server.child.try_wait().unwrap().is_none(),
                    "the server outlives its capsule's session"
                );
                server.stderr()
            }
        }
    }
}

const JSON: (&str, &str) = ("content-type", "application/json");
const WATCH: &str = r#"{"jsonrpc":"2.0","id":1,"method":"stream/watch","params":{}}"#;

/// Sends `request` as written and reads the whole answer, to close (bounded).
fn exchange(at: &At, request: &str) -> String {
    let mut socket = TcpStream::connect(&at.address).unwrap();
    socket.set_write_timeout(Some(LIMIT)).unwrap();
    socket.write_all(request.as_bytes()).unwrap();
    read_to_close(socket)
}

/// The manifest a hosted capsule is created from: the capsule's own, with the lifecycle
/// flags of `mur run` written in as the keys they override, beside the original so
/// that `./script.yaml` and other relative paths name the same files.
fn hosted_manifest(capsule: &Capsule, args: &[&str]) -> PathBuf {
    let original = std::fs::read_to_string(capsule.manifest()).unwrap();
    let path = capsule.dir.join("murmur.served.yaml");
    std::fs::write(&path, with_lifecycle(&original, &lifecycle_keys(args))).unwrap();
    path
}

/// The `lifecycle` keys `mur run`'s flags set.
fn lifecycle_keys(args: &[&str]) -> Vec<(&'static str, String)> {
    let mut keys = Vec::new();
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let key = match *flag {
            "--lifecycle-task-acceptance" => "task_acceptance",
            "--lifecycle-after-task" => "after_task",
            other => {
                panic!("`mur run {other}` has no equivalent for a capsule hosted by mur serve")
            }
        };
        let value = args
            .next()
            .unwrap_or_else(|| panic!("{flag} takes a value"));
        keys.push((key, value.to_string()));
    }
    keys
}

/// `manifest` with `keys` under its top-level `lifecycle:` (added when it has none),
/// replacing the same keys there, as the flags override them. The seed tests' manifests
/// indent by two spaces; anything else would make YAML the loader refuses, loudly.
fn with_lifecycle(manifest: &str, keys: &[(&str, String)]) -> String {
    if keys.is_empty() {
        return manifest.to_string();
    }
    let ours: Vec<String> = keys.iter().map(|(k, v)| format!("  {k}: {v}")).collect();
    let overridden = |line: &str| {
        keys.iter().any(|(k, _)| {
            line.strip_prefix("  ")
                .is_some_and(|l| l.starts_with(&format!("{k}:")))
        })
    };
    let mut out = Vec::new();
    let mut in_lifecycle = false;
    let mut placed = false;
    for line in manifest.lines() {
        let top_level = !line.is_empty() && !line.starts_with([' ', '#']);
        if top_level {
            in_lifecycle = line.trim_end() == "lifecycle:";
        }
        if in_lifecycle && !top_level && overridden(line) {
            continue;
        }
        out.push(line.to_string());
        if in_lifecycle && top_level {
            out.extend(ours.iter().cloned());
            placed = true;
        }
    }
    if !placed {
        out.push("lifecycle:".to_string());
        out.extend(ours);
    }
    out.join("\n") + "\n"
}

/// A `mur serve` of its own, on a free port, with its data in a scratch folder. Killed
/// when dropped, as a `mur run` is.
pub struct Server {
    child: Child,
    /// `HOST:PORT`.
    pub address: String,
    pub data: PathBuf,
    admin: String,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    /// `mur serve --json --port 0 --data <scratch>`, with `env` set; returns once it
    /// printed its start line (after restoring its registry, so it serves).
    pub fn start(env: &[(&str, &str)]) -> Server {
        let data = scratch("serve").join("data");
        let mut child = mur()
            .args(["serve", "--json", "--port", "0", "--data"])
            .arg(&data)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mur serve starts");
        let stderr = Arc::new(Mutex::new(String::new()));
        collect(child.stderr.take().unwrap(), stderr.clone());
        let line = first_line(&mut child, &stderr);
        let start: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the start line is not JSON ({e}): {line:?}"));
        let address = start["address"]
            .as_str()
            .and_then(|a| a.strip_prefix("http://"))
            .unwrap_or_else(|| panic!("no address in {start}"))
            .to_string();
        let token_file = start["admin_token_file"]
            .as_str()
            .expect("admin_token_file");
        let admin = std::fs::read_to_string(token_file)
            .unwrap()
            .trim()
            .to_string();
        Server {
            child,
            address,
            data,
            admin,
            stderr,
        }
    }

    /// What the server wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// An admin API call: the status code and the JSON body.
    pub fn admin(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let body = body.map(Value::to_string).unwrap_or_default();
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {}\r\ncontent-length: {}\r\n",
            self.address,
            self.admin,
            body.len()
        );
        if !body.is_empty() {
            request.push_str("content-type: application/json\r\n");
        }
        request.push_str("\r\n");
        request.push_str(&body);
        let mut socket = TcpStream::connect(&self.address).unwrap();
        socket.write_all(request.as_bytes()).unwrap();
        let reply = read_to_close(socket);
        let (head, body) = reply
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("no head: {reply:?}"));
        let status = head
            .strip_prefix("HTTP/1.1 ")
            .and_then(|s| s.get(..3))
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status: {head:?}"));
        let body = serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("{method} {path}: the body is not JSON ({e}): {reply:?}"));
        (status, body)
    }

    /// `POST /admin/capsules` with `body`, which must create the capsule (201).
    pub fn create(&self, body: &Value) -> Value {
        let (status, created) = self.admin("POST", "/admin/capsules", Some(body));
        assert_eq!(
            status,
            201,
            "creating {body}: {created}\nserver stderr:\n{}",
            self.stderr()
        );
        created
    }

    /// `GET /admin/capsules/<id>`, which must answer 200.
    pub fn capsule(&self, id: &str) -> Value {
        let (status, described) = self.admin("GET", &format!("/admin/capsules/{id}"), None);
        assert_eq!(status, 200, "{described}");
        described
    }

    /// The capsule's description once its state satisfies `done`, polled for at most
    /// `within`.
    pub fn until_state(
        &mut self,
        id: &str,
        within: Duration,
        done: impl Fn(&str) -> bool,
    ) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let described = self.capsule(id);
            if done(described["state"].as_str().unwrap_or_default()) {
                return described;
            }
            assert!(
                Instant::now() < deadline,
                "capsule {id} still {} after {within:?}\nserver stderr:\n{}",
                described["state"],
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = wait_bounded(&mut self.child, LIMIT);
    }
}

/// Appends what `pipe` says to `into`, on a thread of its own, so the pipe never fills.
fn collect(pipe: impl Read + Send + 'static, into: Arc<Mutex<String>>) {
    std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        let mut pipe = pipe;
        while let Ok(n) = pipe.read(&mut chunk) {
            if n == 0 {
                break;
            }
            into.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
    });
}

/// The server's start line, within [`LIMIT`]; what follows on stdout is read and
/// dropped so it cannot fill the pipe.
fn first_line(child: &mut Child, stderr: &Arc<Mutex<String>>) -> String {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let _ = reader.read_line(&mut line);
        let _ = tx.send(line);
        let _ = std::io::copy(&mut reader, &mut std::io::sink());
    });
    let line = rx.recv_timeout(LIMIT).unwrap_or_default();
    if line.is_empty() {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "mur serve printed no start line; stderr:\n{}",
            stderr.lock().unwrap_or_else(PoisonError::into_inner)
        );
    }
    line
}
