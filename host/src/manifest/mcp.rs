//! `mcp_servers`: the Model Context Protocol servers whose tools the model may call,
//! keyed by name, with Codex CLI's keys. A stdio server is a command mur starts (and
//! confines as it does a shell command); a streamable-HTTP one is a URL, reached
//! through `capabilities.network.allow` like every other outbound call.

use std::path::PathBuf;
use std::time::Duration;

use super::fields::{Cx, Field, Section, substitute};
use super::tree::{Val, join, show};
use super::{Capabilities, Result};
use crate::error::Error;

/// One `mcp_servers.<name>` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServer {
    /// `^[a-z0-9][a-z0-9_-]{0,31}$` without `__`: its tools are `mcp__<name>__<tool>`.
    pub name: String,
    pub transport: McpTransport,
    /// `enabled_tools`: only these are offered; `None` offers every tool.
    pub enabled_tools: Option<Vec<String>>,
    /// `disabled_tools`: never offered, even when enabled.
    pub disabled_tools: Vec<String>,
    /// `startup_timeout_sec`: how long it may take to start and answer `initialize`.
    pub startup_timeout: Duration,
    /// `tool_timeout_sec`: how long one tool call may take.
    pub tool_timeout: Duration,
    /// The line of its name.
    pub line: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// `command`, `args`, `env`, `install`, `cwd`.
    Stdio {
        /// A bare name (looked up on the server's PATH) or an absolute path; one with a
        /// `/` written relative is resolved against the manifest's directory.
        command: String,
        args: Vec<String>,
        /// After `${NAME}` substitution, in the order written.
        env: Vec<(String, String)>,
        /// What the server is made of (read + execute), absolute: resolved against the
        /// manifest's directory.
        install: Vec<PathBuf>,
        /// Its working directory, relative to the workdir; `None` is the workdir.
        cwd: Option<String>,
    },
    /// `url`, `bearer_token_env_var`.
    Http {
        url: String,
        /// The variable holding the bearer token, read at launch ([`McpServer::token`]).
        token_env: Option<String>,
    },
}

/// Codex's defaults and this runtime's ceilings, in seconds.
const STARTUP_DEFAULT: u64 = 10;
const STARTUP_MAX: u64 = 3600;
const TOOL_DEFAULT: u64 = 60;
const TOOL_MAX: u64 = 86_400;

/// The keys only a stdio server takes, and only an HTTP one.
const STDIO_KEYS: &[&str] = &["args", "env", "install", "cwd"];
const HTTP_KEYS: &[&str] = &["bearer_token_env_var"];

/// The section's name for its keys (see `schema`).
pub(super) const SCHEMA: &str = "mcp_servers{}";

/// `mcp_servers`, in the order written; absent is none.
pub(super) fn mcp_servers(
    cx: &mut Cx,
    top: &Section,
    caps: &Capabilities,
) -> Result<Vec<McpServer>> {
    let Some(field) = top.field("mcp_servers") else {
        return Ok(Vec::new());
    };
    let Val::Map(entries) = &field.node.val else {
        return Err(field.expected(cx, "a mapping of server names"));
    };
    let mut servers = Vec::with_capacity(entries.len());
    for entry in entries {
        let path = join("mcp_servers", &entry.key);
        if !server_name(&entry.key) {
            let why = format!(
                "'{}' is not an MCP server name; a server name matches \
                 ^[a-z0-9][a-z0-9_-]{{0,31}}$ and holds no '__'",
                show(&entry.key)
            );
            let hint = "its tools are named mcp__<server>__<tool>, so the name must not hold '__'";
            return Err(cx.invalid(entry.line, &path, why).hint(hint));
        }
        let field = Field {
            path,
            line: entry.line,
            node: &entry.node,
        };
        let sec = field.section(cx, SCHEMA)?;
        servers.push(server(cx, &sec, &entry.key, entry.line, caps)?);
    }
    Ok(servers)
}

fn server(
    cx: &Cx,
    sec: &Section,
    name: &str,
    line: usize,
    caps: &Capabilities,
) -> Result<McpServer> {
    let transport = match (sec.opt_str(cx, "command")?, sec.opt_str(cx, "url")?) {
        (Some(command), None) => stdio(cx, sec, command)?,
        (None, Some(url)) => http(cx, sec, url, caps)?,
        (Some(_), Some((_, url_line))) => {
            let why = "a server has either 'command' (stdio) or 'url' (streamable HTTP), not both";
            return Err(cx.invalid(url_line, &join(&sec.path, "url"), why));
        }
        (None, None) => {
            let hint = "set 'command' to start a stdio server, or 'url' to reach a streamable \
                        HTTP one";
            return Err(cx
                .missing(Some(line), &join(&sec.path, "command"))
                .hint(hint));
        }
    };
    let enabled_tools = match sec.opt_list(cx, "enabled_tools")? {
        Some(items) => Some(tool_names(cx, &items)?),
        None => None,
    };
    let disabled_tools = tool_names(cx, &sec.opt_list(cx, "disabled_tools")?.unwrap_or_default())?;
    let startup = sec.opt_uint(cx, "startup_timeout_sec", 1, STARTUP_MAX)?;
    let tool = sec.opt_uint(cx, "tool_timeout_sec", 1, TOOL_MAX)?;
    Ok(McpServer {
        name: name.to_string(),
        transport,
        enabled_tools,
        disabled_tools,
        startup_timeout: Duration::from_secs(startup.unwrap_or(STARTUP_DEFAULT)),
        tool_timeout: Duration::from_secs(tool.unwrap_or(TOOL_DEFAULT)),
        line,
    })
}

fn stdio(cx: &Cx, sec: &Section, (command, line): (String, usize)) -> Result<McpTransport> {
    refuse_keys(cx, sec, HTTP_KEYS, "'url'", "'command'")?;
    if command.trim().is_empty() {
        return Err(cx.invalid(line, &join(&sec.path, "command"), "must not be empty"));
    }
    let command = if command.contains('/') && !command.starts_with('/') {
        cx.resolve(&command).to_string_lossy().into_owned()
    } else {
        command
    };
    Ok(McpTransport::Stdio {
        command,
        args: sec.str_list(cx, "args")?,
        env: env(cx, sec)?,
        install: install(cx, sec)?,
        cwd: cwd(cx, sec)?,
    })
}

fn http(
    cx: &Cx,
    sec: &Section,
    (url, line): (String, usize),
    caps: &Capabilities,
) -> Result<McpTransport> {
    refuse_keys(cx, sec, STDIO_KEYS, "'command'", "'url'")?;
    let path = join(&sec.path, "url");
    let origin = crate::outbound::origin_of(&url);
    let web = url.starts_with("http://") || url.starts_with("https://");
    let Some(origin) = origin.filter(|_| web) else {
        let why = format!(
            "expected the http:// or https:// URL of a streamable HTTP server, found '{}'",
            show(&url)
        );
        return Err(cx.invalid(line, &path, why));
    };
    if !crate::outbound::allowed(&caps.network_allow, &url) {
        let why = format!(
            "{} is not reached by capabilities.network.allow",
            show(&url)
        );
        let hint = format!("add \"{origin}\" to capabilities.network.allow");
        return Err(cx.invalid(line, &path, why).hint(hint));
    }
    let token_env = match sec.opt_str(cx, "bearer_token_env_var")? {
        Some((var, var_line)) if !var_name(&var) => {
            let why = format!("'{}' is not an environment variable name", show(&var));
            let path = join(&sec.path, "bearer_token_env_var");
            return Err(cx.invalid(var_line, &path, why));
        }
        other => other.map(|(var, _)| var),
    };
    Ok(McpTransport::Http { url, token_env })
}

/// Refuses the first of `keys` present: they belong to the other transport.
fn refuse_keys(cx: &Cx, sec: &Section, keys: &[&str], theirs: &str, ours: &str) -> Result<()> {
    for key in keys {
        if let Some(field) = sec.field(key) {
            let why = format!("'{key}' is for a server with {theirs}, and this one has {ours}");
            return Err(cx.invalid(field.line, &field.path, why));
        }
    }
    Ok(())
}

/// `env`: a mapping of variable names to strings, `${NAME}` substituted.
fn env(cx: &Cx, sec: &Section) -> Result<Vec<(String, String)>> {
    let Some(field) = sec.field("env") else {
        return Ok(Vec::new());
    };
    let Val::Map(entries) = &field.node.val else {
        return Err(field.expected(cx, "a mapping of variable names to strings"));
    };
    let mut vars = Vec::with_capacity(entries.len());
    for entry in entries {
        let path = join(&field.path, &entry.key);
        if !var_name(&entry.key) {
            let why = format!("'{}' is not an environment variable name", show(&entry.key));
            return Err(cx.invalid(entry.line, &path, why));
        }
        let value = Field {
            path,
            line: entry.line,
            node: &entry.node,
        };
        let text = value.string(cx)?;
        vars.push((
            entry.key.clone(),
            substitute(cx, &text, entry.line, &value.path)?,
        ));
    }
    Ok(vars)
}

/// `install`: folders (or files) resolved against the manifest's directory, which must
/// exist now.
fn install(cx: &Cx, sec: &Section) -> Result<Vec<PathBuf>> {
    let items = sec.opt_list(cx, "install")?.unwrap_or_default();
    let mut paths = Vec::with_capacity(items.len());
    for item in &items {
        let rel = item.string(cx)?;
        let abs = cx.resolve(&rel);
        if !abs.exists() {
            let what = format!("{} not found at {}", show(&item.path), abs.display());
            let hint = format!(
                "'install' is resolved against {}; install the server there first (e.g. npm \
                 install)",
                cx.dir.display()
            );
            return Err(cx.not_found(item.line, what).hint(hint));
        }
        paths.push(abs);
    }
    Ok(paths)
}

/// `cwd`: a folder inside the workdir.
fn cwd(cx: &Cx, sec: &Section) -> Result<Option<String>> {
    let Some((cwd, line)) = sec.opt_str(cx, "cwd")? else {
        return Ok(None);
    };
    let path = std::path::Path::new(&cwd);
    let inside = !cwd.trim().is_empty()
        && path.is_relative()
        && path
            .components()
            .all(|c| !matches!(c, std::path::Component::ParentDir));
    if !inside {
        let why = format!(
            "expected a folder relative to the workdir, without '..', found '{}'",
            show(&cwd)
        );
        return Err(cx.invalid(line, &join(&sec.path, "cwd"), why));
    }
    Ok(Some(cwd))
}

fn tool_names(cx: &Cx, items: &[Field]) -> Result<Vec<String>> {
    items
        .iter()
        .map(|item| {
            let name = item.string(cx)?;
            if name.trim().is_empty() {
                return Err(cx.invalid(item.line, &item.path, "a tool name must not be empty"));
            }
            Ok(name)
        })
        .collect()
}

/// `^[a-z0-9][a-z0-9_-]{0,31}$`, and no `__`, which joins `mcp__<server>__<tool>`.
pub fn server_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    let first = bytes
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let rest =
        bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    first && rest && name.len() <= 32 && !name.contains("__")
}

/// `^[A-Za-z_][A-Za-z0-9_]*$`.
fn var_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

impl McpServer {
    /// The bearer token of an HTTP server, read from `bearer_token_env_var` now (at
    /// launch); `None` when it names none, and for a stdio server.
    ///
    /// # Errors
    ///
    /// `E-RUN-070` when the variable is not set; `E-RUN-071` when it is empty or holds
    /// what a header cannot carry.
    pub fn token(&self) -> std::result::Result<Option<String>, Error> {
        self.token_from(&|var| std::env::var(var).ok())
    }

    fn token_from(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> std::result::Result<Option<String>, Error> {
        let McpTransport::Http {
            token_env: Some(var),
            ..
        } = &self.transport
        else {
            return Ok(None);
        };
        let Some(token) = env(var) else {
            return Err(Error::new(
                "E-RUN-070",
                format!(
                    "MCP server '{}' takes its bearer token from {var}, which is not set",
                    self.name
                ),
            )
            .hint(format!(
                "export {var}=<the token the server wants>, or remove bearer_token_env_var"
            )));
        };
        let carried = !token.trim().is_empty() && !token.chars().any(char::is_control);
        if !carried {
            return Err(Error::new(
                "E-RUN-071",
                format!(
                    "MCP server '{}' takes its bearer token from {var}, which is empty or holds \
                     control characters a header cannot carry",
                    self.name
                ),
            )
            .hint(format!("set {var} to the token alone, on one line")));
        }
        Ok(Some(token))
    }
}

#[cfg(test)]
mod tests;
