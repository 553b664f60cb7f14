//! How a request turns into a process: which binary on `PATH`, which argv, and the command
//! line the result and the log show.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use super::ShellRequest;
use super::environment::child_path;
use super::input::split_args;

/// Binaries that get the command as one script (`<binary> -c <command>`) instead of split argv.
pub const INTERPRETERS: &[&str] = &["bash", "sh", "zsh", "fish", "dash", "ksh"];

/// The absolute path of `name` in the first `PATH` directory holding an executable file of
/// that name; `name` itself when it contains a `/` or is not found.
///
/// Relative `PATH` entries (including the empty one, meaning the current directory) are
/// skipped: a binary resolved against the capsule's own workdir would let it substitute an
/// allowed binary with a file it wrote.
pub fn resolve_binary(name: &str, path_env: &str) -> String {
    if name.is_empty() || name.contains('/') {
        return name.to_string();
    }
    path_env
        .split(':')
        .map(Path::new)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable_file(candidate))
        .map_or_else(
            || name.to_string(),
            |found| found.to_string_lossy().into_owned(),
        )
}

/// The arguments after the binary, as `Plan::new` passes them: `-c` and the command for
/// an interpreter, else the command split as a POSIX shell would (the command alone
/// when it cannot be split). Hooks are told it.
pub fn argv(binary: &str, command: &str) -> Vec<String> {
    if is_interpreter(binary) {
        return vec!["-c".to_string(), command.to_string()];
    }
    split_args(command).unwrap_or_else(|_| vec![command.to_string()])
}

fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// How a request turns into a process: program, argv and the result's first line.
pub(super) struct Plan {
    pub(super) program: String,
    pub(super) args: Vec<String>,
    /// The command line as reported: `$ ` + this is the first line, `Command: ` + this the log's.
    pub(super) display: String,
}

impl Plan {
    pub(super) fn new(req: &ShellRequest) -> Result<Self, String> {
        let program = resolve_binary(&req.binary, &child_path(req));
        // Spawning a bare name would let the OS fall back to its default search path, which
        // is not the PATH the capsule was given.
        if !program.contains('/') {
            return Err(format!(
                "failed to start '{}': not found on PATH",
                req.binary
            ));
        }
        if is_interpreter(&req.binary) {
            let args = vec!["-c".to_string(), req.command.clone()];
            return Ok(Self {
                program,
                args,
                display: req.command.clone(),
            });
        }
        let args = split_args(&req.command)?;
        let display = format!("{} {}", req.binary, req.command);
        Ok(Self {
            program,
            args,
            display,
        })
    }
}

fn is_interpreter(binary: &str) -> bool {
    let name = Path::new(binary)
        .file_name()
        .map_or(binary.into(), |n| n.to_string_lossy());
    INTERPRETERS.contains(&name.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shell::run;
    use crate::shell::test_support::{host_path, request, run_ok, scratch_dir};

    #[test]
    fn resolve_binary_finds_absolute_path() {
        let resolved = resolve_binary("sh", &host_path());
        assert!(resolved.starts_with('/'), "{resolved}");
        assert!(resolved.ends_with("/sh"), "{resolved}");
        assert_eq!(resolve_binary("sh", "relative/dir::/nonexistent"), "sh");
        assert_eq!(
            resolve_binary("no-such-binary-mur", &host_path()),
            "no-such-binary-mur"
        );
        assert_eq!(resolve_binary("/bin/sh", ""), "/bin/sh");
    }

    #[test]
    fn resolve_binary_skips_non_executable_files() {
        let scratch = scratch_dir();
        let dir = &scratch.0;
        let file = dir.join("tool");
        std::fs::write(&file, "#!/bin/sh\n").expect("write");
        let path_env = dir.to_string_lossy().into_owned();
        assert_eq!(resolve_binary("tool", &path_env), "tool");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert_eq!(resolve_binary("tool", &path_env), file.to_string_lossy());
    }

    #[test]
    fn interpreters_are_recognised_by_file_name() {
        for name in INTERPRETERS {
            assert!(is_interpreter(name));
        }
        assert!(is_interpreter("/usr/bin/bash"));
        assert!(!is_interpreter("ls"));
        assert!(!is_interpreter("bash5"));
    }

    #[tokio::test]
    async fn non_interpreter_args_are_split() {
        let (_scratch, req) = request("ls", "-1 \"a b\" 'c'");
        std::fs::write(req.workdir.join("a b"), "").expect("write");
        std::fs::write(req.workdir.join("c"), "").expect("write");
        std::fs::write(req.workdir.join("a"), "").expect("write");
        let outcome = run_ok(&req).await;
        assert_eq!(
            outcome.text,
            "$ ls -1 \"a b\" 'c'\nExit code: 0\nStdout:\na b\nc\n\nStderr:\n"
        );
        assert!(outcome.resolved_binary.ends_with("/ls"));
    }

    #[tokio::test]
    async fn non_interpreter_with_bad_quotes_errors() {
        assert_eq!(
            run(&request("ls", "'open").1).await,
            Err("unterminated single quote in command".to_string())
        );
    }

    #[tokio::test]
    async fn missing_binary_errors() {
        let result = run(&request("no-such-binary-mur", "--help").1).await;
        assert_eq!(
            result,
            Err("failed to start 'no-such-binary-mur': not found on PATH".to_string())
        );
    }
}
