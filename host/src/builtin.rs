//! The components every `mur` binary carries, built from this repository's sources.

use crate::engine::Wasm;

/// `SHA256_<STEM>`: the sha-256 (hex) of each built-in `.wasm`, taken by the build
/// script from the very files included below. The hooks' are checked only by a test:
/// `mur component check` hands them to a capsule as files, which it hashes as it reads.
#[allow(dead_code)]
mod digests {
    include!(concat!(env!("OUT_DIR"), "/builtin_digests.rs"));
}

use digests::*;

pub const SESSION_LOOP: &[u8] =
    include_bytes!(concat!(env!("MUR_GUEST_DIR"), "/mur_session_loop.wasm"));

pub const SCRIPTED_DRIVER: &[u8] =
    include_bytes!(concat!(env!("MUR_GUEST_DIR"), "/mur_driver_scripted.wasm"));

pub const OPENAI_DRIVER: &[u8] =
    include_bytes!(concat!(env!("MUR_GUEST_DIR"), "/mur_driver_openai.wasm"));

pub const ANTHROPIC_DRIVER: &[u8] =
    include_bytes!(concat!(env!("MUR_GUEST_DIR"), "/mur_driver_anthropic.wasm"));

pub const CLAUDE_CODE_DRIVER: &[u8] = include_bytes!(concat!(
    env!("MUR_GUEST_DIR"),
    "/mur_driver_claude_code.wasm"
));

pub const CODEX_DRIVER: &[u8] =
    include_bytes!(concat!(env!("MUR_GUEST_DIR"), "/mur_driver_codex.wasm"));

/// The hooks `mur component check` drives a session loop with: the memory hook seeds
/// a task, the gatekeeper reopens one. The check runs outside any source tree, so
/// what it needs at run time travels in the binary.
pub const MEMORY_HOOK: &[u8] =
    include_bytes!(concat!(env!("MUR_GUEST_DIR"), "/mur_hook_memory.wasm"));

pub const GATEKEEPER_HOOK: &[u8] =
    include_bytes!(concat!(env!("MUR_GUEST_DIR"), "/mur_hook_gatekeeper.wasm"));

/// The built-in session loop, as the engine loads it.
pub const fn session_loop() -> Wasm {
    Wasm::builtin(SESSION_LOOP, SHA256_MUR_SESSION_LOOP)
}

/// The built-in scripted driver, as the engine loads it.
pub const fn scripted_driver() -> Wasm {
    Wasm::builtin(SCRIPTED_DRIVER, SHA256_MUR_DRIVER_SCRIPTED)
}

/// A built-in driver by its manifest name, as the engine loads it.
pub fn driver(name: &str) -> Option<Wasm> {
    match name {
        "scripted" => Some(scripted_driver()),
        "openai" => Some(Wasm::builtin(OPENAI_DRIVER, SHA256_MUR_DRIVER_OPENAI)),
        "anthropic" => Some(Wasm::builtin(ANTHROPIC_DRIVER, SHA256_MUR_DRIVER_ANTHROPIC)),
        "claude-code" => Some(Wasm::builtin(
            CLAUDE_CODE_DRIVER,
            SHA256_MUR_DRIVER_CLAUDE_CODE,
        )),
        "codex" => Some(Wasm::builtin(CODEX_DRIVER, SHA256_MUR_DRIVER_CODEX)),
        _ => None,
    }
}

/// Where the built-in HTTP drivers go when `inference.endpoint` is not set. The drivers
/// apply these themselves; the host reads the same file of the driver kit, to warn when
/// the allow list does not reach them, so the values cannot drift apart.
#[path = "../../guest-drivers/kit/src/default_endpoint.rs"]
mod default_endpoint;

pub use default_endpoint::{ANTHROPIC as ANTHROPIC_ENDPOINT, OPENAI as OPENAI_ENDPOINT};

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    #[test]
    fn each_digest_the_build_took_names_the_bytes_the_binary_carries() {
        let hooks = [
            Wasm::builtin(MEMORY_HOOK, SHA256_MUR_HOOK_MEMORY),
            Wasm::builtin(GATEKEEPER_HOOK, SHA256_MUR_HOOK_GATEKEEPER),
        ];
        let drivers = ["scripted", "openai", "anthropic", "claude-code", "codex"]
            .map(|d| driver(d).expect(d));
        for wasm in [session_loop()].iter().chain(&drivers).chain(&hooks) {
            let taken: String = Sha256::digest(wasm.bytes())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(wasm.digest(), taken);
        }
        assert!(driver("llama").is_none());
    }
}
