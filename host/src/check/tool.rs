//! The tool world's scenarios.

use super::Target;
use super::report::Scenario;

/// The behavioural scenarios of a tool component.
pub fn scenarios(_target: &Target) -> Vec<Scenario> {
    Vec::new()
}
