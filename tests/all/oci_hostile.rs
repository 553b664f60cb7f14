//! A registry that misbehaves (`tests/registry/fake_registry.py`, on 127.0.0.1): a
//! bearer-token challenge, blobs redirected to storage, a manifest far too large, a
//! blob longer than its descriptor. Each ends as a user would want: the component
//! fetched, or a clear error and nothing kept.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

struct Fake {
    child: Child,
    host: String,
    dir: std::path::PathBuf,
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn fake(mode: &str) -> Fake {
    let dir = scratch(&format!("reg-fake-{mode}"));
    let port_file = dir.join("port");
    let child = Command::new("python3")
        .arg(repo().join("tests/registry/fake_registry.py"))
        .arg(&port_file)
        .arg(guest(MUR_TOOL_WORDCOUNT))
        .arg(mode)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 runs");
    let until = Instant::now() + Duration::from_secs(20);
    let port = loop {
        if let Ok(port) = std::fs::read_to_string(&port_file) {
            break port;
        }
        assert!(Instant::now() < until, "the fake registry did not start");
        std::thread::sleep(Duration::from_millis(20));
    };
    Fake {
        child,
        host: format!("127.0.0.1:{port}"),
        dir,
    }
}

fn pull(fake: &Fake, env: &[(&str, &str)]) -> Run {
    finish(
        mur()
            .env("MUR_CACHE_DIR", fake.dir.join("cache"))
            .env("MURMUR_HOME", fake.dir.join("home"))
            .env("DOCKER_CONFIG", fake.dir.join("docker"))
            .env_remove("MUR_REGISTRY_USERNAME")
            .env_remove("MUR_REGISTRY_PASSWORD")
            .envs(env.iter().copied())
            .args(["pull", &format!("{}/team/tool:1.0.0", fake.host)]),
    )
}

fn kept(fake: &Fake) -> usize {
    std::fs::read_dir(fake.dir.join("cache/blobs/sha256")).map_or(0, |d| d.count())
}

#[test]
fn a_bearer_token_is_asked_for_with_the_users_credentials() {
    let fake = fake("bearer");
    let none = pull(&fake, &[]);
    assert_eq!(none.status, 1);
    assert!(
        none.stderr.starts_with(&format!(
            "error[E-REG-003]: the registry {} asks for credentials and mur has none for it\n",
            fake.host
        )),
        "{}",
        none.stderr
    );
    let with = pull(
        &fake,
        &[
            ("MUR_REGISTRY_USERNAME", "alice"),
            ("MUR_REGISTRY_PASSWORD", "s3cret"),
        ],
    );
    assert_eq!(with.status, 0, "{}", with.stderr);
    assert!(with.stdout.starts_with("pulled "), "{}", with.stdout);
}

#[test]
fn a_blob_redirected_to_storage_is_fetched_there_without_credentials() {
    let fake = fake("redirect");
    let run = pull(
        &fake,
        &[
            ("MUR_REGISTRY_USERNAME", "alice"),
            ("MUR_REGISTRY_PASSWORD", "s3cret"),
        ],
    );
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert_eq!(kept(&fake), 1);
}

#[test]
fn a_manifest_far_too_large_is_refused_unread() {
    let fake = fake("huge-manifest");
    let run = pull(&fake, &[]);
    assert_eq!(run.status, 1);
    assert_eq!(
        run.stderr,
        format!(
            "error[E-REG-007]: the registry {} answered in a way mur cannot use: a manifest larger than 4194304 bytes came\n  hint: check that the address is an OCI registry (distribution API v2)\n",
            fake.host
        )
    );
}

#[test]
fn a_blob_longer_than_its_descriptor_is_refused_and_not_kept() {
    let fake = fake("long-blob");
    let run = pull(&fake, &[]);
    assert_eq!(run.status, 1);
    let size = std::fs::metadata(guest(MUR_TOOL_WORDCOUNT)).unwrap().len();
    assert_eq!(
        run.stderr,
        format!(
            "error[E-REG-006]: {}/team/tool:1.0.0 sent more than the {size} bytes its manifest names\n  hint: the registry's copy is damaged or was tampered with; nothing was kept\n",
            fake.host
        )
    );
    assert_eq!(kept(&fake), 0);
}
