//! An idle capsule's memory: a `mur run` capsule parked between tasks gives back the
//! pages only its launch used, says so in `bootstrap.log`, and takes its next task as
//! before; a capsule hosted by `mur serve` (which shares its process) gives back nothing.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::common::host::{Host, Live};
use crate::common::sse_frames::{Frame, Sse, only_frames};
use crate::common::*;

/// One answer per task, for the two tasks each test sends.
const SCRIPT: &str = "turns:\n  - text: \"Nothing to do.\"\n  - text: \"Nothing to do.\"\n";

fn manifest() -> String {
    "name: idle\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\n"
        .to_string()
}

/// One task sent with `message/stream`; its frames, read until the stream closes.
fn task(live: &Live, text: &str) -> Vec<Frame> {
    let at = &live.at;
    let request = at.request(
        "POST",
        "",
        &[("Content-Type", "application/json")],
        &message_stream_body(text),
    );
    let mut socket = connect(&at.address);
    socket.write_all(request.as_bytes()).unwrap();
    let mut sse = Sse::open(socket, Instant::now(), Duration::from_secs(30));
    only_frames(&sse.rest_items(Duration::from_secs(30)))
}

fn completed(frames: &[Frame]) -> bool {
    frames
        .iter()
        .any(|f| f.event == "status" && f.data["final"] == true && f.state() == "completed")
}

fn idle_lines(live: &Live) -> Vec<String> {
    let log = live.session().record("logs/bootstrap.log");
    log.lines()
        .filter(|l| l.starts_with("idle: "))
        .map(str::to_string)
        .collect()
}

/// `resident memory B KiB -> A KiB`: (B, A).
fn resident(line: &str) -> (u64, u64) {
    let rest = line
        .strip_prefix("idle: gave back the pages only the launch used: resident memory ")
        .unwrap_or_else(|| panic!("not the idle line: {line}"));
    let (before, after) = rest
        .strip_suffix(" KiB")
        .and_then(|r| r.split_once(" KiB -> "))
        .unwrap_or_else(|| panic!("no figures in: {line}"));
    (before.parse().unwrap(), after.parse().unwrap())
}

#[test]
fn an_idle_run_gives_back_its_launch_pages_and_takes_its_next_task() {
    let capsule = Capsule::new("idle-run", &manifest(), SCRIPT);
    let live = Live::start(Host::Run, &capsule, QUEUE, &[]);
    assert!(completed(&task(&live, "first")));
    eventually(Duration::from_secs(20), "the idle line", || {
        !idle_lines(&live).is_empty()
    });
    let lines = idle_lines(&live);
    assert_eq!(lines.len(), 1, "one line per idle spell: {lines:?}");
    let (before, after) = resident(&lines[0]);
    assert!(after < before, "{}", lines[0]);

    // The code comes back as it runs: the next task is answered as the first was.
    let second = task(&live, "second");
    assert!(completed(&second), "{second:?}");
    let text: Vec<_> = second
        .iter()
        .filter(|f| f.event == "text")
        .map(|f| f.data["text"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(text.concat(), "Nothing to do.");
}

#[test]
fn a_capsule_under_mur_serve_gives_back_nothing_its_neighbours_may_be_running() {
    let capsule = Capsule::new("idle-serve", &manifest(), SCRIPT);
    let live = Live::start(Host::Serve, &capsule, QUEUE, &[]);
    let first = task(&live, "first");
    assert!(completed(&first), "{first:?}");
    // Twice the idle wait of a `mur run` capsule.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(idle_lines(&live), Vec::<String>::new());
    assert!(completed(&task(&live, "second")));
}
