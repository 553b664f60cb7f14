//! `mur run --resume SESSION`: what the resumed-from session left unaccounted for.
//!
//! A session that ends cleanly writes `shell_completed` or `shell_abandoned` for every
//! command it detached; a runtime killed outright writes neither. Its lone
//! `shell_detached` lines are reported to the new run as one `completion` task, and each
//! is marked `shell_lost` in the old trace so a second resume reports nothing. Nothing is
//! killed, adopted or recovered: the commands' results are simply gone.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::Error;
use crate::ids;
use crate::queue::{Origin, Pending, Queue, Source};
use crate::selector::{pick, session_dirs};
use crate::trace::line::{self, Work};
use crate::trace::{Place, Trace};

/// The session a run resumes after.
pub struct Resumed {
    pub session_id: String,
    pub trace: PathBuf,
}

/// A command the old session detached and never accounted for.
#[derive(Debug, Clone, PartialEq)]
pub struct Lost {
    pub work_id: String,
    pub binary: String,
    pub command: String,
    pub detached_at_ms: u64,
    pub context_id: Option<String>,
}

/// Resolves SESSION (full `ses_` id, a suffix of 4+ characters, or `@N`, 1 = newest)
/// among the `ses_*` directories of `root`. Called before the new session exists, so
/// `@1` is the previous run.
///
/// # Errors
///
/// `E-RUN-018` when nothing (or more than one session) matches, or the match has no trace.
pub fn find(root: &Path, selector: &str) -> Result<Resumed, Error> {
    let sessions = session_dirs(root);
    let session_id = pick(&sessions, selector).map_err(|why| {
        Error::new("E-RUN-018", format!("--resume {selector}: {why} under {}", root.display()))
            .hint("name a session directory there: a full ses_ id, a suffix of 4 or more characters, or @N (@1 = the newest); --workdir and --manifest decide where sessions are looked for")
    })?;
    let trace = root.join(&session_id).join("trace.jsonl");
    if !trace.is_file() {
        return Err(Error::new(
            "E-RUN-018",
            format!(
                "--resume {selector}: {} has no trace.jsonl",
                root.join(&session_id).display()
            ),
        )
        .hint("that session never started its loop; resume another one"));
    }
    Ok(Resumed { session_id, trace })
}

/// Every `shell_detached` with no `shell_completed`, `shell_abandoned` or `shell_lost` for
/// its work id, in trace order. Lines that do not parse are skipped: a killed writer can
/// leave a torn last line.
pub fn lost(trace: &str) -> Vec<Lost> {
    let events: Vec<Value> = trace
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let accounted: HashSet<&str> = events
        .iter()
        .filter(|e| {
            matches!(
                e["event_type"].as_str(),
                Some("shell_completed" | "shell_abandoned" | "shell_lost")
            )
        })
        .filter_map(|e| e["work_id"].as_str())
        .collect();
    events
        .iter()
        .filter(|e| e["event_type"] == "shell_detached")
        .filter_map(|e| {
            let work_id = e["work_id"].as_str()?;
            (!accounted.contains(work_id)).then(|| Lost {
                work_id: work_id.to_string(),
                binary: e["binary"].as_str().unwrap_or_default().to_string(),
                command: e["command"].as_str().unwrap_or_default().to_string(),
                detached_at_ms: e["timestamp"].as_u64().unwrap_or_default(),
                context_id: e["context_id"].as_str().map(str::to_string),
            })
        })
        .collect()
}

/// Reports the old session's lost commands to this run as one `completion` task, queued
/// behind the launch task. Failures to read or mark are a stderr line: the launch goes on.
/// `session_id` is this run's, which the old trace's marks name.
pub fn report(queue: &Queue, session_id: &str, resumed: &Resumed) {
    let text = match std::fs::read_to_string(&resumed.trace) {
        Ok(text) => text,
        Err(e) => {
            eprintln!(
                "[murmur] warning: --resume could not read {}: {e}; its lost commands are not reported",
                resumed.trace.display()
            );
            return;
        }
    };
    let lost = lost(&text);
    if lost.is_empty() {
        return;
    }
    let task_id = ids::task();
    let marked = mark_lost(resumed, &lost, session_id, &task_id);
    let Some(first) = marked.first() else {
        return;
    };
    eprintln!(
        "[murmur] {} detached command(s) of {} were lost with its runtime; reporting them as task {task_id}",
        marked.len(),
        resumed.session_id
    );
    queue.push_own(Pending {
        breach: None,
        traceparent: None,
        id: task_id,
        context_id: first.context_id.clone().unwrap_or_else(ids::context),
        text: report_text(&resumed.session_id, &marked),
        origin: Origin::Completion,
        source: Source::DetachedLost,
        message_id: None,
    });
}

/// Appends `shell_lost` to the old trace for each command; only those marked are
/// reported, or a later resume would report the others again.
fn mark_lost(resumed: &Resumed, lost: &[Lost], session_id: &str, task_id: &str) -> Vec<Lost> {
    let old = match Trace::create(&resumed.trace, &resumed.session_id) {
        Ok(old) => old,
        Err(e) => {
            eprintln!(
                "[murmur] warning: --resume could not open {}: {e}; its lost commands are not reported",
                resumed.trace.display()
            );
            return Vec::new();
        }
    };
    lost.iter()
        .filter(|l| {
            let marked = line::shell_lost(&line::Lost {
                work: Work {
                    work_id: &l.work_id,
                    binary: &l.binary,
                    command: &l.command,
                },
                detached_at_ms: l.detached_at_ms,
                by_session: session_id,
                task_id,
            });
            match old.write(Place::default(), marked) {
                Ok(_) => true,
                Err(e) => {
                    eprintln!("[murmur] warning: could not mark {} lost: {e}", l.work_id);
                    false
                }
            }
        })
        .cloned()
        .collect()
}

fn report_text(old_session: &str, lost: &[Lost]) -> String {
    let mut text = format!(
        "The runtime of session {old_session} died while these commands were running in the \
         background:\n"
    );
    for l in lost {
        text.push_str(&format!(
            "- {}: binary {}, command `{}`, detached at unix ms {}\n",
            l.work_id, l.binary, l.command, l.detached_at_ms
        ));
    }
    text.push_str(
        "Their results are lost: there is no exit code, no output and no log for them, and \
         whether they finished is unknown. Nothing was recovered. Run a command again if you \
         still need what it would have produced.",
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(kind: &str, work: &str) -> String {
        json!({"event_type": kind, "work_id": work, "timestamp": 7, "binary": "/bin/bash",
               "command": "sleep 9", "context_id": "ctx_1"})
        .to_string()
    }

    #[test]
    fn only_unaccounted_detached_commands_are_lost() {
        let trace = [
            line("shell_detached", "wrk_a"),
            line("shell_detached", "wrk_b"),
            line("shell_detached", "wrk_c"),
            line("shell_detached", "wrk_d"),
            line("shell_completed", "wrk_a"),
            line("shell_abandoned", "wrk_b"),
            line("shell_lost", "wrk_c"),
            "{\"event_type\": \"shell_det".to_string(),
        ]
        .join("\n");
        let lost = lost(&trace);
        assert_eq!(lost.len(), 1);
        assert_eq!(lost[0].work_id, "wrk_d");
        assert_eq!(lost[0].detached_at_ms, 7);
        assert_eq!(lost[0].context_id.as_deref(), Some("ctx_1"));
    }
}
