//! `mur watch` and `mur stop` end to end: the real binary against real capsules
//! (scripted driver), and against small fake servers for what no capsule writes yet
//! (`capsule-closed`, `lagged`, non-200 answers).
//!
//! This file is compiled twice: as `watch`, each capsule runs in a `mur run` of its
//! own; as `watch_served`, each is created in a `mur serve`, and `mur watch` and
//! `mur stop` take its address `http://HOST:PORT/c/<id>/` with `--token` (see
//! `common::host`). The fake servers' tests need no capsule and run the same in both.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use crate::common::host::{At, Host, Live};
use crate::common::*;

/// How long any one wait in these tests may take before it fails the test.
const LIMIT: Duration = Duration::from_secs(60);

fn manifest(extra: &str) -> String {
    format!(
        "name: e2e\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\ncapabilities:\n  shell:\n    allow: [bash]\n{extra}"
    )
}

/// Where this module's capsules run: the module's name says (see the module doc).
fn host() -> Host {
    Host::of_module(module_path!())
}

/// A capsule that takes tasks over HTTP and stays up until it is stopped.
fn serving(name: &str, extra: &str, script: &str) -> (Capsule, Live) {
    let capsule = Capsule::new(name, &manifest(extra), script);
    let running = Live::start(
        host(),
        &capsule,
        &[
            "--lifecycle-task-acceptance",
            "queue",
            "--lifecycle-after-task",
            "sleep",
        ],
        &[],
    );
    (capsule, running)
}

/// The capsule's address as a user types it for `mur watch` and `mur stop`: the bare
/// `HOST:PORT` of a `mur run`, the whole URL of a hosted capsule.
fn typed(at: &At) -> String {
    match at.path.as_str() {
        "/" => at.address.clone(),
        _ => at.url(),
    }
}

/// A `mur watch` in the background; its stderr is read line by line as it comes.
struct Watch {
    child: Child,
    stderr: Receiver<String>,
    /// Pieces of stdout as they are read; `None` when the reader closed it.
    stdout: Option<Receiver<String>>,
    /// What stdout said so far.
    seen: String,
}

fn watch(address: &str) -> Watch {
    spawn_watch(address, None, true)
}

/// `mur watch <address> [--token T]` on a capsule, its token passed when it has one.
fn watch_capsule(address: &str, at: &At) -> Watch {
    spawn_watch(address, at.token(), true)
}

fn spawn_watch(address: &str, token: Option<&str>, read_stdout: bool) -> Watch {
    let mut child = mur()
        .args(["watch", address])
        .args(token.map(|t| ["--token", t]).into_iter().flatten())
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
        // The reader closes stdout before anything is written to it.
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

impl Watch {
    /// Waits for the start line, printed once the capsule answered the watch: from
    /// then on every frame the capsule writes reaches it.
    fn attached(&self) -> String {
        let line = self
            .stderr
            .recv_timeout(LIMIT)
            .expect("mur watch printed its start line");
        assert!(line.starts_with("[murmur] watching "), "{line}");
        line
    }

    /// Waits until stdout holds `needle`, so the watch has printed that far.
    fn printed(&mut self, needle: &str) {
        let deadline = Instant::now() + LIMIT;
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

    /// Waits for the watch to exit (bounded), then gathers what it printed.
    fn finish(mut self) -> Run {
        let deadline = Instant::now() + LIMIT;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("mur watch did not exit within {LIMIT:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Some(rx) = &self.stdout {
            while let Ok(piece) = rx.recv_timeout(LIMIT) {
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

/// `mur stop`, to completion (its own waits are bounded by its timeouts).
fn stop(address: &str, timeout: &str) -> Run {
    finish(mur().args(["stop", address, "--timeout", timeout]))
}

/// `mur stop <address> [--token T]` on a capsule, its token passed when it has one.
fn stop_capsule(address: &str, at: &At, timeout: &str) -> Run {
    let token = at.token().map(|t| ["--token", t]);
    finish(
        mur()
            .args(["stop", address, "--timeout", timeout])
            .args(token.into_iter().flatten()),
    )
}

/// A raw `POST` to the capsule's address, with its token: the open socket.
fn post_to(at: &At, headers: &[(&str, &str)], body: &str) -> TcpStream {
    let mut socket = TcpStream::connect(&at.address).unwrap();
    socket.set_read_timeout(Some(LIMIT)).unwrap();
    socket
        .write_all(at.request("POST", "", headers, body).as_bytes())
        .unwrap();
    socket
}

/// Submits a task with a raw `message/stream` and reads its frames until the
/// connection closes (at the first final status).
fn submit(at: &At, body: &str) -> Vec<(Option<u64>, String, serde_json::Value)> {
    let socket = post_to(at, &[("content-type", "application/json")], body);
    let response = read_to_close(socket);
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    frames(body)
}

/// Replaces every `<digits>ms` with `<n>ms`: durations vary from run to run.
fn normalise_ms(text: &str) -> String {
    let mut out = String::new();
    let mut digits = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        if !digits.is_empty() {
            let rest: String = chars.clone().take(1).collect();
            if c == 'm' && rest == "s" {
                out.push_str("<n>");
            } else {
                out.push_str(&digits);
            }
            digits.clear();
        }
        out.push(c);
    }
    out.push_str(&digits);
    out
}

const TASK_SCRIPT: &str = r#"
turns:
  - thinking_chunks: ["I should list ", "the files."]
    chunks: ["Let me ", "look."]
    tool_calls:
      - id: toolu_01
        name: bash
        input: {command: "echo hello"}
    usage: {input_tokens: 10, output_tokens: 5}
  - thinking_chunks: ["Done."]
    chunks: ["It said ", "hello."]
    stop_reason: end_turn
"#;

#[test]
fn watch_prints_a_running_task_and_reports_the_stop_as_a_lost_connection() {
    let (_capsule, running) = serving("watch-task", "", TASK_SCRIPT);
    let address = running.at.url();
    let session = running.session();
    let mut w = watch_capsule(&address, &running.at);
    assert_eq!(
        w.attached(),
        format!(
            "[murmur] watching {address} — Ctrl-C ends the watch, not the capsule; use `mur stop` to end the capsule"
        )
    );

    let frames = submit(&running.at, &message_stream_body("say hello"));
    let last = frames.last().unwrap();
    assert_eq!(last.2["status"]["state"], "completed", "{frames:?}");
    let last_id = last.0.unwrap();
    w.printed("[completed]\n  It said hello.\n\n");

    let stopped = stop_capsule(&address, &running.at, "30");
    assert_eq!(stopped.status, 0, "{}", stopped.stderr);
    assert_eq!(
        stopped.stdout,
        format!(
            "stopped: {}\nresidue: nothing else was left running\n",
            session.id
        )
    );
    assert_eq!(stopped.stderr, "");

    let run = w.finish();
    assert_eq!(run.status, 1, "{}", run.stderr);
    assert_eq!(
        normalise_ms(&run.stdout),
        "[working]  inference turn 1\n\
         Let me look.\n\
         [artifact] tool: bash [ok, exit 0, <n>ms] | $ echo hello\n\
         \x20 Exit code: 0\n\
         \x20 Stdout:\n\
         \x20 hello\n\
         \n\
         \x20 Stderr:\n\
         [working]  inference turn 2\n\
         It said hello.\n\
         [completed]\n\
         \x20 It said hello.\n\
         \n"
    );
    assert!(!run.stdout.contains("list"), "thinking is hidden");
    assert_eq!(
        run.stderr,
        format!(
            "error[E-IO-003]: connection to {address} lost after event id {last_id} — the capsule may still be running; run mur watch again to reattach\n  hint: a capsule that exits (after its task, or through mur stop) closes the watch this way too\n"
        )
    );
    // The capsule itself has ended, cleanly: a stop is not a failure.
    running.ends_cleanly(LIMIT);
    assert_eq!(session.events("session_end").len(), 1);
}

#[test]
fn watch_takes_the_address_with_a_scheme_and_a_trailing_slash() {
    let (_capsule, running) = serving("watch-scheme", "", "turns:\n  - text: \"ok\"\n");
    // `http://HOST:PORT/` for a `mur run`; a hosted capsule's URL ends in `/` already.
    let typed = format!("http://{}{}", running.at.address, running.at.path);
    assert!(typed.starts_with("http://127.0.0.1:") && typed.ends_with('/'));
    let mut w = watch_capsule(&typed, &running.at);
    assert!(
        w.attached()
            .starts_with(&format!("[murmur] watching {typed} — "))
    );
    submit(&running.at, &message_stream_body("hi"));
    w.printed("[completed]\n  ok\n\n");
    drop(running);
    let run = w.finish();
    assert_eq!(run.status, 1);
    assert_eq!(
        run.stdout,
        "[working]  inference turn 1\n[completed]\n  ok\n\n"
    );
    assert!(
        run.stderr.starts_with(&format!(
            "error[E-IO-003]: connection to {typed} lost after event id "
        )),
        "{}",
        run.stderr
    );
}

/// A port nothing listens on (bound, then released).
fn closed_port() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    drop(listener);
    address
}

#[test]
fn watch_against_a_closed_port_is_a_connect_error() {
    let address = closed_port();
    let run = finish(mur().args(["watch", &address]));
    assert_eq!(run.status, 1);
    assert_eq!(run.stdout, "");
    assert!(
        run.stderr.starts_with(&format!(
            "error[E-IO-003]: failed to connect to {address}: "
        )),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("\n  hint: "), "{}", run.stderr);
    assert!(!run.stderr.contains("[murmur] watching"), "{}", run.stderr);
}

#[test]
fn stop_against_a_closed_port_is_e_run_022() {
    let address = closed_port();
    let run = stop(&address, "10");
    assert_eq!(run.status, 1);
    assert_eq!(run.stdout, "");
    assert!(
        run.stderr.starts_with(&format!(
            "error[E-RUN-022]: no capsule is listening at {address}\n  hint: "
        )),
        "{}",
        run.stderr
    );
}

#[test]
fn a_bad_address_is_a_usage_error() {
    for args in [["watch", "localhost"], ["stop", "https://localhost:1"]] {
        let run = finish(mur().args(args));
        assert_eq!(run.status, 2, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains("invalid value"), "{}", run.stderr);
    }
}

/// Reads from a raw connection until `needle` and the end of its frame have arrived.
fn read_until_frame(mut socket: TcpStream, needle: &str) -> String {
    let deadline = Instant::now() + LIMIT;
    let mut got = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(at) = text.find(needle)
            && text[at..].contains("\n\n")
        {
            return text;
        }
        assert!(Instant::now() < deadline, "no {needle} in:\n{text}");
        let n = socket.read(&mut chunk).unwrap();
        assert!(n > 0, "closed before {needle}:\n{text}");
        got.extend_from_slice(&chunk[..n]);
    }
}

#[test]
fn watch_warns_about_a_gap_when_the_buffer_has_evicted_frames() {
    let chunks: Vec<String> = (0..600).map(|i| format!("\"c{i} \"")).collect();
    let script = format!("turns:\n  - chunks: [{}]\n", chunks.join(", "));
    let (_capsule, running) = serving("watch-gap", "", &script);
    let frames = submit(&running.at, &message_stream_body("stream a lot"));
    let done = frames.last().unwrap();
    assert_eq!(done.2["status"]["state"], "completed");
    // The task's frames carry the ids 0 to 602 in turn (the 600 chunks among them),
    // and the ring keeps the latest 512 frames with ids: 91 to 602.
    let ids: Vec<Option<u64>> = frames.iter().map(|f| f.0).collect();
    assert_eq!(ids, (0..=602).map(Some).collect::<Vec<_>>());
    let last_id = done.0.unwrap();

    // What the capsule's own replay says is the oldest frame it still has.
    let raw = post_to(
        &running.at,
        &[("content-type", "application/json"), ("last-event-id", "0")],
        r#"{"jsonrpc":"2.0","id":1,"method":"stream/watch","params":{}}"#,
    );
    let text = read_until_frame(raw, "event: gap\n");
    let gap = crate::common::frames(text.split_once("\r\n\r\n").unwrap().1)
        .into_iter()
        .find(|f| f.1 == "gap")
        .unwrap();
    let first = gap.2["first_available_id"].as_u64().unwrap();
    assert_eq!(first, last_id - 511);
    assert_eq!(first, 91);

    let running_address = typed(&running.at);
    let mut w = watch_capsule(&running_address, &running.at);
    w.attached();
    let warning = w.stderr.recv_timeout(LIMIT).expect("a gap warning");
    assert_eq!(
        warning,
        format!(
            "[murmur] warning: buffer overflow — some earlier events were lost (first available id: {first})"
        )
    );
    w.printed("c599\n\n");
    drop(running);
    let run = w.finish();
    assert_eq!(run.status, 1, "{}", run.stderr);
    // The warning was the only other line: the rest is the lost connection.
    let address = &running_address;
    assert_eq!(
        run.stderr,
        format!(
            "error[E-IO-003]: connection to {address} lost after event id {last_id} — the capsule may still be running; run mur watch again to reattach\n  hint: a capsule that exits (after its task, or through mur stop) closes the watch this way too\n"
        )
    );
    // The replay starts after the evicted chunks and still ends the task properly.
    assert!(!run.stdout.starts_with("c0 "), "{}", run.stdout);
    assert!(
        run.stdout.contains("c599 \n[completed]\n  c0 c1 c2 "),
        "{}",
        run.stdout
    );
    assert!(run.stdout.ends_with("c599\n\n"), "{}", run.stdout);
}

#[test]
fn threaded_capsules_label_statuses_with_context_and_turn() {
    let (_capsule, running) = serving(
        "watch-threaded",
        "lifecycle:\n  conversation: threaded\n",
        "turns:\n  - text: \"first answer\"\n  - text: \"second answer\"\n  - text: \"elsewhere\"\n",
    );
    let address = typed(&running.at);
    let mut w = watch_capsule(&address, &running.at);
    w.attached();
    let ctx = "ctx_0199c4e2f1b7712a9d3e4f50617283a1";
    submit(&running.at, &message_stream_body_in("one", ctx));
    submit(&running.at, &message_stream_body_in("two", ctx));
    submit(
        &running.at,
        &message_stream_body_in("three", "ctx_0aaabbbbccccdddd0000111122223333"),
    );
    w.printed("  elsewhere\n\n");
    let stopped = stop_capsule(&address, &running.at, "30");
    assert_eq!(stopped.status, 0, "{}", stopped.stderr);
    let run = w.finish();
    assert_eq!(run.status, 1, "{}", run.stderr);
    assert_eq!(
        run.stdout,
        "[ctx_0199c4e2... / turn 1 / working]  inference turn 1\n\
         [ctx_0199c4e2... / turn 1 / completed]\n  first answer\n\n\
         [ctx_0199c4e2... / turn 2 / working]  inference turn 1\n\
         [ctx_0199c4e2... / turn 2 / completed]\n  second answer\n\n\
         [ctx_0aaabbbb... / turn 1 / working]  inference turn 1\n\
         [ctx_0aaabbbb... / turn 1 / completed]\n  elsewhere\n\n"
    );
}

#[test]
fn a_reader_that_closes_stdout_ends_the_watch_with_0() {
    let (_capsule, running) = serving("watch-epipe", "", "turns:\n  - text: \"ok\"\n");
    let w = spawn_watch(&typed(&running.at), running.at.token(), false);
    w.attached();
    submit(&running.at, &message_stream_body("hi"));
    let run = w.finish();
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert_eq!(run.stderr, "");
}

// --- Fake servers: frames and answers no capsule writes yet. ---------------------

/// A one-address server: every connection's request is sent on the channel, then
/// `respond` writes the answer. Each connection is served on its own thread.
fn fake(
    respond: impl Fn(&mut TcpStream) + Send + Sync + Clone + 'static,
) -> (String, Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for socket in listener.incoming() {
            let Ok(mut socket) = socket else { continue };
            let tx = tx.clone();
            let respond = respond.clone();
            std::thread::spawn(move || {
                let request = read_request(&mut socket);
                if request.is_empty() {
                    return; // a probe that only connected
                }
                let _ = tx.send(request);
                respond(&mut socket);
            });
        }
    });
    (address, rx)
}

fn read_request(socket: &mut TcpStream) -> String {
    socket.set_read_timeout(Some(LIMIT)).unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if body.len() >= length {
                return text;
            }
        }
        match socket.read(&mut chunk) {
            Ok(0) | Err(_) => return text,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
        }
    }
}

#[test]
fn watch_sends_a_stream_watch_from_0_and_ends_at_capsule_closed() {
    let (address, requests) = fake(|socket| {
        let frames = [
            SSE_HEAD,
            "event: connection-ack\ndata: {\"role\":\"observer\",\"conversation_mode\":\"stateless\"}\n\n",
            ":heartbeat\n\n",
            "id: 3\nevent: status\ndata: {\"id\":\"tsk_a\",\"context_id\":\"ctx_a\",\"status\":{\"state\":\"working\",\"message\":\"inference turn 2\"},\"final\":false,\"later\":{\"x\":1}}\n\n",
            "event: lagged\ndata: {\"missed\":7}\n\n",
            "event: tool-call-started\ndata: {\"id\":\"tsk_a\"}\n\n",
            "id: 4\nevent: text\ndata: {\"id\":\"tsk_a\",\"text\":\"par\",\"final\":false}\n\n",
            "event: capsule-closed\ndata: {}\n\n",
        ];
        // Split mid-frame, so the watch must put frames together across reads.
        let wire = frames.concat();
        let (a, b) = wire.split_at(wire.len() - 30);
        let _ = socket.write_all(a.as_bytes());
        let _ = socket.flush();
        std::thread::sleep(Duration::from_millis(100));
        let _ = socket.write_all(b.as_bytes());
        // Held open: the watch must end on the frame, not on a closed connection.
        std::thread::sleep(LIMIT);
    });
    let w = watch(&address);
    w.attached();
    let run = w.finish();
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "[working]  inference turn 2\npar\n");
    assert_eq!(
        run.stderr,
        "[murmur] warning: this watch fell behind and missed 7 frames\n[murmur] capsule closed\n"
    );

    let request = requests.recv_timeout(LIMIT).unwrap();
    let (head, body) = request.split_once("\r\n\r\n").unwrap();
    let lines: Vec<&str> = head.lines().collect();
    assert_eq!(lines[0], "POST / HTTP/1.1");
    assert!(lines.contains(&"content-type: application/json"), "{head}");
    assert!(lines.contains(&"last-event-id: 0"), "{head}");
    assert_eq!(
        body,
        r#"{"jsonrpc":"2.0","id":1,"method":"stream/watch","params":{}}"#
    );
}

#[test]
fn a_stream_that_ends_before_any_event_says_so() {
    let (address, _requests) = fake(|socket| {
        let _ = socket.write_all(
            format!("{SSE_HEAD}event: connection-ack\ndata: {{\"role\":\"observer\",\"conversation_mode\":\"stateless\"}}\n\nid: 9\nevent: status\ndata: {{\"id\":\"t\"")
                .as_bytes(),
        );
    });
    let run = finish(mur().args(["watch", &address]));
    assert_eq!(run.status, 1);
    assert_eq!(run.stdout, "");
    assert!(
        run.stderr.contains(&format!(
            "\nerror[E-IO-003]: connection to {address} lost before any event — the capsule may still be running; run mur watch again to reattach\n"
        )),
        "an incomplete frame's id does not count: {}",
        run.stderr
    );
}

#[test]
fn a_non_200_answer_is_an_error_naming_the_status_line() {
    let (address, _requests) = fake(|socket| {
        let _ = socket
            .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    });
    let run = finish(mur().args(["watch", &address]));
    assert_eq!(run.status, 1);
    assert!(
        run.stderr.starts_with(
            "error[E-IO-003]: capsule returned non-200 response: HTTP/1.1 404 Not Found\n"
        ),
        "{}",
        run.stderr
    );
}

#[test]
fn stop_gives_up_on_an_address_that_keeps_answering() {
    let (address, requests) = fake(|socket| {
        let body = r#"{"jsonrpc":"2.0","id":1,"result":{"stopped":"ses_fake"}}"#;
        let _ = socket.write_all(
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
    });
    let started = Instant::now();
    let run = stop(&address, "1");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(run.status, 1);
    assert_eq!(run.stdout, "stopped: ses_fake\n");
    assert!(
        run.stderr.starts_with(&format!(
            "error[E-RUN-024]: {address} could not be ended: it still answers after 1 s\n  hint: "
        )),
        "{}",
        run.stderr
    );
    let request = requests.recv_timeout(LIMIT).unwrap();
    assert!(
        request.ends_with(r#"{"jsonrpc":"2.0","id":1,"method":"murmur/stop","params":{}}"#),
        "{request}"
    );

    // --timeout 0 asks and returns without waiting.
    let run = stop(&address, "0");
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "stopped: ses_fake\n");
}

#[test]
fn stop_refused_by_the_address_is_e_run_024() {
    let (address, _requests) = fake(|socket| {
        let body =
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}"#;
        let _ = socket.write_all(
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
    });
    let run = stop(&address, "1");
    assert_eq!(run.status, 1);
    assert_eq!(run.stdout, "");
    assert!(
        run.stderr.starts_with(&format!(
            "error[E-RUN-024]: {address} could not be ended: it answered error -32601: Method not found\n"
        )),
        "{}",
        run.stderr
    );
}
