//! A capsule's desk: who it is in a call chain, whether it takes peer tasks and from
//! whom, the chain each peer task it holds arrived with, and the peers it may call.
//! One desk per capsule, shared by its door (the callee's side) and its tools (the
//! caller's side), so a task a peer sent carries its chain into the calls it makes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use serde_json::json;

use super::chain::{Chain, Link};
use super::member::Callee;
use super::remote::Remote;
use crate::error::Error;
use crate::manifest::Manifest;
use crate::token::Hash;

/// The fixed answer to a peer task a capsule does not consent to: one status and body
/// for every method, path and body, naming nothing of the capsule.
pub const NOT_ACCEPTED: &str = "this capsule does not accept tasks from peers";
/// The answer to a peer task without the credential of a roster edge into the member.
pub const NO_EDGE: &str = "this member takes peer tasks only from the members its roster lets call it, each with its own credential";

/// Why a peer task was not taken, with the HTTP answer the door gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// `exports.peer_tasks.accept` is not set.
    NotAccepted,
    /// A formation member was sent a peer task without a credential of an edge into it.
    NoEdge,
    /// The chain it came with is a cycle, too deep, or not a chain.
    Chain(String),
}

impl Refusal {
    /// The HTTP status and JSON body of the refusal.
    pub fn answer(&self) -> (&'static str, serde_json::Value) {
        match self {
            Refusal::NotAccepted => (
                "403 Forbidden",
                json!({"error": "peer_not_accepted", "message": NOT_ACCEPTED}),
            ),
            Refusal::NoEdge => (
                "403 Forbidden",
                json!({"error": "peer_credential_refused", "message": NO_EDGE}),
            ),
            Refusal::Chain(message) => (
                "409 Conflict",
                json!({"error": "peer_call_refused", "message": message}),
            ),
        }
    }

    /// What the caller's model reads, naming the callee.
    pub fn told(&self, callee: &str) -> String {
        match self {
            Refusal::NotAccepted => format!("{callee} refused the task: {NOT_ACCEPTED}"),
            Refusal::NoEdge => format!("{callee} refused the task: {NO_EDGE}"),
            Refusal::Chain(message) => message.clone(),
        }
    }
}

/// A peer task the desk took: who sent it and the chain it came with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// The roster name of the member that sent it, inside a formation.
    pub caller: Option<String>,
    pub chain: Chain,
}

/// Someone this capsule may call, by the name its model uses.
pub struct Peer {
    pub name: String,
    pub target: Target,
}

pub enum Target {
    /// A member of the same formation, reached without a socket. The callee is set once
    /// every member is open; `credential` is this edge's own.
    Member {
        callee: Arc<OnceLock<Arc<dyn Callee>>>,
        credential: String,
    },
    /// A remote A2A agent.
    Remote(Arc<Remote>),
}

/// A formation member's place, as its launcher gives it: its roster name, the
/// credential of each edge into it by caller, and the members it may call.
pub struct Seat {
    pub name: String,
    pub edges_in: Vec<(String, String)>,
    pub callees: Vec<Peer>,
}

/// How many tasks' arrivals a desk keeps: far more than a capsule holds at once.
const KEPT: usize = 1024;

/// What a task arrived with that its own calls pass on, and its call's facts.
#[derive(Default)]
struct Arrival {
    admitted: Option<Admitted>,
    traceparent: Option<String>,
    call: Option<Call>,
}

/// The caller's side of a peer task, as it arrived: for the callee's end line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Call {
    pub call_id: Option<String>,
    pub caller_task: Option<String>,
}

/// A peer task that ended: who sent it and how it was called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    pub caller: Option<String>,
    pub call: Call,
}

pub struct Desk {
    me: Link,
    accepts: bool,
    /// In a formation: the credential of each roster edge into this member, by the
    /// caller's name. `None` outside a formation: the door's own check is all.
    edges_in: OnceLock<Vec<(Hash, String)>>,
    /// What each recent task arrived with, by task id (ids sort by creation time, so
    /// the oldest go first once [`KEPT`] are held).
    book: Mutex<BTreeMap<String, Arrival>>,
    peers: OnceLock<Vec<Peer>>,
}

impl Desk {
    /// `name` and `session` say who this capsule is in a chain; `accepts` is its
    /// `exports.peer_tasks.accept`.
    pub fn new(name: &str, session: &str, accepts: bool) -> Self {
        Desk {
            me: Link {
                name: name.to_string(),
                session: session.to_string(),
            },
            accepts,
            edges_in: OnceLock::new(),
            book: Mutex::new(BTreeMap::new()),
            peers: OnceLock::new(),
        }
    }

    /// The desk of a capsule about to open as session `session`: a formation member's
    /// when `seat` is given, and every remote peer its manifest names, each with its
    /// token read from the environment now, so a missing one stops the launch.
    pub fn for_capsule(m: &Manifest, seat: Option<Seat>, session: &str) -> Result<Desk, Error> {
        let name = seat.as_ref().map_or(m.name.as_str(), |s| s.name.as_str());
        let desk = Desk::new(name, session, m.accepts_peer_tasks);
        let mut peers = Vec::new();
        if let Some(seat) = seat {
            desk.set_edges_in(&seat.edges_in);
            peers = seat.callees;
        }
        for remote in &m.peers {
            if peers.iter().any(|p: &Peer| p.name == remote.name) {
                return Err(Error::new(
                    "E-RUN-065",
                    format!(
                        "peers[] names '{}', which is also a member of its formation",
                        remote.name
                    ),
                )
                .hint("give the remote peer another name"));
            }
            let token = match &remote.token_env {
                None => None,
                Some(var) => Some(std::env::var(var).map_err(|_| {
                    Error::new(
                        "E-RUN-066",
                        format!(
                            "peer '{}' takes its token from {var}, which is not set",
                            remote.name
                        ),
                    )
                    .hint(format!(
                        "export {var}=<the token its door wants>, or remove token_env"
                    ))
                })?),
            };
            let allow = m.capabilities.network_allow.clone();
            let client = Remote::new(&remote.name, &remote.card, token, allow);
            peers.push(Peer {
                name: remote.name.clone(),
                target: Target::Remote(Arc::new(client)),
            });
        }
        desk.set_peers(peers);
        Ok(desk)
    }

    pub fn me(&self) -> &Link {
        &self.me
    }

    /// The credentials of a formation's edges into this member, by caller. Set once.
    pub fn set_edges_in(&self, edges: &[(String, String)]) {
        let hashed = edges
            .iter()
            .map(|(caller, token)| (Hash::of(token), caller.clone()))
            .collect();
        let _ = self.edges_in.set(hashed);
    }

    /// Who this capsule may call. Set once, before its session runs.
    pub fn set_peers(&self, peers: Vec<Peer>) {
        let _ = self.peers.set(peers);
    }

    pub fn peers(&self) -> &[Peer] {
        self.peers.get().map_or(&[], Vec::as_slice)
    }

    pub fn peer(&self, name: &str) -> Option<&Peer> {
        self.peers().iter().find(|p| p.name == name)
    }

    /// Whether a peer task presenting `credential` (a bearer token) with `chain` may be
    /// taken. Consent first, then the edge, then the chain.
    pub fn admit(&self, credential: Option<&str>, chain: Chain) -> Result<Admitted, Refusal> {
        if !self.accepts {
            return Err(Refusal::NotAccepted);
        }
        let caller = match self.edges_in.get() {
            None => None,
            Some(edges) => Some(edge_of(edges, credential).ok_or(Refusal::NoEdge)?),
        };
        chain.admits(&self.me).map_err(Refusal::Chain)?;
        Ok(Admitted { caller, chain })
    }

    /// A task that arrived at the door: its caller's trace context, and for a peer
    /// task the chain its own calls extend.
    pub fn arrived(
        &self,
        task: &str,
        admitted: Option<(Admitted, Call)>,
        traceparent: Option<&str>,
    ) {
        let traceparent = traceparent
            .filter(|t| crate::telemetry::context::is_traceparent(t))
            .map(str::to_string);
        if admitted.is_none() && traceparent.is_none() {
            return;
        }
        let (admitted, call) = admitted.map_or((None, None), |(a, c)| (Some(a), Some(c)));
        let mut book = self.book();
        let arrival = Arrival {
            admitted,
            traceparent,
            call,
        };
        book.insert(task.to_string(), arrival);
        while book.len() > KEPT {
            book.pop_first();
        }
    }

    /// The chain a call made by `task` carries: the one `task` arrived with, then this
    /// capsule.
    pub fn chain_for(&self, task: &str) -> Chain {
        let before = self
            .book()
            .get(task)
            .and_then(|a| a.admitted.as_ref())
            .map(|a| a.chain.clone())
            .unwrap_or_default();
        before.then(self.me.clone())
    }

    /// The trace context `task` arrived with, passed on to the calls it makes.
    pub fn traceparent_of(&self, task: &str) -> Option<String> {
        self.book().get(task).and_then(|a| a.traceparent.clone())
    }

    /// `task` ended: what it arrived with is no longer needed. A peer task's caller
    /// and call come back, for its end line.
    pub fn ended(&self, task: &str) -> Option<Answered> {
        let arrival = self.book().remove(task)?;
        let admitted = arrival.admitted?;
        Some(Answered {
            caller: admitted.caller,
            call: arrival.call.unwrap_or_default(),
        })
    }

    fn book(&self) -> MutexGuard<'_, BTreeMap<String, Arrival>> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The caller whose edge credential `credential` is. Every hash is compared, so a
/// refusal takes as long as an admission.
fn edge_of(edges: &[(Hash, String)], credential: Option<&str>) -> Option<String> {
    let authorization = credential.map(|c| format!("Bearer {c}"));
    let mut found = None;
    for (hash, caller) in edges {
        if hash.admits(authorization.as_deref()) {
            found = Some(caller.clone());
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(names: &[&str]) -> Chain {
        names.iter().fold(Chain::empty(), |c, n| {
            c.then(Link {
                name: n.to_string(),
                session: format!("ses_{n}"),
            })
        })
    }

    #[test]
    fn a_capsule_without_consent_refuses_every_peer_task_alike() {
        let desk = Desk::new("worker", "ses_worker", false);
        assert_eq!(
            desk.admit(None, chain(&["lead"])),
            Err(Refusal::NotAccepted)
        );
        let (status, body) = Refusal::NotAccepted.answer();
        assert_eq!(status, "403 Forbidden");
        assert_eq!(
            body.to_string(),
            r#"{"error":"peer_not_accepted","message":"this capsule does not accept tasks from peers"}"#
        );
    }

    #[test]
    fn a_member_takes_peer_tasks_only_with_an_edge_credential() {
        let desk = Desk::new("worker", "ses_worker", true);
        desk.set_edges_in(&[("lead".into(), "mur_edge_lead_worker".into())]);
        assert_eq!(desk.admit(None, chain(&["lead"])), Err(Refusal::NoEdge));
        assert_eq!(
            desk.admit(Some("mur_wrong"), chain(&["lead"])),
            Err(Refusal::NoEdge)
        );
        let taken = desk.admit(Some("mur_edge_lead_worker"), chain(&["lead"]));
        assert_eq!(taken.map(|a| a.caller), Ok(Some("lead".into())));
    }

    #[test]
    fn only_a_well_formed_traceparent_is_passed_on() {
        let desk = Desk::new("lead", "ses_lead", false);
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        desk.arrived("tsk_1", None, Some(good));
        desk.arrived("tsk_2", None, Some("00-x\nforged-line"));
        assert_eq!(desk.traceparent_of("tsk_1").as_deref(), Some(good));
        assert_eq!(desk.traceparent_of("tsk_2"), None);
    }

    #[test]
    fn a_task_that_would_close_a_cycle_is_refused_naming_the_chain() {
        let desk = Desk::new("lead", "ses_lead", true);
        let refused = desk.admit(None, chain(&["lead", "worker"]));
        assert_eq!(
            refused,
            Err(Refusal::Chain(
                "refused: calling lead would form a cycle: lead → worker → lead; a capsule waiting on a call cannot take a task that call sent".into()
            ))
        );
    }

    #[test]
    fn a_held_task_passes_its_chain_on_to_its_calls() {
        let desk = Desk::new("worker", "ses_worker", true);
        let admitted = desk.admit(None, chain(&["lead"])).expect("admitted");
        desk.arrived("tsk_1", Some((admitted, Call::default())), None);
        assert_eq!(desk.chain_for("tsk_1"), chain(&["lead", "worker"]));
        assert_eq!(desk.chain_for("tsk_other"), chain(&["worker"]));
        let answered = desk.ended("tsk_1").map(|a| a.caller);
        assert_eq!(
            answered,
            Some(None),
            "a peer task outside a formation has no caller"
        );
        assert_eq!(desk.chain_for("tsk_1"), chain(&["worker"]));
    }
}
