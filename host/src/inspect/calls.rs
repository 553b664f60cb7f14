//! `mur trace calls`: a formation's call tree, from its entry member's session down
//! through every member task its calls reached.
//!
//! Each member's sessions are looked for where `mur run --roster` puts them: the entry
//! member's as `mur run` would for the same `--workdir` and `--records` (the run hands
//! those to the entry member only), every other member's under its own folder. A callee's
//! task is looked for in every session of that member: the entry's session named may be
//! an older one, a worker's session may serve more than one run of the lead, and only
//! the ids tell which task took which call.

mod tree;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::json;

use self::tree::{CallNode, NotFollowed, TaskNode, Tasks};
use super::select::{self, Places};
use super::{CallsArgs, Where, fmt, print_json};
use crate::error::Error;
use crate::peer::roster::{Member, ROSTER_FILE, Roster};

/// How much of a name, a status or an id a row shows: a hostile trace's strings can be
/// any length, and a row stays one readable line.
const NAME_CHARS: usize = 40;
const STATUS_CHARS: usize = 24;
const ID_CHARS: usize = 64;
/// A call id is shown by its prefix and its last characters: ids made in one millisecond
/// share their first ones, and a suffix is how sessions are named elsewhere.
const CALL_TAIL: usize = 8;

/// A member's session that could not be read: the tree is drawn without it.
#[derive(Debug, Serialize)]
struct Skipped {
    member: String,
    path: PathBuf,
    error: String,
}

pub fn run(args: &CallsArgs) -> Result<(), Error> {
    let roster = load_roster(&args.roster)?;
    let entry = roster.entry();
    let places = Places::new(&Where {
        manifest: entry.manifest.clone(),
        workdir: args.workdir.clone(),
        records: args.records.clone(),
        json: args.json,
    });
    let found = entry_session(&places, &entry.name, args.session.as_deref())?;
    let parsed = found.read()?;
    let session_id = parsed
        .events
        .iter()
        .find_map(|e| e.str("session_id"))
        .unwrap_or(&found.id)
        .to_string();
    let mut skipped = Vec::new();
    let mut book: HashMap<String, Tasks> = roster
        .members
        .iter()
        .filter(|m| !m.entry)
        .map(|m| (m.name.clone(), member_tasks(m, &mut skipped)))
        .collect();
    let mut entry_tasks = Tasks::default();
    entry_tasks.add(&session_id, &parsed);
    book.insert(entry.name.clone(), entry_tasks);
    let tasks = tree::tree(&entry.name, &book);
    if args.json {
        print_json(&json!({
            "roster": roster.dir,
            "entry": entry.name,
            "session_id": session_id,
            "path": found.path,
            "torn_line": parsed.torn,
            "max_depth": tree::MAX_DEPTH,
            "tasks": tasks,
            "skipped": skipped,
        }));
        return Ok(());
    }
    super::out(&render(&session_id, &entry.name, &tasks));
    if let Some(line) = parsed.torn {
        eprintln!("note: {}", fmt::torn_note(line));
    }
    for s in &skipped {
        let note = format!("a session of {} was skipped: {}", s.member, s.error);
        eprintln!("note: {}", crate::escape::line(&note));
    }
    Ok(())
}

/// The roster at `arg`, a folder holding one or the file; a missing one is named as
/// this command looks for it, the rest of the roster's refusals are its own.
fn load_roster(arg: &Path) -> Result<Roster, Error> {
    let file = if arg.is_dir() {
        arg.join(ROSTER_FILE)
    } else {
        arg.to_path_buf()
    };
    if !file.exists() {
        let hint = "run mur trace calls in the formation's folder (the one holding \
                    roster.yaml), or pass --roster with that folder or the file";
        return Err(Error::new("E-TRC-005", format!("no roster at {}", file.display())).hint(hint));
    }
    Roster::load(arg)
}

/// The entry member's session `selector` names; none = the newest.
fn entry_session(
    places: &Places,
    entry: &str,
    selector: Option<&str>,
) -> Result<select::Found, Error> {
    let by_path = selector.is_some_and(select::is_path);
    if !by_path && places.sessions().is_empty() {
        return Err(Error::new(
            "E-TRC-006",
            format!(
                "the entry member '{entry}' has no session under {}",
                places.describe()
            ),
        )
        .hint(
            "run the formation first (mur run --roster DIR --task …); if that run was given \
             --workdir or --records, give them here too",
        ));
    }
    places.resolve(selector).map_err(|e| match e.code {
        "E-TRC-002" if !by_path => e.hint(
            "name the entry member's session by its full ses_ id, a suffix of 4 or more \
             characters, @N (@1 = the newest) or a path to its trace.jsonl",
        ),
        _ => e,
    })
}

/// What every session of `member` says about its tasks, where a formation's run keeps
/// them for a member that is not the entry.
fn member_tasks(member: &Member, skipped: &mut Vec<Skipped>) -> Tasks {
    let places = Places::new(&Where {
        manifest: member.manifest.clone(),
        workdir: None,
        records: None,
        json: false,
    });
    let mut tasks = Tasks::default();
    for found in places.sessions() {
        match found.read() {
            Ok(parsed) => tasks.add(&found.id, &parsed),
            Err(e) => skipped.push(Skipped {
                member: member.name.clone(),
                path: found.path,
                error: format!("error[{}]: {}", e.code, e.message),
            }),
        }
    }
    tasks
}

/// The header, then each entry task and what hangs under it, a blank line between.
pub fn render(session: &str, entry: &str, tasks: &[TaskNode]) -> String {
    let calls: usize = tasks.iter().map(count_calls).sum();
    let task_note = match tasks.len() {
        1 => "1 task".to_string(),
        n => format!("{n} tasks"),
    };
    let call_note = match calls {
        1 => "1 call".to_string(),
        n => format!("{n} calls"),
    };
    let mut rows = vec![(
        0,
        format!("Session {session}  ({entry}, the entry: {task_note}, {call_note})"),
    )];
    for task in tasks {
        rows.push((0, String::new()));
        task_rows(task, 0, &mut rows);
    }
    let mut out = String::new();
    for (depth, text) in rows {
        // A row quotes the trace (names, ids, statuses): it stays one line.
        let text = crate::escape::line(&text);
        out.push_str(&format!("{}{text}\n", "  ".repeat(depth)));
    }
    out.push('\n');
    out
}

fn count_calls(task: &TaskNode) -> usize {
    task.calls
        .iter()
        .map(|c| 1 + c.task.as_ref().map_or(0, count_calls))
        .sum()
}

/// The depth is bounded by the tree's, which is `tree::MAX_DEPTH` calls.
fn task_rows(task: &TaskNode, depth: usize, rows: &mut Vec<(usize, String)>) {
    let status = task
        .status
        .as_deref()
        .map_or("unfinished".to_string(), |s| fmt::cut(s, STATUS_CHARS));
    let duration = task
        .duration_ms
        .map(|ms| format!("  {}", fmt::duration(ms)))
        .unwrap_or_default();
    rows.push((
        depth,
        format!(
            "task {}  {}  {status}{duration}",
            fmt::cut(&task.task_id, ID_CHARS),
            fmt::cut(&task.member, NAME_CHARS)
        ),
    ));
    for call in &task.calls {
        rows.push((depth + 1, call_row(call)));
        if let Some(callee) = &call.task {
            task_rows(callee, depth + 2, rows);
        }
    }
}

/// `→ member  status  duration  mcl_…tail`, and why the callee's task is not beneath it
/// when that is not what the status says already.
fn call_row(call: &CallNode) -> String {
    let member = call.member.as_deref().unwrap_or("—");
    let why = match call.not_followed {
        None | Some(NotFollowed::NoTask) => String::new(),
        Some(NotFollowed::RemotePeer) => "  (a remote peer: its trace is not here)".to_string(),
        Some(NotFollowed::NotFound) => match &call.member_task_id {
            Some(task) => format!(
                "  (task {} is in no session of {})",
                fmt::cut(task, ID_CHARS),
                fmt::cut(member, NAME_CHARS)
            ),
            None => format!(
                "  (its task is in no session of {})",
                fmt::cut(member, NAME_CHARS)
            ),
        },
        Some(NotFollowed::AlreadyShown) => "  (its task is already shown above)".to_string(),
        Some(NotFollowed::TooDeep) => {
            format!("  (not followed: more than {} calls deep)", tree::MAX_DEPTH)
        }
    };
    format!(
        "→ {}  {}  {}  {}{why}",
        fmt::cut(member, NAME_CHARS),
        fmt::cut(call.status.as_deref().unwrap_or("—"), STATUS_CHARS),
        call_duration(call.duration_ms, call.duration_us),
        call.call_id.as_deref().map_or("—".to_string(), short_call)
    )
}

/// A call between members often takes under a millisecond: then its microseconds.
fn call_duration(ms: Option<u64>, us: Option<u64>) -> String {
    match (ms, us) {
        (_, Some(us)) if us < 1000 => format!("{us}µs"),
        (Some(ms), _) => fmt::duration(ms),
        (None, Some(us)) => fmt::duration(us / 1000),
        (None, None) => "—".to_string(),
    }
}

/// `mcl_…0261ef58`: the id's prefix (up to its `_`), then its last characters.
fn short_call(id: &str) -> String {
    let chars: Vec<char> = id.chars().collect();
    let prefix = chars
        .iter()
        .take(5)
        .position(|c| *c == '_')
        .map_or(0, |i| i + 1);
    if chars.len() <= prefix + CALL_TAIL + 1 {
        return fmt::cut(id, ID_CHARS);
    }
    let head: String = chars[..prefix].iter().collect();
    let tail: String = chars[chars.len() - CALL_TAIL..].iter().collect();
    fmt::cut(&format!("{head}…{tail}"), ID_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_reads_by_its_prefix_its_tail_and_its_finest_duration() {
        assert_eq!(
            short_call("mcl_01a24fdb8e91755aa98366580261ef58"),
            "mcl_…0261ef58"
        );
        assert_eq!(short_call("c1"), "c1");
        assert_eq!(short_call("0123456789abcdef"), "…89abcdef");
        assert_eq!(call_duration(Some(0), Some(50)), "50µs");
        assert_eq!(call_duration(Some(3), Some(3029)), "3ms");
        assert_eq!(call_duration(None, Some(2_500_000)), "2.5s");
        assert_eq!(call_duration(None, None), "—");
    }

    #[test]
    fn the_tree_renders_one_escaped_row_per_task_and_call() {
        let callee = TaskNode {
            member: "a".into(),
            task_id: "tsk_2".into(),
            session_id: Some("ses_a".into()),
            status: None,
            duration_ms: None,
            calls: vec![CallNode {
                call_id: Some("mcl_3".into()),
                member: Some("search\u{1b}[2J".into()),
                status: Some("answered".into()),
                member_task_id: Some("x".into()),
                duration_ms: Some(1200),
                duration_us: Some(1_200_000),
                task: None,
                not_followed: Some(NotFollowed::RemotePeer),
            }],
        };
        let top = TaskNode {
            member: "lead".into(),
            task_id: "tsk_1".into(),
            session_id: Some("ses_l".into()),
            status: Some("ok".into()),
            duration_ms: Some(10),
            calls: vec![CallNode {
                call_id: Some("mcl_2".into()),
                member: Some("a".into()),
                status: Some("answered".into()),
                member_task_id: Some("tsk_2".into()),
                duration_ms: Some(0),
                duration_us: Some(800),
                task: Some(callee),
                not_followed: None,
            }],
        };
        assert_eq!(
            render("ses_l", "lead", &[top]),
            "Session ses_l  (lead, the entry: 1 task, 2 calls)\n\
             \n\
             task tsk_1  lead  ok  10ms\n  \
             → a  answered  800µs  mcl_2\n    \
             task tsk_2  a  unfinished\n      \
             → search\\u{1b}[2J  answered  1.2s  mcl_3  (a remote peer: its trace is not here)\n\
             \n"
        );
    }
}
