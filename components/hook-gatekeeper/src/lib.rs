//! A gatekeeper hook (`binding: on-task-end`, `commit_policy: reopen-task`): it reopens a
//! task until the task's result passes a check.
//!
//! The check lives in `/required.txt` of the hook's scope: every non-empty line must appear
//! in the result (case-insensitive). Without that file (or with an empty one) the result
//! only has to be non-empty and not an `error:` report.

wit_bindgen::generate!({
    path: ["../../wit/message", "../../wit/hook"],
    world: "murmur:hook/hook",
    // `murmur:message` is another package, so its bindings must be asked for explicitly.
    generate_all,
});

use exports::murmur::hook::lifecycle::{Event, Guest, TaskEnd, Verdict};

/// The check's file, in the hook's `capabilities.filesystem.scope` (preopened as `/`).
const REQUIRED_FILE: &str = "/required.txt";

struct Component;

impl Guest for Component {
    fn handle(event: Event) -> Result<Verdict, String> {
        match event {
            Event::TaskEnd(end) => Ok(judge(&end)),
            _ => Ok(Verdict::None),
        }
    }
}

/// Only a successful attempt is judged: a failed or canceled one has its own status, and
/// reopening it would spend the task's turns on something the feedback cannot fix.
fn judge(end: &TaskEnd) -> Verdict {
    if end.exit_status != "ok" {
        return Verdict::None;
    }
    match check(&read_required(), &end.result) {
        Some(feedback) => Verdict::ReopenTask(feedback),
        None => Verdict::None,
    }
}

/// The required phrases; none when the file is missing, unreadable or empty (a hook with
/// no scope cannot read anything, which is not an error of the task's).
fn read_required() -> Vec<String> {
    std::fs::read_to_string(REQUIRED_FILE)
        .map(|text| parse_required(&text))
        .unwrap_or_default()
}

/// One phrase per non-empty line; surrounding whitespace (and a CRLF's `\r`) is not part of it.
fn parse_required(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(str::to_string)
        .collect()
}

/// The feedback for a result that fails the check, or `None` when it passes.
fn check(required: &[String], result: &str) -> Option<String> {
    if required.is_empty() {
        return check_default(result);
    }
    let result = result.to_lowercase();
    let missing: Vec<String> = required
        .iter()
        .filter(|phrase| !result.contains(&phrase.to_lowercase()))
        .map(|phrase| format!("\"{phrase}\""))
        .collect();
    if missing.is_empty() {
        None
    } else {
        Some(format!("The answer must mention: {}.", missing.join(", ")))
    }
}

/// Without required phrases, a result is acceptable when there is one and it is not the
/// `error: ...` text the host writes for a task that broke.
fn check_default(result: &str) -> Option<String> {
    let trimmed = result.trim();
    if trimmed.is_empty() {
        return Some("The answer is empty: write the task's result.".into());
    }
    if trimmed.to_lowercase().starts_with("error:") {
        return Some(
            "The answer reports an error instead of a result: address the error and answer the task."
                .into(),
        );
    }
    None
}

export!(Component);

#[cfg(test)]
mod tests {
    use super::*;

    fn phrases(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn required_lines_skip_blanks_and_trim() {
        assert_eq!(
            parse_required("  Paris \r\n\n\t\nFrance\n"),
            phrases(&["Paris", "France"])
        );
        assert!(parse_required("\n \n").is_empty());
    }

    #[test]
    fn all_phrases_present_passes_case_insensitively() {
        let required = phrases(&["paris", "FRANCE"]);
        assert_eq!(check(&required, "Paris is the capital of France."), None);
    }

    #[test]
    fn missing_phrases_are_named_in_order() {
        let required = phrases(&["X", "Paris", "Y"]);
        assert_eq!(
            check(&required, "paris").as_deref(),
            Some(r#"The answer must mention: "X", "Y"."#)
        );
    }

    #[test]
    fn default_check_wants_a_non_error_result() {
        assert_eq!(check(&[], "42"), None);
        assert!(check(&[], "").is_some());
        assert!(check(&[], "  \n").is_some());
        assert!(check(&[], "error: model unavailable").is_some());
        assert!(check(&[], "  Error: boom").is_some());
        assert_eq!(check(&[], "no error: all good"), None);
    }

    fn end(status: &str, result: &str) -> TaskEnd {
        TaskEnd {
            task_id: "t1".into(),
            exit_status: status.into(),
            result: result.into(),
            attempt: 1,
        }
    }

    #[test]
    fn only_ok_attempts_are_judged() {
        // Natively `/required.txt` is (almost certainly) absent, so the default check applies.
        assert!(matches!(judge(&end("failed", "")), Verdict::None));
        assert!(matches!(
            judge(&end("max_turns_reached", "")),
            Verdict::None
        ));
        assert!(matches!(judge(&end("ok", "")), Verdict::ReopenTask(_)));
    }
}
