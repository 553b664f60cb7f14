//! Every end-to-end test, in one binary: the real `mur`, real components compiled from
//! source, real sockets on 127.0.0.1. One module per area; `common` holds what they share.

mod common;

mod components;
mod confined_shell;
mod containment;
mod deadlines;
mod detached;
mod drivers;
mod hooks;
mod hygiene;
mod input;
mod limits;
mod run;
mod stream;
mod watch;
