//! The door of `mur run`'s address: a capsule declaring `network.authentication` mints
//! an operator token, kept only in its registry entry; every method of both doors
//! without it (or with another) gets `mur serve`'s exact 401; `mur token` prints it and
//! `mur watch`/`mur stop` find it; a public door is refused on an address other than
//! loopback unless `--open-door` opens it. Every test has a MURMUR_HOME of its own.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::browser::Browser;
use crate::common::host::{At, Host, Live};
use crate::common::*;

const WAIT: Duration = Duration::from_secs(60);
const JSON: (&str, &str) = ("content-type", "application/json");
const V1: (&str, &str) = ("a2a-version", "1.0");

/// Exactly what `mur serve` answers a capsule's caller without its token.
const UNAUTHORIZED: &str = "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\nwww-authenticate: Bearer\r\ncontent-length: 76\r\nconnection: close\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32000,\"message\":\"Unauthorized\"}}";

const BEARER: &str = "network:\n  authentication:\n    scheme: bearer\n";
const ANSWER: &str = "turns:\n  - text: \"Hello back.\"\n";

fn manifest(extra: &str) -> String {
    format!(
        "name: guarded\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\n{extra}"
    )
}

/// A MURMUR_HOME of the test's own.
struct Home(PathBuf);

impl Home {
    fn new(name: &str) -> Home {
        Home(scratch(&format!("home-{name}")))
    }

    fn env(&self) -> [(&str, &str); 1] {
        [("MURMUR_HOME", self.0.to_str().unwrap())]
    }

    fn cmd(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = mur();
        cmd.envs(self.env()).args(args);
        cmd
    }

    fn mur(&self, args: &[&str]) -> Run {
        finish(&mut self.cmd(args))
    }

    /// Waits for the session's entry (written just after the launch line), then reads
    /// its token with `mur token`.
    fn token(&self, session: &str) -> String {
        let entry = self.0.join("running").join(format!("{session}.json"));
        eventually(WAIT, "the registry entry", || entry.is_file());
        let run = self.mur(&["token", session]);
        run.assert_ok();
        assert_eq!(run.stderr, "");
        let token = run.stdout.strip_suffix('\n').expect("a line").to_string();
        assert!(is_minted(&token, "mur_", 64), "{:?}", run.stdout);
        token
    }
}

/// A capsule that takes tasks over HTTP until stopped, in `home`, and its session id.
fn queued(home: &Home, name: &str, extra: &str) -> (Capsule, Live, String) {
    let capsule = Capsule::new(name, &manifest(extra), ANSWER);
    capsule.file("script.yaml", ANSWER);
    let live = Live::start(Host::Run, &capsule, QUEUE, &home.env());
    let session = live.session().id;
    (capsule, live, session)
}

fn rpc(method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string()
}

/// One call of every method either door serves (and one it does not), as a client
/// writes it: the seed's methods, then the A2A v1 ones.
fn every_method() -> Vec<(&'static str, String)> {
    let message = json!({"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]});
    vec![
        ("message/stream", message_stream_body("hi")),
        ("stream/watch", rpc("stream/watch", json!({}))),
        ("tasks/cancel", rpc("tasks/cancel", json!({"id": "tsk_x"}))),
        ("murmur/stop", rpc("murmur/stop", json!({}))),
        ("murmur/nothing", rpc("murmur/nothing", json!({}))),
        (
            "SendMessage",
            rpc("SendMessage", json!({"message": message})),
        ),
        (
            "SendStreamingMessage",
            rpc("SendStreamingMessage", json!({"message": message})),
        ),
        ("GetTask", rpc("GetTask", json!({"id": "tsk_x"}))),
        ("ListTasks", rpc("ListTasks", json!({}))),
        ("CancelTask", rpc("CancelTask", json!({"id": "tsk_x"}))),
        (
            "SubscribeToTask",
            rpc("SubscribeToTask", json!({"id": "tsk_x"})),
        ),
        (
            "GetExtendedAgentCard",
            rpc("GetExtendedAgentCard", json!({})),
        ),
        (
            "CreateTaskPushNotificationConfig",
            rpc("CreateTaskPushNotificationConfig", json!({})),
        ),
        ("not JSON", "{not json".to_string()),
    ]
}

/// `at` with `authorization` as its token header (or none).
fn with(at: &At, authorization: Option<&str>) -> At {
    At {
        authorization: authorization.map(str::to_string),
        ..at.clone()
    }
}

fn post(at: &At, body: &str) -> String {
    at.exchange(&at.request("POST", "", &[JSON, V1], body))
}

#[test]
fn every_method_of_both_doors_wants_the_token_mur_token_prints() {
    let home = Home::new("door-methods");
    let (_capsule, mut live, session) = queued(&home, "door-methods", BEARER);
    let token = home.token(&session);
    let open = with(&live.at, None);
    let basic = format!("Basic {token}");
    let longer = format!("Bearer {token}0");
    let presented = [
        None,
        Some("Bearer mur_0000000000000000000000000000000000000000000000000000000000000000"),
        Some("Bearer "),
        Some(basic.as_str()),
        Some(longer.as_str()),
        Some(token.as_str()),
    ];
    for (method, body) in every_method() {
        for authorization in presented {
            let reply = post(&with(&open, authorization), &body);
            assert_eq!(reply, UNAUTHORIZED, "{method} with {authorization:?}");
        }
    }
    // Whatever the request, the token comes first: a GET, another method, no body.
    for (verb, headers) in [
        ("GET", vec![("accept", "application/json")]),
        ("GET", vec![]),
        ("DELETE", vec![]),
    ] {
        let reply = open.exchange(&open.request(verb, "", &headers, ""));
        assert_eq!(reply, UNAUTHORIZED, "{verb} {headers:?}");
    }
    // As under mur serve, the card (how a client learns of the token) and the web
    // view's page (which asks for it) need none.
    let card = open.exchange(&open.request("GET", ".well-known/agent-card.json", &[], ""));
    let card: Value = serde_json::from_str(card.split_once("\r\n\r\n").unwrap().1).unwrap();
    assert_eq!(
        (&card["securitySchemes"], &card["securityRequirements"]),
        (
            &json!({"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer", "description": "The capsule's token, as its operator handed it out"}}}),
            &json!([{"schemes": {"bearer": {"list": []}}}])
        ),
        "{card:#}"
    );
    let page = open.exchange(&open.request("GET", "", &[("accept", "text/html")], ""));
    assert!(page.starts_with("HTTP/1.1 200 OK\r\n"), "{page}");
    assert!(page.contains(r#"data-view="capsule""#));

    // The token opens both doors: a task sent with it runs, and is listed.
    let at = with(&open, Some(&format!("Bearer {token}")));
    let stream = at.exchange(&at.request("POST", "", &[JSON], &message_stream_body("hi")));
    assert!(stream.starts_with(SSE_HEAD), "{stream}");
    assert!(stream.contains("Hello back."), "{stream}");
    let listed = post(&at, &rpc("ListTasks", json!({})));
    let listed: Value = serde_json::from_str(json_body(&listed)).unwrap();
    assert_eq!(listed["result"]["tasks"].as_array().map(Vec::len), Some(1));
    let task_id = listed["result"]["tasks"][0]["id"].as_str().unwrap();
    let got = post(&at, &rpc("GetTask", json!({"id": task_id})));
    let got: Value = serde_json::from_str(json_body(&got)).unwrap();
    assert_eq!(
        (&got["result"]["id"], &got["result"]["status"]["state"]),
        (&json!(task_id), &json!("TASK_STATE_COMPLETED"))
    );
    // The scheme is matched without regard to case, as mur serve matches it.
    let lower = with(&open, Some(&format!("bearer {token}")));
    let listed = post(&lower, &rpc("ListTasks", json!({})));
    assert!(json_body(&listed).contains("\"tasks\""));
    let unknown = post(&at, &rpc("murmur/nothing", json!({})));
    assert_eq!(
        json_body(&unknown),
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}"#
    );

    // mur stop finds the token in the session's entry: the capsule is asked, and ends.
    let stop = home.mur(&["stop", &session]);
    stop.assert_ok();
    assert!(
        stop.stdout
            .ends_with("\nresidue: nothing else was left running\n"),
        "{}",
        stop.stdout
    );
    assert!(!live.serving());
    // The token reached no record of the session.
    let records = live.session();
    for file in ["trace.jsonl", "logs/bootstrap.log"] {
        let text = records.record(file);
        assert!(!text.contains(&token), "{file} holds the token");
    }
    assert!(
        !home
            .0
            .join("running")
            .join(format!("{session}.json"))
            .exists()
    );
}

#[test]
fn mur_watch_reads_the_token_from_the_entry_or_murmur_door_token() {
    let home = Home::new("door-watch");
    let (_capsule, live, session) = queued(&home, "door-watch", BEARER);
    let token = home.token(&session);
    let url = live.at.url();

    // By session: the entry's token.
    let mut by_session = Watch::start_with(home.cmd(&["watch", &session]), true);
    assert_eq!(
        by_session.attached(),
        format!(
            "[murmur] watching {session} — Ctrl-C ends the watch, not the capsule; use `mur stop` to end the capsule"
        )
    );
    // What a task sent with the token does reaches the watch.
    let at = with(&live.at, Some(&format!("Bearer {token}")));
    let stream = at.exchange(&at.request("POST", "", &[JSON], &message_stream_body("hi")));
    assert!(stream.starts_with(SSE_HEAD), "{stream}");
    by_session.printed("Hello back.");
    drop(by_session);

    // By address: no token is a 401 the user is told how to mend.
    let refused = home.mur(&["watch", &url]);
    assert_eq!(refused.status, 1);
    assert_eq!(
        refused.stderr,
        format!(
            "error[E-IO-005]: {url} asks for a token (401 Unauthorized)\n  hint: pass its token: --token TOKEN, or MURMUR_DOOR_TOKEN in the environment; mur token SESSION prints it where the capsule runs\n"
        )
    );
    let mut wrong = home.cmd(&["watch", &url]);
    wrong.env("MURMUR_DOOR_TOKEN", "mur_wrong");
    let wrong = finish(&mut wrong);
    assert_eq!(
        wrong.stderr,
        format!(
            "error[E-IO-005]: {url} refused the token (401 Unauthorized)\n  hint: it must be the token mur token SESSION prints for the capsule's running session: each run mints a new one\n"
        )
    );
    let mut by_env = home.cmd(&["watch", &url]);
    by_env.env("MURMUR_DOOR_TOKEN", &token);
    let by_env = Watch::start_with(by_env, true);
    assert!(
        by_env
            .attached()
            .starts_with(&format!("[murmur] watching {url} — "))
    );
    drop(by_env);

    // By address with MURMUR_DOOR_TOKEN, mur stop asks and waits for the exit.
    let mut stop = home.cmd(&["stop", &url]);
    stop.env("MURMUR_DOOR_TOKEN", &token);
    let stop = finish(&mut stop);
    stop.assert_ok();
    assert_eq!(
        stop.stdout,
        format!("stopped: {session}\nresidue: nothing else was left running\n")
    );
    live.ends_cleanly(WAIT);
}

#[test]
fn mur_token_of_a_public_door_or_of_no_session_is_an_error() {
    let home = Home::new("door-public");
    let (_capsule, live, session) = queued(&home, "door-public", "");
    let entry = home.0.join("running").join(format!("{session}.json"));
    eventually(WAIT, "the registry entry", || entry.is_file());
    assert!(
        !std::fs::read_to_string(&entry)
            .unwrap()
            .contains("door_token")
    );
    let public = home.mur(&["token", &session]);
    assert_eq!((public.status, public.stdout.as_str()), (1, ""));
    assert_eq!(
        public.stderr,
        format!(
            "error[E-RUN-048]: {session} has a public door: its capsule declares no network.authentication, so it minted no token\n  hint: anyone who can reach its address may call it without one; declare network.authentication (scheme: bearer) in its manifest to have the next run mint a token\n"
        )
    );
    // @1, the default, is the same session here.
    assert_eq!(home.mur(&["token"]).stderr, public.stderr);
    // No such session: what every client command says.
    let none = home.mur(&["token", "abcd1234"]);
    assert_eq!((none.status, none.stdout.as_str()), (1, ""));
    assert!(
        none.stderr
            .starts_with("error[E-RUN-022]: no running session matches abcd1234"),
        "{}",
        none.stderr
    );
    assert_eq!(none.stderr, home.mur(&["stop", "abcd1234"]).stderr);
    drop(live);
}

#[test]
fn a_public_door_beyond_loopback_is_refused_unless_open_door_opens_it() {
    let capsule = Capsule::new("door-bind", &manifest(""), ANSWER);
    let workdir = scratch("door-bind-work").join("w");
    let refused = finish(
        mur()
            .args(["run", "--bind", "0.0.0.0", "--port", "0", "--manifest"])
            .arg(capsule.manifest())
            .arg("--workdir")
            .arg(&workdir)
            .args(["--task", "hi"]),
    );
    assert_eq!((refused.status, refused.stdout.as_str()), (1, ""));
    assert_eq!(
        refused.stderr,
        "error[E-RUN-064]: --bind 0.0.0.0 would open this capsule's door to anyone who can reach that address, and its manifest declares no network.authentication\n  hint: declare network.authentication (scheme: bearer) to have the door ask for a token that mur token prints, or pass --open-door to open it anyway\n"
    );
    assert!(!workdir.exists(), "nothing is made before the refusal");
    let v6 = finish(
        mur()
            .args(["run", "--bind", "::", "--json", "--manifest"])
            .arg(capsule.manifest())
            .args(["--task", "hi"]),
    );
    assert!(
        v6.stderr
            .starts_with("error[E-RUN-064]: --bind :: would open"),
        "{}",
        v6.stderr
    );

    let opened = finish(
        mur()
            .args(["run", "--bind", "0.0.0.0", "--open-door", "--port", "0"])
            .arg("--manifest")
            .arg(capsule.manifest())
            .args(["--task", "hi"]),
    );
    opened.assert_ok();
    let lines: Vec<&str> = opened.stdout.lines().collect();
    let port = lines[0]
        .strip_prefix("murmur: url localhost:")
        .unwrap_or_else(|| panic!("{}", opened.stdout));
    assert!(lines[1].starts_with("session: ses_"), "{}", opened.stdout);
    assert_eq!(
        lines[2],
        format!(
            "door:    open to anyone who can reach 0.0.0.0:{port} (--open-door): no token is asked"
        )
    );
    assert_eq!(lines[3..], ["Hello back.", "status:  ok"]);

    // On loopback a public door keeps its two launch lines.
    let local = finish(
        mur()
            .args(["run", "--port", "0", "--manifest"])
            .arg(capsule.manifest())
            .args(["--task", "hi"]),
    );
    local.assert_ok();
    let lines: Vec<&str> = local.stdout.lines().collect();
    assert!(lines[1].starts_with("session: ses_"));
    assert_eq!(lines[2..], ["Hello back.", "status:  ok"]);
}

#[test]
fn an_authenticated_door_opens_beyond_loopback_and_never_prints_its_token() {
    let home = Home::new("door-wide");
    let capsule = Capsule::new("door-wide", &manifest(BEARER), ANSWER);
    let run = home.mur(&[
        "run",
        "--bind",
        "0.0.0.0",
        "--port",
        "0",
        "-v",
        "--manifest",
        capsule.manifest().to_str().unwrap(),
        "--task",
        "hi",
    ]);
    run.assert_ok();
    let lines: Vec<&str> = run.stdout.lines().collect();
    let session = lines[1].strip_prefix("session: ").expect("session line");
    assert_eq!(
        lines[2],
        format!("door:    bearer token (mur token {session} prints it)")
    );
    assert!(lines[3].starts_with("workdir: "), "{}", run.stdout);
    assert_eq!(lines[lines.len() - 2..], ["Hello back.", "status:  ok"]);
    // A token is `mur_` and 64 hex digits: nothing mur wrote or printed holds one, not
    // its output, not a file of the capsule's workdir or records (its trace and logs).
    assert!(!minted(&run.stdout), "{}", run.stdout);
    assert!(!minted(&run.stderr), "{}", run.stderr);
    let files = files_under(&capsule.dir);
    for name in ["trace.jsonl", "bootstrap.log"] {
        assert!(
            files.iter().any(|f| f.ends_with(name)),
            "no {name} among {files:?}"
        );
    }
    for file in &files {
        let text = String::from_utf8_lossy(&std::fs::read(file).unwrap()).into_owned();
        assert!(!minted(&text), "{} holds a token", file.display());
    }

    // --json says which door it is, and the launch line still holds no token.
    let json = capsule.run(&[]);
    json.assert_ok();
    assert_eq!(json.launch()["door"], "bearer");
    assert_eq!(json.stdout.lines().count(), 1);
    assert!(!minted(&json.stdout));
}

/// Whether `text` holds what looks like a minted token.
fn minted(text: &str) -> bool {
    text.match_indices("mur_").any(|(at, _)| {
        let end = (at + 68).min(text.len());
        text.get(at..end)
            .is_some_and(|candidate| is_minted(candidate, "mur_", 64))
    })
}

/// Every file under `dir`, however deep.
fn files_under(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for item in std::fs::read_dir(dir).unwrap().flatten() {
        let path = item.path();
        let kind = item.file_type().unwrap();
        if kind.is_dir() {
            out.extend(files_under(&path));
        } else if kind.is_file() {
            out.push(path);
        }
    }
    out
}

#[test]
fn in_a_browser_the_page_asks_for_the_token_and_works_with_it() {
    let Some(browser) = Browser::get() else {
        return;
    };
    let home = Home::new("door-browser");
    let (_capsule, live, session) = queued(&home, "door-browser", BEARER);
    let token = home.token(&session);
    let seen = browser.scenario(
        "door",
        &[&format!("{}/", live.at.url())],
        &[("MUR_CAPSULE_TOKEN", token.as_str())],
    );
    assert_eq!(seen["askedFor"], "Capsule token");
    assert_eq!(
        seen["hint"],
        "This capsule is behind a token: paste the one its owner was given (for a capsule mur run started, mur token SESSION prints it)."
    );
    assert_eq!(seen["connBeforeToken"], "down");
    assert_eq!(seen["title"], "guarded");
    let tasks = seen["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{seen:#}");
    assert_eq!(tasks[0]["replies"], json!(["Hello back."]));
    assert_eq!(seen["askedAfterReload"], false);
    let console: Vec<&str> = seen["console"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|line| !line.contains("401"))
        .collect();
    assert!(console.is_empty(), "{console:?}");
}

#[test]
fn bad_network_authentication_is_a_manifest_error() {
    let cases = [
        (
            "network:\n  authentication:\n    scheme: Bearer\n",
            "error[E-MAN-003]: murmur.yaml:9: invalid network config for 'network.authentication.scheme': 'Bearer' is not a door authentication scheme; the schemes are: bearer\n  hint: write 'scheme: bearer': callers then present the token mur token prints, as Authorization: Bearer <token>\n",
        ),
        (
            "network:\n  authentication: {}\n",
            "error[E-MAN-003]: murmur.yaml:8: invalid network config for 'network.authentication.scheme': is required; the schemes are: bearer\n  hint: write 'scheme: bearer': callers then present the token mur token prints, as Authorization: Bearer <token>\n",
        ),
        (
            "network:\n  authentication:\n    scheme: bearer\n    credentials:\n      watcher:\n        scopes: [GetTask, murmur.WatchSession]\n",
            "error[E-MAN-003]: murmur.yaml:10: invalid network config for 'network.authentication.credentials': declares 'watcher', but this mur mints one operator token, which holds every scope, and no credential beside it\n  hint: remove 'credentials' and hand out the operator token (mur token SESSION prints it), or host the capsule under mur serve, which gives each capsule a token of its own\n",
        ),
        (
            "network:\n  authentication:\n    scheme: bearer\n    credentials:\n      operator:\n        scopes: [GetTask]\n",
            "error[E-MAN-003]: murmur.yaml:11: invalid network config for 'network.authentication.credentials': 'operator' is reserved: the runtime always mints the operator token, which holds every scope\n",
        ),
    ];
    for (extra, want) in cases {
        let capsule = Capsule::new("door-manifest", &manifest(extra), ANSWER);
        let run = finish(
            mur()
                .args(["run", "--manifest"])
                .arg(capsule.manifest())
                .args(["--task", "hi"]),
        );
        assert_eq!(run.status, 1, "{extra}");
        assert_eq!(run.stdout, "");
        assert_eq!(run.stderr, want, "{extra}");
    }
}
