//! What the built-in process drivers share: the bindings of the `murmur:process@0.2.0`
//! world, the driver around a [`Harness`] ([`export_process_driver!`] exports it and keeps
//! the run's parser between calls), the world's records as plain Rust ([`event`],
//! [`launch`], [`exit`]), and what every harness's command line, config and exit need
//! checked or read the same way. A driver crate holds only its harness: its command line
//! and config, its output format and its wording.
//!
//! The world's types are converted to plain Rust at the edge ([`convert`]) so that
//! everything a driver does is tested natively with `cargo test`, with no host.

wit_bindgen::generate!({
    path: "../../wit/process",
    world: "murmur:process/process-driver",
    pub_export_macro: true,
    default_bindings_module: "mur_process_kit",
});

pub mod convert;
pub mod event;
pub mod exit;
pub mod harness;
pub mod launch;

pub use event::{Class, Event, Failure, Usage};
pub use exit::{Exit, Wording};
pub use harness::{Description, Harness, Interrupt, Parse};
pub use launch::{Bridge, File, Plan, Request};
