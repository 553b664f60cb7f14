//! The model servers the built-in drivers reach when `inference.endpoint` is not set.
//!
//! Plain constants with no imports, on purpose: the host compiles this file as well, to
//! warn at start-up when `capabilities.network.allow` does not reach the server a driver
//! will use, so each value is written once for the driver and the host.

/// OpenAI's Chat Completions API.
pub const OPENAI: &str = "https://api.openai.com/v1";
/// Anthropic's Messages API.
pub const ANTHROPIC: &str = "https://api.anthropic.com";
