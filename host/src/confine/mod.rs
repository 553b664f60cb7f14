//! The confined shell: every shell command runs inside an OS sandbox as strong as the
//! capsule's containment class says, or the capsule does not start.
//!
//! What a class means is decided once, at launch: the kernel is probed, the Landlock
//! ruleset and the seccomp program are built, and the result is a [`Jail`] every command
//! of the session is spawned into. The parts:
//! - `kernel`: what this kernel can back (Landlock ABI, seccomp, user namespaces);
//! - `filesystem`: the Landlock ruleset (what a command may read, write and execute);
//! - `etc`: the parts of `/etc` everyone may read, walked on a thread of its own;
//! - `kept`: what the walk and the namespace probes keep across runs;
//! - `syscalls`: the seccomp program (no sockets but the allowed ones, no namespaces,
//!   no tracing, no io_uring);
//! - `spawn`: the clone that starts a command in its namespaces;
//! - `child`: the steps the child takes before it execs;
//! - `sealed`: the composed root of the `sealed` class;
//! - `server`: long-running servers (MCP), confined as commands are, plus what they are
//!   made of (read and execute, never write);
//! - `proxy`: the HTTP(S) proxy of `capabilities.shell.network: proxy`;
//! - `explain`: what a command can reach, in words, for `--explain-scope` and MURMUR.md.

mod child;
mod cpu_group;
mod etc;
pub mod explain;
mod filesystem;
mod kept;
mod kernel;
mod pids;
pub mod proxy;
mod sealed;
mod server;
pub mod spawn;
mod syscalls;
pub mod watch;

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::Error;

pub use cpu_group::in_force as cpu_in_force;
pub use kernel::Kernel;
pub use server::Installation;

/// Variables that point a command's HTTP clients at the proxy, in both spellings.
const PROXY_VARS: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// Variables that would let a command bypass the proxy; the sandbox empties them.
const NO_PROXY_VARS: &[&str] = &["NO_PROXY", "no_proxy"];

/// Whether the sandbox sets this variable itself, whatever the capsule grants.
fn confined_var(key: &str) -> bool {
    ["PATH", "TMPDIR"].contains(&key) || PROXY_VARS.contains(&key) || NO_PROXY_VARS.contains(&key)
}

/// `capabilities.containment`: how strongly shell commands are confined. Ordered from
/// weakest to strongest, so the stronger of the manifest's and `--containment` wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// The explicit opt-out: commands run as the user who started mur.
    Advisory,
    /// Landlock (reads and writes), seccomp (sockets, namespaces, tracing), a user and PID
    /// namespace of its own, and resource limits.
    Scoped,
    /// `scoped` plus a private mount namespace pivoted onto a composed root that holds
    /// only the system directories and the workdir.
    Sealed,
}

impl Class {
    pub const NAMES: &'static [(&'static str, Class)] = &[
        ("advisory", Class::Advisory),
        ("scoped", Class::Scoped),
        ("sealed", Class::Sealed),
    ];

    pub fn name(self) -> &'static str {
        match self {
            Class::Advisory => "advisory",
            Class::Scoped => "scoped",
            Class::Sealed => "sealed",
        }
    }
}

/// `capabilities.shell.network`: what a confined command may reach on the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Network {
    /// No IPv4 or IPv6 socket at all, loopback included.
    #[default]
    None,
    /// One TCP port: the session's proxy, which lets through `capabilities.network.allow`.
    Proxy,
}

impl Network {
    pub const NAMES: &'static [(&'static str, Network)] =
        &[("none", Network::None), ("proxy", Network::Proxy)];
}

/// What the capsule asks of its shell, from the manifest and the command line.
#[derive(Debug, Clone)]
pub struct ShellPolicy {
    /// What the manifest declared (`scoped` when it says nothing).
    pub declared: Class,
    /// `--containment`, when given.
    pub raised: Option<Class>,
    pub network: Network,
    /// `capabilities.filesystem.workdir_exec`.
    pub workdir_exec: bool,
    pub limits: Limits,
}

impl ShellPolicy {
    /// The class in force: the stronger of the declared and the raised.
    pub fn class(&self) -> Class {
        self.raised.map_or(self.declared, |r| r.max(self.declared))
    }
}

/// The resource limits of every process a command starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Address space of each process (`capabilities.limits.memory_bytes`).
    pub memory_bytes: u64,
    /// CPU time of each process (`capabilities.limits.shell_cpu_seconds`).
    pub cpu_seconds: u64,
    /// The largest file a command may write (`capabilities.limits.workdir_bytes`), and
    /// less as the workdir fills: see [`watch::Watch::file_room`].
    pub file_bytes: u64,
    /// Open files per process (`capabilities.limits.shell_open_files`).
    pub open_files: u64,
    /// Processes in one command's sandbox (`capabilities.limits.shell_processes`).
    pub processes: u64,
    /// Commands running at once, foreground and background
    /// (`capabilities.limits.shell_concurrency`).
    pub commands: u64,
    /// The scheduling priority every process of a command runs at: under `mur serve`,
    /// the kernel weight of the capsule's CPU share (see `cpu::nice_for`); 0 otherwise.
    pub nice: i32,
}

impl Limits {
    #[cfg(test)]
    fn unlimited() -> Limits {
        Limits {
            memory_bytes: u64::MAX,
            cpu_seconds: u64::MAX,
            file_bytes: u64::MAX,
            open_files: u64::MAX,
            processes: u64::MAX,
            commands: u64::MAX,
            nice: 0,
        }
    }
}

/// A session's sandbox, built once and entered by every shell command.
pub struct Jail {
    class: Class,
    network: Network,
    kernel: Kernel,
    /// The Landlock ruleset, handed to each child's `landlock_restrict_self`.
    ruleset: Option<OwnedFd>,
    /// Its readable parts of `/etc`, added while the session opens.
    config: Option<filesystem::Pending>,
    /// The seccomp programs, installed in order in each child.
    filters: Vec<seccompiler::BpfProgram>,
    steps: child::Steps,
    /// The session's proxy, under `network: proxy`: the one TCP port a command may reach.
    proxy: Option<proxy::Proxy>,
    /// For root, whom `RLIMIT_NPROC` does not bind: a pids cgroup per command.
    pids: Option<pids::Pids>,
    /// The capsule's CPU weight, where a cgroup CPU controller can be had.
    cpu: Option<cpu_group::CpuGroup>,
    workdir: PathBuf,
    workdir_exec: bool,
    limits: Limits,
    armed: bool,
    /// The workdir quota, watched while commands run.
    watch: Arc<watch::Watch>,
    /// Where `sealed` composes its roots; each server plans its own there.
    scratch: Option<PathBuf>,
    /// The host's records: no server's installation may lie in them or hold them.
    records: Vec<PathBuf>,
}

/// What one server's sandbox has of its own: a ruleset that adds its installation, and
/// under `sealed` the steps that enter a root holding it.
struct Own {
    ruleset: OwnedFd,
    steps: Option<child::Steps>,
}

/// What a confined command holds while it runs: its pids cgroup, removed after it.
pub struct Confined {
    _cgroup: Option<pids::Group>,
}

impl Jail {
    /// Checks `policy` against this kernel, before anything is created: a class the
    /// kernel cannot back stops the launch here.
    ///
    /// # Errors
    ///
    /// `E-CAP-01x` naming the missing mechanism.
    pub fn plan(policy: &ShellPolicy, workdir: &Path) -> Result<Jail, Error> {
        let class = policy.class();
        let kernel = if class == Class::Advisory {
            Kernel::unprobed()
        } else {
            etc::walk_ahead();
            Kernel::probe()
        };
        kernel.backs(class)?;
        Ok(Jail {
            class,
            network: policy.network,
            kernel,
            ruleset: None,
            config: None,
            filters: Vec::new(),
            steps: child::Steps::none(),
            proxy: None,
            pids: None,
            cpu: None,
            workdir: workdir.to_path_buf(),
            workdir_exec: policy.workdir_exec,
            limits: policy.limits,
            armed: class == Class::Advisory,
            watch: Arc::default(),
            scratch: None,
            records: Vec::new(),
        })
    }

    /// No sandbox at all, for commands that run as the user (`advisory`).
    #[cfg(test)]
    pub fn advisory(workdir: &Path) -> Jail {
        Jail {
            class: Class::Advisory,
            network: Network::None,
            kernel: Kernel::unprobed(),
            ruleset: None,
            config: None,
            filters: Vec::new(),
            steps: child::Steps::none(),
            proxy: None,
            pids: None,
            cpu: None,
            workdir: workdir.to_path_buf(),
            workdir_exec: true,
            limits: Limits::unlimited(),
            armed: true,
            watch: Arc::default(),
            scratch: None,
            records: Vec::new(),
        }
    }

    /// Builds the ruleset, the seccomp programs and the child's steps, now that the
    /// workdir exists. `scratch` is an empty folder outside every guest's view where
    /// `sealed` composes its root; `proxy` is the session's proxy under `network: proxy`.
    ///
    /// # Errors
    ///
    /// `E-CAP-01x` when a part cannot be built.
    pub fn arm(mut self, scratch: &Path, proxy: Option<proxy::Proxy>) -> Result<Jail, Error> {
        self.proxy = proxy;
        self.scratch = Some(scratch.to_path_buf());
        self.records.push(scratch.to_path_buf());
        if self.class == Class::Advisory {
            return Ok(self);
        }
        let rules = filesystem::Rules {
            workdir: &self.workdir,
            workdir_exec: self.workdir_exec,
            proxy_port: self.proxy_port(),
        };
        let (ruleset, config) = filesystem::ruleset(&self.kernel, &rules)?;
        self.ruleset = Some(ruleset);
        self.config = Some(config);
        self.filters = syscalls::programs(&syscalls::Allowed {
            inet_stream: self.proxy.is_some(),
            unix_sockets: self.unix_sockets(),
        })?;
        let root = if self.class == Class::Sealed {
            Some(sealed::Root::plan(&self.workdir, scratch)?)
        } else {
            None
        };
        self.steps = child::Steps::new(&self.limits, root);
        self.pids = pids::Pids::open(self.limits.processes)?;
        self.cpu = cpu_group::CpuGroup::open(
            self.limits.nice,
            self.pids.as_ref().map(pids::Pids::session_dir),
        );
        self.armed = true;
        Ok(self)
    }

    /// Names the host's records (`records_root`: every session's), which no server's
    /// installation may lie in or hold; the scratch folder given to [`Jail::arm`] is
    /// kept out already.
    #[must_use]
    pub fn keep_out(mut self, records: &Path) -> Jail {
        self.records.push(records.to_path_buf());
        self
    }

    pub fn class(&self) -> Class {
        self.class
    }

    pub fn network(&self) -> Network {
        self.network
    }

    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    pub fn workdir_exec(&self) -> bool {
        self.workdir_exec
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The session's workdir quota as its commands run; set with the quota once the
    /// session has measured its workdir, watched for every class (`advisory` included,
    /// since the quota is the session's, not the sandbox's).
    pub fn watch(&self) -> &Arc<watch::Watch> {
        &self.watch
    }

    /// Whether a command may open Unix sockets (then only inside the workdir).
    pub fn unix_sockets(&self) -> bool {
        self.class == Class::Sealed || self.kernel.resolves_unix()
    }

    pub fn proxy_port(&self) -> Option<u16> {
        self.proxy.as_ref().map(|p| p.addr().port())
    }

    pub fn workdir(&self) -> &Path {
        &self.workdir
    }

    /// Whether commands run unconfined (`advisory`), started as plain processes.
    pub fn unconfined(&self) -> bool {
        self.class == Class::Advisory
    }

    /// Starts a command inside the sandbox.
    ///
    /// # Errors
    ///
    /// The sandbox was planned but never armed (the command must not run unconfined),
    /// or the command could not be started in it.
    pub async fn spawn(
        self: &std::sync::Arc<Self>,
        req: &spawn::Request<'_>,
    ) -> Result<(spawn::Started, Confined), String> {
        if !self.armed || self.class == Class::Advisory {
            return Err("the shell sandbox was not set up; the command was not run".into());
        }
        if let Some(config) = &self.config {
            config.ready().await.map_err(|e| {
                format!(
                    "the shell sandbox's rules for /etc could not be added ({e}); the command \
                     was not run"
                )
            })?;
        }
        let (launched, confined) = self.launch(req, spawn::Stdin::Null, None).await?;
        Ok((launched.started(), confined))
    }

    /// Starts `req` confined: with the session's ruleset and steps, or a server's `own`.
    async fn launch(
        self: &Arc<Self>,
        req: &spawn::Request<'_>,
        stdin: spawn::Stdin,
        own: Option<Own>,
    ) -> Result<(spawn::Launched, Confined), String> {
        let cgroup = match &self.pids {
            Some(pids) => Some(
                pids.group()
                    .map_err(|e| format!("the command's pids cgroup could not be made: {e}"))?,
            ),
            None => None,
        };
        let join = cgroup.as_ref().map(|g| g.join().to_owned());
        let cpu_join = self
            .cpu
            .as_ref()
            .and_then(cpu_group::CpuGroup::join)
            .map(std::ffi::CStr::to_owned);
        let file_bytes = self
            .watch
            .file_room()
            .await
            .map_or(self.limits.file_bytes, |room| {
                room.min(self.limits.file_bytes)
            });
        let flags = child::namespaces(
            own.as_ref()
                .and_then(|own| own.steps.as_ref())
                .unwrap_or(&self.steps),
        );
        let jail = self.clone();
        let enter: spawn::Enter = Box::new(move || {
            let ruleset = own
                .as_ref()
                .map_or(jail.ruleset.as_ref(), |own| Some(&own.ruleset))
                .map(std::os::fd::AsRawFd::as_raw_fd);
            let steps = own
                .as_ref()
                .and_then(|own| own.steps.as_ref())
                .unwrap_or(&jail.steps);
            child::confine_self(
                steps,
                [join.as_deref(), cpu_join.as_deref()],
                ruleset,
                file_bytes,
                &jail.filters,
            )
        });
        let launched = spawn::launch(req, stdin, flags, enter)
            .await
            .map_err(|e| format!("failed to start '{}' in the sandbox: {e}", req.program))?;
        Ok((launched, Confined { _cgroup: cgroup }))
    }

    /// The environment of a confined command: `base` with a PATH it can execute from,
    /// `TMPDIR` inside the workdir (`home/tmp`), and the proxy's address when there is one.
    pub fn environment(&self, base: &[(String, String)], home: &Path) -> Vec<(String, String)> {
        if self.class == Class::Advisory {
            return base.to_vec();
        }
        let mut env: Vec<(String, String)> = base
            .iter()
            .filter(|(k, _)| !confined_var(k))
            .cloned()
            .collect();
        let host_path = base
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map_or("", |(_, v)| v.as_str());
        env.push(("PATH".into(), self.path(host_path)));
        env.push((
            "TMPDIR".into(),
            home.join("tmp").to_string_lossy().into_owned(),
        ));
        if let Some(proxy) = &self.proxy {
            let url = proxy.url();
            for key in PROXY_VARS {
                env.push((key.to_string(), url.clone()));
            }
            for key in NO_PROXY_VARS {
                env.push((key.to_string(), String::new()));
            }
        }
        env
    }

    /// Removes what the sandbox made outside the workdir (the pids cgroups) once every
    /// command has ended.
    pub fn release(&self) {
        if let Some(pids) = &self.pids {
            pids.release();
        }
    }

    /// The limit a command's exit proves it hit: killed by SIGXFSZ (a file past
    /// `workdir_bytes`) or SIGXCPU (past `shell_cpu_seconds`). `None` when no single
    /// limit is proven, and always for an unconfined command (the limits are not ours).
    pub fn resource_limit(&self, exit_code: i32) -> Option<&'static str> {
        if self.class == Class::Advisory {
            return None;
        }
        match exit_code - 128 {
            libc::SIGXFSZ => Some("capabilities.limits.workdir_bytes"),
            libc::SIGXCPU => Some("capabilities.limits.shell_cpu_seconds"),
            _ => None,
        }
    }

    /// The PATH a confined command gets: the entries it can execute from, in order.
    pub fn path(&self, host_path: &str) -> String {
        if self.class == Class::Advisory {
            return host_path.to_string();
        }
        let usable: Vec<&str> = host_path
            .split(':')
            .filter(|dir| filesystem::executable_dir(Path::new(dir)))
            .collect();
        if usable.is_empty() {
            "/usr/local/bin:/usr/bin:/bin".to_string()
        } else {
            usable.join(":")
        }
    }

    /// The one line `mur run` prints at launch, e.g.
    /// `shell: scoped (landlock abi 7 + seccomp), no network`.
    pub fn launch_line(&self) -> String {
        explain::launch_line(self)
    }

    /// `session_start.containment`: declared and achieved, with the mechanisms.
    pub fn record(&self, declared: Class) -> serde_json::Value {
        explain::record(self, declared)
    }
}
