//! `mcp_servers`: a full example, the defaults, and each refusal with its message.

use std::time::Duration;

use super::super::testing::*;
use super::*;

/// Lines 1-9: `base` with the allow-list an HTTP server needs; servers start at line 10.
fn servers(entries: &str) -> String {
    base(&format!(
        "capabilities:\n  network:\n    allow: [\"http://127.0.0.1:8765\"]\nmcp_servers:\n{entries}"
    ))
}

#[test]
fn a_full_example_is_read_in_the_order_written() {
    let s = Scratch::new();
    s.file("node_modules/.keep", "");
    s.file("bin/server.py", "");
    let yaml = servers(
        "  everything:\n    command: node\n    args: [path/to/index.js, stdio]\n    \
         env: {KEY: value, PORT: 8080, SECRET: \"${LOCAL_MODEL_KEY}\"}\n    \
         install: [node_modules, ./bin/server.py]\n    cwd: data/mcp\n    \
         enabled_tools: [echo, add]\n    disabled_tools: [longRunningOperation]\n    \
         startup_timeout_sec: 20\n    tool_timeout_sec: 120\n  \
         notes:\n    url: http://127.0.0.1:8765/mcp\n    bearer_token_env_var: NOTES_TOKEN\n  \
         local:\n    command: ./bin/server.py\n",
    );
    let loaded = s.ok(&yaml);
    assert_eq!(loaded.warnings, vec![]);
    let m = loaded.manifest;
    let names: Vec<&str> = m.mcp_servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["everything", "notes", "local"]);
    let everything = &m.mcp_servers[0];
    assert_eq!(
        everything,
        &McpServer {
            name: "everything".into(),
            transport: McpTransport::Stdio {
                command: "node".into(),
                args: vec!["path/to/index.js".into(), "stdio".into()],
                env: vec![
                    ("KEY".into(), "value".into()),
                    ("PORT".into(), "8080".into()),
                    ("SECRET".into(), "sk-local".into()),
                ],
                install: vec![s.0.join("node_modules"), s.0.join("bin/server.py")],
                cwd: Some("data/mcp".into()),
            },
            enabled_tools: Some(vec!["echo".into(), "add".into()]),
            disabled_tools: vec!["longRunningOperation".into()],
            startup_timeout: Duration::from_secs(20),
            tool_timeout: Duration::from_secs(120),
            line: 10,
        }
    );
    let notes = &m.mcp_servers[1];
    assert_eq!(
        notes.transport,
        McpTransport::Http {
            url: "http://127.0.0.1:8765/mcp".into(),
            token_env: Some("NOTES_TOKEN".into()),
        }
    );
    // Codex's defaults.
    assert_eq!(notes.startup_timeout, Duration::from_secs(10));
    assert_eq!(notes.tool_timeout, Duration::from_secs(60));
    assert_eq!((notes.enabled_tools.as_ref(), notes.line), (None, 20));
    let McpTransport::Stdio { command, .. } = &m.mcp_servers[2].transport else {
        panic!("a stdio server");
    };
    assert_eq!(
        command,
        &s.path("bin/server.py"),
        "relative to the manifest"
    );

    assert_eq!(s.ok(&base("")).manifest.mcp_servers, vec![]);
    assert_eq!(
        s.ok(&base("mcp_servers: {}\n")).manifest.mcp_servers,
        vec![]
    );
}

#[test]
fn an_unknown_key_is_a_warning_with_a_suggestion() {
    let s = Scratch::new();
    let loaded = s.ok(&servers("  a:\n    command: x\n    arg: [y]\n"));
    let w: Vec<&str> = loaded.warnings.iter().map(|w| w.text.as_str()).collect();
    assert_eq!(
        w,
        [
            "[capsule-runtime] warning[W-MAN-001]: murmur.yaml:12: unknown key \
          'mcp_servers.a.arg' ignored (did you mean 'mcp_servers.a.args'?)"
        ]
    );
}

/// Each refusal, as `error[...]: murmur.yaml:N: ...` in full.
#[test]
#[rustfmt::skip]
fn each_refusal_names_its_key_and_line() {
    let s = Scratch::new();
    let e = "error[E-MAN-003]: murmur.yaml";
    let cases: &[(&str, String)] = &[
        ("  Bad:\n    command: x\n", format!("{e}:10: invalid mcp_servers config for 'mcp_servers.Bad': 'Bad' is not an MCP server name; a server name matches ^[a-z0-9][a-z0-9_-]{{0,31}}$ and holds no '__'\n  hint: its tools are named mcp__<server>__<tool>, so the name must not hold '__'")),
        ("  a__b:\n    command: x\n", format!("{e}:10: invalid mcp_servers config for 'mcp_servers.a__b': 'a__b' is not an MCP server name; a server name matches ^[a-z0-9][a-z0-9_-]{{0,31}}$ and holds no '__'\n  hint: its tools are named mcp__<server>__<tool>, so the name must not hold '__'")),
        ("  a:\n    command: x\n    url: http://127.0.0.1:8765/mcp\n", format!("{e}:12: invalid mcp_servers config for 'mcp_servers.a.url': a server has either 'command' (stdio) or 'url' (streamable HTTP), not both")),
        ("  a:\n    args: [x]\n", "error[E-MAN-001]: murmur.yaml:10: missing required field 'mcp_servers.a.command'\n  hint: set 'command' to start a stdio server, or 'url' to reach a streamable HTTP one".into()),
        ("  a:\n    command: \" \"\n", format!("{e}:11: invalid mcp_servers config for 'mcp_servers.a.command': must not be empty")),
        ("  a:\n    url: http://127.0.0.1:8765/mcp\n    args: [x]\n", format!("{e}:12: invalid mcp_servers config for 'mcp_servers.a.args': 'args' is for a server with 'command', and this one has 'url'")),
        ("  a:\n    url: http://127.0.0.1:8765/mcp\n    cwd: x\n", format!("{e}:12: invalid mcp_servers config for 'mcp_servers.a.cwd': 'cwd' is for a server with 'command', and this one has 'url'")),
        ("  a:\n    command: x\n    bearer_token_env_var: T\n", format!("{e}:12: invalid mcp_servers config for 'mcp_servers.a.bearer_token_env_var': 'bearer_token_env_var' is for a server with 'url', and this one has 'command'")),
        ("  a:\n    url: ftp://127.0.0.1:8765/mcp\n", format!("{e}:11: invalid mcp_servers config for 'mcp_servers.a.url': expected the http:// or https:// URL of a streamable HTTP server, found 'ftp://127.0.0.1:8765/mcp'")),
        ("  a:\n    url: http://10.0.0.1:8765/mcp\n", format!("{e}:11: invalid mcp_servers config for 'mcp_servers.a.url': http://10.0.0.1:8765/mcp is not reached by capabilities.network.allow\n  hint: add \"http://10.0.0.1:8765\" to capabilities.network.allow")),
        ("  a:\n    url: http://127.0.0.1:8765/mcp\n    bearer_token_env_var: my-token\n", format!("{e}:12: invalid mcp_servers config for 'mcp_servers.a.bearer_token_env_var': 'my-token' is not an environment variable name")),
        ("  a:\n    command: x\n    env: {1X: y}\n", format!("{e}:12: invalid mcp_servers config for 'mcp_servers.a.env.1X': '1X' is not an environment variable name")),
        ("  a:\n    command: x\n    env: {X: [y]}\n", format!("{e}:12: invalid mcp_servers config for 'mcp_servers.a.env.X': expected a string, found a list")),
        ("  a:\n    command: x\n    env: [X]\n", format!("{e}:12: invalid mcp_servers config for 'mcp_servers.a.env': expected a mapping of variable names to strings, found a list")),
        ("  a:\n    command: x\n    env: {X: \"${NOT_SET}\"}\n", format!("{e}:12: invalid mcp_servers config for 'mcp_servers.a.env.X': environment variable NOT_SET is not set\n  hint: export NOT_SET=... in the environment mur runs in")),
        ("  a:\n    command: x\n    cwd: ../up\n", format!("{e}:12: invalid mcp_servers config for 'mcp_servers.a.cwd': expected a folder relative to the workdir, without '..', found '../up'")),
        ("  a:\n    command: x\n    cwd: /abs\n", format!("{e}:12: invalid mcp_servers config for 'mcp_servers.a.cwd': expected a folder relative to the workdir, without '..', found '/abs'")),
        ("  a:\n    command: x\n    startup_timeout_sec: 0\n", format!("{e}:12: invalid mcp_servers config for 'mcp_servers.a.startup_timeout_sec': must be at least 1, found 0")),
        ("  a:\n    command: x\n    startup_timeout_sec: 3601\n", format!("{e}:12: invalid mcp_servers config for 'mcp_servers.a.startup_timeout_sec': must be at most 3600, found 3601")),
        ("  a:\n    command: x\n    tool_timeout_sec: 86401\n", format!("{e}:12: invalid mcp_servers config for 'mcp_servers.a.tool_timeout_sec': must be at most 86400, found 86401")),
        ("  a:\n    command: x\n    tool_timeout_sec: 1.5\n", format!("{e}:12: invalid mcp_servers config for 'mcp_servers.a.tool_timeout_sec': expected a whole number, found '1.5'")),
        ("  a:\n    command: x\n    enabled_tools: [\"\"]\n", format!("{e}:12: invalid mcp_servers config for 'mcp_servers.a.enabled_tools[0]': a tool name must not be empty")),
        ("  a:\n    command: x\n    disabled_tools: echo\n", format!("{e}:12: invalid mcp_servers config for 'mcp_servers.a.disabled_tools': expected a list, found 'echo'")),
        ("  a: [x]\n", format!("{e}:10: invalid mcp_servers config for 'mcp_servers.a': expected a mapping, found a list")),
    ];
    for (entries, want) in cases {
        assert_eq!(&text(&s.err(&servers(entries))), want, "{entries}");
    }
    let e = s.err(&base("mcp_servers: [a]\n"));
    assert_eq!(text(&e), format!("{e}:6: invalid mcp_servers config for 'mcp_servers': expected a mapping of server names, found a list", e = "error[E-MAN-003]: murmur.yaml"));
    let e = s.err(&servers("  a:\n    command: x\n    install: [no_such_dir]\n"));
    assert_eq!(
        text(&e),
        format!(
            "error[E-IO-001]: murmur.yaml:12: mcp_servers.a.install[0] not found at {}\n  hint: 'install' is resolved against {}; install the server there first (e.g. npm install)",
            s.path("no_such_dir"),
            s.0.display()
        )
    );
}

#[test]
fn names_follow_the_tool_naming_rule() {
    for good in ["a", "0", "my-server", "my_server", "a-_b", &"x".repeat(32)] {
        assert!(server_name(good), "{good}");
    }
    for bad in [
        "",
        "-a",
        "_a",
        "A",
        "a b",
        "a.b",
        "a__b",
        &"x".repeat(33),
        "é",
    ] {
        assert!(!server_name(bad), "{bad}");
    }
}

fn http_server(token_env: Option<&str>) -> McpServer {
    McpServer {
        name: "notes".into(),
        transport: McpTransport::Http {
            url: "http://127.0.0.1:8765/mcp".into(),
            token_env: token_env.map(str::to_string),
        },
        enabled_tools: None,
        disabled_tools: Vec::new(),
        startup_timeout: Duration::from_secs(10),
        tool_timeout: Duration::from_secs(60),
        line: 1,
    }
}

#[test]
fn the_token_is_read_at_launch_and_its_absence_named() {
    let env = |var: &str| match var {
        "NOTES_TOKEN" => Some("t0k3n".to_string()),
        "EMPTY" => Some(String::new()),
        "SPLIT" => Some("a\r\nX-Injected: 1".to_string()),
        _ => None,
    };
    let token = http_server(Some("NOTES_TOKEN")).token_from(&env).unwrap();
    assert_eq!(token.as_deref(), Some("t0k3n"));
    assert_eq!(http_server(None).token_from(&env).unwrap(), None);
    let e = http_server(Some("MISSING")).token_from(&env).unwrap_err();
    assert_eq!(
        text(&e),
        "error[E-RUN-070]: MCP server 'notes' takes its bearer token from MISSING, which is not \
         set\n  hint: export MISSING=<the token the server wants>, or remove bearer_token_env_var"
    );
    for var in ["EMPTY", "SPLIT"] {
        let e = http_server(Some(var)).token_from(&env).unwrap_err();
        assert_eq!(
            text(&e),
            format!(
                "error[E-RUN-071]: MCP server 'notes' takes its bearer token from {var}, which \
                 is empty or holds control characters a header cannot carry\n  hint: set {var} \
                 to the token alone, on one line"
            )
        );
    }
}
