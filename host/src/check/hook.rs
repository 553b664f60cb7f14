//! The hook world's scenarios (helper D).

use super::Target;
use super::report::Scenario;

/// The behavioural scenarios of a hook component.
pub fn scenarios(_target: &Target) -> Vec<Scenario> {
    Vec::new()
}
