//! Why a harness exited without a last line saying so, read from its exit and the end of
//! its standard error. The reading is the same for every harness; only the words it
//! looks for and the words it writes are the harness's own ([`Wording`]).

use crate::event::{Class, Failure};

/// How the harness exited (the wit `exit-status`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stderr_tail: String,
    pub interrupted: bool,
}

/// What one harness's exits and errors say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wording {
    /// The harness's name, as messages give it.
    pub harness: &'static str,
    /// What a run that exits with 0 before its end lacks: `a result line`.
    pub missing: &'static str,
    /// Lower-case text that means the model server refused the harness's credentials.
    pub auth: &'static [&'static str],
    /// Lower-case text that means the model server rate-limited it or its quota ran out.
    pub rate_limit: &'static [&'static str],
    /// Text, case and all, of the harness refusing its command line or its config: a
    /// word like `Invalid` is only the harness's own at the start of its sentence.
    pub refused: &'static [&'static str],
}

impl Wording {
    pub fn classify(&self, exit: &Exit) -> Failure {
        let harness = self.harness;
        if exit.interrupted {
            return Failure {
                class: Class::Crashed,
                message: "the harness was stopped".into(),
            };
        }
        if exit.code == Some(0) {
            return Failure {
                class: Class::Crashed,
                message: format!("{harness} exited without {}", self.missing),
            };
        }
        let how = match (exit.code, exit.signal) {
            (Some(code), _) => format!("{harness} exited with code {code}"),
            (None, Some(signal)) => format!("{harness} exited with signal {signal}"),
            (None, None) => format!("{harness} exited"),
        };
        let message = match last_line(&exit.stderr_tail) {
            Some(line) => format!("{how}: {line}"),
            None => how,
        };
        let class = self
            .class_of_text(&exit.stderr_tail)
            .or_else(|| self.refused(&exit.stderr_tail).then_some(Class::Refused))
            .unwrap_or(Class::Crashed);
        Failure { class, message }
    }

    /// `auth` or `rate-limit` when `text` says so; a text that says both is taken to be
    /// about its credentials, which no retry mends.
    pub fn class_of_text(&self, text: &str) -> Option<Class> {
        let lower = text.to_lowercase();
        let says = |words: &[&str]| words.iter().any(|word| lower.contains(word));
        if says(self.auth) {
            Some(Class::Auth)
        } else if says(self.rate_limit) {
            Some(Class::RateLimit)
        } else {
            None
        }
    }

    fn refused(&self, stderr: &str) -> bool {
        self.refused.iter().any(|words| stderr.contains(words))
    }
}

/// The line of `text` that says most: its last error line (`Error: ...`), else its
/// last line that holds something. A usage summary or a tip often follows the error.
pub fn last_line(text: &str) -> Option<&str> {
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

    const WORDING: Wording = Wording {
        harness: "tester",
        missing: "its answer",
        auth: &["401", "api key"],
        rate_limit: &["429", "quota"],
        refused: &["Unknown option", "Invalid"],
    };

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
        let stopped = WORDING.classify(&Exit {
            interrupted: true,
            ..exit(Some(1), None, "Invalid API key")
        });
        assert_eq!(
            stopped,
            Failure {
                class: Class::Crashed,
                message: "the harness was stopped".into(),
            }
        );
        let quiet = WORDING.classify(&exit(Some(0), None, "401"));
        assert_eq!(
            quiet,
            Failure {
                class: Class::Crashed,
                message: "tester exited without its answer".into(),
            }
        );
        assert_eq!(
            WORDING.classify(&exit(Some(2), None, "Unknown option -x\n")),
            Failure {
                class: Class::Refused,
                message: "tester exited with code 2: Unknown option -x".into(),
            }
        );
        assert_eq!(
            WORDING.classify(&exit(None, Some(9), "")),
            Failure {
                class: Class::Crashed,
                message: "tester exited with signal 9".into(),
            }
        );
        assert_eq!(
            WORDING.classify(&exit(None, None, "")).message,
            "tester exited"
        );
        // Words about the model server win over a refusal's.
        assert_eq!(
            WORDING
                .classify(&exit(Some(1), None, "Invalid API key"))
                .class,
            Class::Auth
        );
    }

    #[test]
    fn classes_of_text() {
        assert_eq!(WORDING.class_of_text("HTTP 401"), Some(Class::Auth));
        assert_eq!(WORDING.class_of_text("Bad API Key"), Some(Class::Auth));
        assert_eq!(WORDING.class_of_text("429 and 401"), Some(Class::Auth));
        assert_eq!(
            WORDING.class_of_text("Quota exceeded"),
            Some(Class::RateLimit)
        );
        assert_eq!(WORDING.class_of_text("invalid"), None);
        // A refusal's words match as written.
        assert!(!WORDING.refused("unknown option"));
        assert!(WORDING.refused("error: Unknown option"));
    }

    #[test]
    fn the_last_line_that_says_most() {
        assert_eq!(last_line(""), None);
        assert_eq!(last_line("\n  \n"), None);
        assert_eq!(last_line("one\ntwo\n\n"), Some("two"));
        assert_eq!(
            last_line("warn\nERROR: first\n Error: second \n\nUsage: x\n"),
            Some("Error: second")
        );
        // Not cut inside a character when a line is shorter than `error:` in bytes.
        assert_eq!(last_line("é\n"), Some("é"));
        assert_eq!(last_line("ééé!\n"), Some("ééé!"));
    }
}
