//! Why Codex exited without a `turn.completed` or `turn.failed` line, read from its exit
//! and the end of its standard error.

use crate::parse::{Class, Failure};

const HARNESS: &str = "codex";

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
            message: format!("{HARNESS} exited without finishing its turn"),
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
    let class = crate::parse::class_of_text(&exit.stderr_tail)
        .or_else(|| refused(&exit.stderr_tail).then_some(Class::Refused))
        .unwrap_or(Class::Crashed);
    Failure { class, message }
}

/// Whether `stderr` is Codex refusing its command line or its config.
fn refused(stderr: &str) -> bool {
    stderr.contains("Unknown option")
        || stderr.contains("error: unknown")
        || stderr.contains("error: unexpected argument")
        || stderr.contains("error: invalid value")
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
        assert_eq!(quiet.message, "codex exited without finishing its turn");

        let unknown = classify(&exit(
            Some(2),
            None,
            "WARNING: proceeding\nerror: unexpected argument '--bogus' found\n\n  \
             tip: to pass '--bogus' as a value, use '-- --bogus'\n\nUsage: codex exec \
             [OPTIONS] [PROMPT]\n\nFor more information, try '--help'.\n",
        ));
        assert_eq!(unknown.class, Class::Refused);
        assert_eq!(
            unknown.message,
            "codex exited with code 2: error: unexpected argument '--bogus' found"
        );

        let resume = classify(&exit(
            Some(1),
            None,
            "WARNING: proceeding\nError: thread/resume: thread/resume failed: no rollout \
             found for thread id 01a2 (code -32600)\n",
        ));
        assert_eq!(resume.class, Class::Crashed);
        assert_eq!(
            resume.message,
            "codex exited with code 1: Error: thread/resume: thread/resume failed: no \
             rollout found for thread id 01a2 (code -32600)"
        );

        let key = classify(&exit(Some(1), None, "unexpected status 401 Unauthorized"));
        assert_eq!(key.class, Class::Auth);

        let killed = classify(&exit(None, Some(9), "working\n\n"));
        assert_eq!(killed.class, Class::Crashed);
        assert_eq!(killed.message, "codex exited with signal 9: working");
    }
}
