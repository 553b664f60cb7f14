//! What the built-in HTTP drivers share: the bindings of the `murmur:driver` world
//! (exported to each driver crate), the driver around a [`provider::Provider`] (its
//! exports, setup and request), the reading of an answer whole or streamed
//! ([`answer`]), a blocking client over `wasi:http`, a reader of server-sent events that
//! copes with events split anywhere across reads, and the providers' default endpoints.
//! A driver crate holds only its provider's wire format.
//!
//! Everything but [`http`], [`setup::Setup::post_json`], [`answer::read`], the calls of
//! [`provider`] and [`emit`] is plain Rust that needs no host, so it is tested natively
//! with `cargo test -p mur-driver-kit`.

wit_bindgen::generate!({
    path: ["../../wit/text", "../../wit/driver"],
    world: "murmur:driver/driver",
    generate_all,
    pub_export_macro: true,
    default_bindings_module: "mur_driver_kit",
});

pub mod answer;
pub mod config;
pub mod default_endpoint;
pub mod endpoint;
pub mod http;
pub mod neutral;
pub mod provider;
pub mod setup;
pub mod sse;

/// A streamed piece of the answer being received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    Text(&'a str),
    Thinking(&'a str),
}

/// Passes a piece on to the host as a `text` or `thinking` frame. Empty pieces are
/// dropped: a frame without text tells a reader nothing.
pub fn emit(piece: Piece<'_>) {
    match piece {
        Piece::Text("") | Piece::Thinking("") => {}
        Piece::Text(text) => murmur::text::chunks::text(text),
        Piece::Thinking(text) => murmur::text::chunks::thinking(text),
    }
}
