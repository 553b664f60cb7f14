//! A formation's wiring, whoever hosts it (`mur run --roster` or `mur serve`): one fresh
//! credential per roster edge, held by the caller and checked by the callee, and one
//! relay per member through which its callers reach its door.
//!
//! Credentials live in this process only, never on disk: both ends of every edge are
//! here, so a host that starts again mints new ones and loses nothing. A member's
//! callers hold its relay, not its door, so a member that is stopped and started again
//! (a new session, a new door) is reached again without rewiring its callers.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use futures_util::future::BoxFuture;

use crate::peer::desk::{Peer, Seat, Target};
use crate::peer::member::{Callee, Progress};
use crate::peer::roster::Edge;
use crate::peer::{Ask, Failure, FailureKind};

/// Every member's side of every edge.
pub struct Wiring {
    members: HashMap<String, Wired>,
}

struct Wired {
    relay: Arc<Relay>,
    /// The credential of each edge into the member, by caller.
    edges_in: Vec<(String, String)>,
    /// The members it may call, each with that edge's credential.
    callees: Vec<(String, String)>,
}

impl Wiring {
    /// Mints a credential for each of `edges` between the members `names`. An edge
    /// naming no member is skipped: a roster's edges were checked when it was loaded.
    pub fn mint<'a>(names: impl IntoIterator<Item = &'a str>, edges: &[Edge]) -> Wiring {
        let mut members: HashMap<String, Wired> = names
            .into_iter()
            .map(|name| {
                let wired = Wired {
                    relay: Arc::new(Relay::new(name)),
                    edges_in: Vec::new(),
                    callees: Vec::new(),
                };
                (name.to_string(), wired)
            })
            .collect();
        for edge in edges {
            if !members.contains_key(&edge.from) || !members.contains_key(&edge.to) {
                continue;
            }
            let credential = crate::token::mint();
            // A credential is a secret like any token: scrubbed from whatever is shown.
            crate::secret::set(&credential);
            if let Some(callee) = members.get_mut(&edge.to) {
                callee
                    .edges_in
                    .push((edge.from.clone(), credential.clone()));
            }
            if let Some(caller) = members.get_mut(&edge.from) {
                caller.callees.push((edge.to.clone(), credential));
            }
        }
        Wiring { members }
    }

    /// A seat for `name`'s next session; `None` for a name that is not a member.
    pub fn seat(&self, name: &str) -> Option<Seat> {
        let wired = self.members.get(name)?;
        let callees = wired
            .callees
            .iter()
            .filter_map(|(callee, credential)| {
                let relay = self.members.get(callee)?.relay.clone();
                let cell = OnceLock::new();
                let _ = cell.set(relay as Arc<dyn Callee>);
                Some(Peer {
                    name: callee.clone(),
                    target: Target::Member {
                        callee: Arc::new(cell),
                        credential: credential.clone(),
                    },
                })
            })
            .collect();
        Some(Seat {
            name: name.to_string(),
            edges_in: wired.edges_in.clone(),
            callees,
        })
    }

    /// The relay `name`'s callers reach it through.
    pub fn relay(&self, name: &str) -> Option<Arc<Relay>> {
        self.members.get(name).map(|w| w.relay.clone())
    }
}

/// A member's door as its callers see it: the door of its current session, or, between
/// sessions, an answer that it is not running.
pub struct Relay {
    name: String,
    door: RwLock<Option<(String, Arc<dyn Callee>)>>,
}

impl Relay {
    fn new(name: &str) -> Relay {
        Relay {
            name: name.to_string(),
            door: RwLock::new(None),
        }
    }

    /// Session `session` serves the member from now on, through `door`.
    pub fn attach(&self, session: &str, door: Arc<dyn Callee>) {
        *self.door.write().unwrap_or_else(PoisonError::into_inner) =
            Some((session.to_string(), door));
    }

    /// Session `session` has ended; a later session already attached is kept.
    pub fn detach(&self, session: &str) {
        let mut door = self.door.write().unwrap_or_else(PoisonError::into_inner);
        if door.as_ref().is_some_and(|(s, _)| s == session) {
            *door = None;
        }
    }

    fn current(&self) -> Option<Arc<dyn Callee>> {
        self.door
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|(_, door)| door.clone())
    }

    fn not_running(&self) -> String {
        format!("{} is not running", self.name)
    }
}

impl Callee for Relay {
    fn take(&self, ask: &Ask, credential: &str) -> Result<String, Failure> {
        match self.current() {
            Some(door) => door.take(ask, credential),
            None => Err(Failure::new(FailureKind::Unreachable, self.not_running())),
        }
    }

    fn next<'a>(&'a self, task: &'a str, after: u64) -> BoxFuture<'a, Progress> {
        Box::pin(async move {
            match self.current() {
                Some(door) => door.next(task, after).await,
                None => Progress::Gone,
            }
        })
    }

    fn reply(&self, task: &str, text: String) -> Result<(), String> {
        match self.current() {
            Some(door) => door.reply(task, text),
            None => Err(self.not_running()),
        }
    }

    fn cancel(&self, task: &str) {
        if let Some(door) = self.current() {
            door.cancel(task);
        }
    }

    fn page(&self) -> Option<String> {
        self.current().and_then(|door| door.page())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(from: &str, to: &str) -> Edge {
        Edge {
            from: from.into(),
            to: to.into(),
        }
    }

    #[test]
    fn each_edge_has_its_own_credential_held_by_both_ends() {
        let wiring = Wiring::mint(
            ["lead", "a", "b"],
            &[edge("lead", "a"), edge("lead", "b"), edge("a", "b")],
        );
        let lead = wiring.seat("lead").unwrap();
        let b = wiring.seat("b").unwrap();
        assert!(lead.edges_in.is_empty());
        let names: Vec<&str> = lead.callees.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        let to_b = lead
            .callees
            .iter()
            .find_map(|p| match (&p.target, p.name.as_str()) {
                (Target::Member { credential, .. }, "b") => Some(credential.clone()),
                _ => None,
            })
            .unwrap();
        let callers: Vec<&str> = b.edges_in.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(callers, ["lead", "a"]);
        assert_eq!(b.edges_in[0].1, to_b);
        assert_ne!(b.edges_in[0].1, b.edges_in[1].1);
        // A second seat for the same member (its next session) holds the same edges.
        assert_eq!(wiring.seat("b").unwrap().edges_in, b.edges_in);
        assert!(wiring.seat("nobody").is_none());
    }

    #[test]
    fn a_relay_without_a_session_says_the_member_is_not_running() {
        let wiring = Wiring::mint(["lead", "worker"], &[edge("lead", "worker")]);
        let relay = wiring.relay("worker").unwrap();
        assert_eq!(
            relay.reply("tsk_1", "hi".into()),
            Err("worker is not running".into())
        );
        relay.detach("ses_other");
        assert!(relay.current().is_none());
    }
}
