//! Where a seed test's capsule runs: in a `mur run` of its own, at `/`, or hosted by a
//! `mur serve`, at `/c/<id>/` behind its token. The seed protocol is the same at both
//! addresses, so the seed tests are compiled twice (`stream` and `stream_served`, one
//! file) and ask this module for their capsule; what only one host shows (a process's
//! exit status, the admin API's state) is read through accessors that mean the same
//! thing under both.
//!
//! Under `mur serve` a seed test's capsule gets a server of its own (so the
//! environment a test sets reaches only its capsule), started and driven through the
//! `mur serve` harness (`common::served`): created from a manifest on disk, its state
//! read through the admin API.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::served::{Create, Hosted, Served, WATCH};
use super::{Capsule, Running, Session, exchange, raw_request};

/// Which host a test module's capsules run under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Host {
    /// `mur run`, one process per capsule.
    Run,
    /// A capsule created in a `mur serve`.
    Serve,
}

impl Host {
    /// The host a module asks for by its name: a module whose name ends in `_served`
    /// (the seed file compiled a second time, see `main.rs`) hosts its capsules in a
    /// `mur serve`; any other runs them with `mur run`. Pass `module_path!()`.
    pub fn of_module(module_path: &str) -> Host {
        let name = module_path.rsplit("::").next().unwrap_or(module_path);
        if name.ends_with("_served") {
            Host::Serve
        } else {
            Host::Run
        }
    }
}

/// Where a capsule's requests go.
#[derive(Clone, Debug)]
pub struct At {
    /// `HOST:PORT`, what a socket connects to.
    pub address: String,
    /// The capsule's path: `/` under `mur run`, `/c/<id>/` under `mur serve`.
    pub path: String,
    /// `Bearer <token>` when the address wants a token.
    pub authorization: Option<String>,
}

impl At {
    /// `headers`, with the capsule's token first when it has one: every request a
    /// seed test sends is one its capsule's owner could send.
    pub fn headers<'a>(&'a self, headers: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut all = Vec::with_capacity(headers.len() + 1);
        if let Some(token) = &self.authorization {
            all.push(("authorization", token.as_str()));
        }
        all.extend_from_slice(headers);
        all
    }

    /// The bytes of a `method` request to the capsule's path with `suffix` appended
    /// (`""` for the address itself), its token and `headers`, and `body`.
    pub fn request(
        &self,
        method: &str,
        suffix: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> String {
        let target = format!("{}{suffix}", self.path);
        raw_request(&self.address, method, &target, &self.headers(headers), body)
    }

    /// Sends `request` as written and reads the whole answer, to close (bounded).
    pub fn exchange(&self, request: &str) -> String {
        exchange(&self.address, request)
    }

    /// The address as `mur watch` and `mur stop` take it: `http://HOST:PORT` for a
    /// `mur run`, `http://HOST:PORT/c/<id>/` for a hosted capsule.
    pub fn url(&self) -> String {
        let path = if self.path == "/" { "" } else { &self.path };
        format!("http://{}{path}", self.address)
    }

    /// The token alone, for `mur watch --token` and `mur stop --token`.
    pub fn token(&self) -> Option<&str> {
        self.authorization
            .as_deref()
            .and_then(|a| a.strip_prefix("Bearer "))
    }
}

/// A capsule started under one host or the other; it goes away when dropped.
pub struct Live {
    pub at: At,
    how: How,
}

enum How {
    Run(Running),
    Serve(Box<Hosting>),
}

/// A capsule in a `mur serve` of its own.
struct Hosting {
    served: Served,
    hosted: Hosted,
    session: Session,
}

impl Live {
    /// Starts `capsule` as `mur run --manifest <its murmur.yaml> <args>` would, with
    /// `env` set for the `mur` process. Under `mur serve` the environment goes to the
    /// server (one per capsule) and the lifecycle flags in `args` become the manifest's
    /// `lifecycle` keys; any other flag has no hosted equivalent and fails the test.
    pub fn start(host: Host, capsule: &Capsule, args: &[&str], env: &[(&str, &str)]) -> Live {
        match host {
            Host::Run => {
                let running = capsule.spawn_env(args, env);
                let at = At {
                    address: running.address.clone(),
                    path: "/".to_string(),
                    authorization: None,
                };
                Live {
                    at,
                    how: How::Run(running),
                }
            }
            Host::Serve => {
                let served = Served::start_with("serve", &[], env);
                let hosted = served.create(&Create::path(&hosted_manifest(capsule, args)));
                let described = served.capsule(&hosted.id);
                let session_id = served.session_id(&hosted.id);
                let session = Session {
                    workdir: PathBuf::from(described["workdir"].as_str().expect("a workdir")),
                    records: served.records(&hosted.id).join(&session_id),
                    id: session_id,
                };
                // The layout the seed tests read the trace through: a wrong guess here
                // would fail every trace read later, less clearly.
                assert!(
                    session.records.join("trace.jsonl").is_file(),
                    "no trace at {}",
                    session.records.display()
                );
                assert_eq!(hosted.created["workdir"], described["workdir"]);
                let at = At {
                    address: served.address.clone(),
                    path: format!("/c/{}/", hosted.id),
                    authorization: hosted.bearer(),
                };
                Live {
                    at,
                    how: How::Serve(Box::new(Hosting {
                        served,
                        hosted,
                        session,
                    })),
                }
            }
        }
    }

    /// What a `mur serve` answers when asked to host `capsule` (started with
    /// `args`) and it must refuse: the status and the error body.
    pub fn refused(capsule: &Capsule, args: &[&str]) -> (u16, Value) {
        let served = Served::start("serve");
        let reply = served.try_create(&Create::path(&hosted_manifest(capsule, args)));
        (reply.status, reply.json())
    }

    /// The session's id, workdir and records: from the launch line of `mur run`, from
    /// the admin API and the records layout of `mur serve`
    /// (`DATA/capsules/<id>/records/<session id>/`).
    pub fn session(&self) -> Session {
        match &self.how {
            How::Run(running) => running.session(),
            How::Serve(hosting) => hosting.session.clone(),
        }
    }

    /// Whether the capsule still serves: its `mur run` has not exited; its server has
    /// not exited and holds it `running` or `idle`.
    pub fn serving(&mut self) -> bool {
        match &mut self.how {
            How::Run(running) => running.child.try_wait().unwrap().is_none(),
            How::Serve(hosting) => {
                !hosting.served.exited()
                    && matches!(
                        hosting.served.capsule(&hosting.hosted.id)["state"].as_str(),
                        Some("running" | "idle")
                    )
            }
        }
    }

    /// Waits, at most `within`, for the session to end by itself (after its task, or
    /// through `murmur/stop`), and checks that it ended cleanly: `mur run` exits with
    /// status 0; a hosted capsule turns `ended` with the reason `session ended: ok`
    /// and its address answers 503 naming why, while the server goes on. Returns
    /// what the `mur` process wrote to stderr (for a server: so far).
    pub fn ends_cleanly(self, within: Duration) -> String {
        match self.how {
            How::Run(running) => {
                let run = running.wait(within);
                assert_eq!(run.status, 0, "{}", run.stderr);
                run.stderr
            }
            How::Serve(hosting) => {
                let Hosting {
                    mut served, hosted, ..
                } = *hosting;
                let id = &hosted.id;
                let ended = served.until_state(id, within, |s| s != "running" && s != "idle");
                assert_eq!(
                    (ended["state"].as_str(), ended["reason"].as_str()),
                    (Some("ended"), Some("session ended: ok")),
                    "{ended}\nserver stderr:\n{}",
                    served.stderr()
                );
                hosted.call(&[], WATCH).assert_refused(
                    "503 Service Unavailable",
                    &format!("capsule {id} has ended its session"),
                );
                assert!(
                    !served.exited(),
                    "the server outlives its capsule's session"
                );
                served.stderr()
            }
        }
    }
}

/// The manifest a hosted capsule is created from: the capsule's own, with the lifecycle
/// flags of `mur run` written in as the keys they override, beside the original so
/// that `./script.yaml` and other relative paths name the same files.
fn hosted_manifest(capsule: &Capsule, args: &[&str]) -> PathBuf {
    let original = std::fs::read_to_string(capsule.manifest()).unwrap();
    let path = capsule.dir.join("murmur.served.yaml");
    std::fs::write(&path, with_lifecycle(&original, &lifecycle_keys(args))).unwrap();
    path
}

/// The `lifecycle` keys `mur run`'s flags set.
fn lifecycle_keys(args: &[&str]) -> Vec<(&'static str, String)> {
    let mut keys = Vec::new();
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let key = match *flag {
            "--lifecycle-task-acceptance" => "task_acceptance",
            "--lifecycle-after-task" => "after_task",
            other => {
                panic!("`mur run {other}` has no equivalent for a capsule hosted by mur serve")
            }
        };
        let value = args
            .next()
            .unwrap_or_else(|| panic!("{flag} takes a value"));
        keys.push((key, value.to_string()));
    }
    keys
}

/// `manifest` with `keys` under its top-level `lifecycle:` (added when it has none),
/// replacing the same keys there, as the flags override them. The seed tests' manifests
/// indent by two spaces; anything else would make YAML the loader refuses, loudly.
fn with_lifecycle(manifest: &str, keys: &[(&str, String)]) -> String {
    if keys.is_empty() {
        return manifest.to_string();
    }
    let ours: Vec<String> = keys.iter().map(|(k, v)| format!("  {k}: {v}")).collect();
    let overridden = |line: &str| {
        keys.iter().any(|(k, _)| {
            line.strip_prefix("  ")
                .is_some_and(|l| l.starts_with(&format!("{k}:")))
        })
    };
    let mut out = Vec::new();
    let mut in_lifecycle = false;
    let mut placed = false;
    for line in manifest.lines() {
        let top_level = !line.is_empty() && !line.starts_with([' ', '#']);
        if top_level {
            in_lifecycle = line.trim_end() == "lifecycle:";
        }
        if in_lifecycle && !top_level && overridden(line) {
            continue;
        }
        out.push(line.to_string());
        if in_lifecycle && top_level {
            out.extend(ours.iter().cloned());
            placed = true;
        }
    }
    if !placed {
        out.push("lifecycle:".to_string());
        out.extend(ours);
    }
    out.join("\n") + "\n"
}
