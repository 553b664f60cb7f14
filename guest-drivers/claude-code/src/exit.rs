//! Why Claude Code exited without a `result` line: the process kit reads its exit and
//! the end of its standard error with Claude Code's words, which also class the text of
//! a failed `result` line that gives no HTTP status.

use mur_process_kit::Wording;

pub const WORDING: Wording = Wording {
    harness: "claude-code",
    missing: "a result line",
    auth: &["401", "authentication", "api key"],
    rate_limit: &["429", "rate limit"],
    refused: &["Unknown option", "error: unknown", "Invalid"],
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
        assert_eq!(quiet.message, "claude-code exited without a result line");

        let unknown = classify(Some(1), None, "error: unknown option '--bogus'\n");
        assert_eq!(unknown.class, Class::Refused);
        assert_eq!(
            unknown.message,
            "claude-code exited with code 1: error: unknown option '--bogus'"
        );

        let usage = classify(
            Some(1),
            None,
            "error: unknown option '--x'\n\nUsage: claude [options]\n",
        );
        assert_eq!(
            usage.message,
            "claude-code exited with code 1: error: unknown option '--x'"
        );

        let key = classify(Some(1), None, "Invalid API key · Please run /login\n");
        assert_eq!(key.class, Class::Auth);
        let limited = classify(Some(1), None, "API Error: 429 Too many requests");
        assert_eq!(limited.class, Class::RateLimit);

        let killed = classify(None, Some(9), "working\n\n");
        assert_eq!(killed.class, Class::Crashed);
        assert_eq!(killed.message, "claude-code exited with signal 9: working");
        assert_eq!(
            classify(Some(3), None, "").message,
            "claude-code exited with code 3"
        );
    }
}
