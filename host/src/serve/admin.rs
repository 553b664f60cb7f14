//! The admin API under `/admin/`: create, list, get, stop, start and delete capsules,
//! and formations of them (`super::formations`).
//! JSON in and out; every call needs the admin token. Errors are
//! `{"error": {"code", "message", "hint"}}` with the HTTP status that fits.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use super::fleet::Fleet;
use super::registry::{Entry, Limits, is_id};
use super::token;
use crate::error::Error;
use crate::http1::{Reply, Request};

/// How long a stop waits for the capsule to wind down.
const STOP_WAIT: Duration = Duration::from_secs(30);

pub async fn answer(fleet: &Arc<Fleet>, request: Request) -> Reply {
    if !fleet.admin.admits(request.header("authorization")) {
        return super::unauthorized();
    }
    let (path, query) = request
        .path
        .split_once('?')
        .unwrap_or((request.path.as_str(), ""));
    let parts: Vec<&str> = path
        .trim_start_matches("/admin")
        .split('/')
        .filter(|p| !p.is_empty())
        .collect();
    let method = request.method.as_str();
    match (method, parts.as_slice()) {
        ("POST", ["capsules"]) => create(fleet, &request).await,
        ("GET", ["capsules"]) => list(fleet),
        ("GET", ["capsules", id]) => with_capsule(fleet, id, |h| {
            Reply::json("200 OK", &h.describe(fleet, true))
        }),
        ("DELETE", ["capsules", id]) => delete(fleet, id, query).await,
        ("POST", ["capsules", id, "stop"]) => stop(fleet, id).await,
        ("POST", ["capsules", id, "start"]) => start(fleet, id).await,
        (_, ["formations", rest @ ..]) if rest.len() <= 1 => {
            super::formations::answer(fleet, &request, rest, query).await
        }
        (_, ["capsules"] | ["capsules", _] | ["capsules", _, "stop" | "start"]) => error(
            "405 Method Not Allowed",
            &Error::new("E-SERVE-015", format!("{method} is not served on {path}"))
                .hint("capsules: GET lists, POST creates; capsules/ID: GET, DELETE; capsules/ID/stop and /start: POST"),
        ),
        _ => error(
            "404 Not Found",
            &Error::new("E-SERVE-014", format!("no admin route {path}"))
                .hint("the admin routes are /admin/capsules, /admin/capsules/ID, /admin/capsules/ID/stop, /admin/capsules/ID/start, /admin/formations and /admin/formations/ID"),
        ),
    }
}

/// An error reply with its status.
pub fn error(status: &'static str, e: &Error) -> Reply {
    let message = crate::secret::scrub(&e.message);
    let hint = e.hint.as_deref().map(crate::secret::scrub);
    Reply::json(
        status,
        &json!({"error": {"code": e.code, "message": message, "hint": hint}}),
    )
}

/// The body of `POST /admin/capsules`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Create {
    /// The manifest's YAML text.
    manifest: Option<String>,
    /// A manifest folder (or file) on the server's disk.
    path: Option<PathBuf>,
    /// No token on its address.
    #[serde(default)]
    open: bool,
    #[serde(default)]
    limits: Limits,
}

async fn create(fleet: &Arc<Fleet>, request: &Request) -> Reply {
    let body = match parse_create(request) {
        Ok(body) => body,
        Err((status, e)) => return error(status, &e),
    };
    let Some(_reserved) = fleet.reserve() else {
        let e = Error::new(
            "E-SERVE-013",
            format!(
                "the server hosts its ceiling of {} capsules",
                fleet.ceilings.capsules
            ),
        )
        .hint("delete a capsule, or start mur serve with a higher --max-capsules");
        return error("503 Service Unavailable", &e);
    };
    if !fleet.files_left() {
        let e = Error::new(
            "E-SERVE-018",
            format!(
                "one more capsule would take this server past its limit of {} open files",
                fleet.ceilings.open_files
            ),
        )
        .hint("raise the process's open-file limit (ulimit -n, LimitNOFILE) or delete a capsule");
        return error("503 Service Unavailable", &e);
    }
    if let Err(e) = check_limits(&body.limits) {
        return error("400 Bad Request", &e);
    }
    let id = crate::ids::capsule();
    let manifest = match (&body.manifest, &body.path) {
        (Some(yaml), None) => fleet.registry.save_manifest(&id, yaml),
        (None, Some(path)) => manifest_on_disk(path),
        _ => Err(Error::new(
            "E-SERVE-010",
            "the body names no manifest, or two: give exactly one of \"manifest\" and \"path\"",
        )
        .hint(
            "{\"manifest\": \"<murmur.yaml text>\"} or {\"path\": \"/folder/with/murmur.yaml\"}",
        )),
    };
    let manifest = match manifest {
        Ok(path) => path,
        Err(e) => {
            let _ = fleet.registry.remove(&id, true);
            return error("400 Bad Request", &e);
        }
    };
    let capsule_token = (!body.open).then(token::mint);
    let entry = Entry {
        id: id.clone(),
        created_at: now_ms(),
        manifest,
        from_body: body.manifest.is_some(),
        token_sha256: capsule_token
            .as_deref()
            .map(|t| token::Hash::of(t).to_hex()),
        limits: body.limits,
        stopped: false,
        formation: None,
    };
    match fleet.create(entry, capsule_token.as_deref()).await {
        Ok(hosted) => Reply::json(
            "201 Created",
            &json!({
                "id": id,
                "address": fleet.address(&id),
                "path": format!("/c/{id}/"),
                "token": capsule_token,
                "state": hosted.state(),
                "workdir": fleet.registry.workdir(&id),
            }),
        ),
        Err(e) => error("400 Bad Request", &e),
    }
}

fn parse_create(request: &Request) -> Result<Create, (&'static str, Error)> {
    let kind = request
        .header("content-type")
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default();
    match kind.as_str() {
        "application/json" => serde_json::from_slice(&request.body).map_err(|e| {
            (
                "400 Bad Request",
                Error::new("E-SERVE-010", format!("the body is not a capsule request: {e}"))
                    .hint("send {\"manifest\": \"<yaml>\"} or {\"path\": \"/dir\"}, with optional \"open\" and \"limits\""),
            )
        }),
        "application/yaml" | "application/x-yaml" | "text/yaml" => {
            let yaml = String::from_utf8(request.body.clone()).map_err(|_| {
                (
                    "400 Bad Request",
                    Error::new("E-SERVE-010", "the manifest in the body is not UTF-8"),
                )
            })?;
            Ok(Create {
                manifest: Some(yaml),
                path: None,
                open: false,
                limits: Limits::default(),
            })
        }
        _ => Err((
            "415 Unsupported Media Type",
            Error::new(
                "E-SERVE-010",
                format!("a capsule is created from application/json or application/yaml, not '{kind}'"),
            )
            .hint("set Content-Type: application/json (or application/yaml for a bare manifest)"),
        )),
    }
}

pub(super) fn check_limits(limits: &Limits) -> Result<(), Error> {
    let zero = [
        ("memory_bytes", limits.memory_bytes == Some(0)),
        ("connections", limits.connections == Some(0)),
        ("queued_tasks", limits.queued_tasks == Some(0)),
        ("tokens_per_day", limits.tokens_per_day == Some(0)),
    ];
    match zero.iter().find(|(_, is_zero)| *is_zero) {
        Some((key, _)) => Err(Error::new(
            "E-SERVE-010",
            format!("limits.{key} is 0, which would refuse everything"),
        )
        .hint("leave it out for no ceiling, or give a positive number")),
        None => Ok(()),
    }
}

/// A folder's `murmur.yaml`, or the file itself.
fn manifest_on_disk(path: &Path) -> Result<PathBuf, Error> {
    file_on_server(path, "murmur.yaml", "manifest")
}

/// A folder's `name` (the file a request names by its folder), or the file itself;
/// `what` names it in the error.
pub(super) fn file_on_server(path: &Path, name: &str, what: &str) -> Result<PathBuf, Error> {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let file = if absolute.is_dir() {
        absolute.join(name)
    } else {
        absolute
    };
    if file.is_file() {
        return Ok(file);
    }
    Err(Error::new(
        "E-SERVE-011",
        format!("there is no {what} at {} on the server", file.display()),
    )
    .hint(format!(
        "give the path of a folder holding {name} (or of the file) on the server's disk"
    )))
}

fn list(fleet: &Fleet) -> Reply {
    let capsules: Vec<Value> = fleet
        .all()
        .iter()
        .map(|h| h.describe(fleet, false))
        .collect();
    Reply::json("200 OK", &json!({ "capsules": capsules }))
}

fn with_capsule(
    fleet: &Fleet,
    id: &str,
    then: impl FnOnce(&Arc<super::fleet::Hosted>) -> Reply,
) -> Reply {
    match is_id(id).then(|| fleet.get(id)).flatten() {
        Some(hosted) => then(&hosted),
        None => unknown(id),
    }
}

fn unknown(id: &str) -> Reply {
    error(
        "404 Not Found",
        &Error::new("E-SERVE-012", format!("no capsule {id} on this server"))
            .hint("GET /admin/capsules lists the capsules it hosts"),
    )
}

async fn stop(fleet: &Arc<Fleet>, id: &str) -> Reply {
    let Some(hosted) = is_id(id).then(|| fleet.get(id)).flatten() else {
        return unknown(id);
    };
    let mut entry = hosted.entry();
    entry.stopped = true;
    if let Err(e) = fleet.registry.save(&entry) {
        return error("500 Internal Server Error", &e);
    }
    hosted.set_entry(entry);
    fleet.stop(&hosted, STOP_WAIT).await;
    Reply::json("200 OK", &hosted.describe(fleet, true))
}

async fn start(fleet: &Arc<Fleet>, id: &str) -> Reply {
    let Some(hosted) = is_id(id).then(|| fleet.get(id)).flatten() else {
        return unknown(id);
    };
    if matches!(hosted.state(), "running" | "idle" | "starting") {
        let e = Error::new(
            "E-SERVE-016",
            format!("capsule {id} is already {}", hosted.state()),
        )
        .hint("stop it first to start it afresh");
        return error("409 Conflict", &e);
    }
    let mut entry = hosted.entry();
    entry.stopped = false;
    if let Err(e) = fleet.registry.save(&entry) {
        return error("500 Internal Server Error", &e);
    }
    hosted.set_entry(entry);
    match fleet.start(&hosted).await {
        Ok(()) => Reply::json("200 OK", &hosted.describe(fleet, true)),
        Err(e) => error("400 Bad Request", &e),
    }
}

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
    let Some(hosted) = is_id(id).then(|| fleet.get(id)).flatten() else {
        return unknown(id);
    };
    let membership = hosted.entry().formation;
    // Its callers would be left calling a member that is gone for good; a member whose
    // formation is not known (its record was lost) has no callers left to mind.
    if let Some(membership) = membership.filter(|m| fleet.formations.get(&m.id).is_some()) {
        let e = Error::new(
            "E-SERVE-023",
            format!(
                "capsule {id} is member '{}' of formation {}, and is deleted with it",
                membership.member, membership.id
            ),
        )
        .hint(format!(
            "DELETE /admin/formations/{} deletes every member; POST /admin/capsules/{id}/stop stops this one",
            membership.id
        ));
        return error("409 Conflict", &e);
    }
    fleet.stop(&hosted, STOP_WAIT).await;
    fleet.remove(id);
    if let Err(e) = fleet.registry.remove(id, remove_workdir) {
        return error("500 Internal Server Error", &e);
    }
    let workdir = if remove_workdir { "removed" } else { "kept" };
    Reply::json(
        "200 OK",
        &json!({"id": id, "deleted": true, "workdir": workdir}),
    )
}

pub(super) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
