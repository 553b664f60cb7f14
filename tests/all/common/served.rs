//! `mur serve` under test: the real binary started on a scratch `--data` folder and a
//! free port, its admin token read from disk, capsules created through its admin API,
//! and raw HTTP over `std::net::TcpStream` for everything a client sends. Dropping a
//! [`Served`] kills the server.
//!
//! ```ignore
//! let served = Served::start("name");
//! let hosted = served.create(&Create::path(&capsule.dir).limits(json!({"connections": 1})));
//! let frames = hosted.message("do the task");          // message/stream, to close
//! let mut stream = hosted.stream("do the task");        // message/stream, as it comes
//! let mut watch = hosted.watch(Some("0"));               // stream/watch, as it comes
//! let raw = hosted.post(&[], &body);                     // any JSON POST to its address
//! ```

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::sse_frames::{Frame, Sse, items_of, only_frames};
use super::{
    LIMIT, SSE_HEAD, connect, exchange, json_lines_so_far, mur, raw_request, read_to_close,
    scratch, wait_bounded,
};

/// `mur serve --json` on 127.0.0.1, in the background.
pub struct Served {
    child: Child,
    /// The `--json` start line.
    pub launch: Value,
    /// `127.0.0.1:PORT`, what a socket connects to.
    pub address: String,
    /// The `--data` folder.
    pub data: PathBuf,
    /// The admin token, as the operator reads it from `DATA/admin-token`.
    pub admin_token: String,
    /// Flags besides `--json --data --port`, kept for a restart.
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// What the server wrote to stderr so far.
    stderr: Arc<Mutex<Vec<u8>>>,
}

impl Served {
    /// A server on a fresh data folder (in the scratch folder `name`) and any free port.
    pub fn start(name: &str) -> Served {
        Served::start_with(name, &[], &[])
    }

    /// [`Served::start`] with extra flags (`--max-capsules 1`, ...) and environment.
    pub fn start_with(name: &str, args: &[&str], env: &[(&str, &str)]) -> Served {
        let args = args.iter().map(|a| a.to_string()).collect();
        let env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Served::spawn(scratch(name).join("data"), "0", args, env)
    }

    fn spawn(data: PathBuf, port: &str, args: Vec<String>, env: Vec<(String, String)>) -> Served {
        Served::try_spawn(data, port, args, env).unwrap_or_else(|why| panic!("{why}"))
    }

    /// [`Served::spawn`]; `Err` when the server exited before its start line.
    fn try_spawn(
        data: PathBuf,
        port: &str,
        args: Vec<String>,
        env: Vec<(String, String)>,
    ) -> Result<Served, String> {
        let mut cmd = mur();
        cmd.args(["serve", "--json", "--data"])
            .arg(&data)
            .args(["--port", port])
            .args(&args)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("mur serve starts");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let sink = stderr.clone();
        let mut pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&chunk[..n]);
            }
        });
        // The start line, then whatever follows is read and dropped so the pipe never
        // fills and stalls the server.
        let (tx, rx) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let _ = tx.send(line);
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        });
        let line = match rx.recv_timeout(LIMIT) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("mur serve printed no start line within {LIMIT:?}");
            }
        };
        if line.is_empty() {
            let status = wait_bounded(&mut child, LIMIT);
            // The stderr reader has the last bytes once the pipe closed.
            std::thread::sleep(Duration::from_millis(100));
            let err = String::from_utf8_lossy(&stderr.lock().unwrap()).into_owned();
            return Err(format!(
                "mur serve exited {status} without a start line; stderr:\n{err}"
            ));
        }
        let launch: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the start line is not JSON ({e}): {line:?}"));
        let address = launch["address"]
            .as_str()
            .expect("the start line names an address")
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let token_file = launch["admin_token_file"]
            .as_str()
            .expect("the start line names the admin token file");
        let admin_token = std::fs::read_to_string(token_file)
            .unwrap_or_else(|e| panic!("{token_file}: {e}"))
            .trim()
            .to_string();
        Ok(Served {
            child,
            launch,
            address,
            data,
            admin_token,
            args,
            env,
            stderr,
        })
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn port(&self) -> &str {
        self.address.rsplit_once(':').map_or("", |(_, port)| port)
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// What the server wrote to stderr so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// `kill -9`: the server gets no chance to drain or save anything.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Kills the server (`kill -9`) and starts it again on the same data folder, port
    /// and flags, so every address handed out before is the same after.
    pub fn restart(&mut self) {
        self.kill();
        let port = self.port().to_string();
        // While the server was down, another test's client socket may have been given
        // its port as an ephemeral one: wait for that connection to end.
        let mut attempts = 0;
        *self = loop {
            let spawned = Served::try_spawn(
                self.data.clone(),
                &port,
                self.args.clone(),
                self.env.clone(),
            );
            match spawned {
                Err(why) if why.contains("Address already in use") && attempts < 40 => {
                    attempts += 1;
                    std::thread::sleep(Duration::from_millis(250));
                }
                Err(why) => panic!("{why}"),
                Ok(served) => break served,
            }
        };
    }

    /// Sends a signal (`libc::SIGTERM`, ...) to the server.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill only sends a signal, to our own child, not yet reaped.
        unsafe {
            libc::kill(self.pid(), signal);
        }
    }

    /// Whether the server process has exited.
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }

    /// Waits for the server to exit, within `limit`; its exit code.
    pub fn wait(&mut self, limit: Duration) -> i32 {
        wait_bounded(&mut self.child, limit)
    }

    // ------------------------------------------------------------------------------
    // Plain HTTP.

    /// One request as written (see [`raw_request`]), answered and closed.
    pub fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
        let request = raw_request(&self.address, method, path, headers, body);
        Reply::parse(&exchange(&self.address, &request))
    }

    /// An admin call with the admin token; a JSON body when given.
    pub fn admin(&self, method: &str, path: &str, body: Option<&Value>) -> Reply {
        let auth = format!("Bearer {}", self.admin_token);
        let body = body.map(Value::to_string).unwrap_or_default();
        self.request(
            method,
            path,
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            &body,
        )
    }

    /// `POST /admin/capsules` with this body, whatever it answers.
    pub fn try_create(&self, create: &Create) -> Reply {
        self.admin("POST", "/admin/capsules", Some(&create.body))
    }

    /// Creates a capsule; anything but `201 Created` fails the test.
    pub fn create(&self, create: &Create) -> Hosted {
        let reply = self.try_create(create);
        assert_eq!(
            reply.status,
            201,
            "create {}: {reply:?}\nserver stderr:\n{}",
            create.body,
            self.stderr()
        );
        self.hosted(&reply)
    }

    /// Creates a capsule from [`scripted`]`(name, script, "")`, sent as text.
    pub fn create_scripted(&self, name: &str, script: &str) -> Hosted {
        self.create(&Create::yaml(&scripted(name, script, "")))
    }

    /// The capsule a `201 Created` answer describes.
    pub fn hosted(&self, reply: &Reply) -> Hosted {
        assert_eq!(reply.status, 201, "{reply:?}");
        let created = reply.json();
        let text = |key: &str| {
            created[key]
                .as_str()
                .unwrap_or_else(|| panic!("no {key} in {created}"))
                .to_string()
        };
        Hosted {
            id: text("id"),
            url: text("address"),
            path: text("path"),
            token: created["token"].as_str().map(str::to_string),
            workdir: PathBuf::from(text("workdir")),
            socket: self.address.clone(),
            created,
        }
    }

    /// `GET /admin/capsules`: the `capsules` list.
    pub fn list(&self) -> Vec<Value> {
        let reply = self.admin("GET", "/admin/capsules", None);
        assert_eq!(reply.status, 200, "{reply:?}");
        reply.json()["capsules"]
            .as_array()
            .unwrap_or_else(|| panic!("no capsules list: {}", reply.body))
            .clone()
    }

    /// `GET /admin/capsules/<id>`, which must answer 200.
    pub fn capsule(&self, id: &str) -> Value {
        let reply = self.admin("GET", &format!("/admin/capsules/{id}"), None);
        assert_eq!(reply.status, 200, "{reply:?}");
        reply.json()
    }

    /// `POST /admin/capsules/<id>/stop`, whatever it answers.
    pub fn stop(&self, id: &str) -> Reply {
        self.admin("POST", &format!("/admin/capsules/{id}/stop"), None)
    }

    /// `POST /admin/capsules/<id>/start`, whatever it answers.
    pub fn start_capsule(&self, id: &str) -> Reply {
        self.admin("POST", &format!("/admin/capsules/{id}/start"), None)
    }

    /// `DELETE /admin/capsules/<id><query>` (`""`, `"?workdir=remove"`, ...), whatever
    /// it answers.
    pub fn delete(&self, id: &str, query: &str) -> Reply {
        self.admin("DELETE", &format!("/admin/capsules/{id}{query}"), None)
    }

    /// The id of the capsule's current session, which it must have.
    pub fn session_id(&self, id: &str) -> String {
        let described = self.capsule(id);
        described["session_id"]
            .as_str()
            .unwrap_or_else(|| panic!("a running capsule has a session: {described}"))
            .to_string()
    }

    /// The capsule's description once its state satisfies `done`, polled for at most
    /// `within`.
    pub fn until_state(&self, id: &str, within: Duration, done: impl Fn(&str) -> bool) -> Value {
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

    pub fn healthz(&self) -> Reply {
        self.request("GET", "/healthz", &[], "")
    }

    /// The body of `GET /metrics`, which must answer 200.
    pub fn metrics(&self) -> String {
        let reply = self.request("GET", "/metrics", &[], "");
        assert_eq!(reply.status, 200, "{reply:?}");
        reply.body
    }

    // ------------------------------------------------------------------------------
    // What a capsule leaves on disk.

    /// `DATA/capsules/<id>`.
    pub fn capsule_dir(&self, id: &str) -> PathBuf {
        self.data.join("capsules").join(id)
    }

    /// The records root of a capsule: one folder per session, its conversations and
    /// its replay journal.
    pub fn records(&self, id: &str) -> PathBuf {
        self.capsule_dir(id).join("records")
    }

    /// The trace of one of a capsule's sessions, as far as it is written.
    pub fn trace(&self, id: &str, session: &str) -> Vec<Value> {
        json_lines_so_far(&self.records(id).join(session).join("trace.jsonl"))
    }

    /// Waits until the trace of the capsule's current session has an event of `kind`
    /// after the first `skip` of them; returns it.
    pub fn wait_for_event(&self, id: &str, kind: &str, skip: usize) -> Value {
        let session = self.session_id(id);
        let until = Instant::now() + LIMIT;
        loop {
            let found = self
                .trace(id, &session)
                .into_iter()
                .filter(|e| e["event_type"] == kind)
                .nth(skip);
            if let Some(event) = found {
                return event;
            }
            assert!(
                Instant::now() < until,
                "no {kind} event #{skip} in {id}'s trace within {LIMIT:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The body of `POST /admin/capsules`.
#[derive(Clone, Debug)]
pub struct Create {
    pub body: Value,
}

impl Create {
    /// From the manifest's text (`{"manifest": ...}`). Its relative paths resolve on
    /// the server, in the capsule's own folder: name scripts by their full path.
    pub fn yaml(text: &str) -> Create {
        Create {
            body: json!({ "manifest": text }),
        }
    }

    /// From a folder holding `murmur.yaml`, or the file itself (`{"path": ...}`).
    pub fn path(path: &Path) -> Create {
        Create {
            body: json!({ "path": path }),
        }
    }

    /// No token on its address.
    pub fn open(mut self) -> Create {
        self.body["open"] = json!(true);
        self
    }

    /// `{"memory_bytes": N, "connections": N, "queued_tasks": N}`, any of them.
    pub fn limits(mut self, limits: Value) -> Create {
        self.body["limits"] = limits;
        self
    }
}

/// A capsule the server created.
#[derive(Clone, Debug)]
pub struct Hosted {
    pub id: String,
    /// Its address as the admin API handed it out: `http://HOST:PORT/c/<id>/`.
    pub url: String,
    /// `/c/<id>/`.
    pub path: String,
    /// `None` when created open.
    pub token: Option<String>,
    pub workdir: PathBuf,
    /// `127.0.0.1:PORT`: the server's socket address.
    pub socket: String,
    /// The whole `201` answer.
    pub created: Value,
}

impl Hosted {
    /// `Bearer <token>`, when it has one.
    pub fn bearer(&self) -> Option<String> {
        self.token.as_ref().map(|t| format!("Bearer {t}"))
    }

    /// The exact bytes of a JSON `POST` to its address, with its token and `headers`.
    pub fn request(&self, headers: &[(&str, &str)], body: &str) -> String {
        let bearer = self.bearer();
        let mut all = vec![("content-type", "application/json")];
        all.extend(bearer.as_deref().map(|b| ("authorization", b)));
        all.extend_from_slice(headers);
        raw_request(&self.socket, "POST", &self.path, &all, body)
    }

    /// Sends a JSON `POST` to its address; the socket to read the answer from.
    pub fn post(&self, headers: &[(&str, &str)], body: &str) -> TcpStream {
        let mut socket = connect(&self.socket);
        socket
            .write_all(self.request(headers, body).as_bytes())
            .unwrap();
        socket
    }

    /// A JSON `POST` answered and closed (a refusal, a JSON-RPC answer, a whole stream).
    pub fn call(&self, headers: &[(&str, &str)], body: &str) -> Reply {
        Reply::parse(&read_to_close(self.post(headers, body)))
    }

    /// A JSON `POST` to its address with this `Authorization` (or none) instead of its
    /// own token, answered and closed.
    pub fn call_as(&self, authorization: Option<&str>, body: &str) -> Reply {
        let mut headers = vec![("content-type", "application/json")];
        headers.extend(authorization.map(|a| ("authorization", a)));
        let request = raw_request(&self.socket, "POST", &self.path, &headers, body);
        Reply::parse(&exchange(&self.socket, &request))
    }

    /// `message/stream` with `text`, read to its close: the frames, after checking the
    /// event-stream head byte for byte.
    pub fn message(&self, text: &str) -> Vec<Frame> {
        self.message_body(&super::message_stream_body(text))
    }

    /// A `message/stream` with this exact body, read to its close.
    pub fn message_body(&self, body: &str) -> Vec<Frame> {
        self.stream_body(body).rest(LIMIT)
    }

    /// `message/stream` with `text`, read as frames come.
    pub fn stream(&self, text: &str) -> Sse {
        self.stream_body(&super::message_stream_body(text))
    }

    /// An event stream answering a JSON `POST` of `body`, its head read and checked.
    fn stream_body(&self, body: &str) -> Sse {
        let opened = Instant::now();
        Sse::open(self.post(&[], body), opened, LIMIT)
    }

    /// `stream/watch`, with `Last-Event-ID` when given, read as frames come.
    pub fn watch(&self, last_event_id: Option<&str>) -> Sse {
        let headers: Vec<(&str, &str)> = last_event_id
            .map(|id| ("last-event-id", id))
            .into_iter()
            .collect();
        let opened = Instant::now();
        Sse::open(self.post(&headers, WATCH), opened, LIMIT)
    }
}

pub const WATCH: &str = r#"{"jsonrpc":"2.0","id":1,"method":"stream/watch","params":{}}"#;

/// An answer read to its close.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    /// The status line and headers, without the blank line.
    pub head: String,
    pub body: String,
}

impl Reply {
    pub fn parse(raw: &str) -> Reply {
        let (head, body) = raw
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("no HTTP head in {raw:?}"));
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("no status code in {head:?}"));
        Reply {
            status,
            head: head.to_string(),
            body: body.to_string(),
        }
    }

    /// The first value of a header (name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    /// The JSON-RPC refusal a capsule's address answers with `status`
    /// (`503 Service Unavailable`, ...) and `message`, to the byte.
    pub fn assert_refused(&self, status: &str, message: &str) {
        let body =
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32000, "message": message}})
                .to_string();
        assert_eq!(
            self.head,
            format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close",
                body.len()
            ),
            "{self:?}"
        );
        assert_eq!(self.body, body);
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("the body is not JSON ({e}): {self:?}"))
    }

    /// The frames of a whole event stream, after checking its head byte for byte.
    pub fn frames(&self) -> Vec<Frame> {
        assert_eq!(format!("{}\r\n\r\n", self.head), SSE_HEAD, "{self:?}");
        only_frames(&items_of(&self.body))
    }
}

/// A capsule manifest for the scripted driver, `queue` + `sleep`, with `bash` allowed:
/// the script (every task plays it from its first turn) is written to a scratch folder
/// and named by its full path, so the manifest works sent as text. `lifecycle` is more
/// lines for the `lifecycle:` block, each indented by two spaces.
pub fn scripted(name: &str, script: &str, lifecycle: &str) -> String {
    let dir = scratch(name);
    let path = dir.join("script.yaml");
    std::fs::write(&path, script).unwrap();
    format!(
        "name: {name}\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  script: {}\n  model: scripted-test\ncapabilities:\n  shell:\n    allow: [bash]\nlifecycle:\n  task_acceptance: queue\n  after_task: sleep\n{lifecycle}",
        path.display()
    )
}
