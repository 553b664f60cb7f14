//! Collectors that fail, as tiny servers on 127.0.0.1: one answers `500` to every POST,
//! one takes the connection and the request and never answers. Neither may cost a task
//! anything: its answer comes on time (far sooner than the exporter's timeout of 10 s),
//! `mur run` exits 0 no later than its last flush (5 s) after it, the loss is said
//! once in the session's `logs/telemetry.log`, and `mur serve` counts it in
//! `/metrics`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::served::Served;
use crate::common::*;
use crate::otel::{mur_clean, span_lines};

/// How long the task may take to answer: its work is a second's sleep and two quick
/// turns, and the bound is half the exporter's timeout, so a task that waited for the
/// collector even once could not make it.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);
/// How long `mur run` waits at its end for the collector to take the last spans.
const LAST_FLUSH: Duration = Duration::from_secs(5);
/// What a process may take to exit after its last flush gave up.
const EXIT_SLACK: Duration = Duration::from_secs(2);
/// How long `mur serve` may take to count a loss: the exporter's timeout (10 s) for a
/// collector that never answers, with room for a busy machine.
const COUNTED_WITHIN: Duration = Duration::from_secs(60);
const ANSWER: &str = "Answered, whatever the collector did.";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// `500 Internal Server Error` to every request.
    Refuses,
    /// The request read, and no answer ever.
    Silent,
}

/// A collector that fails with `fault`, on a port of its own, until dropped.
struct Broken {
    port: u16,
    stop: Arc<AtomicBool>,
    /// `POST /v1/traces` requests it received.
    posts: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl Broken {
    fn start(fault: Fault) -> Broken {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let posts = Arc::new(AtomicUsize::new(0));
        let (stopped, counted) = (stop.clone(), posts.clone());
        let thread = std::thread::spawn(move || {
            let mut connections = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((socket, _)) => {
                        let (stopped, counted) = (stopped.clone(), counted.clone());
                        connections.push(std::thread::spawn(move || {
                            serve(socket, fault, &stopped, &counted)
                        }));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
            for connection in connections {
                let _ = connection.join();
            }
        });
        Broken {
            port,
            stop,
            posts,
            thread: Some(thread),
        }
    }

    /// The base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` names a collector.
    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn traces_url(&self) -> String {
        format!("{}/v1/traces", self.endpoint())
    }

    fn posts(&self) -> usize {
        self.posts.load(Ordering::Relaxed)
    }
}

impl Drop for Broken {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One connection: its request read whole (its head and its `content-length` of
/// body), counted, and answered `500` and closed, or never answered while the
/// collector runs.
fn serve(socket: TcpStream, fault: Fault, stop: &AtomicBool, posts: &AtomicUsize) {
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut writer = socket.try_clone().unwrap();
    let mut reader = BufReader::new(socket);
    let Some(head) = read_head(&mut reader, stop) else {
        return;
    };
    let length = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    if read_exact(&mut reader, &mut body, stop).is_none() {
        return;
    }
    if head.starts_with("POST /v1/traces ") {
        posts.fetch_add(1, Ordering::Relaxed);
    }
    match fault {
        Fault::Refuses => {
            let said = "the collector is down";
            let _ = write!(
                writer,
                "HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{said}",
                said.len()
            );
        }
        Fault::Silent => {
            // Holds the connection, answering nothing, until the client gives up (and
            // closes it) or the collector stops.
            let mut byte = [0u8; 1];
            while !stop.load(Ordering::Relaxed) {
                match reader.read(&mut byte) {
                    Ok(0) => return,
                    Ok(_) => {}
                    Err(e) if timed_out(&e) => {}
                    Err(_) => return,
                }
            }
        }
    }
}

fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// A request's head, to its blank line; `None` once the client closed or the
/// collector stops.
fn read_head(reader: &mut BufReader<TcpStream>, stop: &AtomicBool) -> Option<String> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) => return None,
            Ok(_) => {
                head.push_str(&line);
                if line == "\r\n" || line == "\n" {
                    return Some(head);
                }
            }
            Err(e) if timed_out(&e) => {
                head.push_str(&line);
                if stop.load(Ordering::Relaxed) {
                    return None;
                }
            }
            Err(_) => return None,
        }
    }
}

fn read_exact(reader: &mut BufReader<TcpStream>, buf: &mut [u8], stop: &AtomicBool) -> Option<()> {
    let mut at = 0;
    while at < buf.len() {
        match reader.read(&mut buf[at..]) {
            Ok(0) => return None,
            Ok(n) => at += n,
            Err(e) if timed_out(&e) => {
                if stop.load(Ordering::Relaxed) {
                    return None;
                }
            }
            Err(_) => return None,
        }
    }
    Some(())
}

/// The turns of the task: a second's sleep in bash, a second command, the answer. Its
/// first spans end, and go to the collector, while the rest of it still runs.
fn turns() -> String {
    format!(
        "turns:\n{}{}{}",
        bash_turn("sleep 1"),
        bash_turn("echo still here"),
        text_turn(ANSWER)
    )
}

/// A capsule with bash that takes its one task and ends.
fn steady(name: &str) -> Capsule {
    let manifest = "name: steady\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\ncapabilities:\n  shell:\n    allow: [bash]\nlifecycle:\n  task_acceptance: none\n";
    Capsule::new(name, manifest, &turns())
}

/// A process's stdout lines, each with when it came, and when the process exited.
struct Timed {
    lines: Vec<(Duration, String)>,
    exited: Duration,
    status: i32,
    stderr: String,
}

impl Timed {
    /// When the first line satisfying `which` came; the test fails if none did.
    fn when(&self, which: impl Fn(&str) -> bool) -> Duration {
        self.lines
            .iter()
            .find(|(_, line)| which(line))
            .map(|(at, _)| *at)
            .unwrap_or_else(|| {
                panic!(
                    "no such line in {:#?}\nstderr:\n{}",
                    self.lines, self.stderr
                )
            })
    }
}

/// Runs `cmd` to its exit, noting when each line of its stdout came.
fn timed(cmd: &mut std::process::Command) -> Timed {
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mur starts");
    let stdout = child.stdout.take().unwrap();
    let lines = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .map(|line| (started.elapsed(), line))
            .collect::<Vec<_>>()
    });
    let mut stderr = child.stderr.take().unwrap();
    let said = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let status = wait_bounded(&mut child, LIMIT);
    let exited = started.elapsed();
    Timed {
        lines: lines.join().unwrap(),
        exited,
        status,
        stderr: said.join().unwrap(),
    }
}

/// `mur run` of one task with its spans going to a collector that fails with `fault`:
/// what a user sees, on time, and what the session's records say of the loss.
fn mur_run_against(fault: Fault, test: &str) -> (Broken, Capsule, Session) {
    let collector = Broken::start(fault);
    let capsule = steady(test);
    let mut cmd = mur_clean();
    cmd.args(["run", "--port", "0", "--manifest"])
        .arg(capsule.manifest())
        .args(["--task", "Sleep, then answer."])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint())
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let run = timed(&mut cmd);
    assert_eq!(run.status, 0, "{:#?}\nstderr:\n{}", run.lines, run.stderr);
    let launched = run.when(|l| l.starts_with("session: ses_"));
    let answered = run.when(|l| l == ANSWER);
    let done = run.when(|l| l == "status:  ok");
    assert!(
        answered - launched < ANSWER_WITHIN,
        "the answer came {:?} after the launch ({fault:?}); {:#?}",
        answered - launched,
        run.lines
    );
    assert!(done >= answered);
    // The line's reader may note its time after the process was seen to exit.
    let after = run.exited.saturating_sub(done);
    eprintln!(
        "{fault:?}: the answer came {:?} after the launch; mur run exited {after:?} after it",
        answered - launched,
    );
    assert!(
        after < LAST_FLUSH + EXIT_SLACK,
        "mur run exited {after:?} after its answer ({fault:?}), more than its last flush of {LAST_FLUSH:?}",
    );
    assert!(
        collector.posts() > 0,
        "the collector was sent nothing ({fault:?}); stderr:\n{}",
        run.stderr
    );

    let id = run
        .lines
        .iter()
        .find_map(|(_, l)| l.strip_prefix("session: "))
        .unwrap()
        .to_string();
    let workdir = capsule.dir.join("workdir");
    let session = Session {
        records: workdir.join(".murmur").join(&id),
        workdir: workdir.join(&id),
        id,
    };
    let ends: Vec<_> = session.events("task_end");
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert_eq!(ends[0]["exit_status"], "ok");

    // Said once, naming where the spans were going, with a hint.
    let log = session.record("logs/telemetry.log");
    let lines: Vec<&str> = log.lines().collect();
    let said: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].starts_with("error[E-OTEL-003]"))
        .collect();
    assert_eq!(said.len(), 1, "{fault:?}: once, in:\n{log}");
    let expected = format!(
        "error[E-OTEL-003]: spans for {} are being lost: ",
        collector.traces_url()
    );
    assert!(lines[said[0]].starts_with(&expected), "{fault:?}:\n{log}");
    assert!(
        lines
            .get(said[0] + 1)
            .is_some_and(|next| next.starts_with("hint: ")),
        "{fault:?}:\n{log}"
    );
    (collector, capsule, session)
}

#[test]
fn a_collector_answering_500_costs_the_task_nothing_and_is_said_once() {
    let (collector, capsule, session) = mur_run_against(Fault::Refuses, "otel-500");
    // The same session exported afterwards to the same collector: refused, and said.
    let n = span_lines(&session.trace()).len();
    let mut cmd = mur_clean();
    cmd.args(["trace", "export", &session.id, "--manifest"])
        .arg(capsule.manifest())
        .args(["--endpoint", &collector.endpoint()]);
    finish(&mut cmd).assert_error(&format!(
        "error[E-TRC-008]: the collector at {} took 0 of session {}'s {n} spans: ",
        collector.traces_url(),
        session.id
    ));
}

#[test]
fn a_collector_that_never_answers_costs_the_task_nothing_and_is_said_once() {
    mur_run_against(Fault::Silent, "otel-silent");
}

/// `mur serve` exporting to a collector that fails with `fault`: a task's answer comes
/// on time, and `/metrics` counts its spans as lost, none as exported.
fn mur_serve_against(fault: Fault) {
    let collector = Broken::start(fault);
    let served = Served::start_with(
        "otel-serve",
        &["--otel-endpoint", &collector.endpoint()],
        &[("OTEL_BSP_SCHEDULE_DELAY", "100")],
    );
    let hosted = served.create_scripted("steady", &turns());
    let sent = Instant::now();
    let frames = hosted.message("Sleep, then answer.");
    let took = sent.elapsed();
    let last = frames.last().expect("frames");
    assert_eq!(last.state(), "completed", "{fault:?}: {:?}", frames);
    assert!(
        took < ANSWER_WITHIN,
        "the task took {took:?} ({fault:?}); server stderr:\n{}",
        served.stderr()
    );

    eprintln!("{fault:?}: the hosted task took {took:?}");
    let lost = r#"mur_otel_spans_lost_total{reason="export_failed"}"#;
    let until = Instant::now() + COUNTED_WITHIN;
    let metrics = loop {
        let metrics = served.metrics();
        if sample(&metrics, lost) > 0.0 {
            break metrics;
        }
        assert!(
            Instant::now() < until,
            "{fault:?}: no span counted lost within {COUNTED_WITHIN:?}:\n{metrics}\nserver stderr:\n{}",
            served.stderr()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(
        sample(&metrics, "mur_otel_spans_exported_total"),
        0.0,
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            r#"mur_otel_spans_lost_total{reason="queue_full"}"#
        ),
        0.0,
        "{metrics}"
    );
    assert!(collector.posts() > 0, "{fault:?}");
    // The capsule served on: a second task is answered as the first was.
    let again = hosted.message("Again.");
    assert_eq!(again.last().expect("frames").state(), "completed");
}

/// The value of the sample named exactly `name` (with its labels); the test fails if
/// there is none.
fn sample(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| {
            let (key, value) = line.rsplit_once(' ')?;
            (key == name).then(|| value.parse().ok())?
        })
        .unwrap_or_else(|| panic!("no sample {name} in:\n{metrics}"))
}

#[test]
fn under_serve_a_collector_answering_500_is_counted_lost() {
    mur_serve_against(Fault::Refuses);
}

#[test]
fn under_serve_a_collector_that_never_answers_is_counted_lost() {
    mur_serve_against(Fault::Silent);
}
