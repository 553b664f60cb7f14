//! The handshake era's sessions: the `Mcp-Session-Id` an `initialize` mints, asked of
//! every request after it. A session holds only what the door must remember between
//! requests (whose it is, and which of its calls run which task), and the table is
//! bounded twice over: a capsule keeps at most [`PER_CAPSULE`] sessions and the process
//! [`TOTAL`], and one idle for [`idle_after`] is forgotten. A full table makes room by
//! forgetting the session idle longest; one with a call in flight is never forgotten.
//!
//! The table is the process's (under `mur serve` it holds every hosted capsule's
//! sessions, each tagged with the capsule's session id, so a capsule that restarts
//! leaves its clients' sessions unknown: they initialize again).

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::token::Hash;

/// The most sessions one capsule keeps.
pub const PER_CAPSULE: usize = 64;
/// The most sessions the process keeps, across every capsule it serves.
pub const TOTAL: usize = 1024;
/// The most calls one session may have in flight at once.
pub const CALLS_PER_SESSION: usize = 16;

/// How long a session may go without a request before it is forgotten; tests shorten
/// it through `MUR_MCP_SESSION_IDLE_MS`.
pub fn idle_after() -> Duration {
    static IDLE: LazyLock<Duration> = LazyLock::new(|| {
        std::env::var("MUR_MCP_SESSION_IDLE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(Duration::from_secs(30 * 60), Duration::from_millis)
    });
    *IDLE
}

/// Whose a session is: the capsule session it belongs to, and the hash of the
/// `Authorization` it was opened with (a session is only ever used with the credential
/// that opened it; anyone else is told it does not exist).
#[derive(Clone, PartialEq, Eq)]
pub struct Owner {
    pub capsule: String,
    pub credential: Hash,
}

impl Owner {
    pub fn of(capsule: &str, authorization: Option<&str>) -> Owner {
        Owner {
            capsule: capsule.to_string(),
            credential: Hash::of(authorization.unwrap_or_default()),
        }
    }
}

struct Entry {
    owner: Owner,
    /// The version `initialize` settled on.
    version: &'static str,
    last: Instant,
    /// The calls in flight: the request's id (as JSON) and the task it runs.
    calls: Vec<(String, String)>,
}

/// Why no session was opened.
#[derive(Debug, PartialEq, Eq)]
pub enum Full {
    /// Every session the capsule (or the process) may keep has a call in flight.
    Busy(usize),
}

#[derive(Default)]
pub struct Table {
    sessions: HashMap<String, Entry>,
}

/// The process's table.
pub fn table() -> MutexGuard<'static, Table> {
    static TABLE: LazyLock<Mutex<Table>> = LazyLock::new(Mutex::default);
    TABLE.lock().unwrap_or_else(|p| p.into_inner())
}

impl Table {
    /// A new session for `owner` at `version`: its id.
    pub fn open(
        &mut self,
        owner: Owner,
        version: &'static str,
        now: Instant,
        idle: Duration,
    ) -> Result<String, Full> {
        self.sessions
            .retain(|_, e| !e.calls.is_empty() || now.duration_since(e.last) < idle);
        let mine = |e: &Entry| e.owner.capsule == owner.capsule;
        if self.sessions.values().filter(|e| mine(e)).count() >= PER_CAPSULE {
            self.forget_longest_idle(mine)
                .ok_or(Full::Busy(PER_CAPSULE))?;
        }
        if self.sessions.len() >= TOTAL {
            self.forget_longest_idle(|_| true)
                .ok_or(Full::Busy(TOTAL))?;
        }
        let id = format!("mcp_{}{}", crate::ids::token(), crate::ids::token());
        let entry = Entry {
            owner,
            version,
            last: now,
            calls: Vec::new(),
        };
        self.sessions.insert(id.clone(), entry);
        Ok(id)
    }

    fn forget_longest_idle(&mut self, among: impl Fn(&Entry) -> bool) -> Option<()> {
        let oldest = self
            .sessions
            .iter()
            .filter(|(_, e)| e.calls.is_empty() && among(e))
            .min_by_key(|(_, e)| e.last)
            .map(|(id, _)| id.clone())?;
        self.sessions.remove(&oldest);
        Some(())
    }

    /// The session `id` of `owner`, if it is live: its version, and it counts as used
    /// now. An expired one is forgotten here.
    pub fn touch(
        &mut self,
        id: &str,
        owner: &Owner,
        now: Instant,
        idle: Duration,
    ) -> Option<&'static str> {
        let entry = self.sessions.get_mut(id).filter(|e| e.owner == *owner)?;
        if entry.calls.is_empty() && now.duration_since(entry.last) >= idle {
            self.sessions.remove(id);
            return None;
        }
        entry.last = now;
        Some(entry.version)
    }

    /// Ends the session: the tasks its calls in flight run, to cancel. `None` when
    /// `owner` holds no such session.
    pub fn end(&mut self, id: &str, owner: &Owner) -> Option<Vec<String>> {
        self.sessions.get(id).filter(|e| e.owner == *owner)?;
        let entry = self.sessions.remove(id)?;
        Some(entry.calls.into_iter().map(|(_, task)| task).collect())
    }

    /// A call of the session began running `task`. `false` when the session is gone or
    /// already has its most calls in flight.
    pub fn call_began(&mut self, id: &str, request: &Value, task: &str) -> bool {
        let Some(entry) = self.sessions.get_mut(id) else {
            return false;
        };
        if entry.calls.len() >= CALLS_PER_SESSION {
            return false;
        }
        entry.calls.push((request.to_string(), task.to_string()));
        true
    }

    /// A call of the session ended (or its client went): its idle time starts again.
    pub fn call_ended(&mut self, id: &str, request: &Value, now: Instant) {
        if let Some(entry) = self.sessions.get_mut(id) {
            let key = request.to_string();
            entry.calls.retain(|(r, _)| *r != key);
            entry.last = now;
        }
    }

    /// Whether a session of `owner` runs a call with this request id: its task.
    pub fn task_of(&self, id: &str, owner: &Owner, request: &Value) -> Option<String> {
        let entry = self.sessions.get(id).filter(|e| e.owner == *owner)?;
        let key = request.to_string();
        entry
            .calls
            .iter()
            .find(|(r, _)| *r == key)
            .map(|(_, task)| task.clone())
    }

    /// Whether the session has room for one more call.
    pub fn can_call(&self, id: &str) -> bool {
        self.sessions
            .get(id)
            .is_some_and(|e| e.calls.len() < CALLS_PER_SESSION)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const IDLE: Duration = Duration::from_secs(60);

    fn owner(capsule: &str) -> Owner {
        Owner::of(capsule, Some("Bearer mur_x"))
    }

    #[test]
    fn a_session_answers_only_its_owner_and_expires_when_idle() {
        let mut table = Table::default();
        let t0 = Instant::now();
        let id = table.open(owner("ses_a"), "2025-11-25", t0, IDLE).unwrap();
        assert!(id.starts_with("mcp_") && id.len() == 68, "{id}");
        assert_eq!(
            table.touch(&id, &owner("ses_a"), t0, IDLE),
            Some("2025-11-25")
        );
        let stranger = Owner::of("ses_a", Some("Bearer mur_y"));
        assert_eq!(table.touch(&id, &stranger, t0, IDLE), None);
        assert_eq!(table.touch(&id, &owner("ses_b"), t0, IDLE), None);
        assert!(
            table.end(&id, &stranger).is_none(),
            "not the owner's to end"
        );
        // Used at 59 s: live until 119 s.
        let t59 = t0 + Duration::from_secs(59);
        assert!(table.touch(&id, &owner("ses_a"), t59, IDLE).is_some());
        let t119 = t0 + Duration::from_secs(119);
        assert_eq!(table.touch(&id, &owner("ses_a"), t119, IDLE), None);
        assert!(
            table.sessions.is_empty(),
            "the expired session is forgotten"
        );
    }

    #[test]
    fn a_call_in_flight_holds_its_session_and_ending_names_its_task() {
        let mut table = Table::default();
        let t0 = Instant::now();
        let id = table.open(owner("ses_a"), "2025-11-25", t0, IDLE).unwrap();
        assert!(table.call_began(&id, &json!(3), "tsk_1"));
        let late = t0 + 10 * IDLE;
        assert!(table.touch(&id, &owner("ses_a"), late, IDLE).is_some());
        assert_eq!(
            table.task_of(&id, &owner("ses_a"), &json!(3)).as_deref(),
            Some("tsk_1")
        );
        assert_eq!(table.task_of(&id, &owner("ses_a"), &json!("3")), None);
        assert_eq!(table.end(&id, &owner("ses_a")), Some(vec!["tsk_1".into()]));
        assert!(!table.call_began(&id, &json!(4), "tsk_2"), "it has ended");
    }

    #[test]
    fn a_full_capsule_forgets_its_longest_idle_session_but_never_a_busy_one() {
        let mut table = Table::default();
        let t0 = Instant::now();
        let mut ids = Vec::new();
        for n in 0..PER_CAPSULE {
            let at = t0 + Duration::from_millis(n as u64);
            ids.push(table.open(owner("ses_a"), "2025-11-25", at, IDLE).unwrap());
        }
        // Another capsule's sessions are not counted against this one.
        assert!(table.open(owner("ses_b"), "2025-11-25", t0, IDLE).is_ok());
        assert!(table.call_began(&ids[0], &json!(1), "tsk_1"));
        let now = t0 + Duration::from_secs(1);
        table.open(owner("ses_a"), "2025-11-25", now, IDLE).unwrap();
        assert!(table.sessions.contains_key(&ids[0]), "busy: kept");
        assert!(
            !table.sessions.contains_key(&ids[1]),
            "the longest idle went"
        );
        // Every session of the capsule busy: no room is made.
        for id in table.sessions.keys().cloned().collect::<Vec<_>>() {
            assert!(table.call_began(&id, &json!(2), "tsk"));
        }
        assert_eq!(
            table.open(owner("ses_a"), "2025-11-25", now, IDLE),
            Err(Full::Busy(PER_CAPSULE))
        );
    }

    #[test]
    fn a_session_takes_a_bounded_number_of_calls() {
        let mut table = Table::default();
        let t0 = Instant::now();
        let id = table.open(owner("ses_a"), "2025-11-25", t0, IDLE).unwrap();
        for n in 0..CALLS_PER_SESSION {
            assert!(table.call_began(&id, &json!(n), "tsk"));
        }
        assert!(!table.can_call(&id));
        assert!(!table.call_began(&id, &json!("one more"), "tsk"));
        table.call_ended(&id, &json!(0), t0);
        assert!(table.can_call(&id));
    }
}
