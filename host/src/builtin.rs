//! The components every `mur` binary carries, built from this repository's sources.

pub const SESSION_LOOP: &[u8] =
    include_bytes!(concat!(env!("MUR_GUEST_DIR"), "/mur_session_loop.wasm"));

pub const SCRIPTED_DRIVER: &[u8] =
    include_bytes!(concat!(env!("MUR_GUEST_DIR"), "/mur_driver_scripted.wasm"));
