//! The host side of `murmur:session`: what a session loop component can ask of the
//! host. The loop decides what happens next (messages, tools and parameters of each
//! inference, how tool calls run, when to compact, what a threaded context keeps); the
//! host counts turns, dispatches tools, writes frames, the trace and the result, and
//! enforces the limits.
//!
//! Each host call about the running task goes through `current::Current`: the task and
//! the session it runs in. `turn` is one inference turn, `call` a reply's tool calls,
//! `ending` a task's end, `lifecycle` the hooks fired on the way (compaction included),
//! `progress` the loop's own status, its budget and its follow-up tasks, `budget` the
//! call bounds and the workdir quota, `interrupt` a loop stopped from outside.

mod budget;
mod call;
mod capsule;
mod current;
mod ending;
mod interrupt;
mod lifecycle;
mod peers;
mod process;
mod progress;
mod turn;

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::Store;
use wasmtime::component::{Component, HasSelf, Linker};

use crate::bindings::chunks;
use crate::bindings::message::{Message, ToolCall, ToolResult, ToolSpec};
use crate::bindings::session_loop::exports::murmur::session::loop_::Config;
use crate::bindings::session_loop::murmur::session::host::Host;
use crate::bindings::session_loop::murmur::session::types::{
    self, InferenceError, InferenceReply, InferenceRequest, Task, TaskBudget, TaskOutcome, Usage,
};
use crate::bindings::session_loop::{SessionLoop, SessionLoopPre};
use crate::control::{FinishedTasks, RunningTask};
use crate::deadline::Clock;
use crate::detached::Registry;
use crate::driver::request;
use crate::driver::{Driver, DriverComponent, trap_text};
use crate::engine::{self, Engine};
use crate::error::Error;
use crate::guest_log;
use crate::input::Inbox;
use crate::limits::Limits;
use crate::manifest::Compaction;
use crate::meter::Meter;
use crate::queue::Queue;
use crate::quota::Quota;
use crate::sandbox::{self, Grants, Sandbox, Sandboxed};
use crate::threads::Threads;
use crate::tools::Tools;
use crate::trace::SessionTrace;
use crate::trace::line::Totals;
use crate::wire::Wire;
use crate::workdir::Workdir;
use current::Running;
pub use interrupt::DEADLINE_CODE;
use interrupt::Interrupt;
pub use lifecycle::SessionHooks;

/// The session a loop component runs in: what the manifest fixes for its host, and the
/// handles the host works through. `mur run` builds it and keeps clones of the handles
/// it shares with the server and the launcher.
pub struct Session {
    pub settings: Settings,
    pub trace: Arc<SessionTrace>,
    pub wire: Arc<Wire>,
    pub queue: Arc<Queue>,
    /// Where a tool's `request-input` wait is answered.
    pub inbox: Arc<Inbox>,
    pub running: Arc<RunningTask>,
    pub finished: Arc<FinishedTasks>,
    /// Shell commands that outlived their grace period and still run.
    pub detached: Arc<Registry>,
    pub workdir: Arc<Workdir>,
    pub quota: Quota,
    /// What WASM guests' writes to the workdir are counted against as they happen
    /// (`None` only for the meter's benchmark: see `capsule::launch`).
    pub meter: Option<Arc<Meter>>,
    /// `lifecycle.conversation: threaded`: each context's conversation so far, handed
    /// to the next task of that context and kept on disk.
    pub threads: Option<Threads>,
    /// `capabilities.limits.max_records_bytes`: a refused write ends the session.
    pub records: Arc<crate::records::Budget>,
    pub hooks: Arc<SessionHooks>,
    pub tools: Arc<Tools>,
    pub driver: DriverComponent,
    /// Under `inference.transport: process`, the harness that answers every `infer`.
    pub harness: Option<Arc<crate::harness::Harness>>,
    /// The spend ceilings every inference call is checked against (`crate::spend`).
    pub spend: crate::spend::Spend,
}

/// What the manifest fixes for the loop's host.
pub struct Settings {
    /// What every driver request carries: model, output cap, system prompt.
    pub request: request::Base,
    pub max_turns: u32,
    /// `lifecycle.max_task_reopens`.
    pub max_task_reopens: u32,
    /// `lifecycle.parallel_tools`: the tool calls of one `call-tools` run at once.
    pub parallel_tools: usize,
    /// `trace.include_tool_output`: the text each tool call returned, on its trace line.
    pub include_tool_output: bool,
    pub context: ContextPolicy,
    pub grants: LoopGrants,
    /// `capabilities.limits`: the call bounds, counted here.
    pub limits: Limits,
    /// Whether the loop, parked between tasks, gives back the process's launch-only
    /// pages (see `idle`): only when the capsule has the process to itself (`mur
    /// run`); under `mur serve` another capsule may be running that code.
    pub idle_shed: bool,
}

/// How big a conversation may grow, and what a seed may take of it.
pub struct ContextPolicy {
    /// `context.max_tokens`.
    pub window: Option<u32>,
    pub seed_budget: f64,
    pub seed_margin: f64,
    pub process_transport: bool,
    pub compaction: Compaction,
}

/// What the session loop component may see.
pub struct LoopGrants {
    pub env: Vec<(String, String)>,
    pub memory: crate::memory::Cap,
    pub cpu: Option<crate::cpu::Account>,
    pub deadline: Duration,
}

pub struct LoopState {
    sandbox: Sandbox,
    session: Session,
    driver: Option<Driver>,
    running: Option<Running>,
    totals: Totals,
    deadline: Deadline,
}

impl Sandboxed for LoopState {
    fn sandbox(&mut self) -> &mut Sandbox {
        &mut self.sandbox
    }
}
sandbox::wasi_view!(LoopState);

/// The loop's wall-clock deadline: it runs from a task's start to its end (host calls
/// do not reset it) and from then to the next `next-task`, where it pauses. It holds
/// while a tool or the driver runs: those have deadlines of their own, of the same
/// `deadline_seconds`, which one slow call would otherwise use up for the whole task.
/// The epoch deadline (the sandbox's `running_since`) moves with it.
struct Deadline {
    clock: Arc<Clock>,
    /// When the running tool or driver call began, while the deadline holds.
    held_at: Option<Instant>,
}

impl Deadline {
    /// Both deadlines (wall clock and epoch) count from now.
    fn restart(&mut self, running_since: &mut Instant) {
        self.held_at = None;
        self.clock.start();
        *running_since = Instant::now();
    }

    /// A tool or driver call begins: the loop's deadline holds until it returns.
    fn hold(&mut self) {
        self.clock.hold();
        self.held_at = Some(Instant::now());
    }

    /// The call returned (or was canceled): both deadlines count on from where they
    /// were, the epoch one too.
    fn resume(&mut self, running_since: &mut Instant) {
        if let Some(at) = self.held_at.take() {
            *running_since += at.elapsed();
            self.clock.resume();
        }
    }
}

const CANCELED: &str = "task canceled";

/// A failed trace write ends the running task `failed` and the session: the loop
/// traps with this error, wherever the write was made.
fn trace_failed(e: std::io::Error) -> wasmtime::Error {
    wasmtime::Error::msg(format!("{TRACE_FAILED}: {e}"))
}

const TRACE_FAILED: &str = "trace write failed";
const RECORDS_FULL: &str = "records budget exhausted";

impl LoopState {
    /// Stops the loop at its next step once any trace write has failed (one made by the
    /// server or a hook as much as one of the loop's own).
    /// So does a write the records budget refused.
    fn trace_intact(&self) -> wasmtime::Result<()> {
        if let Some(why) = self.session.trace.failure() {
            return Err(wasmtime::Error::msg(format!("{TRACE_FAILED}: {why}")));
        }
        match self.session.records.failure() {
            Some(why) => Err(wasmtime::Error::msg(format!("{RECORDS_FULL}: {why}"))),
            None => Ok(()),
        }
    }

    fn restart_deadline(&mut self) {
        self.deadline.restart(&mut self.sandbox.running_since);
    }

    fn resume_deadline(&mut self) {
        self.deadline.resume(&mut self.sandbox.running_since);
    }

    async fn turn(
        &mut self,
        request: InferenceRequest,
    ) -> wasmtime::Result<Result<InferenceReply, InferenceError>> {
        self.trace_intact()?;
        match self.current() {
            Some(mut current) => current.turn(request).await,
            None => Ok(Err(InferenceError::Refused(outside("infer")))),
        }
    }

    async fn run_tools(&mut self, calls: Vec<ToolCall>) -> wasmtime::Result<Outcomes> {
        match self.current() {
            Some(mut current) => current.tools(calls).await.map(Ok),
            None => Ok(Err(outside("call-tools"))),
        }
    }
}

/// What `call-tools` answers.
type Outcomes = Result<Vec<ToolResult>, String>;

/// The error of a host call that needs a running task, made between tasks.
fn outside(what: &str) -> String {
    format!("the session loop called {what} outside a task")
}

impl types::Host for LoopState {}

impl crate::bindings::message::Host for LoopState {}

/// A loop streams its own text as a driver or a tool does.
impl chunks::Host for LoopState {
    async fn text(&mut self, chunk: String) -> wasmtime::Result<()> {
        chunks::Host::text(&mut self.session.wire, chunk).await
    }

    async fn thinking(&mut self, chunk: String) -> wasmtime::Result<()> {
        chunks::Host::thinking(&mut self.session.wire, chunk).await
    }
}

impl Host for LoopState {
    async fn next_task(&mut self) -> wasmtime::Result<Option<Task>> {
        self.trace_intact()?;
        if self.running.is_some() {
            let why = "the session loop asked for the next task without finishing this one";
            self.finish(TaskOutcome::Failed(why.into()), None).await?;
        }
        // Parked between tasks the loop has no deadline; each task gets the full one.
        self.deadline.clock.pause();
        let next = if self.session.settings.idle_shed {
            let workdir = &self.session.workdir;
            let shed_done = |shed: crate::idle::Shed| workdir.log(&shed.to_string());
            crate::idle::shedding(self.session.queue.next(), shed_done).await
        } else {
            self.session.queue.next().await
        };
        self.restart_deadline();
        match next {
            Some(task) => self.begin(task).await.map(Some),
            None => Ok(None),
        }
    }

    async fn tools(&mut self) -> wasmtime::Result<Vec<ToolSpec>> {
        Ok(self.session.tools.typed_specs().to_vec())
    }

    async fn infer(
        &mut self,
        request: InferenceRequest,
    ) -> wasmtime::Result<Result<InferenceReply, InferenceError>> {
        // Its own handle: the turn below borrows the whole state while it runs.
        let control = self.session.running.clone();
        let canceled = Ok(Err(InferenceError::Failed(CANCELED.into())));
        let reply = if self.running.is_some() && control.is_canceled() {
            canceled
        } else if self.session.harness.is_some() {
            // The harness's run sees a cancel itself: it interrupts the harness and
            // gives it a moment before killing it, rather than being dropped.
            self.turn(request).await
        } else {
            tokio::select! {
                reply = self.turn(request) => reply,
                // The turn is dropped, its driver instance with it (the next task gets a
                // fresh one); the ids stay in step as if the call had returned.
                () = control.canceled(), if self.running.is_some() => {
                    self.session.wire.after_inference();
                    if let Some(mut current) = self.current() {
                        current.trace_outbound()?;
                    }
                    canceled
                }
            }
        };
        self.resume_deadline();
        reply
    }

    async fn call_tools(&mut self, calls: Vec<ToolCall>) -> wasmtime::Result<Outcomes> {
        self.trace_intact()?;
        if calls.is_empty() {
            return Ok(Err("call-tools needs at least one call".into()));
        }
        let control = self.session.running.clone();
        let canceled = |calls: &[ToolCall]| Ok(Ok(calls.iter().map(canceled_result).collect()));
        let outcomes = if self.running.is_some() && control.is_canceled() {
            canceled(&calls)
        } else {
            let ids = calls.clone();
            tokio::select! {
                outcomes = self.run_tools(calls) => outcomes,
                // Dropping the dispatch kills a shell command's process group and a
                // tool component's store; the canceled calls write no artifact.
                () = control.canceled(), if self.running.is_some() => canceled(&ids),
            }
        };
        self.resume_deadline();
        outcomes
    }

    async fn status(&mut self, message: String) -> wasmtime::Result<Result<(), String>> {
        self.trace_intact()?;
        Ok(match self.current() {
            Some(current) => current.loop_status(&message),
            None => Err(outside("status")),
        })
    }

    async fn enqueue(
        &mut self,
        text: String,
        context_id: Option<String>,
    ) -> wasmtime::Result<Result<String, String>> {
        self.trace_intact()?;
        self.follow_up(text, context_id)
    }

    async fn budget(
        &mut self,
        messages: Vec<Message>,
    ) -> wasmtime::Result<Result<TaskBudget, String>> {
        Ok(match self.current() {
            Some(current) => Ok(current.budget(&messages)),
            None => Err(outside("budget")),
        })
    }

    async fn compact(
        &mut self,
        messages: Vec<Message>,
        size: Option<Usage>,
    ) -> wasmtime::Result<Result<Option<Vec<Message>>, String>> {
        self.trace_intact()?;
        match self.current() {
            Some(mut current) => current.compact(messages, size).await,
            None => Ok(Err(outside("compact"))),
        }
    }

    async fn finish_task(
        &mut self,
        outcome: TaskOutcome,
        conversation: Option<Vec<Message>>,
    ) -> wasmtime::Result<Result<Option<String>, String>> {
        if self.running.is_none() {
            return Ok(Err(outside("finish-task")));
        }
        let reopened = self.finish(outcome, conversation).await?;
        // A reopened task goes on under its deadline; after the task's end the loop
        // gets a deadline of its own to reach `next-task`.
        if self.running.is_none() {
            self.restart_deadline();
        }
        Ok(Ok(reopened))
    }
}

/// The result of a call the task's cancel stopped.
fn canceled_result(call: &ToolCall) -> ToolResult {
    ToolResult {
        call_id: call.id.clone(),
        content: CANCELED.into(),
        is_error: true,
    }
}

impl Session {
    /// Start-up cost, for users and for the start-up benchmark (`BENCHMARKS.md`).
    fn log_instantiation(&self, what: &str, started: Instant) {
        let micros = started.elapsed().as_micros();
        self.workdir
            .log(&format!("instantiated {what} in {micros} µs"));
    }
}

/// The session loop component, linked once: a loop of ours, or an upstream capsule
/// component run in its place (`capsule`).
pub struct LoopComponent {
    flavor: Flavor,
    label: String,
}

enum Flavor {
    Ours(SessionLoopPre<LoopState>),
    Capsule(capsule::CapsuleComponent),
}

impl LoopComponent {
    pub fn new(engine: &Engine, component: &Component, label: String) -> Result<Self, Error> {
        if engine::classify(engine.wasmtime(), component) == engine::Kind::UpstreamCapsule {
            let linked = capsule::link(engine, component, &label)?;
            return Ok(LoopComponent {
                flavor: Flavor::Capsule(linked),
                label,
            });
        }
        let pre = engine.linked(component, || {
            engine::check_world(engine, component, &engine::SESSION_LOOP, &label)?;
            let mut linker = Linker::<LoopState>::new(engine.wasmtime());
            let link = |e: wasmtime::Error| {
                Error::new("E-RUN-031", format!("{label} cannot be linked: {e:#}"))
            };
            crate::meter::add_to_linker(&mut linker).map_err(link)?;
            SessionLoop::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).map_err(link)?;
            // A 0.3.0 loop imports `peers` too; a 0.2.0 loop never sees it.
            crate::bindings::session_peers::murmur::session0_3_0::peers::add_to_linker::<
                _,
                HasSelf<_>,
            >(&mut linker, |s| s)
            .map_err(link)?;
            linker
                .instantiate_pre(component)
                .and_then(SessionLoopPre::new)
                .map_err(link)
        })?;
        Ok(LoopComponent {
            flavor: Flavor::Ours(pre),
            label,
        })
    }

    /// An upstream capsule component, not a session loop of ours.
    pub fn is_capsule(&self) -> bool {
        matches!(self.flavor, Flavor::Capsule(_))
    }

    /// Runs the whole session. A task the loop left running when it returned or
    /// trapped is ended `failed`, naming why, so no client waits for it forever; so is
    /// every task still queued. A loop past its deadline, or deaf to a stop or cancel
    /// (see `interrupt`), is dropped and ends the session.
    pub async fn run(&self, session: Session) -> (Totals, Result<(), Error>) {
        let pre = match &self.flavor {
            Flavor::Ours(pre) => pre,
            Flavor::Capsule(capsule) => return capsule.run(&self.label, session).await,
        };
        let grants = &session.settings.grants;
        let sandbox = match Sandbox::new(&Grants {
            workdir: Some(&session.workdir.root),
            env: grants.env.clone(),
            memory: grants.memory.clone(),
            cpu: grants.cpu.clone(),
            deadline: grants.deadline,
            output: guest_log::Target::session_loop(&session.workdir.logs_dir()),
        }) {
            Ok(sandbox) => sandbox.metered(session.meter.as_ref().map(|m| m.account())),
            Err(e) => return (Totals::default(), Err(e)),
        };
        let clock = Arc::new(Clock::new(grants.deadline));
        let config = Config {
            max_turns: session.settings.max_turns,
        };
        let (running, queue) = (session.running.clone(), session.queue.clone());
        let hooks = session.hooks.clone();
        let state = LoopState {
            sandbox,
            session,
            driver: None,
            running: None,
            totals: Totals::default(),
            deadline: Deadline {
                clock: clock.clone(),
                held_at: None,
            },
        };
        let mut store = Store::new(pre.engine(), state);
        sandbox::limit(&mut store);
        hooks.session_start().await;
        store.data_mut().restart_deadline();
        let call = async {
            let started = Instant::now();
            let bindings = pre.instantiate_async(&mut store).await?;
            store
                .data()
                .session
                .log_instantiation("session loop", started);
            bindings
                .murmur_session_loop_()
                .call_run(&mut store, config)
                .await
        };
        // Dropping the losing `call` drops the guest's stack with it; the store's data
        // (the running task) stays ours to end.
        let ran = tokio::select! {
            ran = call => Ok(ran),
            why = interrupt::interrupted(&running, &queue, &clock) => Err(why),
        };
        let result = self.result_of(ran, store.data_mut());
        store.data_mut().wind_up(result).await
    }

    /// How the session ends, from how the loop's `run` did.
    fn result_of(
        &self,
        ran: Result<wasmtime::Result<Result<(), String>>, Interrupt>,
        state: &mut LoopState,
    ) -> Result<(), Error> {
        match ran {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(why))) => Err(Error::new(
                "E-RUN-007",
                format!("{} failed: {why}", self.label),
            )),
            // Spinning past the deadline traps in the epoch callback: the same deadline.
            Ok(Err(trap)) if interrupt::is_deadline_trap(&trap_text(&trap)) => {
                state.interrupted(Interrupt::Deadline, &self.label)
            }
            Ok(Err(trap)) if trap_text(&trap).starts_with(TRACE_FAILED) => {
                Err(Error::new("E-RUN-007", trap_text(&trap))
                    .hint("the session's records must stay writable: check the disk they are on"))
            }
            Ok(Err(trap)) if trap_text(&trap).starts_with(RECORDS_FULL) => {
                Err(Error::new("E-RUN-008", trap_text(&trap)).hint(
                    "raise capabilities.limits.max_records_bytes, or make the loop keep \
                     smaller answers and conversations",
                ))
            }
            Ok(Err(trap)) => Err(Error::new(
                "E-RUN-001",
                format!("{} trapped: {}", self.label, trap_text(&trap)),
            )),
            Err(why) => state.interrupted(why, &self.label),
        }
    }
}

impl LoopState {
    /// After the loop's `run`: the task it left running ends `failed`, and so does every
    /// task still queued, since no loop will take it.
    async fn wind_up(&mut self, result: Result<(), Error>) -> (Totals, Result<(), Error>) {
        if self.running.is_some() {
            let why = match &result {
                Ok(()) => "the session loop ended without finishing this task".to_string(),
                Err(e) => e.message.clone(),
            };
            let _ = self.finish(TaskOutcome::Failed(why), None).await;
        }
        let why = match &result {
            Ok(()) => "the session loop ended before taking this task".to_string(),
            Err(e) => {
                self.session.queue.close();
                e.message.clone()
            }
        };
        self.session.fail_unstarted(&why);
        (self.totals, result)
    }
}
