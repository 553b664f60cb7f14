//! The capsule's API key, kept out of everything mur writes: frames, trace lines,
//! `out/result.txt`, logs and error messages. A provider that echoes the key back in
//! an error ("Incorrect API key provided: sk-...") must not leak it through us.
//!
//! One `mur` process runs one capsule, so the key is process-wide, set once at start-up.

use std::borrow::Cow;
use std::sync::OnceLock;

static SECRET: OnceLock<String> = OnceLock::new();

/// What stands in for the key.
pub const REDACTED: &str = "[redacted]";

/// Shorter keys are placeholders (`EMPTY`, `ollama`) that local servers ignore; hiding
/// them would mangle ordinary words in every output.
const MIN_SECRET_LEN: usize = 8;

pub fn set(key: &str) {
    if key.len() >= MIN_SECRET_LEN {
        let _ = SECRET.set(key.to_string());
    }
}

/// `text` with every occurrence of the key replaced.
pub fn scrub(text: &str) -> Cow<'_, str> {
    match SECRET.get() {
        Some(key) if text.contains(key.as_str()) => {
            Cow::Owned(text.replace(key.as_str(), REDACTED))
        }
        _ => Cow::Borrowed(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_replaced_wherever_it_appears() {
        set("sk-unit-test-4f9a");
        assert_eq!(
            scrub("Incorrect API key provided: sk-unit-test-4f9a."),
            "Incorrect API key provided: [redacted]."
        );
        assert!(matches!(scrub("nothing to hide"), Cow::Borrowed(_)));
    }
}
