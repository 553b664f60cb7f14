//! Loading and validating `murmur.yaml`, the capsule manifest.
//!
//! YAML crate: `yaml-rust2` 0.13 (its event parser), not `saphyr`. Both give 1-based lines, but
//! saphyr's tree loader recurses once per nesting level and overflows the stack on a few thousand
//! `- - - …`, and saphyr does not re-export its parser, so bounding the depth would take a second
//! crate. yaml-rust2's parser is public and iterative: we build our own small tree from its events
//! (every event carries a `Marker`), which lets us cap nesting and alias expansion, keep every key's
//! line, and keep each scalar's source text, so `version: 1.10` stays "1.10" rather than 1.1.
//!
//! Every error names the dotted key and its line; every unknown key becomes a warning (never an
//! error) so that a manifest written for a newer runtime still starts.
//!
//! The modules, in the order a load meets them: `tree` (the YAML tree), `schema` (the known
//! keys and suggestions), `fields` (located, typed access), then one module per section
//! (`artifacts` with `hooks`, `session_loop` for the top-level `loop`, `inference`,
//! `capabilities` with `network`, `peers`, `mcp` for `mcp_servers`, `sections` for the
//! small ones). Errors are `crate::error::Error`, the one type a user sees.

mod artifacts;
mod authentication;
mod capabilities;
mod capsule;
mod env_file;
mod fields;
mod gateway;
mod harness;
mod hooks;
mod inference;
pub use harness::PROCESS_DRIVERS;
mod mcp;
mod network;
mod peers;
mod schema;
mod sections;
mod session_loop;
mod tree;

#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value as Json;

use crate::confine::{Class, Network as ShellNetwork};
use crate::error::Error;
use crate::limits::Limits;
use fields::{Cx, Field, Section};
use tree::{Node, Val, at, describe, is_null, parse_tree, show};

pub use authentication::Authentication;
pub use mcp::{McpServer, McpTransport};
/// One `capabilities.network.allow` entry, as the shared authority parser reads it.
pub use mur_authority::NetRule;
pub use peers::RemotePeer;

/// A parsed manifest plus the warnings (unknown keys) met on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    pub manifest: Manifest,
    pub warnings: Vec<Warning>,
}

/// An ignored key. `text` is the full line to print on stderr.
#[derive(Debug, Clone, PartialEq)]
pub struct Warning {
    pub line: usize,
    /// Dotted path, e.g. `lifecycle.queu_depth` or `artifacts[1].runtim`.
    pub key: String,
    /// The dotted known key it may stand for, e.g. `lifecycle.queue_depth`.
    pub guess: Option<String>,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// The manifest file, absolute.
    pub path: PathBuf,
    /// Its directory, absolute; relative paths in the manifest resolve against it.
    pub dir: PathBuf,
    pub name: String,
    pub version: String,
    /// What the capsule is for, as its agent card says.
    pub description: Option<String>,
    pub artifacts: Vec<Artifact>,
    /// The `runtime: loop` artifact the session runs: the one `loop: NAME` names, else the
    /// only loop artifact declared. `None`: the built-in loop.
    pub session_loop: Option<String>,
    pub inference: Inference,
    pub context: Context,
    pub lifecycle: Lifecycle,
    pub capabilities: Capabilities,
    pub network: Network,
    pub trace: TraceSettings,
    /// `exports.peer_tasks.accept`: whether other capsules may hand it tasks.
    pub accepts_peer_tasks: bool,
    /// `peers[]`: the remote A2A agents it may call.
    pub peers: Vec<RemotePeer>,
    /// `mcp_servers`: the MCP servers whose tools the model may call, in the order written.
    pub mcp_servers: Vec<McpServer>,
    /// `registry`: `host[:port]/namespace` where artifacts without `source:` are found,
    /// before the machine's own (`$MURMUR_HOME/config.yaml`).
    pub registry: Option<String>,
    /// `observability`: where spans go when the environment does not say.
    pub observability: crate::telemetry::settings::Observability,
    /// No `inference`: the upstream capsule component (absolute) the session runs in
    /// place of a model-driven loop, and `inference` stands in with no model.
    pub capsule: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Artifact {
    /// The name the session knows it by: the model's tool name and its folder under
    /// `tools/`. For a scoped name (`murmur/driver-anthropic`), the part after the `/`.
    pub name: String,
    /// The name as written, scope included: what `driver.artifact` and `loop` may name,
    /// what the registry and the lock know it by.
    pub full_name: String,
    pub version: Option<String>,
    pub runtime: Runtime,
    /// Absolute; a `.wasm` file, or for skills a directory holding `skill.md`. Empty for
    /// an artifact fetched by name until the registry (or the lock) resolves it.
    pub source: PathBuf,
    /// No `source:`: fetched from the registry by `full_name` and `version`.
    pub from_registry: bool,
    /// The `sha256:<hex>` the lock pins for it: staging refuses a file that hashes to
    /// another (the hash staging takes anyway, so checking costs nothing).
    pub pinned: Option<String>,
    /// A driver's `gateway`: the provider it reaches, and the key it presents.
    pub gateway: Option<Gateway>,
    /// Line of the entry in the manifest.
    pub line: usize,
    pub description: Option<String>,
    /// The entry's own `capabilities` map, unvalidated (the sandbox narrows with it).
    pub capabilities: Option<Json>,
    /// Hooks only: what a full async queue does.
    pub on_overflow: OnOverflow,
    /// Hooks only: where and how the hook runs and what it may commit.
    pub hook: Option<HookContract>,
}

/// A driver artifact's `gateway {endpoint, api_key, keyless}` (upstream Murmur's form):
/// where the driver sends inference, in place of `inference.endpoint` and `api_key`.
#[derive(Debug, Clone, PartialEq)]
pub struct Gateway {
    pub endpoint: String,
    pub api_key: Option<String>,
    /// The provider needs no key (a local model server).
    pub keyless: bool,
}

/// A hook's contract (binding, execution mode, commit policy), written on its
/// artifacts[] entry.
#[derive(Debug, Clone, PartialEq)]
pub struct HookContract {
    /// `None`: every event except `on-stage`.
    pub binding: Option<Binding>,
    pub mode: ExecutionMode,
    pub policy: CommitPolicy,
    /// `capabilities.filesystem.scope` of the entry: the hook's only folder, relative to
    /// the workdir. `None`: no filesystem.
    pub scope: Option<String>,
    /// `capabilities.limits.deadline_seconds` of the entry; 30 s when unset.
    pub deadline_seconds: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// Where a hook is called; `as_str` gives upstream's `on-...` name.
pub enum Binding {
    Stage,
    SessionStart,
    TaskStart,
    Inference,
    ToolCall,
    Shell,
    Compaction,
    TaskEnd,
    SessionEnd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutionMode {
    Blocking,
    Async,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitPolicy {
    None,
    WriteManifests,
    ReplaceContext,
    ReopenTask,
    SeedContext,
    Deny,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    Tool,
    Driver,
    Hook,
    Skill,
    /// A session loop component (world `session-loop`), run when the manifest picks it.
    Loop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnOverflow {
    Drop,
    Block,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Inference {
    pub transport: Transport,
    pub endpoint: Option<String>,
    /// "scripted" by default under the built-in scripted driver; required otherwise.
    pub model: String,
    /// After `${ENV}` substitution.
    pub api_key: Option<String>,
    pub driver: DriverRef,
    pub max_turns: u32,
    pub max_tokens: u32,
    /// `inference.max_session_tokens`: the tokens one session's inference may use.
    pub max_session_tokens: Option<u64>,
    /// From `system_prompt` (trimmed) or `system_prompt_file` (verbatim).
    pub system_prompt: Option<String>,
    /// `mur run --system-prompt` replaced the manifest's prompt (an empty one clears it).
    pub system_prompt_from_cli: bool,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    /// Ask the model server to stream its answer (default true): text reaches the wire
    /// as it is generated.
    pub stream: bool,
    pub retry: Retry,
    pub timeouts: Timeouts,
    pub compaction: Compaction,
    /// `inference.command`: the harness program under `transport: process`.
    pub command: Option<String>,
    /// `inference.home`: the harness's home (its login, its sessions), absolute.
    pub home: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Http,
    Process,
}

#[derive(Debug, Clone, PartialEq)]
pub enum DriverRef {
    /// `driver: scripted|openai|anthropic`; `script` (absolute) only for `scripted`.
    Builtin {
        name: String,
        script: Option<PathBuf>,
    },
    /// `driver: {artifact: NAME, config: {...}}`; `config` is `{}` when absent.
    Artifact { name: String, config: Json },
}

/// `inference.compaction`: passed to the compaction hook; nothing here reads the prompt file.
#[derive(Debug, Clone, PartialEq)]
pub struct Compaction {
    pub threshold: f64,
    pub model: Option<String>,
    pub system_prompt: Option<String>,
    /// Absolute, not read at load time.
    pub system_prompt_file: Option<PathBuf>,
    pub dump_summaries: bool,
}

impl Default for Compaction {
    fn default() -> Self {
        Compaction {
            threshold: 0.98,
            model: None,
            system_prompt: None,
            system_prompt_file: None,
            dump_summaries: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Context {
    pub max_tokens: Option<u32>,
    pub seed_budget: f64,
    pub seed_overflow_margin: f64,
}

impl Default for Context {
    fn default() -> Self {
        Context {
            max_tokens: None,
            seed_budget: 0.10,
            seed_overflow_margin: 0.10,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Lifecycle {
    pub task_acceptance: TaskAcceptance,
    pub after_task: AfterTask,
    pub queue_depth: usize,
    pub conversation: Conversation,
    pub max_task_reopens: u32,
    pub shell_grace_secs: u64,
    pub input_timeout_secs: Option<u64>,
    /// Tool calls a `call-tools` batch runs at once; 1 runs them one after another.
    pub parallel_tools: usize,
    /// How many tasks the A2A task store keeps (the most recent).
    pub task_history: usize,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            task_acceptance: TaskAcceptance::Single,
            after_task: AfterTask::Exit,
            queue_depth: 1,
            conversation: Conversation::Stateless,
            max_task_reopens: 1,
            shell_grace_secs: 10,
            input_timeout_secs: None,
            parallel_tools: 1,
            task_history: 100,
        }
    }
}

/// The queue's own enums (None | Single | Queue, Exit | Sleep), so the manifest's values, the
/// CLI overrides and the queue policy are one type with no conversions between them.
pub use crate::queue::{Acceptance as TaskAcceptance, AfterTask};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conversation {
    Stateless,
    Threaded,
}

impl Manifest {
    /// The artifacts[] entry of [`Manifest::session_loop`].
    pub fn loop_artifact(&self) -> Option<&Artifact> {
        let name = self.session_loop.as_deref()?;
        self.artifacts.iter().find(|a| a.name == name)
    }
}

impl Conversation {
    /// As `lifecycle.conversation` writes it, and as `connection-ack` announces it.
    pub fn as_str(self) -> &'static str {
        match self {
            Conversation::Stateless => "stateless",
            Conversation::Threaded => "threaded",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Capabilities {
    pub network_allow: Vec<NetRule>,
    pub filesystem_scope: Option<String>,
    pub shell_allow: Vec<String>,
    /// `capabilities.containment`; `None` when the manifest says nothing (then `scoped`).
    pub containment: Option<Class>,
    /// `capabilities.shell.network`.
    pub shell_network: ShellNetwork,
    /// `capabilities.filesystem.workdir_exec`.
    pub workdir_exec: bool,
    pub env_allow: Vec<String>,
    pub memory_bytes: u64,
    pub deadline_seconds: u64,
    /// The rest of `capabilities.limits`: sizes and call counts (see `limits.rs`).
    pub limits: Limits,
}

impl Default for Capabilities {
    fn default() -> Self {
        Capabilities {
            network_allow: Vec::new(),
            filesystem_scope: None,
            shell_allow: Vec::new(),
            containment: None,
            shell_network: ShellNetwork::None,
            workdir_exec: false,
            env_allow: Vec::new(),
            memory_bytes: 536_870_912,
            deadline_seconds: 600,
            limits: Limits::default(),
        }
    }
}

/// `inference.retry`: attempts in all (the first included) and the backoff bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    pub max_attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
        }
    }
}

/// `inference.timeouts`: `read` bounds the wait for the first byte and between bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    pub read: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(30),
            read: Duration::from_secs(300),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Network {
    pub internal_port: Option<u16>,
    /// `network.authentication`; `None` is a public door.
    pub authentication: Option<Authentication>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraceSettings {
    pub include_tool_output: bool,
}

type Result<T> = std::result::Result<T, Error>;

/// Reads and validates the manifest at `path`, resolving `${NAME}` from the process
/// environment, else from a `.env` beside the manifest.
pub fn load(path: &Path) -> Result<Loaded> {
    load_with(path, false, true)
}

/// [`load`], saying whether the command line replaces the prompt and whether a `.env`
/// beside the manifest is read (`mur run --no-env-file` reads none).
pub fn load_with(path: &Path, prompt_from_cli: bool, env_file: bool) -> Result<Loaded> {
    let file_vars = match (env_file, path.parent()) {
        (true, Some(dir)) => env_file::read(if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        })?,
        _ => Default::default(),
    };
    let env = |name: &str| {
        std::env::var(name)
            .ok()
            .or_else(|| file_vars.get(name).cloned())
    };
    load_file(path, &env, prompt_from_cli)
}

/// Like [`load`], with `${NAME}` resolved by `env` alone (the tests' environments).
#[cfg(test)]
pub fn load_with_env(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Loaded> {
    load_file(path, env, false)
}

fn load_file(
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    prompt_from_cli: bool,
) -> Result<Loaded> {
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let file = path.file_name().map_or_else(
        || "murmur.yaml".to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let bytes = std::fs::read(&path).map_err(|e| read_error(&path, &file, &e))?;
    load_bytes(path, file, &bytes, env, prompt_from_cli)
}

/// Everything after reading the file; `path` must be absolute.
fn load_bytes(
    path: PathBuf,
    file: String,
    bytes: &[u8],
    env: &dyn Fn(&str) -> Option<String>,
    prompt_from_cli: bool,
) -> Result<Loaded> {
    let src = decode(bytes, &file)?;
    let root = parse_tree(src, &file)?;
    let dir = path
        .parent()
        .map_or_else(|| PathBuf::from("/"), Path::to_path_buf);
    let mut cx = Cx {
        file,
        dir,
        env,
        warnings: Vec::new(),
        prompt_from_cli,
    };
    let built = build_manifest(&mut cx, root.as_ref(), path);
    let mut warnings = cx.warnings;
    warnings.sort_by_key(|w| w.line);
    // A misspelt key is only a warning, but the error it leads to names it.
    let manifest = built.map_err(|e| schema::name_unknown_keys(e, &warnings))?;
    Ok(Loaded { manifest, warnings })
}

fn decode<'b>(bytes: &'b [u8], file: &str) -> Result<&'b str> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let good = &bytes[..e.valid_up_to()];
        let line = 1 + good.iter().filter(|&&b| b == b'\n').count();
        Error::new("E-MAN-002", format!("{}: not valid UTF-8", at(file, line)))
            .hint(format!("save {file} as UTF-8 text"))
    })?;
    // The parser does not skip a byte-order mark, and editors on Windows add one.
    Ok(text.strip_prefix('\u{feff}').unwrap_or(text))
}

/// Parses a YAML (or JSON) document into JSON, for files the host reads on a guest's behalf
/// (the scripted driver's script). Errors read `line N: why`; an empty document is `null`.
pub fn yaml_to_json(text: &str) -> std::result::Result<Json, String> {
    // JSON first: YAML's tab rules reject some valid JSON layouts.
    if let Ok(value) = serde_json::from_str(text) {
        return Ok(value);
    }
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let Some(root) = parse_tree(text, "").map_err(|e| e.message)? else {
        return Ok(Json::Null);
    };
    let cx = Cx {
        file: String::new(),
        dir: PathBuf::new(),
        env: &|_| None,
        warnings: Vec::new(),
        prompt_from_cli: false,
    };
    let field = Field {
        path: String::new(),
        line: root.line,
        node: &root,
    };
    field.json(&cx).map_err(|e| e.message)
}

fn read_error(path: &Path, file: &str, e: &std::io::Error) -> Error {
    let shown = path.display();
    match e.kind() {
        std::io::ErrorKind::NotFound => {
            Error::new("E-IO-001", format!("{file} not found at {shown}"))
                .hint("pass --manifest PATH or run mur in the capsule's directory")
        }
        std::io::ErrorKind::IsADirectory => Error::new(
            "E-IO-003",
            format!("cannot read {shown}: it is a directory"),
        )
        .hint(format!(
            "pass the manifest file itself, e.g. {shown}/murmur.yaml"
        )),
        _ => Error::new("E-IO-003", format!("cannot read {shown}: {e}")),
    }
}

fn build_manifest(cx: &mut Cx, root: Option<&Node>, path: PathBuf) -> Result<Manifest> {
    let top = top_section(cx, root)?;
    let name = capsule_name(cx, &top)?;
    let (version, line) = top.req_str(cx, "version")?;
    if version.trim().is_empty() {
        return Err(cx.invalid(line, "version", "must not be empty"));
    }
    let description = top.opt_str(cx, "description")?.map(|(text, _)| text);
    let artifacts = artifacts::artifacts(cx, &top)?;
    let session_loop = session_loop::session_loop(cx, &top, &artifacts)?;
    capsule::runtime(cx, &top)?;
    let capsule = capsule::component(cx, &top, &artifacts)?;
    let inference = match capsule {
        Some(_) => capsule::no_inference(),
        None => inference::inference(cx, &top, &artifacts)?,
    };
    let capabilities = capabilities::capabilities(cx, &top)?;
    harness::no_credentials_to_harness(cx, &top, &inference, &capabilities)?;
    let remote_peers = peers::remote_peers(cx, &top)?;
    reach_peers(cx, &remote_peers, &capabilities)?;
    let mcp_servers = mcp::mcp_servers(cx, &top, &capabilities)?;
    Ok(Manifest {
        path,
        dir: cx.dir.clone(),
        name,
        version,
        description,
        artifacts,
        session_loop,
        inference,
        context: sections::context(cx, &top)?,
        lifecycle: sections::lifecycle(cx, &top)?,
        capabilities,
        network: sections::network(cx, &top)?,
        trace: sections::trace(cx, &top)?,
        accepts_peer_tasks: peers::accepts_peer_tasks(cx, &top)?,
        peers: remote_peers,
        mcp_servers,
        registry: registry(cx, &top)?,
        observability: sections::observability(cx, &top)?,
        capsule,
    })
}

/// The top-level `registry: host[:port]/namespace`.
fn registry(cx: &Cx, top: &Section) -> Result<Option<String>> {
    let Some((text, line)) = top.opt_str(cx, "registry")? else {
        return Ok(None);
    };
    crate::registry::config::checked_prefix(&text)
        .map(Some)
        .map_err(|why| {
            cx.invalid(line, "registry", why)
                .hint("write it as host[:port]/namespace, e.g. 127.0.0.1:5000/team")
        })
}

/// Every remote peer's card is reached through `capabilities.network.allow`, like any
/// other outbound call: one that is not stops the load, naming what to add.
fn reach_peers(cx: &Cx, peers: &[RemotePeer], caps: &Capabilities) -> Result<()> {
    for (i, peer) in peers.iter().enumerate() {
        if crate::outbound::allowed(&caps.network_allow, &peer.card) {
            continue;
        }
        let origin = crate::outbound::origin_of(&peer.card).unwrap_or_default();
        let why = format!(
            "{} is not reached by capabilities.network.allow",
            show(&peer.card)
        );
        return Err(cx
            .invalid(peer.line, &format!("peers[{i}].card"), why)
            .hint(format!("add \"{origin}\" to capabilities.network.allow")));
    }
    Ok(())
}

fn top_section<'n>(cx: &mut Cx, root: Option<&'n Node>) -> Result<Section<'n>> {
    let empty = || {
        let hint = "the file is empty; a manifest needs at least 'name' and 'version'";
        cx.missing(None, "name").hint(hint)
    };
    let root = root.filter(|node| !is_null(node)).ok_or_else(empty)?;
    let Val::Map(entries) = &root.val else {
        let msg = format!(
            "{}: expected a mapping of keys at the top level, found {}",
            cx.loc(Some(root.line)),
            describe(root)
        );
        return Err(Error::new("E-MAN-003", msg).hint("start with 'name: my-capsule'"));
    };
    for entry in entries {
        cx.warn_unknown("", "", entry);
    }
    Ok(Section {
        path: String::new(),
        schema: String::new(),
        line: None,
        entries,
    })
}

/// `[a-z0-9][a-z0-9-]*`, at most 100 characters (the reference's artifact rule, also used for
/// the capsule so both can appear in paths and tool names unquoted).
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    first_ok && rest_ok && name.len() <= 100
}

fn checked_name(cx: &Cx, name: String, line: usize, path: &str) -> Result<String> {
    if valid_name(&name) {
        return Ok(name);
    }
    let why = format!(
        "'{}' is not a valid name (lower-case letters, digits and '-', starting with a letter \
         or digit, at most 100 characters)",
        show(&name)
    );
    let fixed: String = name
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let fixed = fixed.trim_matches('-');
    let err = cx.invalid(line, path, why);
    Err(if valid_name(fixed) {
        err.hint(format!("e.g. '{fixed}'"))
    } else {
        err
    })
}

fn capsule_name(cx: &Cx, top: &Section) -> Result<String> {
    let (name, line) = top.req_str(cx, "name")?;
    checked_name(cx, name, line, "name")
}
