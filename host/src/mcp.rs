//! The MCP (Model Context Protocol) client: a capsule's tools served by MCP servers,
//! over stdio (a process the caller started in the sandbox) or streamable HTTP
//! (through the capsule's allow rules).
//!
//! Both protocol eras the official SDKs speak are spoken: the stateless one
//! (2026-07-28, `server/discover`, input asked for in results) and the `initialize`
//! handshake (2025-11-25 and older, the server's requests answered as they come).
//! Everything a server sends is untrusted: bounded in size and time, its words said
//! on one line, its tools checked before the model sees them ([`catalog`]) and its
//! results made text ([`render`]).

mod asked;
pub mod catalog;
pub mod connection;
mod http;
mod protocol;
pub mod render;
mod stdio;
pub mod supervisor;
mod wire;

#[cfg(test)]
mod tests;

pub use connection::{CallHooks, Person, Progress};
pub use render::render;
