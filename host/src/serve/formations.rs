//! Formations `mur serve` hosts: `POST /admin/formations` admits a roster and creates one
//! hosted capsule per member, each at its own `/c/<id>/` with its own token and limits,
//! wired as `mur run --roster` wires them (`crate::formation::seats`): a call between
//! members goes through the callee's door code without a socket. `GET` describes a
//! formation with its members' capsule ids; `DELETE` stops and removes them all.
//!
//! A formation's record (`DATA/formations/<id>/formation.json`) keeps its members and
//! edges as admitted, so a restart rewires exactly what was created, whatever became of
//! the roster file since; its edge credentials are minted afresh at every start, as they
//! never leave the process. A formation is brought back whole or not at all: when its
//! record or one of its members' entries is missing, none of its members starts, each
//! is `failed` naming why, and `DELETE` removes what is left.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::admin::{check_limits, error, file_on_server, now_ms};
use super::fleet::{Fleet, Hosted};
use super::registry::{self, Entry, Limits, Membership, Registry};
use crate::error::Error;
use crate::formation::seats::{Relay, Wiring};
use crate::formation::{is_id, load_members, mint_id};
use crate::http1::{Reply, Request};
use crate::peer::desk::Seat;
use crate::peer::roster::{Edge, ROSTER_FILE, Roster};
use crate::token;

/// How long a delete waits for each member to wind down.
const STOP_WAIT: Duration = Duration::from_secs(30);
const RECORD_FILE: &str = "formation.json";

/// A formation as its record keeps it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Record {
    pub id: String,
    /// Milliseconds since the Unix epoch.
    pub created_at: u64,
    /// The roster file it was admitted from.
    pub roster: PathBuf,
    /// Whether the roster came in the request body (and lives beside the record).
    pub from_body: bool,
    /// In roster order.
    pub members: Vec<MemberRecord>,
    pub edges: Vec<EdgeRecord>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MemberRecord {
    pub name: String,
    /// Its hosted capsule's id.
    pub capsule: String,
    pub entry: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EdgeRecord {
    pub from: String,
    pub to: String,
}

/// One formation in memory: its record, its wiring, and why it is not wired when a
/// restart found it incomplete.
pub struct Formation {
    record: Record,
    wiring: Wiring,
    broken: Option<String>,
}

impl Formation {
    fn wire(record: Record, broken: Option<String>) -> Formation {
        let edges: Vec<Edge> = record
            .edges
            .iter()
            .map(|e| Edge {
                from: e.from.clone(),
                to: e.to.clone(),
            })
            .collect();
        let wiring = Wiring::mint(record.members.iter().map(|m| m.name.as_str()), &edges);
        Formation {
            record,
            wiring,
            broken,
        }
    }
}

/// Every formation the server hosts, by id.
#[derive(Default)]
pub struct Formations {
    by_id: RwLock<HashMap<String, Arc<Formation>>>,
}

impl Formations {
    pub fn get(&self, id: &str) -> Option<Arc<Formation>> {
        self.by_id
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
    }

    /// Every formation, oldest first.
    fn all(&self) -> Vec<Arc<Formation>> {
        let mut all: Vec<_> = self
            .by_id
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        all.sort_by(|a, b| {
            (a.record.created_at, &a.record.id).cmp(&(b.record.created_at, &b.record.id))
        });
        all
    }

    fn insert(&self, formation: Arc<Formation>) {
        self.by_id
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(formation.record.id.clone(), formation);
    }

    fn remove(&self, id: &str) {
        self.by_id
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
    }

    /// Why the member `entry` may not start: its formation is not here, or was
    /// brought back incomplete. `None` for a capsule created alone.
    pub fn unwired(&self, entry: &Entry) -> Option<String> {
        let membership = entry.formation.as_ref()?;
        match self.get(&membership.id) {
            None => Some(format!(
                "it is member '{}' of formation {}, whose record is missing or unreadable, so its callers and callees are unknown; DELETE /admin/capsules/{} removes it",
                membership.member, membership.id, entry.id
            )),
            Some(formation) => formation.broken.as_ref().map(|why| {
                format!(
                    "formation {} was not brought back: {why}; DELETE /admin/formations/{} removes what is left",
                    membership.id, membership.id
                )
            }),
        }
    }

    /// The seat of the member `entry` for its next session; `None` for a capsule
    /// created alone.
    ///
    /// # Errors
    ///
    /// `E-SERVE-021` when its formation is not wired.
    pub fn seat(&self, entry: &Entry) -> Result<Option<Seat>, Error> {
        let Some(membership) = &entry.formation else {
            return Ok(None);
        };
        let seat = match self.unwired(entry) {
            Some(why) => Err(why),
            None => self
                .get(&membership.id)
                .and_then(|f| f.wiring.seat(&membership.member))
                .ok_or_else(|| format!("its roster names no member '{}'", membership.member)),
        };
        seat.map(Some).map_err(|why| {
            Error::new(
                "E-SERVE-021",
                format!("capsule {} cannot take its seat: {why}", entry.id),
            )
            .hint("delete the formation and create it again from its roster")
        })
    }

    /// The relay the member `entry`'s callers reach it through.
    pub fn relay(&self, entry: &Entry) -> Option<Arc<Relay>> {
        let membership = entry.formation.as_ref()?;
        self.get(&membership.id)?.wiring.relay(&membership.member)
    }

    /// Reads every formation's record and wires it afresh; a formation whose record is
    /// unreadable, or one of whose members has no entry among `entries`, is kept
    /// broken, with why. Returns what the operator is told.
    pub fn restore(&self, registry: &Registry, entries: &[Entry]) -> Vec<String> {
        let mut problems = Vec::new();
        for id in registry.formation_ids() {
            let path = registry.formation_dir(&id).join(RECORD_FILE);
            let record = match std::fs::read(&path) {
                // Deleted with its folder kept: nothing to bring back.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => Err(format!("{}: {e}", path.display())),
                Ok(bytes) => serde_json::from_slice::<Record>(&bytes)
                    .map_err(|e| format!("{}: {e}", path.display()))
                    .and_then(|r| {
                        (r.id == id)
                            .then_some(r)
                            .ok_or_else(|| format!("{}: the id does not match", path.display()))
                    }),
            };
            let record = match record {
                Ok(record) => record,
                Err(why) => {
                    // Its members find no formation and say so.
                    problems.push(format!("formation {id}: its record is unreadable: {why}"));
                    continue;
                }
            };
            let missing: Vec<String> = record
                .members
                .iter()
                .filter(|m| {
                    !entries.iter().any(|e| {
                        e.id == m.capsule
                            && e.formation
                                .as_ref()
                                .is_some_and(|f| f.id == id && f.member == m.name)
                    })
                })
                .map(|m| format!("member '{}' ({}) has no entry", m.name, m.capsule))
                .collect();
            let broken = (!missing.is_empty()).then(|| missing.join(", "));
            if let Some(why) = &broken {
                problems.push(format!(
                    "formation {id}: {why}; none of its members started"
                ));
            }
            self.insert(Arc::new(Formation::wire(record, broken)));
        }
        problems
    }
}

/// The admin routes under `/admin/formations`.
pub async fn answer(fleet: &Arc<Fleet>, request: &Request, parts: &[&str], query: &str) -> Reply {
    let method = request.method.as_str();
    match (method, parts) {
        ("POST", []) => create(fleet, request).await,
        ("GET", []) => {
            let all: Vec<Value> = fleet
                .formations
                .all()
                .iter()
                .map(|f| describe(fleet, f, &HashMap::new()))
                .collect();
            Reply::json("200 OK", &json!({ "formations": all }))
        }
        ("GET", [id]) => match find(fleet, id) {
            Ok(formation) => Reply::json("200 OK", &describe(fleet, &formation, &HashMap::new())),
            Err(reply) => reply,
        },
        ("DELETE", [id]) => delete(fleet, id, query).await,
        _ => error(
            "405 Method Not Allowed",
            &Error::new(
                "E-SERVE-015",
                format!("{method} is not served on {}", request.path),
            )
            .hint("formations: GET lists, POST creates; formations/ID: GET, DELETE"),
        ),
    }
}

fn find(fleet: &Fleet, id: &str) -> Result<Arc<Formation>, Reply> {
    is_id(id)
        .then(|| fleet.formations.get(id))
        .flatten()
        .ok_or_else(|| {
            error(
                "404 Not Found",
                &Error::new("E-SERVE-022", format!("no formation {id} on this server"))
                    .hint("GET /admin/formations lists the formations it hosts"),
            )
        })
}

/// The body of `POST /admin/formations`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Create {
    /// The roster's YAML text; its members' paths are folders on the server's disk.
    roster: Option<String>,
    /// A folder holding `roster.yaml` (or the file) on the server's disk.
    path: Option<PathBuf>,
    /// No token on its members' addresses.
    #[serde(default)]
    open: bool,
    /// Each member's ceilings.
    #[serde(default)]
    limits: Limits,
}

fn parse(request: &Request) -> Result<Create, (&'static str, Error)> {
    let kind = request
        .header("content-type")
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default();
    let bad = |message: String| {
        Error::new("E-SERVE-010", message).hint(
            "send {\"path\": \"/folder/with/roster.yaml\"} or {\"roster\": \"<roster.yaml text>\"}, with optional \"open\" and \"limits\"",
        )
    };
    match kind.as_str() {
        "application/json" => serde_json::from_slice(&request.body).map_err(|e| {
            (
                "400 Bad Request",
                bad(format!("the body is not a formation request: {e}")),
            )
        }),
        "application/yaml" | "application/x-yaml" | "text/yaml" => {
            let roster = String::from_utf8(request.body.clone()).map_err(|_| {
                (
                    "400 Bad Request",
                    bad("the roster in the body is not UTF-8".into()),
                )
            })?;
            Ok(Create {
                roster: Some(roster),
                path: None,
                open: false,
                limits: Limits::default(),
            })
        }
        _ => Err((
            "415 Unsupported Media Type",
            bad(format!(
                "a formation is created from application/json or application/yaml, not '{kind}'"
            )),
        )),
    }
}

/// The roster file the body names: stored beside the record when it came as text.
fn roster_file(fleet: &Fleet, id: &str, body: &Create) -> Result<PathBuf, Error> {
    match (&body.roster, &body.path) {
        (Some(text), None) => {
            let dir = fleet.registry.formation_dir(id);
            let file = dir.join(ROSTER_FILE);
            std::fs::create_dir_all(&dir)
                .and_then(|()| registry::write_new(&file, text.as_bytes()))
                .map_err(|e| {
                    Error::new(
                        "E-SERVE-003",
                        format!("could not store the roster in {}: {e}", dir.display()),
                    )
                })?;
            Ok(file)
        }
        (None, Some(path)) => file_on_server(path, ROSTER_FILE, "roster"),
        _ => Err(Error::new(
            "E-SERVE-010",
            "the body names no roster, or two: give exactly one of \"roster\" and \"path\"",
        )
        .hint("{\"path\": \"/folder/with/roster.yaml\"} or {\"roster\": \"<roster.yaml text>\"}")),
    }
}

/// Admits the roster, then creates its members (the entry member last, as `mur run
/// --roster` starts it last). On any failure nothing of the formation is left.
async fn create(fleet: &Arc<Fleet>, request: &Request) -> Reply {
    let body = match parse(request) {
        Ok(body) => body,
        Err((status, e)) => return error(status, &e),
    };
    if let Err(e) = check_limits(&body.limits) {
        return error("400 Bad Request", &e);
    }
    let id = mint_id();
    let dir = fleet.registry.formation_dir(&id);
    let admitted = roster_file(fleet, &id, &body).and_then(|file| {
        let roster = Roster::load(&file)?;
        // Dropped, as a capsule's creation drops its manifest's warnings: the answer
        // is the client's, and the server's log is not where a tenant looks.
        load_members(&roster, &mut |_| {})?;
        Ok((roster, file))
    });
    let (roster, file) = match admitted {
        Ok(admitted) => admitted,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return error("400 Bad Request", &e);
        }
    };
    let n = roster.members.len();
    let Some(_reserved) = fleet.reserve_many(n) else {
        let _ = std::fs::remove_dir_all(&dir);
        let e = Error::new(
            "E-SERVE-013",
            format!(
                "a formation of {n} members would take the server past its ceiling of {} capsules",
                fleet.ceilings.capsules
            ),
        )
        .hint("delete capsules, or start mur serve with a higher --max-capsules");
        return error("503 Service Unavailable", &e);
    };
    if !fleet.files_left_for(n) {
        let _ = std::fs::remove_dir_all(&dir);
        let e = Error::new(
            "E-SERVE-018",
            format!(
                "{n} more capsules would take this server past its limit of {} open files",
                fleet.ceilings.open_files
            ),
        )
        .hint("raise the process's open-file limit (ulimit -n, LimitNOFILE) or delete capsules");
        return error("503 Service Unavailable", &e);
    }
    let record = Record {
        id: id.clone(),
        created_at: now_ms(),
        roster: file,
        from_body: body.roster.is_some(),
        members: roster
            .members
            .iter()
            .map(|m| MemberRecord {
                name: m.name.clone(),
                capsule: crate::ids::capsule(),
                entry: m.entry,
            })
            .collect(),
        edges: roster
            .edges
            .iter()
            .map(|e| EdgeRecord {
                from: e.from.clone(),
                to: e.to.clone(),
            })
            .collect(),
    };
    if let Err(e) = save(&fleet.registry, &record) {
        let _ = std::fs::remove_dir_all(&dir);
        return error("500 Internal Server Error", &e);
    }
    let formation = Arc::new(Formation::wire(record, None));
    fleet.formations.insert(formation.clone());
    let mut tokens = HashMap::new();
    let mut created: Vec<Arc<Hosted>> = Vec::new();
    let (others, entry): (Vec<_>, Vec<_>) = formation.record.members.iter().partition(|m| !m.entry);
    for (member, manifest) in others.into_iter().chain(entry).filter_map(|m| {
        let manifest = roster.members.iter().find(|r| r.name == m.name)?;
        Some((m, manifest.manifest.clone()))
    }) {
        let capsule_token = (!body.open).then(token::mint);
        let entry = Entry {
            id: member.capsule.clone(),
            created_at: now_ms(),
            manifest,
            from_body: false,
            token_sha256: capsule_token
                .as_deref()
                .map(|t| token::Hash::of(t).to_hex()),
            limits: body.limits,
            stopped: false,
            formation: Some(Membership {
                id: id.clone(),
                member: member.name.clone(),
                entry: member.entry,
            }),
        };
        match fleet.create(entry, capsule_token.as_deref()).await {
            Ok(hosted) => {
                created.push(hosted);
                tokens.insert(member.capsule.clone(), capsule_token);
            }
            Err(e) => {
                for hosted in created {
                    fleet.stop(&hosted, STOP_WAIT).await;
                    fleet.remove(&hosted.id);
                    let _ = fleet.registry.remove(&hosted.id, true);
                }
                fleet.formations.remove(&id);
                let _ = std::fs::remove_dir_all(&dir);
                let e = Error {
                    message: format!("member '{}': {}", member.name, e.message),
                    ..e
                };
                return error("400 Bad Request", &e);
            }
        }
    }
    Reply::json("201 Created", &describe(fleet, &formation, &tokens))
}

/// The record, written whole or not at all.
fn save(registry: &Registry, record: &Record) -> Result<(), Error> {
    let dir = registry.formation_dir(&record.id);
    let failed = |e: String| {
        Error::new(
            "E-SERVE-003",
            format!(
                "could not save formation {} in {}: {e}",
                record.id,
                dir.display()
            ),
        )
        .hint("check that the --data folder is writable and not full")
    };
    let bytes = serde_json::to_vec_pretty(record).map_err(|e| failed(e.to_string()))?;
    let tmp = dir.join(format!("{RECORD_FILE}.tmp"));
    std::fs::create_dir_all(&dir)
        .and_then(|()| registry::write_new(&tmp, &bytes))
        .and_then(|()| std::fs::rename(&tmp, dir.join(RECORD_FILE)))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            failed(e.to_string())
        })
}

/// The formation as the admin API shows it; `tokens` holds its members' tokens by
/// capsule id, which only its creation's answer carries.
fn describe(
    fleet: &Fleet,
    formation: &Formation,
    tokens: &HashMap<String, Option<String>>,
) -> Value {
    let record = &formation.record;
    let mut states = Vec::new();
    let members: Vec<Value> = record
        .members
        .iter()
        .map(|m| {
            let hosted = fleet.get(&m.capsule);
            let state = hosted.as_ref().map_or("missing", |h| h.state());
            states.push(state);
            let session_id = hosted.as_ref().and_then(|h| {
                h.describe(fleet, true)["session_id"]
                    .as_str()
                    .map(str::to_string)
            });
            let mut member = json!({
                "name": m.name,
                "entry": m.entry,
                "id": m.capsule,
                "address": fleet.address(&m.capsule),
                "path": format!("/c/{}/", m.capsule),
                "state": state,
                "session_id": session_id,
                "workdir": fleet.registry.workdir(&m.capsule),
            });
            if let Some(token) = tokens.get(&m.capsule) {
                member["token"] = json!(token);
            }
            member
        })
        .collect();
    let serving = |s: &&str| matches!(*s, "running" | "idle" | "starting");
    let state = match &formation.broken {
        Some(_) => "broken",
        None if states.iter().all(serving) => "running",
        None if !states.iter().any(serving) => "stopped",
        None => "degraded",
    };
    let entry = record.members.iter().find(|m| m.entry);
    json!({
        "id": record.id,
        "state": state,
        "reason": formation.broken,
        "created_at": record.created_at,
        "roster": record.roster,
        "entry": entry.map(|m| json!({
            "name": m.name,
            "id": m.capsule,
            "address": fleet.address(&m.capsule),
        })),
        "members": members,
        "edges": record.edges,
    })
}

/// Stops every member, then forgets them and the formation; `?workdir=remove` removes
/// their folders and the formation's too.
async fn delete(fleet: &Arc<Fleet>, id: &str, query: &str) -> Reply {
    let remove_workdir = match query {
        "" | "workdir=keep" => false,
        "workdir=remove" => true,
        other => {
            let e = Error::new("E-SERVE-010", format!("'?{other}' is not a delete option"))
                .hint("?workdir=keep (the default) or ?workdir=remove");
            return error("400 Bad Request", &e);
        }
    };
    let formation = match find(fleet, id) {
        Ok(formation) => formation,
        Err(reply) => return reply,
    };
    let hosted: Vec<Arc<Hosted>> = formation
        .record
        .members
        .iter()
        .filter_map(|m| fleet.get(&m.capsule))
        .collect();
    let stops = hosted.iter().map(|h| fleet.stop(h, STOP_WAIT));
    futures_util::future::join_all(stops).await;
    let mut removed = Vec::new();
    for member in &formation.record.members {
        fleet.remove(&member.capsule);
        if let Err(e) = fleet.registry.remove(&member.capsule, remove_workdir) {
            return error("500 Internal Server Error", &e);
        }
        removed.push(json!({"name": member.name, "id": member.capsule}));
    }
    fleet.formations.remove(id);
    let dir = fleet.registry.formation_dir(id);
    let forgotten = if remove_workdir {
        std::fs::remove_dir_all(&dir)
    } else {
        std::fs::remove_file(dir.join(RECORD_FILE))
    };
    if let Err(e) = forgotten.or_else(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Ok(()),
        _ => Err(e),
    }) {
        let e = Error::new(
            "E-SERVE-003",
            format!(
                "could not remove formation {id} from {}: {e}",
                dir.display()
            ),
        );
        return error("500 Internal Server Error", &e);
    }
    let workdir = if remove_workdir { "removed" } else { "kept" };
    Reply::json(
        "200 OK",
        &json!({"id": id, "deleted": true, "members": removed, "workdir": workdir}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_roster_in_the_body_is_kept_beside_the_record() {
        let data = std::env::temp_dir().join(format!("mur-formations-{}", std::process::id()));
        let registry = Registry::open(&data).unwrap();
        let id = mint_id();
        let record = Record {
            id: id.clone(),
            created_at: 1,
            roster: registry.formation_dir(&id).join(ROSTER_FILE),
            from_body: true,
            members: vec![MemberRecord {
                name: "lead".into(),
                capsule: crate::ids::capsule(),
                entry: true,
            }],
            edges: Vec::new(),
        };
        save(&registry, &record).unwrap();
        assert_eq!(registry.formation_ids(), std::slice::from_ref(&id));
        // Its only member has no entry: brought back broken, naming it.
        let formations = Formations::default();
        let problems = formations.restore(&registry, &[]);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("member 'lead'"), "{problems:?}");
        assert!(formations.get(&id).unwrap().broken.is_some());
        let _ = std::fs::remove_dir_all(&data);
    }
}
