//! The tools a capsule's model may call: the built-in shell tools, tool components and
//! skills. Dispatch measures, fences and classifies each call; the session writes the
//! frame and the trace line from what it returns.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wasmtime::Store;
use wasmtime::component::{Component, HasSelf, Linker};

use crate::bindings::chunks;
use crate::bindings::message::ToolSpec;
use crate::bindings::tool::exports::murmur::tool::run::Status;
use crate::bindings::tool::murmur::task::task::{self as task_api, TaskInfo};
use crate::bindings::tool::{Tool as Bindings, ToolPre};
use crate::bindings::upstream::{self, murmur::stream::events as upstream_events};
use crate::confine::Jail;
use crate::deadline::{self, Clock};
use crate::driver::trap_text;
use crate::engine::{self, Engine};
use crate::error::Error;
use crate::fence;
use crate::guest_log;
use crate::input::{self, Port};
use crate::meter::{Account, Meter, Refused};
use crate::peer::tool as peer_tool;

mod mcp;
mod peer_call;
mod specs;
use crate::sandbox::{self, Grants, Sandbox, Sandboxed};
use crate::shell::{self, Background, Ran, ShellOutcome, ShellRequest};
use crate::wire::Wire;
pub use mcp::listing as mcp_listing;

pub struct ToolState {
    sandbox: Sandbox,
    wire: Arc<Wire>,
    /// `None` while the tool describes itself at start-up.
    task: Option<TaskInfo>,
    /// How the tool asks for input; `None` outside an A2A task.
    input: Option<Port>,
    /// The call's wall-clock deadline, paused while a person answers `request-input`.
    clock: Arc<Clock>,
}

impl Sandboxed for ToolState {
    fn sandbox(&mut self) -> &mut Sandbox {
        &mut self.sandbox
    }
}
sandbox::wasi_view!(ToolState);

impl task_api::Host for ToolState {
    async fn current(&mut self) -> wasmtime::Result<Option<TaskInfo>> {
        Ok(self.task.clone())
    }

    async fn request_input(&mut self, prompt: String) -> wasmtime::Result<Result<String, String>> {
        let Some(port) = &self.input else {
            return Ok(Err(input::no_a2a_task()));
        };
        self.clock.pause();
        let answer = port.ask(&prompt).await;
        // The wait was the person's time, not the tool's: its deadline counts from here.
        self.clock.start();
        self.sandbox.running_since = Instant::now();
        Ok(answer)
    }
}

/// Upstream's `request-input` has no error value: where ours answers `err`, it traps,
/// and the tool call fails with the reason.
impl upstream::murmur::task::task::Host for ToolState {
    async fn request_input(&mut self, prompt: String) -> wasmtime::Result<String> {
        task_api::Host::request_input(self, prompt)
            .await?
            .map_err(wasmtime::Error::msg)
    }
}

pub enum Kind {
    Shell {
        binary: String,
    },
    Component {
        pre: ToolPre<ToolState>,
    },
    /// Upstream Murmur's tool shape, through `crate::upstream::tool`.
    Upstream {
        pre: upstream::ToolPre<ToolState>,
    },
    Skill {
        text: PathBuf,
    },
    /// `call-member`: a task handed to a peer ([`crate::peer`]).
    Peer {
        desk: Arc<crate::peer::desk::Desk>,
    },
}

pub struct Tool {
    pub name: String,
    pub version: Option<String>,
    pub description: String,
    pub schema: Value,
    pub kind: Kind,
}

impl Tool {
    pub fn runtime(&self) -> &'static str {
        match self.kind {
            Kind::Shell { .. } => "shell",
            Kind::Component { .. } | Kind::Upstream { .. } => "tool",
            Kind::Skill { .. } => "skill",
            Kind::Peer { .. } => "peer",
        }
    }
}

/// What every tool call may use, from the manifest.
pub struct ToolGrants {
    pub workdir: PathBuf,
    pub home: PathBuf,
    /// The host's records' logs: each tool component's output log.
    pub logs_dir: PathBuf,
    /// In the workdir, for the model to read: the full output of shell commands.
    pub shell_logs_dir: PathBuf,
    /// What tool components see: only the variables the manifest grants.
    pub env: Vec<(String, String)>,
    /// What shell commands see: those, and a PATH to find programs.
    pub shell_env: Vec<(String, String)>,
    pub memory: crate::memory::Cap,
    /// The capsule's CPU account, under `mur serve`.
    pub cpu: Option<crate::cpu::Account>,
    pub deadline: Duration,
    /// `lifecycle.shell_grace_secs`: how long a shell command holds the turn.
    pub shell_grace: Duration,
    /// `capabilities.limits.max_tool_result_bytes`.
    pub max_result_bytes: u64,
    /// `capabilities.limits.shell_concurrency` slots, shared by every shell command.
    pub shell_slots: Arc<tokio::sync::Semaphore>,
}

pub struct Tools {
    pub list: Vec<Tool>,
    /// The specs a loop and a driver receive, made once for each state of the MCP
    /// servers' lists (the generation they are keyed on): every inference turn sends
    /// them, and only a server's changed list changes them once the session runs.
    typed: std::sync::Mutex<Option<(u64, Arc<Vec<ToolSpec>>)>>,
    grants: ToolGrants,
    /// The sandbox shell commands start in, set once the workdir exists. Until then a
    /// shell call is refused, never run unconfined.
    jail: Option<Arc<Jail>>,
    /// What tool components' writes to the workdir are counted against, once it exists.
    meter: Option<Arc<Meter>>,
    /// Who the capsule is among peers (`crate::peer`): also what its peer tasks' end
    /// lines are read from.
    desk: Option<Arc<crate::peer::desk::Desk>>,
    /// The session's MCP servers ([`crate::mcp`]).
    mcp: Vec<Arc<crate::mcp::supervisor::Server>>,
}

/// Who asked for a call: a model (through the session loop) sends a JSON object; an
/// upstream capsule component sends `tool-input.data`, which upstream hands its tools
/// as it is, JSON or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    Model,
    Capsule,
}

/// How far a call got, which decides its fence and its trace event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    Tool,
    Skill,
    NotReached,
}

pub struct Dispatched {
    /// Exactly what the model receives.
    pub content: String,
    pub fence_source: Option<String>,
    pub is_error: bool,
    pub exit_code: Option<i32>,
    pub truncated: bool,
    pub duration_ms: u64,
    pub reach: Reach,
    /// Host text for a call that did not run as asked.
    pub error: Option<String>,
    pub shell: Option<ShellOutcome>,
    /// A shell command that outlived its grace period; the session takes it over.
    pub detached: Option<Background>,
    /// The first write the workdir quota refused the tool during the call.
    pub refused: Option<Refused>,
    /// A call to a peer: for its `member_call` line.
    pub peer: Option<peer_tool::Called>,
    /// The result unfenced, for an upstream capsule component that made the call
    /// (`crate::upstream::capsule`): a component is code, not a model, so it gets the
    /// text as the tool gave it. `None` when the call did not run.
    pub plain: Option<Plain>,
}

/// What a tool that ran gave, before the host fenced it for a model.
#[derive(Debug)]
pub enum Plain {
    Text(String),
    /// An upstream tool's own `tool-result`, as it returned it.
    Upstream(upstream::exports::murmur::tool::run::ToolResult),
}

impl Dispatched {
    pub fn not_reached(text: String) -> Self {
        Dispatched {
            content: text.clone(),
            fence_source: None,
            is_error: true,
            exit_code: None,
            truncated: false,
            duration_ms: 0,
            reach: Reach::NotReached,
            error: Some(text),
            shell: None,
            detached: None,
            refused: None,
            peer: None,
            plain: None,
        }
    }

    fn fenced(tool: &str, text: &str, is_error: bool) -> Self {
        Self::fenced_as(&fence::tool_source(tool), text, is_error)
    }

    fn fenced_as(source: &str, text: &str, is_error: bool) -> Self {
        let source = source.to_string();
        Dispatched {
            content: fence::fence(&source, text),
            fence_source: Some(source),
            is_error,
            exit_code: None,
            truncated: false,
            duration_ms: 0,
            reach: Reach::Tool,
            error: None,
            shell: None,
            detached: None,
            refused: None,
            peer: None,
            plain: Some(Plain::Text(text.to_string())),
        }
    }
}

impl Tools {
    pub fn new(grants: ToolGrants) -> Self {
        Tools {
            list: Vec::new(),
            typed: std::sync::Mutex::new(None),
            grants,
            jail: None,
            meter: None,
            desk: None,
            mcp: Vec::new(),
        }
    }

    /// Tool components' writes to the workdir count against `meter` from now on.
    pub fn meter_writes(&mut self, meter: Arc<Meter>) {
        self.meter = Some(meter);
    }

    /// An account for one call's writes; `None` when the session does not meter them.
    fn account(&self) -> Option<Account> {
        self.meter.as_ref().map(|m| m.account())
    }

    /// Every shell command from now on starts in `jail`.
    pub fn confine_shell(&mut self, jail: Arc<Jail>) {
        self.jail = Some(jail);
    }

    pub fn desk(&self) -> Option<&Arc<crate::peer::desk::Desk>> {
        self.desk.as_ref()
    }

    pub fn jail(&self) -> Option<&Arc<Jail>> {
        self.jail.as_ref()
    }

    pub fn add_shell(&mut self, binary: &str) {
        self.forget_specs();
        self.list.push(Tool {
            name: binary.to_string(),
            version: None,
            description: format!(
                "Runs a command with {binary} in the capsule's workdir and returns its exit code, stdout and stderr."
            ),
            schema: serde_json::from_str(shell::input_schema()).unwrap_or_else(|_| json!({"type": "object"})),
            kind: Kind::Shell {
                binary: binary.to_string(),
            },
        });
    }

    /// The capsule's desk, and `call-member` when it has anyone to call.
    pub fn add_peers(&mut self, desk: Arc<crate::peer::desk::Desk>) {
        self.desk = Some(desk.clone());
        let names: Vec<&str> = desk.peers().iter().map(|p| p.name.as_str()).collect();
        if names.is_empty() {
            return;
        }
        self.forget_specs();
        let tool = Tool {
            name: peer_tool::NAME.to_string(),
            version: None,
            description: peer_tool::description(&names),
            schema: peer_tool::schema(&names),
            kind: Kind::Peer { desk: desk.clone() },
        };
        self.list.push(tool);
    }

    pub fn add_skill(&mut self, name: &str, text: PathBuf, description: String) {
        self.forget_specs();
        self.list.push(Tool {
            name: name.to_string(),
            version: None,
            description,
            schema: json!({"type": "object", "properties": {}}),
            kind: Kind::Skill { text },
        });
    }

    /// Links a tool component and asks it to describe itself (an upstream one is
    /// described by its manifest entry or its packaging instead).
    pub async fn add_component(
        &mut self,
        engine: &Engine,
        component: &Component,
        entry: &ToolEntry<'_>,
        wire: &Arc<Wire>,
    ) -> Result<(), Error> {
        let ToolEntry { name, .. } = *entry;
        let version = entry.version.clone();
        let label = format!("tool artifact '{name}'");
        if engine::classify(engine.wasmtime(), component) == engine::Kind::UpstreamRun {
            let pre = engine.linked(component, || link_upstream(engine, component, &label))?;
            let (description, schema) =
                crate::upstream::tool::describe(entry.description, entry.source);
            self.forget_specs();
            self.list.push(Tool {
                name: name.to_string(),
                version,
                description,
                schema,
                kind: Kind::Upstream { pre },
            });
            return Ok(());
        }
        let pre = engine.linked(component, || link(engine, component, &label))?;
        let clock = Arc::new(Clock::running(self.grants.deadline));
        let describing = self.instantiate(name, &pre, (wire.clone(), None, None, None), &clock);
        let started = clock.bound(describing);
        let (mut store, bindings) = started
            .await
            .unwrap_or_else(|| Err(wasmtime::Error::msg(deadline::exceeded(clock.limit()))))
            .map_err(|e| {
                Error::new(
                    "E-RUN-001",
                    format!("{label} could not start: {}", trap_text(&e)),
                )
            })?;
        let spec = clock
            .bound(bindings.murmur_tool_run().call_describe(&mut store))
            .await
            .unwrap_or_else(|| Err(wasmtime::Error::msg(deadline::exceeded(clock.limit()))))
            .map_err(|e| {
                Error::new(
                    "E-RUN-001",
                    format!("{label} failed to describe itself: {}", trap_text(&e)),
                )
            })?;
        let schema: Value = serde_json::from_str(&spec.input_schema).map_err(|e| {
            Error::new(
                "E-RUN-001",
                format!("{label} describes an input schema that is not JSON: {e}"),
            )
        })?;
        self.forget_specs();
        self.list.push(Tool {
            name: name.to_string(),
            version,
            description: spec.description,
            schema,
            kind: Kind::Component { pre },
        });
        Ok(())
    }

    async fn instantiate(
        &self,
        name: &str,
        pre: &ToolPre<ToolState>,
        given: Given,
        clock: &Arc<Clock>,
    ) -> wasmtime::Result<(Store<ToolState>, Bindings)> {
        let mut store = self.store(name, pre.engine(), given, clock)?;
        let bindings = pre.instantiate_async(&mut store).await?;
        Ok((store, bindings))
    }

    /// A store for one instance of tool `name`, in its sandbox, with its limits.
    fn store(
        &self,
        name: &str,
        engine: &wasmtime::Engine,
        (wire, task, input, account): Given,
        clock: &Arc<Clock>,
    ) -> wasmtime::Result<Store<ToolState>> {
        // Describing itself at start-up, before the workdir exists, a tool needs no files.
        let workdir = task.is_some().then_some(self.grants.workdir.as_path());
        let sandbox = Sandbox::new(&Grants {
            workdir,
            env: self.grants.env.clone(),
            memory: self.grants.memory.clone(),
            cpu: self.grants.cpu.clone(),
            deadline: self.grants.deadline,
            output: guest_log::Target::tool(&self.grants.logs_dir, name),
        })
        .map_err(|e| wasmtime::Error::msg(e.message))?
        .metered(account);
        let mut store = Store::new(
            engine,
            ToolState {
                sandbox,
                wire,
                task,
                input,
                clock: clock.clone(),
            },
        );
        sandbox::limit(&mut store);
        Ok(store)
    }

    /// The peers `call-member` reaches, in order; none without the tool.
    pub fn peer_names(&self) -> Vec<String> {
        match self.get(peer_tool::NAME).map(|t| &t.kind) {
            Some(Kind::Peer { desk }) => desk.peers().iter().map(|p| p.name.clone()).collect(),
            _ => Vec::new(),
        }
    }

    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.list.iter().find(|t| t.name == name)
    }

    /// Runs one call. Never fails: every outcome is something the model is told.
    /// `port` lets a tool component ask for input (`None` outside an A2A task).
    /// Runs one call. `traceparent` names the call's span: a peer or an MCP server it
    /// reaches is told it, so their spans join the caller's trace.
    pub async fn dispatch(
        &self,
        name: &str,
        input: &str,
        task: TaskInfo,
        wire: &Arc<Wire>,
        (port, caller, traceparent): (Option<Port>, Caller, Option<String>),
    ) -> Dispatched {
        let started = Instant::now();
        let mut out = match (self.get(name), self.find_mcp(name)) {
            (Some(tool), _) => {
                self.run(tool, input, task, wire, (port, caller, traceparent))
                    .await
            }
            (None, Some((server, tool))) => {
                let via = (port, traceparent.as_deref());
                self.run_mcp(server, &tool, input, wire, via).await
            }
            (None, None) => Dispatched::not_reached(format!(
                "tool '{name}' is not declared in manifest allowlist"
            )),
        };
        if out.reach != Reach::NotReached {
            out.duration_ms = started.elapsed().as_millis() as u64;
        }
        out
    }

    async fn run(
        &self,
        tool: &Tool,
        input: &str,
        task: TaskInfo,
        wire: &Arc<Wire>,
        (port, caller, traceparent): (Option<Port>, Caller, Option<String>),
    ) -> Dispatched {
        match &tool.kind {
            Kind::Shell { binary } => self.run_shell(&tool.name, binary, input).await,
            Kind::Skill { text } => run_skill(&self.grants.workdir, text),
            Kind::Peer { desk } => {
                let via = (port, traceparent);
                self.run_peer(desk, input, &task, wire, via).await
            }
            Kind::Component { .. } | Kind::Upstream { .. } => {
                let as_is = caller == Caller::Capsule && matches!(tool.kind, Kind::Upstream { .. });
                if !as_is && !matches!(serde_json::from_str::<Value>(input), Ok(Value::Object(_))) {
                    return Dispatched::not_reached(format!(
                        "tool '{}' input must be a JSON object",
                        tool.name
                    ));
                }
                let call = Call {
                    task,
                    wire: wire.clone(),
                    port,
                };
                match &tool.kind {
                    Kind::Upstream { pre } => self.run_upstream(&tool.name, pre, input, call).await,
                    Kind::Component { pre } => {
                        self.run_component(&tool.name, pre, input, call).await
                    }
                    _ => unreachable!("matched above"),
                }
            }
        }
    }

    async fn run_shell(&self, name: &str, binary: &str, input: &str) -> Dispatched {
        let command = match shell::parse_input(input) {
            Ok(command) => command,
            Err(e) => return Dispatched::not_reached(e),
        };
        let Some(jail) = &self.jail else {
            return Dispatched::not_reached(
                "the shell sandbox was not set up; the command was not run".into(),
            );
        };
        let request = ShellRequest {
            binary: binary.to_string(),
            command,
            workdir: self.grants.workdir.clone(),
            home: self.grants.home.clone(),
            logs_dir: self.grants.shell_logs_dir.clone(),
            timeout: self.grants.deadline,
            env: jail.environment(&self.grants.shell_env, &self.grants.home),
            jail: jail.clone(),
            slots: self.grants.shell_slots.clone(),
        };
        match shell::run_with_grace(&request, Some(self.grants.shell_grace)).await {
            Ok(Ran::Detached(background)) => {
                let mut out = Dispatched::fenced(name, &background.text, false);
                out.detached = Some(background);
                out
            }
            Ok(Ran::Done(outcome)) => {
                let mut out = Dispatched::fenced(name, &outcome.text, false);
                out.exit_code = Some(outcome.exit_code);
                out.truncated = outcome.truncated;
                out.shell = Some(outcome);
                out
            }
            Err(e) => {
                let mut out = Dispatched::fenced(name, &e, true);
                out.error = Some(format!("shell execution failed: {e}"));
                out
            }
        }
    }

    async fn run_component(
        &self,
        name: &str,
        pre: &ToolPre<ToolState>,
        input: &str,
        call: Call,
    ) -> Dispatched {
        // The store lives in this future: a call past its deadline is dropped with it,
        // and the next call starts a fresh instance, as after a trap.
        let clock = Arc::new(Clock::running(self.grants.deadline));
        let account = self.account();
        let given = (call.wire, Some(call.task), call.port, account.clone());
        let called = async {
            let (mut store, bindings) = self.instantiate(name, pre, given, &clock).await?;
            bindings
                .murmur_tool_run()
                .call_call(&mut store, input)
                .await
        };
        let called = clock
            .bound(called)
            .await
            .unwrap_or_else(|| Err(wasmtime::Error::msg(deadline::exceeded(clock.limit()))));
        let mut out = Self::component_outcome(name, called, self.grants.max_result_bytes);
        out.refused = account.and_then(|a| a.refusal());
        out
    }

    /// What a tool component's call returned, as the model is told it.
    fn component_outcome(
        name: &str,
        called: wasmtime::Result<crate::bindings::tool::exports::murmur::tool::run::ToolResult>,
        max_result_bytes: u64,
    ) -> Dispatched {
        match called {
            Ok(result) => {
                if let Some(why) = oversized(&result, max_result_bytes) {
                    // The model is told the limit instead; the text itself goes now.
                    drop(result);
                    let mut out = Dispatched::not_reached(format!("tool '{name}' failed: {why}"));
                    out.reach = Reach::Tool;
                    return out;
                }
                let text = result
                    .data
                    .or(result.summary)
                    .unwrap_or_else(|| "tool returned no data".to_string());
                let mut out = Dispatched::fenced(name, &text, result.status != Status::Passed);
                out.truncated = result.truncated;
                out
            }
            Err(trap) => {
                let mut out =
                    Dispatched::not_reached(format!("tool '{name}' failed: {}", trap_text(&trap)));
                out.reach = Reach::Tool;
                out
            }
        }
    }
}

impl Tools {
    /// One call of an upstream tool: a fresh instance, the same sandbox, deadline and
    /// result limit as ours, its `tool-result` read by `crate::upstream::tool`.
    async fn run_upstream(
        &self,
        name: &str,
        pre: &upstream::ToolPre<ToolState>,
        input: &str,
        call: Call,
    ) -> Dispatched {
        let clock = Arc::new(Clock::running(self.grants.deadline));
        let account = self.account();
        let given = (call.wire, Some(call.task), call.port, account.clone());
        let called = async {
            let mut store = self.store(name, pre.engine(), given, &clock)?;
            let bindings = pre.instantiate_async(&mut store).await?;
            bindings
                .murmur_tool_run()
                .call_run(&mut store, &crate::upstream::tool::input(input))
                .await
        };
        let called = clock
            .bound(called)
            .await
            .unwrap_or_else(|| Err(wasmtime::Error::msg(deadline::exceeded(clock.limit()))));
        // A capsule component that made the call gets the result as the tool returned it.
        let mut kept = None;
        let read = called.map_err(|trap| trap_text(&trap)).and_then(|result| {
            kept = Some(result.clone());
            crate::upstream::tool::outcome(
                result,
                &self.grants.workdir,
                self.grants.max_result_bytes,
            )
        });
        let mut out = match read {
            Ok(outcome) => {
                let mut out = Dispatched::fenced(name, &outcome.text, outcome.is_error);
                out.truncated = outcome.truncated;
                out.plain = kept.map(Plain::Upstream);
                out
            }
            Err(why) => {
                let mut out = Dispatched::not_reached(format!("tool '{name}' failed: {why}"));
                out.reach = Reach::Tool;
                out
            }
        };
        out.refused = account.and_then(|a| a.refusal());
        out
    }
}

/// What the manifest says of a tool component besides its bytes.
pub struct ToolEntry<'a> {
    pub name: &'a str,
    pub version: Option<String>,
    pub description: Option<&'a str>,
    /// The `.wasm` file; an upstream tool's packaging `murmur.yaml` sits beside it.
    pub source: &'a std::path::Path,
}

/// Checks an upstream tool's imports and links it: WASI, upstream's task and stream
/// interfaces, and nothing else of ours.
pub(crate) fn link_upstream(
    engine: &Engine,
    component: &Component,
    label: &str,
) -> Result<upstream::ToolPre<ToolState>, Error> {
    crate::upstream::check_imports(engine, component, label, &crate::upstream::TOOL_IMPORTS)?;
    let mut linker = Linker::<ToolState>::new(engine.wasmtime());
    let link = |e: wasmtime::Error| {
        Error::new("E-RUN-031", format!("{label} cannot be linked: {e:#}"))
            .hint("an upstream tool may import only WASI 0.2, murmur:task/task@0.1.0 and murmur:stream/events@0.1.0")
    };
    crate::meter::add_to_linker(&mut linker).map_err(link)?;
    upstream_events::add_to_linker::<_, HasSelf<Arc<Wire>>>(&mut linker, |s| &mut s.wire)
        .map_err(link)?;
    upstream::murmur::task::task::add_to_linker::<_, HasSelf<ToolState>>(&mut linker, |s| s)
        .map_err(link)?;
    linker
        .instantiate_pre(component)
        .and_then(upstream::ToolPre::new)
        .map_err(link)
}

/// A result over `max_tool_result_bytes`, in words; checked before anything copies it.
fn oversized(
    result: &crate::bindings::tool::exports::murmur::tool::run::ToolResult,
    limit: u64,
) -> Option<String> {
    let len = |s: &Option<String>| s.as_ref().map_or(0, |s| s.len() as u64);
    let size = len(&result.data) + len(&result.summary);
    (size > limit).then(|| crate::limits::over("tool result", size, "max_tool_result_bytes", limit))
}

/// What a tool instance's store is given: the wire its chunks go to, the task, how it
/// asks for input, and the account its workdir writes are taken from. The last three
/// are `None` while it describes itself.
type Given = (Arc<Wire>, Option<TaskInfo>, Option<Port>, Option<Account>);

/// What one component call runs with, besides its input.
struct Call {
    task: TaskInfo,
    wire: Arc<Wire>,
    port: Option<Port>,
}

/// The skill's staged text, `text` relative to the workdir: read beneath it, so a link
/// a tool left there cannot hand the model a file from outside.
fn run_skill(workdir: &std::path::Path, text: &std::path::Path) -> Dispatched {
    let read = crate::rooted::Rooted::open(workdir)
        .and_then(|view| view.read_to_string(&text.to_string_lossy()));
    match read {
        Ok(content) => Dispatched {
            plain: Some(Plain::Text(content.clone())),
            content,
            fence_source: None,
            is_error: false,
            exit_code: None,
            truncated: false,
            duration_ms: 0,
            reach: Reach::Skill,
            error: None,
            shell: None,
            detached: None,
            refused: None,
            peer: None,
        },
        Err(e) => {
            let mut out = Dispatched::not_reached(format!(
                "skill text {} could not be read: {e}",
                text.display()
            ));
            out.reach = Reach::Skill;
            out
        }
    }
}

/// Checks a tool component against its world and links it, as every capsule does
/// (and `mur component check`, so that its errors are the capsule's).
pub(crate) fn link(
    engine: &Engine,
    component: &Component,
    label: &str,
) -> Result<ToolPre<ToolState>, Error> {
    engine::check_world(engine, component, &engine::TOOL, label)?;
    let mut linker = Linker::<ToolState>::new(engine.wasmtime());
    let link =
        |e: wasmtime::Error| Error::new("E-RUN-031", format!("{label} cannot be linked: {e:#}"));
    crate::meter::add_to_linker(&mut linker).map_err(link)?;
    chunks::add_to_linker::<_, HasSelf<Arc<Wire>>>(&mut linker, |s| &mut s.wire).map_err(link)?;
    task_api::add_to_linker::<_, HasSelf<ToolState>>(&mut linker, |s| s).map_err(link)?;
    linker
        .instantiate_pre(component)
        .and_then(ToolPre::new)
        .map_err(link)
}
