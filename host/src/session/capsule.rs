//! An upstream Murmur capsule component (`murmur:capsule/run@0.1.0`) as the session's
//! loop. The host takes the tasks itself, as a loop would through `next-task`; each
//! task runs the component's `run` in a fresh instance of its own store, and its
//! `murmur:tool-registry/invoke` calls go through the same call path as a loop's
//! `call-tools` (`call::invoke`). So the wire (`working`, then `completed` or
//! `failed`), the trace and every hook and limit are the session's own; only how a
//! task ends is read differently: the answer is `out/result.txt`, and a trap, the
//! deadline or the memory cap fails the task and ends the session, as upstream's
//! `mur run` fails. The shapes are mapped in `crate::upstream::capsule`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, ComponentExportIndex, InstancePre, Linker};
use wasmtime::{Store, StoreContextMut};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::ending::{Ending, reopened_task_md};
use super::{Deadline, LoopState, RECORDS_FULL, Session, TRACE_FAILED};
use crate::bindings::message::ToolCall;
use crate::bindings::session_loop::murmur::session::host::Host;
use crate::bindings::session_loop::murmur::session::types::TaskOutcome;
use crate::bindings::upstream::exports::murmur::tool::run::{ToolInput, ToolResult};
use crate::deadline::Clock;
use crate::driver::trap_text;
use crate::engine::{Engine, UPSTREAM_CAPSULE};
use crate::error::Error;
use crate::exit_status::ExitStatus;
use crate::frames::State;
use crate::guest_log;
use crate::outbound::{Event, NetPolicy, Outbound};
use crate::sandbox::{self, Grants, Sandbox, Sandboxed};
use crate::trace::line::{self, Totals};
use crate::upstream::capsule::{self as up, Failure};

/// A capsule component, checked and linked once.
#[derive(Clone)]
pub(super) struct CapsuleComponent {
    pre: InstancePre<CapsuleState>,
    /// `run` of its `murmur:capsule/run@0.1.0`.
    run: ComponentExportIndex,
}

/// One instance's store: the loop's state (moved in for the run and out after it),
/// and what `wasi:http` needs, which a session loop does not have.
struct CapsuleState {
    state: LoopState,
    http: WasiHttpCtx,
    outbound: Outbound,
    /// The run's `invoke` calls so far, which name their tool calls.
    calls: u64,
}

impl Sandboxed for CapsuleState {
    fn sandbox(&mut self) -> &mut Sandbox {
        &mut self.state.sandbox
    }
}
sandbox::wasi_view!(CapsuleState);

impl WasiHttpView for CapsuleState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            hooks: &mut self.outbound,
            table: self.state.sandbox.table(),
            ctx: &mut self.http,
        }
    }
}

impl CapsuleState {
    /// One `invoke`: a tool call of the running task (see `call::invoke`).
    async fn invoke(
        &mut self,
        name: String,
        input: ToolInput,
    ) -> wasmtime::Result<Result<ToolResult, String>> {
        self.state.trace_intact()?;
        self.calls += 1;
        let call = ToolCall {
            id: format!("invoke_{}", self.calls),
            name,
            input: up::call_input(&input),
        };
        let Some(mut current) = self.state.current() else {
            return Ok(Err(
                "the capsule component called invoke outside a task".into()
            ));
        };
        let invoked = current.invoke(&call).await?;
        Ok(invoked.map(|ran| up::handed(ran.plain, ran.is_error, ran.truncated)))
    }
}

/// `invoke` as the linker calls it.
fn invoke(
    mut store: StoreContextMut<'_, CapsuleState>,
    (name, input): (String, ToolInput),
) -> Box<dyn Future<Output = wasmtime::Result<(Result<ToolResult, String>,)>> + Send + '_> {
    Box::new(async move { Ok((store.data_mut().invoke(name, input).await?,)) })
}

/// Checks an upstream capsule component's imports and links it: WASI (its workdir
/// writes metered), `wasi:http` through the capsule's network policy, and the tool
/// registry. Done once per component for the whole process.
pub(super) fn link(
    engine: &Engine,
    component: &Component,
    label: &str,
) -> Result<CapsuleComponent, Error> {
    engine.linked(component, || {
        crate::upstream::check_imports(
            engine,
            component,
            label,
            &crate::upstream::CAPSULE_IMPORTS,
        )?;
        let error = |e: wasmtime::Error| {
            Error::new("E-RUN-031", format!("{label} cannot be linked: {e:#}")).hint(
                "an upstream capsule component may import only WASI 0.2 (wasi:http included) \
                 and murmur:tool-registry/invoke@0.1.0",
            )
        };
        let run = run_export(engine, component, label)?;
        let mut linker = Linker::<CapsuleState>::new(engine.wasmtime());
        crate::meter::add_to_linker(&mut linker).map_err(error)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(error)?;
        linker
            .instance(up::REGISTRY)
            .and_then(|mut registry| registry.func_wrap_async("invoke", invoke))
            .map_err(error)?;
        let pre = linker.instantiate_pre(component).map_err(error)?;
        Ok(CapsuleComponent { pre, run })
    })
}

/// `run: func()` of the component's `murmur:capsule/run@0.1.0`, checked by its type.
fn run_export(
    engine: &Engine,
    component: &Component,
    label: &str,
) -> Result<ComponentExportIndex, Error> {
    let missing = || {
        Error::new(
            "E-RUN-031",
            format!("{label} does not export run: func() in {UPSTREAM_CAPSULE}"),
        )
        .hint("an upstream capsule component exports murmur:capsule/run@0.1.0 with run: func()")
    };
    let wasmtime = engine.wasmtime();
    let ty = component.component_type();
    let typed = match ty.get_export(wasmtime, UPSTREAM_CAPSULE).map(|e| e.ty) {
        Some(ComponentItem::ComponentInstance(instance)) => {
            match instance.get_export(wasmtime, "run").map(|e| e.ty) {
                Some(ComponentItem::ComponentFunc(f)) => {
                    f.params().len() == 0 && f.results().len() == 0
                }
                _ => false,
            }
        }
        _ => false,
    };
    if !typed {
        return Err(missing());
    }
    component
        .get_export_index(None, UPSTREAM_CAPSULE)
        .and_then(|iface| component.get_export_index(Some(&iface), "run"))
        .ok_or_else(missing)
}

/// How one run of the component ended.
enum Ended {
    Returned,
    Trapped(wasmtime::Error),
    /// Its task's wall-clock deadline passed (it waited in a host future).
    Deadline,
    /// Its task was canceled (or the session stopped): the run was dropped.
    Canceled,
}

/// What every run of the session shares.
struct Runs<'a> {
    label: &'a str,
    network: Arc<NetPolicy>,
    events: Arc<Mutex<Vec<Event>>>,
    /// The runtime directory, preopened read-only at `/murmur-runtime`: the task.
    runtime: PathBuf,
}

impl CapsuleComponent {
    /// Runs the whole session: each task the queue gives, until it gives none. A task
    /// whose run fails ends `failed` and ends the session with the error, the tasks
    /// still queued with it.
    pub(super) async fn run(&self, label: &str, session: Session) -> (Totals, Result<(), Error>) {
        let network = session.driver.network();
        let runs = Runs {
            label,
            // The component's own requests: its allow list and timeouts, each sent once
            // (a request of a component's is not known to be safe to repeat).
            network: Arc::new(NetPolicy {
                retry: crate::manifest::Retry {
                    max_attempts: 1,
                    ..network.retry
                },
                ..network.clone()
            }),
            events: Arc::default(),
            runtime: session.workdir.records.join("runtime"),
        };
        let sandbox = match capsule_sandbox(&session, None) {
            Ok(sandbox) => sandbox,
            Err(e) => return (Totals::default(), Err(e)),
        };
        let hooks = session.hooks.clone();
        let clock = Arc::new(Clock::new(session.settings.grants.deadline));
        let mut state = LoopState {
            sandbox,
            session,
            driver: None,
            running: None,
            totals: Totals::default(),
            deadline: Deadline {
                clock,
                held_at: None,
            },
        };
        hooks.session_start().await;
        state.restart_deadline();
        let result = loop {
            match Host::next_task(&mut state).await {
                Ok(Some(_)) => {}
                Ok(None) => break Ok(()),
                Err(trap) => break Err(host_failure(&trap)),
            }
            let (back, ran) = self.task(state, &runs).await;
            state = back;
            if let Err(e) = ran {
                break Err(e);
            }
        };
        state.wind_up(result).await
    }

    /// One task: runs until the component returns and no hook reopens the task, or a
    /// run fails.
    async fn task(&self, mut state: LoopState, runs: &Runs<'_>) -> (LoopState, Result<(), Error>) {
        loop {
            if let Err(e) = prepare(&mut state, &runs.runtime) {
                let failed = fail(&mut state, &e.message).map_err(|t| host_failure(&t));
                return (state, failed.and(Err(e)));
            }
            let (back, ended) = self.attempt(state, runs).await;
            state = back;
            if let Err(trap) = trace_requests(&mut state, &runs.events) {
                return (state, Err(host_failure(&trap)));
            }
            let failure = match ended {
                Ended::Returned => {
                    // The component streams no text: its answer's frame takes the
                    // task's next id, as a model's unstreamed reply does.
                    state.session.wire.before_inference();
                    state.session.wire.after_inference();
                    let outcome = match state.session.workdir.view() {
                        Ok(view) => up::answer(view, &state.session.settings.limits),
                        Err(e) => Err(format!("{} could not be read: {e}", up::RESULT_FILE)),
                    };
                    let outcome = outcome.map_or_else(TaskOutcome::Failed, TaskOutcome::Completed);
                    match state.finish(outcome, None).await {
                        // Reopened by an `on-task-end` hook: the feedback is in task.md.
                        Ok(Some(_)) => continue,
                        Ok(None) => {
                            state.restart_deadline();
                            return (state, Ok(()));
                        }
                        Err(trap) => return (state, Err(host_failure(&trap))),
                    }
                }
                Ended::Canceled => {
                    let ended = state.end_task(Ending::canceled(), None);
                    return (state, ended.map_err(|t| host_failure(&t)));
                }
                Ended::Deadline => deadline_failure(&state, runs.label),
                Ended::Trapped(trap) => trap_failure(&state, runs.label, &trap),
            };
            let recorded = fail(&mut state, &failure.reason).map_err(|t| host_failure(&t));
            return (state, recorded.and(Err(failure.error)));
        }
    }

    /// One run of `run`, in a fresh instance of a store of its own, raced against the
    /// task's wall-clock deadline and its cancel. The loser is dropped, instance and
    /// all; the loop's state comes back either way.
    async fn attempt(&self, state: LoopState, runs: &Runs<'_>) -> (LoopState, Ended) {
        let clock = state.deadline.clock.clone();
        let running = state.session.running.clone();
        let data = CapsuleState {
            state,
            http: WasiHttpCtx::new(),
            outbound: Outbound::new(runs.network.clone(), runs.events.clone()),
            calls: 0,
        };
        let mut store = Store::new(self.pre.engine(), data);
        sandbox::limit(&mut store);
        let ended = {
            let call = async {
                let started = Instant::now();
                let instance = self.pre.instantiate_async(&mut store).await?;
                let session = &store.data().state.session;
                session.log_instantiation("capsule component", started);
                let run = instance.get_typed_func::<(), ()>(&mut store, &self.run)?;
                run.call_async(&mut store, ()).await
            };
            tokio::select! {
                ran = call => ran.map_or_else(Ended::Trapped, |()| Ended::Returned),
                () = clock.expired() => Ended::Deadline,
                () = running.canceled() => Ended::Canceled,
            }
        };
        (store.into_data().state, ended)
    }
}

/// Before each run: the task in the runtime directory, the last answer gone, a fresh
/// sandbox (no handle and no memory of the last instance carries over), and the
/// task's `working` status.
fn prepare(state: &mut LoopState, runtime: &Path) -> Result<(), Error> {
    let Some(running) = &state.running else {
        return Err(Error::new(
            "E-RUN-007",
            "a capsule run began outside a task",
        ));
    };
    let task = match running.feedback.as_slice() {
        [] => running.task.text.clone(),
        feedback => reopened_task_md(&running.task.text, feedback),
    };
    let written = std::fs::create_dir_all(runtime)
        .and_then(|()| std::fs::write(runtime.join("task.md"), task));
    written.map_err(|e| {
        Error::new(
            "E-IO-003",
            format!("could not write the task to {}: {e}", runtime.display()),
        )
    })?;
    let run = running.reopens + 1;
    if let Ok(view) = state.session.workdir.view() {
        up::clear_answer(view);
    }
    state.sandbox = capsule_sandbox(&state.session, Some(runtime))?;
    // What a loop says at each inference turn; a canceled task's next status is its
    // final one.
    if !state.session.running.is_canceled() {
        let message = format!("capsule run {run}");
        state.session.wire.status(State::Working, &message, None);
    }
    Ok(())
}

/// The component's sandbox: the workdir as `/`, the granted variables, the capsule's
/// memory cap and deadline, and (for a run) the runtime directory, read-only.
fn capsule_sandbox(session: &Session, runtime: Option<&Path>) -> Result<Sandbox, Error> {
    let loop_grants = &session.settings.grants;
    let grants = Grants {
        workdir: Some(&session.workdir.root),
        env: loop_grants.env.clone(),
        memory: loop_grants.memory.clone(),
        cpu: loop_grants.cpu.clone(),
        deadline: loop_grants.deadline,
        output: guest_log::Target::capsule(&session.workdir.logs_dir()),
    };
    let sandbox = match runtime {
        Some(dir) => Sandbox::with_read_only(&grants, dir, up::RUNTIME_DIR)?,
        None => Sandbox::new(&grants)?,
    };
    Ok(sandbox.metered(session.meter.as_ref().map(|m| m.account())))
}

/// The running task's id, for the errors that name it.
fn task_id(state: &LoopState) -> String {
    state
        .running
        .as_ref()
        .map_or_else(String::new, |r| r.task.id.clone())
}

fn deadline_failure(state: &LoopState, label: &str) -> Failure {
    let limit = state.deadline.clock.limit();
    up::past_deadline(label, &task_id(state), limit.as_secs_f64())
}

/// A trap, told apart by what stopped it: the epoch deadline, the memory cap (the
/// guest's allocator traps once a growth is refused), or the component itself.
fn trap_failure(state: &LoopState, label: &str, trap: &wasmtime::Error) -> Failure {
    let text = trap_text(trap);
    if super::interrupt::is_deadline_trap(&text) {
        return deadline_failure(state, label);
    }
    if let Some(asked) = state.sandbox.limits.refused() {
        let cap = state.session.settings.grants.memory.each;
        return up::out_of_memory(label, &task_id(state), asked, cap);
    }
    let log = state.session.workdir.logs_dir().join("capsule.log");
    up::trapped(label, &task_id(state), &text, &log)
}

/// Ends the running task `failed` with `reason`, its `task_failed` line first. No
/// hook runs: nothing may reopen a task whose component failed.
fn fail(state: &mut LoopState, reason: &str) -> wasmtime::Result<()> {
    if let Some(current) = state.current() {
        current.record(line::task_failed(&current.run.task.id, reason))?;
    }
    let end = Ending::failed(reason.to_string(), reason.to_string(), ExitStatus::Failed);
    state.end_task(end.scrubbed(), None)
}

/// What the component's requests ran into (refusals), under its task.
fn trace_requests(state: &mut LoopState, events: &Mutex<Vec<Event>>) -> wasmtime::Result<()> {
    let taken = std::mem::take(&mut *events.lock().unwrap_or_else(|p| p.into_inner()));
    let Some(current) = state.current() else {
        return Ok(());
    };
    for event in taken {
        current.record(line::outbound(event))?;
    }
    Ok(())
}

/// A host call that failed (the trace or the records budget): the session ends.
fn host_failure(trap: &wasmtime::Error) -> Error {
    let text = trap_text(trap);
    if text.starts_with(TRACE_FAILED) {
        return Error::new("E-RUN-007", text)
            .hint("the session's records must stay writable: check the disk they are on");
    }
    if text.starts_with(RECORDS_FULL) {
        return Error::new("E-RUN-008", text).hint("raise capabilities.limits.max_records_bytes");
    }
    Error::new("E-RUN-007", text)
}
