//! `mur serve`: one process hosting many capsules behind one address. Each capsule is
//! served at `/c/<id>/` exactly as `mur run` serves one at `/`; the operator manages
//! them through `/admin/`; `/healthz` and `/metrics` are for the machinery around it.
//! The registry lives in `--data`, so a restart brings every capsule back.

mod admin;
mod fleet;
mod formations;
mod metrics;
mod registry;
pub(crate) mod token;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::json;
use tokio::net::TcpListener;

use crate::cli::ServeArgs;
use crate::door::unauthorized;
use crate::engine::{Engine, Pool};
use crate::error::Error;
use crate::http1::{Reply, Request};
use crate::server::{self, BoxFuture, Mount, Route, Router, Slot};
use fleet::{Ceilings, Fleet};
use registry::Registry;

pub async fn serve(args: ServeArgs) -> Result<ExitCode, Error> {
    // Each capsule reads it as it starts; a broken one stops the server now instead.
    crate::spend::machine_ceiling()?;
    let data = data_dir(&args)?;
    let admin_file = data.join("admin-token");
    let admin = token::admin(&admin_file)?;
    let registry = Registry::open(&data)?;
    let open_files = raise_open_files();
    for warning in [files_warning(open_files, &args), maps_warning(&args)]
        .into_iter()
        .flatten()
    {
        eprintln!("{warning}");
    }
    let pool = (args.pool_slots > 0).then_some(Pool {
        slots: args.pool_slots,
        memory_bytes: args.pool_memory_mib << 20,
    });
    let engine = Engine::with(pool)?;
    let listener = TcpListener::bind((args.bind, args.port))
        .await
        .map_err(|e| {
            Error::new(
                "E-SERVE-004",
                format!("could not listen on {}:{}: {e}", args.bind, args.port),
            )
            .hint("pick another --port (0 takes any free port) or stop what holds it")
        })?;
    let address = listener.local_addr().map_err(|e| {
        Error::new(
            "E-SERVE-004",
            format!("could not read the bound address: {e}"),
        )
    })?;
    let base_url = args
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{address}"));
    let ceilings = Ceilings {
        capsules: usize::try_from(args.max_capsules).unwrap_or(usize::MAX),
        connections: usize::try_from(args.max_connections).unwrap_or(usize::MAX),
        capsule_connections: usize::try_from(args.capsule_connections).unwrap_or(usize::MAX),
        capsule_memory_bytes: args.capsule_memory_mib.saturating_mul(1 << 20),
        // Validated by the flag's parser to 0.001..=1024 cores.
        capsule_cpu: (args.cpu_share * 1000.0).round() as u32,
        capsule_tokens_per_day: args.capsule_tokens_per_day,
        open_files,
    };
    let shares = crate::cpu::Scheduler::start()?;
    crate::queue::backlog::sync_accepted(args.sync_queue);
    let exporter = crate::telemetry::for_serve(args.otel_endpoint.as_deref())?;
    let fleet = Fleet::new(
        engine,
        registry,
        base_url.clone(),
        admin,
        (ceilings, shares),
    );
    let fleet = Arc::new(fleet.with_telemetry(exporter, args.otel_capsule_ids));
    let server = tokio::spawn(server::serve(listener, Mount::Many(fleet.clone())));
    let problems = fleet.restore().await;
    announce(
        &args,
        &format!("http://{address}"),
        &data,
        &admin_file,
        (fleet.all().len(), &cpu_line(&fleet)),
    );
    for problem in problems {
        eprintln!("warning[W-SERVE-001]: a capsule was not brought back: {problem}");
    }
    wait_for_signal().await;
    eprintln!(
        "[murmur] draining: new requests are refused; running tasks have {}s to finish; a second signal exits at once",
        args.drain_secs
    );
    tokio::spawn(async {
        wait_for_signal().await;
        eprintln!("[murmur] exiting without draining");
        std::process::exit(143);
    });
    drain(&fleet, Duration::from_secs(args.drain_secs)).await;
    server.abort();
    let _ =
        tokio::task::spawn_blocking(|| crate::telemetry::flush_all(Duration::from_secs(5))).await;
    Ok(ExitCode::SUCCESS)
}

/// `--data`, else `$MURMUR_HOME/serve`; created owner-only.
fn data_dir(args: &ServeArgs) -> Result<PathBuf, Error> {
    let dir = match &args.data {
        Some(dir) => std::path::absolute(dir).unwrap_or_else(|_| dir.clone()),
        None => crate::workdir::murmur_home().join("serve"),
    };
    let created = std::fs::create_dir_all(&dir).and_then(|()| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
    });
    created.map_err(|e| {
        Error::new(
            "E-SERVE-001",
            format!("could not create the data folder {}: {e}", dir.display()),
        )
        .hint("pass --data DIR on a writable disk")
    })?;
    Ok(dir)
}

/// A new file only the server's user may read, never created through a link.
fn create_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    file.write_all(bytes)
}

/// Files a hosted capsule holds open while it idles: its workdir (the host's handle
/// and its loop's), its shell's Landlock rules, its trace and its replay journal.
pub const FILES_PER_CAPSULE: u64 = 5;

/// Thousands of capsules hold thousands of files open: the soft limit goes as high as
/// the process may take it (the kernel's ceiling, where the process may raise its hard
/// limit, else the hard limit). Returns the limit it ends with.
fn raise_open_files() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    let kernel = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    for ceiling in [kernel, Some(limit.rlim_max)].into_iter().flatten() {
        let wanted = libc::rlimit {
            rlim_cur: ceiling,
            rlim_max: ceiling.max(limit.rlim_max),
        };
        // SAFETY: setrlimit only reads the struct given; raising the hard limit fails
        // without the privilege, and then the hard limit is the ceiling.
        if ceiling > limit.rlim_cur && unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &wanted) } == 0
        {
            return ceiling;
        }
    }
    limit.rlim_cur
}

/// Memory mappings a hosted capsule holds once it has run a task (its loop's and its
/// driver's memories and fiber stacks, and their guards), measured.
const MAPS_PER_CAPSULE: u64 = 14;

/// The mappings the capsule ceiling may need, when more than the kernel allows a
/// process (`vm.max_map_count`): past it, an instantiation would fail for memory.
fn maps_warning(args: &ServeArgs) -> Option<String> {
    let limit = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()?;
    let needed = args
        .max_capsules
        .saturating_mul(MAPS_PER_CAPSULE)
        .saturating_add(4096);
    (needed > limit).then(|| {
        format!(
            "warning[W-SERVE-003]: --max-capsules {} may need {needed} memory mappings, over vm.max_map_count ({limit})\n  hint: raise it (sysctl vm.max_map_count={needed}) or lower --max-capsules",
            args.max_capsules
        )
    })
}

/// The files the capsule and connection ceilings may need at once, when more than the
/// process may open: the server would fail creations and connections with EMFILE.
fn files_warning(limit: u64, args: &ServeArgs) -> Option<String> {
    let needed = args
        .max_capsules
        .saturating_mul(FILES_PER_CAPSULE)
        .saturating_add(args.max_connections)
        .saturating_add(64);
    (needed > limit).then(|| {
        format!(
            "warning[W-SERVE-002]: --max-capsules {} and --max-connections {} may need {needed} open files, over this process's limit of {limit}\n  hint: raise the limit (ulimit -n, or LimitNOFILE in a unit file), or lower the ceilings; a creation past the limit is refused",
            args.max_capsules, args.max_connections
        )
    })
}

fn announce(
    args: &ServeArgs,
    url: &str,
    data: &std::path::Path,
    admin: &std::path::Path,
    (n, cpu): (usize, &str),
) {
    if args.json {
        let line = json!({
            "address": url,
            "public_url": args.public_url,
            "data": data,
            "admin_token_file": admin,
            "capsules": n,
            "cpu": cpu,
            "pid": std::process::id(),
        });
        println!("{line}");
        return;
    }
    println!("murmur: serving {url}");
    if let Some(public) = &args.public_url {
        println!("public url:  {public}");
    }
    println!("data:        {}", data.display());
    println!("admin token: {}", admin.display());
    println!("capsules:    {n}");
    println!("cpu:         {cpu}");
}

/// How capsules share the processors here, said once at start.
fn cpu_line(fleet: &Fleet) -> String {
    let share = fleet.ceilings.capsule_cpu;
    let threads = fleet.shares.threads();
    format!(
        "a share of {} core(s) per capsule unless its limits.cpu says otherwise; guest code \
         on {threads} thread(s) of its own, held to its share when others wait ({}); \
         shell commands weighted by {} (nice {} for that share)",
        f64::from(share) / 1000.0,
        fleet.shares.source(),
        crate::confine::cpu_in_force(),
        crate::cpu::nice_for(share, threads)
    )
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers the server runs until it is killed.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Refuses new requests, lets running tasks finish for at most `limit`, then stops
/// every capsule (canceling what still runs). Stopped this way a capsule is not
/// marked stopped: the next start brings it back.
async fn drain(fleet: &Arc<Fleet>, limit: Duration) {
    fleet.draining.store(true, Ordering::Release);
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline && fleet.all().iter().any(|h| h.busy()) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stops = fleet
        .all()
        .into_iter()
        .map(|hosted| {
            let fleet = fleet.clone();
            async move { fleet.stop(&hosted, Duration::from_secs(5)).await }
        })
        .collect::<Vec<_>>();
    futures_util::future::join_all(stops).await;
}

/// A JSON-RPC-shaped refusal for a capsule's address.
fn refused(status: &'static str, message: String) -> Reply {
    Reply::json(
        status,
        &json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32000, "message": message}}),
    )
}

impl Router for Fleet {
    fn admit(&self) -> Result<Slot, Reply> {
        Slot::take(&self.connections, self.ceilings.connections).ok_or_else(|| {
            refused(
                "503 Service Unavailable",
                format!(
                    "the server holds its ceiling of {} connections; retry later",
                    self.ceilings.connections
                ),
            )
        })
    }

    fn route(&self, request: &Request) -> Route {
        let path = request.path.as_str();
        if let Some(rest) = path.strip_prefix("/c/") {
            return self.capsule_route(request, rest);
        }
        let bare = path.split('?').next().unwrap_or_default();
        if bare == "/" && crate::webview::wants_page(request) {
            return Route::Answer;
        }
        if matches!(bare, "/healthz" | "/metrics")
            || bare == "/admin"
            || bare.starts_with("/admin/")
        {
            return Route::Answer;
        }
        Route::Refuse(Reply::status("404 Not Found"))
    }

    fn answer(self: Arc<Self>, request: Request) -> BoxFuture<Reply> {
        Box::pin(async move {
            let bare = request.path.split('?').next().unwrap_or_default();
            // The web view holds no capsule data: it asks for the tokens it needs.
            // `route` sent only the root and a hosted capsule's address here for it.
            if crate::webview::wants_page(&request) {
                if bare == "/" {
                    return crate::webview::reply(crate::webview::View::Fleet, &request);
                }
                if bare.starts_with("/c/") {
                    return crate::webview::reply(crate::webview::View::Capsule, &request);
                }
            }
            match (request.method.as_str(), bare) {
                ("GET", "/healthz") => self.health(),
                ("GET", "/metrics") => Reply::text(
                    "200 OK",
                    "text/plain; version=0.0.4",
                    metrics::render(&self),
                ),
                (_, "/healthz" | "/metrics") => Reply::status("405 Method Not Allowed"),
                _ => admin::answer(&self, request).await,
            }
        })
    }
}

impl Fleet {
    /// `/c/<rest>`: the capsule's address is exactly `/c/<id>/`; anything longer or
    /// shorter is not found, as anything but `/` is for `mur run`.
    fn capsule_route(&self, request: &Request, rest: &str) -> Route {
        let not_found = || Route::Refuse(Reply::status("404 Not Found"));
        // The agent card beneath the address is public: it is how a client learns
        // that the address wants a token.
        let card = rest.strip_suffix(crate::a2a::CARD_PATH);
        // The MCP door beneath the address wants the token, as the address does.
        let mcp = rest.strip_suffix(crate::mcp_door::PATH);
        let address = card.or(mcp).unwrap_or(rest);
        let Some(id) = address.strip_suffix('/').filter(|id| registry::is_id(id)) else {
            return not_found();
        };
        let Some(hosted) = self.get(id) else {
            return not_found();
        };
        // The web view, like the card, is public: it asks for the token itself.
        if card.is_none() && mcp.is_none() && crate::webview::wants_page(request) {
            return Route::Answer;
        }
        if card.is_none() && !hosted.admits(request.header("authorization")) {
            return Route::Refuse(unauthorized());
        }
        if self.draining.load(Ordering::Acquire) {
            return Route::Refuse(refused(
                "503 Service Unavailable",
                "the server is shutting down; retry at the same address once it is back".into(),
            ));
        }
        let (served, over) = match hosted.served() {
            Ok(served) => served,
            Err(why) => {
                return Route::Refuse(refused(
                    "503 Service Unavailable",
                    format!("capsule {id} {why}"),
                ));
            }
        };
        let limit = hosted.connection_limit(self.ceilings.capsule_connections);
        match Slot::take(&hosted.connections, limit) {
            Some(slot) => Route::Capsule(served, slot, over),
            None => Route::Refuse(refused(
                "429 Too Many Requests",
                format!("capsule {id} holds its ceiling of {limit} connections; retry later"),
            )),
        }
    }

    fn health(&self) -> Reply {
        if self.draining.load(Ordering::Acquire) {
            return Reply::text("503 Service Unavailable", "text/plain", "draining\n".into());
        }
        if !self.restored.load(Ordering::Acquire) {
            return Reply::text("503 Service Unavailable", "text/plain", "starting\n".into());
        }
        Reply::text("200 OK", "text/plain", "ok\n".into())
    }
}
