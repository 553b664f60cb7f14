//! `mur trace steps`: a session turn by turn, as the tree its lines form.
//!
//! Each line names its parent (`parent_id`): session ← task ← turn (`inference`) ← the
//! turn's calls. A line whose parent is not in the file (a v0.2.0 trace has no ids) is
//! hung under its turn, else under its task, by `task_id` and `turn`. Lines the tree
//! does not show (the session's own, and event types it does not know) leave their
//! children at their own depth.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::fmt;
use super::parse::{Event, Parsed};
use super::select::Places;
use super::{StepsArgs, print_json};
use crate::error::Error;

/// The column a row's detail starts in, after the event type that opens it.
const KIND_WIDTH: usize = 11;
const INPUT_CHARS: usize = 120;
/// Indentation stops deepening here: a real tree is four levels deep, and a trace made
/// otherwise must not make its output grow with the square of its length.
const MAX_INDENT: usize = 16;

/// One row of the tree.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub depth: usize,
    pub event_type: String,
    pub line: usize,
    pub text: String,
}

pub fn run(args: &StepsArgs) -> Result<(), Error> {
    let found = Places::new(&args.place).resolve(args.session.as_deref())?;
    let parsed = found.read()?;
    let steps = tree(&parsed, args.verbose);
    let session = session_id(&parsed).unwrap_or(&found.id).to_string();
    let (tasks, turns) = counts(&parsed);
    if args.place.json {
        print_json(&json!({
            "session_id": session,
            "path": found.path,
            "tasks": tasks,
            "turns": turns,
            "torn_line": parsed.torn,
            "steps": steps.iter().map(|s| json!({
                "depth": s.depth,
                "event_type": s.event_type,
                "line": s.line,
                "text": s.text,
            })).collect::<Vec<Value>>(),
        }));
        return Ok(());
    }
    super::out(&render(&session, tasks, turns, &steps));
    if let Some(line) = parsed.torn {
        eprintln!("note: {}", fmt::torn_note(line));
    }
    Ok(())
}

pub fn render(session: &str, tasks: usize, turns: usize, steps: &[Step]) -> String {
    let task_note = match tasks {
        0 => String::new(),
        1 => "1 task, ".to_string(),
        n => format!("{n} tasks, "),
    };
    let plural = if turns == 1 { "" } else { "s" };
    let session = crate::escape::line(session);
    let mut out = format!("Session {session}  ({task_note}{turns} turn{plural})\n");
    for step in steps {
        if step.event_type == "task_start" {
            out.push('\n');
        }
        let indent = step.depth.min(MAX_INDENT);
        // A row quotes the trace (tool inputs, answers): it stays one line.
        let text = crate::escape::line(&step.text);
        out.push_str(&format!("{}{text}\n", "  ".repeat(indent)));
    }
    out.push('\n');
    out
}

fn session_id(parsed: &Parsed) -> Option<&str> {
    parsed.events.iter().find_map(|e| e.str("session_id"))
}

/// Tasks started, and turns of the agent loop (a hook's inference is none).
fn counts(parsed: &Parsed) -> (usize, usize) {
    let tasks = parsed
        .events
        .iter()
        .filter(|e| e.kind == "task_start")
        .count();
    let turns = parsed
        .events
        .iter()
        .filter(|e| e.kind == "inference" && !is_hook_inference(e))
        .count();
    (tasks, turns)
}

fn is_hook_inference(e: &Event) -> bool {
    e.str("origin").is_some_and(|o| o.starts_with("hook:"))
}

/// The rows, depth first in trace order. The walk keeps its own stack: a trace is
/// input, and a chain of a million parents must not overflow the thread's.
pub fn tree(parsed: &Parsed, verbose: bool) -> Vec<Step> {
    let events = &parsed.events;
    let children = children(events);
    let mut steps = Vec::new();
    let roots = children.get(&None).map(Vec::as_slice).unwrap_or_default();
    let mut stack: Vec<(usize, usize)> = roots.iter().rev().map(|r| (*r, 0)).collect();
    while let Some((at, depth)) = stack.pop() {
        let e = &events[at];
        let below = match row(e, verbose) {
            Some(text) => {
                steps.push(Step {
                    depth,
                    event_type: e.kind.clone(),
                    line: e.line,
                    text,
                });
                depth + 1
            }
            // Not shown: its children stay at its depth.
            None => depth,
        };
        let kids = children
            .get(&Some(at))
            .map(Vec::as_slice)
            .unwrap_or_default();
        stack.extend(kids.iter().rev().map(|k| (*k, below)));
    }
    steps
}

/// Each event's children in trace order; `None` holds the roots. A parent is always an
/// earlier line, so the tree has no cycle. A line without a parent in the file hangs
/// under the command it reports on (by `work_id`), else its turn, else its task.
fn children(events: &[Event]) -> HashMap<Option<usize>, Vec<usize>> {
    let mut by_id: HashMap<&str, usize> = HashMap::new();
    let mut task_starts: HashMap<&str, usize> = HashMap::new();
    // (task, turn) → the turn's inference line.
    let mut turns: HashMap<(Option<&str>, u64), usize> = HashMap::new();
    // work id → its `shell_detached` line: where a later `shell_lost` (appended by a
    // resume, with no parent) belongs.
    let mut detached: HashMap<&str, usize> = HashMap::new();
    let mut children: HashMap<Option<usize>, Vec<usize>> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        let task = e.str("task_id");
        let by_parent_id = e.str("parent_id").and_then(|p| by_id.get(p).copied());
        let by_work = || {
            (e.kind != "shell_detached")
                .then(|| e.str("work_id").and_then(|w| detached.get(w).copied()))
                .flatten()
        };
        let parent = by_parent_id.or_else(by_work).or_else(|| {
            let turn = (e.kind != "inference")
                .then(|| e.u64("turn"))
                .flatten()
                .and_then(|turn| turns.get(&(task, turn)).copied());
            let task_start = (e.kind != "task_start")
                .then(|| task.and_then(|t| task_starts.get(t).copied()))
                .flatten();
            turn.or(task_start)
        });
        children.entry(parent).or_default().push(i);
        if let Some(id) = e.str("event_id") {
            by_id.entry(id).or_insert(i);
        }
        match e.kind.as_str() {
            "task_start" => {
                if let Some(t) = task {
                    task_starts.insert(t, i);
                }
            }
            "shell_detached" => {
                if let Some(w) = e.str("work_id") {
                    detached.insert(w, i);
                }
            }
            "inference" if !is_hook_inference(e) => {
                if let Some(turn) = e.u64("turn") {
                    turns.insert((task, turn), i);
                }
            }
            _ => {}
        }
    }
    children
}

/// An event type, padded so the rows under one turn line up.
fn kind(name: &str) -> String {
    if name.len() >= KIND_WIDTH {
        format!("{name} ")
    } else {
        format!("{name:<KIND_WIDTH$}")
    }
}

fn s<'a>(e: &'a Event, key: &str) -> &'a str {
    e.str(key).unwrap_or("—")
}

fn n(e: &Event, key: &str) -> u64 {
    e.u64(key).unwrap_or_default()
}

/// The row of an event, or none for one the tree does not show.
fn row(e: &Event, verbose: bool) -> Option<String> {
    Some(match e.kind.as_str() {
        "task_start" => task_row(e),
        "inference" => inference_row(e),
        "tool_call" => {
            let input = match (verbose, e.get("input")) {
                (true, Some(input)) => format!("  {}", fmt::input_inline(input, INPUT_CHARS)),
                _ => String::new(),
            };
            format!(
                "{}{}  {}  {}{input}",
                kind("tool_call"),
                s(e, "tool_name"),
                fmt::duration(n(e, "duration_ms")),
                fmt::mark(e.str("status") == Some("ok"))
            )
        }
        "shell" => {
            let command = match verbose {
                true => format!("  {}", fmt::cut(s(e, "command"), INPUT_CHARS)),
                false => String::new(),
            };
            format!(
                "{}{}  exit {}  {}{command}",
                kind("shell"),
                s(e, "binary"),
                e.i64("exit_code").unwrap_or_default(),
                fmt::duration(n(e, "duration_ms"))
            )
        }
        "skill_call" => format!(
            "{}{}  {}  {}",
            kind("skill_call"),
            s(e, "skill_name"),
            fmt::duration(n(e, "duration_ms")),
            fmt::mark(e.str("status") == Some("ok"))
        ),
        "task_end" => format!(
            "{}{}  {} turn{}  {}",
            kind("task_end"),
            s(e, "exit_status"),
            n(e, "turns"),
            if n(e, "turns") == 1 { "" } else { "s" },
            fmt::duration(n(e, "duration_ms"))
        ),
        other => return other_row(e, other),
    })
}

/// `task tsk_…  ctx_…  (source, origin/trust, lane L)`.
fn task_row(e: &Event) -> String {
    let provenance = match (e.str("origin"), e.str("trust")) {
        (Some(o), Some(t)) => format!("{o}/{t}"),
        (Some(x), None) | (None, Some(x)) => x.to_string(),
        (None, None) => String::new(),
    };
    let lane = e
        .str("lane")
        .map(|l| format!("lane {l}"))
        .unwrap_or_default();
    let notes: Vec<&str> = [e.str("source").unwrap_or_default(), &provenance, &lane]
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect();
    let notes = match notes.is_empty() {
        true => String::new(),
        false => format!("  ({})", notes.join(", ")),
    };
    let context = e
        .str("context_id")
        .map(|c| format!("  {}", fmt::short_id(c, 12)))
        .unwrap_or_default();
    format!(
        "task {}{context}{notes}",
        fmt::short_id(s(e, "task_id"), 12)
    )
}

fn inference_row(e: &Event) -> String {
    let failure = e.str("error_code").map(|code| {
        let why = e.str("error").map(|w| format!(": {}", fmt::cut(w, 80)));
        format!("error  {code}{}", why.unwrap_or_default())
    });
    if let Some(origin) = e.str("origin").filter(|o| o.starts_with("hook:")) {
        let what = failure.unwrap_or_else(|| s(e, "decision").to_string());
        return format!("{}{origin}  {what}", kind("inference"));
    }
    let turn = n(e, "turn");
    match (failure, e.str("tool_name")) {
        (Some(failure), _) => format!("turn {turn}  {failure}"),
        (None, Some(tool)) => format!("turn {turn}  {}  {tool}", s(e, "decision")),
        (None, None) => format!("turn {turn}  {}", s(e, "decision")),
    }
}

/// The rows of the less common events, as upstream prints them.
fn other_row(e: &Event, event_type: &str) -> Option<String> {
    let detail = match event_type {
        "shell_detached" => format!(
            "{}  {}  detached after {}",
            s(e, "binary"),
            fmt::short_id(s(e, "work_id"), 12),
            fmt::duration(n(e, "grace_ms"))
        ),
        "shell_completed" => format!(
            "{}  {}  exit {} {}  {}",
            s(e, "binary"),
            fmt::short_id(s(e, "work_id"), 12),
            e.i64("exit_code").unwrap_or_default(),
            fmt::mark(e.str("status") == Some("ok")),
            fmt::duration(n(e, "duration_ms"))
        ),
        "shell_abandoned" => format!(
            "{}  {}  still running after {}  result lost",
            s(e, "binary"),
            fmt::short_id(s(e, "work_id"), 12),
            fmt::duration(n(e, "running_ms"))
        ),
        "shell_lost" => format!(
            "{}  {}  no result, reported by {}",
            s(e, "binary"),
            fmt::short_id(s(e, "work_id"), 12),
            fmt::short_id(s(e, "reconciled_by_session"), 12)
        ),
        "compaction" => format!(
            "{} → {} tokens",
            fmt::thousands(n(e, "tokens_before")),
            fmt::thousands(n(e, "tokens_after"))
        ),
        "compaction_declined" => format!(
            "{} tokens  {}",
            fmt::thousands(n(e, "tokens")),
            s(e, "reason")
        ),
        "context_seed" => format!(
            "{}  {}  {} tokens",
            s(e, "hook_name"),
            s(e, "outcome"),
            fmt::thousands(n(e, "tokens"))
        ),
        "task_reopened" => format!(
            "{}  reopen {}{}",
            s(e, "hook_name"),
            n(e, "reopen_number"),
            e.str("attempt_context")
                .map(|c| format!("  {c}"))
                .unwrap_or_default()
        ),
        "task_canceled" => s(e, "phase").to_string(),
        "task_rejected" => format!("{}  {}", s(e, "cause"), fmt::short_id(s(e, "task_id"), 12)),
        "task_failed" => format!("{}  {}", s(e, "cause"), fmt::cut(s(e, "reason"), 120)),
        "spend_ceiling_reached" => format!(
            "{}  {} of {} used, {} more asked",
            s(e, "limit"),
            fmt::thousands(n(e, "used")),
            fmt::thousands(n(e, "ceiling")),
            fmt::thousands(n(e, "requested"))
        ),
        "call_denied" => format!(
            "{}  {}  denied by {}",
            s(e, "event"),
            s(e, "target"),
            s(e, "hook_name")
        ),
        "tool_input_refused" => format!(
            "{}  missing {}",
            s(e, "tool_name"),
            e.get("missing")
                .and_then(Value::as_array)
                .map(|m| {
                    m.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default()
        ),
        _ => return None,
    };
    Some(format!("{}{detail}", kind(event_type)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A chain of parents far deeper than a thread's stack could recurse.
    #[test]
    fn a_deep_chain_of_parents_is_walked_without_recursion() {
        let mut text = String::new();
        for i in 0..200_000u32 {
            let parent = match i {
                0 => "null".to_string(),
                i => format!("\"evt_{}\"", i - 1),
            };
            text.push_str(&format!(
                "{{\"event_type\":\"task_canceled\",\"event_id\":\"evt_{i}\",\"parent_id\":{parent},\"phase\":\"queued\"}}\n"
            ));
        }
        let parsed = super::super::parse::parse(Path::new("t"), text.as_bytes()).unwrap();
        let steps = tree(&parsed, false);
        assert_eq!(steps.len(), 200_000);
        assert_eq!(steps.last().unwrap().depth, 199_999);
    }

    /// A v0.2.0-shaped trace: no event ids, so turns and calls hang by task and turn; and
    /// a `shell_lost` a resume appended hangs under its command.
    #[test]
    fn without_ids_lines_hang_under_their_command_turn_and_task() {
        let text = [
            r#"{"event_type":"session_start","session_id":"ses_1","timestamp":1}"#,
            r#"{"event_type":"task_start","task_id":"tsk_1","source":"task_md","origin":"user","trust":"trusted","lane":"user"}"#,
            r#"{"event_type":"inference","task_id":"tsk_1","turn":0,"decision":"tool_call","tool_name":"bash"}"#,
            r#"{"event_type":"tool_call","task_id":"tsk_1","turn":0,"tool_name":"bash","duration_ms":5,"status":"error"}"#,
            r#"{"event_type":"shell_detached","task_id":"tsk_1","turn":0,"work_id":"wrk_9","binary":"/bin/sh","grace_ms":1000}"#,
            r#"{"event_type":"inference","task_id":"tsk_1","turn":1,"decision":"end_turn","tool_name":null}"#,
            r#"{"event_type":"something_new","task_id":"tsk_1"}"#,
            r#"{"event_type":"shell_lost","parent_id":null,"task_id":null,"work_id":"wrk_9","binary":"/bin/sh","reconciled_by_session":"ses_2"}"#,
        ]
        .join("\n");
        let parsed = super::super::parse::parse(Path::new("t"), text.as_bytes()).unwrap();
        let rows: Vec<(usize, String)> = tree(&parsed, false)
            .into_iter()
            .map(|s| (s.depth, s.text))
            .collect();
        assert_eq!(
            rows,
            [
                (
                    0,
                    "task tsk_1  (task_md, user/trusted, lane user)".to_string()
                ),
                (1, "turn 0  tool_call  bash".to_string()),
                (2, "tool_call  bash  5ms  ✗".to_string()),
                (
                    2,
                    "shell_detached /bin/sh  wrk_9  detached after 1.0s".to_string()
                ),
                (
                    3,
                    "shell_lost /bin/sh  wrk_9  no result, reported by ses_2".to_string()
                ),
                (1, "turn 1  end_turn".to_string()),
            ]
        );
    }

    /// A spend ceiling's refusal is a row of its own under the task it stopped.
    #[test]
    fn a_spend_ceiling_is_a_row_under_its_task() {
        let text = [
            r#"{"event_type":"session_start","session_id":"ses_1","timestamp":1}"#,
            r#"{"event_type":"task_start","task_id":"tsk_1","source":"a2a","origin":"user","trust":"trusted","lane":"user"}"#,
            r#"{"event_type":"spend_ceiling_reached","task_id":"tsk_1","limit":"spend.machine_tokens_per_day","ceiling":20000,"used":19950,"requested":1300}"#,
        ]
        .join("\n");
        let parsed = super::super::parse::parse(Path::new("t"), text.as_bytes()).unwrap();
        let rows: Vec<(usize, String)> = tree(&parsed, false)
            .into_iter()
            .map(|s| (s.depth, s.text))
            .collect();
        assert_eq!(
            rows[1],
            (
                1,
                "spend_ceiling_reached spend.machine_tokens_per_day  19,950 of 20,000 used, \
                 1,300 more asked"
                    .to_string()
            )
        );
    }
}
