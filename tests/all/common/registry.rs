//! A real OCI registry for the tests: Debian's `docker-registry` (distribution 2.8),
//! started on 127.0.0.1 with its storage in a scratch folder, optionally behind
//! htpasswd authentication. Each test has its own registry, its own `MURMUR_HOME` and
//! its own component cache, so what is fetched and what is cached is the test's alone.
//! Without the binary the tests skip, unless `MUR_REQUIRE_SDKS` is set (CI installs it).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{Run, finish, mur, scratch};

const BINARY: &str = "/usr/bin/docker-registry";

/// `alice` / `s3cret`, bcrypt (`htpasswd -nbB alice s3cret`).
pub const HTPASSWD: &str = "alice:$2y$05$0PwEXhfVklh3ixMUjASzD.lhOjA33KSkeAI0gG.dDNrdO3PlOrvGy\n";

pub struct Registry {
    /// `127.0.0.1:<port>`.
    pub host: String,
    pub dir: PathBuf,
    child: Option<Child>,
}

impl Registry {
    /// A registry, or `None` (the test skips) when Debian's is not installed.
    pub fn start(name: &str, authenticated: bool) -> Option<Registry> {
        if !Path::new(BINARY).exists() {
            assert!(
                std::env::var_os("MUR_REQUIRE_SDKS").is_none(),
                "{BINARY} is missing: apt-get install docker-registry"
            );
            eprintln!("skipped: {BINARY} is missing (apt-get install docker-registry)");
            return None;
        }
        let dir = scratch(name);
        for sub in ["storage", "home", "cache"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let port = {
            let probe = TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let host = format!("127.0.0.1:{port}");
        let auth = if authenticated {
            std::fs::write(dir.join("htpasswd"), HTPASSWD).unwrap();
            format!(
                "auth:\n  htpasswd:\n    realm: mur-tests\n    path: {}\n",
                dir.join("htpasswd").display()
            )
        } else {
            String::new()
        };
        let config = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {host}\n{auth}",
            dir.join("storage").display()
        );
        std::fs::write(dir.join("config.yml"), config).unwrap();
        let child = Command::new(BINARY)
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("registry.log")).unwrap())
            .spawn()
            .unwrap();
        let registry = Registry {
            host,
            dir,
            child: Some(child),
        };
        registry.wait_up();
        Some(registry)
    }

    fn wait_up(&self) {
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until {
            if std::net::TcpStream::connect(&self.host).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the registry did not start: {}", self.log());
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("registry.log")).unwrap_or_default()
    }

    /// `mur` with this test's own MURMUR_HOME and component cache.
    pub fn mur(&self) -> Command {
        let mut cmd = mur();
        cmd.env("MURMUR_HOME", self.dir.join("home"))
            .env("MUR_CACHE_DIR", self.dir.join("cache"))
            .env_remove("MUR_REGISTRY_USERNAME")
            .env_remove("MUR_REGISTRY_PASSWORD")
            .env("DOCKER_CONFIG", self.dir.join("docker"));
        cmd
    }

    /// `mur <args>`, to completion.
    pub fn run(&self, args: &[&str]) -> Run {
        finish(self.mur().args(args))
    }

    /// Pushes `wasm` as `<this registry>/<repo_tag>`, which must work.
    pub fn push(&self, wasm: &Path, repo_tag: &str) -> Run {
        let run = finish(
            self.mur()
                .arg("push")
                .arg(wasm)
                .arg(format!("{}/{repo_tag}", self.host)),
        );
        assert_eq!(run.status, 0, "push {repo_tag}: {}", run.stderr);
        run
    }

    /// Writes `$MURMUR_HOME/config.yaml`.
    pub fn config(&self, yaml: &str) {
        std::fs::write(self.dir.join("home").join("config.yaml"), yaml).unwrap();
    }

    /// Forgets every pulled and compiled component.
    pub fn clear_cache(&self) {
        let cache = self.dir.join("cache");
        std::fs::remove_dir_all(&cache).unwrap();
        std::fs::create_dir_all(&cache).unwrap();
    }

    /// The file the registry keeps the blob `digest` in.
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.dir
            .join("storage/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}
