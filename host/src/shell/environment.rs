//! What a command finds around it: the environment it was granted, `HOME`, and the folders
//! (`HOME`, `TMPDIR`) made for it beneath the workdir.

use std::path::Path;

use super::ShellRequest;

/// The PATH the binary is looked up on: the child's own, else the host's.
pub(super) fn child_path(req: &ShellRequest) -> String {
    req.env
        .iter()
        .rev()
        .find(|(key, _)| key == "PATH")
        .map(|(_, value)| value.clone())
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_default()
}

/// The command's whole environment: what it was granted, and `HOME`.
pub(super) fn child_env(req: &ShellRequest) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = req
        .env
        .iter()
        .filter(|(k, _)| k != "HOME")
        .cloned()
        .collect();
    env.push(("HOME".into(), req.home.to_string_lossy().into_owned()));
    env
}

/// `$HOME` for the command, created beneath the workdir (a link there leading out is
/// refused rather than followed to make a folder elsewhere).
pub(super) fn create_home(req: &ShellRequest) -> std::io::Result<()> {
    let inside = req.home.strip_prefix(&req.workdir).map_err(|_| {
        std::io::Error::other(format!(
            "it is not inside the workdir {}",
            req.workdir.display()
        ))
    })?;
    let view = crate::rooted::Rooted::open(&req.workdir)?;
    view.create_dir_all(&inside.to_string_lossy())?;
    // A confined command's TMPDIR is inside the workdir too.
    let tmp = req.env.iter().rev().find(|(k, _)| k == "TMPDIR");
    if let Some(inside) = tmp.and_then(|(_, v)| Path::new(v).strip_prefix(&req.workdir).ok()) {
        view.create_dir_all(&inside.to_string_lossy())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::shell::run;
    use crate::shell::test_support::{host_path, request, run_ok};

    #[tokio::test]
    async fn env_is_only_what_was_passed_plus_home() {
        let (_scratch, mut req) = request("env", "");
        req.env
            .push(("MUR_TEST_VAR".to_string(), "x y".to_string()));
        req.env
            .push(("HOME".to_string(), "/overridden".to_string()));
        let outcome = run_ok(&req).await;
        let stdout = outcome
            .text
            .strip_prefix("$ env \nExit code: 0\nStdout:\n")
            .and_then(|rest| rest.strip_suffix("\nStderr:\n"))
            .expect("shape");
        let mut lines: Vec<&str> = stdout.lines().collect();
        lines.sort_unstable();
        let home = format!("HOME={}", req.home.display());
        let path = format!("PATH={}", host_path());
        let mut expected = vec![home.as_str(), "MUR_TEST_VAR=x y", path.as_str()];
        expected.sort_unstable();
        assert_eq!(lines, expected);
    }

    #[tokio::test]
    async fn missing_workdir_errors() {
        let (_scratch, mut req) = request("bash", "true");
        req.workdir = req.workdir.join("does-not-exist");
        req.home = req.workdir.join(".capsule-home");
        let err = run(&req).await.expect_err("spawn must fail");
        assert!(err.starts_with("failed to create home '"), "{err}");
        assert!(
            err.ends_with("No such file or directory (os error 2)"),
            "{err}"
        );
    }
}
