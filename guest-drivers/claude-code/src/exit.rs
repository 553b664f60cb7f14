//! Why Claude Code exited without a `result` line, read from its exit and the end of
//! its standard error.

use crate::parse::{Class, Failure};

const HARNESS: &str = "claude-code";

/// How the harness exited (the wit `exit-status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stderr_tail: String,
    pub interrupted: bool,
}

pub fn classify(exit: &Exit) -> Failure {
    if exit.interrupted {
        return Failure {
            class: Class::Crashed,
            message: "the harness was stopped".into(),
        };
    }
    if exit.code == Some(0) {
        return Failure {
            class: Class::Crashed,
            message: format!("{HARNESS} exited without a result line"),
        };
    }
    let how = match (exit.code, exit.signal) {
        (Some(code), _) => format!("{HARNESS} exited with code {code}"),
        (None, Some(signal)) => format!("{HARNESS} exited with signal {signal}"),
        (None, None) => format!("{HARNESS} exited"),
    };
    let message = match last_line(&exit.stderr_tail) {
        Some(line) => format!("{how}: {line}"),
        None => how,
    };
    let class = class_of_text(&exit.stderr_tail)
        .or_else(|| refused(&exit.stderr_tail).then_some(Class::Refused))
        .unwrap_or(Class::Crashed);
    Failure { class, message }
}

/// `auth` or `rate-limit` when `text` says so.
pub fn class_of_text(text: &str) -> Option<Class> {
    let lower = text.to_lowercase();
    if text.contains("401") || lower.contains("authentication") || lower.contains("api key") {
        Some(Class::Auth)
    } else if text.contains("429") || lower.contains("rate limit") {
        Some(Class::RateLimit)
    } else {
        None
    }
}

/// Whether `stderr` is Claude Code refusing its command line.
fn refused(stderr: &str) -> bool {
    stderr.contains("Unknown option")
        || stderr.contains("error: unknown")
        || stderr.contains("Invalid")
}

/// The line of `text` that says most: its last error line (`Error: ...`), else its
/// last line that holds something.
fn last_line(text: &str) -> Option<&str> {
    let lines = || text.lines().map(str::trim).rev();
    lines()
        .find(|line| {
            let lower = line.get(..6).unwrap_or_default().to_ascii_lowercase();
            lower == "error:"
        })
        .or_else(|| lines().find(|line| !line.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(code: Option<i32>, signal: Option<i32>, stderr: &str) -> Exit {
        Exit {
            code,
            signal,
            stderr_tail: stderr.into(),
            interrupted: false,
        }
    }

    #[test]
    fn exits() {
        let stopped = classify(&Exit {
            interrupted: true,
            ..exit(None, Some(2), "")
        });
        assert_eq!(stopped.class, Class::Crashed);
        assert_eq!(stopped.message, "the harness was stopped");

        let quiet = classify(&exit(Some(0), None, ""));
        assert_eq!(quiet.message, "claude-code exited without a result line");

        let unknown = classify(&exit(Some(1), None, "error: unknown option '--bogus'\n"));
        assert_eq!(unknown.class, Class::Refused);
        assert_eq!(
            unknown.message,
            "claude-code exited with code 1: error: unknown option '--bogus'"
        );

        let usage = classify(&exit(
            Some(1),
            None,
            "error: unknown option '--x'\n\nUsage: claude [options]\n",
        ));
        assert_eq!(
            usage.message,
            "claude-code exited with code 1: error: unknown option '--x'"
        );

        let key = classify(&exit(
            Some(1),
            None,
            "Invalid API key · Please run /login\n",
        ));
        assert_eq!(key.class, Class::Auth);
        let limited = classify(&exit(Some(1), None, "API Error: 429 Too many requests"));
        assert_eq!(limited.class, Class::RateLimit);

        let killed = classify(&exit(None, Some(9), "working\n\n"));
        assert_eq!(killed.class, Class::Crashed);
        assert_eq!(killed.message, "claude-code exited with signal 9: working");
        assert_eq!(
            classify(&exit(Some(3), None, "")).message,
            "claude-code exited with code 3"
        );
    }
}
