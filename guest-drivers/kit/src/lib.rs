//! What the built-in HTTP drivers share: the bindings of the `murmur:driver@0.2.0` world
//! (exported to each driver crate), the driver around a [`provider::Provider`] (its
//! exports, setup and request), the reading of an answer whole or streamed
//! ([`answer`]) into typed structs that tolerate a server's odd field ([`lenient`]), a
//! blocking client over `wasi:http`, a reader of server-sent events that copes with events
//! split anywhere across reads, and the providers' default endpoints. A driver crate holds
//! only its provider's wire format.
//!
//! The host hands a driver a typed request and takes a typed response, so no JSON is read
//! on the way in: a driver serializes its provider's body straight from borrowed structs,
//! and reads the provider's answer into borrowed structs, never into a `serde_json::Value`
//! tree (that tree was most of a call's cost). JSON stays only where the content is JSON
//! by nature, a tool call's input and a tool's schema ([`json`]).
//!
//! Everything but [`http`], [`setup::Setup::post_json`], [`answer::read`], the calls of
//! [`provider`] and [`emit`] is plain Rust that needs no host, so it is tested natively
//! with `cargo test -p mur-driver-kit`.

wit_bindgen::generate!({
    path: ["../../wit/message", "../../wit/text", "../../wit/driver"],
    world: "murmur:driver/driver",
    generate_all,
    // For tests that compare whole responses; wasi:io's stream error holds a resource.
    additional_derives: [PartialEq],
    additional_derives_ignore: ["stream-error"],
    pub_export_macro: true,
    default_bindings_module: "mur_driver_kit",
});

pub mod answer;
pub mod config;
pub mod default_endpoint;
pub mod endpoint;
pub mod http;
pub mod json;
pub mod lenient;
pub mod provider;
pub mod request;
pub mod setup;
pub mod sse;

/// The typed request and response of `murmur:driver/inference`, and the message types
/// they carry, under short names.
pub mod types {
    pub use crate::exports::murmur::driver::inference::{
        InferError, Params, Request, Response, Settings, StopReason, Usage,
    };
    pub use crate::murmur::message::types::{
        Block, Message, Role, Thinking, ToolCall, ToolResult, ToolSpec,
    };
}

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

/// At most `max` characters of `text`, marked when cut, for quoting in messages.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::clip;

    #[test]
    fn clip_marks_the_cut() {
        assert_eq!(clip("héllo", 2), "hé…");
        assert_eq!(clip("hé", 2), "hé");
    }
}
