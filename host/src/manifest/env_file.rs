//! A workspace `.env` beside the manifest: `${NAME}` values the process environment
//! does not set are taken from it (upstream Murmur's rule: it never overrides a set
//! variable), read without touching the process environment.

use std::collections::HashMap;
use std::path::Path;

use crate::error::Error;

/// Larger than any real `.env`; reading stops there.
const MAX_BYTES: u64 = 256 * 1024;

/// The variables of `dir/.env`; none when there is no such file.
pub fn read(dir: &Path) -> Result<HashMap<String, String>, Error> {
    let path = dir.join(".env");
    let bad = |why: String| {
        Error::new(
            "E-CFG-003",
            format!("{} cannot be used: {why}", path.display()),
        )
        .hint("write it as NAME=value lines, or pass --no-env-file")
    };
    let Some(text) = crate::home_config::read_small(&path, MAX_BYTES).map_err(bad)? else {
        return Ok(HashMap::new());
    };
    let mut vars = HashMap::new();
    for item in dotenvy::from_read_iter(text.as_bytes()) {
        let (name, value) = item.map_err(|e| bad(e.to_string()))?;
        vars.insert(name, value);
    }
    Ok(vars)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dot_env_is_read_and_a_bad_line_named() {
        let dir = std::env::temp_dir().join(format!("mur-env-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(read(&dir).unwrap().is_empty());
        std::fs::write(
            dir.join(".env"),
            "# keys\nANTHROPIC_API_KEY=sk-from-file\nQUOTED=\"a b\"\n",
        )
        .unwrap();
        let vars = read(&dir).unwrap();
        assert_eq!(vars["ANTHROPIC_API_KEY"], "sk-from-file");
        assert_eq!(vars["QUOTED"], "a b");
        std::fs::write(dir.join(".env"), "NOT A LINE\n").unwrap();
        assert_eq!(read(&dir).unwrap_err().code, "E-CFG-003");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
