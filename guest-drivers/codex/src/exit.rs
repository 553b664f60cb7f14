//! Why Codex exited without a `turn.completed` or `turn.failed` line: the process kit
//! reads its exit and the end of its standard error with Codex's words, which also class
//! the message of a `turn.failed` line.

use mur_process_kit::Wording;

pub const WORDING: Wording = Wording {
    harness: "codex",
    missing: "finishing its turn",
    auth: &["401", "unauthorized"],
    rate_limit: &["429", "rate limit", "quota"],
    refused: &[
        "Unknown option",
        "error: unknown",
        "error: unexpected argument",
        "error: invalid value",
        "Invalid",
    ],
};

#[cfg(test)]
mod tests {
    use super::*;
    use mur_process_kit::{Class, Exit, Failure};

    // The kit's own tests cover what every harness shares (a stopped run, the line
    // quoted); these cover this harness's words.
    fn classify(code: Option<i32>, signal: Option<i32>, stderr: &str) -> Failure {
        WORDING.classify(&Exit {
            code,
            signal,
            stderr_tail: stderr.into(),
            interrupted: false,
        })
    }

    #[test]
    fn exits() {
        let quiet = classify(Some(0), None, "");
        assert_eq!(quiet.message, "codex exited without finishing its turn");

        let unknown = classify(
            Some(2),
            None,
            "WARNING: proceeding\nerror: unexpected argument '--bogus' found\n\n  \
             tip: to pass '--bogus' as a value, use '-- --bogus'\n\nUsage: codex exec \
             [OPTIONS] [PROMPT]\n\nFor more information, try '--help'.\n",
        );
        assert_eq!(unknown.class, Class::Refused);
        assert_eq!(
            unknown.message,
            "codex exited with code 2: error: unexpected argument '--bogus' found"
        );

        let resume = classify(
            Some(1),
            None,
            "WARNING: proceeding\nError: thread/resume: thread/resume failed: no rollout \
             found for thread id 01a2 (code -32600)\n",
        );
        assert_eq!(resume.class, Class::Crashed);
        assert_eq!(
            resume.message,
            "codex exited with code 1: Error: thread/resume: thread/resume failed: no \
             rollout found for thread id 01a2 (code -32600)"
        );

        let key = classify(Some(1), None, "unexpected status 401 Unauthorized");
        assert_eq!(key.class, Class::Auth);

        let killed = classify(None, Some(9), "working\n\n");
        assert_eq!(killed.class, Class::Crashed);
        assert_eq!(killed.message, "codex exited with signal 9: working");
    }
}
