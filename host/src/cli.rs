//! The command line: `mur run`, `mur serve`, `mur ps`, `mur watch`, `mur stop`, `mur token`,
//! `mur warm`, `mur trace`, and the component kit's `mur wit`, `mur new` and `mur component
//! check`.

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
    /// Host many capsules in one process, each at /c/<id>/, managed through /admin/.
    #[command(long_about = SERVE_ABOUT)]
    Serve(ServeArgs),
    /// Watch a running capsule: print every frame its address streams (stream/watch).
    #[command(long_about = WATCH_ABOUT)]
    Watch(WatchArgs),
    /// Stop a running capsule cleanly and wait until it has exited.
    #[command(long_about = STOP_ABOUT)]
    Stop(StopArgs),
    /// List the capsules mur run is running on this machine, newest first.
    #[command(long_about = PS_ABOUT)]
    Ps(PsArgs),
    /// Print the door token of a running capsule (one that declares network.authentication).
    #[command(long_about = TOKEN_ABOUT)]
    Token(TokenArgs),
    /// Compile a capsule's components into the component cache before its first run.
    #[command(long_about = WARM_ABOUT)]
    Warm(WarmArgs),
    /// Print the WIT packages this mur serves, or write them to a folder.
    #[command(long_about = WIT_ABOUT)]
    Wit(WitArgs),
    /// Scaffold a component crate: a tool, a driver, a hook or a session loop.
    #[command(long_about = NEW_ABOUT)]
    New(NewArgs),
    /// Tools for component authors: check a component against its world.
    #[command(subcommand)]
    Component(ComponentCommand),
    /// Read what sessions did, from their trace.jsonl; never needs a running capsule.
    #[command(subcommand)]
    Trace(crate::inspect::TraceCommand),
    /// A capsule's MCP servers: start them confined and list the tools they offer.
    #[command(subcommand)]
    Mcp(McpCommand),
    /// Publish a component to an OCI registry: `mur push X.wasm host[:port]/ns/name:version`.
    #[command(long_about = PUSH_ABOUT)]
    Push(PushArgs),
    /// Fetch a component from an OCI registry into the component cache, checking its digest.
    Pull(PullArgs),
    /// List a repository's versions (its tags), newest first.
    Ls(LsArgs),
    /// Resolve a capsule's artifacts by name and version, compile them, and pin them in
    /// murmur.lock beside the manifest.
    #[command(long_about = INSTALL_ABOUT)]
    Install(InstallArgs),
}

const PUSH_ABOUT: &str = "Publish a component to an OCI registry in the CNCF Wasm layout (one \
application/wasm layer; a config naming its world's imports and exports), as wkg and spin \
registry do. The file must be a component of one of mur's worlds, or of upstream Murmur's. \
Credentials come from MUR_REGISTRY_USERNAME and MUR_REGISTRY_PASSWORD, else the Docker \
config.json (docker login). Plain HTTP is used only for a loopback registry or one that \
insecure_registries in $MURMUR_HOME/config.yaml names.";

const INSTALL_ABOUT: &str = "Resolve every artifacts[] entry without 'source:' through the \
registry (the manifest's 'registry:', else 'registry' in $MURMUR_HOME/config.yaml), fetch each \
component into the cache, compile it as mur warm does, and write murmur.lock beside the \
manifest: name, version, digest and registry of each. mur run then runs exactly those digests, \
offline. A lock that pins another digest for the same name and version is not overwritten: \
the install is refused, naming both.";

#[derive(clap::Args, Debug)]
pub struct PushArgs {
    /// The component to publish.
    pub file: PathBuf,
    /// Where: host[:port]/namespace/name:version.
    pub reference: String,
}

#[derive(clap::Args, Debug)]
pub struct PullArgs {
    /// What: host[:port]/namespace/name:version, or …@sha256:<digest>.
    pub reference: String,
}

#[derive(clap::Args, Debug)]
pub struct LsArgs {
    /// The repository: host[:port]/namespace/name (a :version is ignored).
    pub reference: String,
}

#[derive(clap::Args, Debug)]
pub struct InstallArgs {
    /// The capsule manifest whose artifacts are resolved.
    #[arg(long, default_value = "./murmur.yaml")]
    pub manifest: PathBuf,
}

// ---------------------------------------------------------------------------------
// `mur mcp ...`

#[derive(Subcommand, Debug)]
pub enum McpCommand {
    /// Start a capsule's MCP servers as its session would (confined, through its allow
    /// rules), print the tools each offers as the model sees them, and end them.
    Ls(McpLsArgs),
}

#[derive(clap::Args, Debug)]
pub struct McpLsArgs {
    /// The capsule manifest whose mcp_servers are listed.
    #[arg(long, default_value = "./murmur.yaml")]
    pub manifest: PathBuf,
    /// One JSON line per server: its tools (name, description, input_schema) and those
    /// not offered, with why.
    #[arg(long)]
    pub json: bool,
}

// ---------------------------------------------------------------------------------
// `mur component ...`

#[derive(Subcommand, Debug)]
pub enum ComponentCommand {
    /// Check a component: its world and version as the host links it, then its
    /// behaviour in scratch capsules on loopback, one line per scenario.
    #[command(long_about = CHECK_ABOUT)]
    Check(CheckArgs),
}

const CHECK_ABOUT: &str = "Check a component the way mur would run it.

First its world: which of mur's worlds it targets (tool, driver, hook or loop) and whether \
it links the way a capsule would link it, with the same errors. Then its behaviour: \
scenarios for that world, each run in a scratch capsule of this same mur on 127.0.0.1, \
each under a wall-clock limit.

Prints one line per scenario and then `N passed, N failed, N skipped`. Exits 0 when \
nothing failed, 1 when a scenario failed.";

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The component to check.
    #[arg(value_name = "X.wasm")]
    pub path: PathBuf,
    /// The world to check it against (default: the one its exports name).
    #[arg(long, value_enum)]
    pub world: Option<WorldArg>,
    /// Print one JSON document (world, scenarios, totals) and nothing else on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also write the scenarios as a JUnit XML file, for CI systems.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorldArg {
    Tool,
    Driver,
    Hook,
    Loop,
    ProcessDriver,
}

const WATCH_ABOUT: &str = "Watch a running capsule: attach to its address with stream/watch, \
replay what it still buffers, then print its frames as they happen. Never reconnects.

Ctrl-C ends the watch, not the capsule; use `mur stop` to end the capsule.

The capsule is named by its session (as mur ps lists it: @N with @1 the newest, a ses_ id, \
or a suffix of 4 or more characters; default @1), or by its address: the one mur run \
printed, or the address mur serve's admin API returned for a capsule it hosts (with \
--token when that capsule has one).";

const STOP_ABOUT: &str = "Stop a running capsule.

By session (as mur ps lists it: @N with @1 the newest, a ses_ id, or a suffix of 4 or more \
characters): ask the capsule to end its session (murmur/stop), which cancels its running \
and queued tasks, and give it 5 s to exit by itself; then SIGTERM its process, wait \
--timeout seconds, SIGKILL it, and wait 5 s more. A process whose start time is not the \
one its session recorded (its pid was reused) is never signalled. Prints `stopped:`, `capsule:`, `signal:`, one `canceled:` \
per task, and `residue:`.

By formation (frm_..., as mur ps lists it): ask every member of a formation mur run --roster \
runs to end its session, the entry member last, then end their one process as above, signalled \
once. A member other than the entry, named by its session, is stopped alone: asked, and \
watched until its address stops answering; its process runs the other members and is not \
signalled.

By address (HOST:PORT or http://...): ask the capsule to end its session, then wait up to \
--timeout seconds until its address refuses connections. The address is the one mur run \
printed, or the one mur serve's admin API returned for a capsule it hosts (with --token \
when that capsule has one); nothing is signalled.";

const PS_ABOUT: &str = "List the capsules mur run is running on this machine, newest first: \
SESSION, PID, URL, UPTIME, CAPSULE and WORKDIR, read from $MURMUR_HOME/running (MURMUR_HOME \
defaults to ~/.murmur). An entry whose process has exited, or whose pid now runs another \
process, is removed as it is found. The members of a formation (mur run --roster) are listed \
under it: its frm_ id (which mur stop takes), process, uptime and roster, then each member's \
name, SESSION, URL, CAPSULE and WORKDIR; --json adds them as `formations`. Capsules mur \
serve hosts are not listed: its admin API lists them.";

const TOKEN_ABOUT: &str = "Print the door token of a running capsule: the operator token \
mur run minted at launch for a capsule whose manifest declares network.authentication, read \
from its entry in $MURMUR_HOME/running (mode 0600). Standard output is the token and a newline, \
nothing else, so MURMUR_DOOR_TOKEN=$(mur token SESSION) holds exactly the token.

Callers present it as Authorization: Bearer <token>; mur watch and mur stop read it themselves \
when they name a session, and from MURMUR_DOOR_TOKEN (or --token) when they name an address. \
The web view asks for it. A capsule with a public door minted none.";

#[derive(clap::Args, Debug)]
pub struct TokenArgs {
    /// The session, as mur ps lists it: @N with @1 the newest, a ses_ id, or a suffix of 4 or
    /// more characters.
    #[arg(value_name = "SESSION", default_value = "@1")]
    pub session: String,
}

const SERVE_ABOUT: &str = "Host many capsules in one process, behind one address.

Each capsule is served at /c/<id>/ exactly as mur run serves one at /. The admin API under \
/admin/ (bearer token in DATA/admin-token, made on first start) creates, lists, stops and \
deletes them, and formations of them (POST /admin/formations from a roster.yaml: one capsule \
per member, calling each other without a socket); GET /healthz and GET /metrics (Prometheus \
text) are for probes and scrapers.

The registry lives in --data: after a restart or a crash every capsule comes back at the \
same address, and every formation rewired whole (one missing a member's entry starts none of \
its members, and says why). SIGTERM drains: new requests are refused, running tasks get \
--drain-secs to finish, then the rest are canceled.";

const WIT_ABOUT: &str = "Print the WIT packages this mur serves, with their deps/ and \
versions.lock: each file preceded by a `// wit/<path>` line. With --out DIR, write them as a \
tree under DIR (DIR/tool/tool.wit, DIR/driver/deps/http.wit, ...), the folder a component's \
`wit_bindgen::generate!` reads. A file already there that differs is refused unless --force.";

const NEW_ABOUT: &str = "Scaffold a component crate outside any workspace: Cargo.toml with \
the pinned wit-bindgen, the WIT of `mur wit`, a working src/lib.rs, a sample murmur.yaml \
that runs offline, and a README. Then:

  cargo build --release --target wasm32-wasip2
  mur component check target/wasm32-wasip2/release/NAME.wasm

(NAME with '-' as '_'). A hook is scaffolded for one binding (--binding, default on-tool-call), \
showing the verdict that binding may commit.";

/// The target help both client commands share.
const TARGET_HELP: &str = "A session as mur ps lists it (@N with @1 the newest, a ses_ id, or a \
suffix of 4 or more characters), or the capsule's address as mur run prints it (HOST:PORT, \
localhost:PORT or http://HOST:PORT) or as mur serve's admin API returns it \
(http://HOST:PORT/c/<id>/)";

/// The token help both client commands share.
const TOKEN_HELP: &str = "The capsule's token, sent as Authorization: Bearer (default: a named \
session's own, from its registry entry; for an address, MURMUR_DOOR_TOKEN). mur token SESSION \
prints a mur run capsule's; mur serve returns a hosted capsule's at creation";

#[derive(clap::Args, Debug)]
pub struct WatchArgs {
    #[arg(value_name = "SESSION|ADDRESS", value_parser = parse_target, help = TARGET_HELP, default_value = "@1")]
    pub target: Target,
    #[arg(long, value_name = "TOKEN", help = TOKEN_HELP)]
    pub token: Option<String>,
}

#[derive(clap::Args, Debug)]
pub struct StopArgs {
    #[arg(value_name = "SESSION|ADDRESS", value_parser = parse_target, help = TARGET_HELP)]
    pub target: Target,
    #[arg(long, value_name = "TOKEN", help = TOKEN_HELP)]
    pub token: Option<String>,
    /// By session: seconds between SIGTERM and SIGKILL (0: SIGKILL at once). By address: seconds
    /// to wait for the capsule to exit after it accepted the stop; 0 returns at once.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub timeout: u64,
}

#[derive(clap::Args, Debug)]
pub struct PsArgs {
    /// Print one JSON document (the sessions, newest first, and, when any runs, the
    /// formations with their members) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// What `mur watch` and `mur stop` name: a running session, or a capsule's address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Session(String),
    Address(Address),
}

/// `@N`, a `ses_` id or a suffix of one (session ids are hex) names a session; anything
/// else is an address, so `localhost` alone is the usage error it always was.
fn parse_target(typed: &str) -> Result<Target, String> {
    let t = typed.trim();
    let session = t.starts_with('@')
        || t.starts_with("ses_")
        || t.starts_with("frm_")
        || (!t.is_empty() && t.bytes().all(|b| b.is_ascii_hexdigit()));
    if session && !t.contains([':', '/']) {
        return Ok(Target::Session(t.to_string()));
    }
    parse_address(typed).map(Target::Address)
}

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// The port to listen on; 0 takes any free port.
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// The URL clients reach this server at, which every capsule's address starts
    /// with (default: http://BIND:PORT as bound). Behind a load balancer or in a
    /// StatefulSet: the replica's own name, such as http://mur-0.mur:8080.
    #[arg(long, value_name = "URL", value_parser = parse_public_url)]
    pub public_url: Option<String>,
    /// Where the registry, the admin token and every capsule's workdir and records
    /// live (default: $MURMUR_HOME/serve, MURMUR_HOME defaulting to ~/.murmur).
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Capsules the server hosts at most; creating one more is refused. The default
    /// fits a stock kernel's vm.max_map_count (65,530) with room to spare.
    #[arg(long, value_name = "N", default_value_t = 4000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_capsules: u64,
    /// Connections open at once at most; one more is refused with 503.
    #[arg(long, value_name = "N", default_value_t = 10000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: u64,
    /// Connections one capsule may hold open at once, when its creation set no
    /// `limits.connections`: no tenant can take every connection the server has.
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..))]
    pub capsule_connections: u64,
    /// Linear memory, in MiB, all of one capsule's instances may hold together, when
    /// its creation set no `limits.memory_bytes`.
    #[arg(long, value_name = "MIB", default_value_t = 2048, value_parser = clap::value_parser!(u64).range(1..))]
    pub capsule_memory_mib: u64,
    /// The CPU share, in cores, of a capsule whose creation set no `limits.cpu`: what
    /// its guests are sure of when others wait for a processor, and its weight among
    /// guests. A capsule alone on idle processors may use them all.
    #[arg(long, value_name = "CORES", default_value_t = 0.1, value_parser = cpu_share)]
    pub cpu_share: f64,
    /// Sync each accepted task to disk before it is acknowledged, so a queued task
    /// outlives a power cut as well as a crash of mur (it is always written down first,
    /// which is what a crash needs); each acceptance then waits for a disk flush.
    #[arg(long)]
    pub sync_queue: bool,
    /// Export every capsule's spans over OTLP/HTTP to this collector (its base URL, e.g.
    /// http://127.0.0.1:4318) when OTEL_EXPORTER_OTLP_ENDPOINT does not name one.
    /// Capsules' own `observability.otel_endpoint` is not used under serve.
    #[arg(long, value_name = "URL")]
    pub otel_endpoint: Option<String>,
    /// Put each capsule's id on its spans (`mur.capsule.id`); without it no span says
    /// which tenant it came from beyond the capsule's name.
    #[arg(long)]
    pub otel_capsule_ids: bool,
    /// The tokens a capsule's inference may use per UTC day when its creation set no
    /// `limits.tokens_per_day`; without it such a capsule has no daily ceiling.
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u64).range(1..))]
    pub capsule_tokens_per_day: Option<u64>,
    /// On SIGTERM, seconds running tasks get to finish before they are canceled.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub drain_secs: u64,
    /// Take instances from a pool of this many component instances (a parked loop, a
    /// running driver or tool each hold one) instead of allocating each on demand;
    /// 0 allocates on demand.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub pool_slots: u32,
    /// With --pool-slots: the largest linear memory one pooled instance may have, in
    /// MiB. A capsule whose capabilities.limits.memory_bytes is larger is refused.
    #[arg(long, value_name = "MIB", default_value_t = 512, value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub pool_memory_mib: u64,
    /// Print one JSON line at start and nothing else on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `http://HOST[:PORT]` with nothing after it (a trailing `/` is dropped).
fn parse_public_url(typed: &str) -> Result<String, String> {
    let url = typed.trim().trim_end_matches('/');
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or("expected http://HOST[:PORT] or https://HOST[:PORT]")?;
    if rest.is_empty() || rest.contains(['/', '?', '#', ' ', '@']) {
        return Err("expected http://HOST[:PORT], with no path, query or user".into());
    }
    Ok(url.to_string())
}

#[derive(clap::Args, Debug, Clone)]
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
    /// The address to listen on. One other than loopback needs network.authentication in
    /// the manifest, or --open-door.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// Open a door without authentication on a --bind address other than loopback: anyone
    /// who can reach it may send tasks, watch and stop the session.
    #[arg(long)]
    pub open_door: bool,
    /// The port to listen on; 0 takes any free port (default: network.internal_port, else any).
    #[arg(long)]
    pub port: Option<u16>,
    /// Print one JSON line at launch and nothing else on stdout; wins over --verbose.
    #[arg(long)]
    pub json: bool,
    /// Also print the workdir, the manifest, the driver and the session loop at launch.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// Replaces the manifest's system prompt for this run (trimmed; empty clears it).
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
    pub system_prompt: Option<String>,
    /// Do not read a `.env` beside the manifest for its ${NAME} values.
    #[arg(long)]
    pub no_env_file: bool,
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
    /// Start every member of a formation (a directory holding roster.yaml, or the file)
    /// in this process and give the task to its entry member; --manifest is not read.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["manifest", "loop_path", "resume", "explain_scope"])]
    pub roster: Option<PathBuf>,
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

const WARM_ABOUT: &str = "Compile every component a capsule would load (its session loop, \
driver, tools and hooks) into the component cache, so that its first mur run does not \
spend its start compiling them. The built-in loop and drivers need no warming: mur \
carries them compiled. The cache is MUR_CACHE_DIR, else $XDG_CACHE_HOME/mur, else \
~/.cache/mur.

Prints one line per component: compiled into mur itself, already in the cache, or \
compiled now (with how long it took).";

#[derive(clap::Args, Debug)]
pub struct WarmArgs {
    /// The capsule manifest whose components are compiled.
    #[arg(long, default_value = "./murmur.yaml")]
    pub manifest: PathBuf,
    /// A session loop component to compile instead of the manifest's (as mur run --loop).
    #[arg(long = "loop", value_name = "PATH.wasm")]
    pub loop_path: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct WitArgs {
    /// Write the files under this folder (created when missing) instead of printing them.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// With --out: overwrite files that differ.
    #[arg(long, requires = "out")]
    pub force: bool,
}

#[derive(clap::Args, Debug)]
pub struct NewArgs {
    /// What to scaffold.
    #[arg(value_enum)]
    pub kind: KindArg,
    /// The component's name: lower-case letters, digits and '-', starting with a letter.
    pub name: String,
    /// For a hook: the binding it is scaffolded for (on-stage, on-session-start,
    /// on-task-start, on-inference, on-tool-call, on-shell, on-compaction, on-task-end,
    /// on-session-end). Default on-tool-call.
    #[arg(long, value_name = "BINDING")]
    pub binding: Option<String>,
    /// The folder to create (default ./NAME); it must not exist or be empty.
    #[arg(long, value_name = "PATH")]
    pub dir: Option<PathBuf>,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum KindArg {
    Tool,
    Driver,
    Hook,
    Loop,
}

/// `--cpu-share`: a number of cores from a thousandth to 1024.
fn cpu_share(text: &str) -> Result<f64, String> {
    let cores: f64 = text
        .parse()
        .map_err(|_| format!("'{text}' is not a number of cores, such as 0.25"))?;
    if (0.001..=1024.0).contains(&cores) {
        Ok(cores)
    } else {
        Err(format!("{cores} is not a share: give 0.001 to 1024 cores"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_is_a_session_when_it_can_name_one_else_an_address() {
        for session in ["@1", "@12", "ses_019ed2af", "a3f9", "A3F9c0"] {
            assert_eq!(
                parse_target(session),
                Ok(Target::Session(session.into())),
                "{session}"
            );
        }
        for address in [
            "localhost:52222",
            "http://127.0.0.1:8080/c/cap_1/",
            "[::1]:9",
        ] {
            assert!(
                matches!(parse_target(address), Ok(Target::Address(_))),
                "{address}"
            );
        }
        assert!(parse_target("localhost").is_err());
        assert!(parse_target("").is_err());
    }
}
