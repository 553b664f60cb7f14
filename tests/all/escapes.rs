//! Nothing a guest writes reaches a terminal or a host log raw, end to end: an answer
//! and text chunks full of terminal control sequences, as `mur run` and `mur watch`
//! print them and as the wire still carries them; tool inputs as `mur trace` prints
//! them; a hook failing with megabytes of forged lines, as its log keeps them; names a
//! hook gives `bootstrap.log`. What a user sees holds no ESC, BEL, CR or C1 control,
//! and no line that starts where mur's own lines do.

use std::time::Duration;

use crate::common::*;
use crate::hooks::{Cap, Hook, Yaml};

/// A terminal title, a screen clear, a red line that reads like mur's, a carriage
/// return and a C1 CSI, as a YAML double-quoted string writes them...
const HOSTILE_YAML: &str = r#""\e]0;pwned\a\e[2J\e[31m[murmur] FORGED\e[0m\r\x9b31m""#;
/// ... the same text ...
const HOSTILE: &str = "\x1b]0;pwned\x07\x1b[2J\x1b[31m[murmur] FORGED\x1b[0m\r\u{9b}31m";
/// ... and as mur prints it.
const ESCAPED: &str =
    "\\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\u{1b}[31m[murmur] FORGED\\u{1b}[0m\\u{d}\\u{9b}31m";
const WAIT: Duration = Duration::from_secs(60);

/// No byte of a terminal control sequence.
fn assert_no_controls(what: &str, text: &str) {
    for c in ['\x1b', '\x07', '\r', '\u{9b}'] {
        assert!(!text.contains(c), "{what} holds {c:?}: {text:?}");
    }
}

/// No byte of a terminal control sequence, and no line a guest made start like mur's.
fn assert_clean(what: &str, text: &str) {
    assert_no_controls(what, text);
    for line in text.lines() {
        assert!(!line.starts_with("[murmur] FORGED"), "{what}: {line:?}");
    }
}

fn manifest(extra: &str) -> String {
    format!(
        "name: escapes\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\n{extra}"
    )
}

/// The answer of a turn whose chunks carry the hostile text.
fn hostile_turn() -> String {
    format!("turns:\n  - chunks: [\"Look: \", {HOSTILE_YAML}, \" end\"]\n")
}

/// `mur run` prints the loop's answer with its control characters escaped.
#[test]
fn mur_run_prints_the_answer_escaped() {
    let capsule = Capsule::new("escapes-run", &manifest(""), &hostile_turn());
    let run = finish(
        mur()
            .args(["run", "--port", "0", "--task", "go", "--manifest"])
            .arg(capsule.manifest()),
    );
    assert_eq!(run.status, 0, "{}\n{}", run.stdout, run.stderr);
    assert_clean("stdout", &run.stdout);
    assert_clean("stderr", &run.stderr);
    assert!(
        run.stdout
            .contains(&format!("\nLook: {ESCAPED} end\nstatus:  ok\n")),
        "{}",
        run.stdout
    );
}

/// A task failing with the driver's own words: the error mur prints is escaped, and no
/// line of it starts where mur's do.
#[test]
fn a_failure_reason_reaches_stderr_escaped() {
    let error = r#""no\n[murmur] FORGED \e]0;pwned\a\e[31mred\e[0m\r\x9b31m""#;
    let script = format!("turns:\n  - error: {error}\n");
    let capsule = Capsule::new("escapes-error", &manifest(""), &script);
    let run = finish(
        mur()
            .args(["run", "--port", "0", "--task", "go", "--manifest"])
            .arg(capsule.manifest()),
    );
    assert_eq!(run.status, 1, "{}\n{}", run.stdout, run.stderr);
    assert_clean("stderr", &run.stderr);
    // Stdout has the task's answer, multi-line text whose line ends are kept.
    assert_no_controls("stdout", &run.stdout);
    assert!(
        run.stdout.contains(
            "error: no\n[murmur] FORGED \\u{1b}]0;pwned\\u{7}\\u{1b}[31mred\\u{1b}[0m\\u{d}\\u{9b}31m\n"
        ),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr
            .contains("error[E-RUN-040]: the task did not complete: failed ("),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("[murmur] FORGED"), "{}", run.stderr);
}

/// `mur watch` prints the chunks and the response escaped, while the frames on the
/// wire carry the text byte for byte, JSON-escaped as serde writes it.
#[test]
fn mur_watch_prints_chunks_escaped_and_the_wire_keeps_them() {
    let capsule = Capsule::new("escapes-watch", &manifest(""), &hostile_turn());
    let running = capsule.spawn(QUEUE);
    let mut w = Watch::start(&running.address, None, true);
    w.attached();
    let headers = [("content-type", "application/json")];
    let socket = post(&running.address, &headers, &message_stream_body("go"));
    let response = read_to_close(socket);
    let (_, body) = response.split_once("\r\n\r\n").unwrap();
    let wire = frames(body);
    let streamed: String = wire
        .iter()
        .filter(|(_, event, data)| event == "text" && data["final"] == false)
        .filter_map(|(_, _, data)| data["text"].as_str())
        .collect();
    assert_eq!(streamed, format!("Look: {HOSTILE} end"));
    let last = wire.last().unwrap();
    assert_eq!(last.2["status"]["state"], "completed", "{wire:?}");
    // Byte for byte: the JSON string serde writes for the text, raw C1 included.
    let json = serde_json::to_string(HOSTILE).unwrap();
    let json = json.trim_matches('"');
    assert!(json.contains("\\u001b]0;pwned\\u0007") && json.contains('\u{9b}'));
    assert!(body.contains(json), "{body}");

    // The response, word-wrapped: the carriage return is a space between words there.
    let wrapped = ESCAPED.replace("\\u{d}", " ");
    w.printed(&format!("[completed]\n  Look: {wrapped} end\n\n"));
    drop(running);
    let run = w.finish(WAIT);
    assert_clean("mur watch's stdout", &run.stdout);
    assert_clean("mur watch's stderr", &run.stderr);
    assert!(
        run.stdout.contains(&format!("Look: {ESCAPED} end\n")),
        "{}",
        run.stdout
    );
}

/// `mur trace show` and `mur trace steps --verbose` on a session whose tool calls held
/// control characters in their input and in a tool's name.
#[test]
fn mur_trace_prints_tool_inputs_escaped() {
    let script = format!(
        "turns:\n  - tool_calls:\n      - {{id: t1, name: wordcount, input: {{path: {HOSTILE_YAML}}}}}\n      - {{id: t2, name: \"nope\\n[murmur] FORGED\\e[2J\", input: {{x: {HOSTILE_YAML}}}}}\n  - text: \"done\"\n"
    );
    let cap = Cap::new("escapes-trace", &Yaml::scripted().wordcount(), &script);
    let done = cap.run_task("count");
    let trace = done.session.records.join("trace.jsonl");
    let text = std::fs::read_to_string(&trace).unwrap();
    assert!(text.contains("\\u001b[31m[murmur] FORGED"), "{text}");
    for args in [
        &["trace", "show"][..],
        &["trace", "steps", "--verbose"],
        &["trace", "show", "--json"],
        &["trace", "steps", "--verbose", "--json"],
    ] {
        let run = finish(mur().args(args).arg(&trace));
        assert_eq!(run.status, 0, "{args:?}: {}", run.stderr);
        assert_clean(&format!("mur {args:?}"), &run.stdout);
        assert_clean(&format!("mur {args:?}"), &run.stderr);
        for line in run.stdout.lines() {
            assert!(!line.starts_with("[murmur]"), "{args:?}: {line:?}");
        }
    }
    let steps = finish(mur().args(["trace", "steps", "--verbose"]).arg(&trace));
    // An input is shown as JSON, whose own escapes stand for the C0 controls.
    assert!(
        steps
            .stdout
            .contains("\\u001b[31m[murmur] FORGED\\u001b[0m\\r\\u{9b}31m"),
        "{}",
        steps.stdout
    );
    assert!(
        steps.stdout.contains("nope\\u{a}[murmur] FORGED\\u{1b}[2J"),
        "{}",
        steps.stdout
    );
}

/// A hook failing at every event with 50 MiB of text full of forged lines: its log
/// holds each failure on one escaped line, cut, and stops at its cap with one line.
#[test]
pub(crate) fn a_hook_failing_with_megabytes_leaves_a_capped_escaped_log() {
    // Ten turns of ten tool calls: over two hundred failures, well past the cap.
    let calls: Vec<String> = (0..10)
        .map(|i| format!("{{id: w{i}, name: wordcount, input: {{path: task.md}}}}"))
        .collect();
    let turn = format!("  - tool_calls: [{}]\n", calls.join(", "));
    let script = format!("turns:\n{}  - text: \"done\"\n", turn.repeat(10));
    let yaml = Yaml::scripted()
        .wordcount()
        .hook(Hook::new("flood", MUR_HOOK_HOSTILE).scope("flood"));
    let cap = Cap::new("escapes-flood", &yaml, &script);
    cap.scope_file("flood", "hostile.txt", "error-flood 52428800\n");
    let done = cap.run_task("count");
    assert_clean("mur's stderr", &done.run.stderr);
    let log = done.log("hook-flood.log");
    let cap_line = "[log capped at 1048576 bytes: the rest of this session's entries were dropped]";
    assert!(
        log.len() <= 1024 * 1024 + cap_line.len() + 1,
        "{} bytes",
        log.len()
    );
    assert!(
        log.ends_with(&format!("{cap_line}\n")),
        "{}",
        &log[log.len() - 300..]
    );
    assert_eq!(log.matches("[log capped").count(), 1);
    assert_clean("hook-flood.log", &log);
    for line in log.lines().filter(|l| *l != cap_line) {
        assert!(
            line.starts_with("on-") && line.contains(": hostile failure\\u{1b}]0;pwned"),
            "{line:?}"
        );
        assert!(
            line.ends_with("… [cut: 52428800 bytes in all]"),
            "{}",
            &line[line.len().saturating_sub(200)..]
        );
    }
    // The failure the trace and the model see is cut at its source too.
    let trace = std::fs::read_to_string(done.session.records.join("trace.jsonl")).unwrap();
    assert!(trace.len() < 8 * 1024 * 1024, "{} bytes", trace.len());
}

/// A hook's verdict at `on-stage` names binaries with a line end and escape
/// sequences, and another hook fails there with forged lines: each entry of
/// `bootstrap.log` stays one escaped host line.
#[test]
fn bootstrap_log_lines_stay_the_hosts() {
    let yaml = Yaml::scripted()
        .hook(
            Hook::new("namer", MUR_HOOK_HOSTILE)
                .scope("namer")
                .bind("on-stage")
                .policy("write-manifests"),
        )
        .hook(
            Hook::new("failer", MUR_HOOK_HOSTILE)
                .scope("failer")
                .bind("on-stage"),
        );
    let cap = Cap::new("escapes-bootstrap", &yaml, "turns:\n  - text: ok\n");
    cap.scope_file("namer", "hostile.txt", "forged-names 3\n");
    cap.scope_file("failer", "hostile.txt", "error-flood 1048576\n");
    let done = cap.run_task("go");
    done.assert_ok();
    let log = done.bootstrap();
    assert_clean("bootstrap.log", &log);
    let named: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("hook 'namer' wrote a manifest for 'bash"))
        .collect();
    assert_eq!(named.len(), 3, "{log}");
    for line in &named {
        assert!(line.contains("\\u{a}[murmur] FORGED\\u{a}"), "{line}");
        assert!(line.ends_with("which is not in capabilities.shell.allow; skipped"));
    }
    let failed: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("hook 'failer' failed at on-stage: hostile failure"))
        .collect();
    assert_eq!(failed.len(), 1, "{log}");
    assert!(
        failed[0].ends_with("… [cut: 1048576 bytes in all]"),
        "{}",
        failed[0]
    );
    // Every line is one the host wrote: none starts with the hooks' text.
    for line in log.lines() {
        assert!(!line.starts_with('['), "{line:?}");
    }
    assert!(
        !done.session.workdir.join("tools").join("bash0").exists(),
        "no manifest was written for a binary the capsule does not allow"
    );
}

/// A hook artifact whose name holds a line end or ESC never runs: the manifest is
/// refused, and the error names it escaped.
#[test]
fn a_hook_named_with_control_characters_is_refused_escaped() {
    for name in [r#""bash\n[murmur] FORGED""#, r#""\e[31mbash""#] {
        let manifest = format!(
            "{}artifacts:\n  - name: {name}\n    runtime: hook\n    source: {}\n",
            manifest(""),
            serde_json::json!(guest(MUR_HOOK_HOSTILE).to_str().unwrap())
        );
        let capsule = Capsule::new("escapes-name", &manifest, "turns:\n  - text: ok\n");
        let run = capsule.run(&["--task", "go"]);
        assert_eq!(run.status, 1, "{}", run.stderr);
        assert!(run.stderr.starts_with("error["), "{}", run.stderr);
        assert_clean("stderr", &run.stderr);
        assert!(run.stderr.contains("is not a valid name"), "{}", run.stderr);
    }
}
