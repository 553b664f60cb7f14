//! `mur wit [--out DIR]`: the WIT packages this binary serves, with their `deps/` and
//! `versions.lock`, exactly as they are in the repository's `wit/` (less `retired/`,
//! which holds released versions the host no longer links).

use std::io::Write;
use std::process::ExitCode;

use crate::cli::WitArgs;
use crate::error::Error;

// `WIT_FILES`: `(path under wit/, bytes)`, in path order, from host/build.rs.
include!(concat!(env!("OUT_DIR"), "/wit_files.rs"));

/// The served files, as `(path under wit/, bytes)` in path order.
pub fn files() -> Vec<(String, Vec<u8>)> {
    WIT_FILES
        .iter()
        .map(|(rel, bytes)| (rel.to_string(), bytes.to_vec()))
        .collect()
}

pub fn run(args: WitArgs) -> Result<ExitCode, Error> {
    match args.out {
        Some(dir) => {
            super::write_tree(&dir, &files(), args.force)?;
            Ok(ExitCode::SUCCESS)
        }
        None => {
            match print_all() {
                // A reader that stopped early (`mur wit | head`) wanted no more.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
                Err(e) => Err(
                    Error::new("E-KIT-001", format!("could not write to stdout: {e}"))
                        .hint("check where stdout goes"),
                ),
                Ok(()) => Ok(ExitCode::SUCCESS),
            }
        }
    }
}

/// Each file preceded by a `// wit/<path>` line; a file that does not end its last line
/// gets one, so the next header starts a line of its own.
fn print_all() -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    for (rel, bytes) in WIT_FILES {
        writeln!(out, "// wit/{rel}")?;
        out.write_all(bytes)?;
        if !bytes.ends_with(b"\n") {
            writeln!(out)?;
        }
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retired_versions_are_not_served_and_the_lock_is() {
        let names: Vec<&str> = WIT_FILES.iter().map(|(rel, _)| *rel).collect();
        assert!(names.iter().all(|n| !n.starts_with("retired")), "{names:?}");
        assert!(names.contains(&"versions.lock"));
        assert!(names.contains(&"driver/deps/http.wit"));
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
    }
}
