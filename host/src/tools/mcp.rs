//! MCP servers' tools among the capsule's own: listed as each server lists them now
//! (`mcp__<server>__<tool>`), and called through the server with the capsule's limits.
//! The result reaches the model fenced as `mcp:<server>/<tool>`, rendered and cut to
//! `max_tool_result_bytes`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use super::{Dispatched, Tools};
use crate::bindings::message::ToolSpec;
use crate::frames::State;
use crate::input::Port;
use crate::mcp::supervisor::Server;
use crate::mcp::{CallHooks, Person, Progress};
use crate::wire::Wire;

/// The fewest milliseconds between two progress statuses of one call: a server's flood
/// of progress notifications must not become a flood of frames.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);

impl Tools {
    /// The session's MCP servers, whose tools join the list from now on.
    pub fn add_mcp(&mut self, servers: Vec<Arc<Server>>) {
        self.mcp = servers;
        self.forget_specs();
    }

    /// Changes each time a server's list does: what the specs' cache is keyed on.
    pub(super) fn mcp_generation(&self) -> u64 {
        self.mcp.iter().map(|s| s.generation()).sum()
    }

    /// Every MCP tool offered now, as the model is told of it.
    pub(super) fn mcp_specs(&self) -> Vec<ToolSpec> {
        let mut specs = Vec::new();
        for server in &self.mcp {
            for tool in &server.catalog().offered {
                specs.push(ToolSpec {
                    name: tool.name.clone(),
                    description: tool.description.clone(),
                    input_schema: tool.schema.to_string(),
                });
            }
        }
        specs
    }

    /// Every MCP tool offered now: its name, its server's, its description.
    pub fn mcp_tools(&self) -> Vec<(String, String, String)> {
        let mut tools = Vec::new();
        for server in &self.mcp {
            for tool in &server.catalog().offered {
                let server = server.name().to_string();
                tools.push((tool.name.clone(), server, tool.description.clone()));
            }
        }
        tools
    }

    /// The server and its own name for the tool the model calls `name`, while offered.
    pub(super) fn find_mcp(&self, name: &str) -> Option<(&Arc<Server>, String)> {
        self.mcp.iter().find_map(|server| {
            let catalog = server.catalog();
            let tool = catalog.offered.iter().find(|t| t.name == name)?;
            Some((server, tool.tool.clone()))
        })
    }

    /// One call of an MCP tool, bounded by the capsule's deadline besides the server's
    /// `tool_timeout_sec`. Dropped (its task canceled), the call is canceled at the
    /// server too.
    pub(super) async fn run_mcp(
        &self,
        server: &Arc<Server>,
        tool: &str,
        input: &str,
        wire: &Arc<Wire>,
        (port, traceparent): (Option<Port>, Option<&str>),
    ) -> Dispatched {
        let arguments = match serde_json::from_str::<Value>(input) {
            Ok(Value::Object(fields)) => Value::Object(fields),
            _ => {
                return Dispatched::not_reached(format!(
                    "tool 'mcp__{}__{tool}' input must be a JSON object",
                    server.name()
                ));
            }
        };
        let source = format!("mcp:{}/{tool}", server.name());
        let asking = port.as_ref().map(|port| Asking { port });
        let progress = Status::new(wire.clone(), server.name(), tool);
        let hooks = CallHooks {
            person: asking.as_ref().map(|a| a as &dyn Person),
            progress: Some(&progress),
            traceparent,
        };
        let limit = self.grants.deadline;
        let called = tokio::time::timeout(limit, server.call(tool, arguments, &hooks)).await;
        let max = usize::try_from(self.grants.max_result_bytes).unwrap_or(usize::MAX);
        match called {
            Ok(Ok(result)) => {
                let rendered = crate::mcp::render(&result, max);
                let mut text = rendered.text;
                if rendered.truncated {
                    text.push_str(&format!(
                        "\n[the result was cut at capabilities.limits.max_tool_result_bytes ({max} bytes)]"
                    ));
                }
                let mut out = Dispatched::fenced_as(&source, &text, rendered.is_error);
                out.truncated = rendered.truncated;
                out
            }
            Ok(Err(why)) => failed(&source, why),
            Err(_) => failed(
                &source,
                format!(
                    "the call to MCP server '{}' was stopped at the capsule's deadline ({} s, capabilities.deadline_seconds)",
                    server.name(),
                    limit.as_secs()
                ),
            ),
        }
    }
}

/// A call that did not give a result: the model is told why, fenced, since the reason
/// may quote the server.
fn failed(source: &str, why: String) -> Dispatched {
    let mut out = Dispatched::fenced_as(source, &why, true);
    out.error = Some(why);
    out
}

/// The person behind the task, asked through the seed's `input-required`.
struct Asking<'a> {
    port: &'a Port,
}

impl Person for Asking<'_> {
    fn ask<'a>(&'a self, prompt: &'a str) -> BoxFuture<'a, Result<String, String>> {
        // The prompt already names the server (`MCP server 'x' asks: …`).
        Box::pin(self.port.ask(prompt))
    }
}

/// A call's progress, said as the task's `working` status at most every
/// [`PROGRESS_EVERY`].
struct Status {
    wire: Arc<Wire>,
    label: String,
    last: Mutex<Option<Instant>>,
}

impl Status {
    fn new(wire: Arc<Wire>, server: &str, tool: &str) -> Status {
        Status {
            wire,
            label: format!("mcp__{server}__{tool}"),
            last: Mutex::new(None),
        }
    }
}

impl Progress for Status {
    fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        {
            let mut last = self
                .last
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if last.is_some_and(|at| at.elapsed() < PROGRESS_EVERY) {
                return;
            }
            *last = Some(Instant::now());
        }
        let done = match total {
            Some(total) => format!("{progress} of {total}"),
            None => format!("{progress}"),
        };
        let mut text = format!("{}: progress {done}", self.label);
        if let Some(message) = message {
            text.push_str(" (");
            text.push_str(&crate::outbound::reply::said(message));
            text.push(')');
        }
        self.wire.status(State::Working, &text, None);
    }
}

/// What `mur mcp ls` and the launch log show of one server's tools.
pub fn listing(server: &Server) -> Value {
    let catalog = server.catalog();
    json!({
        "server": server.name(),
        "tools": catalog.offered.iter().map(|t| json!({
            "name": t.name,
            "description": t.description,
            "input_schema": t.schema,
        })).collect::<Vec<_>>(),
        "refused": catalog.refused.iter().map(|r| json!({"tool": r.tool, "why": r.why})).collect::<Vec<_>>(),
    })
}
