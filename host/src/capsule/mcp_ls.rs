//! `mur mcp ls`: starts a capsule's MCP servers exactly as a session would (confined,
//! through its allow rules) in a scratch workdir, prints the tools each offers as the
//! model would see them, and ends them.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use super::launch::{arm_shell, plan_shell};
use super::servers;
use super::stage::shell_env;
use crate::cli::McpLsArgs;
use crate::error::Error;
use crate::manifest::{self, McpTransport};
use crate::mcp::supervisor::Server;
use crate::tools::mcp_listing;
use crate::workdir::{RecordsChoice, Workdir};

/// How many of a server's last stderr lines a failed listing shows.
const LOG_LINES: usize = 20;

/// # Errors
///
/// The manifest does not load, the sandbox cannot be set up, or a server does not
/// start (`E-MCP-001`).
pub async fn run(args: &McpLsArgs) -> Result<ExitCode, Error> {
    let loaded = manifest::load(&args.manifest)?;
    for warning in &loaded.warnings {
        eprintln!("{}", warning.text);
    }
    let m = &loaded.manifest;
    if m.mcp_servers.is_empty() {
        println!("{} declares no mcp_servers.", args.manifest.display());
        return Ok(ExitCode::SUCCESS);
    }
    // The scratch folder outlives the servers, whose working folder it holds.
    let scratch = Scratch::new()?;
    let servers = match list(m, &args.manifest, &scratch.0).await {
        Ok(servers) => servers,
        Err(e) if e.code == "E-MCP-001" => {
            // The logs go with the scratch folder: what the servers said is shown now.
            show_logs(&scratch.0);
            return Err(e.hint("what the servers printed on stderr is above"));
        }
        Err(e) => return Err(e),
    };
    for server in &servers {
        print_server(m, server, args.json).await;
    }
    servers::stop(&servers).await;
    drop(servers);
    drop(scratch);
    Ok(ExitCode::SUCCESS)
}

async fn list(
    m: &manifest::Manifest,
    manifest_path: &Path,
    scratch: &Path,
) -> Result<Vec<Arc<Server>>, Error> {
    let manifest_dir = manifest_path.parent().unwrap_or(Path::new("."));
    let workdir_dir = scratch.join("workdir");
    let records_dir = scratch.join("records");
    let choice = RecordsChoice {
        manifest_dir,
        workdir: Some(&workdir_dir),
        records: Some(&records_dir),
    };
    let workdir = Workdir::plan(&choice, "mcp-ls")?;
    workdir.create()?;
    let jail = match plan_shell(m, None, &workdir, 0)? {
        Some(jail) => {
            // Nobody traces the proxy's verdicts here: the listing makes no requests
            // of its own through it.
            let (verdicts, _) = tokio::sync::mpsc::unbounded_channel();
            Some(Arc::new(
                arm_shell(m, jail, &workdir, verdicts, None).await?,
            ))
        }
        None => None,
    };
    if let Some(jail) = &jail {
        eprintln!(
            "{}",
            jail.launch_line().replacen("shell:", "mcp servers:", 1)
        );
    }
    servers::start(m, jail, &workdir, shell_env(m)).await
}

async fn print_server(m: &manifest::Manifest, server: &Server, json: bool) {
    let listing = mcp_listing(server);
    if json {
        println!("{listing}");
        return;
    }
    let how = m
        .mcp_servers
        .iter()
        .find(|s| s.name == server.name())
        .map_or("?", |s| match s.transport {
            McpTransport::Stdio { .. } => "stdio",
            McpTransport::Http { .. } => "http",
        });
    let era = server.era().await.unwrap_or_default();
    let catalog = server.catalog();
    println!(
        "{} ({how}, protocol {era}): {} tools",
        server.name(),
        catalog.offered.len()
    );
    for tool in &catalog.offered {
        let summary = tool.description.lines().next().unwrap_or("");
        println!("  {}  {}", tool.name, crate::escape::line(summary));
    }
    for refused in &catalog.refused {
        println!(
            "  not offered: {}  ({})",
            crate::escape::line(&refused.tool),
            crate::escape::line(&refused.why)
        );
    }
}

/// The last lines each server printed on stderr (its log, already escaped and capped).
fn show_logs(scratch: &Path) {
    let logs = scratch.join("records").join("mcp-ls").join("logs");
    let Ok(entries) = std::fs::read_dir(&logs) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(server) = name
            .strip_prefix("mcp-")
            .and_then(|n| n.strip_suffix(".log"))
        else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let lines: Vec<&str> = text.lines().collect();
        let tail = &lines[lines.len().saturating_sub(LOG_LINES)..];
        for line in tail {
            eprintln!("[mcp {server}] {line}");
        }
    }
}

/// A folder of the listing's own under the system's temporary folder, removed after.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch, Error> {
        let dir = std::env::temp_dir().join(format!("mur-mcp-ls-{}", crate::ids::token()));
        // The folder is the host's own, fresh, under a random name: nothing a guest
        // could have planted there.
        std::fs::create_dir_all(&dir).map_err(|e| {
            Error::new(
                "E-IO-003",
                format!("could not create {}: {e}", dir.display()),
            )
        })?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
