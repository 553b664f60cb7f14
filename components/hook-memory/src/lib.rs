//! A memory hook: gives a capsule memory across sessions.
//!
//! Declared with no `binding` (it needs both task-start and task-end) and
//! `commit_policy: seed-context`. On `task-start` it seeds the context with the entries of
//! `/memory.md` (its scope, preopened as `/`), oldest first: one user message per entry,
//! holding a single text block. On a successful `task-end` it appends an entry for the
//! task; that write is a side effect, so the verdict stays `none` (the policy would not
//! honor any other arm there).

wit_bindgen::generate!({
    path: ["../../wit/message", "../../wit/hook"],
    world: "murmur:hook/hook",
    // `murmur:message` is another package, so its bindings must be asked for explicitly.
    generate_all,
});

use std::fs::OpenOptions;
use std::io::{ErrorKind, Write as _};

use exports::murmur::hook::lifecycle::{Event, Guest, TaskEnd, Verdict};
use murmur::message::types::{Block, Message, Role};

const MEMORY_FILE: &str = "/memory.md";
/// The line that separates two entries in the memory file.
const SEPARATOR: &str = "---";
/// How much of a task's result one entry keeps, in characters.
const RESULT_CHARS: usize = 500;

struct Component;

impl Guest for Component {
    fn handle(event: Event) -> Result<Verdict, String> {
        match event {
            Event::TaskStart(_) => Ok(seed(&read_memory())),
            Event::TaskEnd(end) => {
                remember(&end)?;
                Ok(Verdict::None)
            }
            _ => Ok(Verdict::None),
        }
    }
}

/// The memory file's text; empty when it (or the whole scope) is missing or unreadable,
/// since a capsule without memory yet is the normal first run.
fn read_memory() -> String {
    std::fs::read_to_string(MEMORY_FILE).unwrap_or_default()
}

fn seed(memory: &str) -> Verdict {
    let messages: Vec<Message> = split_entries(memory)
        .into_iter()
        .map(|entry| Message {
            role: Role::User,
            content: vec![Block::Text(format!(
                "Memory from an earlier task:\n{entry}"
            ))],
        })
        .collect();
    if messages.is_empty() {
        Verdict::None
    } else {
        Verdict::SeedContext(messages)
    }
}

/// The entries of the memory file, oldest first: the text between `---` lines, trimmed,
/// blank ones dropped (a hand-edited file may have stray separators).
fn split_entries(memory: &str) -> Vec<String> {
    let mut entries = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    for line in memory.lines() {
        if line.trim_end() == SEPARATOR {
            push_entry(&mut entries, &current);
            current.clear();
        } else {
            current.push(line);
        }
    }
    push_entry(&mut entries, &current);
    entries
}

fn push_entry(entries: &mut Vec<String>, lines: &[&str]) {
    let entry = lines.join("\n");
    let entry = entry.trim();
    if !entry.is_empty() {
        entries.push(entry.to_string());
    }
}

/// Appends the entry for a successful task. A hook with no scope has nowhere to write and
/// that is not a failure; any other write failure is reported so that it reaches the
/// hook's log (task-end is not a decision point, so an error only logs).
fn remember(end: &TaskEnd) -> Result<(), String> {
    if end.exit_status != "ok" {
        return Ok(());
    }
    if !has_scope() {
        return Ok(());
    }
    let existing = match std::fs::read_to_string(MEMORY_FILE) {
        Ok(text) => text,
        Err(e) if e.kind() == ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("cannot read {MEMORY_FILE}: {e}")),
    };
    let addition = append_text(&existing, &entry_for(end));
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(MEMORY_FILE)
        .and_then(|mut file| file.write_all(addition.as_bytes()))
        .map_err(|e| format!("cannot append to {MEMORY_FILE}: {e}"))
}

/// Whether the host preopened a scope: without one even `/` cannot be looked at.
fn has_scope() -> bool {
    std::fs::metadata("/").is_ok()
}

/// `task <id>: <start of the result>`. A line that is exactly `---` inside the result would
/// split the entry in two when it is read back, so such lines are defused.
fn entry_for(end: &TaskEnd) -> String {
    let head: String = end.result.trim().chars().take(RESULT_CHARS).collect();
    let head = head
        .lines()
        .map(|line| {
            if line.trim_end() == SEPARATOR {
                "- - -"
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    format!("task {}: {}", end.task_id, head)
}

/// What to append to a memory file holding `existing` so that `entry` becomes its last
/// entry: a separator only when there is already an entry, and a newline first when the
/// file does not end with one.
fn append_text(existing: &str, entry: &str) -> String {
    let mut out = String::new();
    if !existing.trim().is_empty() {
        if !existing.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(SEPARATOR);
        out.push('\n');
    }
    out.push_str(entry);
    out.push('\n');
    out
}

export!(Component);

#[cfg(test)]
mod tests {
    use super::*;

    fn end(result: &str) -> TaskEnd {
        TaskEnd {
            task_id: "t7".into(),
            exit_status: "ok".into(),
            result: result.into(),
            attempt: 1,
        }
    }

    #[test]
    fn entries_split_on_separator_lines_oldest_first() {
        let text = "first\nline two\n---\nsecond\n---\n\n---\nthird ---\n";
        assert_eq!(
            split_entries(text),
            vec!["first\nline two", "second", "third ---"]
        );
        assert!(split_entries("").is_empty());
        assert!(split_entries("---\n \n---\n").is_empty());
    }

    /// The text of a message made of exactly one text block.
    fn only_text(message: &Message) -> &str {
        match message.content.as_slice() {
            [Block::Text(text)] => text,
            _ => panic!("expected one text block: {message:?}"),
        }
    }

    #[test]
    fn seed_has_one_user_message_per_entry() {
        match seed("a\n---\nb\n") {
            Verdict::SeedContext(messages) => {
                assert_eq!(messages.len(), 2);
                assert!(messages.iter().all(|m| m.role == Role::User));
                assert_eq!(only_text(&messages[0]), "Memory from an earlier task:\na");
                assert_eq!(only_text(&messages[1]), "Memory from an earlier task:\nb");
            }
            _ => panic!("expected a seed"),
        }
        assert!(matches!(seed("  \n"), Verdict::None));
    }

    #[test]
    fn entry_keeps_the_first_500_characters() {
        let long = "é".repeat(600);
        let entry = entry_for(&end(&long));
        assert_eq!(entry, format!("task t7: {}", "é".repeat(500)));
    }

    #[test]
    fn entry_defuses_separator_lines() {
        let entry = entry_for(&end("one\n---\ntwo"));
        assert_eq!(entry, "task t7: one\n- - -\ntwo");
        assert_eq!(split_entries(&append_text("", &entry)).len(), 1);
    }

    #[test]
    fn appending_round_trips_through_split() {
        let mut file = String::new();
        for entry in ["task a: x", "task b: y"] {
            file.push_str(&append_text(&file, entry));
        }
        assert_eq!(file, "task a: x\n---\ntask b: y\n");
        // A hand-written file without a final newline still gets a clean separator.
        assert_eq!(append_text("old", "new"), "\n---\nnew\n");
        assert_eq!(split_entries(&file), vec!["task a: x", "task b: y"]);
    }
}
