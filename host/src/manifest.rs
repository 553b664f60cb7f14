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

use std::collections::HashMap;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde_json::Value as Json;
use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::scanner::{Marker, ScanError, TScalarStyle};

use crate::confine::{Class, Network as ShellNetwork};
use crate::limits::Limits;

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
    pub text: String,
}

/// A manifest that cannot be used. `Display` renders the `error[…]` line and the hint line.
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestError {
    pub code: &'static str,
    pub message: String,
    pub hint: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// The manifest file, absolute.
    pub path: PathBuf,
    /// Its directory, absolute; relative paths in the manifest resolve against it.
    pub dir: PathBuf,
    pub name: String,
    pub version: String,
    pub artifacts: Vec<Artifact>,
    pub inference: Inference,
    pub context: Context,
    pub lifecycle: Lifecycle,
    pub capabilities: Capabilities,
    pub network: Network,
    pub trace: Trace,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Artifact {
    pub name: String,
    pub version: Option<String>,
    pub runtime: Runtime,
    /// Absolute; a `.wasm` file, or for skills a directory holding `skill.md`.
    pub source: PathBuf,
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

const BINDINGS: &[(&str, Binding)] = &[
    ("on-stage", Binding::Stage),
    ("on-session-start", Binding::SessionStart),
    ("on-task-start", Binding::TaskStart),
    ("on-inference", Binding::Inference),
    ("on-tool-call", Binding::ToolCall),
    ("on-shell", Binding::Shell),
    ("on-compaction", Binding::Compaction),
    ("on-task-end", Binding::TaskEnd),
    ("on-session-end", Binding::SessionEnd),
];

const POLICIES: &[(&str, CommitPolicy)] = &[
    ("none", CommitPolicy::None),
    ("write-manifests", CommitPolicy::WriteManifests),
    ("replace-context", CommitPolicy::ReplaceContext),
    ("reopen-task", CommitPolicy::ReopenTask),
    ("seed-context", CommitPolicy::SeedContext),
    ("deny", CommitPolicy::Deny),
];

impl Binding {
    pub fn as_str(self) -> &'static str {
        BINDINGS
            .iter()
            .find(|(_, b)| *b == self)
            .map_or("", |(name, _)| name)
    }
}

impl CommitPolicy {
    pub fn as_str(self) -> &'static str {
        POLICIES
            .iter()
            .find(|(_, p)| *p == self)
            .map_or("", |(name, _)| name)
    }

    /// The binding a policy commits at; `None` for `none`.
    fn binding(self) -> Option<Binding> {
        match self {
            CommitPolicy::None => None,
            CommitPolicy::WriteManifests => Some(Binding::Stage),
            CommitPolicy::ReplaceContext => Some(Binding::Compaction),
            CommitPolicy::ReopenTask => Some(Binding::TaskEnd),
            CommitPolicy::SeedContext => Some(Binding::TaskStart),
            CommitPolicy::Deny => Some(Binding::ToolCall),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    Tool,
    Driver,
    Hook,
    Skill,
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
    /// From `system_prompt` (trimmed) or `system_prompt_file` (verbatim).
    pub system_prompt: Option<String>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    /// Ask the model server to stream its answer (default true): text reaches the wire
    /// as it is generated.
    pub stream: bool,
    pub retry: Retry,
    pub timeouts: Timeouts,
    pub compaction: Compaction,
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

/// One `capabilities.network.allow` entry. `host` is lower-case; an IPv6 host keeps its
/// brackets (`[::1]`), as in a URL, so `host:port` stays unambiguous.
#[derive(Debug, Clone, PartialEq)]
pub struct NetRule {
    pub scheme: Option<String>,
    pub host: String,
    pub port: Option<u16>,
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
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    pub include_tool_output: bool,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error[{}]: {}", self.code, self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ManifestError {}

impl ManifestError {
    fn new(code: &'static str, message: String) -> Self {
        ManifestError {
            code,
            message,
            hint: None,
        }
    }

    fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

type Result<T> = std::result::Result<T, ManifestError>;

/// A string value and the line of its key.
type Located = (String, usize);

/// Reads and validates the manifest at `path`, resolving `${NAME}` from the process environment.
pub fn load(path: &Path) -> Result<Loaded> {
    load_with_env(path, &|name| std::env::var(name).ok())
}

/// Like [`load`], with `${NAME}` resolved by `env` — so a caller can layer a workspace `.env`
/// under the process environment without mutating it (`set_var` is unsafe with threads).
pub fn load_with_env(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Loaded> {
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let file = path.file_name().map_or_else(
        || "murmur.yaml".to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let bytes = std::fs::read(&path).map_err(|e| read_error(&path, &file, &e))?;
    load_bytes(path, file, &bytes, env)
}

/// Everything after reading the file; `path` must be absolute.
fn load_bytes(
    path: PathBuf,
    file: String,
    bytes: &[u8],
    env: &dyn Fn(&str) -> Option<String>,
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
    };
    let manifest = build_manifest(&mut cx, root.as_ref(), path)?;
    let mut warnings = cx.warnings;
    warnings.sort_by_key(|w| w.line);
    Ok(Loaded { manifest, warnings })
}

fn decode<'b>(bytes: &'b [u8], file: &str) -> Result<&'b str> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let good = &bytes[..e.valid_up_to()];
        let line = 1 + good.iter().filter(|&&b| b == b'\n').count();
        ManifestError::new("E-MAN-002", format!("{}: not valid UTF-8", at(file, line)))
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
    };
    let field = Field {
        path: String::new(),
        line: root.line,
        node: &root,
    };
    field.json(&cx).map_err(|e| e.message)
}

fn read_error(path: &Path, file: &str, e: &std::io::Error) -> ManifestError {
    let shown = path.display();
    match e.kind() {
        std::io::ErrorKind::NotFound => {
            ManifestError::new("E-IO-001", format!("{file} not found at {shown}"))
                .hint("pass --manifest PATH or run mur in the capsule's directory")
        }
        std::io::ErrorKind::IsADirectory => ManifestError::new(
            "E-IO-003",
            format!("cannot read {shown}: it is a directory"),
        )
        .hint(format!(
            "pass the manifest file itself, e.g. {shown}/murmur.yaml"
        )),
        _ => ManifestError::new("E-IO-003", format!("cannot read {shown}: {e}")),
    }
}

// ---------------------------------------------------------------------------------------------
// The marked tree.

/// Deeper than any real manifest (plus a nested driver config); low enough that the recursive
/// walks below cannot exhaust even a 2 MiB test-thread stack.
const MAX_DEPTH: usize = 64;
/// Caps nodes copied by aliases, so `&a [*b, *b, …]` chains cannot explode memory.
const MAX_ALIAS_NODES: usize = 10_000;

#[derive(Debug, Clone)]
struct Node {
    line: usize,
    val: Val,
}

#[derive(Debug, Clone)]
enum Val {
    /// `plain` = unquoted and untagged, so YAML's core schema (numbers, booleans, null) applies.
    Scalar {
        text: String,
        plain: bool,
    },
    Seq(Vec<Node>),
    Map(Vec<Entry>),
}

#[derive(Debug, Clone)]
struct Entry {
    key: String,
    line: usize,
    node: Node,
}

enum Frame {
    Seq {
        line: usize,
        anchor: usize,
        items: Vec<Node>,
    },
    Map {
        line: usize,
        anchor: usize,
        entries: Vec<Entry>,
        seen: HashMap<String, usize>,
        key: Option<Located>,
    },
}

struct Builder<'f> {
    file: &'f str,
    stack: Vec<Frame>,
    anchors: HashMap<usize, (Node, usize)>,
    alias_budget: usize,
    docs: Vec<Node>,
}

fn parse_tree(src: &str, file: &str) -> Result<Option<Node>> {
    let mut parser = Parser::new_from_str(src);
    let mut builder = Builder {
        file,
        stack: Vec::new(),
        anchors: HashMap::new(),
        alias_budget: MAX_ALIAS_NODES,
        docs: Vec::new(),
    };
    loop {
        let (event, mark) = parser.next_token().map_err(|e| scan_error(src, file, &e))?;
        if event == Event::StreamEnd {
            break;
        }
        builder.event(event, mark)?;
    }
    builder.finish()
}

/// `murmur.yaml:12`, or `line 12` when there is no file name (see [`yaml_to_json`]).
fn at(file: &str, line: usize) -> String {
    if file.is_empty() {
        format!("line {line}")
    } else {
        format!("{file}:{line}")
    }
}

fn scan_error(src: &str, file: &str, e: &ScanError) -> ManifestError {
    let mut line = e.marker().line();
    let hint = if e.info().contains("tab") {
        // The parser marks where the scalar began, which can be lines above the tab itself.
        let mut tab = src.lines().enumerate().skip(line.saturating_sub(1));
        let tab = tab.find(|(_, text)| text.contains('\t'));
        line = tab.map_or(line, |(i, _)| i + 1);
        "indent with spaces: YAML does not allow tabs in indentation".to_string()
    } else {
        format!("check the indentation and quoting on line {line} and the line before it")
    };
    ManifestError::new("E-MAN-002", format!("{}: {}", at(file, line), e.info())).hint(hint)
}

impl Builder<'_> {
    fn event(&mut self, event: Event, mark: Marker) -> Result<()> {
        let line = mark.line();
        match event {
            Event::Scalar(text, style, anchor, tag) => {
                let tagged = tag.is_some_and(|t| t.suffix == "str");
                let plain = style == TScalarStyle::Plain && !tagged;
                let val = Val::Scalar { text, plain };
                self.complete(Node { line, val }, anchor)
            }
            Event::SequenceStart(anchor, _) => self.open(
                Frame::Seq {
                    line,
                    anchor,
                    items: Vec::new(),
                },
                line,
            ),
            Event::MappingStart(anchor, _) => self.open(
                Frame::Map {
                    line,
                    anchor,
                    entries: Vec::new(),
                    seen: HashMap::new(),
                    key: None,
                },
                line,
            ),
            Event::SequenceEnd | Event::MappingEnd => self.close(),
            Event::Alias(id) => self.alias(id, line),
            _ => Ok(()),
        }
    }

    fn open(&mut self, frame: Frame, line: usize) -> Result<()> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(self.too_deep(line));
        }
        self.stack.push(frame);
        Ok(())
    }

    fn too_deep(&self, line: usize) -> ManifestError {
        let msg = format!(
            "{}: nested deeper than {MAX_DEPTH} levels",
            at(self.file, line)
        );
        ManifestError::new("E-MAN-002", msg).hint("a manifest nests only a few levels; flatten it")
    }

    fn close(&mut self) -> Result<()> {
        let Some(frame) = self.stack.pop() else {
            return Ok(());
        };
        let (node, anchor) = match frame {
            Frame::Seq {
                line,
                anchor,
                items,
            } => (
                Node {
                    line,
                    val: Val::Seq(items),
                },
                anchor,
            ),
            Frame::Map {
                line,
                anchor,
                entries,
                ..
            } => (
                Node {
                    line,
                    val: Val::Map(entries),
                },
                anchor,
            ),
        };
        self.complete(node, anchor)
    }

    fn alias(&mut self, id: usize, line: usize) -> Result<()> {
        let file = self.file;
        let Some((node, height)) = self.anchors.get(&id) else {
            let msg = format!("{}: alias to an unknown anchor", at(file, line));
            return Err(ManifestError::new("E-MAN-002", msg));
        };
        if self.stack.len() + height > MAX_DEPTH {
            return Err(self.too_deep(line));
        }
        let size = count_nodes(node);
        if size > self.alias_budget {
            let msg = format!(
                "{}: aliases expand to more than {MAX_ALIAS_NODES} nodes",
                at(file, line)
            );
            return Err(ManifestError::new("E-MAN-002", msg).hint("write the values out instead"));
        }
        self.alias_budget -= size;
        let mut copy = node.clone();
        copy.line = line;
        self.complete(copy, 0)
    }

    fn complete(&mut self, node: Node, anchor: usize) -> Result<()> {
        if anchor > 0 {
            self.anchors.insert(anchor, (node.clone(), height(&node)));
        }
        let path = self.path();
        match self.stack.last_mut() {
            None => self.docs.push(node),
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map {
                entries, seen, key, ..
            }) => match key.take() {
                None => *key = Some(map_key(self.file, node)?),
                Some((k, line)) => {
                    if let Some(first) = seen.insert(k.clone(), line) {
                        return Err(duplicate_key(self.file, line, &path, &k, first));
                    }
                    entries.push(Entry { key: k, line, node });
                }
            },
        }
        Ok(())
    }

    /// Dotted path of the innermost open mapping, for messages raised before any schema walk.
    fn path(&self) -> String {
        let mut path = String::new();
        let parents = self.stack.len().saturating_sub(1);
        for frame in &self.stack[..parents] {
            match frame {
                Frame::Seq { items, .. } => path.push_str(&format!("[{}]", items.len())),
                Frame::Map { key: Some(k), .. } => path = join(&path, &k.0),
                Frame::Map { .. } => {}
            }
        }
        path
    }

    fn finish(self) -> Result<Option<Node>> {
        let mut docs = self.docs.into_iter();
        let first = docs.next();
        if let Some(second) = docs.next() {
            let msg = format!(
                "{}: more than one YAML document",
                at(self.file, second.line)
            );
            let hint = "a manifest is a single document: remove the extra '---' section";
            return Err(ManifestError::new("E-MAN-002", msg).hint(hint));
        }
        Ok(first)
    }
}

fn map_key(file: &str, node: Node) -> Result<(String, usize)> {
    match node.val {
        Val::Scalar { text, .. } => Ok((text, node.line)),
        _ => {
            let msg = format!(
                "{}: a mapping key must be a plain string",
                at(file, node.line)
            );
            Err(ManifestError::new("E-MAN-002", msg))
        }
    }
}

fn duplicate_key(file: &str, line: usize, parent: &str, key: &str, first: usize) -> ManifestError {
    let key = show(&join(parent, key));
    ManifestError::new(
        "E-MAN-002",
        format!("{}: duplicate key '{key}'", at(file, line)),
    )
    .hint(format!("it is already set at line {first}; keep one"))
}

fn height(node: &Node) -> usize {
    match &node.val {
        Val::Scalar { .. } => 0,
        Val::Seq(items) => 1 + items.iter().map(height).max().unwrap_or(0),
        Val::Map(entries) => 1 + entries.iter().map(|e| height(&e.node)).max().unwrap_or(0),
    }
}

fn count_nodes(node: &Node) -> usize {
    match &node.val {
        Val::Scalar { .. } => 1,
        Val::Seq(items) => 1 + items.iter().map(count_nodes).sum::<usize>(),
        Val::Map(entries) => {
            1 + entries
                .iter()
                .map(|e| 1 + count_nodes(&e.node))
                .sum::<usize>()
        }
    }
}

fn is_null(node: &Node) -> bool {
    matches!(&node.val, Val::Scalar { text, plain: true } if matches!(text.as_str(), "" | "~" | "null" | "Null" | "NULL"))
}

/// YAML 1.2 core-schema integer; `None` if `text` is not one (or does not fit an i128).
fn yaml_int(text: &str) -> Option<i128> {
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (digits, radix) = if let Some(hex) = body.strip_prefix("0x") {
        (hex, 16)
    } else if let Some(oct) = body.strip_prefix("0o") {
        (oct, 8)
    } else {
        (body, 10)
    };
    // from_str_radix would also take a sign after the prefix ("0x-5").
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let value = i128::from_str_radix(digits, radix).ok()?;
    Some(if negative { -value } else { value })
}

/// YAML 1.2 core-schema float. Rust's own parser would also take "nan" and "infinity".
fn yaml_float(text: &str) -> Option<f64> {
    match text {
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => return Some(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => return Some(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Some(f64::NAN),
        _ => {}
    }
    let body = text.strip_prefix(['+', '-']).unwrap_or(text);
    let starts_ok = body.starts_with(|c: char| c.is_ascii_digit() || c == '.');
    let chars_ok = body
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'));
    if starts_ok && chars_ok {
        text.parse().ok()
    } else {
        None
    }
}

fn describe(node: &Node) -> String {
    match &node.val {
        _ if is_null(node) => "an empty value".to_string(),
        Val::Scalar { text, .. } => format!("'{}'", show(text)),
        Val::Seq(_) => "a list".to_string(),
        Val::Map(_) => "a mapping".to_string(),
    }
}

/// Echoes user text on one line and at a bounded length.
fn show(text: &str) -> String {
    const MAX: usize = 80;
    let mut out: String = text
        .chars()
        .take(MAX)
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect();
    if text.chars().nth(MAX).is_some() {
        out.push('…');
    }
    out
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

// ---------------------------------------------------------------------------------------------
// Schema: known keys per section, for the unknown-key warnings.

#[rustfmt::skip]
const SCHEMA: &[(&str, &[&str])] = &[
    ("", &["name", "version", "artifacts", "inference", "context", "lifecycle", "capabilities",
           "network", "trace"]),
    ("artifacts[]", &["name", "version", "runtime", "source", "local_source", "capabilities",
                      "description", "on_overflow", "binding", "execution_mode",
                      "commit_policy"]),
    ("inference", &["transport", "endpoint", "model", "api_key", "driver", "script", "max_turns",
                    "max_tokens", "system_prompt", "system_prompt_file", "temperature", "top_p",
                    "stream", "compaction", "retry", "timeouts"]),
    ("inference.driver", &["artifact", "config"]),
    ("inference.compaction", &["threshold", "model", "system_prompt", "system_prompt_file",
                               "dump_summaries"]),
    ("inference.retry", &["max_attempts", "initial_backoff_ms", "max_backoff_ms"]),
    ("inference.timeouts", &["connect_secs", "read_secs"]),
    ("context", &["max_tokens", "seed_budget", "seed_overflow_margin"]),
    ("lifecycle", &["task_acceptance", "after_task", "queue_depth", "conversation",
                    "max_task_reopens", "shell_grace_secs", "input_timeout_secs"]),
    ("capabilities", &["network", "filesystem", "shell", "env", "limits", "containment"]),
    ("capabilities.network", &["allow"]),
    ("capabilities.filesystem", &["scope", "workdir_exec"]),
    ("capabilities.shell", &["allow", "strip_env", "baseline_env", "network"]),
    ("capabilities.env", &["allow"]),
    ("capabilities.limits", &["memory_bytes", "deadline_seconds", "max_chunk_bytes",
                              "max_tool_result_bytes", "max_driver_reply_bytes",
                              "max_tool_calls_per_reply", "max_tool_calls_per_task",
                              "max_trace_bytes", "workdir_bytes", "shell_cpu_seconds",
                              "shell_open_files", "shell_processes", "shell_concurrency"]),
    ("network", &["internal_port"]),
    ("trace", &["include_tool_output"]),
];

fn known_keys(schema: &str) -> Option<&'static [&'static str]> {
    SCHEMA
        .iter()
        .find(|(s, _)| *s == schema)
        .map(|(_, keys)| *keys)
}

/// A known key close to `key`: same up to case or `-`/`_`, or within edit distance 2.
fn suggest<'k>(key: &str, known: &[&'k str]) -> Option<&'k str> {
    let norm = |s: &str| s.to_lowercase().replace('-', "_");
    let key_len = key.chars().count();
    known
        .iter()
        .filter_map(|&k| {
            if norm(k) == norm(key) {
                return Some((0, k));
            }
            if k.chars().count().abs_diff(key_len) > 2 {
                return None;
            }
            let d = edit_distance(key, k);
            (d <= 2).then_some((d, k))
        })
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// A key sitting in the wrong section, e.g. `inference.max_task_reopens` (a v0.2.0 docs
/// spelling): the one other section that knows it, if exactly one does.
fn misplaced(key: &str, schema: &str) -> Option<String> {
    let mut homes = SCHEMA
        .iter()
        .filter(|(s, keys)| *s != schema && *s != "artifacts[]" && keys.contains(&key));
    let (home, _) = homes.next()?;
    homes.next().is_none().then(|| join(home, key))
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

// ---------------------------------------------------------------------------------------------
// Typed access with located errors.

struct Cx<'a> {
    file: String,
    dir: PathBuf,
    env: &'a dyn Fn(&str) -> Option<String>,
    warnings: Vec<Warning>,
}

impl Cx<'_> {
    fn loc(&self, line: Option<usize>) -> String {
        match line {
            Some(line) => at(&self.file, line),
            None => self.file.clone(),
        }
    }

    fn invalid(&self, line: usize, path: &str, why: impl fmt::Display) -> ManifestError {
        self.invalid_as("E-MAN-003", line, path, why)
    }

    fn invalid_as(
        &self,
        code: &'static str,
        line: usize,
        path: &str,
        why: impl fmt::Display,
    ) -> ManifestError {
        let loc = self.loc(Some(line));
        let path = show(path);
        let message = format!("{loc}: invalid {} config for '{path}': {why}", area(&path));
        ManifestError::new(code, message)
    }

    fn missing(&self, line: Option<usize>, path: &str) -> ManifestError {
        let loc = self.loc(line);
        let message = format!("{loc}: missing required field '{path}'");
        ManifestError::new("E-MAN-001", message)
    }

    fn not_found(&self, line: usize, what: impl fmt::Display) -> ManifestError {
        ManifestError::new("E-IO-001", format!("{}: {what}", self.loc(Some(line))))
    }

    fn resolve(&self, rel: &str) -> PathBuf {
        self.dir
            .join(rel)
            .components()
            .filter(|c| !matches!(c, Component::CurDir))
            .collect()
    }

    fn warn_unknown(&mut self, parent: &str, schema: &str, entry: &Entry) {
        let Some(known) = known_keys(schema) else {
            return;
        };
        if known.contains(&entry.key.as_str()) {
            return;
        }
        let key = join(parent, &entry.key);
        let guess = suggest(&entry.key, known)
            .map(|k| join(parent, k))
            .or_else(|| misplaced(&entry.key, schema));
        let loc = self.loc(Some(entry.line));
        let mut text = format!(
            "[capsule-runtime] warning[W-MAN-001]: {loc}: unknown key '{}' ignored",
            show(&key)
        );
        if let Some(guess) = guess {
            text.push_str(&format!(" (did you mean '{}'?)", show(&guess)));
        }
        let line = entry.line;
        self.warnings.push(Warning { line, key, text });
    }
}

/// The error-message area: the first path segment, or "manifest" for `name` and `version`.
fn area(path: &str) -> &str {
    let first = path.split(['.', '[']).next().unwrap_or(path);
    match first {
        "name" | "version" => "manifest",
        _ => first,
    }
}

/// One value in the tree and how to name it in messages.
struct Field<'n> {
    path: String,
    /// The key's line for a mapping value (the value of a block scalar starts below it).
    line: usize,
    node: &'n Node,
}

impl<'n> Field<'n> {
    fn expected(&self, cx: &Cx, what: &str) -> ManifestError {
        cx.invalid(
            self.line,
            &self.path,
            format!("expected {what}, found {}", describe(self.node)),
        )
    }

    fn string(&self, cx: &Cx) -> Result<String> {
        match &self.node.val {
            Val::Scalar { text, .. } if !is_null(self.node) => Ok(text.clone()),
            _ => Err(self.expected(cx, "a string")),
        }
    }

    fn plain(&self) -> Option<&'n str> {
        match &self.node.val {
            Val::Scalar { text, plain: true } => Some(text),
            _ => None,
        }
    }

    fn boolean(&self, cx: &Cx) -> Result<bool> {
        match self.plain() {
            Some("true" | "True" | "TRUE") => Ok(true),
            Some("false" | "False" | "FALSE") => Ok(false),
            _ => Err(self.expected(cx, "true or false")),
        }
    }

    fn uint(&self, cx: &Cx, min: u64, max: u64) -> Result<u64> {
        let Some(text) = self.plain() else {
            return Err(self.expected(cx, "a whole number"));
        };
        let Some(value) = yaml_int(text) else {
            if text.chars().all(|c| c.is_ascii_digit()) && !text.is_empty() {
                let why = format!("'{}' is too large (at most {max})", show(text));
                return Err(cx.invalid(self.line, &self.path, why));
            }
            return Err(self.expected(cx, "a whole number"));
        };
        if value < i128::from(min) {
            let why = format!("must be at least {min}, found {value}");
            return Err(cx.invalid(self.line, &self.path, why));
        }
        u64::try_from(value)
            .ok()
            .filter(|v| *v <= max)
            .ok_or_else(|| {
                let why = format!("must be at most {max}, found {value}");
                cx.invalid(self.line, &self.path, why)
            })
    }

    fn float(&self, cx: &Cx, ok: fn(f64) -> bool, expect: &str) -> Result<f64> {
        let value = self.plain().and_then(yaml_float);
        match value {
            Some(v) if v.is_finite() && ok(v) => Ok(v),
            _ => Err(self.expected(cx, expect)),
        }
    }

    fn list(&self, cx: &Cx) -> Result<Vec<Field<'n>>> {
        let Val::Seq(items) = &self.node.val else {
            return Err(self.expected(cx, "a list"));
        };
        let fields = items.iter().enumerate().map(|(i, node)| Field {
            path: format!("{}[{i}]", self.path),
            line: node.line,
            node,
        });
        Ok(fields.collect())
    }

    fn section(&self, cx: &mut Cx, schema: &str) -> Result<Section<'n>> {
        let Val::Map(entries) = &self.node.val else {
            return Err(self.expected(cx, "a mapping"));
        };
        for entry in entries {
            cx.warn_unknown(&self.path, schema, entry);
        }
        Ok(Section {
            path: self.path.clone(),
            schema: schema.to_string(),
            line: Some(self.line),
            entries,
        })
    }

    fn json(&self, cx: &Cx) -> Result<Json> {
        match &self.node.val {
            Val::Scalar { text, plain } => self.json_scalar(cx, text, *plain),
            Val::Seq(_) => {
                let items = self.list(cx)?;
                let values = items.iter().map(|f| f.json(cx));
                Ok(Json::Array(values.collect::<Result<_>>()?))
            }
            Val::Map(entries) => {
                let mut map = serde_json::Map::new();
                for e in entries {
                    let path = join(&self.path, &e.key);
                    let field = Field {
                        path,
                        line: e.line,
                        node: &e.node,
                    };
                    map.insert(e.key.clone(), field.json(cx)?);
                }
                Ok(Json::Object(map))
            }
        }
    }

    fn json_scalar(&self, cx: &Cx, text: &str, plain: bool) -> Result<Json> {
        if !plain {
            return Ok(Json::String(text.to_string()));
        }
        if is_null(self.node) {
            return Ok(Json::Null);
        }
        if let Ok(b) = self.boolean(cx) {
            return Ok(Json::Bool(b));
        }
        if let Some(i) = yaml_int(text) {
            let number = i64::try_from(i)
                .map(Json::from)
                .or_else(|_| u64::try_from(i).map(Json::from));
            return number
                .map_err(|_| cx.invalid(self.line, &self.path, "integer too large for JSON"));
        }
        match yaml_float(text) {
            Some(f) => serde_json::Number::from_f64(f)
                .map(Json::Number)
                .ok_or_else(|| cx.invalid(self.line, &self.path, "JSON has no NaN or infinity")),
            None => Ok(Json::String(text.to_string())),
        }
    }
}

/// A mapping of known keys. An absent (or null) section is an empty one, so defaults apply.
struct Section<'n> {
    path: String,
    schema: String,
    /// Line of the section's key (None for the top level and for absent sections).
    line: Option<usize>,
    entries: &'n [Entry],
}

impl<'n> Section<'n> {
    fn field(&self, key: &str) -> Option<Field<'n>> {
        let entry = self.entries.iter().find(|e| e.key == key)?;
        (!is_null(&entry.node)).then(|| Field {
            path: join(&self.path, key),
            line: entry.line,
            node: &entry.node,
        })
    }

    fn sub(&self, cx: &mut Cx, key: &str) -> Result<Section<'n>> {
        let schema = join(&self.schema, key);
        match self.field(key) {
            Some(field) => field.section(cx, &schema),
            None => Ok(Section {
                path: join(&self.path, key),
                schema,
                line: self.entries.iter().find(|e| e.key == key).map(|e| e.line),
                entries: &[],
            }),
        }
    }

    fn req_str(&self, cx: &Cx, key: &str) -> Result<(String, usize)> {
        let field = self.field(key);
        let field = field.ok_or_else(|| cx.missing(self.line, &join(&self.path, key)))?;
        Ok((field.string(cx)?, field.line))
    }

    fn opt_str(&self, cx: &Cx, key: &str) -> Result<Option<Located>> {
        self.field(key)
            .map(|f| f.string(cx).map(|s| (s, f.line)))
            .transpose()
    }

    fn opt_bool(&self, cx: &Cx, key: &str) -> Result<Option<bool>> {
        self.field(key).map(|f| f.boolean(cx)).transpose()
    }

    fn opt_uint(&self, cx: &Cx, key: &str, min: u64, max: u64) -> Result<Option<u64>> {
        self.field(key).map(|f| f.uint(cx, min, max)).transpose()
    }

    fn opt_u32(&self, cx: &Cx, key: &str, min: u32) -> Result<Option<u32>> {
        let v = self.opt_uint(cx, key, min.into(), u32::MAX.into())?;
        Ok(v.map(|v| u32::try_from(v).unwrap_or(u32::MAX)))
    }

    fn opt_f64(
        &self,
        cx: &Cx,
        key: &str,
        ok: fn(f64) -> bool,
        expect: &str,
    ) -> Result<Option<f64>> {
        self.field(key).map(|f| f.float(cx, ok, expect)).transpose()
    }

    fn opt_fraction(&self, cx: &Cx, key: &str) -> Result<Option<f64>> {
        let expect = "a number from 0 to 1";
        self.opt_f64(cx, key, |v| (0.0..=1.0).contains(&v), expect)
    }

    fn opt_enum<T: Copy>(&self, cx: &Cx, key: &str, options: &[(&str, T)]) -> Result<Option<T>> {
        let Some(field) = self.field(key) else {
            return Ok(None);
        };
        let text = field.string(cx).ok();
        let found = options
            .iter()
            .find(|(name, _)| Some(*name) == text.as_deref());
        if let Some((_, value)) = found {
            return Ok(Some(*value));
        }
        let names: Vec<&str> = options.iter().map(|(name, _)| *name).collect();
        let why = format!(
            "expected one of {}, found {}",
            names.join(", "),
            describe(field.node)
        );
        let err = cx.invalid(field.line, &field.path, why);
        let guess = text.as_deref().and_then(|t| suggest(t, &names));
        Err(match guess {
            Some(g) => err.hint(format!("did you mean '{g}'?")),
            None => err,
        })
    }

    fn opt_list(&self, cx: &Cx, key: &str) -> Result<Option<Vec<Field<'n>>>> {
        self.field(key).map(|f| f.list(cx)).transpose()
    }

    fn str_list(&self, cx: &Cx, key: &str) -> Result<Vec<String>> {
        let items = self.opt_list(cx, key)?.unwrap_or_default();
        items.iter().map(|f| f.string(cx)).collect()
    }
}

// ---------------------------------------------------------------------------------------------
// The manifest, section by section.

fn build_manifest(cx: &mut Cx, root: Option<&Node>, path: PathBuf) -> Result<Manifest> {
    let top = top_section(cx, root)?;
    let name = capsule_name(cx, &top)?;
    let (version, line) = top.req_str(cx, "version")?;
    if version.trim().is_empty() {
        return Err(cx.invalid(line, "version", "must not be empty"));
    }
    let artifacts = artifacts(cx, &top)?;
    let inference = inference(cx, &top, &artifacts)?;
    Ok(Manifest {
        path,
        dir: cx.dir.clone(),
        name,
        version,
        artifacts,
        inference,
        context: context(cx, &top)?,
        lifecycle: lifecycle(cx, &top)?,
        capabilities: capabilities(cx, &top)?,
        network: network(cx, &top)?,
        trace: trace(cx, &top)?,
    })
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
        return Err(ManifestError::new("E-MAN-003", msg).hint("start with 'name: my-capsule'"));
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

const RUNTIMES: &[(&str, Runtime)] = &[
    ("tool", Runtime::Tool),
    ("driver", Runtime::Driver),
    ("hook", Runtime::Hook),
    ("skill", Runtime::Skill),
];

impl Runtime {
    fn as_str(self) -> &'static str {
        RUNTIMES
            .iter()
            .find(|(_, r)| *r == self)
            .map_or("tool", |(name, _)| name)
    }
}

fn artifacts(cx: &mut Cx, top: &Section) -> Result<Vec<Artifact>> {
    let items = top.opt_list(cx, "artifacts")?.unwrap_or_default();
    let mut out: Vec<Artifact> = Vec::new();
    for item in &items {
        let artifact = artifact(cx, item)?;
        if let Some(first) = out.iter().find(|a| a.name == artifact.name) {
            let why = format!("artifact name '{}' is used twice", artifact.name);
            let hint = format!("the first is at line {}; names must be unique", first.line);
            let path = format!("{}.name", item.path);
            return Err(cx.invalid(artifact.line, &path, why).hint(hint));
        }
        out.push(artifact);
    }
    Ok(out)
}

fn artifact(cx: &mut Cx, item: &Field) -> Result<Artifact> {
    let sec = item.section(cx, "artifacts[]")?;
    let (name, line) = sec.req_str(cx, "name")?;
    let name = checked_name(cx, name, line, &join(&sec.path, "name"))?;
    let runtime = sec
        .opt_enum(cx, "runtime", RUNTIMES)?
        .unwrap_or(Runtime::Tool);
    sec.opt_bool(cx, "local_source")?;
    let capabilities = match sec.field("capabilities") {
        Some(f) if matches!(f.node.val, Val::Map(_)) => Some(f.json(cx)?),
        Some(f) => return Err(f.expected(cx, "a mapping")),
        None => None,
    };
    let hook = match runtime {
        Runtime::Hook => Some(hook_contract(cx, &sec)?),
        _ => {
            no_hook_keys(cx, &sec, runtime)?;
            None
        }
    };
    Ok(Artifact {
        version: sec.opt_str(cx, "version")?.map(|(v, _)| v),
        description: sec.opt_str(cx, "description")?.map(|(v, _)| v),
        on_overflow: on_overflow(cx, &sec, runtime)?,
        hook,
        source: artifact_source(cx, &sec, &name, runtime)?,
        line: item.line,
        name,
        runtime,
        capabilities,
    })
}

const HOOK_KEYS: &[&str] = &["binding", "execution_mode", "commit_policy"];

/// A hook's binding, mode and policy, checked against each other as upstream checks
/// them, so a mismatch fails before anything is compiled.
fn hook_contract(cx: &mut Cx, sec: &Section) -> Result<HookContract> {
    let binding = sec.opt_enum(cx, "binding", BINDINGS)?;
    let modes = [
        ("blocking", ExecutionMode::Blocking),
        ("async", ExecutionMode::Async),
    ];
    let mode = sec
        .opt_enum(cx, "execution_mode", &modes)?
        .unwrap_or(ExecutionMode::Blocking);
    let policy = sec
        .opt_enum(cx, "commit_policy", POLICIES)?
        .unwrap_or(CommitPolicy::None);
    let line = |key: &str| sec.field(key).map_or(sec.line.unwrap_or(0), |f| f.line);
    let bad = |key: &str, why: String, hint: &str| {
        cx.invalid(line(key), &join(&sec.path, key), why)
            .hint(hint.to_string())
    };
    if mode == ExecutionMode::Async && policy != CommitPolicy::None {
        return Err(bad(
            "commit_policy",
            format!("an async hook commits nothing, found '{}'", policy.as_str()),
            "use 'execution_mode: blocking', or 'commit_policy: none'",
        ));
    }
    if mode == ExecutionMode::Async && binding == Some(Binding::Stage) {
        return Err(bad(
            "execution_mode",
            "on-stage hooks must be blocking".into(),
            "use 'execution_mode: blocking'",
        ));
    }
    policy_fits_binding(policy, binding).map_err(|(why, hint)| bad("commit_policy", why, &hint))?;
    let caps = sec.sub(cx, "capabilities")?;
    let fs = caps.sub(cx, "filesystem")?;
    let limits = caps.sub(cx, "limits")?;
    Ok(HookContract {
        binding,
        mode,
        policy,
        scope: scope(cx, &fs)?,
        deadline_seconds: limits
            .opt_uint(cx, "deadline_seconds", 1, 86_400)?
            .unwrap_or(30),
    })
}

/// Which binding each commit policy belongs to (`CommitPolicy::binding`): a policy
/// commits only there, except `deny`, which also commits at `on-shell`; `none` fits any.
fn policy_fits_binding(
    policy: CommitPolicy,
    binding: Option<Binding>,
) -> std::result::Result<(), (String, String)> {
    let Some(needs) = policy.binding() else {
        return Ok(());
    };
    match binding {
        None if policy == CommitPolicy::Deny => Err((
            "'deny' needs an explicit binding".into(),
            "set 'binding: on-tool-call' or 'binding: on-shell'".into(),
        )),
        None => Ok(()),
        Some(Binding::Shell) if policy == CommitPolicy::Deny => Ok(()),
        Some(b) if b == needs => Ok(()),
        Some(b) => Err((
            format!("'{}' cannot commit at {}", policy.as_str(), b.as_str()),
            format!(
                "'{}' belongs to binding {}; at {} use 'commit_policy: none'",
                policy.as_str(),
                needs.as_str(),
                b.as_str()
            ),
        )),
    }
}

fn no_hook_keys(cx: &Cx, sec: &Section, runtime: Runtime) -> Result<()> {
    for key in HOOK_KEYS {
        if let Some(field) = sec.field(key) {
            let why = format!("only hooks have a {key}; this is a {}", runtime.as_str());
            return Err(cx
                .invalid(field.line, &field.path, why)
                .hint(format!("remove '{key}', or set 'runtime: hook'")));
        }
    }
    Ok(())
}

fn on_overflow(cx: &Cx, sec: &Section, runtime: Runtime) -> Result<OnOverflow> {
    let options = [("drop", OnOverflow::Drop), ("block", OnOverflow::Block)];
    let Some(value) = sec.opt_enum(cx, "on_overflow", &options)? else {
        return Ok(OnOverflow::Drop);
    };
    if runtime != Runtime::Hook {
        let line = sec.field("on_overflow").map_or(0, |f| f.line);
        let path = join(&sec.path, "on_overflow");
        let why = format!(
            "only hooks have an async queue; this is a {}",
            runtime.as_str()
        );
        return Err(cx
            .invalid(line, &path, why)
            .hint("remove 'on_overflow' from this entry"));
    }
    Ok(value)
}

fn artifact_source(cx: &Cx, sec: &Section, name: &str, runtime: Runtime) -> Result<PathBuf> {
    let path = join(&sec.path, "source");
    let Some((rel, line)) = sec.opt_str(cx, "source")? else {
        let hint = "there is no registry here: set 'source' to the artifact's file (a skill's \
                    directory), relative to the manifest directory";
        return Err(cx.missing(sec.line, &path).hint(hint));
    };
    let abs = cx.resolve(&rel);
    if !abs.exists() {
        let what = format!("source of artifact '{name}' not found at {}", abs.display());
        let hint = format!("'source' is resolved against {}", cx.dir.display());
        return Err(cx.not_found(line, what).hint(hint));
    }
    if runtime == Runtime::Skill {
        return skill_dir(cx, abs, line, &path);
    }
    let is_wasm = abs.extension().is_some_and(|e| e == "wasm");
    if !abs.is_file() || !is_wasm {
        let why = format!(
            "a {} artifact's source must be a .wasm file, found {}",
            runtime.as_str(),
            abs.display()
        );
        return Err(cx.invalid(line, &path, why));
    }
    Ok(abs)
}

fn skill_dir(cx: &Cx, abs: PathBuf, line: usize, path: &str) -> Result<PathBuf> {
    if !abs.is_dir() {
        let why = format!(
            "a skill's source must be a directory holding skill.md, found {}",
            abs.display()
        );
        return Err(cx.invalid(line, path, why));
    }
    let doc = abs.join("skill.md");
    if !doc.is_file() {
        let what = format!("skill.md not found at {}", doc.display());
        return Err(cx
            .not_found(line, what)
            .hint("a skill is a directory with a skill.md file"));
    }
    Ok(abs)
}

const BUILTIN_DRIVERS: &[&str] = &["scripted", "openai", "anthropic"];

fn inference(cx: &mut Cx, top: &Section, artifacts: &[Artifact]) -> Result<Inference> {
    let sec = top.sub(cx, "inference")?;
    let transports = [("http", Transport::Http), ("process", Transport::Process)];
    let transport = sec.opt_enum(cx, "transport", &transports)?;
    let transport = transport.unwrap_or(Transport::Http);
    let driver = driver(cx, &sec, artifacts)?;
    let temperature = sec.opt_f64(
        cx,
        "temperature",
        |v| (0.0..=2.0).contains(&v),
        "a number from 0 to 2",
    )?;
    let top_p = sec.opt_fraction(cx, "top_p")?;
    let inference = Inference {
        transport,
        endpoint: endpoint(cx, &sec, &driver, transport)?,
        model: model(cx, &sec, &driver)?,
        api_key: api_key(cx, &sec)?,
        max_turns: max_turns(cx, &sec)?,
        max_tokens: sec.opt_u32(cx, "max_tokens", 1)?.unwrap_or(8192),
        system_prompt: system_prompt(cx, &sec)?,
        temperature,
        top_p,
        stream: sec.opt_bool(cx, "stream")?.unwrap_or(true),
        retry: retry(cx, &sec)?,
        timeouts: timeouts(cx, &sec)?,
        compaction: compaction(cx, &sec)?,
        driver,
    };
    Ok(inference)
}

fn max_turns(cx: &Cx, sec: &Section) -> Result<u32> {
    let turns = sec.opt_u32(cx, "max_turns", 1);
    let hint = "max_turns caps the inference calls of one task; use 1 or more";
    Ok(turns.map_err(|e| e.hint(hint))?.unwrap_or(10))
}

/// `inference.retry`: how often and how patiently 429, 5xx and refused connections
/// are retried.
fn retry(cx: &mut Cx, sec: &Section) -> Result<Retry> {
    let retry = sec.sub(cx, "retry")?;
    let default = Retry::default();
    let ms = |v: Option<u64>, d: Duration| v.map_or(d, Duration::from_millis);
    let max_attempts = retry.opt_u32(cx, "max_attempts", 1)?;
    let initial = retry.opt_uint(cx, "initial_backoff_ms", 0, 3_600_000)?;
    let max = retry.opt_uint(cx, "max_backoff_ms", 0, 3_600_000)?;
    Ok(Retry {
        max_attempts: max_attempts.unwrap_or(default.max_attempts).min(100),
        initial_backoff: ms(initial, default.initial_backoff),
        max_backoff: ms(max, default.max_backoff),
    })
}

fn timeouts(cx: &mut Cx, sec: &Section) -> Result<Timeouts> {
    let timeouts = sec.sub(cx, "timeouts")?;
    let default = Timeouts::default();
    let secs = |v: Option<u64>, d: Duration| v.map_or(d, Duration::from_secs);
    let connect = timeouts.opt_uint(cx, "connect_secs", 1, 86_400)?;
    let read = timeouts.opt_uint(cx, "read_secs", 1, 86_400)?;
    Ok(Timeouts {
        connect: secs(connect, default.connect),
        read: secs(read, default.read),
    })
}

fn driver(cx: &mut Cx, sec: &Section, artifacts: &[Artifact]) -> Result<DriverRef> {
    let script = sec.opt_str(cx, "script")?;
    let Some(field) = sec.field("driver") else {
        return match script {
            Some(script) => scripted(cx, sec, Some(script)),
            None => Err(not_configured(
                cx,
                sec.line,
                "'inference.driver' is not set",
            )),
        };
    };
    let driver = if matches!(field.node.val, Val::Map(_)) {
        artifact_driver(cx, &field, artifacts)?
    } else {
        builtin_driver(cx, sec, &field, script.clone(), artifacts)?
    };
    match (&driver, script) {
        (DriverRef::Builtin { name, .. }, Some(_)) if name == "scripted" => Ok(driver),
        (_, Some((_, line))) => {
            let why = "only the built-in 'scripted' driver reads a script";
            let hint = "remove 'inference.script', or set 'inference.driver: scripted'";
            Err(cx.invalid(line, "inference.script", why).hint(hint))
        }
        (_, None) => Ok(driver),
    }
}

fn not_configured(cx: &Cx, line: Option<usize>, why: &str) -> ManifestError {
    let message = format!("{}: driver not configured: {why}", cx.loc(line));
    let hint = "set 'inference.driver: {artifact: NAME}' naming an artifacts[] entry with \
                'runtime: driver', or 'inference.driver: scripted' with 'inference.script: PATH'";
    ManifestError::new("E-RUN-005", message).hint(hint)
}

fn builtin_driver(
    cx: &Cx,
    sec: &Section,
    field: &Field,
    script: Option<Located>,
    artifacts: &[Artifact],
) -> Result<DriverRef> {
    let name = field.string(cx)?;
    match name.as_str() {
        "scripted" => scripted(cx, sec, script),
        "openai" | "anthropic" => Ok(DriverRef::Builtin { name, script: None }),
        _ => {
            let why = format!(
                "expected one of scripted, openai, anthropic, or {{artifact: NAME}}, found '{}'",
                show(&name)
            );
            let err = cx.invalid(field.line, &field.path, why);
            let hint = if artifacts.iter().any(|a| a.name == name) {
                Some(format!(
                    "to use the artifact write 'driver: {{artifact: {name}}}'"
                ))
            } else {
                suggest(&name, BUILTIN_DRIVERS).map(|g| format!("did you mean '{g}'?"))
            };
            Err(match hint {
                Some(h) => err.hint(h),
                None => err,
            })
        }
    }
}

fn scripted(cx: &Cx, sec: &Section, script: Option<Located>) -> Result<DriverRef> {
    let Some((rel, line)) = script else {
        let hint = "the scripted driver replays a script: set 'inference.script: PATH', \
                    relative to the manifest directory";
        return Err(cx.missing(sec.line, "inference.script").hint(hint));
    };
    let abs = cx.resolve(&rel);
    if !abs.exists() {
        let what = format!("driver script not found at {}", abs.display());
        let hint = format!(
            "'inference.script' is resolved against {}",
            cx.dir.display()
        );
        return Err(cx.not_found(line, what).hint(hint));
    }
    if abs.is_dir() {
        let why = format!("{} is a directory, not a script file", abs.display());
        return Err(cx.invalid(line, "inference.script", why));
    }
    Ok(DriverRef::Builtin {
        name: "scripted".to_string(),
        script: Some(abs),
    })
}

fn artifact_driver(cx: &mut Cx, field: &Field, artifacts: &[Artifact]) -> Result<DriverRef> {
    let sec = field.section(cx, "inference.driver")?;
    let Some((name, line)) = sec.opt_str(cx, "artifact")? else {
        let why = "'inference.driver.artifact' is not set";
        return Err(not_configured(cx, sec.line, why));
    };
    let Some(found) = artifacts.iter().find(|a| a.name == name) else {
        return Err(unknown_driver_artifact(cx, &name, line, artifacts));
    };
    if found.runtime != Runtime::Driver {
        let why = format!(
            "artifact '{name}' has runtime {}, not driver",
            found.runtime.as_str()
        );
        let hint = format!(
            "set 'runtime: driver' on the artifact at line {}",
            found.line
        );
        return Err(cx
            .invalid(line, "inference.driver.artifact", why)
            .hint(hint));
    }
    let config = match sec.field("config") {
        None => Json::Object(serde_json::Map::new()),
        Some(f) if matches!(f.node.val, Val::Map(_)) => f.json(cx)?,
        Some(f) => return Err(f.expected(cx, "a mapping")),
    };
    Ok(DriverRef::Artifact { name, config })
}

fn unknown_driver_artifact(
    cx: &Cx,
    name: &str,
    line: usize,
    artifacts: &[Artifact],
) -> ManifestError {
    let why = format!(
        "'inference.driver.artifact' names '{}', which no artifacts[] entry declares",
        show(name)
    );
    let err = not_configured(cx, Some(line), &why);
    let names: Vec<&str> = artifacts.iter().map(|a| a.name.as_str()).collect();
    match suggest(name, &names) {
        Some(g) => err.hint(format!("did you mean '{g}'?")),
        None => err.hint(format!(
            "add an artifacts[] entry with 'name: {}', 'runtime: driver' and 'source: PATH.wasm'",
            show(name)
        )),
    }
}

fn endpoint(
    cx: &Cx,
    sec: &Section,
    driver: &DriverRef,
    transport: Transport,
) -> Result<Option<String>> {
    let Some((url, line)) = sec.opt_str(cx, "endpoint")? else {
        let needs = transport == Transport::Http && matches!(driver, DriverRef::Artifact { .. });
        if needs {
            let hint = "the driver needs the model server's URL, e.g. \
                        'endpoint: http://127.0.0.1:11434'";
            return Err(cx.missing(sec.line, "inference.endpoint").hint(hint));
        }
        return Ok(None);
    };
    let url = substitute(cx, &url, line, "inference.endpoint")?;
    check_endpoint(&url).map_err(|why| {
        let hint = "use an https:// URL; plain http:// is allowed only to localhost, 127.x.x.x \
                    or [::1]";
        cx.invalid(line, "inference.endpoint", why).hint(hint)
    })?;
    Ok(Some(url))
}

fn check_endpoint(url: &str) -> std::result::Result<(), String> {
    let lower = url.to_ascii_lowercase();
    let (secure, rest) = if let Some(rest) = lower.strip_prefix("https://") {
        (true, rest)
    } else if let Some(rest) = lower.strip_prefix("http://") {
        (false, rest)
    } else {
        return Err(format!("'{}' is not an http(s):// URL", show(url)));
    };
    let host = url_host(rest);
    if host.is_empty() {
        return Err(format!("'{}' has no host", show(url)));
    }
    if secure || is_loopback(host) {
        return Ok(());
    }
    Err(format!(
        "plain http:// may only reach this machine, found host '{}'",
        show(host)
    ))
}

/// The host of `rest` (a URL after `scheme://`), brackets kept for IPv6.
fn url_host(rest: &str) -> &str {
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit('@').next().unwrap_or("");
    if authority.starts_with('[') {
        return authority
            .find(']')
            .map_or(authority, |end| &authority[..=end]);
    }
    authority.split(':').next().unwrap_or("")
}

fn is_loopback(host: &str) -> bool {
    if host == "localhost" {
        return true;
    }
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return v6.parse::<Ipv6Addr>().is_ok_and(|ip| ip.is_loopback());
    }
    host.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

fn model(cx: &Cx, sec: &Section, driver: &DriverRef) -> Result<String> {
    if let Some((model, line)) = sec.opt_str(cx, "model")? {
        return substitute(cx, &model, line, "inference.model");
    }
    match driver {
        DriverRef::Builtin { name, .. } if name == "scripted" => Ok("scripted".to_string()),
        _ => {
            let hint = "set the model id the driver should request, e.g. 'model: qwen2.5-coder'";
            Err(cx.missing(sec.line, "inference.model").hint(hint))
        }
    }
}

/// `${NAME}` as a whole value; anything else (even `${lower}` or `a${B}`) stays literal.
fn env_reference(value: &str) -> Option<&str> {
    let name = value.strip_prefix("${")?.strip_suffix('}')?;
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_uppercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    (first_ok && rest_ok).then_some(name)
}

fn api_key(cx: &Cx, sec: &Section) -> Result<Option<String>> {
    let Some((value, line)) = sec.opt_str(cx, "api_key")? else {
        return Ok(None);
    };
    substitute(cx, &value, line, "inference.api_key").map(Some)
}

/// A whole-value `${NAME}` replaced by that environment variable, which must be set;
/// anything else as written.
fn substitute(cx: &Cx, value: &str, line: usize, key: &str) -> Result<String> {
    let Some(var) = env_reference(value) else {
        return Ok(value.to_string());
    };
    match (cx.env)(var) {
        Some(resolved) => Ok(resolved),
        None => {
            let why = format!("environment variable {var} is not set");
            let hint = format!("export {var}=... in the environment mur runs in");
            Err(cx.invalid(line, key, why).hint(hint))
        }
    }
}

/// At most one of `<prefix>system_prompt` / `<prefix>system_prompt_file`.
fn prompt_pair(cx: &Cx, sec: &Section) -> Result<(Option<Located>, Option<Located>)> {
    let inline = sec.opt_str(cx, "system_prompt")?;
    let file = sec.opt_str(cx, "system_prompt_file")?;
    if let (Some((_, a)), Some((_, b))) = (&inline, &file) {
        let path = join(&sec.path, "system_prompt_file");
        let why = format!(
            "set at most one of '{}' and '{path}'",
            join(&sec.path, "system_prompt")
        );
        return Err(cx
            .invalid(*a.max(b), &path, why)
            .hint("keep one prompt source"));
    }
    Ok((inline, file))
}

fn system_prompt(cx: &Cx, sec: &Section) -> Result<Option<String>> {
    match prompt_pair(cx, sec)? {
        (Some((text, _)), _) => Ok(Some(text.trim().to_string())),
        (None, Some((rel, line))) => read_prompt(cx, &rel, line).map(Some),
        (None, None) => Ok(None),
    }
}

fn read_prompt(cx: &Cx, rel: &str, line: usize) -> Result<String> {
    let abs = cx.resolve(rel);
    std::fs::read_to_string(&abs).map_err(|e| {
        let message = format!(
            "{}: system prompt file {} is unreadable: {e}",
            cx.loc(Some(line)),
            abs.display()
        );
        let hint = format!(
            "'inference.system_prompt_file' is resolved against {}",
            cx.dir.display()
        );
        ManifestError::new("E-RUN-009", message).hint(hint)
    })
}

fn compaction(cx: &mut Cx, inference: &Section) -> Result<Compaction> {
    let sec = inference.sub(cx, "compaction")?;
    let threshold = sec.opt_f64(
        cx,
        "threshold",
        |v| v > 0.0 && v <= 1.0,
        "a number above 0 and at most 1",
    )?;
    let (prompt, file) = prompt_pair(cx, &sec)?;
    Ok(Compaction {
        threshold: threshold.unwrap_or(0.98),
        model: sec.opt_str(cx, "model")?.map(|(m, _)| m),
        system_prompt: prompt.map(|(p, _)| p),
        system_prompt_file: file.map(|(f, _)| cx.resolve(&f)),
        dump_summaries: sec.opt_bool(cx, "dump_summaries")?.unwrap_or(false),
    })
}

fn context(cx: &mut Cx, top: &Section) -> Result<Context> {
    let sec = top.sub(cx, "context")?;
    let defaults = Context::default();
    let hint = "a fraction, e.g. 0.10 for 10%";
    let fraction = |key| sec.opt_fraction(cx, key).map_err(|e| e.hint(hint));
    Ok(Context {
        max_tokens: sec.opt_u32(cx, "max_tokens", 1)?,
        seed_budget: fraction("seed_budget")?.unwrap_or(defaults.seed_budget),
        seed_overflow_margin: fraction("seed_overflow_margin")?
            .unwrap_or(defaults.seed_overflow_margin),
    })
}

fn lifecycle(cx: &mut Cx, top: &Section) -> Result<Lifecycle> {
    let sec = top.sub(cx, "lifecycle")?;
    let d = Lifecycle::default();
    let acceptance = [
        ("none", TaskAcceptance::None),
        ("single", TaskAcceptance::Single),
        ("queue", TaskAcceptance::Queue),
    ];
    let after = [("exit", AfterTask::Exit), ("sleep", AfterTask::Sleep)];
    let conversation = [
        ("stateless", Conversation::Stateless),
        ("threaded", Conversation::Threaded),
    ];
    let depth_hint = "hold at least 1 waiting task, or use 'task_acceptance: single'";
    let queue_depth = sec.opt_uint(
        cx,
        "queue_depth",
        1,
        u64::try_from(usize::MAX).unwrap_or(u64::MAX),
    );
    Ok(Lifecycle {
        task_acceptance: sec
            .opt_enum(cx, "task_acceptance", &acceptance)?
            .unwrap_or(d.task_acceptance),
        after_task: sec
            .opt_enum(cx, "after_task", &after)?
            .unwrap_or(d.after_task),
        queue_depth: queue_depth
            .map_err(|e| e.hint(depth_hint))?
            .map_or(d.queue_depth, |v| usize::try_from(v).unwrap_or(usize::MAX)),
        conversation: sec
            .opt_enum(cx, "conversation", &conversation)?
            .unwrap_or(d.conversation),
        max_task_reopens: sec
            .opt_u32(cx, "max_task_reopens", 0)?
            .unwrap_or(d.max_task_reopens),
        shell_grace_secs: sec
            .opt_uint(cx, "shell_grace_secs", 0, u64::MAX)?
            .unwrap_or(d.shell_grace_secs),
        input_timeout_secs: sec.opt_uint(cx, "input_timeout_secs", 0, u64::MAX)?,
    })
}

fn capabilities(cx: &mut Cx, top: &Section) -> Result<Capabilities> {
    let sec = top.sub(cx, "capabilities")?;
    let net = sec.sub(cx, "network")?;
    let fs = sec.sub(cx, "filesystem")?;
    let shell = sec.sub(cx, "shell")?;
    let env = sec.sub(cx, "env")?;
    let limits = sec.sub(cx, "limits")?;
    shell.str_list(cx, "strip_env")?;
    shell.str_list(cx, "baseline_env")?;
    let d = Capabilities::default();
    Ok(Capabilities {
        network_allow: net_rules(cx, &net)?,
        filesystem_scope: scope(cx, &fs)?,
        shell_allow: shell_allow(cx, &shell)?,
        containment: sec.opt_enum(cx, "containment", Class::NAMES)?,
        shell_network: shell
            .opt_enum(cx, "network", ShellNetwork::NAMES)?
            .unwrap_or_default(),
        workdir_exec: fs.opt_bool(cx, "workdir_exec")?.unwrap_or(false),
        env_allow: env.str_list(cx, "allow")?,
        memory_bytes: limits
            .opt_uint(cx, "memory_bytes", 1, u64::MAX)?
            .unwrap_or(d.memory_bytes),
        deadline_seconds: limits
            .opt_uint(cx, "deadline_seconds", 1, u64::MAX)?
            .unwrap_or(d.deadline_seconds),
        limits: budget(cx, &limits)?,
    })
}

/// The size and call-count keys of `capabilities.limits`; each at least 1.
fn budget(cx: &Cx, limits: &Section) -> Result<Limits> {
    let d = Limits::default();
    let key = |name: &str, default: u64| -> Result<u64> {
        Ok(limits.opt_uint(cx, name, 1, u64::MAX)?.unwrap_or(default))
    };
    Ok(Limits {
        max_chunk_bytes: key("max_chunk_bytes", d.max_chunk_bytes)?,
        max_tool_result_bytes: key("max_tool_result_bytes", d.max_tool_result_bytes)?,
        max_driver_reply_bytes: key("max_driver_reply_bytes", d.max_driver_reply_bytes)?,
        max_tool_calls_per_reply: key("max_tool_calls_per_reply", d.max_tool_calls_per_reply)?,
        max_tool_calls_per_task: key("max_tool_calls_per_task", d.max_tool_calls_per_task)?,
        max_trace_bytes: key("max_trace_bytes", d.max_trace_bytes)?,
        workdir_bytes: key("workdir_bytes", d.workdir_bytes)?,
        shell_cpu_seconds: key("shell_cpu_seconds", d.shell_cpu_seconds)?,
        shell_open_files: key("shell_open_files", d.shell_open_files)?,
        shell_processes: key("shell_processes", d.shell_processes)?,
        shell_concurrency: key("shell_concurrency", d.shell_concurrency)?,
    })
}

fn net_rules(cx: &Cx, net: &Section) -> Result<Vec<NetRule>> {
    let items = net.opt_list(cx, "allow")?.unwrap_or_default();
    let rule = |item: &Field| {
        let written = item.string(cx)?;
        let mut text = substitute(cx, &written, item.line, &item.path)?;
        if text != written {
            // `${OPENAI_BASE_URL}` is usually the endpoint itself: one variable names the
            // server for both keys, and only its scheme, host and port count here.
            text = without_path(&text).to_string();
        }
        parse_net_rule(&text).map_err(|why| {
            let why = format!("'{}': {why}", show(&text));
            let hint = "use host, host:port or http(s)://host[:port], e.g. \
                        http://127.0.0.1:11434";
            cx.invalid_as("E-CAP-001", item.line, &item.path, why)
                .hint(hint)
        })
    };
    items.iter().map(rule).collect()
}

/// `scheme://host[:port]` of a URL, or the text up to its first `/`.
fn without_path(url: &str) -> &str {
    let start = url.find("://").map_or(0, |i| i + 3);
    match url[start..].find(['/', '?', '#']) {
        Some(end) => &url[..start + end],
        None => url,
    }
}

fn parse_net_rule(entry: &str) -> std::result::Result<NetRule, String> {
    let (scheme, rest) = match entry.split_once("://") {
        Some((scheme, rest)) => {
            let scheme = scheme.to_ascii_lowercase();
            if scheme != "http" && scheme != "https" {
                return Err(format!("scheme '{}' is not http or https", show(&scheme)));
            }
            (Some(scheme), rest)
        }
        None => (None, entry),
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains(['/', '?', '#']) {
        return Err("a path is not allowed, only host[:port]".to_string());
    }
    if rest.contains('@') {
        return Err("credentials are not allowed".to_string());
    }
    let (host, port) = split_host_port(rest)?;
    Ok(NetRule { scheme, host, port })
}

fn split_host_port(text: &str) -> std::result::Result<(String, Option<u16>), String> {
    if let Some(inner) = text.strip_prefix('[') {
        let (host, after) = inner.split_once(']').ok_or("unclosed '['")?;
        host.parse::<Ipv6Addr>()
            .map_err(|_| format!("'{}' is not an IPv6 address", show(host)))?;
        let port = match after {
            "" => None,
            _ => Some(port(after.strip_prefix(':').ok_or("junk after ']'")?)?),
        };
        return Ok((format!("[{}]", host.to_ascii_lowercase()), port));
    }
    if text.matches(':').count() > 1 {
        return Err("an IPv6 address needs brackets, e.g. [::1]:8080".to_string());
    }
    let (host, port) = match text.rsplit_once(':') {
        Some((host, p)) => (host, Some(port(p)?)),
        None => (text, None),
    };
    check_host(host)?;
    Ok((host.to_ascii_lowercase(), port))
}

fn port(text: &str) -> std::result::Result<u16, String> {
    match text.parse::<u16>() {
        Ok(p) if p > 0 && text.chars().all(|c| c.is_ascii_digit()) => Ok(p),
        _ => Err(format!(
            "port '{}' is not a number from 1 to 65535",
            show(text)
        )),
    }
}

fn check_host(host: &str) -> std::result::Result<(), String> {
    let chars_ok = host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    let labels_ok = host
        .split('.')
        .all(|l| !l.is_empty() && !l.starts_with('-') && !l.ends_with('-'));
    if host.is_empty() {
        return Err("no host".to_string());
    }
    if !chars_ok || !labels_ok || host.len() > 253 {
        return Err(format!("'{}' is not a host name or address", show(host)));
    }
    Ok(())
}

fn scope(cx: &Cx, fs: &Section) -> Result<Option<String>> {
    let Some((scope, line)) = fs.opt_str(cx, "scope")? else {
        return Ok(None);
    };
    let has_drive = scope.as_bytes().get(1) == Some(&b':');
    let why = if scope.trim().is_empty() {
        Some("must not be empty")
    } else if scope.starts_with(['/', '\\']) || has_drive || Path::new(&scope).is_absolute() {
        Some("must be relative to the workdir, not absolute")
    } else if scope.split(['/', '\\']).any(|part| part == "..") {
        Some("must not contain '..'")
    } else {
        None
    };
    match why {
        None => Ok(Some(scope)),
        Some(why) => {
            let why = format!("'{}' {why}", show(&scope));
            let hint = "use a path inside the workdir, e.g. 'scope: memory'";
            Err(cx
                .invalid_as("E-CAP-002", line, "capabilities.filesystem.scope", why)
                .hint(hint))
        }
    }
}

fn shell_allow(cx: &Cx, shell: &Section) -> Result<Vec<String>> {
    let Some(items) = shell.opt_list(cx, "allow")? else {
        return Ok(Vec::new());
    };
    if items.is_empty() {
        let line = shell.field("allow").map_or(0, |f| f.line);
        let hint = "remove 'shell.allow' to grant no shell, or list binaries, e.g. [bash]";
        let why = "an empty list grants nothing";
        return Err(cx.invalid(line, "capabilities.shell.allow", why).hint(hint));
    }
    let mut names: Vec<String> = Vec::new();
    for item in &items {
        let name = item.string(cx)?;
        let bare = !name.is_empty()
            && name != "."
            && name != ".."
            && !name.contains(['/', '\\'])
            && !name.chars().any(|c| c.is_whitespace() || c.is_control());
        if !bare {
            let why = format!(
                "expected a bare binary name such as 'bash', found '{}'",
                show(&name)
            );
            let hint = "list the binary's name only; it is looked up on PATH";
            return Err(cx.invalid(item.line, &item.path, why).hint(hint));
        }
        if names.contains(&name) {
            return Err(cx.invalid(item.line, &item.path, format!("'{name}' is listed twice")));
        }
        names.push(name);
    }
    Ok(names)
}

fn network(cx: &mut Cx, top: &Section) -> Result<Network> {
    let sec = top.sub(cx, "network")?;
    let port = sec.opt_uint(cx, "internal_port", 1, u16::MAX.into());
    let hint = "omit 'internal_port' to let the OS pick a free port";
    let port = port.map_err(|e| e.hint(hint))?;
    Ok(Network {
        internal_port: port.map(|p| u16::try_from(p).unwrap_or(u16::MAX)),
    })
}

fn trace(cx: &mut Cx, top: &Section) -> Result<Trace> {
    let sec = top.sub(cx, "trace")?;
    Ok(Trace {
        include_tool_output: sec.opt_bool(cx, "include_tool_output")?.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A unique directory under the system temp dir, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new() -> Self {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let dir =
                std::env::temp_dir().join(format!("mur-manifest-test-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let scratch = Scratch(std::path::absolute(dir).unwrap());
            scratch.file("s.json", "[]");
            scratch
        }

        fn file(&self, rel: &str, content: &str) -> PathBuf {
            let path = self.0.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, content).unwrap();
            path
        }

        fn load(&self, yaml: &str) -> Result<Loaded> {
            let path = self.file("murmur.yaml", yaml);
            load_with_env(&path, &test_env)
        }

        fn ok(&self, yaml: &str) -> Loaded {
            match self.load(yaml) {
                Ok(loaded) => loaded,
                Err(e) => panic!("expected a valid manifest, got:\n{e}"),
            }
        }

        fn err(&self, yaml: &str) -> ManifestError {
            match self.load(yaml) {
                Ok(loaded) => panic!("expected an error, got {loaded:#?}"),
                Err(e) => e,
            }
        }

        fn path(&self, rel: &str) -> String {
            self.0.join(rel).display().to_string()
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn test_env(name: &str) -> Option<String> {
        match name {
            "LOCAL_MODEL_KEY" => Some("sk-local".to_string()),
            "MODEL_URL" => Some("http://127.0.0.1:11434/v1".to_string()),
            "MODEL_NAME" => Some("qwen2.5-coder".to_string()),
            _ => None,
        }
    }

    /// Lines 1-5; whatever a test appends starts at line 6.
    const BASE: &str =
        "name: t\nversion: \"1\"\ninference:\n  driver: scripted\n  script: s.json\n";

    fn base(extra: &str) -> String {
        format!("{BASE}{extra}")
    }

    fn text(e: &ManifestError) -> String {
        e.to_string()
    }

    const EXAMPLE: &str = r#"name: notes-agent
version: "0.3.0"

artifacts:
  - name: driver-openai-compat
    version: "0.1.0"
    runtime: driver
    source: ./components/driver-openai-compat.wasm
    local_source: true
  - name: house-style
    source: ./skills/house-style/
    runtime: skill
  - name: memory-seed          # binding on-task-start, seed-context
    version: "1.0.0"
    runtime: hook
    source: hooks/memory-seed.wasm
    capabilities:
      filesystem:
        scope: memory
  - name: result-gate          # binding on-task-end, reopen-task
    version: "1.0.0"
    runtime: hook
    source: hooks/result-gate.wasm
    on_overflow: block

capabilities:
  network:
    allow:
      - http://127.0.0.1:11434
  shell:
    allow: [bash]

network:
  internal_port: 52222

inference:
  transport: http
  endpoint: http://127.0.0.1:11434
  model: qwen2.5-coder
  api_key: ${LOCAL_MODEL_KEY}
  driver:
    artifact: driver-openai-compat
    config: { temperature: 0.2 }
  max_turns: 12
  max_tokens: 4096
  system_prompt: |
    Keep answers short. Write final notes to notes.md.
  compaction:
    threshold: 0.9

context:
  max_tokens: 128000
  seed_budget: 0.05
  seed_overflow_margin: 0.2

lifecycle:
  task_acceptance: queue
  after_task: sleep
  queue_depth: 4
  conversation: threaded
  max_task_reopens: 2
  shell_grace_secs: 20
  input_timeout_secs: 300
"#;

    fn example_files(s: &Scratch) {
        s.file("components/driver-openai-compat.wasm", "");
        s.file("skills/house-style/skill.md", "# House style");
        s.file("hooks/memory-seed.wasm", "");
        s.file("hooks/result-gate.wasm", "");
    }

    #[test]
    fn full_example() {
        let s = Scratch::new();
        example_files(&s);
        let loaded = s.ok(EXAMPLE);
        assert_eq!(loaded.warnings, vec![]);
        let m = loaded.manifest;
        assert_eq!(m.path, s.0.join("murmur.yaml"));
        assert_eq!(m.dir, s.0);
        assert_eq!(
            (m.name.as_str(), m.version.as_str()),
            ("notes-agent", "0.3.0")
        );

        let names: Vec<&str> = m.artifacts.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "driver-openai-compat",
                "house-style",
                "memory-seed",
                "result-gate"
            ]
        );
        let driver = &m.artifacts[0];
        assert_eq!(driver.runtime, Runtime::Driver);
        assert_eq!(driver.version.as_deref(), Some("0.1.0"));
        assert_eq!(
            driver.source,
            s.0.join("components/driver-openai-compat.wasm")
        );
        assert_eq!(driver.line, 5);
        let skill = &m.artifacts[1];
        assert_eq!(
            (skill.runtime, skill.version.as_deref()),
            (Runtime::Skill, None)
        );
        assert_eq!(skill.source, s.0.join("skills/house-style"));
        let seed = &m.artifacts[2];
        assert_eq!(seed.runtime, Runtime::Hook);
        let caps = serde_json::json!({"filesystem": {"scope": "memory"}});
        assert_eq!(seed.capabilities, Some(caps));
        assert_eq!(seed.on_overflow, OnOverflow::Drop);
        assert_eq!(m.artifacts[3].on_overflow, OnOverflow::Block);

        let inf = &m.inference;
        assert_eq!(inf.transport, Transport::Http);
        assert_eq!(inf.endpoint.as_deref(), Some("http://127.0.0.1:11434"));
        assert_eq!(inf.model, "qwen2.5-coder");
        assert_eq!(inf.api_key.as_deref(), Some("sk-local"));
        let config = serde_json::json!({"temperature": 0.2});
        let expected = DriverRef::Artifact {
            name: "driver-openai-compat".into(),
            config,
        };
        assert_eq!(inf.driver, expected);
        assert_eq!((inf.max_turns, inf.max_tokens), (12, 4096));
        let prompt = "Keep answers short. Write final notes to notes.md.";
        assert_eq!(inf.system_prompt.as_deref(), Some(prompt));
        assert_eq!(inf.compaction.threshold, 0.9);

        let ctx = &m.context;
        assert_eq!(ctx.max_tokens, Some(128_000));
        assert_eq!((ctx.seed_budget, ctx.seed_overflow_margin), (0.05, 0.2));

        let expected = Lifecycle {
            task_acceptance: TaskAcceptance::Queue,
            after_task: AfterTask::Sleep,
            queue_depth: 4,
            conversation: Conversation::Threaded,
            max_task_reopens: 2,
            shell_grace_secs: 20,
            input_timeout_secs: Some(300),
        };
        assert_eq!(m.lifecycle, expected);

        let rule = NetRule {
            scheme: Some("http".into()),
            host: "127.0.0.1".into(),
            port: Some(11434),
        };
        assert_eq!(m.capabilities.network_allow, vec![rule]);
        assert_eq!(m.capabilities.shell_allow, vec!["bash".to_string()]);
        assert_eq!(m.network.internal_port, Some(52222));
    }

    #[test]
    fn defaults() {
        let s = Scratch::new();
        let m = s.ok(BASE).manifest;
        let inf = &m.inference;
        let driver = DriverRef::Builtin {
            name: "scripted".into(),
            script: Some(s.0.join("s.json")),
        };
        assert_eq!(inf.driver, driver);
        assert_eq!(inf.model, "scripted");
        assert_eq!((inf.max_turns, inf.max_tokens), (10, 8192));
        assert_eq!(inf.transport, Transport::Http);
        assert_eq!((inf.endpoint.clone(), inf.api_key.clone()), (None, None));
        assert_eq!((inf.system_prompt.clone(), inf.temperature), (None, None));
        assert_eq!(inf.compaction, Compaction::default());
        assert_eq!(inf.compaction.threshold, 0.98);
        assert_eq!(m.context, Context::default());
        assert_eq!((m.context.seed_budget, m.context.max_tokens), (0.10, None));
        assert_eq!(m.lifecycle, Lifecycle::default());
        assert_eq!(m.lifecycle.task_acceptance, TaskAcceptance::Single);
        assert_eq!(m.lifecycle.after_task, AfterTask::Exit);
        assert_eq!(
            (m.lifecycle.queue_depth, m.lifecycle.max_task_reopens),
            (1, 1)
        );
        assert_eq!(m.lifecycle.shell_grace_secs, 10);
        assert_eq!(m.capabilities, Capabilities::default());
        assert_eq!(m.capabilities.memory_bytes, 536_870_912);
        assert_eq!(m.capabilities.deadline_seconds, 600);
        assert_eq!(m.network.internal_port, None);
        assert!(!m.trace.include_tool_output);
        assert!(m.artifacts.is_empty());
    }

    #[test]
    fn null_sections_are_defaults_and_versions_keep_their_text() {
        let s = Scratch::new();
        let yaml = "name: t\nversion: 1.10\ninference:\n  driver: scripted\n  script: s.json\n\
                    context:\nlifecycle: ~\n";
        let m = s.ok(yaml).manifest;
        assert_eq!(m.version, "1.10");
        assert_eq!(m.lifecycle, Lifecycle::default());
    }

    #[test]
    fn manifest_not_found() {
        let s = Scratch::new();
        let path = s.0.join("nope/murmur.yaml");
        let e = load(&path).unwrap_err();
        let want = format!(
            "error[E-IO-001]: murmur.yaml not found at {}\n  \
             hint: pass --manifest PATH or run mur in the capsule's directory",
            path.display()
        );
        assert_eq!(text(&e), want);
    }

    #[test]
    fn manifest_is_a_directory() {
        let s = Scratch::new();
        let e = load(&s.0).unwrap_err();
        assert_eq!(e.code, "E-IO-003");
    }

    #[test]
    fn yaml_syntax_error_names_line() {
        let s = Scratch::new();
        let e = s.err("name: a\nversion: 1\n  bad: 2\n");
        let want = "error[E-MAN-002]: murmur.yaml:3: mapping values are not allowed in this \
                    context\n  hint: check the indentation and quoting on line 3 and the line \
                    before it";
        assert_eq!(text(&e), want);
    }

    #[test]
    fn tab_error_points_at_the_tab() {
        let s = Scratch::new();
        let e = s.err("name: a\n\tversion: 1\n");
        assert_eq!(e.code, "E-MAN-002");
        assert!(e.message.starts_with("murmur.yaml:2: "), "{e}");
        let hint = "indent with spaces: YAML does not allow tabs in indentation";
        assert_eq!(e.hint.as_deref(), Some(hint));
    }

    #[test]
    fn duplicate_key_is_a_syntax_error() {
        let s = Scratch::new();
        let e = s.err(&base("lifecycle:\n  queue_depth: 2\n  queue_depth: 3\n"));
        let want = "error[E-MAN-002]: murmur.yaml:8: duplicate key 'lifecycle.queue_depth'\n  \
                    hint: it is already set at line 7; keep one";
        assert_eq!(text(&e), want);
    }

    #[test]
    fn two_documents_rejected() {
        let s = Scratch::new();
        let e = s.err(&format!("{BASE}---\nname: other\n"));
        assert_eq!(e.code, "E-MAN-002");
        assert!(e.message.contains("more than one YAML document"), "{e}");
    }

    #[test]
    fn not_utf8_rejected_with_line() {
        let s = Scratch::new();
        let path = s.0.join("murmur.yaml");
        std::fs::write(&path, b"name: a\nversion: \xff\n").unwrap();
        let e = load(&path).unwrap_err();
        assert_eq!(e.message, "murmur.yaml:2: not valid UTF-8");
    }

    #[test]
    fn missing_name_at_top_level() {
        let s = Scratch::new();
        let e = s.err("version: \"1\"\n");
        assert_eq!(
            text(&e),
            "error[E-MAN-001]: murmur.yaml: missing required field 'name'"
        );
        let e = s.err("name: x\n");
        assert_eq!(
            text(&e),
            "error[E-MAN-001]: murmur.yaml: missing required field 'version'"
        );
    }

    #[test]
    fn empty_file_is_missing_name() {
        let s = Scratch::new();
        let e = s.err("# nothing yet\n");
        assert_eq!(e.code, "E-MAN-001");
        assert!(e.hint.unwrap().contains("the file is empty"));
    }

    #[test]
    fn top_level_must_be_a_mapping() {
        let s = Scratch::new();
        let e = s.err("- a\n- b\n");
        assert_eq!(
            e.message,
            "murmur.yaml:1: expected a mapping of keys at the top level, found a list"
        );
    }

    #[test]
    fn missing_model_names_parent_line() {
        let s = Scratch::new();
        s.file("d.wasm", "");
        let yaml = "name: t\nversion: \"1\"\nartifacts:\n  - name: d\n    runtime: driver\n    \
                    source: d.wasm\ninference:\n  endpoint: https://api.example.com\n  driver:\n    \
                    artifact: d\n";
        let e = s.err(yaml);
        let want = "error[E-MAN-001]: murmur.yaml:7: missing required field 'inference.model'\n  \
                    hint: set the model id the driver should request, e.g. 'model: qwen2.5-coder'";
        assert_eq!(text(&e), want);
    }

    #[test]
    fn enum_value_rejected_with_did_you_mean() {
        let s = Scratch::new();
        let e = s.err(&base("lifecycle:\n  task_acceptance: queu\n"));
        let want = "error[E-MAN-003]: murmur.yaml:7: invalid lifecycle config for \
                    'lifecycle.task_acceptance': expected one of none, single, queue, found \
                    'queu'\n  hint: did you mean 'queue'?";
        assert_eq!(text(&e), want);
    }

    #[test]
    fn zero_max_turns_and_queue_depth_rejected() {
        let s = Scratch::new();
        let e = s.err(&base("  max_turns: 0\n"));
        let want = "murmur.yaml:6: invalid inference config for 'inference.max_turns': must be \
                    at least 1, found 0";
        assert_eq!((e.code, e.message.as_str()), ("E-MAN-003", want));
        assert!(e.hint.is_some());
        let e = s.err(&base("lifecycle:\n  queue_depth: 0\n"));
        let want = "murmur.yaml:7: invalid lifecycle config for 'lifecycle.queue_depth': must be \
                    at least 1, found 0";
        assert_eq!(e.message, want);
        let m = s.ok(&base(
            "lifecycle:\n  max_task_reopens: 0\n  shell_grace_secs: 0\n",
        ));
        assert_eq!(m.manifest.lifecycle.max_task_reopens, 0);
    }

    #[test]
    fn numbers_of_the_wrong_kind_rejected() {
        let s = Scratch::new();
        let cases = [
            ("  max_turns: -3\n", "must be at least 1, found -3"),
            ("  max_turns: 1.5\n", "expected a whole number, found '1.5'"),
            (
                "  max_turns: \"12\"\n",
                "expected a whole number, found '12'",
            ),
            (
                "  max_turns: [1]\n",
                "expected a whole number, found a list",
            ),
            (
                "  max_turns: 4294967296\n",
                "must be at most 4294967295, found 4294967296",
            ),
            (
                "  max_tokens: 99999999999999999999999999999999999999999999\n",
                "'99999999999999999999999999999999999999999999' is too large (at most \
                 4294967295)",
            ),
            ("  stream: yes\n", "expected true or false, found 'yes'"),
            (
                "  temperature: .nan\n",
                "expected a number from 0 to 2, found '.nan'",
            ),
            ("  top_p: 2\n", "expected a number from 0 to 1, found '2'"),
        ];
        for (extra, why) in cases {
            let e = s.err(&base(extra));
            assert_eq!(e.code, "E-MAN-003", "{extra}");
            assert!(
                e.message
                    .starts_with("murmur.yaml:6: invalid inference config for 'inference.")
            );
            assert!(e.message.ends_with(why), "{extra}: {e}");
        }
        let m = s.ok(&base("  max_turns: 0x10\n  temperature: 1\n"));
        assert_eq!(m.manifest.inference.max_turns, 16);
        assert_eq!(m.manifest.inference.temperature, Some(1.0));
    }

    fn hook_entry(extra: &str) -> String {
        format!("{BASE}artifacts:\n  - name: gate\n    runtime: hook\n    source: h.wasm\n{extra}")
    }

    #[test]
    fn a_hooks_contract_is_read_with_upstreams_defaults() {
        let s = Scratch::new();
        s.file("h.wasm", "");
        let m = s.ok(&hook_entry("")).manifest;
        let contract = m.artifacts[0].hook.clone().expect("a hook has a contract");
        assert_eq!(
            contract,
            HookContract {
                binding: None,
                mode: ExecutionMode::Blocking,
                policy: CommitPolicy::None,
                scope: None,
                deadline_seconds: 30,
            }
        );
        let m = s
            .ok(&hook_entry(
                "    binding: on-shell\n    commit_policy: deny\n    capabilities:\n      \
                 filesystem: {scope: policy}\n      limits: {deadline_seconds: 5}\n",
            ))
            .manifest;
        let contract = m.artifacts[0].hook.clone().expect("contract");
        assert_eq!(contract.binding, Some(Binding::Shell));
        assert_eq!(contract.policy, CommitPolicy::Deny);
        assert_eq!(contract.scope.as_deref(), Some("policy"));
        assert_eq!(contract.deadline_seconds, 5);
    }

    #[test]
    fn a_policy_that_does_not_fit_its_binding_or_mode_is_refused() {
        let s = Scratch::new();
        s.file("h.wasm", "");
        let cases = [
            (
                "    binding: on-task-start\n    commit_policy: reopen-task\n",
                "'reopen-task' cannot commit at on-task-start",
            ),
            (
                "    execution_mode: async\n    commit_policy: seed-context\n",
                "an async hook commits nothing, found 'seed-context'",
            ),
            (
                "    commit_policy: deny\n",
                "'deny' needs an explicit binding",
            ),
            (
                "    binding: on-stage\n    execution_mode: async\n",
                "on-stage hooks must be blocking",
            ),
            (
                "    binding: on-tool-cal\n",
                "expected one of on-stage, on-session-start",
            ),
        ];
        for (extra, why) in cases {
            let e = s.err(&hook_entry(extra));
            assert_eq!(e.code, "E-MAN-003", "{extra}");
            assert!(e.message.contains(why), "{extra}: {e}");
        }
        let e = s.err(&hook_entry(
            "    capabilities:\n      filesystem: {scope: ../escape}\n",
        ));
        assert_eq!(e.code, "E-CAP-002");
    }

    #[test]
    fn hook_keys_on_other_artifacts_are_refused() {
        let s = Scratch::new();
        s.file("t.wasm", "");
        let yaml = format!(
            "{BASE}artifacts:\n  - name: t\n    source: t.wasm\n    binding: on-task-end\n"
        );
        let e = s.err(&yaml);
        assert!(
            e.message
                .contains("only hooks have a binding; this is a tool"),
            "{e}"
        );
    }

    #[test]
    fn retry_timeouts_and_stream_are_read() {
        let s = Scratch::new();
        let m = s.ok(&base(""));
        let inf = &m.manifest.inference;
        assert_eq!(
            (inf.retry, inf.timeouts),
            (Retry::default(), Timeouts::default())
        );
        assert!(inf.stream);
        let m = s.ok(&base(
            "  stream: false\n  retry:\n    max_attempts: 5\n    initial_backoff_ms: 0\n    \
             max_backoff_ms: 2000\n  timeouts: {connect_secs: 3, read_secs: 45}\n",
        ));
        let inf = &m.manifest.inference;
        assert!(!inf.stream);
        assert_eq!(
            inf.retry,
            Retry {
                max_attempts: 5,
                initial_backoff: Duration::ZERO,
                max_backoff: Duration::from_secs(2),
            }
        );
        assert_eq!(
            inf.timeouts,
            Timeouts {
                connect: Duration::from_secs(3),
                read: Duration::from_secs(45),
            }
        );
        let e = s.err(&base("  retry: {max_attempts: 0}\n"));
        assert!(e.message.contains("'inference.retry.max_attempts'"), "{e}");
        let e = s.err(&base("  timeouts: {read_secs: 0}\n"));
        assert!(e.message.contains("'inference.timeouts.read_secs'"), "{e}");
    }

    #[test]
    fn seed_fractions_outside_zero_to_one_rejected() {
        let s = Scratch::new();
        let e = s.err(&base("context:\n  seed_budget: 1.5\n"));
        let want = "error[E-MAN-003]: murmur.yaml:7: invalid context config for \
                    'context.seed_budget': expected a number from 0 to 1, found '1.5'\n  \
                    hint: a fraction, e.g. 0.10 for 10%";
        assert_eq!(text(&e), want);
        let e = s.err(&base("context:\n  seed_overflow_margin: -0.1\n"));
        assert!(e.message.contains("'context.seed_overflow_margin'"), "{e}");
        let m = s.ok(&base(
            "context:\n  seed_budget: 0\n  seed_overflow_margin: 1\n",
        ));
        assert_eq!(m.manifest.context.seed_overflow_margin, 1.0);
    }

    #[test]
    fn compaction_threshold_range() {
        let s = Scratch::new();
        let e = s.err(&base("  compaction:\n    threshold: 0\n"));
        assert!(
            e.message.contains("'inference.compaction.threshold'"),
            "{e}"
        );
        let yaml =
            base("  compaction:\n    threshold: 1\n    dump_summaries: true\n    model: m\n");
        let c = s.ok(&yaml).manifest.inference.compaction;
        assert_eq!(
            (c.threshold, c.dump_summaries, c.model.as_deref()),
            (1.0, true, Some("m"))
        );
    }

    #[test]
    fn unknown_keys_warn_with_did_you_mean_and_line() {
        let s = Scratch::new();
        let yaml = base(
            "lifecycle:\n  queu_depth: 3\n  task-acceptance: queue\n  Conversation: threaded\n\
             observability:\n  otel: true\ntrace:\n  include_tool_outputs: true\n",
        );
        let loaded = s.ok(&yaml);
        let keys: Vec<(usize, &str)> = loaded
            .warnings
            .iter()
            .map(|w| (w.line, w.key.as_str()))
            .collect();
        let want_keys = [
            (7, "lifecycle.queu_depth"),
            (8, "lifecycle.task-acceptance"),
            (9, "lifecycle.Conversation"),
            (10, "observability"),
            (13, "trace.include_tool_outputs"),
        ];
        assert_eq!(keys, want_keys);
        let w = "[capsule-runtime] warning[W-MAN-001]: murmur.yaml";
        let texts: Vec<&str> = loaded.warnings.iter().map(|w| w.text.as_str()).collect();
        let want_texts = [
            format!(
                "{w}:7: unknown key 'lifecycle.queu_depth' ignored (did you mean \
                 'lifecycle.queue_depth'?)"
            ),
            format!(
                "{w}:8: unknown key 'lifecycle.task-acceptance' ignored (did you mean \
                 'lifecycle.task_acceptance'?)"
            ),
            format!(
                "{w}:9: unknown key 'lifecycle.Conversation' ignored (did you mean \
                 'lifecycle.conversation'?)"
            ),
            format!("{w}:10: unknown key 'observability' ignored"),
            format!(
                "{w}:13: unknown key 'trace.include_tool_outputs' ignored (did you mean \
                 'trace.include_tool_output'?)"
            ),
        ];
        assert_eq!(texts, want_texts);
        // Unknown keys are ignored: the misspelt values did not apply.
        assert_eq!(loaded.manifest.lifecycle, Lifecycle::default());
    }

    #[test]
    fn misplaced_key_suggests_its_section() {
        let s = Scratch::new();
        let loaded = s.ok(&base("  max_task_reopens: 2\n"));
        let w = &loaded.warnings[0];
        assert_eq!((w.line, w.key.as_str()), (6, "inference.max_task_reopens"));
        assert!(
            w.text
                .ends_with("ignored (did you mean 'lifecycle.max_task_reopens'?)"),
            "{}",
            w.text
        );
    }

    #[test]
    fn unknown_keys_in_artifacts_and_driver_map() {
        let s = Scratch::new();
        s.file("d.wasm", "");
        let yaml = "name: t\nversion: \"1\"\nartifacts:\n  - name: d\n    runtme: driver\n    \
                    source: d.wasm\n";
        let e = s.err(yaml);
        // runtime defaulted to tool, so the driver lookup fails; the warning was still raised
        // first, but errors win. Check the warning on a manifest that loads.
        assert_eq!(e.code, "E-RUN-005");
        let yaml = format!("{yaml}inference:\n  driver: scripted\n  script: s.json\n");
        let loaded = s.ok(&yaml);
        let w = &loaded.warnings[0];
        assert_eq!((w.line, w.key.as_str()), (5, "artifacts[0].runtme"));
        assert!(
            w.text.ends_with("(did you mean 'artifacts[0].runtime'?)"),
            "{}",
            w.text
        );
    }

    #[test]
    fn driver_config_is_json_and_keys_are_free() {
        let s = Scratch::new();
        s.file("d.wasm", "");
        let yaml = "name: t\nversion: \"1\"\nartifacts:\n  - name: d\n    runtime: driver\n    \
                    source: d.wasm\ninference:\n  endpoint: https://x.example\n  model: m\n  \
                    driver:\n    artifact: d\n    confg: 1\n    config:\n      n: 3\n      f: 1.5\n      \
                    s: \"07\"\n      b: false\n      z: ~\n      l: [a, 2]\n      nest: {k: v}\n";
        let loaded = s.ok(yaml);
        let config = serde_json::json!({
            "n": 3, "f": 1.5, "s": "07", "b": false, "z": null, "l": ["a", 2], "nest": {"k": "v"}
        });
        let want = DriverRef::Artifact {
            name: "d".into(),
            config,
        };
        assert_eq!(loaded.manifest.inference.driver, want);
        let w = &loaded.warnings[0];
        assert_eq!(w.key, "inference.driver.confg");
        assert!(
            w.text
                .ends_with("(did you mean 'inference.driver.config'?)")
        );
    }

    #[test]
    fn env_substitution() {
        let s = Scratch::new();
        let m = s.ok(&base("  api_key: ${LOCAL_MODEL_KEY}\n")).manifest;
        assert_eq!(m.inference.api_key.as_deref(), Some("sk-local"));
        let e = s.err(&base("  api_key: ${MISSING_KEY}\n"));
        let want = "error[E-MAN-003]: murmur.yaml:6: invalid inference config for \
                    'inference.api_key': environment variable MISSING_KEY is not set\n  hint: \
                    export MISSING_KEY=... in the environment mur runs in";
        assert_eq!(text(&e), want);
        for literal in [
            "${lower}",
            "x${LOCAL_MODEL_KEY}",
            "$LOCAL_MODEL_KEY",
            "${1A}",
            "sk-raw",
        ] {
            let m = s.ok(&base(&format!("  api_key: \"{literal}\"\n"))).manifest;
            assert_eq!(m.inference.api_key.as_deref(), Some(literal));
        }
    }

    #[test]
    fn env_names_the_model_server_for_endpoint_model_and_allow_list() {
        let s = Scratch::new();
        let yaml = "name: t\nversion: \"1\"\ninference:\n  driver: openai\n  \
                    endpoint: ${MODEL_URL}\n  model: ${MODEL_NAME}\ncapabilities:\n  \
                    network:\n    allow: [\"${MODEL_URL}\"]\n";
        let m = s.ok(yaml).manifest;
        assert_eq!(
            m.inference.endpoint.as_deref(),
            Some("http://127.0.0.1:11434/v1")
        );
        assert_eq!(m.inference.model, "qwen2.5-coder");
        let rule = NetRule {
            scheme: Some("http".into()),
            host: "127.0.0.1".into(),
            port: Some(11434),
        };
        assert_eq!(m.capabilities.network_allow, vec![rule]);
        let e = s.err(&yaml.replace("${MODEL_NAME}", "${NO_SUCH_MODEL}"));
        assert!(
            e.message
                .ends_with("'inference.model': environment variable NO_SUCH_MODEL is not set"),
            "{e}"
        );
    }

    #[test]
    fn endpoint_rules() {
        let s = Scratch::new();
        let good = [
            "https://api.example.com/v1",
            "HTTPS://API.EXAMPLE.COM",
            "http://localhost:11434",
            "http://127.0.0.1:8080/v1",
            "http://127.9.8.7",
            "http://[::1]:8080",
        ];
        for url in good {
            let m = s.ok(&base(&format!("  endpoint: {url}\n"))).manifest;
            assert_eq!(m.inference.endpoint.as_deref(), Some(url));
        }
        let bad = [
            ("http://example.com", "found host 'example.com'"),
            ("http://localhost@evil.com/", "found host 'evil.com'"),
            ("http://10.0.0.1:80", "found host '10.0.0.1'"),
            ("http://[::2]", "found host '[::2]'"),
            (
                "ftp://localhost",
                "'ftp://localhost' is not an http(s):// URL",
            ),
            ("https://", "'https://' has no host"),
        ];
        for (url, why) in bad {
            let e = s.err(&base(&format!("  endpoint: \"{url}\"\n")));
            assert_eq!(e.code, "E-MAN-003", "{url}");
            let want = "murmur.yaml:6: invalid inference config for 'inference.endpoint': ";
            assert!(e.message.starts_with(want), "{e}");
            assert!(e.message.ends_with(why), "{url}: {e}");
            assert!(e.hint.is_some());
        }
    }

    #[test]
    fn endpoint_required_for_artifact_driver() {
        let s = Scratch::new();
        s.file("d.wasm", "");
        let yaml = "name: t\nversion: \"1\"\nartifacts:\n  - {name: d, runtime: driver, source: \
                    d.wasm}\ninference:\n  model: m\n  driver: {artifact: d}\n";
        let e = s.err(yaml);
        assert_eq!(
            e.message,
            "murmur.yaml:5: missing required field 'inference.endpoint'"
        );
        let m = s
            .ok(&format!("{yaml}  endpoint: https://x.example\n"))
            .manifest;
        let want = DriverRef::Artifact {
            name: "d".into(),
            config: serde_json::json!({}),
        };
        assert_eq!(m.inference.driver, want);
    }

    fn caps(extra: &str) -> String {
        base(&format!("capabilities:\n{extra}"))
    }

    #[test]
    fn network_allow_forms() {
        let s = Scratch::new();
        let yaml = caps(
            "  network:\n    allow:\n      - api.example.com\n      - Example.COM:8443\n      \
             - https://api.openai.com\n      - http://127.0.0.1:11434/\n      - \"[::1]:9000\"\n",
        );
        let rules = s.ok(&yaml).manifest.capabilities.network_allow;
        let rule = |scheme: Option<&str>, host: &str, port: Option<u16>| NetRule {
            scheme: scheme.map(str::to_string),
            host: host.to_string(),
            port,
        };
        let want = vec![
            rule(None, "api.example.com", None),
            rule(None, "example.com", Some(8443)),
            rule(Some("https"), "api.openai.com", None),
            rule(Some("http"), "127.0.0.1", Some(11434)),
            rule(None, "[::1]", Some(9000)),
        ];
        assert_eq!(rules, want);
    }

    #[test]
    fn network_allow_bad_entries() {
        let s = Scratch::new();
        let bad = [
            (
                "https://api.example.com/v1",
                "a path is not allowed, only host[:port]",
            ),
            ("ftp://example.com", "scheme 'ftp' is not http or https"),
            ("example.com:0", "port '0' is not a number from 1 to 65535"),
            (
                "example.com:70000",
                "port '70000' is not a number from 1 to 65535",
            ),
            ("example.com:", "port '' is not a number from 1 to 65535"),
            ("http://", "no host"),
            (
                "exa mple.com",
                "'exa mple.com' is not a host name or address",
            ),
            ("::1", "an IPv6 address needs brackets, e.g. [::1]:8080"),
            ("user@example.com", "credentials are not allowed"),
            (
                "*.example.com",
                "'*.example.com' is not a host name or address",
            ),
        ];
        for (entry, why) in bad {
            let yaml = caps(&format!(
                "  network:\n    allow:\n      - ok.example\n      - \"{entry}\"\n"
            ));
            let e = s.err(&yaml);
            let want = format!(
                "murmur.yaml:10: invalid capabilities config for \
                 'capabilities.network.allow[1]': '{entry}': {why}"
            );
            assert_eq!((e.code, e.message.as_str()), ("E-CAP-001", want.as_str()));
            assert!(e.hint.is_some());
        }
    }

    #[test]
    fn filesystem_scope_rules() {
        let s = Scratch::new();
        for good in ["memory", "./data/notes", "a/b.c"] {
            let yaml = caps(&format!("  filesystem:\n    scope: {good}\n"));
            let m = s.ok(&yaml).manifest;
            assert_eq!(m.capabilities.filesystem_scope.as_deref(), Some(good));
        }
        let bad = [
            ("/etc", "must be relative to the workdir, not absolute"),
            ("../up", "must not contain '..'"),
            ("a/../../b", "must not contain '..'"),
            ("C:\\\\x", "must be relative to the workdir, not absolute"),
            ("\"\"", "must not be empty"),
        ];
        for (scope, why) in bad {
            let e = s.err(&caps(&format!("  filesystem:\n    scope: {scope}\n")));
            assert_eq!(e.code, "E-CAP-002", "{scope}");
            let head = "murmur.yaml:8: invalid capabilities config for \
                        'capabilities.filesystem.scope': ";
            assert!(e.message.starts_with(head), "{e}");
            assert!(e.message.ends_with(why), "{scope}: {e}");
        }
    }

    #[test]
    fn shell_allow_rules() {
        let s = Scratch::new();
        let m = s
            .ok(&caps("  shell:\n    allow: [bash, python3]\n"))
            .manifest;
        assert_eq!(m.capabilities.shell_allow, vec!["bash", "python3"]);
        let e = s.err(&caps("  shell:\n    allow: [bash, /bin/sh]\n"));
        let want = "murmur.yaml:8: invalid capabilities config for \
                    'capabilities.shell.allow[1]': expected a bare binary name such as 'bash', \
                    found '/bin/sh'";
        assert_eq!(e.message, want);
        let e = s.err(&caps("  shell:\n    allow: []\n"));
        let want = "error[E-MAN-003]: murmur.yaml:8: invalid capabilities config for \
                    'capabilities.shell.allow': an empty list grants nothing\n  hint: remove \
                    'shell.allow' to grant no shell, or list binaries, e.g. [bash]";
        assert_eq!(text(&e), want);
    }

    #[test]
    fn other_capability_keys_typed() {
        let s = Scratch::new();
        let yaml = caps(
            "  env:\n    allow: [HOME]\n  limits:\n    memory_bytes: 1024\n    \
             deadline_seconds: 5\n  filesystem:\n    workdir_exec: true\n  shell:\n    \
             strip_env: ['AWS_*']\n",
        );
        let c = s.ok(&yaml).manifest.capabilities;
        assert_eq!(c.env_allow, vec!["HOME"]);
        assert_eq!((c.memory_bytes, c.deadline_seconds), (1024, 5));
        let e = s.err(&caps("  filesystem:\n    workdir_exec: 1\n"));
        assert!(
            e.message.ends_with("expected true or false, found '1'"),
            "{e}"
        );
        let e = s.err(&caps("  limits:\n    memory_bytes: -1\n"));
        assert!(e.message.ends_with("must be at least 1, found -1"), "{e}");
    }

    #[test]
    fn budget_limits_typed_with_defaults() {
        let s = Scratch::new();
        let c = s.ok(&caps("  env:\n    allow: []\n")).manifest.capabilities;
        assert_eq!(c.limits, Limits::default());
        assert_eq!(c.limits.max_tool_result_bytes, 4_194_304);
        assert_eq!(c.limits.max_tool_calls_per_reply, 64);
        let yaml = caps(
            "  limits:\n    max_chunk_bytes: 10\n    max_tool_result_bytes: 11\n    \
             max_driver_reply_bytes: 12\n    max_tool_calls_per_reply: 13\n    \
             max_tool_calls_per_task: 14\n    max_trace_bytes: 15\n    \
             workdir_bytes: 16\n",
        );
        let l = s.ok(&yaml).manifest.capabilities.limits;
        assert_eq!(
            [
                l.max_chunk_bytes,
                l.max_tool_result_bytes,
                l.max_driver_reply_bytes,
                l.max_tool_calls_per_reply,
                l.max_tool_calls_per_task,
                l.max_trace_bytes,
                l.workdir_bytes
            ],
            [10, 11, 12, 13, 14, 15, 16]
        );
        let e = s.err(&caps("  limits:\n    max_tool_calls_per_reply: 0\n"));
        assert!(e.message.ends_with("must be at least 1, found 0"), "{e}");
    }

    fn artifact_yaml(entry: &str) -> String {
        base(&format!("artifacts:\n  - name: a\n{entry}"))
    }

    #[test]
    fn skill_source_rules() {
        let s = Scratch::new();
        s.file("skills/ok/skill.md", "# ok");
        s.file("skills/empty/readme.md", "");
        s.file("skills/file.md", "");
        let ok = s.ok(&artifact_yaml(
            "    runtime: skill\n    source: skills/ok\n",
        ));
        assert_eq!(ok.manifest.artifacts[0].source, s.0.join("skills/ok"));

        let e = s.err(&artifact_yaml(
            "    runtime: skill\n    source: skills/empty\n",
        ));
        let want = format!(
            "murmur.yaml:9: skill.md not found at {}",
            s.path("skills/empty/skill.md")
        );
        assert_eq!((e.code, e.message.as_str()), ("E-IO-001", want.as_str()));

        let e = s.err(&artifact_yaml(
            "    runtime: skill\n    source: skills/file.md\n",
        ));
        let want = format!(
            "murmur.yaml:9: invalid artifacts config for 'artifacts[0].source': a skill's \
             source must be a directory holding skill.md, found {}",
            s.path("skills/file.md")
        );
        assert_eq!((e.code, e.message.as_str()), ("E-MAN-003", want.as_str()));
    }

    #[test]
    fn artifact_source_rules() {
        let s = Scratch::new();
        s.file("t.wasm", "");
        s.file("t.txt", "");
        let m = s.ok(&artifact_yaml("    source: ./t.wasm\n")).manifest;
        assert_eq!(m.artifacts[0].runtime, Runtime::Tool);
        assert_eq!(m.artifacts[0].source, s.0.join("t.wasm"));

        let e = s.err(&artifact_yaml("    source: gone.wasm\n"));
        let want = format!(
            "error[E-IO-001]: murmur.yaml:8: source of artifact 'a' not found at {}\n  hint: \
             'source' is resolved against {}",
            s.path("gone.wasm"),
            s.0.display()
        );
        assert_eq!(text(&e), want);

        let e = s.err(&artifact_yaml("    source: t.txt\n"));
        let want = format!(
            "murmur.yaml:8: invalid artifacts config for 'artifacts[0].source': a tool \
             artifact's source must be a .wasm file, found {}",
            s.path("t.txt")
        );
        assert_eq!(e.message, want);

        let e = s.err(&artifact_yaml("    version: \"1\"\n"));
        assert_eq!(
            e.message,
            "murmur.yaml:7: missing required field 'artifacts[0].source'"
        );
        let e = s.err(&artifact_yaml(
            "    source: t.wasm\n    on_overflow: block\n",
        ));
        assert!(e.message.contains("'artifacts[0].on_overflow'"), "{e}");
        let e = s.err(&artifact_yaml(
            "    source: t.wasm\n    capabilities: [x]\n",
        ));
        assert!(
            e.message.ends_with("expected a mapping, found a list"),
            "{e}"
        );
    }

    #[test]
    fn artifact_names() {
        let s = Scratch::new();
        s.file("t.wasm", "");
        let e = s.err(&base("artifacts:\n  - name: My_Tool\n    source: t.wasm\n"));
        assert_eq!(e.code, "E-MAN-003");
        assert!(e.message.starts_with(
            "murmur.yaml:7: invalid artifacts config for 'artifacts[0].name': 'My_Tool' is not \
             a valid name"
        ));
        assert_eq!(e.hint.as_deref(), Some("e.g. 'my-tool'"));
        let long = "a".repeat(101);
        let e = s.err(&base(&format!(
            "artifacts:\n  - name: {long}\n    source: t.wasm\n"
        )));
        assert!(e.message.contains("is not a valid name"), "{e}");
        let yaml =
            base("artifacts:\n  - name: x\n    source: t.wasm\n  - name: x\n    source: t.wasm\n");
        let e = s.err(&yaml);
        let want = "error[E-MAN-003]: murmur.yaml:9: invalid artifacts config for \
                    'artifacts[1].name': artifact name 'x' is used twice\n  hint: the first is \
                    at line 7; names must be unique";
        assert_eq!(text(&e), want);
        let e = s.err("name: Bad Name\nversion: \"1\"\n");
        assert!(
            e.message
                .starts_with("murmur.yaml:1: invalid manifest config for 'name'")
        );
    }

    #[test]
    fn driver_not_configured() {
        let s = Scratch::new();
        let e = s.err("name: t\nversion: \"1\"\ninference:\n  model: m\n");
        let want = "error[E-RUN-005]: murmur.yaml:3: driver not configured: 'inference.driver' \
                    is not set\n  hint: set 'inference.driver: {artifact: NAME}' naming an \
                    artifacts[] entry with 'runtime: driver', or 'inference.driver: scripted' \
                    with 'inference.script: PATH'";
        assert_eq!(text(&e), want);
        let e = s.err("name: t\nversion: \"1\"\n");
        assert_eq!(e.code, "E-RUN-005");
        assert!(
            e.message.starts_with("murmur.yaml: driver not configured"),
            "{e}"
        );
    }

    #[test]
    fn script_alone_selects_scripted() {
        let s = Scratch::new();
        let m = s
            .ok("name: t\nversion: \"1\"\ninference:\n  script: s.json\n")
            .manifest;
        assert!(
            matches!(m.inference.driver, DriverRef::Builtin { ref name, .. } if name == "scripted")
        );
    }

    #[test]
    fn driver_artifact_lookup() {
        let s = Scratch::new();
        s.file("t.wasm", "");
        let head = "name: t\nversion: \"1\"\nartifacts:\n  - name: drv\n    source: t.wasm\n\
                    inference:\n  endpoint: https://x.example\n  model: m\n";
        let e = s.err(&format!("{head}  driver: {{artifact: dvr}}\n"));
        let want = "error[E-RUN-005]: murmur.yaml:9: driver not configured: \
                    'inference.driver.artifact' names 'dvr', which no artifacts[] entry \
                    declares\n  hint: did you mean 'drv'?";
        assert_eq!(text(&e), want);
        let e = s.err(&format!("{head}  driver:\n    artifact: drv\n"));
        let want = "error[E-MAN-003]: murmur.yaml:10: invalid inference config for \
                    'inference.driver.artifact': artifact 'drv' has runtime tool, not driver\n  \
                    hint: set 'runtime: driver' on the artifact at line 4";
        assert_eq!(text(&e), want);
        let e = s.err(&format!("{head}  driver: {{config: {{}}}}\n"));
        assert_eq!(e.code, "E-RUN-005");
        let e = s.err(&format!("{head}  driver: drv\n"));
        assert_eq!(e.code, "E-MAN-003");
        let hint = "to use the artifact write 'driver: {artifact: drv}'";
        assert_eq!(e.hint.as_deref(), Some(hint));
    }

    #[test]
    fn builtin_driver_names() {
        let s = Scratch::new();
        let yaml = "name: t\nversion: \"1\"\ninference:\n  model: gpt\n  driver: openai\n";
        let m = s.ok(yaml).manifest;
        let want = DriverRef::Builtin {
            name: "openai".into(),
            script: None,
        };
        assert_eq!(m.inference.driver, want);
        let e = s.err("name: t\nversion: \"1\"\ninference:\n  model: m\n  driver: opneai\n");
        assert_eq!(e.hint.as_deref(), Some("did you mean 'openai'?"));
        let e = s.err(&format!("{yaml}  script: s.json\n"));
        assert!(
            e.message
                .starts_with("murmur.yaml:6: invalid inference config for 'inference.script'")
        );
    }

    #[test]
    fn scripted_driver_needs_an_existing_script() {
        let s = Scratch::new();
        let e = s.err("name: t\nversion: \"1\"\ninference:\n  driver: scripted\n");
        assert_eq!(
            e.message,
            "murmur.yaml:3: missing required field 'inference.script'"
        );
        assert_eq!(e.code, "E-MAN-001");
        let e = s.err(
            "name: t\nversion: \"1\"\ninference:\n  driver: scripted\n  script: x/gone.json\n",
        );
        let want = format!(
            "error[E-IO-001]: murmur.yaml:5: driver script not found at {}\n  hint: \
             'inference.script' is resolved against {}",
            s.path("x/gone.json"),
            s.0.display()
        );
        assert_eq!(text(&e), want);
    }

    #[test]
    fn system_prompt_sources() {
        let s = Scratch::new();
        let m = s
            .ok(&base("  system_prompt: \"  Be brief.  \\n\"\n"))
            .manifest;
        assert_eq!(m.inference.system_prompt.as_deref(), Some("Be brief."));
        s.file("prompt.md", "  Verbatim.\n");
        let m = s.ok(&base("  system_prompt_file: prompt.md\n")).manifest;
        assert_eq!(m.inference.system_prompt.as_deref(), Some("  Verbatim.\n"));
        let e = s.err(&base(
            "  system_prompt: a\n  system_prompt_file: prompt.md\n",
        ));
        let want = "error[E-MAN-003]: murmur.yaml:7: invalid inference config for \
                    'inference.system_prompt_file': set at most one of 'inference.system_prompt' \
                    and 'inference.system_prompt_file'\n  hint: keep one prompt source";
        assert_eq!(text(&e), want);
        let e = s.err(&base("  system_prompt_file: nope.md\n"));
        assert_eq!(e.code, "E-RUN-009");
        let head = format!(
            "murmur.yaml:6: system prompt file {} is unreadable: ",
            s.path("nope.md")
        );
        assert!(e.message.starts_with(&head), "{e}");
    }

    #[test]
    fn internal_port_range() {
        let s = Scratch::new();
        let e = s.err(&base("network:\n  internal_port: 65536\n"));
        assert!(
            e.message.ends_with("must be at most 65535, found 65536"),
            "{e}"
        );
        let e = s.err(&base("network:\n  internal_port: 0\n"));
        assert!(e.hint.unwrap().contains("OS pick"));
    }

    #[test]
    fn wrong_section_types() {
        let s = Scratch::new();
        let e = s.err(&base("lifecycle: [a]\n"));
        let want = "murmur.yaml:6: invalid lifecycle config for 'lifecycle': expected a \
                    mapping, found a list";
        assert_eq!(e.message, want);
        let e = s.err(&base("artifacts: {a: 1}\n"));
        assert!(
            e.message.ends_with("expected a list, found a mapping"),
            "{e}"
        );
        let e = s.err(&base("artifacts:\n  - just-a-string\n"));
        assert!(
            e.message
                .ends_with("expected a mapping, found 'just-a-string'"),
            "{e}"
        );
        let e = s.err("name: [x]\nversion: \"1\"\n");
        assert!(
            e.message.ends_with("expected a string, found a list"),
            "{e}"
        );
    }

    #[test]
    fn display_without_hint_is_one_line() {
        let e = ManifestError::new("E-MAN-003", "murmur.yaml:1: x".into());
        assert_eq!(e.to_string(), "error[E-MAN-003]: murmur.yaml:1: x");
    }

    #[test]
    fn aliases_expand_but_are_bounded() {
        let s = Scratch::new();
        let yaml = base("capabilities:\n  shell:\n    allow: &bins [bash]\n    strip_env: *bins\n");
        let m = s.ok(&yaml).manifest;
        assert_eq!(m.capabilities.shell_allow, vec!["bash"]);
        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..8 {
            let p = i - 1;
            bomb.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        let e = s.err(&bomb);
        assert_eq!(e.code, "E-MAN-002");
        assert!(e.message.contains("aliases expand to more than"), "{e}");
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let s = Scratch::new();
        for yaml in [
            format!("{}x", "- ".repeat(20_000)),
            format!("name: {}", "[".repeat(20_000)),
            format!("{}x: 1", "{a: ".repeat(5_000)),
            (0..200)
                .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
                .collect(),
        ] {
            let e = s.err(&yaml);
            assert_eq!(e.code, "E-MAN-002", "{e}");
        }
        let e = s.err(&format!("{}x\n", "- ".repeat(100)));
        assert_eq!(e.message, "murmur.yaml:1: nested deeper than 64 levels");
    }

    /// Odd fragments that reach the parser's and the validator's edges.
    #[rustfmt::skip]
    const PIECES: &[&str] = &[
        "name: t\n", "version: 1\n", "inference:\n", "  driver: scripted\n", "  script: s.json\n",
        "lifecycle:\n", "  queue_depth: -1\n", "  max_task_reopens: 1e400\n", "\t", "- ", "[",
        "]", "{", "}", ": ", "&a ", "*a ", "? ", "|\n", ">-\n", "\"", "'", "#", "\n", "  ",
        "18446744073709551616", "-9223372036854775809", "0x", "0o7", ".inf", "~", "!!str ",
        "capabilities:\n  network:\n    allow: [\"http://\"]\n", "artifacts:\n  - name: x\n",
        "context:\n  seed_budget: .nan\n", "\u{feff}", "é", "\0", "---\n", "...\n",
    ];

    /// Random bytes, random fragments, and the full example with a few bytes changed.
    fn fuzz_input(round: usize, next: &mut impl FnMut() -> usize) -> Vec<u8> {
        let mut bytes: Vec<u8> = Vec::new();
        match round % 3 {
            0 => (0..next() % 64).for_each(|_| bytes.push((next() % 256) as u8)),
            1 => (0..next() % 40).for_each(|_| {
                bytes.extend_from_slice(PIECES[next() % PIECES.len()].as_bytes());
            }),
            _ => {
                bytes = EXAMPLE.as_bytes().to_vec();
                for _ in 0..1 + next() % 4 {
                    let at = next() % bytes.len();
                    match next() % 3 {
                        0 => bytes[at] = (next() % 128) as u8,
                        1 => drop(bytes.remove(at)),
                        _ => bytes.insert(at, b"-:[{ \t\n#&*'\"0"[next() % 13]),
                    }
                }
            }
        }
        bytes
    }

    #[test]
    fn fuzz_never_panics() {
        let s = Scratch::new();
        example_files(&s);
        let path = s.0.join("murmur.yaml");
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            usize::try_from(seed >> 33).unwrap_or(0)
        };
        for round in 0..3000 {
            let bytes = fuzz_input(round, &mut next);
            // In memory: writing thousands of files costs seconds on some file systems.
            let _ = load_bytes(path.clone(), "murmur.yaml".into(), &bytes, &test_env);
        }
    }

    #[test]
    fn yaml_to_json_for_scripts() {
        let yaml = "turns:\n  - text: hi\n    n: 2\n    ok: true\n  - {text: '07'}\n";
        let want =
            serde_json::json!({"turns": [{"text": "hi", "n": 2, "ok": true}, {"text": "07"}]});
        assert_eq!(yaml_to_json(yaml), Ok(want));
        let json = "{\n\t\"turns\": [1, 2.5, null]\n}";
        assert_eq!(
            yaml_to_json(json),
            Ok(serde_json::json!({"turns": [1, 2.5, null]}))
        );
        assert_eq!(yaml_to_json(""), Ok(Json::Null));
        let e = yaml_to_json("a: 1\nb: [1\n").unwrap_err();
        assert_eq!(
            e,
            "line 3: while parsing a flow sequence, expected ',' or ']'"
        );
        let e = yaml_to_json("a:\n  b: .nan\n").unwrap_err();
        assert!(
            e.starts_with("line 2: ") && e.ends_with("JSON has no NaN or infinity"),
            "{e}"
        );
    }

    #[test]
    fn suggestions() {
        let known = ["queue_depth", "task_acceptance", "after_task"];
        assert_eq!(suggest("queu_depth", &known), Some("queue_depth"));
        assert_eq!(suggest("QUEUE-DEPTH", &known), Some("queue_depth"));
        assert_eq!(suggest("after_tsak", &known), Some("after_task"));
        assert_eq!(suggest("completely_else", &known), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(
            misplaced("max_turns", "lifecycle").as_deref(),
            Some("inference.max_turns")
        );
        assert_eq!(misplaced("allow", ""), None);
    }
}
