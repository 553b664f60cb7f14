//! A running session named on the command line (`@N`, a `ses_` id or a suffix of 4 or
//! more characters), found in the running-session registry with `mur run --resume`'s
//! selector rules.

use crate::error::Error;
use crate::running::{self, Entry};
use crate::selector::{Miss, pick};

/// The live entry `selector` names. Stale entries met on the way are removed.
///
/// # Errors
///
/// `E-RUN-022` when no running session matches (or several do); `E-REG-001` when the
/// registry cannot be read.
pub fn resolve(selector: &str) -> Result<Entry, Error> {
    if selector.starts_with("frm_") {
        return Err(Error::new(
            "E-RUN-022",
            format!("{selector} names a formation, not one session"),
        )
        .hint("mur ps lists a formation's members, each with its own session; mur stop frm_… stops them all"));
    }
    let listing = running::list()?;
    // pick counts @N from the end of a list kept oldest first.
    let ids: Vec<String> = listing
        .live
        .iter()
        .rev()
        .map(|e| e.session_id.clone())
        .collect();
    let picked = pick(&ids, selector).and_then(|id| {
        listing
            .live
            .iter()
            .find(|e| e.session_id == id)
            .cloned()
            .ok_or(Miss::NoSuchSession)
    });
    match picked {
        Ok(entry) => Ok(entry),
        Err(why) => {
            let gone = listing
                .pruned
                .iter()
                .find(|(e, _)| e.session_id == selector || suffix_of(&e.session_id, selector));
            let message = match gone {
                Some((entry, state)) => format!(
                    "{} is not running: {}; its entry was removed",
                    entry.session_id,
                    state.why_pruned()
                ),
                None => format!("no running session matches {selector}: {why}"),
            };
            Err(Error::new("E-RUN-022", message).hint(format!(
                "mur ps lists the sessions running on this machine (registry: {}); an address (HOST:PORT) names a capsule too",
                running::dir().display()
            )))
        }
    }
}

fn suffix_of(id: &str, selector: &str) -> bool {
    selector.len() >= 4
        && id
            .to_ascii_lowercase()
            .ends_with(&selector.to_ascii_lowercase())
}

/// The token a client presents to the session `entry` names: `--token`, else the one
/// its capsule minted, from its entry (none for a public door).
pub fn token_for(flag: Option<&str>, entry: &Entry) -> Option<String> {
    flag.map(str::to_string)
        .or_else(|| entry.door_token.as_ref().map(|t| t.expose().to_string()))
}
