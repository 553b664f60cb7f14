//! `mur serve`'s admin token file in its data folder: unlike the hashes kept of every
//! other token, it holds the token itself (0600), because the operator reads it there.

use std::path::Path;

use crate::error::Error;
pub use crate::token::{Hash, mint};

/// The admin token in `path`: read if there, else generated and written there (0600).
pub fn admin(path: &Path) -> Result<Hash, Error> {
    match std::fs::read_to_string(path) {
        Ok(text) if !text.trim().is_empty() => return Ok(Hash::of(text.trim())),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(Error::new(
                "E-SERVE-002",
                format!("could not read the admin token {}: {e}", path.display()),
            )
            .hint("make it readable by mur, or remove it to have a new one generated"));
        }
    }
    let token = format!("{}{}", crate::ids::token(), crate::ids::token());
    super::create_private(path, format!("{token}\n").as_bytes()).map_err(|e| {
        Error::new(
            "E-SERVE-002",
            format!("could not write the admin token {}: {e}", path.display()),
        )
        .hint("check that the --data folder is writable")
    })?;
    Ok(Hash::of(&token))
}
