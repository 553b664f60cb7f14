//! `mur run`: one capsule, served at `/` of its own address, in a process of its own:
//! it prints the launch lines, stops on a signal, and exits with the session's status.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use tokio::net::TcpListener;
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::a2a;
use crate::capsule::{self, Launch, Launched, LoopIdentity, Options};
use crate::cli::RunArgs;
use crate::confine::Class;
use crate::control::Control;
use crate::door::{self, DoorToken};
use crate::engine::Engine;
use crate::error::Error;
use crate::manifest::{self, DriverRef, Manifest};
use crate::running;
use crate::server::{self, Mount};
use crate::workdir::RecordsChoice;

pub async fn run(args: RunArgs) -> Result<ExitCode, Error> {
    if args.roster.is_some() {
        return crate::formation::run(args).await;
    }
    let engine = Engine::new()?;
    run_seated(args, &engine, None).await
}

/// One capsule as `mur run` runs it; a formation's entry member has its `seat`.
pub(crate) async fn run_seated(
    args: RunArgs,
    engine: &Engine,
    seat: Option<crate::peer::desk::Seat>,
) -> Result<ExitCode, Error> {
    let started = Instant::now();
    let m = Arc::new(load_manifest(&args)?);
    let seated = seat.is_some();
    // Before any command runs, so whatever a command leaves behind is ours to kill.
    let adopted = crate::reaper::adopt_orphans();
    let options = Options {
        records: records_choice(&args, &m),
        loop_path: args.loop_path.as_deref(),
        containment: args.containment.map(Class::from),
        launch: Launch::FromRun(args.task.as_deref()),
        resume: args.resume.as_deref(),
        journal: None,
        tasks: None,
        memory: None,
        cpu: None,
        spend: None,
        seat,
        telemetry: crate::telemetry::for_run(&m.observability)?,
    };
    if args.explain_scope {
        print!("{}", capsule::explain_scope(&m, &options)?);
        return Ok(ExitCode::SUCCESS);
    }
    // Before staging: a door that may not open stops the launch before anything exists.
    let door = door::plan(
        m.network.authentication.is_some(),
        args.bind,
        args.open_door,
    )?;
    let staged = capsule::stage(engine, m.clone(), options).await?;
    let listener = bind(&args, &m).await?;
    let url = listener
        .local_addr()
        .map(|address| format!("http://{address}"))
        .map_err(|e| Error::new("E-IO-003", format!("could not read the bound address: {e}")))?;
    let opened = staged.open(&url).await?;
    let launched = opened.launched();
    if let Err(e) = &adopted {
        launched.workdir.log(&format!(
            "could not become a child subreaper ({e}): processes shell commands leave behind may outlive the session"
        ));
    }
    let caught = catch_signals();
    // Listed before the launch line is printed, so whoever acts on that line (a script
    // running `mur stop`) finds the session; the guard removes the entry however run()
    // returns.
    let registration = register(&m, launched, &url, door.token);
    announce(
        &args,
        &m,
        launched,
        &url,
        opened.session_loop(),
        door.posture,
    );
    let control = launched.control.clone();
    let guard = match door.posture {
        door::Posture::Bearer => a2a::Guard::Bearer,
        door::Posture::Local | door::Posture::Open => a2a::Guard::Open,
    };
    let server = tokio::spawn(server::serve(
        listener,
        Mount::One(opened.served(guard), Arc::new(door.door)),
    ));
    let listed = registration.as_ref().map(|r| r.path().to_path_buf());
    let signals = tokio::spawn(stop_on_signals(caught, control, listed));
    let json = args.json;
    let trace = launched.trace.clone();
    let ended = opened
        .run(started, |ended| {
            if ended.ran.is_ok() && !json {
                if let Some(task) = &ended.last {
                    // The loop's own text: its lines are kept, its control codes not.
                    println!("{}", crate::escape::text(&task.result));
                }
                println!("status:  {}", ended.exit_status);
            }
        })
        .await;
    signals.abort();
    server.abort();
    drop(registration);
    crate::telemetry::wind_down(trace, !seated).await;
    ended.ran?;
    match ended.last {
        Some(task) if !task.completed => Err(Error::new(
            "E-RUN-040",
            format!(
                "the task did not complete: {} ({})",
                task.exit_status,
                crate::escape::line(&task.result)
            ),
        )
        .hint(format!("see {}", ended.trace.display()))),
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// The manifest, with the command line's lifecycle overrides applied.
pub(crate) fn load_manifest(args: &RunArgs) -> Result<Manifest, Error> {
    let loaded = manifest::load_with(
        &args.manifest,
        args.system_prompt.is_some(),
        !args.no_env_file,
    )?;
    for warning in &loaded.warnings {
        eprintln!("{}", warning.text);
    }
    let mut m = loaded.manifest;
    crate::registry::resolve::resolve_here(&mut m, &mut |line| eprintln!("{line}"))?;
    if let Some(warning) = capsule::unreachable_endpoint(&m) {
        eprintln!("{warning}");
    }
    if let Some(a) = args.lifecycle_task_acceptance {
        m.lifecycle.task_acceptance = a.into();
    }
    if let Some(a) = args.lifecycle_after_task {
        m.lifecycle.after_task = a.into();
    }
    if let Some(prompt) = &args.system_prompt {
        // Trimmed as the manifest's inline prompt is; an empty one clears it.
        let prompt = prompt.trim();
        m.inference.system_prompt = (!prompt.is_empty()).then(|| prompt.to_string());
        m.inference.system_prompt_from_cli = true;
    }
    Ok(m)
}

/// Lists this session in the running-session registry, with its door's token when it
/// has one. A registry that cannot be written costs `mur ps` and `mur stop SESSION` this
/// session (and `mur token` its token: the door still asks for it), not the run.
pub(crate) fn register(
    m: &Manifest,
    launched: &Launched,
    url: &str,
    door_token: Option<DoorToken>,
) -> Option<running::Registration> {
    let guarded = door_token.is_some();
    let registered = running::Entry::for_this_process(&launched.session_id, url)
        .map_err(|why| Error::new("E-REG-001", why))
        .and_then(|entry| {
            running::register(&running::Entry {
                workdir: launched.workdir.root.clone(),
                records_dir: launched.workdir.records.clone(),
                capsule_name: m.name.clone(),
                capsule_version: m.version.clone(),
                door_token,
                ..entry
            })
        });
    match registered {
        Ok(registration) => Some(registration),
        Err(e) => {
            // The entry was the token's one home: the door stays shut to every caller.
            let lost = if guarded {
                ", and mur token cannot read its door's token: no caller can reach the capsule"
            } else {
                ""
            };
            eprintln!(
                "[capsule-runtime] warning[W-REG-002]: this session is not listed for mur ps and mur stop{lost}: {}",
                e.message
            );
            None
        }
    }
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

/// The launch lines: one JSON line with `--json`, readable lines otherwise (more of
/// them with `--verbose`).
fn announce(
    args: &RunArgs,
    m: &Manifest,
    launched: &Launched,
    url: &str,
    session_loop: &LoopIdentity,
    posture: door::Posture,
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
            "door": posture.word(),
        });
        println!("{line}");
    } else {
        // Upstream's line: the port on localhost whatever --bind is, no scheme.
        println!("murmur: url localhost:{port}");
        println!("session: {}", launched.session_id);
        if let Some(line) = posture.line(args.bind, port, &launched.session_id) {
            println!("{line}");
        }
        if args.verbose {
            println!("workdir: {}", workdir.root.display());
            println!("manifest: {} v{}", m.name, m.version);
            match &m.capsule {
                Some(_) => println!("driver: none (an upstream capsule component, no model)"),
                None => println!("driver: {} ({})", driver_name(m), m.inference.model),
            }
            let skills = m
                .artifacts
                .iter()
                .filter(|a| a.runtime == manifest::Runtime::Skill)
                .count();
            if skills > 0 {
                println!("skills: {skills} installed");
            }
            println!("loop:    {}", session_loop.shown());
        }
    }
    if let Some(jail) = launched.tools.jail() {
        eprintln!("{}", sandbox_line(m, &jail.launch_line()));
    }
}

/// The sandbox's launch line, named for what runs in it: the shell, MCP servers, both.
fn sandbox_line(m: &Manifest, line: &str) -> String {
    let shell = !m.capabilities.shell_allow.is_empty();
    let servers = m
        .mcp_servers
        .iter()
        .any(|s| matches!(s.transport, manifest::McpTransport::Stdio { .. }));
    match (shell, servers) {
        (true, true) => line.replacen("shell:", "shell and mcp servers:", 1),
        (false, true) => line.replacen("shell:", "mcp servers:", 1),
        _ => line.to_string(),
    }
}

/// The driver as the manifest names it: a built-in's name or an artifact's.
fn driver_name(m: &Manifest) -> &str {
    match &m.inference.driver {
        DriverRef::Builtin { name, .. } | DriverRef::Artifact { name, .. } => name,
    }
}

/// SIGTERM and SIGINT, caught from here on. Taken before the session is announced and
/// listed: a signal sent the moment the launch line is read must reach the clean path,
/// which removes the entry, and not the default action, which leaves it behind.
fn catch_signals() -> Option<(Signal, Signal)> {
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(term), Ok(int)) => Some((term, int)),
        _ => None,
    }
}

/// The first SIGTERM or SIGINT stops the session cleanly (the running task is
/// canceled, the trace closed); a second one exits at once.
async fn stop_on_signals(
    caught: Option<(Signal, Signal)>,
    control: Arc<Control>,
    listed: Option<PathBuf>,
) {
    let Some((mut term, mut int)) = caught else {
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
    // exit() runs no destructor: the registry entry goes here.
    if let Some(path) = listed {
        let _ = std::fs::remove_file(path);
    }
    // Still no orphans: killing what is left takes milliseconds.
    let killed = crate::reaper::kill_leftovers().processes.len();
    if killed > 0 {
        eprintln!("[murmur] killed {killed} processes left behind by shell commands");
    }
    std::process::exit(143);
}
