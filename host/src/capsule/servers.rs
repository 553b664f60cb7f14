//! The capsule's MCP servers (`mcp_servers:`), started together as its session opens,
//! in the session's sandbox (stdio) or through its allow rules (HTTP). One that does
//! not start stops the launch, and the others are ended with it.

use std::sync::Arc;

use futures_util::future::join_all;

use crate::confine::Jail;
use crate::error::Error;
use crate::manifest::Manifest;
use crate::mcp::supervisor::{Place, Server};
use crate::workdir::Workdir;

/// The least a server's message may be allowed: a result cut to
/// `max_tool_result_bytes` arrives whole first, with its JSON around it.
const MIN_MESSAGE_BYTES: u64 = 4 * 1024 * 1024;
/// The most: past this no tool result is worth holding.
const MAX_MESSAGE_BYTES: u64 = 64 * 1024 * 1024;

/// Starts every server of `m`; none when it declares none.
///
/// # Errors
///
/// `E-MCP-001` for the first server that did not start.
pub async fn start(
    m: &Manifest,
    jail: Option<Arc<Jail>>,
    workdir: &Workdir,
    env: Vec<(String, String)>,
) -> Result<Vec<Arc<Server>>, Error> {
    if m.mcp_servers.is_empty() {
        return Ok(Vec::new());
    }
    let place = Arc::new(Place {
        jail,
        workdir: workdir.root.clone(),
        logs_dir: workdir.logs_dir(),
        env,
        home: workdir.capsule_home(),
        allow: m.capabilities.network_allow.clone(),
        max_message_bytes: message_bound(m.capabilities.limits.max_tool_result_bytes),
    });
    let started = join_all(
        m.mcp_servers
            .iter()
            .map(|spec| Server::start(spec, place.clone())),
    )
    .await;
    let mut servers = Vec::with_capacity(started.len());
    let mut failed = None;
    for server in started {
        match server {
            Ok(server) => servers.push(server),
            Err(e) if failed.is_none() => failed = Some(e),
            Err(_) => {}
        }
    }
    if let Some(e) = failed {
        stop(&servers).await;
        return Err(e);
    }
    Ok(servers)
}

/// Ends every server, each within the supervisor's bound.
pub async fn stop(servers: &[Arc<Server>]) {
    let bound = crate::mcp::supervisor::STOP_WITHIN;
    let _ = tokio::time::timeout(bound, join_all(servers.iter().map(|s| s.stop()))).await;
}

/// Twice the result limit (its JSON escapes), within [`MIN_MESSAGE_BYTES`] and
/// [`MAX_MESSAGE_BYTES`].
fn message_bound(max_tool_result_bytes: u64) -> usize {
    let bound = max_tool_result_bytes
        .saturating_mul(2)
        .clamp(MIN_MESSAGE_BYTES, MAX_MESSAGE_BYTES);
    usize::try_from(bound).unwrap_or(usize::MAX)
}
