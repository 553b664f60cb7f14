//! Components by name and version, through an OCI registry: `mur push`, `mur pull`,
//! `mur ls` and `mur install`, and the resolution that turns an `artifacts[]` entry
//! without `source:` into a component in the cache, pinned by `murmur.lock`.
//!
//! The registry is reached over the OCI distribution API in the CNCF Wasm artifact
//! layout, the one `wkg` and `spin registry` use. It is hostile input like any other
//! server mur is a client of: every answer is bounded, every component is kept only
//! once its bytes hash to the digest asked for.

mod auth;
mod client;
pub(crate) mod commands;
pub(crate) mod config;
mod fetch;
mod layout;
pub(crate) mod lock;
mod progress;
pub(crate) mod reference;
pub(crate) mod resolve;
mod store;

pub use commands::{install, ls, pull, push};
pub(crate) use store::mismatch as cached_mismatch;
