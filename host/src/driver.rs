//! The inference driver component: instantiated once per session, re-instantiated
//! after a trap, and called once per inference turn. What it is sent is encoded in
//! `request`, what it answers decoded in `reply`.

pub mod reply;
pub mod request;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::Store;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::bindings::driver::exports::murmur::driver::inference::{
    InferError, Request, Response, Settings,
};
use crate::bindings::driver::{Driver as Bindings, DriverPre};
use crate::bindings::message::Block;
use crate::bindings::upstream;
use crate::bindings::{chunks, message};
use crate::deadline::{self, Clock};
use crate::engine::{self, Engine};
use crate::error::Error;
use crate::guest_log;
use crate::outbound::{Event, NetPolicy, Outbound};
use crate::sandbox::{self, Grants, Sandbox, Sandboxed};
use crate::wire::Wire;

pub struct DriverState {
    sandbox: Sandbox,
    wire: Arc<Wire>,
    http: WasiHttpCtx,
    outbound: Outbound,
}

impl WasiHttpView for DriverState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            hooks: &mut self.outbound,
            table: self.sandbox.table(),
            ctx: &mut self.http,
        }
    }
}

/// The typed conversation's interface holds types only.
impl message::Host for DriverState {}

impl Sandboxed for DriverState {
    fn sandbox(&mut self) -> &mut Sandbox {
        &mut self.sandbox
    }
}
sandbox::wasi_view!(DriverState);

/// A driver component linked against its world: ours, or upstream's through
/// `crate::upstream::driver`.
enum Pre {
    Ours(DriverPre<DriverState>),
    Upstream(upstream::ToolPre<DriverState>),
}

/// An instance's exports, by world.
enum Linked {
    Ours(Bindings),
    Upstream(upstream::Tool),
}

/// A driver ready to instantiate: compiled, checked and linked once.
pub struct DriverComponent {
    pre: Pre,
    settings: Settings,
    env: Vec<(String, String)>,
    memory: crate::memory::Cap,
    cpu: Option<crate::cpu::Account>,
    deadline: Duration,
    /// `capabilities.limits.max_driver_reply_bytes`.
    max_reply_bytes: u64,
    network: Arc<NetPolicy>,
    output: guest_log::Target,
    /// What the driver's requests ran into, until the session writes it to the trace.
    events: Arc<Mutex<Vec<Event>>>,
    /// For an upstream driver: the key its requests to the endpoint carry.
    credential: Option<Arc<crate::outbound::Credential>>,
    /// The `traceparent` of the turn under way, which its requests carry.
    context: crate::outbound::TraceContext,
    pub label: String,
}

pub struct DriverLimits {
    pub env: Vec<(String, String)>,
    pub memory: crate::memory::Cap,
    /// The capsule's CPU account, under `mur serve`.
    pub cpu: Option<crate::cpu::Account>,
    pub deadline: Duration,
    pub max_reply_bytes: u64,
    pub network: NetPolicy,
    /// Where the driver's stdout and stderr go: `driver.log` in it.
    pub logs_dir: PathBuf,
    /// `MURMUR_CAPSULE_*` and `MURMUR_SESSION_ID`, which an upstream driver is given.
    pub identity: Vec<(String, String)>,
}

impl DriverComponent {
    pub fn new(
        engine: &Engine,
        component: &Component,
        label: String,
        settings: Settings,
        limits: DriverLimits,
    ) -> Result<Self, Error> {
        let mut env = limits.env;
        let mut credential = None;
        let pre = if engine::classify(engine.wasmtime(), component) == engine::Kind::UpstreamRun {
            // Upstream drivers are configured by their environment, not by a call, and
            // send no key: upstream's host adds it on the way out, as this one does.
            env.extend(crate::upstream::driver::environment(&settings, &label));
            env.extend(limits.identity);
            credential = crate::upstream::driver::credential(&settings);
            Pre::Upstream(engine.linked(component, || link_upstream(engine, component, &label))?)
        } else {
            Pre::Ours(engine.linked(component, || link(engine, component, &label))?)
        };
        Ok(DriverComponent {
            pre,
            settings,
            env,
            memory: limits.memory.clone(),
            cpu: limits.cpu.clone(),
            deadline: limits.deadline,
            max_reply_bytes: limits.max_reply_bytes,
            network: Arc::new(limits.network),
            output: guest_log::Target::driver(&limits.logs_dir),
            events: Arc::default(),
            credential,
            context: crate::outbound::TraceContext::default(),
            label,
        })
    }

    /// A fresh instance, configured. Drivers see no filesystem. The error is why the
    /// driver could not be called, in words (the task's `driver invocation failed: ...`).
    pub async fn instantiate(&self, wire: Arc<Wire>) -> Result<Driver, String> {
        let sandbox = Sandbox::new(&Grants {
            workdir: None,
            env: self.env.clone(),
            memory: self.memory.clone(),
            cpu: self.cpu.clone(),
            deadline: self.deadline,
            output: self.output.clone(),
        })
        .map_err(|e| e.message)?;
        let state = DriverState {
            sandbox,
            wire,
            http: WasiHttpCtx::new(),
            outbound: Outbound::new(self.network.clone(), self.events.clone())
                .with_credential(self.credential.clone())
                .with_context(self.context.clone()),
        };
        let engine = match &self.pre {
            Pre::Ours(pre) => pre.engine(),
            Pre::Upstream(pre) => pre.engine(),
        };
        let mut store = Store::new(engine, state);
        sandbox::limit(&mut store);
        // Starting and configuring is one call with one deadline; past it the store
        // is dropped with this future.
        let configured = async {
            let pre = match &self.pre {
                Pre::Ours(pre) => pre,
                Pre::Upstream(pre) => {
                    let bindings = pre
                        .instantiate_async(&mut store)
                        .await
                        .map_err(|e| trap_text(&e))?;
                    return Ok(Linked::Upstream(bindings));
                }
            };
            let bindings = pre
                .instantiate_async(&mut store)
                .await
                .map_err(|e| trap_text(&e))?;
            bindings
                .murmur_driver_inference()
                .call_configure(&mut store, &self.settings)
                .await
                .map_err(|e| trap_text(&e))?
                .map_err(|e| format!("{} refused its configuration: {e}", self.label))?;
            Ok(Linked::Ours(bindings))
        };
        let bindings = Clock::running(self.deadline)
            .bound(configured)
            .await
            .unwrap_or_else(|| Err(deadline::exceeded(self.deadline)))?;
        Ok(Driver {
            store,
            bindings,
            max_reply_bytes: self.max_reply_bytes,
        })
    }

    /// How long one call may run (`capabilities.deadline_seconds`).
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// The capsule's network policy (`capabilities.network.allow`, the request
    /// timeouts), which an upstream capsule component's own requests are held to too.
    pub fn network(&self) -> &NetPolicy {
        &self.network
    }

    /// The turn the driver's requests are part of from now on: they carry its
    /// `traceparent`, so the model server's spans join the turn's.
    pub fn set_traceparent(&self, traceparent: Option<String>) {
        self.context.set(traceparent);
    }

    /// What the driver's requests ran into since the last call, oldest first.
    pub fn take_events(&self) -> Vec<Event> {
        std::mem::take(&mut *self.events.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

pub struct Driver {
    store: Store<DriverState>,
    bindings: Linked,
    max_reply_bytes: u64,
}

impl Driver {
    /// `Err` is a trap or the deadline (the instance is unusable either way: a call
    /// stopped at its deadline was dropped mid-way); `Ok(Err)` the driver's own failure.
    /// A reply (or error text) over `max_driver_reply_bytes` fails the call like a trap:
    /// the session drops the instance, and the big reply with it, at once.
    pub async fn infer(
        &mut self,
        request: &Request,
    ) -> wasmtime::Result<Result<Response, InferError>> {
        let sandbox = &mut self.store.data_mut().sandbox;
        sandbox.running_since = Instant::now();
        let limit = sandbox.deadline;
        let bindings = match &self.bindings {
            Linked::Ours(bindings) => bindings,
            Linked::Upstream(bindings) => {
                let input = crate::upstream::driver::input(request);
                let call = bindings.murmur_tool_run().call_run(&mut self.store, &input);
                let result = Clock::running(limit)
                    .bound(call)
                    .await
                    .unwrap_or_else(|| Err(wasmtime::Error::msg(deadline::exceeded(limit))))?;
                // Measured before parsing, so a flood is never copied into blocks.
                let size = crate::upstream::driver::result_bytes(&result);
                if size > self.max_reply_bytes {
                    drop(result);
                    let why = crate::limits::over(
                        "driver reply",
                        size,
                        "max_driver_reply_bytes",
                        self.max_reply_bytes,
                    );
                    return Err(wasmtime::Error::msg(why));
                }
                return Ok(crate::upstream::driver::response(result));
            }
        };
        let call = bindings
            .murmur_driver_inference()
            .call_infer(&mut self.store, request);
        let reply = Clock::running(limit)
            .bound(call)
            .await
            .unwrap_or_else(|| Err(wasmtime::Error::msg(deadline::exceeded(limit))))?;
        let (what, size) = match &reply {
            Ok(response) => ("driver reply", response_bytes(response)),
            Err(InferError::Failed(text) | InferError::Malformed(text)) => {
                ("driver error", text.len() as u64)
            }
        };
        if size > self.max_reply_bytes {
            drop(reply);
            let why =
                crate::limits::over(what, size, "max_driver_reply_bytes", self.max_reply_bytes);
            return Err(wasmtime::Error::msg(why));
        }
        Ok(reply)
    }
}

/// What a reply holds, in bytes of text: the measure of `max_driver_reply_bytes`.
fn response_bytes(response: &Response) -> u64 {
    response
        .content
        .iter()
        .map(|block| match block {
            Block::Text(text) => text.len(),
            Block::Thinking(t) => t.text.len() + t.signature.as_ref().map_or(0, String::len),
            Block::ToolCall(call) => call.id.len() + call.name.len() + call.input.len(),
            Block::ToolResult(r) => r.call_id.len() + r.content.len(),
        } as u64)
        .sum()
}

/// Checks a driver component against its world and links it.
pub(crate) fn link(
    engine: &Engine,
    component: &Component,
    label: &str,
) -> Result<DriverPre<DriverState>, Error> {
    engine::check_world(engine, component, &engine::DRIVER, label)?;
    let mut linker = Linker::<DriverState>::new(engine.wasmtime());
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(link_error(label))?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)
        .map_err(link_error(label))?;
    message::add_to_linker::<_, HasSelf<DriverState>>(&mut linker, |s| s)
        .map_err(link_error(label))?;
    chunks::add_to_linker::<_, HasSelf<Arc<Wire>>>(&mut linker, |s| &mut s.wire)
        .map_err(link_error(label))?;
    linker
        .instantiate_pre(component)
        .and_then(DriverPre::new)
        .map_err(link_error(label))
}

/// Checks an upstream driver's imports and links it: WASI, wasi:http (through the same
/// outbound policy as ours) and upstream's stream events.
pub(crate) fn link_upstream(
    engine: &Engine,
    component: &Component,
    label: &str,
) -> Result<upstream::ToolPre<DriverState>, Error> {
    crate::upstream::check_imports(engine, component, label, &crate::upstream::DRIVER_IMPORTS)?;
    let mut linker = Linker::<DriverState>::new(engine.wasmtime());
    let error = |e: wasmtime::Error| {
        Error::new("E-RUN-031", format!("{label} cannot be linked: {e:#}")).hint(
            "an upstream driver may import only WASI 0.2 (wasi:http included) and murmur:stream/events@0.1.0",
        )
    };
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(error)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(error)?;
    upstream::murmur::stream::events::add_to_linker::<_, HasSelf<Arc<Wire>>>(&mut linker, |s| {
        &mut s.wire
    })
    .map_err(error)?;
    linker
        .instantiate_pre(component)
        .and_then(upstream::ToolPre::new)
        .map_err(error)
}

fn link_error(label: &str) -> impl Fn(wasmtime::Error) -> Error + '_ {
    move |e| {
        Error::new("E-RUN-031", format!("{label} cannot be linked: {e:#}")).hint(
            "a driver may import only WASI 0.2 (wasi:http included) and murmur:text/chunks@0.2.0",
        )
    }
}

/// A trap's cause in one line, without wasmtime's backtrace.
pub fn trap_text(e: &wasmtime::Error) -> String {
    let text = match e.downcast_ref::<wasmtime::Trap>() {
        Some(trap) => trap.to_string(),
        None => e.root_cause().to_string(),
    };
    let first = text.lines().next().unwrap_or("trap");
    if first.starts_with(FUEL_EXHAUSTED) {
        // wasmtime's words name none of our keys: say which limits set the bound.
        return "the component handed the host more data in one call than its limits \
                allow (capabilities.limits.max_answer_bytes, max_conversation_bytes, \
                max_conversation_messages, max_conversation_blocks): the call was refused \
                before the host kept any of it"
            .to_string();
    }
    first.to_string()
}

/// How wasmtime says a call passed its hostcall fuel (`memory::Cap::hostcall_bytes`).
const FUEL_EXHAUSTED: &str = "too much data is being copied between the host and the guest";
