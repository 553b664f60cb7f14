//! The command line: `mur run`, `mur watch`, `mur stop`.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::address::{Address, parse_address};
use crate::queue::{Acceptance, AfterTask};

#[derive(Parser, Debug)]
#[command(
    name = "mur",
    version,
    about = "Runs AI-agent capsules as WebAssembly components and serves them over A2A"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a capsule: stage it, serve its address and run its tasks.
    Run(RunArgs),
    /// Watch a running capsule: print every frame its address streams (stream/watch).
    #[command(long_about = WATCH_ABOUT)]
    Watch(WatchArgs),
    /// Stop a running capsule cleanly and wait until it has exited.
    #[command(long_about = STOP_ABOUT)]
    Stop(StopArgs),
}

const WATCH_ABOUT: &str = "Watch a running capsule: attach to its address with stream/watch, \
replay what it still buffers, then print its frames as they happen. Never reconnects.

Ctrl-C ends the watch, not the capsule; use `mur stop` to end the capsule.

There is no session registry yet, so the address is the only way to name a capsule.";

const STOP_ABOUT: &str = "Stop a running capsule: ask it to end its session (murmur/stop), \
which cancels its queued and running tasks, then wait until its address refuses connections.

There is no session registry yet, so the address is the only way to name a capsule: \
mur stop cannot take a session id.";

/// The address help both client commands share.
const ADDRESS_HELP: &str =
    "The capsule's address as mur run prints it: HOST:PORT, localhost:PORT or http://HOST:PORT";

#[derive(clap::Args, Debug)]
pub struct WatchArgs {
    #[arg(value_name = "ADDRESS", value_parser = parse_address, help = ADDRESS_HELP)]
    pub address: Address,
}

#[derive(clap::Args, Debug)]
pub struct StopArgs {
    /// The capsule's address as mur run prints it: HOST:PORT, localhost:PORT or
    /// http://HOST:PORT (the only selector: there is no session registry yet).
    #[arg(value_name = "ADDRESS", value_parser = parse_address)]
    pub address: Address,
    /// Seconds to wait for the capsule to exit after it accepted the stop; 0 returns at once.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub timeout: u64,
}

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The capsule manifest; paths inside it resolve against its directory.
    #[arg(long, default_value = "./murmur.yaml")]
    pub manifest: PathBuf,
    /// The launch task: a file to copy, else the text itself. Written as task.md.
    #[arg(long)]
    pub task: Option<String>,
    /// The capsule's working directory: what its tools and commands see. The host's
    /// records go elsewhere (see --records).
    #[arg(long)]
    pub workdir: Option<PathBuf>,
    /// Where the host keeps its records (traces, logs, conversations, hook data), outside
    /// the workdir. Default: <manifest-dir>/workdir/.murmur, or with --workdir DIR
    /// $MURMUR_HOME/records/<name>-<hash> (MURMUR_HOME defaults to ~/.murmur).
    #[arg(long, value_name = "DIR")]
    pub records: Option<PathBuf>,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// The port to listen on; 0 takes any free port (default: network.internal_port, else any).
    #[arg(long)]
    pub port: Option<u16>,
    /// Print one JSON line at launch and nothing else on stdout.
    #[arg(long)]
    pub json: bool,
    /// A session loop component to run instead of the built-in one.
    #[arg(long = "loop", value_name = "PATH.wasm")]
    pub loop_path: Option<PathBuf>,
    /// Overrides lifecycle.task_acceptance.
    #[arg(long, value_enum)]
    pub lifecycle_task_acceptance: Option<AcceptanceArg>,
    /// Overrides lifecycle.after_task.
    #[arg(long, value_enum)]
    pub lifecycle_after_task: Option<AfterTaskArg>,
    /// Resume after session SESSION (a ses_ id, a suffix of 4+ characters, or @N with
    /// @1 the newest; bare --resume = @1): its detached commands that a killed runtime
    /// left unaccounted for are reported to this run as one completion task.
    #[arg(long, value_name = "SESSION", num_args = 0..=1, default_missing_value = "@1")]
    pub resume: Option<String>,
    /// Confine shell commands at least this strongly; the stronger of this and
    /// capabilities.containment (default scoped) wins.
    #[arg(long, value_enum, value_name = "CLASS")]
    pub containment: Option<ContainmentArg>,
    /// Print what a shell command of this capsule could reach, and exit.
    #[arg(long)]
    pub explain_scope: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum ContainmentArg {
    Advisory,
    Scoped,
    Sealed,
}

impl From<ContainmentArg> for crate::confine::Class {
    fn from(c: ContainmentArg) -> Self {
        match c {
            ContainmentArg::Advisory => crate::confine::Class::Advisory,
            ContainmentArg::Scoped => crate::confine::Class::Scoped,
            ContainmentArg::Sealed => crate::confine::Class::Sealed,
        }
    }
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum AcceptanceArg {
    None,
    Single,
    Queue,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum AfterTaskArg {
    Exit,
    Sleep,
}

impl From<AcceptanceArg> for Acceptance {
    fn from(a: AcceptanceArg) -> Self {
        match a {
            AcceptanceArg::None => Acceptance::None,
            AcceptanceArg::Single => Acceptance::Single,
            AcceptanceArg::Queue => Acceptance::Queue,
        }
    }
}

impl From<AfterTaskArg> for AfterTask {
    fn from(a: AfterTaskArg) -> Self {
        match a {
            AfterTaskArg::Exit => AfterTask::Exit,
            AfterTaskArg::Sleep => AfterTask::Sleep,
        }
    }
}
