//! The components every `mur` binary carries, built from this repository's sources.

pub const SESSION_LOOP: &[u8] =
    include_bytes!(concat!(env!("MUR_GUEST_DIR"), "/mur_session_loop.wasm"));

pub const SCRIPTED_DRIVER: &[u8] =
    include_bytes!(concat!(env!("MUR_GUEST_DIR"), "/mur_driver_scripted.wasm"));

pub const OPENAI_DRIVER: &[u8] =
    include_bytes!(concat!(env!("MUR_GUEST_DIR"), "/mur_driver_openai.wasm"));

pub const ANTHROPIC_DRIVER: &[u8] =
    include_bytes!(concat!(env!("MUR_GUEST_DIR"), "/mur_driver_anthropic.wasm"));

/// The hooks `mur component check` drives a session loop with: the memory hook seeds
/// a task, the gatekeeper reopens one. The check runs outside any source tree, so
/// what it needs at run time travels in the binary.
pub const MEMORY_HOOK: &[u8] =
    include_bytes!(concat!(env!("MUR_GUEST_DIR"), "/mur_hook_memory.wasm"));

pub const GATEKEEPER_HOOK: &[u8] =
    include_bytes!(concat!(env!("MUR_GUEST_DIR"), "/mur_hook_gatekeeper.wasm"));

/// Where the built-in HTTP drivers go when `inference.endpoint` is not set. The drivers
/// apply these themselves; the host reads the same file of the driver kit, to warn when
/// the allow list does not reach them, so the values cannot drift apart.
#[path = "../../guest-drivers/kit/src/default_endpoint.rs"]
mod default_endpoint;

pub use default_endpoint::{ANTHROPIC as ANTHROPIC_ENDPOINT, OPENAI as OPENAI_ENDPOINT};
