//! `mur watch` and `mur stop`: clients of a capsule's A2A address.
//!
//! The server closes every connection after its response and an event stream is
//! close-delimited (no chunked encoding), so a few lines of HTTP/1.1 over a plain TCP
//! stream are all either command needs.
//!
//! Both dial a capsule's `crate::address` and speak through `http`; `watch` prints the event stream with a
//! `printer` (responses laid out by `wrap`), `stop` asks the capsule to end and waits for it.
//! A session named instead of an address is found in the running-session registry
//! (`crate::running`) through `session`, with the token its door asks for (which `token`
//! prints); `ps` lists that registry, and `formation` stops what `mur run --roster`
//! runs.

mod formation;
mod http;
mod printer;
mod ps;
mod session;
mod stop;
mod token;
mod watch;
mod wrap;

pub use printer::{Flow, Printer};
pub use ps::ps;
pub use stop::stop;
pub use token::token;
pub use watch::watch;
pub use wrap::wrap;
