//! Hook components: loaded once at start-up, one instance each for the whole session,
//! called at the lifecycle points the seed's diagram names. A hook decides; the host
//! commits a verdict only when the hook's `commit_policy` allows that arm at that
//! binding (the table is on `manifest::CommitPolicy`), and it owns the consequences
//! (frames, trace).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use wasmtime::Store;
use wasmtime::component::{Component, HasSelf, Linker};

pub use crate::bindings::hook::exports::murmur::hook::lifecycle::{
    CallOutcome, Compaction, Event, Inference, ManifestFile, SessionEnd, SessionStart, Shell,
    ShellOutcome, Stage, TaskEnd, TaskStart, ToolCall, Verdict,
};
use crate::bindings::hook::{Hook as Bindings, HookPre};
use crate::bindings::upstream_hook;
use crate::driver::trap_text;
use crate::engine::{self, Engine};
use crate::error::Error;
use crate::guest_log;
use crate::host_log;
use crate::manifest::{Binding, CommitPolicy, ExecutionMode, HookContract, OnOverflow};
use crate::rooted::Rooted;
use crate::sandbox::{self, Grants, Sandbox, Sandboxed};

/// Events an async hook may have waiting; more are dropped or wait, per `on_overflow`.
const ASYNC_QUEUE: usize = 64;
/// How long session end waits for async hooks to work through their queues.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);
/// Bytes of a hook's failure text kept: it becomes a refusal the model reads, a trace
/// line, a task's failure message and a log entry, and a hook may fail with megabytes.
const FAILURE_TEXT: usize = 4 * 1024;
/// Bytes of one entry of `logs/hook-<name>.log` kept, escaped: room for a whole
/// [`FAILURE_TEXT`] with its control characters spelled out, whose cut says how long
/// the hook's text was.
const LOG_ENTRY: usize = 16 * 1024;

pub struct HookState {
    sandbox: Sandbox,
}

/// The typed conversation's interface holds types only.
impl crate::bindings::message::Host for HookState {}

impl Sandboxed for HookState {
    fn sandbox(&mut self) -> &mut Sandbox {
        &mut self.sandbox
    }
}
sandbox::wasi_view!(HookState);

/// One hook's answer to one event.
pub struct Answer {
    pub hook: String,
    pub policy: CommitPolicy,
    /// `Err` is the hook's own failure, a trap or a timeout, in words.
    pub verdict: Result<Verdict, String>,
    /// How long the call took, a fresh instance's start included.
    pub took: std::time::Duration,
}

/// Something that went wrong with a hook outside the caller's view (async hooks), for
/// the trace's `hook_dispatch_error`.
#[derive(Debug, Clone)]
pub struct Fault {
    pub hook: String,
    pub event: &'static str,
    pub arm: String,
}

/// What staging knows of a hook before the workdir exists.
pub struct StagedHook {
    pub name: String,
    pub contract: HookContract,
    pub on_overflow: OnOverflow,
    pub component: Component,
}

/// Where hooks may write: their scope folders (under the host's records, where no
/// tool or command reaches), their logs.
pub struct Places {
    pub hooks_dir: PathBuf,
    pub logs_dir: PathBuf,
    pub memory: crate::memory::Cap,
    pub cpu: Option<crate::cpu::Account>,
}

/// A hook linked against its world: ours, or upstream's through `crate::upstream::hook`.
#[derive(Clone)]
pub(crate) enum Pre {
    Ours(HookPre<HookState>),
    Upstream(upstream_hook::HookPre<HookState>),
}

enum Instance {
    Ours(Bindings),
    /// Boxed: nine function handles against our one.
    Upstream(Box<upstream_hook::Hook>),
}

struct Loaded {
    name: String,
    contract: HookContract,
    pre: Pre,
    /// `capabilities.filesystem.scope`: a folder under `hooks_dir`, this hook's alone.
    scope: Option<String>,
    hooks_dir: PathBuf,
    memory: crate::memory::Cap,
    cpu: Option<crate::cpu::Account>,
    /// `logs/hook-<name>.log`: one per hook, so its cap holds across its instances.
    log: Mutex<host_log::Log>,
    output: guest_log::Target,
}

struct Live {
    store: Store<HookState>,
    bindings: Instance,
}

/// A blocking hook: its one instance, recreated after a trap.
struct Blocking {
    loaded: Arc<Loaded>,
    live: tokio::sync::Mutex<Option<Live>>,
}

/// An async hook: a worker with its own queue; its verdicts are discarded.
struct Async {
    name: String,
    binding: Option<Binding>,
    on_overflow: OnOverflow,
    queue: Mutex<Option<mpsc::Sender<(Binding, Event)>>>,
    worker: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

enum Slot {
    Blocking(Blocking),
    Async(Async),
}

/// The capsule's hooks, in manifest declaration order (the order they are called in).
#[derive(Default)]
pub struct Hooks {
    slots: Vec<Slot>,
    faults: Arc<Mutex<Vec<Fault>>>,
}

/// Checks a hook component against its world (ours or upstream's) and links it.
pub(crate) fn link(engine: &Engine, component: &Component, label: &str) -> Result<Pre, Error> {
    if engine::classify(engine.wasmtime(), component) == engine::Kind::UpstreamHook {
        return link_upstream(engine, component, label).map(Pre::Upstream);
    }
    link_ours(engine, component, label).map(Pre::Ours)
}

fn link_ours(
    engine: &Engine,
    component: &Component,
    label: &str,
) -> Result<HookPre<HookState>, Error> {
    engine::check_world(engine, component, &engine::HOOK, label)?;
    let mut linker = Linker::<HookState>::new(engine.wasmtime());
    let link = |e: wasmtime::Error| {
        Error::new("E-RUN-031", format!("{label} cannot be linked: {e:#}"))
            .hint("a hook may import only WASI 0.2 and murmur:message/types@0.2.0")
    };
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(link)?;
    crate::bindings::message::add_to_linker::<_, HasSelf<HookState>>(&mut linker, |s| s)
        .map_err(link)?;
    linker
        .instantiate_pre(component)
        .and_then(HookPre::new)
        .map_err(link)
}

/// Links an upstream hook: WASI only, as upstream's 0.8.0 hooks import.
fn link_upstream(
    engine: &Engine,
    component: &Component,
    label: &str,
) -> Result<upstream_hook::HookPre<HookState>, Error> {
    crate::upstream::check_imports(engine, component, label, &crate::upstream::HOOK_IMPORTS)?;
    refuse_network(engine, component, label)?;
    let mut linker = Linker::<HookState>::new(engine.wasmtime());
    let link = |e: wasmtime::Error| {
        Error::new("E-RUN-031", format!("{label} cannot be linked: {e:#}"))
            .hint("an upstream hook may import only WASI 0.2")
    };
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(link)?;
    linker
        .instantiate_pre(component)
        .and_then(upstream_hook::HookPre::new)
        .map_err(link)
}

/// A hook has no network (its world says so): an upstream hook importing `wasi:http`
/// (upstream's credential-gateway probes do) is refused by name rather than by a
/// linker message.
fn refuse_network(engine: &Engine, component: &Component, label: &str) -> Result<(), Error> {
    let ty = component.component_type();
    let http = ty
        .imports(engine.wasmtime())
        .map(|(name, _)| name.to_string())
        .find(|name| name.starts_with("wasi:http/"));
    match http {
        None => Ok(()),
        Some(import) => Err(Error::new(
            "E-RUN-031",
            format!("{label} imports {import}, but a hook has no network"),
        )
        .hint("a hook may import only WASI 0.2 without wasi:http; it sees its scope folder and nothing else")),
    }
}

impl Hooks {
    /// Links every hook; instances are made on first use.
    pub fn link(engine: &Engine, staged: Vec<StagedHook>, places: &Places) -> Result<Self, Error> {
        let mut hooks = Hooks::default();
        for hook in staged {
            let label = format!("hook artifact '{}'", hook.name);
            let pre = engine.linked(&hook.component, || link(engine, &hook.component, &label))?;
            let loaded = Arc::new(Loaded {
                scope: hook.contract.scope.clone(),
                hooks_dir: places.hooks_dir.clone(),
                log: Mutex::new(host_log::Log::new(
                    places
                        .logs_dir
                        .join(format!("hook-{}.log", guest_log::file_part(&hook.name))),
                    LOG_ENTRY,
                )),
                output: guest_log::Target::hook(&places.logs_dir, &hook.name),
                memory: places.memory.clone(),
                cpu: places.cpu.clone(),
                name: hook.name.clone(),
                contract: hook.contract.clone(),
                pre,
            });
            let slot = match hook.contract.mode {
                ExecutionMode::Blocking => Slot::Blocking(Blocking {
                    loaded,
                    live: tokio::sync::Mutex::new(None),
                }),
                ExecutionMode::Async => Slot::Async(Async::start(loaded, hook.on_overflow, &hooks)),
            };
            hooks.slots.push(slot);
        }
        Ok(hooks)
    }

    /// Whether any hook receives events of `binding`.
    pub fn listens(&self, binding: Binding) -> bool {
        self.slots.iter().any(|slot| match slot {
            Slot::Blocking(b) => receives(b.loaded.contract.binding, binding),
            Slot::Async(a) => receives(a.binding, binding),
        })
    }

    /// Whether a blocking hook with this policy is bound to receive `binding`.
    pub fn commits(&self, binding: Binding, policy: CommitPolicy) -> bool {
        self.slots.iter().any(|slot| match slot {
            Slot::Blocking(b) => {
                receives(b.loaded.contract.binding, binding) && b.loaded.contract.policy == policy
            }
            Slot::Async(_) => false,
        })
    }

    /// Calls every hook bound to `binding`, in declaration order: blocking ones are
    /// awaited and answer; async ones are queued.
    pub async fn fire(&self, binding: Binding, event: &Event) -> Vec<Answer> {
        let mut answers = Vec::new();
        for slot in &self.slots {
            match slot {
                Slot::Blocking(hook) if receives(hook.loaded.contract.binding, binding) => {
                    answers.push(hook.call(event).await);
                }
                Slot::Async(hook) if receives(hook.binding, binding) => {
                    hook.enqueue(binding, event.clone(), &self.faults).await;
                }
                _ => {}
            }
        }
        answers
    }

    /// Faults met by async hooks since the last call, oldest first.
    pub fn take_faults(&self) -> Vec<Fault> {
        std::mem::take(&mut *self.faults.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Session end: async hooks get a bounded time to work through what is queued.
    pub async fn drain(&self) {
        let deadline = tokio::time::Instant::now() + DRAIN_LIMIT;
        for slot in &self.slots {
            if let Slot::Async(hook) = slot {
                hook.close(deadline, &self.faults).await;
            }
        }
    }
}

/// A hook with no binding hears everything but `on-stage`.
fn receives(bound: Option<Binding>, event: Binding) -> bool {
    match bound {
        Some(b) => b == event,
        None => event != Binding::Stage,
    }
}

impl Blocking {
    async fn call(&self, event: &Event) -> Answer {
        let mut live = self.live.lock().await;
        let started = Instant::now();
        let verdict = self.loaded.handle(&mut live, event).await;
        let took = started.elapsed();
        if let Err(why) = &verdict {
            self.loaded.log(&format!("{}: {why}", event_name(event)));
        }
        Answer {
            hook: self.loaded.name.clone(),
            policy: self.loaded.contract.policy,
            verdict,
            took,
        }
    }
}

impl Loaded {
    fn deadline(&self) -> Duration {
        Duration::from_secs(self.contract.deadline_seconds)
    }

    /// One call, on the live instance (made first when there is none). A trap or a
    /// timeout leaves no instance behind: the next call starts a fresh one. A failure's
    /// text is cut to [`FAILURE_TEXT`] here, before anything quotes it.
    async fn handle(&self, live: &mut Option<Live>, event: &Event) -> Result<Verdict, String> {
        self.call(live, event).await.map_err(bounded)
    }

    async fn call(&self, live: &mut Option<Live>, event: &Event) -> Result<Verdict, String> {
        if live.is_none() {
            *live = Some(self.instantiate().await?);
        }
        let Some(instance) = live.as_mut() else {
            return Err("the hook has no instance".into());
        };
        instance.store.data_mut().sandbox.running_since = Instant::now();
        let call = async {
            match &instance.bindings {
                Instance::Ours(b) => {
                    b.murmur_hook_lifecycle()
                        .call_handle(&mut instance.store, event)
                        .await
                }
                Instance::Upstream(b) => {
                    crate::upstream::hook::call(b, &mut instance.store, event).await
                }
            }
        };
        // The epoch deadline stops a spinning guest; the timeout also covers a guest
        // waiting in a host call (a WASI sleep) for longer than it may.
        let limit = self.deadline() + Duration::from_secs(1);
        let result = match tokio::time::timeout(limit, call).await {
            Ok(Ok(answer)) => return answer,
            // A guest spinning past its deadline is stopped by the epoch callback of
            // `sandbox::limit`: that is a timeout (async hooks trace it as one).
            Ok(Err(trap)) => match trap_text(&trap) {
                text if text.starts_with("deadline exceeded") => Err(format!("timed out: {text}")),
                text => Err(format!("trapped: {text}")),
            },
            Err(_) => Err(format!(
                "timed out: no answer within {} s",
                self.contract.deadline_seconds
            )),
        };
        *live = None;
        result
    }

    async fn instantiate(&self) -> Result<Live, String> {
        let scope = self.open_scope()?;
        let sandbox = Sandbox::new(&Grants {
            workdir: scope.as_ref().map(Rooted::fd_path).as_deref(),
            env: Vec::new(),
            memory: self.memory.clone(),
            cpu: self.cpu.clone(),
            deadline: self.deadline(),
            output: self.output.clone(),
        })
        .map_err(|e| e.message)?;
        let engine = match &self.pre {
            Pre::Ours(pre) => pre.engine(),
            Pre::Upstream(pre) => pre.engine(),
        };
        let mut store = Store::new(engine, HookState { sandbox });
        sandbox::limit(&mut store);
        let bindings = match &self.pre {
            Pre::Ours(pre) => pre.instantiate_async(&mut store).await.map(Instance::Ours),
            Pre::Upstream(pre) => pre
                .instantiate_async(&mut store)
                .await
                .map(|b| Instance::Upstream(Box::new(b))),
        }
        .map_err(|e| format!("could not start: {}", trap_text(&e)))?;
        Ok(Live { store, bindings })
    }

    /// The scope folder, created if missing and opened without following a link on the
    /// way; it stays open until the preopen has taken it.
    fn open_scope(&self) -> Result<Option<Rooted>, String> {
        let Some(scope) = &self.scope else {
            return Ok(None);
        };
        let refused = |e: std::io::Error| {
            format!(
                "could not open its scope {}: {e}",
                self.hooks_dir.join(scope).display()
            )
        };
        std::fs::create_dir_all(&self.hooks_dir).map_err(refused)?;
        let hooks = Rooted::open(&self.hooks_dir).map_err(refused)?;
        hooks.open_dir_strict(scope).map(Some).map_err(refused)
    }

    /// `logs/hook-<name>.log`: a hook's failures, for its author; one escaped line
    /// each, the file capped for the session (`crate::host_log`).
    fn log(&self, line: &str) {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .append(line);
    }
}

impl Async {
    fn start(loaded: Arc<Loaded>, on_overflow: OnOverflow, hooks: &Hooks) -> Self {
        let (tx, mut rx) = mpsc::channel::<(Binding, Event)>(ASYNC_QUEUE);
        let faults = hooks.faults.clone();
        let name = loaded.name.clone();
        let binding = loaded.contract.binding;
        let worker = tokio::spawn(async move {
            let mut live = None;
            while let Some((binding, event)) = rx.recv().await {
                // An async hook's verdict is discarded; only its failures are recorded.
                if let Err(why) = loaded.handle(&mut live, &event).await {
                    loaded.log(&format!("{}: {why}", event_name(&event)));
                    let arm = if why.starts_with("timed out") {
                        "timeout"
                    } else {
                        "error"
                    };
                    push(&faults, &loaded.name, binding.as_str(), arm);
                }
            }
        });
        Async {
            name,
            binding,
            on_overflow,
            queue: Mutex::new(Some(tx)),
            worker: Mutex::new(Some(worker)),
        }
    }

    async fn enqueue(&self, binding: Binding, event: Event, faults: &Arc<Mutex<Vec<Fault>>>) {
        let sender = self.queue.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(sender) = sender else {
            return;
        };
        match self.on_overflow {
            OnOverflow::Block => {
                let _ = sender.send((binding, event)).await;
            }
            OnOverflow::Drop => {
                if sender.try_send((binding, event)).is_err() {
                    push(faults, &self.name, binding.as_str(), "queue-overflow");
                }
            }
        }
    }

    async fn close(&self, deadline: tokio::time::Instant, faults: &Arc<Mutex<Vec<Fault>>>) {
        drop(self.queue.lock().unwrap_or_else(|p| p.into_inner()).take());
        let worker = self.worker.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(worker) = worker
            && tokio::time::timeout_at(deadline, worker).await.is_err()
        {
            push(faults, &self.name, "drain", "timeout");
        }
    }
}

fn push(faults: &Mutex<Vec<Fault>>, hook: &str, event: &'static str, arm: &str) {
    faults
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Fault {
            hook: hook.to_string(),
            event,
            arm: arm.to_string(),
        });
}

/// A hook's failure text, cut to [`FAILURE_TEXT`] saying how long it was.
fn bounded(why: String) -> String {
    match crate::escape::cut(&why, FAILURE_TEXT) {
        std::borrow::Cow::Borrowed(_) => why,
        std::borrow::Cow::Owned(cut) => cut,
    }
}

/// The upstream function name of an event, as traces and logs name it.
pub fn event_name(event: &Event) -> &'static str {
    match event {
        Event::Stage(_) => "on-stage",
        Event::SessionStart(_) => "on-session-start",
        Event::TaskStart(_) => "on-task-start",
        Event::Inference(_) => "on-inference",
        Event::ToolCall(_) => "on-tool-call",
        Event::Shell(_) => "on-shell",
        Event::Compaction(_) => "on-compaction",
        Event::TaskEnd(_) => "on-task-end",
        Event::SessionEnd(_) => "on-session-end",
    }
}

/// The name of a verdict's arm, for `hook_dispatch_error`.
pub fn arm_name(verdict: &Verdict) -> &'static str {
    match verdict {
        Verdict::None => "none",
        Verdict::WriteManifests(_) => "write-manifests",
        Verdict::SeedContext(_) => "seed-context",
        Verdict::ReplaceContext(_) => "replace-context",
        Verdict::Deny(_) => "deny",
        Verdict::ReopenTask(_) => "reopen-task",
        Verdict::Artifact(_) => "artifact",
    }
}

/// Whether `verdict` may be committed for a hook with `policy` at `binding`. `none` is
/// always fine; `artifact` needs no policy, only the inference binding.
pub fn honored(verdict: &Verdict, policy: CommitPolicy, binding: Binding) -> bool {
    match verdict {
        Verdict::None => true,
        Verdict::Artifact(_) => binding == Binding::Inference,
        Verdict::WriteManifests(_) => {
            policy == CommitPolicy::WriteManifests && binding == Binding::Stage
        }
        Verdict::SeedContext(_) => {
            policy == CommitPolicy::SeedContext && binding == Binding::TaskStart
        }
        Verdict::ReplaceContext(_) => {
            policy == CommitPolicy::ReplaceContext && binding == Binding::Compaction
        }
        Verdict::ReopenTask(_) => policy == CommitPolicy::ReopenTask && binding == Binding::TaskEnd,
        Verdict::Deny(_) => {
            policy == CommitPolicy::Deny && matches!(binding, Binding::ToolCall | Binding::Shell)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unbound_hook_hears_everything_but_stage() {
        assert!(receives(None, Binding::TaskEnd));
        assert!(!receives(None, Binding::Stage));
        assert!(receives(Some(Binding::Stage), Binding::Stage));
        assert!(!receives(Some(Binding::Shell), Binding::ToolCall));
    }

    #[test]
    fn a_failure_text_is_cut_saying_how_long_it_was() {
        assert_eq!(bounded("policy db down".into()), "policy db down");
        let flood = bounded("x\n".repeat(10 * 1024 * 1024));
        assert!(
            flood.ends_with("… [cut: 20971520 bytes in all]"),
            "{}",
            &flood[flood.len() - 64..]
        );
        assert!(flood.len() < FAILURE_TEXT + 64, "{}", flood.len());
    }

    #[test]
    fn arms_are_honored_only_under_their_policy_and_binding() {
        let reopen = Verdict::ReopenTask("again".into());
        assert!(honored(&reopen, CommitPolicy::ReopenTask, Binding::TaskEnd));
        assert!(!honored(&reopen, CommitPolicy::None, Binding::TaskEnd));
        assert!(!honored(
            &reopen,
            CommitPolicy::ReopenTask,
            Binding::TaskStart
        ));
        let deny = Verdict::Deny("no".into());
        assert!(honored(&deny, CommitPolicy::Deny, Binding::Shell));
        assert!(!honored(
            &deny,
            CommitPolicy::SeedContext,
            Binding::ToolCall
        ));
        let artifact = Verdict::Artifact("{}".into());
        assert!(honored(&artifact, CommitPolicy::None, Binding::Inference));
        assert!(!honored(&artifact, CommitPolicy::None, Binding::TaskEnd));
        assert!(honored(&Verdict::None, CommitPolicy::None, Binding::Stage));
    }
}
