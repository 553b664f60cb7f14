//! One capsule's life, whoever hosts it: staged (nothing on disk yet), opened (workdir,
//! trace, session), run (its loop takes tasks until the session ends), wound down.
//! `mur run` hosts one and serves it at `/`; `mur serve` hosts many, each at
//! `/c/<id>/`. Neither listens here: the address is theirs.

mod chosen_loop;
mod launch;
pub mod mcp_ls;
mod requeue;
pub(crate) mod servers;
mod stage;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::a2a;
use crate::builtin;
use crate::bus::Bus;
use crate::confine::{Class, Jail};
use crate::control::Finished;
use crate::engine::Engine;
use crate::error::Error;
use crate::exit_status::ExitStatus;
use crate::ids;
use crate::intake::Served;
use crate::manifest::{DriverRef, Manifest};
use crate::memory::Budget;
use crate::murmur_md;
use crate::outbound;
use crate::peer::desk::Desk;
use crate::queue::{Acceptance, AfterTask, Origin, Pending, Source};
use crate::resume::Resumed;
use crate::session::LoopComponent;
use crate::task_store;
use crate::trace::SessionTrace;
use crate::trace::line::{self, Totals};
use crate::wire::Wire;
use crate::workdir::{RecordsChoice, Workdir};
pub use chosen_loop::LoopIdentity;
pub(crate) use launch::Launched;
pub use requeue::fail_waiting;

/// What the host decides about a capsule besides its manifest.
pub struct Options<'a> {
    pub records: RecordsChoice<'a>,
    /// `--loop PATH.wasm`.
    pub loop_path: Option<&'a Path>,
    /// The containment the host raises the manifest's to.
    pub containment: Option<Class>,
    pub launch: Launch<'a>,
    /// The earlier session whose lost detached commands this one reports.
    pub resume: Option<&'a str>,
    /// Where the replay ring is kept across restarts; `None` keeps it in memory only.
    pub journal: Option<PathBuf>,
    /// Where the A2A task store is kept across restarts; `None` keeps it in the
    /// session's records, starting from the resumed session's tasks.
    pub tasks: Option<PathBuf>,
    /// The memory every instance of the capsule shares; `None` bounds each alone.
    pub memory: Option<Arc<Budget>>,
    /// What the capsule's guests' CPU time is charged to, and held to; `None` under
    /// `mur run`, where no neighbour waits.
    pub cpu: Option<crate::cpu::Account>,
    /// Its own daily token count and ceiling (`mur serve`); `None` under `mur run`.
    pub spend: Option<crate::spend::Capsule>,
    /// Its place in a formation: its roster name, who may call it and whom it calls.
    pub seat: Option<crate::peer::desk::Seat>,
    /// Where its trace's lines also go as spans, when export is on.
    pub telemetry: Option<crate::telemetry::Attach>,
}

/// Where the launch task comes from.
pub enum Launch<'a> {
    /// `--task` (a file to copy, else the text), else the workdir's `task.md`, else its
    /// `input.txt`.
    FromRun(Option<&'a str>),
    /// Tasks only arrive at the address.
    None,
}

/// Staged: every component compiled and checked, the shell's sandbox planned, the
/// workdir planned but not created.
pub struct Staged {
    m: Arc<Manifest>,
    workdir: Workdir,
    session_id: String,
    jail: Option<Jail>,
    wire: Arc<Wire>,
    loop_component: LoopComponent,
    staged: stage::Staged,
    launch: Option<String>,
    resumed: Option<Resumed>,
    journal_note: Option<String>,
    tasks_file: Option<PathBuf>,
    /// The capsule has the process to itself (`mur run`).
    alone: bool,
    spend: crate::spend::Spend,
    desk: Arc<Desk>,
    telemetry: Option<crate::telemetry::Attach>,
}

/// What a shell command of the capsule could reach (`mur run --explain-scope`),
/// without staging anything.
pub fn explain_scope(m: &Manifest, opts: &Options<'_>) -> Result<String, Error> {
    let workdir = Workdir::plan(&opts.records, &ids::session())?;
    let jail = launch::plan_shell(m, opts.containment, &workdir, 0)?;
    Ok(launch::explain_scope(m, jail.as_ref(), &workdir))
}

/// Stages `m` with `engine`; nothing is written yet.
pub async fn stage(engine: &Engine, m: Arc<Manifest>, opts: Options<'_>) -> Result<Staged, Error> {
    if let Some(key) = &m.inference.api_key {
        crate::secret::set(key);
    }
    // Before this session's directory exists, so `@1` is the previous run.
    let resumed = match opts.resume {
        Some(selector) => Some(crate::resume::find(&opts.records.root(), selector)?),
        None => None,
    };
    let session_id = ids::session();
    let workdir = Workdir::plan(&opts.records, &session_id)?;
    if let Some(cache) = engine.cache_dir().and_then(Path::parent) {
        workdir.refuse_holding_cache(cache)?;
    }
    // A class the kernel cannot back stops the launch before anything is created.
    let nice = opts.cpu.as_ref().map_or(0, crate::cpu::Account::nice);
    let jail = launch::plan_shell(&m, opts.containment, &workdir, nice)?;
    let (bus, journal_note) = match &opts.journal {
        // Without its journal the capsule still serves; its replay just starts empty
        // and lasts only as long as this process.
        Some(path) => journaled(path),
        None => (Bus::new(), None),
    };
    let wire = Wire::new(bus)
        .with_max_chunk_bytes(m.capabilities.limits.max_chunk_bytes)
        .keeping(m.lifecycle.task_history);
    let wire = Arc::new(wire);
    let memory = opts.memory.clone();
    let desk = Arc::new(Desk::for_capsule(&m, opts.seat, &session_id)?);
    let (loop_component, mut staged) = stage::stage(
        engine,
        &m,
        opts.loop_path,
        &workdir,
        &wire,
        (memory, opts.cpu.clone()),
        &desk,
    )
    .await?;
    if m.capsule.is_some() && opts.loop_path.is_none() && !loop_component.is_capsule() {
        // A loop of ours passes its own world's check; without `inference` it has no model.
        return Err(Error::new(
            "E-RUN-031",
            format!(
                "{} is a session loop, not an upstream capsule component (murmur:capsule/run@0.1.0)",
                staged.session_loop.label
            ),
        )
        .hint("a manifest without 'inference' runs the capsule component beside it; set 'inference' to run this loop with a model"));
    }
    if m.capsule.is_some() {
        // The stand-in driver is never called: the trace and MURMUR.md say there is none.
        staged.driver_label = "none (upstream capsule component)".into();
    }
    let alone = matches!(opts.launch, Launch::FromRun(_));
    // Before anything is made: a config or ledger in the way stops the launch here.
    let spend = crate::spend::Spend::for_capsule(m.inference.max_session_tokens, opts.spend)?;
    let launch = match opts.launch {
        Launch::FromRun(task) => launch_task(task, &workdir)?,
        Launch::None if m.lifecycle.task_acceptance == Acceptance::None => {
            return Err(Error::new(
                "E-SERVE-017",
                "lifecycle.task_acceptance is none, so the capsule could take no task at its address",
            )
            .hint("set lifecycle.task_acceptance to single or queue (with after_task: sleep to keep it serving between tasks)"));
        }
        Launch::None => None,
    };
    if launch.is_none() && m.lifecycle.task_acceptance == Acceptance::None {
        return Err(Error::new("E-IO-001", "lifecycle.task_acceptance is none and there is no task to run")
            .hint("pass --task TEXT|PATH (or write task.md in the workdir), or accept tasks with single or queue"));
    }
    Ok(Staged {
        m,
        workdir,
        session_id,
        jail,
        wire,
        loop_component,
        staged,
        launch,
        resumed,
        journal_note,
        tasks_file: opts.tasks,
        alone,
        spend,
        desk,
        telemetry: opts.telemetry,
    })
}

impl Staged {
    /// Creates the workdir and opens the session; `url` is the address it is served at.
    pub async fn open(self, url: &str) -> Result<Opened, Error> {
        let Staged {
            m,
            workdir,
            session_id,
            jail,
            wire,
            loop_component,
            staged,
            launch,
            resumed,
            journal_note,
            tasks_file,
            alone,
            spend,
            desk,
            telemetry,
        } = self;
        let session_loop = staged.session_loop.clone();
        let driver_label = staged.driver_label.clone();
        let resumed_id = resumed.as_ref().map(|r| r.session_id.as_str());
        let (mut session, launched) = launch::open_session(
            &m,
            session_id,
            workdir,
            wire,
            (staged, jail),
            (launch.as_deref(), resumed_id),
            telemetry,
        )
        .await?;
        session.settings.idle_shed = alone;
        session.spend = spend;
        let about = murmur_md::About {
            session_id: &launched.session_id,
            url,
            workdir: &launched.workdir,
            tools: &launched.tools,
            session_loop: &session_loop.shown(),
            driver_label: &driver_label,
        };
        murmur_md::write(&about, &m);
        if let Some(note) = journal_note {
            launched.workdir.log(&format!("replay journal: {note}"));
        }
        keep_tasks(&m, &launched, tasks_file, resumed.as_ref());
        Ok(Opened {
            url: url.to_string(),
            m,
            session,
            launched,
            loop_component,
            session_loop,
            launch,
            resumed,
            desk,
        })
    }
}

/// A capsule whose session is open: it can be served; `run` runs its loop.
pub struct Opened {
    url: String,
    m: Arc<Manifest>,
    session: crate::session::Session,
    launched: Launched,
    loop_component: LoopComponent,
    session_loop: LoopIdentity,
    launch: Option<String>,
    resumed: Option<Resumed>,
    desk: Arc<Desk>,
}

/// How the session ended.
pub struct Ended {
    pub exit_status: ExitStatus,
    /// The last task that ended, if any did.
    pub last: Option<Finished>,
    /// The loop's own failure, if it failed.
    pub ran: Result<(), Error>,
    pub trace: PathBuf,
}

impl Opened {
    pub fn launched(&self) -> &Launched {
        &self.launched
    }

    pub fn session_loop(&self) -> &LoopIdentity {
        &self.session_loop
    }

    /// What the address serves from; `guard` says whether callers need its token.
    pub fn served(&self, guard: a2a::Guard) -> Arc<Served> {
        let launched = &self.launched;
        Arc::new(Served {
            card: a2a::card(&self.m, &self.url, &launched.tools.specs(), guard),
            session_id: launched.session_id.clone(),
            mode: self.m.lifecycle.conversation,
            queue: launched.queue.clone(),
            wire: launched.wire.clone(),
            trace: launched.trace.clone(),
            inbox: launched.inbox.clone(),
            control: launched.control.clone(),
            desk: self.desk.clone(),
            address: self.url.clone(),
        })
    }

    /// Runs the loop until the session ends. `ended` hears how, before the session-end
    /// hooks and the wind-down (a parked capsule keeps serving until it is stopped).
    pub async fn run(self, started: Instant, ended: impl FnOnce(&Ended)) -> Ended {
        let Opened {
            m,
            session,
            launched,
            loop_component,
            launch,
            resumed,
            ..
        } = self;
        // Only an unconfined command can leave orphans to mur: a confined one is process 1
        // of its own namespace, which adopts (and, as it ends, kills) its orphans itself.
        let unconfined = launched.tools.jail().is_some_and(|j| j.unconfined());
        let reaping = unconfined.then(|| tokio::spawn(crate::reaper::reap_while_running()));
        if let Some(text) = launch {
            launched.queue.push_own(Pending {
                breach: None,
                traceparent: None,
                id: ids::task(),
                context_id: ids::context(),
                text,
                origin: Origin::User,
                source: Source::TaskMd,
                message_id: None,
            });
        }
        if let Some(resumed) = &resumed {
            // Queued behind the launch task; push_own ignores task_acceptance.
            crate::resume::report(&launched.queue, &launched.session_id, resumed);
        }
        let (totals, ran) = loop_component.run(session).await;
        // No task can deliver a result any more: account for what still runs, and kill it.
        launched.detached.abandon_all().await;
        if let Some(reaping) = reaping {
            reaping.abort();
            kill_leftovers(&launched.workdir).await;
        }
        if let Some(jail) = launched.tools.jail() {
            // Every command has ended: what the sandbox made outside the workdir goes.
            jail.release();
        }
        let last = launched.control.finished.last();
        let exit_status = match (&ran, &last) {
            (Err(e), _) if e.code == crate::session::DEADLINE_CODE => ExitStatus::DeadlineReached,
            (Err(_), _) => ExitStatus::Failed,
            (Ok(()), Some(task)) if !task.completed => task.exit_status.for_session(),
            _ => ExitStatus::Ok,
        };
        let outcome = Ended {
            exit_status,
            last,
            ran,
            trace: launched.trace.path().to_path_buf(),
        };
        ended(&outcome);
        let duration_ms = started.elapsed().as_millis() as u64;
        launched
            .hooks
            .session_end(&totals, exit_status, duration_ms)
            .await;
        wind_down(&m, &launched, outcome.ran.is_ok()).await;
        let closed = end_session(&launched.trace, totals, exit_status, started);
        match (outcome.ran, closed) {
            (Ok(()), Err(e)) => Ended {
                ran: Err(e),
                ..outcome
            },
            (ran, _) => Ended { ran, ..outcome },
        }
    }
}

/// The A2A task store on disk: `file` when the host names one (it outlives sessions),
/// else the session's records, starting from the tasks of the session it resumes.
fn keep_tasks(m: &Manifest, launched: &Launched, file: Option<PathBuf>, resumed: Option<&Resumed>) {
    let keep = m.lifecycle.task_history;
    // A store that outlives sessions (`mur serve`) keeps the queue beside it too; only
    // the backlog's benchmark (`host/benches/backlog.rs`) times acceptance without it.
    let backlog = file
        .as_deref()
        .filter(|_| std::env::var_os("MUR_BENCH_NO_BACKLOG").is_none())
        .map(requeue::backlog_path);
    let (path, mut earlier) = match file {
        Some(path) => (path, Vec::new()),
        None => {
            let earlier = resumed
                .and_then(|r| r.trace.parent())
                .map(|dir| task_store::read_journal(&dir.join(task_store::JOURNAL_FILE)))
                .unwrap_or_default();
            (
                launched.workdir.records.join(task_store::JOURNAL_FILE),
                earlier,
            )
        }
    };
    let (journal, kept) = task_store::Journal::open(&path, keep);
    let journal = journal.within(launched.records.clone());
    earlier.extend(kept);
    let tasks = launched.wire.tasks();
    match backlog {
        Some(backlog) => requeue::restore(
            &backlog,
            &launched.queue,
            tasks,
            (journal, earlier),
            &|line| launched.workdir.log(line),
        ),
        None => tasks.keep_in(journal, earlier),
    }
}

/// A model server the allow list does not reach is refused at every request; say so
/// at start-up rather than only in the first task's failure.
/// Every component the capsule of `m` would compile (with `--loop`, that loop instead
/// of the manifest's), with how errors name each: for `mur warm`.
///
/// # Errors
///
/// As staging: a component file that cannot be read, a driver that is not built in.
pub fn component_sources(
    m: &Manifest,
    loop_path: Option<&Path>,
) -> Result<Vec<(crate::engine::Wasm, String)>, Error> {
    stage::sources(m, loop_path).map(|s| s.list)
}

pub fn unreachable_endpoint(m: &Manifest) -> Option<String> {
    if m.capsule.is_some() {
        // No model: nothing is ever sent to a model server.
        return None;
    }
    // A gateway's origin is the driver's to reach, whatever the allow-list says.
    if let DriverRef::Artifact { name, .. } = &m.inference.driver
        && m.artifacts
            .iter()
            .any(|a| &a.name == name && a.gateway.is_some())
    {
        return None;
    }
    let url = match (&m.inference.endpoint, &m.inference.driver) {
        (Some(url), _) => url.as_str(),
        (None, DriverRef::Builtin { name, .. }) if name == "openai" => builtin::OPENAI_ENDPOINT,
        (None, DriverRef::Builtin { name, .. }) if name == "anthropic" => {
            builtin::ANTHROPIC_ENDPOINT
        }
        _ => return None,
    };
    let origin = outbound::origin_of(url)?;
    if outbound::allowed(&m.capabilities.network_allow, url) {
        return None;
    }
    Some(format!(
        "warning[W-CAP-001]: the model server {origin} is not in capabilities.network.allow, \
         so every inference request will be refused\n  hint: add '{origin}' under \
         capabilities.network.allow in {}",
        m.path.display()
    ))
}

/// The bus whose replay ring is kept in `path` (its folder made if need be). Without
/// its journal the capsule still serves; its replay then starts empty and lasts only
/// as long as this process.
fn journaled(path: &Path) -> (Arc<Bus>, Option<String>) {
    if let Some(dir) = path.parent()
        && let Err(e) = std::fs::create_dir_all(dir)
    {
        return (
            Bus::new(),
            Some(format!("could not create {}: {e}", dir.display())),
        );
    }
    Bus::journaled(path).unwrap_or_else(|e| (Bus::new(), Some(e.to_string())))
}

/// The launch task: `--task` (a file to copy, else the text), else the workdir's
/// `task.md`, else its `input.txt`.
fn launch_task(task: Option<&str>, workdir: &Workdir) -> Result<Option<String>, Error> {
    if let Some(task) = task {
        let path = Path::new(task);
        if path.is_file() {
            return std::fs::read_to_string(path).map(Some).map_err(|e| {
                Error::new(
                    "E-IO-003",
                    format!("could not read the task file {task}: {e}"),
                )
            });
        }
        return Ok(Some(task.to_string()));
    }
    // Read beneath the workdir: an earlier session's tool may have left a link there.
    Ok(["task.md", "input.txt"]
        .into_iter()
        .find_map(|file| workdir.read_view(file)))
}

/// After the session loop: a parked capsule serves until stopped; then every
/// connection writes what it was sent (the last task's final status above all)
/// before the sockets close.
async fn wind_down(m: &Manifest, launched: &Launched, ran_ok: bool) {
    if ran_ok && parks_after_its_task(m) {
        // It has taken the one task it accepts but stays up: its frame stream is closed
        // (watchers get `capsule-closed`) and replays are served until it is stopped.
        launched.wire.bus().close();
        launched.queue.closed().await;
    }
    launched.queue.close();
    launched.wire.bus().flush(Duration::from_secs(2)).await;
}

/// `after_task: sleep` without a queue: after its task the capsule parks instead of
/// ending (under `queue` the session loop itself sleeps between tasks).
fn parks_after_its_task(m: &Manifest) -> bool {
    m.lifecycle.after_task == AfterTask::Sleep && m.lifecycle.task_acceptance != Acceptance::Queue
}

/// Kills what unconfined shell commands left running below mur, and says so.
async fn kill_leftovers(workdir: &Workdir) {
    let killed = tokio::task::spawn_blocking(crate::reaper::kill_leftovers)
        .await
        .map(|k| k.processes)
        .unwrap_or_default();
    if killed.is_empty() {
        return;
    }
    let n = killed.len();
    let noun = if n == 1 { "process" } else { "processes" };
    eprintln!("[murmur] killed {n} {noun} left behind by shell commands");
    workdir.log(&format!(
        "killed {n} leftover {noun}: {}",
        killed.join(", ")
    ));
}

fn end_session(
    trace: &SessionTrace,
    totals: Totals,
    exit_status: ExitStatus,
    started: Instant,
) -> Result<(), Error> {
    let duration_ms = started.elapsed().as_millis() as u64;
    trace
        .under_session(None, line::session_end(&totals, duration_ms, exit_status))
        .map(|_| ())
        .map_err(|e| Error::new("E-RUN-007", format!("trace write failed: {e}")))
}
