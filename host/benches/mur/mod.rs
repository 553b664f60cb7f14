//! The benches' `mur run` process: started on a capsule in `queue` + `sleep` mode with
//! an ephemeral port, its address read from its JSON launch line, killed when dropped
//! (a panicking bench leaves no process behind). `Mur::launch` does the same for
//! another `mur` command that prints a launch line (`mur serve`).

use std::io::{self, BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// A running `mur run` (or `mur serve`); dropping it kills the process.
pub struct Mur {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Mur {
    /// Starts `mur run` on `capsule/murmur.yaml`, its compiled components cached in
    /// `cache`, and waits at most `launch_limit` for its launch line (a cold cache
    /// compiles the components).
    pub fn start(capsule: &Path, cache: &Path, launch_limit: Duration) -> Mur {
        Mur::start_with_env(capsule, cache, launch_limit, &[])
    }

    /// [`Mur::start`] with `env` added to the process's environment.
    pub fn start_with_env(
        capsule: &Path,
        cache: &Path,
        launch_limit: Duration,
        env: &[(&str, &str)],
    ) -> Mur {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mur"));
        command
            .envs(env.iter().copied())
            .args(["run", "--json", "--bind", "127.0.0.1", "--port", "0"])
            .args(["--lifecycle-task-acceptance", "queue"])
            .args(["--lifecycle-after-task", "sleep"])
            .arg("--manifest")
            .arg(capsule.join("murmur.yaml"));
        Mur::launch(command, capsule, cache, launch_limit)
    }

    /// Spawns `command` (a `mur` command printing a JSON launch line) in `dir`, its
    /// stderr in `dir/mur.stderr`, its compiled components cached in `cache`, and waits
    /// at most `launch_limit` for the launch line.
    pub fn launch(mut command: Command, dir: &Path, cache: &Path, launch_limit: Duration) -> Mur {
        let stderr = std::fs::File::create(dir.join("mur.stderr")).unwrap();
        let mut child = command
            .current_dir(dir)
            .env("MUR_CACHE_DIR", cache)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("mur starts");
        let stdout = child.stdout.take().unwrap();
        // From here on a panic kills the process.
        let mut mur = Mur {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut stdout = BufReader::new(stdout);
            let mut line = String::new();
            let _ = stdout.read_line(&mut line);
            let _ = tx.send(line);
            let _ = io::copy(&mut stdout, &mut io::sink());
        });
        let line = rx.recv_timeout(launch_limit).unwrap_or_default();
        let launch: Value = serde_json::from_str(&line).unwrap_or_else(|_| {
            let log = std::fs::read_to_string(dir.join("mur.stderr")).unwrap_or_default();
            panic!("mur printed no launch line ({line:?}); stderr:\n{log}")
        });
        mur.addr = launch["address"]
            .as_str()
            .and_then(|a| a.strip_prefix("http://"))
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no address in the launch line: {line}"));
        mur
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Lines of `/proc/<pid>/status` as KiB: `VmRSS:`, `RssAnon:`, ...
    pub fn status_kib(&self, field: &str) -> Result<u64, String> {
        let pid = self.pid();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .ok_or_else(|| format!("no {field} line"))
    }
}

impl Drop for Mur {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Where a bench keeps `mur`'s compiled components between runs.
pub fn cache(name: &str) -> PathBuf {
    repo().join("target").join("bench").join(name)
}

/// A fresh folder for one of `bench`'s capsules, under the repository's target.
pub fn scratch(bench: &str, name: &str) -> PathBuf {
    let dir = cache(&format!("{bench}-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
