//! The command line and home config of one Codex run: `codex exec --json`, its model
//! server and the capsule's bridge named in `$CODEX_HOME/config.toml`.

use mur_process_kit::launch::{DriverConfig, refuse_nul};
use mur_process_kit::{File, Plan, Request};

/// The variable that carries the API key to Codex (the model provider's `env_key`).
pub const KEY_ENV: &str = "MUR_CODEX_API_KEY";

/// The model server when the manifest names none.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// The retries Codex makes of a failed model call unless the config says.
pub const DEFAULT_MAX_RETRIES: u64 = 2;

/// `inference.driver.config`: `{"max_retries"?: integer}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub max_retries: u64,
}

impl Config {
    pub fn parse(config: &str) -> Result<Config, String> {
        let config = DriverConfig::parse("codex", config, &["max_retries"])?;
        Ok(Config {
            max_retries: config.whole_number("max_retries", DEFAULT_MAX_RETRIES)?,
        })
    }
}

pub fn plan(request: &Request) -> Result<Plan, String> {
    let config = Config::parse(&request.config)?;
    refuse_nul("task", &request.task)?;
    refuse_nul("model", &request.model)?;
    refuse_nul("workdir", &request.workdir)?;
    refuse_nul("home", &request.home)?;
    if let Some(prompt) = &request.system_prompt {
        refuse_nul("system prompt", prompt)?;
    }
    if let Some(id) = &request.resume {
        refuse_nul("session to resume", id)?;
        if id.is_empty() || id.starts_with('-') {
            return Err(format!("'{id}' is not a Codex session id"));
        }
    }

    // `exec`'s own options come before `resume`, which takes none of `--sandbox` and
    // `--cd` but follows them there; the task comes last, after `--`, so a task that
    // begins with `-` is not read as an option.
    let mut args: Vec<String> = [
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--sandbox",
        "danger-full-access",
        "--disable",
        "plugins",
        "--disable",
        "unbounded_connection_retries",
        "--cd",
    ]
    .map(String::from)
    .into();
    args.push(request.workdir.clone());
    if let Some(prompt) = &request.system_prompt {
        args.push("-c".into());
        args.push(format!("developer_instructions={}", toml_string(prompt)));
    }
    if let Some(id) = &request.resume {
        args.push("resume".into());
        args.push(id.clone());
    }
    args.push("--".into());
    args.push(request.task.clone());

    Ok(Plan {
        args,
        env: vec![("CODEX_HOME".into(), request.home.clone())],
        files: vec![File {
            path: "config.toml".into(),
            contents: config_toml(request, &config),
        }],
        ..Plan::default()
    })
}

/// `$CODEX_HOME/config.toml`: the model, the `mur` model provider, the bridge.
fn config_toml(request: &Request, config: &Config) -> String {
    let mut toml = String::new();
    if !request.model.is_empty() {
        toml.push_str(&format!("model = {}\n", toml_string(&request.model)));
    }
    toml.push_str("model_provider = \"mur\"\n\n[model_providers.mur]\nname = \"mur\"\n");
    toml.push_str(&format!(
        "base_url = {}\n",
        toml_string(&base_url(request.endpoint.as_deref()))
    ));
    toml.push_str("wire_api = \"responses\"\n");
    toml.push_str(&format!("env_key = {}\n", toml_string(KEY_ENV)));
    toml.push_str(&format!("request_max_retries = {}\n", config.max_retries));
    toml.push_str(&format!("stream_max_retries = {}\n", config.max_retries));
    if let Some(bridge) = &request.bridge {
        toml.push_str(&format!(
            "\n[mcp_servers.{}]\nurl = {}\nbearer_token_env_var = {}\n\
             default_tools_approval_mode = \"approve\"\n",
            toml_string(&bridge.server_name),
            toml_string(&bridge.url),
            toml_string(&bridge.token_env),
        ));
    }
    toml
}

/// The provider's base URL: the endpoint with `/v1` unless it ends with it.
pub fn base_url(endpoint: Option<&str>) -> String {
    match endpoint.map(|e| e.trim_end_matches('/')) {
        None | Some("") => DEFAULT_BASE_URL.into(),
        Some(endpoint) if endpoint.ends_with("/v1") => endpoint.into(),
        Some(endpoint) => format!("{endpoint}/v1"),
    }
}

/// `text` as a TOML basic string (also usable as a quoted key).
pub fn toml_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
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
            bridge: None,
            home: "/run/home".into(),
            workdir: "/run/work".into(),
            ..Request::default()
        }
    }

    const START: [&str; 11] = [
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--sandbox",
        "danger-full-access",
        "--disable",
        "plugins",
        "--disable",
        "unbounded_connection_retries",
        "--cd",
        "/run/work",
    ];

    #[test]
    fn a_new_run_without_a_bridge() {
        let plan = plan(&request()).unwrap();
        let mut args = START.to_vec();
        args.extend(["--", "count the words"]);
        assert_eq!(plan.args, args);
        assert_eq!(
            plan.env,
            [("CODEX_HOME".to_string(), "/run/home".to_string())]
        );
        assert_eq!(
            plan.files,
            [File {
                path: "config.toml".into(),
                contents: "model_provider = \"mur\"\n\n\
                           [model_providers.mur]\n\
                           name = \"mur\"\n\
                           base_url = \"https://api.openai.com/v1\"\n\
                           wire_api = \"responses\"\n\
                           env_key = \"MUR_CODEX_API_KEY\"\n\
                           request_max_retries = 2\n\
                           stream_max_retries = 2\n"
                    .into(),
            }]
        );
    }

    #[test]
    fn a_resumed_run_with_a_bridge_model_and_prompt() {
        let plan = plan(&Request {
            model: "gpt-test".into(),
            endpoint: Some("http://127.0.0.1:9000/".into()),
            system_prompt: Some("Be \"brief\".\nNo \\ tricks.".into()),
            resume: Some("01a2517f-47c2-7a82-8e9b-32d7b0d76f07".into()),
            config: r#"{"max_retries": 5}"#.into(),
            bridge: Some(Bridge {
                server_name: "mur".into(),
                url: "http://127.0.0.1:4100/mcp".into(),
                token_env: "MUR_BRIDGE_TOKEN".into(),
                tools: vec!["wordcount".into()],
            }),
            ..request()
        })
        .unwrap();
        let mut args = START.to_vec();
        args.extend([
            "-c",
            r#"developer_instructions="Be \"brief\".\nNo \\ tricks.""#,
            "resume",
            "01a2517f-47c2-7a82-8e9b-32d7b0d76f07",
            "--",
            "count the words",
        ]);
        assert_eq!(plan.args, args);
        assert_eq!(
            plan.files[0].contents,
            "model = \"gpt-test\"\n\
             model_provider = \"mur\"\n\n\
             [model_providers.mur]\n\
             name = \"mur\"\n\
             base_url = \"http://127.0.0.1:9000/v1\"\n\
             wire_api = \"responses\"\n\
             env_key = \"MUR_CODEX_API_KEY\"\n\
             request_max_retries = 5\n\
             stream_max_retries = 5\n\n\
             [mcp_servers.\"mur\"]\n\
             url = \"http://127.0.0.1:4100/mcp\"\n\
             bearer_token_env_var = \"MUR_BRIDGE_TOKEN\"\n\
             default_tools_approval_mode = \"approve\"\n"
        );
    }

    #[test]
    fn base_urls() {
        assert_eq!(base_url(None), "https://api.openai.com/v1");
        assert_eq!(base_url(Some("http://h:1")), "http://h:1/v1");
        assert_eq!(base_url(Some("http://h:1/v1")), "http://h:1/v1");
        assert_eq!(base_url(Some("http://h:1/v1/")), "http://h:1/v1");
        assert_eq!(base_url(Some("http://h:1/proxy")), "http://h:1/proxy/v1");
    }

    #[test]
    fn toml_strings() {
        assert_eq!(toml_string("plain"), "\"plain\"");
        assert_eq!(toml_string("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(
            toml_string("tab\there\u{1}\u{7f}"),
            r#""tab\there\u0001\u007F""#
        );
    }

    #[test]
    fn bad_requests_are_refused() {
        for config in [
            "[]",
            "1",
            "nope",
            r#"{"allowed_tools": []}"#,
            r#"{"max_retries": -2}"#,
        ] {
            assert!(
                plan(&Request {
                    config: config.into(),
                    ..request()
                })
                .is_err(),
                "{config} was accepted"
            );
        }
        assert!(
            plan(&Request {
                task: "\0".into(),
                ..request()
            })
            .unwrap_err()
            .contains("task")
        );
        assert!(
            plan(&Request {
                resume: Some("--last".into()),
                ..request()
            })
            .is_err()
        );
        assert!(
            plan(&Request {
                config: String::new(),
                ..request()
            })
            .is_ok()
        );
    }
}
