//! What a harness's output is read into (the wit `event` and the records it carries),
//! and the small readers every driver's line parser uses.

use serde_json::{Map, Value};

/// How a run ended without an answer (the wit `exit-class`). A driver never reports
/// `done`: a run that finished gives an `answer` instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Refused,
    Auth,
    RateLimit,
    Crashed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub class: Class,
    pub message: String,
}

/// The run's running totals; `None` is "not reported".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: Option<u64>,
    pub output: Option<u64>,
    pub cache_read: Option<u64>,
    pub cache_write: Option<u64>,
    pub thinking: Option<u64>,
}

/// One thing the harness did (the wit `event`; `session`, `tool-call` and `tool-result`
/// carry their records' fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Session {
        id: String,
        auth: String,
        model: Option<String>,
    },
    TurnStarted,
    Text(String),
    Thinking(String),
    ToolCall {
        id: String,
        name: String,
        input: String,
        bridged: bool,
    },
    ToolResult {
        id: String,
        output: String,
        is_error: bool,
    },
    Usage(Usage),
    Answer(String),
    Failed(Failure),
    Note(String),
}

/// `object[key]` when it is a string.
pub fn str_of<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    object.get(key).and_then(Value::as_str)
}

/// `text` read as JSON. Drivers read their JSON here, in the kit, so serde_json's parser
/// is compiled into a component once rather than once in each crate that calls it.
pub fn read_json(text: &str) -> serde_json::Result<Value> {
    serde_json::from_str(text)
}

/// At most `n` characters of `text`: a line quoted in a note may be a whole file.
pub fn first_chars(text: &str, n: usize) -> &str {
    match text.char_indices().nth(n) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_chars_counts_characters() {
        assert_eq!(first_chars("héllo", 2), "hé");
        assert_eq!(first_chars("hé", 2), "hé");
        assert_eq!(first_chars("", 2), "");
    }

    #[test]
    fn str_of_reads_strings_only() {
        let Value::Object(object) = serde_json::json!({"a": "x", "b": 1}) else {
            unreachable!()
        };
        assert_eq!(str_of(&object, "a"), Some("x"));
        assert_eq!(str_of(&object, "b"), None);
        assert_eq!(str_of(&object, "c"), None);
    }
}
