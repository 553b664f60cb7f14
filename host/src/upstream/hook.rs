//! Upstream's hook world, `murmur:hook/lifecycle@0.9.0`, is recognised and refused.
//!
//! Its mapping onto our hook events and verdicts is not sound:
//! - its conversation is flat (`message {role, content: string}`), so a
//!   `replace-context` or `seed-context` verdict would drop the tool calls and results
//!   our typed conversation keeps, leaving calls without answers that a provider
//!   refuses;
//! - `write-manifests`, `artifact` and `on-stage`'s `shell-allow` act on upstream's
//!   staging and tool packaging, which this host does not have;
//! - its events carry counts this host does not keep in the same sense (`on-shell`'s
//!   argv and recipes, `on-inference`'s whole prompt as one string).
//!
//! A hook that only observes would map, but which verdict a hook returns is known only
//! once it runs, so the refusal comes at link time, in words, rather than a session
//! that silently ignores what the hook decided.

use crate::error::Error;

/// The error a capsule naming an upstream hook gets.
pub fn refused(label: &str) -> Error {
    Error::new(
        "E-RUN-031",
        format!(
            "{label} is an upstream Murmur hook (murmur:hook/lifecycle@0.9.0), which this mur \
             does not serve: its flat messages cannot carry the tool calls and results a \
             replace-context or seed-context verdict would rewrite, and its write-manifests, \
             artifact and on-stage have no counterpart here"
        ),
    )
    .hint(format!(
        "rebuild the hook against the hook world of murmur:*@{} (`mur wit` prints it)",
        crate::engine::VERSION
    ))
}
