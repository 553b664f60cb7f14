//! The components every `mur` binary carries, built from this repository's sources.

pub const SESSION_LOOP: &[u8] =
    include_bytes!(concat!(env!("MUR_GUEST_DIR"), "/mur_session_loop.wasm"));

pub const SCRIPTED_DRIVER: &[u8] =
    include_bytes!(concat!(env!("MUR_GUEST_DIR"), "/mur_driver_scripted.wasm"));

pub const OPENAI_DRIVER: &[u8] =
    include_bytes!(concat!(env!("MUR_GUEST_DIR"), "/mur_driver_openai.wasm"));

pub const ANTHROPIC_DRIVER: &[u8] =
    include_bytes!(concat!(env!("MUR_GUEST_DIR"), "/mur_driver_anthropic.wasm"));

/// Where the built-in HTTP drivers go when `inference.endpoint` is not set.
pub const OPENAI_ENDPOINT: &str = "https://api.openai.com/v1";
pub const ANTHROPIC_ENDPOINT: &str = "https://api.anthropic.com";
