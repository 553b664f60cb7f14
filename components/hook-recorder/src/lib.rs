//! A test fixture hook: records every event it receives and answers from a script, so that
//! end-to-end tests can drive every verdict arm (and errors, traps and timeouts).
//!
//! Each call appends one JSON line describing the event to `/events.jsonl` in the hook's
//! scope (preopened as `/`), then takes the next answer for the event's kind from
//! `/script.json` (re-read at every call, so a test may write it before the run). See
//! `script.rs` for the answer forms.

wit_bindgen::generate!({
    path: ["../../wit/message", "../../wit/hook"],
    world: "murmur:hook/hook",
    // `murmur:message` is another package, so its bindings must be asked for explicitly.
    generate_all,
});

mod flat;
mod record;
mod script;

use std::fs::OpenOptions;
use std::io::{ErrorKind, Write as _};

use exports::murmur::hook::lifecycle::{Event, Guest, Verdict};

const EVENTS_FILE: &str = "/events.jsonl";
const SCRIPT_FILE: &str = "/script.json";

struct Component;

impl Guest for Component {
    fn handle(event: Event) -> Result<Verdict, String> {
        let line = record::event_json(&event).to_string();
        append_line(&line)?;
        let kind = record::kind(&event);
        match read_script()? {
            Some(text) => script::answer(&text, kind, &event),
            None => Ok(Verdict::None),
        }
    }
}

/// Appends one line to the event log. A hook declared without a scope has no filesystem at
/// all; that is allowed (the recorder then only answers `none`), any other failure is not.
fn append_line(line: &str) -> Result<(), String> {
    if !has_scope() {
        return Ok(());
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(EVENTS_FILE)
        .and_then(|mut file| file.write_all(format!("{line}\n").as_bytes()))
        .map_err(|e| format!("cannot append to {EVENTS_FILE}: {e}"))
}

/// The script's text, or `None` when there is no script (or no scope to hold one).
fn read_script() -> Result<Option<String>, String> {
    match std::fs::read_to_string(SCRIPT_FILE) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == ErrorKind::NotFound || !has_scope() => Ok(None),
        Err(e) => Err(format!("cannot read {SCRIPT_FILE}: {e}")),
    }
}

/// Whether the host preopened a scope: without one even `/` cannot be looked at.
fn has_scope() -> bool {
    std::fs::metadata("/").is_ok()
}

export!(Component);
