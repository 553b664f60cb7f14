//! The component kit for authors: `mur wit` serves the WIT packages this binary links
//! against, `mur new` scaffolds a component crate that builds against them.

pub mod new;
pub mod wit;

use std::path::Path;

use crate::error::Error;

/// Writes `files` (paths relative to `dir`, `/`-separated) under `dir`, creating
/// folders. A file already there with the same bytes is left alone; one that differs
/// is refused unless `force`, before anything is written, so a refusal changes nothing.
///
/// The paths are the kit's own (embedded WIT and templates), and `dir` is the
/// author's choice on the command line: no component influences either.
pub(crate) fn write_tree(
    dir: &Path,
    files: &[(String, Vec<u8>)],
    force: bool,
) -> Result<(), Error> {
    if !force {
        let differing: Vec<&str> = files
            .iter()
            .filter(|(rel, bytes)| matches!(std::fs::read(dir.join(rel)), Ok(old) if old != *bytes))
            .map(|(rel, _)| rel.as_str())
            .collect();
        if let Some(first) = differing.first() {
            return Err(Error::new(
                "E-KIT-002",
                format!(
                    "{} already exists and differs from what would be written ({} file(s) differ)",
                    dir.join(first).display(),
                    differing.len()
                ),
            )
            .hint("pass --force to overwrite them, or choose another --out folder"));
        }
    }
    for (rel, bytes) in files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io_error(parent, "create", &e))?;
        }
        if matches!(std::fs::read(&path), Ok(old) if old == *bytes) {
            continue;
        }
        std::fs::write(&path, bytes).map_err(|e| io_error(&path, "write", &e))?;
    }
    Ok(())
}

fn io_error(path: &Path, verb: &str, e: &std::io::Error) -> Error {
    Error::new(
        "E-KIT-001",
        format!("could not {verb} {}: {e}", path.display()),
    )
    .hint("check that the folder is writable, or choose another one")
}
