//! `mur run`: stage a capsule, serve its address, run its session loop, report.
//!
//! Staging (`stage`: manifest, components, tools) happens before the workdir exists, so
//! a capsule that cannot start leaves nothing behind; `launch` then opens the session.

mod chosen_loop;
mod launch;
mod stage;

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::net::TcpListener;

use crate::builtin;
use crate::bus::Bus;
use crate::cli::RunArgs;
use crate::control::Control;
use crate::engine::Engine;
use crate::error::Error;
use crate::exit_status::ExitStatus;
use crate::ids;
use crate::manifest::{self, DriverRef, Manifest};
use crate::murmur_md;
use crate::outbound;
use crate::queue::{Acceptance, AfterTask, Origin, Pending, Source};
use crate::secret;
use crate::server::{self, Served};
use crate::trace::SessionTrace;
use crate::trace::line::{self, Totals};
use crate::wire::Wire;
use crate::workdir::{RecordsChoice, Workdir};
use chosen_loop::LoopIdentity;
use launch::Launched;

pub async fn run(args: RunArgs) -> Result<ExitCode, Error> {
    let started = Instant::now();
    let m = load_manifest(&args)?;
    // Before any command runs, so whatever a command leaves behind is ours to kill.
    let adopted = crate::reaper::adopt_orphans();
    let engine = Engine::new()?;
    // Before this session's directory exists, so `@1` is the previous run.
    let resumed = resumed_from(&args, &m)?;
    let session_id = ids::session();
    let workdir = Workdir::plan(&records_choice(&args, &m), &session_id)?;
    // A class the kernel cannot back stops the launch before anything is created.
    let jail = launch::plan_shell(&m, &args, &workdir)?;
    if args.explain_scope {
        print!("{}", launch::explain_scope(&m, jail.as_ref(), &workdir));
        return Ok(ExitCode::SUCCESS);
    }
    let wire =
        Arc::new(Wire::new(Bus::new()).with_max_chunk_bytes(m.capabilities.limits.max_chunk_bytes));
    let staged = stage::stage(&engine, &m, &args, &workdir, &wire).await?;
    let launch = launch_task(&args, &workdir)?;
    if launch.is_none() && m.lifecycle.task_acceptance == Acceptance::None {
        return Err(Error::new("E-IO-001", "lifecycle.task_acceptance is none and there is no task to run")
            .hint("pass --task TEXT|PATH (or write task.md in the workdir), or accept tasks with single or queue"));
    }
    let listener = bind(&args, &m).await?;
    let url = listener
        .local_addr()
        .map(|address| format!("http://{address}"))
        .map_err(|e| Error::new("E-IO-003", format!("could not read the bound address: {e}")))?;

    let (loop_component, staged) = staged;
    let (session_loop, driver_label) = (staged.session_loop.clone(), staged.driver_label.clone());
    let resumed_id = resumed.as_ref().map(|r| r.session_id.as_str());
    let (session, launched) = launch::open_session(
        &m,
        session_id,
        workdir,
        wire,
        (staged, jail),
        (launch.as_deref(), resumed_id),
    )
    .await?;
    let about = murmur_md::About {
        session_id: &launched.session_id,
        url: &url,
        workdir: &launched.workdir,
        tools: &launched.tools,
        session_loop: &session_loop.shown(),
        driver_label: &driver_label,
    };
    murmur_md::write(&about, &m);
    if let Err(e) = &adopted {
        launched.workdir.log(&format!(
            "could not become a child subreaper ({e}): processes shell commands leave behind may outlive the session"
        ));
    }
    // Only an unconfined command can leave orphans to mur: a confined one is process 1
    // of its own namespace, which adopts (and, as it ends, kills) its orphans itself.
    let unconfined = launched.tools.jail().is_some_and(|j| j.unconfined());
    let reaping = unconfined.then(|| tokio::spawn(crate::reaper::reap_while_running()));
    announce(&args, &m, &launched, &url, &session_loop);

    let server = tokio::spawn(server::serve(listener, served(&m, &launched)));
    let signals = tokio::spawn(stop_on_signals(launched.control.clone()));
    if let Some(text) = launch {
        launched.queue.push_own(Pending {
            breach: None,
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
    }
    kill_leftovers(&launched.workdir).await;
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
    if ran.is_ok() && !args.json {
        if let Some(task) = &last {
            println!("{}", task.result);
        }
        println!("status:  {exit_status}");
    }
    let duration_ms = started.elapsed().as_millis() as u64;
    launched
        .hooks
        .session_end(&totals, exit_status, duration_ms)
        .await;
    wind_down(&m, &launched, ran.is_ok()).await;
    signals.abort();
    server.abort();
    end_session(&launched.trace, totals, exit_status, started)?;
    ran?;
    match last {
        Some(task) if !task.completed => Err(Error::new(
            "E-RUN-040",
            format!(
                "the task did not complete: {} ({})",
                task.exit_status, task.result
            ),
        )
        .hint(format!("see {}", launched.trace.path().display()))),
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// What the address serves from.
fn served(m: &Manifest, launched: &Launched) -> Arc<Served> {
    Arc::new(Served {
        session_id: launched.session_id.clone(),
        mode: m.lifecycle.conversation,
        queue: launched.queue.clone(),
        wire: launched.wire.clone(),
        trace: launched.trace.clone(),
        inbox: launched.inbox.clone(),
        control: launched.control.clone(),
    })
}

/// The manifest, with the command line's lifecycle overrides applied.
fn load_manifest(args: &RunArgs) -> Result<Manifest, Error> {
    let loaded = manifest::load(&args.manifest)?;
    for warning in &loaded.warnings {
        eprintln!("{}", warning.text);
    }
    let mut m = loaded.manifest;
    if let Some(key) = &m.inference.api_key {
        secret::set(key);
    }
    if let Some(warning) = unreachable_endpoint(&m) {
        eprintln!("{warning}");
    }
    if let Some(a) = args.lifecycle_task_acceptance {
        m.lifecycle.task_acceptance = a.into();
    }
    if let Some(a) = args.lifecycle_after_task {
        m.lifecycle.after_task = a.into();
    }
    Ok(m)
}

/// `--resume SESSION`: the session it names, looked up where this run's sessions go.
fn resumed_from(args: &RunArgs, m: &Manifest) -> Result<Option<crate::resume::Resumed>, Error> {
    let Some(selector) = &args.resume else {
        return Ok(None);
    };
    let root = records_choice(args, m).root();
    crate::resume::find(&root, selector).map(Some)
}

/// A model server the allow list does not reach is refused at every request; say so
/// at start-up rather than only in the first task's failure.
fn unreachable_endpoint(m: &Manifest) -> Option<String> {
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

/// The launch task: `--task` (a file to copy, else the text), else the workdir's
/// `task.md`, else its `input.txt`.
fn launch_task(args: &RunArgs, workdir: &Workdir) -> Result<Option<String>, Error> {
    if let Some(task) = &args.task {
        let path = Path::new(task);
        if path.is_file() {
            return std::fs::read_to_string(path).map(Some).map_err(|e| {
                Error::new(
                    "E-IO-003",
                    format!("could not read the task file {task}: {e}"),
                )
            });
        }
        return Ok(Some(task.clone()));
    }
    // Read beneath the workdir: an earlier session's tool may have left a link there.
    Ok(["task.md", "input.txt"]
        .into_iter()
        .find_map(|file| workdir.read_view(file)))
}

async fn bind(args: &RunArgs, m: &Manifest) -> Result<TcpListener, Error> {
    let port = args.port.or(m.network.internal_port).unwrap_or(0);
    TcpListener::bind((args.bind, port)).await.map_err(|e| {
        Error::new(
            "E-RUN-010",
            format!("could not listen on {}:{port}: {e}", args.bind),
        )
        .hint("pick another --port (0 takes any free port) or stop what holds it")
    })
}

/// Where this run keeps its records: `--records`, else beside the session
/// directories, else (with `--workdir`) under `$MURMUR_HOME`.
fn records_choice<'a>(args: &'a RunArgs, m: &'a Manifest) -> RecordsChoice<'a> {
    RecordsChoice {
        manifest_dir: &m.dir,
        workdir: args.workdir.as_deref(),
        records: args.records.as_deref(),
    }
}

/// The launch lines: one JSON line with `--json`, readable lines otherwise.
fn announce(
    args: &RunArgs,
    m: &Manifest,
    launched: &Launched,
    url: &str,
    session_loop: &LoopIdentity,
) {
    let port = url.rsplit(':').next().unwrap_or_default();
    let workdir = &launched.workdir;
    if args.json {
        let line = json!({
            "address": url,
            "url": format!("localhost:{port}"),
            "pid": std::process::id(),
            "session_id": launched.session_id,
            "name": m.name,
            "version": m.version,
            "workdir": workdir.root,
            "records_dir": workdir.records,
            "loop": session_loop.name,
            "loop_version": session_loop.version,
        });
        println!("{line}");
    } else {
        println!("murmur: url {url}");
        println!("session: {}", launched.session_id);
        println!("workdir: {}", workdir.root.display());
        println!("loop:    {}", session_loop.shown());
    }
    if let Some(jail) = launched.tools.jail() {
        eprintln!("{}", jail.launch_line());
    }
}

/// After the session loop: a parked capsule serves until stopped; then every
/// connection writes what it was sent (the last task's final status above all)
/// before the process exits and the sockets close.
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
/// exiting (under `queue` the session loop itself sleeps between tasks).
fn parks_after_its_task(m: &Manifest) -> bool {
    m.lifecycle.after_task == AfterTask::Sleep && m.lifecycle.task_acceptance != Acceptance::Queue
}

/// Kills what shell commands left running below mur, and says so.
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

/// The first SIGTERM or SIGINT stops the session cleanly (the running task is
/// canceled, the trace closed); a second one exits at once.
async fn stop_on_signals(control: Arc<Control>) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    eprintln!("[murmur] stopping: the running task is canceled; a second signal exits at once");
    control.stop();
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    eprintln!("[murmur] exiting without tearing down");
    // Still no orphans: killing what is left takes milliseconds.
    let killed = crate::reaper::kill_leftovers().processes.len();
    if killed > 0 {
        eprintln!("[murmur] killed {killed} processes left behind by shell commands");
    }
    std::process::exit(143);
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
