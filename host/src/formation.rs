//! `mur run --roster`: a formation of capsules in one process. Every member is staged on
//! one engine, opened and served at an address of its own on loopback (to watch it, or
//! to reach its web view), and handed its seat: the credential of each roster edge into
//! it, and the members it may call. A call between members goes through the callee's
//! door code without a socket. The entry member then runs as `mur run` runs a capsule,
//! with the launch task; when its session ends, every other member is stopped.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
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
use crate::peer::desk::{Peer, Seat, Target};
use crate::peer::member::Callee;
use crate::peer::roster::{Member, Roster};
use crate::server::{self, Mount};
use crate::workdir::RecordsChoice;

/// How long a member has to wind down once the entry member's session ended.
const WIND_DOWN: Duration = Duration::from_secs(10);

/// A member's door, filled in once the member is open.
type Cell = Arc<OnceLock<Arc<dyn Callee>>>;

pub async fn run(args: RunArgs) -> Result<ExitCode, Error> {
    let Some(roster_arg) = args.roster.clone() else {
        return Err(Error::new("E-RUN-001", "mur run --roster needs a roster"));
    };
    let roster = Roster::load(&roster_arg)?;
    let manifests = load_members(&roster)?;
    let mut seats = seats(&roster);
    let engine = Engine::new()?;
    let formation = format!("frm_{}", uuid::Uuid::now_v7().simple());
    eprintln!("formation: {formation}  {}", roster.dir.display());
    let mut running = Vec::new();
    for (member, m) in roster.members.iter().zip(&manifests) {
        if member.entry {
            continue;
        }
        let seat = (seats.take(&member.name), seats.cell(&member.name));
        running.push(open_member(&engine, member, m.clone(), seat).await?);
    }
    let entry = roster.entry();
    eprintln!("  entry  {}  starting", entry.name);
    let mut entry_args = args.clone();
    entry_args.roster = None;
    entry_args.manifest = entry.manifest.clone();
    let seat = seats.take(&entry.name);
    let ended = crate::run::run_seated(entry_args, &engine, seat).await;
    for member in &running {
        member.control.stop();
    }
    for member in running {
        let _ = tokio::time::timeout(WIND_DOWN, member.session).await;
    }
    ended
}

/// Every member's manifest, and each callee's consent to peer tasks, checked before
/// anything starts.
fn load_members(roster: &Roster) -> Result<Vec<Arc<Manifest>>, Error> {
    let mut manifests = Vec::with_capacity(roster.members.len());
    for member in &roster.members {
        let loaded = manifest::load(&member.manifest)?;
        for warning in &loaded.warnings {
            eprintln!("{}", warning.text);
        }
        manifests.push(Arc::new(loaded.manifest));
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

/// Every member's seat: one fresh credential per roster edge, held by the caller and
/// checked by the callee, and the cells the callees' doors will fill.
struct Seats {
    seats: HashMap<String, Seat>,
    cells: HashMap<String, Cell>,
}

impl Seats {
    fn take(&mut self, name: &str) -> Option<Seat> {
        self.seats.remove(name)
    }

    fn cell(&self, name: &str) -> Option<Cell> {
        self.cells.get(name).cloned()
    }
}

fn seats(roster: &Roster) -> Seats {
    let cells: HashMap<String, Cell> = roster
        .members
        .iter()
        .map(|m| (m.name.clone(), Arc::new(OnceLock::new()) as Cell))
        .collect();
    let mut seats: HashMap<String, Seat> = roster
        .members
        .iter()
        .map(|m| {
            let seat = Seat {
                name: m.name.clone(),
                edges_in: Vec::new(),
                callees: Vec::new(),
            };
            (m.name.clone(), seat)
        })
        .collect();
    for edge in &roster.edges {
        let credential = crate::serve::token::mint();
        crate::secret::set(&credential);
        if let Some(callee) = seats.get_mut(&edge.to) {
            callee
                .edges_in
                .push((edge.from.clone(), credential.clone()));
        }
        let (Some(caller), Some(cell)) = (seats.get_mut(&edge.from), cells.get(&edge.to)) else {
            continue;
        };
        caller.callees.push(Peer {
            name: edge.to.clone(),
            target: Target::Member {
                callee: cell.clone(),
                credential,
            },
        });
    }
    Seats { seats, cells }
}

/// A member other than the entry, open and serving.
struct Running {
    control: Arc<Control>,
    session: JoinHandle<()>,
}

/// Stages, opens and serves one member on loopback, and fills its cell so the members
/// that call it reach its door.
async fn open_member(
    engine: &Engine,
    member: &Member,
    m: Arc<Manifest>,
    (seat, cell): (Option<Seat>, Option<Cell>),
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
    if let Some(cell) = cell {
        let _ = cell.set(served.clone());
    }
    eprintln!(
        "  member {}  {}  {url}  workdir {}",
        member.name,
        launched.session_id,
        launched.workdir.root.display()
    );
    let registration = crate::run::register(&m, launched, &url, door.token);
    let control = launched.control.clone();
    let server = tokio::spawn(server::serve(
        listener,
        Mount::One(served, Arc::new(door.door)),
    ));
    let session = tokio::spawn(async move {
        opened.run(Instant::now(), |_| {}).await;
        server.abort();
        drop(registration);
    });
    Ok(Running { control, session })
}
