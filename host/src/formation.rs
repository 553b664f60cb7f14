//! `mur run --roster`: a formation of capsules in one process. Every member is staged on
//! one engine, opened and served at an address of its own on loopback (to watch it, or
//! to reach its web view), and handed its seat: the credential of each roster edge into
//! it, and the members it may call. A call between members goes through the callee's
//! door code without a socket. The entry member then runs as `mur run` runs a capsule,
//! with the launch task; when its session ends, every other member is stopped.
//!
//! Each member is listed for `mur ps` as a session of its own naming the formation, so
//! `mur stop frm_…` ends them all; `mur serve` hosts formations too (`serve::formations`),
//! wired by the same [`seats`].

pub(crate) mod seats;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::a2a;
use crate::capsule::{self, Launch, Options};
use crate::cli::RunArgs;
use crate::confine::Class;
use crate::control::Control;
use crate::door;
use crate::engine::Engine;
use crate::error::Error;
use crate::manifest::{self, Manifest};
use crate::peer::desk::Seat;
use crate::peer::roster::{Member, Roster};
use crate::server::{self, Mount};
use crate::workdir::RecordsChoice;
use seats::{Relay, Wiring};

/// How long a member has to wind down once the entry member's session ended.
const WIND_DOWN: Duration = Duration::from_secs(10);

/// A new formation id: `frm_` and 32 hex characters, sorting by creation time.
pub(crate) fn mint_id() -> String {
    format!("frm_{}", uuid::Uuid::now_v7().simple())
}

/// Whether `id` is one [`mint_id`] makes: anything else names no formation, and never
/// a path.
pub(crate) fn is_id(id: &str) -> bool {
    id.strip_prefix("frm_")
        .is_some_and(|hex| hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

pub async fn run(args: RunArgs) -> Result<ExitCode, Error> {
    let Some(roster_arg) = args.roster.clone() else {
        return Err(Error::new("E-RUN-001", "mur run --roster needs a roster"));
    };
    let roster = Roster::load(&roster_arg)?;
    let manifests = load_members(&roster, &mut |warning| eprintln!("{warning}"))?;
    let wiring = Wiring::mint(
        roster.members.iter().map(|m| m.name.as_str()),
        &roster.edges,
    );
    let engine = Engine::new()?;
    let formation = mint_id();
    eprintln!("formation: {formation}  {}", roster.dir.display());
    let entry = roster.entry();
    let roster_file = if roster_arg.is_dir() {
        roster.dir.join(crate::peer::roster::ROSTER_FILE)
    } else {
        std::path::absolute(&roster_arg).unwrap_or_else(|_| roster_arg.clone())
    };
    crate::running::join_formation(&formation, &roster_file, &entry.name);
    let mut running = Vec::new();
    for (member, m) in roster.members.iter().zip(&manifests) {
        if member.entry {
            continue;
        }
        let seat = (wiring.seat(&member.name), wiring.relay(&member.name));
        running.push(open_member(&engine, member, m.clone(), seat).await?);
    }
    eprintln!("  entry  {}  starting", entry.name);
    let mut entry_args = args.clone();
    entry_args.roster = None;
    entry_args.manifest = entry.manifest.clone();
    let seat = wiring.seat(&entry.name);
    let ended = crate::run::run_seated(entry_args, &engine, seat).await;
    for member in &running {
        member.control.stop();
    }
    for member in running {
        let _ = tokio::time::timeout(WIND_DOWN, member.session).await;
    }
    crate::telemetry::flush_at_exit().await;
    ended
}

/// Every member's manifest, and each callee's consent to peer tasks, checked before
/// anything starts; each manifest warning goes to `warn`.
pub(crate) fn load_members(
    roster: &Roster,
    warn: &mut dyn FnMut(&str),
) -> Result<Vec<Arc<Manifest>>, Error> {
    let mut manifests = Vec::with_capacity(roster.members.len());
    for member in &roster.members {
        let loaded = manifest::load(&member.manifest)?;
        for warning in &loaded.warnings {
            warn(&warning.text);
        }
        let mut m = loaded.manifest;
        crate::registry::resolve::resolve_here(&mut m, warn)?;
        manifests.push(Arc::new(m));
    }
    for (member, m) in roster.members.iter().zip(&manifests) {
        let called = roster.edges.iter().any(|e| e.to == member.name);
        if called && !m.accepts_peer_tasks {
            return Err(Error::new(
                "E-ROS-005",
                format!(
                    "roster.yaml: member '{}' is listed in a reachability rule's `to`, but its manifest does not declare `exports.peer_tasks.accept: true`",
                    member.name
                ),
            )
            .hint(format!(
                "add exports: {{peer_tasks: {{accept: true}}}} to {}",
                member.manifest.display()
            )));
        }
    }
    Ok(manifests)
}

/// A member other than the entry, open and serving.
struct Running {
    control: Arc<Control>,
    session: JoinHandle<()>,
}

/// Stages, opens and serves one member on loopback, and attaches its door to its relay
/// so the members that call it reach it.
async fn open_member(
    engine: &Engine,
    member: &Member,
    m: Arc<Manifest>,
    (seat, relay): (Option<Seat>, Option<Arc<Relay>>),
) -> Result<Running, Error> {
    let options = Options {
        records: RecordsChoice {
            manifest_dir: &m.dir,
            workdir: None,
            records: None,
        },
        loop_path: None,
        containment: None::<Class>,
        launch: Launch::None,
        resume: None,
        journal: None,
        tasks: None,
        memory: None,
        cpu: None,
        spend: None,
        seat,
        telemetry: crate::telemetry::for_run(&m.observability)?,
    };
    let door = door::plan(
        m.network.authentication.is_some(),
        std::net::Ipv4Addr::LOCALHOST.into(),
        false,
    )?;
    let staged = capsule::stage(engine, m.clone(), options).await?;
    let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .await
        .map_err(|e| Error::new("E-RUN-010", format!("could not listen on loopback: {e}")))?;
    let url = listener
        .local_addr()
        .map(|a| format!("http://{a}"))
        .map_err(|e| Error::new("E-IO-003", format!("could not read the bound address: {e}")))?;
    let opened = staged.open(&url).await?;
    let launched = opened.launched();
    let guard = match door.posture {
        door::Posture::Bearer => a2a::Guard::Bearer,
        door::Posture::Local | door::Posture::Open => a2a::Guard::Open,
    };
    let served = opened.served(guard);
    if let Some(relay) = &relay {
        relay.attach(&launched.session_id, served.clone());
    }
    eprintln!(
        "  member {}  {}  {url}  workdir {}",
        member.name,
        launched.session_id,
        launched.workdir.root.display()
    );
    crate::running::seat_member(&launched.session_id, &member.name);
    let registration = crate::run::register(&m, launched, &url, door.token);
    let control = launched.control.clone();
    let server = tokio::spawn(server::serve(
        listener,
        Mount::One(served, Arc::new(door.door)),
    ));
    let session_id = launched.session_id.clone();
    let session = tokio::spawn(async move {
        opened.run(Instant::now(), |_| {}).await;
        if let Some(relay) = relay {
            relay.detach(&session_id);
        }
        server.abort();
        drop(registration);
    });
    Ok(Running { control, session })
}
