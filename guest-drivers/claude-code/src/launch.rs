//! The command line of one Claude Code run: `claude -p ... -- <task>` printing stream-json,
//! its own tools limited to a fixed list, no MCP server but the capsule's bridge.

use mur_process_kit::launch::{DriverConfig, refuse_nul};
use mur_process_kit::{File, Plan, Request};
use serde_json::{Value, json};

/// The built-in tools a run may use when the config names none.
pub const BUILT_IN_TOOLS: &[&str] = &["Bash", "Read", "Write", "Edit", "Glob", "Grep"];

/// Built-in tools no run may use: they reach the network or start sub-agents.
pub const DISALLOWED_TOOLS: &str = "WebFetch,WebSearch,Task";

/// Where the bridge's MCP config is written, relative to the home.
pub const MCP_CONFIG: &str = ".mur/mcp.json";

/// The retries Claude Code makes of a failed model call unless the config says.
pub const DEFAULT_MAX_RETRIES: u64 = 2;

/// `inference.driver.config`: `{"allowed_tools"?: [string], "max_retries"?: integer}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The built-in tools allowed, in place of [`BUILT_IN_TOOLS`].
    pub allowed_tools: Option<Vec<String>>,
    pub max_retries: u64,
}

impl Config {
    pub fn parse(config: &str) -> Result<Config, String> {
        let config = DriverConfig::parse("claude-code", config, &["allowed_tools", "max_retries"])?;
        let allowed_tools = match config.get("allowed_tools") {
            None => None,
            Some(Value::Array(items)) => Some(
                items
                    .iter()
                    .map(|item| match item {
                        Value::String(tool)
                            if !tool.is_empty()
                                && !tool.contains([',', ' ', '\0'])
                                && !tool.starts_with('-') =>
                        {
                            Ok(tool.clone())
                        }
                        _ => Err(config.invalid(
                            "allowed_tools",
                            "must hold tool names: non-empty strings without commas, \
                             spaces or a leading '-'",
                        )),
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            Some(_) => {
                return Err(config.invalid("allowed_tools", "must be a list of tool names"));
            }
        };
        Ok(Config {
            allowed_tools,
            max_retries: config.whole_number("max_retries", DEFAULT_MAX_RETRIES)?,
        })
    }
}

pub fn plan(request: &Request) -> Result<Plan, String> {
    let config = Config::parse(&request.config)?;
    refuse_nul("task", &request.task)?;
    refuse_nul("model", &request.model)?;
    if let Some(prompt) = &request.system_prompt {
        refuse_nul("system prompt", prompt)?;
    }
    if let Some(endpoint) = &request.endpoint {
        refuse_nul("endpoint", endpoint)?;
    }
    if let Some(id) = &request.resume {
        refuse_nul("session to resume", id)?;
    }

    // The task comes last, after `--`: a task that begins with `-` would be read as an
    // option anywhere else, and the list options (`--mcp-config`, `--allowedTools`)
    // would take it as one more item.
    let mut args: Vec<String> = vec!["-p".into()];
    for arg in [
        "--output-format",
        "stream-json",
        "--verbose",
        "--include-partial-messages",
        "--permission-mode",
        "dontAsk",
    ] {
        args.push(arg.into());
    }
    if !request.model.is_empty() {
        args.extend(["--model".into(), request.model.clone()]);
    }
    // One past the capsule's limit: the host stops the run when the model call past
    // the limit begins, so the task ends `max_turns_reached` as it does over HTTP.
    // Claude Code's own limit only backs that up.
    let backstop = request.max_turns.saturating_add(1);
    args.extend(["--max-turns".into(), backstop.to_string()]);
    if let Some(prompt) = &request.system_prompt {
        args.extend(["--append-system-prompt".into(), prompt.clone()]);
    }
    match &request.resume {
        Some(id) => args.extend(["--resume".into(), id.clone()]),
        None => args.extend(["--session-id".into(), request.new_session.clone()]),
    }

    let mut files = Vec::new();
    let mut allowed: Vec<String> = Vec::new();
    args.push("--strict-mcp-config".into());
    match &request.bridge {
        Some(bridge) => {
            for (what, text) in [
                ("bridge server name", &bridge.server_name),
                ("bridge URL", &bridge.url),
                ("bridge token variable", &bridge.token_env),
            ] {
                refuse_nul(what, text)?;
            }
            let config = json!({
                "mcpServers": {
                    bridge.server_name.as_str(): {
                        "type": "http",
                        "url": bridge.url,
                        "headers": {
                            "Authorization": format!("Bearer ${{{}}}", bridge.token_env),
                        },
                    },
                },
            });
            files.push(File {
                path: MCP_CONFIG.into(),
                contents: config.to_string(),
            });
            args.extend(["--mcp-config".into(), join_path(&request.home, MCP_CONFIG)]);
            allowed.extend(
                bridge
                    .tools
                    .iter()
                    .map(|tool| format!("mcp__{}__{tool}", bridge.server_name)),
            );
        }
        None => args.extend(["--mcp-config".into(), r#"{"mcpServers":{}}"#.into()]),
    }
    match &config.allowed_tools {
        Some(tools) => allowed.extend(tools.iter().cloned()),
        None => allowed.extend(BUILT_IN_TOOLS.iter().map(|tool| tool.to_string())),
    }
    args.extend(["--allowedTools".into(), allowed.join(",")]);
    args.extend(["--disallowedTools".into(), DISALLOWED_TOOLS.into()]);
    args.extend(["--".into(), request.task.clone()]);

    let mut env = Vec::new();
    if let Some(endpoint) = &request.endpoint {
        env.push(("ANTHROPIC_BASE_URL".to_string(), endpoint.clone()));
    }
    for (name, value) in [
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_string()),
        ("DISABLE_AUTOUPDATER", "1".to_string()),
        ("CLAUDE_CODE_MAX_RETRIES", config.max_retries.to_string()),
        ("DISABLE_TELEMETRY", "1".to_string()),
        ("DISABLE_ERROR_REPORTING", "1".to_string()),
    ] {
        env.push((name.to_string(), value));
    }
    Ok(Plan {
        args,
        env,
        files,
        ..Plan::default()
    })
}

/// `home/relative`, with one slash between them.
fn join_path(home: &str, relative: &str) -> String {
    format!("{}/{relative}", home.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mur_process_kit::Bridge;

    fn request() -> Request {
        Request {
            task: "count the words".into(),
            model: String::new(),
            endpoint: None,
            system_prompt: None,
            config: "{}".into(),
            resume: None,
            new_session: "11111111-2222-4333-8444-555555555555".into(),
            max_turns: 8,
            bridge: None,
            home: "/run/home".into(),
            ..Request::default()
        }
    }

    fn bridge() -> Bridge {
        Bridge {
            server_name: "mur".into(),
            url: "http://127.0.0.1:4100/mcp".into(),
            token_env: "MUR_BRIDGE_TOKEN".into(),
            tools: vec!["wordcount".into(), "ask".into()],
        }
    }

    fn env(plan: &Plan, name: &str) -> Option<String> {
        plan.env
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.clone())
    }

    #[test]
    fn a_new_run_without_a_bridge() {
        let plan = plan(&request()).unwrap();
        assert_eq!(
            plan.args,
            [
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--include-partial-messages",
                "--permission-mode",
                "dontAsk",
                "--max-turns",
                "9",
                "--session-id",
                "11111111-2222-4333-8444-555555555555",
                "--strict-mcp-config",
                "--mcp-config",
                r#"{"mcpServers":{}}"#,
                "--allowedTools",
                "Bash,Read,Write,Edit,Glob,Grep",
                "--disallowedTools",
                "WebFetch,WebSearch,Task",
                "--",
                "count the words",
            ]
        );
        assert!(plan.files.is_empty());
        assert_eq!(
            plan.env,
            [
                ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
                ("DISABLE_AUTOUPDATER", "1"),
                ("CLAUDE_CODE_MAX_RETRIES", "2"),
                ("DISABLE_TELEMETRY", "1"),
                ("DISABLE_ERROR_REPORTING", "1"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
        );
    }

    #[test]
    fn a_resumed_run_with_a_bridge_model_prompt_and_endpoint() {
        let plan = plan(&Request {
            model: "claude-test".into(),
            endpoint: Some("http://127.0.0.1:9000".into()),
            system_prompt: Some("Be brief.".into()),
            resume: Some("abc".into()),
            bridge: Some(bridge()),
            home: "/run/home/".into(),
            config: r#"{"max_retries": 0}"#.into(),
            ..request()
        })
        .unwrap();
        assert_eq!(
            plan.args[7..],
            [
                "--model",
                "claude-test",
                "--max-turns",
                "9",
                "--append-system-prompt",
                "Be brief.",
                "--resume",
                "abc",
                "--strict-mcp-config",
                "--mcp-config",
                "/run/home/.mur/mcp.json",
                "--allowedTools",
                "mcp__mur__wordcount,mcp__mur__ask,Bash,Read,Write,Edit,Glob,Grep",
                "--disallowedTools",
                "WebFetch,WebSearch,Task",
                "--",
                "count the words",
            ]
        );
        assert_eq!(plan.files.len(), 1);
        assert_eq!(plan.files[0].path, ".mur/mcp.json");
        let written: Value = serde_json::from_str(&plan.files[0].contents).unwrap();
        assert_eq!(
            written,
            json!({"mcpServers": {"mur": {
                "type": "http",
                "url": "http://127.0.0.1:4100/mcp",
                "headers": {"Authorization": "Bearer ${MUR_BRIDGE_TOKEN}"},
            }}})
        );
        assert_eq!(
            env(&plan, "ANTHROPIC_BASE_URL").as_deref(),
            Some("http://127.0.0.1:9000")
        );
        assert_eq!(env(&plan, "CLAUDE_CODE_MAX_RETRIES").as_deref(), Some("0"));
    }

    #[test]
    fn allowed_tools_replace_the_built_in_list() {
        let plan = plan(&Request {
            config: r#"{"allowed_tools": ["Read", "Glob"]}"#.into(),
            bridge: Some(bridge()),
            ..request()
        })
        .unwrap();
        let at = plan
            .args
            .iter()
            .position(|a| a == "--allowedTools")
            .unwrap();
        assert_eq!(
            plan.args[at + 1],
            "mcp__mur__wordcount,mcp__mur__ask,Read,Glob"
        );
    }

    #[test]
    fn bad_configs_and_nuls_are_refused() {
        for config in [
            "[]",
            "3",
            "not json",
            r#"{"stream": true}"#,
            r#"{"allowed_tools": "Bash"}"#,
            r#"{"allowed_tools": ["Bash,Read"]}"#,
            r#"{"allowed_tools": [""]}"#,
            r#"{"max_retries": -1}"#,
            r#"{"max_retries": "3"}"#,
        ] {
            let refused = plan(&Request {
                config: config.into(),
                ..request()
            });
            assert!(refused.is_err(), "{config} was accepted");
        }
        let refused = plan(&Request {
            task: "a\0b".into(),
            ..request()
        })
        .unwrap_err();
        assert!(refused.contains("task"), "{refused}");
        assert!(
            plan(&Request {
                model: "m\0".into(),
                ..request()
            })
            .is_err()
        );
        // A task that looks like an option stays the task: it comes after `--`.
        let dashed = plan(&Request {
            task: "--help".into(),
            ..request()
        })
        .unwrap();
        assert_eq!(dashed.args[dashed.args.len() - 2..], ["--", "--help"]);
        // An empty config string is read as `{}`.
        assert!(
            plan(&Request {
                config: String::new(),
                ..request()
            })
            .is_ok()
        );
    }
}
