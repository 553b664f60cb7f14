//! `mur component check` (placeholder until the framework lands).

#[allow(dead_code)]
pub mod provider;
