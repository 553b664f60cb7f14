//! `mur token`: the door token of a running capsule, read from its registry entry.
//!
//! `mur run` never prints the token (its output is so often kept in a log); this is how a
//! person reads it out. Standard output is the token and a newline, nothing else, so
//! `MURMUR_DOOR_TOKEN=$(mur token SESSION)` holds exactly the token.

use std::io::Write;
use std::process::ExitCode;

use super::session;
use crate::cli::TokenArgs;
use crate::error::Error;
use crate::running::Entry;

/// Prints the token of the session `args.session` names.
pub fn token(args: &TokenArgs) -> Result<ExitCode, Error> {
    let entry = session::resolve(&args.session)?;
    let token = token_of(&entry)?;
    let mut out = std::io::stdout();
    // A reader that went away has nothing left to be told.
    let _ = writeln!(out, "{token}").and_then(|()| out.flush());
    Ok(ExitCode::SUCCESS)
}

/// The entry's token, or why there is none.
fn token_of(entry: &Entry) -> Result<&str, Error> {
    match &entry.door_token {
        Some(token) => Ok(token.expose()),
        None => Err(Error::new(
            "E-RUN-048",
            format!(
                "{} has a public door: its capsule declares no network.authentication, so it minted no token",
                entry.session_id
            ),
        )
        .hint(
            "anyone who can reach its address may call it without one; declare network.authentication (scheme: bearer) in its manifest to have the next run mint a token",
        )),
    }
}
