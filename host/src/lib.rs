//! `mur`: the host of the runtime. It serves a capsule's address (JSON-RPC over HTTP,
//! server-sent events), runs its session loop, driver, hooks and tools as WebAssembly
//! components, and confines its shell. The binary is a thin `main` over this library;
//! tests and benchmarks use the same client and frame parser.

mod address;
mod bindings;
mod builtin;
mod bus;
pub mod cli;
pub mod client;
mod compaction;
mod confine;
mod control;
mod conversation;
mod deadline;
mod detached;
mod driver;
mod engine;
pub mod error;
mod exit_status;
mod fence;
mod frames;
mod guest_log;
mod hooks;
mod ids;
mod input;
mod limits;
mod manifest;
mod murmur_md;
mod outbound;
mod queue;
mod quota;
mod reaper;
mod resume;
mod rooted;
pub mod run;
mod sandbox;
mod secret;
mod seed;
mod server;
mod session;
mod shell;
pub mod sse;
mod threads;
mod tools;
mod trace;
mod wire;
mod workdir;
