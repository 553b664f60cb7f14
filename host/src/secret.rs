//! The capsules' API keys, kept out of everything mur writes: frames, trace lines,
//! `out/result.txt`, logs and error messages. A provider that echoes the key back in
//! an error ("Incorrect API key provided: sk-...") must not leak it through us.
//!
//! The keys are process-wide: `mur run` has one, `mur serve` one per capsule that has
//! one. Every output is scrubbed of every key, which hides at least what it must (no
//! tenant's output carries another tenant's key unless it guessed it).

use std::borrow::Cow;
use std::sync::{PoisonError, RwLock};

static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// What stands in for the key.
pub const REDACTED: &str = "[redacted]";

/// Shorter keys are placeholders (`EMPTY`, `ollama`) that local servers ignore; hiding
/// them would mangle ordinary words in every output.
const MIN_SECRET_LEN: usize = 8;

/// Adds a key to hide from now on.
pub fn set(key: &str) {
    if key.len() < MIN_SECRET_LEN {
        return;
    }
    let mut keys = SECRETS.write().unwrap_or_else(PoisonError::into_inner);
    if !keys.iter().any(|k| k == key) {
        keys.push(key.to_string());
        // Longest first: a key that contains another is replaced whole.
        keys.sort_by_key(|k| std::cmp::Reverse(k.len()));
    }
}

/// `text` with every occurrence of every key replaced.
pub fn scrub(text: &str) -> Cow<'_, str> {
    let keys = SECRETS.read().unwrap_or_else(PoisonError::into_inner);
    let mut out = Cow::Borrowed(text);
    for key in keys.iter() {
        if out.contains(key.as_str()) {
            out = Cow::Owned(out.replace(key.as_str(), REDACTED));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_replaced_wherever_it_appears() {
        set("sk-unit-test-4f9a");
        set("sk-unit-test-second-77");
        assert_eq!(
            scrub("Incorrect API key provided: sk-unit-test-4f9a, or sk-unit-test-second-77."),
            "Incorrect API key provided: [redacted], or [redacted]."
        );
        assert!(matches!(scrub("nothing to hide"), Cow::Borrowed(_)));
    }
}
