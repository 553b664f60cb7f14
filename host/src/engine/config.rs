//! The compiler settings of an engine whose instances are allocated on demand (what
//! `mur run` uses). The build script precompiles the built-in components with exactly
//! these settings, so the binary can load their compiled form on its first run: a
//! precompiled component loads only into an engine with the same settings.
//!
//! This file is compiled twice, into the host and into its build script, so it uses
//! nothing but `wasmtime`.

/// The settings every engine starts from; a pooled engine adds its pool to them.
pub fn base() -> wasmtime::Config {
    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.cranelift_opt_level(wasmtime::OptLevel::Speed);
    config
}
