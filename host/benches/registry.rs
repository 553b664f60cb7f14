//! What fetching components by name costs (`cargo bench -p mur --bench registry`):
//!
//! - **A locked capsule, launch to its first task's end**: `mur run --task hi` of a
//!   capsule whose three components (a tool, a hook and a session loop) are named by
//!   version and pinned in `murmur.lock`, from the component cache, against the same
//!   capsule with local `source:` paths to the same files. Whole-process wall time,
//!   component cache warm for both (each compiled once before timing), runs alternated,
//!   median of `RUNS` each; the difference is what reading and checking the lock costs.
//! - **`mur install`, cold**: the same capsule installed with an empty component cache
//!   against Debian's `docker-registry` on 127.0.0.1, median of `INSTALLS`, split as
//!   `mur install` reports it: fetch and verify (manifests, blobs, sha-256), compile.
//!
//! Needs `/usr/bin/docker-registry` (`apt-get install docker-registry`); without it the
//! bench says so and stops. Results are plain lines on stdout; BENCHMARKS.md keeps them.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const RUNS: usize = 21;
const INSTALLS: usize = 11;
const REGISTRY: &str = "/usr/bin/docker-registry";
const COMPONENTS: [(&str, &str, &str); 3] = [
    ("wordcount", "tool", "mur_tool_wordcount"),
    ("recorder", "hook", "mur_hook_recorder"),
    ("my-loop", "loop", "mur_loop_oneshot"),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("target")
        .join("bench")
        .join("registry")
}

fn guest(name: &str) -> PathBuf {
    Path::new(env!("MUR_GUEST_DIR")).join(format!("{name}.wasm"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

struct Registry(Child);

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_registry(dir: &Path) -> (Registry, String) {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let host = format!("127.0.0.1:{port}");
    let config = dir.join("registry.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {host}\n",
            dir.join("storage").display()
        ),
    )
    .unwrap();
    let child = Command::new(REGISTRY)
        .arg("serve")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&host).is_err() {
        assert!(Instant::now() < until, "the registry did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    (Registry(child), host)
}

fn mur(home: &Path, cache: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mur"));
    cmd.env("MURMUR_HOME", home)
        .env("MUR_CACHE_DIR", cache)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The capsule, its artifacts named (`by_name`) or given by path.
fn capsule(dir: &Path, registry: Option<&str>) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("script.yaml"), "turns:\n  - text: \"done\"\n").unwrap();
    let mut yaml = String::from("name: bench\nversion: \"0.1.0\"\n");
    if let Some(registry) = registry {
        yaml.push_str(&format!("registry: {registry}/team\n"));
    }
    yaml.push_str("artifacts:\n");
    for (name, runtime, file) in COMPONENTS {
        yaml.push_str(&format!(
            "  - name: {name}\n    version: \"1.0.0\"\n    runtime: {runtime}\n"
        ));
        if runtime == "hook" {
            yaml.push_str("    binding: on-session-end\n");
        }
        if registry.is_none() {
            yaml.push_str(&format!("    source: {}\n", guest(file).display()));
        }
    }
    yaml.push_str("inference:\n  driver: scripted\n  script: ./script.yaml\n  model: m\nlifecycle:\n  task_acceptance: none\n");
    let manifest = dir.join("murmur.yaml");
    std::fs::write(&manifest, yaml).unwrap();
    manifest
}

fn timed_run(manifest: &Path, home: &Path, cache: &Path, workdir: &Path) -> f64 {
    let started = Instant::now();
    ok(mur(home, cache)
        .args(["run", "--port", "0", "--manifest"])
        .arg(manifest)
        .arg("--workdir")
        .arg(workdir)
        .args(["--task", "hi"]));
    started.elapsed().as_secs_f64() * 1000.0
}

fn main() {
    if !Path::new(REGISTRY).exists() {
        println!("registry: skipped, {REGISTRY} is missing (apt-get install docker-registry)");
        return;
    }
    let root = root();
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("storage")).unwrap();
    let (_registry, host) = start_registry(&root);
    let (home, cache) = (root.join("home"), root.join("cache"));
    for (name, _, file) in COMPONENTS {
        ok(mur(&home, &cache)
            .arg("push")
            .arg(guest(file))
            .arg(format!("{host}/team/{name}:1.0.0")));
    }
    let locked = capsule(&root.join("locked"), Some(&host));
    let local = capsule(&root.join("local"), None);
    ok(mur(&home, &cache)
        .args(["install", "--manifest"])
        .arg(&locked));
    ok(mur(&home, &cache).args(["warm", "--manifest"]).arg(&local));

    let (mut by_lock, mut by_path) = (Vec::new(), Vec::new());
    for i in 0..RUNS + 1 {
        let w = root.join("workdirs").join(i.to_string());
        let a = timed_run(&locked, &home, &cache, &w.join("locked"));
        let b = timed_run(&local, &home, &cache, &w.join("local"));
        // The first pair warms the page cache.
        if i > 0 {
            by_lock.push(a);
            by_path.push(b);
        }
    }
    let (a, b) = (median(by_lock), median(by_path));
    println!(
        "locked, from the cache: {a:.1} ms; local source: paths: {b:.1} ms; ratio {:.3} (median of {RUNS}, launch to the first task's end)",
        a / b
    );

    let (mut fetch, mut compile, mut total) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..INSTALLS {
        let cold = root.join("cold").join(i.to_string());
        let started = Instant::now();
        let out = ok(mur(&home, &cold)
            .args(["install", "--manifest"])
            .arg(&locked));
        total.push(started.elapsed().as_secs_f64() * 1000.0);
        let last = out.lines().last().unwrap_or_default();
        let figure = |after: &str| -> f64 {
            let rest = last.split(after).nth(1).unwrap_or_default();
            rest.split_whitespace()
                .next()
                .unwrap_or_default()
                .parse()
                .unwrap_or(f64::NAN)
        };
        fetch.push(figure("fetch and verify "));
        compile.push(figure("compile "));
    }
    println!(
        "mur install, cold, 3 components: {:.0} ms in all; fetch and verify {:.0} ms, compile {:.0} ms (medians of {INSTALLS})",
        median(total),
        median(fetch),
        median(compile)
    );
}
