//! The built-in components, compiled when `mur` itself was built: the first run on a
//! machine loads them as a warm run would, instead of compiling them first.
//!
//! The build script compiles each with the settings of [`super::config::base`]. An
//! engine with other settings (a pooled one, under `mur serve --pool-slots`) or a CPU
//! lacking a feature the build machine had is refused by wasmtime's own check, and the
//! component is compiled and cached as any other.

use wasmtime::component::Component;

// `PRECOMPILED: &[(&str, &[u8])]`: the sha-256 (hex) of each built-in `.wasm`, with
// its compiled form.
include!(concat!(env!("OUT_DIR"), "/precompiled.rs"));

/// A built-in's `compiled` form (from [`find`]), copied out of the binary, when this
/// engine can load what the build compiled.
pub fn load(engine: &wasmtime::Engine, compiled: &[u8]) -> Option<Component> {
    // SAFETY: the bytes were written by `Engine::precompile_component` of this very
    // build and travel inside the binary; wasmtime checks that they match this engine's
    // version, target and settings before using them.
    unsafe { Component::deserialize(engine, compiled) }.ok()
}

/// The compiled form of the component whose `.wasm` has the sha-256 `digest` (hex),
/// when it is a built-in one.
pub fn find(digest: &str) -> Option<&'static [u8]> {
    PRECOMPILED
        .iter()
        .find(|(sha, _)| *sha == digest)
        .map(|(_, compiled)| *compiled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin;
    use sha2::{Digest, Sha256};

    fn digest(bytes: &[u8]) -> String {
        super::super::wasm::hex(&Sha256::digest(bytes))
    }

    fn engine() -> wasmtime::Engine {
        wasmtime::Engine::new(&super::super::config::base()).expect("an engine")
    }

    #[test]
    fn every_built_in_component_loads_precompiled() {
        let engine = engine();
        for (name, bytes) in [
            ("session loop", builtin::SESSION_LOOP),
            ("scripted driver", builtin::SCRIPTED_DRIVER),
            ("openai driver", builtin::OPENAI_DRIVER),
            ("anthropic driver", builtin::ANTHROPIC_DRIVER),
            ("memory hook", builtin::MEMORY_HOOK),
            ("gatekeeper hook", builtin::GATEKEEPER_HOOK),
        ] {
            assert!(find(&digest(bytes)).is_some(), "{name} was not precompiled");
            let compiled = find(&digest(bytes)).expect("found");
            assert!(load(&engine, compiled).is_some(), "{name} did not load");
        }
    }

    #[test]
    fn other_bytes_are_not_found() {
        assert!(find(&digest(b"\0asm not a built-in")).is_none());
    }

    #[test]
    fn an_engine_with_other_settings_refuses_them() {
        // Code compiled to check the epoch cannot run where nothing advances it.
        let mut config = super::super::config::base();
        config.epoch_interruption(false);
        let other = wasmtime::Engine::new(&config).expect("an engine");
        let compiled = find(&digest(builtin::SESSION_LOOP)).expect("found");
        assert!(load(&other, compiled).is_none());
    }
}
