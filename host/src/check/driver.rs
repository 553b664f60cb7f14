//! The driver world's scenarios (helper D).

use super::Target;
use super::report::Scenario;

/// The behavioural scenarios of a driver component.
pub fn scenarios(_target: &Target) -> Vec<Scenario> {
    Vec::new()
}
