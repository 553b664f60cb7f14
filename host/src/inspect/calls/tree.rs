//! A formation's call tree, joined from the lines both sides of a call wrote: the
//! caller's `member_call` names the call (`call_id`) and the callee's task
//! (`member_task_id`); the callee's `peer_task_received` names the same call under its
//! own task id. The callee's side is looked up first, as it is the record of the task
//! that actually ran; the caller's `member_task_id` is the fallback for a callee whose
//! `peer_task_received` line is missing (an older or cut-short trace).
//!
//! Traces are input, and a hostile one can point a call back into a task already shown,
//! or chain further than any formation runs (a real chain stops at 4 calls). So each task
//! is shown once, and the walk stops at [`MAX_DEPTH`] calls: the tree is never larger
//! than the lines read, and the recursion never deeper than `MAX_DEPTH`.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::inspect::parse::{Event, Parsed};

/// How many calls deep the walk follows.
pub const MAX_DEPTH: usize = 16;

/// What one member's sessions say about its tasks.
#[derive(Debug, Default)]
pub struct Tasks {
    tasks: HashMap<String, Task>,
    /// Task ids in the order their first line came, so the entry's tasks show in the
    /// order they ran.
    order: Vec<String>,
    /// Call id → the task that took it, from `peer_task_received`.
    by_call: HashMap<String, String>,
}

#[derive(Debug)]
struct Task {
    session_id: String,
    status: Option<String>,
    duration_ms: Option<u64>,
    calls: Vec<Call>,
}

/// A `member_call` line. Every key may be missing from a damaged trace: none is relied on.
#[derive(Debug, Clone)]
struct Call {
    call_id: Option<String>,
    member: Option<String>,
    status: Option<String>,
    member_task_id: Option<String>,
    duration_ms: Option<u64>,
    duration_us: Option<u64>,
}

impl Call {
    fn read(e: &Event) -> Self {
        let text = |key: &str| e.str(key).map(str::to_string);
        Call {
            call_id: text("call_id"),
            member: text("member"),
            status: text("status"),
            member_task_id: text("member_task_id"),
            duration_ms: e.u64("duration_ms"),
            duration_us: e.u64("duration_us"),
        }
    }
}

impl Tasks {
    /// Adds the lines of one session. Task ids are unique across sessions; a task seen
    /// in an earlier session keeps that one, so a copied trace cannot double its calls.
    pub fn add(&mut self, session_id: &str, parsed: &Parsed) {
        for e in &parsed.events {
            let kind = e.kind.as_str();
            if !matches!(
                kind,
                "task_start" | "task_end" | "member_call" | "peer_task_received"
            ) {
                continue;
            }
            let Some(task_id) = e.str("task_id") else {
                continue;
            };
            let task = match self.tasks.entry(task_id.to_string()) {
                Entry::Vacant(slot) => {
                    self.order.push(task_id.to_string());
                    slot.insert(Task {
                        session_id: session_id.to_string(),
                        status: None,
                        duration_ms: None,
                        calls: Vec::new(),
                    })
                }
                Entry::Occupied(slot) if slot.get().session_id == session_id => slot.into_mut(),
                Entry::Occupied(_) => continue,
            };
            match kind {
                // A reopened task ends more than once; the last end is how it ended.
                "task_end" => {
                    task.status = e.str("exit_status").map(str::to_string);
                    task.duration_ms = e.u64("duration_ms");
                }
                "member_call" => task.calls.push(Call::read(e)),
                "peer_task_received" => {
                    if let Some(call) = e.str("call_id") {
                        self.by_call
                            .entry(call.to_string())
                            .or_insert_with(|| task_id.to_string());
                    }
                }
                _ => {}
            }
        }
    }

    /// The task ids, in the order they first appear.
    pub fn ids(&self) -> &[String] {
        &self.order
    }

    /// The task a call reached, by the callee's record of the call, else by the id the
    /// caller was told.
    fn taker(&self, call: &Call) -> Option<&str> {
        let by_call = call
            .call_id
            .as_deref()
            .and_then(|id| self.by_call.get(id))
            .map(String::as_str);
        by_call.or_else(|| {
            let id = call.member_task_id.as_deref()?;
            self.tasks.get_key_value(id).map(|(id, _)| id.as_str())
        })
    }
}

/// One task, and the calls it made.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskNode {
    pub member: String,
    pub task_id: String,
    /// The session whose trace holds it; none when no line of it was found.
    pub session_id: Option<String>,
    /// `task_end.exit_status`; none when the task has no `task_end` (still running, or
    /// its session was killed).
    pub status: Option<String>,
    pub duration_ms: Option<u64>,
    pub calls: Vec<CallNode>,
}

/// One call, and the callee's task when it was followed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallNode {
    pub call_id: Option<String>,
    pub member: Option<String>,
    pub status: Option<String>,
    pub member_task_id: Option<String>,
    pub duration_ms: Option<u64>,
    pub duration_us: Option<u64>,
    pub task: Option<TaskNode>,
    /// Why `task` is none.
    pub not_followed: Option<NotFollowed>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NotFollowed {
    /// The callee took no task (refused, busy, unreachable).
    NoTask,
    /// A remote A2A agent (the caller's `peers[]`): its trace is not ours.
    RemotePeer,
    /// The callee's task is in none of the callee's sessions.
    NotFound,
    /// The task is already in the tree: a hostile trace's loop, or a copied line.
    AlreadyShown,
    /// Past [`MAX_DEPTH`] calls.
    TooDeep,
}

/// The tree of each task of `entry`'s tasks in `book`, which holds every member of the
/// roster (a name missing from it is a remote peer).
pub fn tree<'a>(entry: &'a str, book: &'a HashMap<String, Tasks>) -> Vec<TaskNode> {
    let Some(tasks) = book.get(entry) else {
        return Vec::new();
    };
    let mut walk = Walk {
        book,
        shown: HashSet::new(),
    };
    // Every entry task counts as shown before any is walked, so a call into one of them
    // is not followed under another.
    for id in tasks.ids() {
        walk.shown.insert((entry, id));
    }
    tasks
        .ids()
        .iter()
        .map(|id| walk.task(entry, id, 0))
        .collect()
}

struct Walk<'a> {
    book: &'a HashMap<String, Tasks>,
    /// (member, task id) of every task in the tree so far.
    shown: HashSet<(&'a str, &'a str)>,
}

impl<'a> Walk<'a> {
    fn task(&mut self, member: &'a str, task_id: &'a str, depth: usize) -> TaskNode {
        let book = self.book;
        let task = book.get(member).and_then(|t| t.tasks.get(task_id));
        let calls = task
            .map(|t| t.calls.iter().map(|call| self.call(call, depth)).collect())
            .unwrap_or_default();
        TaskNode {
            member: member.to_string(),
            task_id: task_id.to_string(),
            session_id: task.map(|t| t.session_id.clone()),
            status: task.and_then(|t| t.status.clone()),
            duration_ms: task.and_then(|t| t.duration_ms),
            calls,
        }
    }

    /// `call`, made by a task `depth` calls below the entry's.
    fn call(&mut self, call: &'a Call, depth: usize) -> CallNode {
        let (task, not_followed) = match self.follow(call, depth) {
            Ok(task) => (Some(task), None),
            Err(why) => (None, Some(why)),
        };
        CallNode {
            call_id: call.call_id.clone(),
            member: call.member.clone(),
            status: call.status.clone(),
            member_task_id: call.member_task_id.clone(),
            duration_ms: call.duration_ms,
            duration_us: call.duration_us,
            task,
            not_followed,
        }
    }

    fn follow(&mut self, call: &'a Call, depth: usize) -> Result<TaskNode, NotFollowed> {
        let book = self.book;
        let Some((member, tasks)) = call.member.as_deref().and_then(|m| book.get_key_value(m))
        else {
            return Err(match call.member {
                Some(_) => NotFollowed::RemotePeer,
                None => NotFollowed::NotFound,
            });
        };
        let Some(task_id) = tasks.taker(call) else {
            return Err(match call.member_task_id {
                Some(_) => NotFollowed::NotFound,
                None => NotFollowed::NoTask,
            });
        };
        if depth >= MAX_DEPTH {
            return Err(NotFollowed::TooDeep);
        }
        if !self.shown.insert((member.as_str(), task_id)) {
            return Err(NotFollowed::AlreadyShown);
        }
        Ok(self.task(member, task_id, depth + 1))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::inspect::parse::parse;

    fn tasks(session: &str, lines: &[String]) -> Tasks {
        let parsed = parse(Path::new("t"), lines.join("\n").as_bytes()).unwrap();
        let mut tasks = Tasks::default();
        tasks.add(session, &parsed);
        tasks
    }

    fn start(task: &str) -> String {
        format!(r#"{{"event_type":"task_start","task_id":"{task}"}}"#)
    }

    fn end(task: &str, status: &str, ms: u64) -> String {
        format!(
            r#"{{"event_type":"task_end","task_id":"{task}","exit_status":"{status}","duration_ms":{ms}}}"#
        )
    }

    fn call(task: &str, call: &str, member: &str, status: &str, taker: Option<&str>) -> String {
        let taker = taker.map_or("null".to_string(), |t| format!("\"{t}\""));
        format!(
            r#"{{"event_type":"member_call","task_id":"{task}","call_id":"{call}","member":"{member}","status":"{status}","member_task_id":{taker},"duration_ms":3,"duration_us":3100}}"#
        )
    }

    fn received(task: &str, call: &str) -> String {
        format!(r#"{{"event_type":"peer_task_received","task_id":"{task}","call_id":"{call}"}}"#)
    }

    /// Each row: depth, then `member task status` for a task and `→ member status why`
    /// for a call.
    fn rows(nodes: &[TaskNode]) -> Vec<String> {
        fn task(t: &TaskNode, depth: usize, out: &mut Vec<String>) {
            let status = t.status.as_deref().unwrap_or("-");
            out.push(format!("{depth} {} {} {status}", t.member, t.task_id));
            for c in &t.calls {
                let why = c
                    .not_followed
                    .map(|w| format!(" {w:?}"))
                    .unwrap_or_default();
                out.push(format!(
                    "{depth} → {} {}{why}",
                    c.member.as_deref().unwrap_or("?"),
                    c.status.as_deref().unwrap_or("?")
                ));
                if let Some(t) = &c.task {
                    task(t, depth + 1, out);
                }
            }
        }
        let mut out = Vec::new();
        for t in nodes {
            task(t, 0, &mut out);
        }
        out
    }

    #[test]
    fn a_nested_call_a_refusal_and_a_remote_peer_make_one_tree() {
        let mut book = HashMap::new();
        book.insert(
            "lead".to_string(),
            tasks(
                "ses_l",
                &[
                    start("t0"),
                    call("t0", "c1", "a", "answered", Some("ta")),
                    call("t0", "c2", "search", "answered", Some("remote_task")),
                    end("t0", "ok", 10),
                ],
            ),
        );
        book.insert(
            "a".to_string(),
            tasks(
                "ses_a",
                &[
                    received("ta", "c1"),
                    start("ta"),
                    call("ta", "c3", "b", "answered", Some("tb")),
                    call("ta", "c4", "b", "refused", None),
                    end("ta", "ok", 7),
                ],
            ),
        );
        // b's task is found by the call id alone: the caller's member_task_id is wrong.
        book.insert(
            "b".to_string(),
            tasks(
                "ses_b",
                &[received("tb", "c3"), start("tb"), end("tb", "failed", 2)],
            ),
        );
        let tree = tree("lead", &book);
        assert_eq!(
            rows(&tree),
            [
                "0 lead t0 ok",
                "0 → a answered",
                "1 a ta ok",
                "1 → b answered",
                "2 b tb failed",
                "1 → b refused NoTask",
                "0 → search answered RemotePeer",
            ]
        );
        assert_eq!(
            tree[0].calls[0]
                .task
                .as_ref()
                .unwrap()
                .session_id
                .as_deref(),
            Some("ses_a")
        );
    }

    #[test]
    fn a_task_missing_from_the_callee_s_sessions_is_said_to_be() {
        let mut book = HashMap::new();
        book.insert(
            "lead".to_string(),
            tasks(
                "ses_l",
                &[start("t0"), call("t0", "c1", "a", "answered", Some("gone"))],
            ),
        );
        book.insert("a".to_string(), Tasks::default());
        assert_eq!(
            rows(&tree("lead", &book)),
            ["0 lead t0 -", "0 → a answered NotFound"]
        );
    }

    /// a's task calls b, whose task calls back into a's and into the entry's, and into
    /// itself: each is shown once, and the walk ends.
    #[test]
    fn a_hostile_cycle_is_shown_once_and_not_followed_again() {
        let mut book = HashMap::new();
        book.insert(
            "lead".to_string(),
            tasks(
                "ses_l",
                &[start("t0"), call("t0", "c1", "a", "answered", Some("ta"))],
            ),
        );
        book.insert(
            "a".to_string(),
            tasks(
                "ses_a",
                &[
                    received("ta", "c1"),
                    call("ta", "c2", "b", "answered", Some("tb")),
                ],
            ),
        );
        book.insert(
            "b".to_string(),
            tasks(
                "ses_b",
                &[
                    received("tb", "c2"),
                    received("tb", "c5"),
                    call("tb", "c3", "a", "answered", Some("ta")),
                    call("tb", "c4", "lead", "answered", Some("t0")),
                    call("tb", "c5", "b", "answered", None),
                ],
            ),
        );
        assert_eq!(
            rows(&tree("lead", &book)),
            [
                "0 lead t0 -",
                "0 → a answered",
                "1 a ta -",
                "1 → b answered",
                "2 b tb -",
                "2 → a answered AlreadyShown",
                "2 → lead answered AlreadyShown",
                "2 → b answered AlreadyShown",
            ]
        );
    }

    /// A chain far longer than a formation allows is followed `MAX_DEPTH` calls down.
    #[test]
    fn a_chain_deeper_than_the_limit_is_cut_there() {
        let mut lines = vec![start("t0")];
        for i in 0..40 {
            lines.push(call(
                &format!("t{i}"),
                &format!("c{i}"),
                "a",
                "answered",
                None,
            ));
            lines.push(received(&format!("t{}", i + 1), &format!("c{i}")));
        }
        let mut book = HashMap::new();
        book.insert("lead".to_string(), tasks("ses_l", &lines[..2]));
        book.insert("a".to_string(), tasks("ses_a", &lines[2..]));
        let rows = rows(&tree("lead", &book));
        assert_eq!(rows.len(), 2 * (MAX_DEPTH + 1));
        assert_eq!(
            rows.last().map(String::as_str),
            Some(format!("{MAX_DEPTH} → a answered TooDeep").as_str())
        );
    }

    /// The same task id in a second session (a copied trace) keeps the first's lines.
    #[test]
    fn a_task_is_read_from_the_first_session_that_holds_it() {
        let lines = [start("t0"), call("t0", "c1", "a", "refused", None)];
        let parsed = |lines: &[String]| parse(Path::new("t"), lines.join("\n").as_bytes()).unwrap();
        let mut lead = Tasks::default();
        lead.add("ses_1", &parsed(&lines));
        lead.add("ses_2", &parsed(&lines));
        let mut book = HashMap::new();
        book.insert("lead".to_string(), lead);
        book.insert("a".to_string(), Tasks::default());
        let tree = tree("lead", &book);
        assert_eq!(tree.len(), 1);
        assert_eq!(tree[0].calls.len(), 1);
        assert_eq!(tree[0].session_id.as_deref(), Some("ses_1"));
    }

    /// Lines without a task, or with keys of the wrong type, are read as far as they go.
    #[test]
    fn damaged_lines_read_as_missing_keys() {
        let lines = [
            start("t0"),
            r#"{"event_type":"member_call","task_id":null,"member":"a"}"#.to_string(),
            r#"{"event_type":"member_call","task_id":"t0","member":7,"call_id":[1]}"#.to_string(),
            r#"{"event_type":"task_end","task_id":"t0","exit_status":{},"duration_ms":"x"}"#
                .to_string(),
        ];
        let mut book = HashMap::new();
        book.insert("lead".to_string(), tasks("ses_l", &lines));
        let tree = tree("lead", &book);
        assert_eq!(rows(&tree), ["0 lead t0 -", "0 → ? ? NotFound"]);
        assert_eq!(tree[0].duration_ms, None);
    }
}
