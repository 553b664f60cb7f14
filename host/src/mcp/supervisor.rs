//! The life of one MCP server in a session: started when the session starts, its
//! tools listed and followed, restarted a bounded number of times after it crashes,
//! ended with the session.
//!
//! Servers start with the session, not on first use: the model is offered a server's
//! tools from its first turn, and the tools are only known once the server has listed
//! them. A server that cannot start stops the launch with its reason, so a capsule never
//! runs quietly without tools its manifest promised.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use super::catalog::{self, Filter, Offered, Refused};
use super::connection::{Bounds, CallHooks, Connection, Transport};
use crate::confine::{Confined, Installation, Jail, spawn};
use crate::error::Error;
use crate::guest_log;
use crate::manifest::{McpServer, McpTransport};

/// Restarts after a crash, per server and session; the next crash leaves it down.
pub const MAX_RESTARTS: u32 = 3;
/// The most tools one server may list.
pub const MAX_TOOLS: usize = 1024;

/// What every server of a session is started with.
pub struct Place {
    pub jail: Option<Arc<Jail>>,
    pub workdir: PathBuf,
    /// The records' logs, where each server's stderr goes (`logs/mcp-<name>.log`).
    pub logs_dir: PathBuf,
    /// The environment a confined command gets (PATH, TMPDIR, the proxy).
    pub env: Vec<(String, String)>,
    pub home: PathBuf,
    pub allow: Vec<mur_authority::NetRule>,
    /// The largest message a server may send: a result is cut to the capsule's
    /// `max_tool_result_bytes` after it is read, so a message may be somewhat larger.
    pub max_message_bytes: usize,
}

/// One server of the session.
pub struct Server {
    name: String,
    spec: McpServer,
    place: Arc<Place>,
    filter: Filter,
    bounds: Bounds,
    live: tokio::sync::Mutex<Live>,
    catalog: Mutex<Arc<Catalog>>,
    /// Bumped with each new catalog: what the tool list's cache is keyed on.
    generation: AtomicU64,
    /// The connection's count of list changes the last list was read after.
    listed_changes: AtomicU64,
}

/// What a server offers now.
#[derive(Default)]
pub struct Catalog {
    pub offered: Vec<Offered>,
    pub refused: Vec<Refused>,
}

#[derive(Default)]
struct Live {
    connection: Option<Arc<Connection>>,
    /// The process and its sandbox, for a stdio server: dropped, it is killed.
    process: Option<Process>,
    restarts: u32,
    /// Why the server is down for good.
    down: Option<String>,
}

impl Server {
    /// Starts the server and lists its tools.
    ///
    /// # Errors
    ///
    /// `E-MCP-001` naming the server and why it did not start.
    pub async fn start(spec: &McpServer, place: Arc<Place>) -> Result<Arc<Server>, Error> {
        let server = Arc::new(Server {
            name: spec.name.clone(),
            filter: Filter {
                enabled: spec.enabled_tools.clone(),
                disabled: spec.disabled_tools.clone(),
            },
            bounds: bounds(spec, place.max_message_bytes),
            spec: spec.clone(),
            place,
            live: tokio::sync::Mutex::default(),
            catalog: Mutex::default(),
            generation: AtomicU64::new(0),
            listed_changes: AtomicU64::new(0),
        });
        let (connection, process) = server
            .connect()
            .await
            .map_err(|why| not_started(spec, &why))?;
        server
            .relist(&connection)
            .await
            .map_err(|why| not_started(spec, &why))?;
        server.follow(&connection);
        let mut live = server.live.lock().await;
        live.connection = Some(connection);
        live.process = process;
        drop(live);
        Ok(server)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the server offers now.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The negotiated protocol version, while connected.
    pub async fn era(&self) -> Option<String> {
        let live = self.live.lock().await;
        live.connection.as_ref().map(|c| c.era().to_string())
    }

    /// Calls `tool` (the server's own name for it). A server found down is restarted
    /// first, up to [`MAX_RESTARTS`] times in the session.
    ///
    /// # Errors
    ///
    /// What the model is told: the server is down, or the call failed.
    pub async fn call(
        self: &Arc<Self>,
        tool: &str,
        arguments: Value,
        hooks: &CallHooks<'_>,
    ) -> Result<Value, String> {
        let connection = self.connection().await?;
        let call = connection.call_tool(tool, arguments, hooks);
        // While a call runs the server is watched against the workdir quota, as a shell
        // command is: past it, the server is stopped (and restarted at the next call).
        let Some(watched) = self.watched() else {
            let called = call.await.map_err(|e| e.message);
            self.caught_up(&connection).await;
            return called;
        };
        tokio::select! {
            called = call => {
                self.caught_up(&connection).await;
                called.map_err(|e| e.message)
            }
            () = watched.stopped() => {
                self.kill().await;
                Err(format!(
                    "MCP server '{}' was stopped in the middle of the call: the workdir \
                     passed {}",
                    self.name,
                    crate::confine::watch::LIMIT
                ))
            }
        }
    }

    /// Reads the list again now if the server said it changed during the call: the
    /// model's next turn is then offered what the server offers, not what it did.
    async fn caught_up(&self, connection: &Connection) {
        let changes = *connection.tools_changed().borrow();
        if changes != self.listed_changes.load(Ordering::Acquire) {
            let _ = self.relist(connection).await;
        }
    }

    /// The workdir quota's watch over a stdio server's call.
    fn watched(&self) -> Option<crate::confine::watch::Watched> {
        let jail = self.place.jail.as_ref()?;
        matches!(self.spec.transport, McpTransport::Stdio { .. }).then(|| jail.watch().enter())
    }

    /// Kills the process; the next call starts it again, as after a crash.
    async fn kill(&self) {
        let mut live = self.live.lock().await;
        live.process = None;
    }

    /// The live connection, or a new one after a crash.
    async fn connection(self: &Arc<Self>) -> Result<Arc<Connection>, String> {
        let mut live = self.live.lock().await;
        if let Some(connection) = &live.connection
            && connection.gone().is_none()
        {
            return Ok(connection.clone());
        }
        if let Some(down) = &live.down {
            return Err(down.clone());
        }
        let why = live
            .connection
            .as_ref()
            .map(|c| gone_why(c))
            .unwrap_or_else(|| "it stopped".into());
        if live.restarts >= MAX_RESTARTS {
            let down = format!(
                "MCP server '{}' is down ({why}) and was already restarted {MAX_RESTARTS} times; \
                 it is not restarted again in this session",
                self.name
            );
            live.down = Some(down.clone());
            live.connection = None;
            live.process = None;
            return Err(down);
        }
        // The lock is held through the restart: calls arriving meanwhile wait for the
        // one restart instead of starting their own.
        live.restarts += 1;
        live.connection = None;
        live.process = None;
        let (connection, process) = self.connect().await.map_err(|e| {
            format!(
                "MCP server '{}' stopped ({why}) and could not be restarted: {e}",
                self.name
            )
        })?;
        // A restarted server may offer other tools; a failed list keeps the last one.
        let _ = self.relist(&connection).await;
        self.follow(&connection);
        live.connection = Some(connection.clone());
        live.process = process;
        Ok(connection)
    }

    /// Starts the process (stdio) or opens the session (HTTP).
    async fn connect(&self) -> Result<(Arc<Connection>, Option<Process>), String> {
        let (transport, process) = match &self.spec.transport {
            McpTransport::Stdio { .. } => {
                let (transport, process) = self.spawn().await?;
                (transport, Some(process))
            }
            McpTransport::Http { url, .. } => {
                let transport = Transport::Http {
                    url: url.clone(),
                    token: self.spec.token().map_err(|e| e.message.clone())?,
                    allow: self.place.allow.clone(),
                };
                (transport, None)
            }
        };
        let connection = Connection::open(&self.name, transport, self.bounds.clone())
            .await
            .map_err(|e| e.message)?;
        Ok((Arc::new(connection), process))
    }

    /// Starts a stdio server in the session's sandbox; its stderr goes to its log.
    async fn spawn(&self) -> Result<(Transport, Process), String> {
        let McpTransport::Stdio {
            command,
            args,
            env,
            install,
            cwd,
        } = &self.spec.transport
        else {
            return Err("not a stdio server".into());
        };
        let Some(jail) = &self.place.jail else {
            return Err(
                "the sandbox for MCP servers was not set up; the server was not run".into(),
            );
        };
        let installation = Installation {
            paths: install.clone(),
            state: None,
            own_proc: false,
        };
        let host_path = path_of(&self.place.env).to_string();
        let program = jail.resolve_command(command, &host_path, &installation)?;
        let mut environment = self.place.env.clone();
        environment.extend(env.iter().cloned());
        let environment = jail.server_environment(&environment, &self.place.home, &installation);
        let program = program.to_string_lossy().into_owned();
        let cwd = match cwd {
            Some(dir) => self.place.workdir.join(dir),
            None => self.place.workdir.clone(),
        };
        let request = spawn::Request {
            program: &program,
            args,
            env: &environment,
            cwd: &cwd,
        };
        let (served, confined) = jail.spawn_server(&request, &installation).await?;
        let target = guest_log::Target::mcp(&self.place.logs_dir, &self.name);
        tokio::spawn(log_stderr(served.stderr, target));
        let transport = Transport::Stdio {
            stdin: Box::new(served.stdin),
            stdout: Box::new(served.stdout),
        };
        Ok((transport, (served.process, confined)))
    }

    /// Lists the tools again and offers what passes the checks.
    async fn relist(&self, connection: &Connection) -> Result<(), String> {
        let changes = *connection.tools_changed().borrow();
        let raw = connection.list_tools().await.map_err(|e| e.message)?;
        self.listed_changes.store(changes, Ordering::Release);
        let (offered, refused) = catalog::offer(&self.name, raw, &self.filter);
        *self
            .catalog
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Arc::new(Catalog { offered, refused });
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Lists again each time the server says its list changed, for as long as this
    /// connection lives.
    fn follow(self: &Arc<Self>, connection: &Arc<Connection>) {
        let mut changed = connection.tools_changed();
        let server = Arc::downgrade(self);
        let connection = Arc::downgrade(connection);
        tokio::spawn(async move {
            while changed.changed().await.is_ok() {
                let (Some(server), Some(connection)) = (server.upgrade(), connection.upgrade())
                else {
                    return;
                };
                let _ = server.relist(&connection).await;
            }
        });
    }

    /// Ends the server: its session closed, its process killed.
    pub async fn stop(&self) {
        let mut live = self.live.lock().await;
        live.down = Some(format!(
            "MCP server '{}' has ended with the session",
            self.name
        ));
        if let Some(connection) = live.connection.take()
            && let Ok(connection) = Arc::try_unwrap(connection)
        {
            connection.close().await;
        }
        live.process = None;
    }
}

/// Why a connection is gone, with the junk it sent on the way when there was any.
fn gone_why(connection: &Connection) -> String {
    let why = connection.gone().unwrap_or_else(|| "it stopped".into());
    match connection.garbled() {
        0 => why,
        n => format!("{why}, after {n} messages that were not JSON-RPC"),
    }
}

fn path_of(env: &[(String, String)]) -> &str {
    env.iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map_or("", |(_, v)| v.as_str())
}

/// A stdio server's process and its sandbox: dropped, the process is killed.
type Process = (spawn::Process, Confined);

fn bounds(spec: &McpServer, max_message_bytes: usize) -> Bounds {
    Bounds {
        max_message_bytes,
        max_tools: MAX_TOOLS,
        startup_timeout: spec.startup_timeout,
        tool_timeout: spec.tool_timeout,
    }
}

fn not_started(spec: &McpServer, why: &str) -> Error {
    Error::new(
        "E-MCP-001",
        format!(
            "MCP server '{}' (manifest line {}) did not start: {why}",
            spec.name, spec.line
        ),
    )
    .hint(format!(
        "its stderr is in the session's records, logs/mcp-{}.log; `mur mcp ls` starts it alone",
        guest_log::file_part(&spec.name)
    ))
}

/// Copies a server's stderr into its log, escaped and capped as components' output is.
async fn log_stderr(mut stderr: tokio::net::unix::pipe::Receiver, target: guest_log::Target) {
    let output = guest_log::Output::new(&target);
    let mut sink = output.stderr();
    let _ = tokio::io::copy(&mut stderr, &mut sink).await;
}

/// How long `stop` may wait for every server of a session.
pub const STOP_WITHIN: Duration = Duration::from_secs(3);
