//! The live web view: `GET` with `Accept: text/html` on a capsule's address (and on
//! `mur serve`'s root) serves one self-contained page; every other request keeps its
//! answer. Then the page itself, in headless Chromium against real capsules: a task's
//! streamed text and its tool's artifact appear, answering input-required resumes the
//! task, cancel cancels, a dropped connection and a reload replay without duplicates,
//! and `mur serve`'s list is behind the admin token.

use serde_json::{Value, json};

use crate::common::browser::{self, Browser};
use crate::common::served::{Reply, Served};
use crate::common::*;

const PAGE_HTML: &str = include_str!("../../host/src/webview/page.html");
const PAGE_JS: &str = include_str!("../../host/src/webview/page.js");
const PAGE_CSS: &str = include_str!("../../host/src/webview/page.css");
/// What Chromium sends when it navigates.
const BROWSER_ACCEPT: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,image/apng,*/*;q=0.8";

/// A capsule with the `ask` tool, whose scripted model asks and streams its reply (the
/// first task), asks and answers (the second), and asks a third time (the third task,
/// which the browser test cancels).
fn capsule(name: &str) -> Capsule {
    let manifest = format!(
        r#"name: web-view-demo
version: "0.1.0"
artifacts:
  - name: ask
    runtime: tool
    source: {ask}
inference:
  driver: scripted
  script: ./script.yaml
  model: scripted-test
"#,
        ask = guest(MUR_TOOL_ASK).display(),
    );
    let script = r#"turns:
  - tool_calls: [{id: call_1, name: ask, input: {prompt: "Which file should I read?"}}]
  - chunks: ["README.md ", "describes ", "the build."]
  - tool_calls: [{id: call_2, name: ask, input: {prompt: "Anything else?"}}]
  - text: "Noted."
  - tool_calls: [{id: call_3, name: ask, input: {prompt: "Cancel me?"}}]
  - text: "not reached: the task is canceled"
"#;
    Capsule::new(name, &manifest, script)
}

fn get(address: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    Reply::parse(&exchange(
        address,
        &raw_request(address, "GET", path, headers, ""),
    ))
}

/// The page's answer, checked to the header: HTML, the policy that admits only its own
/// inline style and script, no sniffing, revalidated by its ETag.
fn assert_page(reply: &Reply, view: &str) {
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(
        reply.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let policy = reply.header("content-security-policy").unwrap();
    assert!(
        policy.starts_with("default-src 'none'; script-src 'sha256-"),
        "{policy}"
    );
    for part in [
        "style-src 'sha256-",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ] {
        assert!(policy.contains(part), "{part} not in {policy}");
    }
    assert!(!policy.contains("unsafe"), "{policy}");
    assert_eq!(reply.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(reply.header("cache-control"), Some("no-cache"));
    assert_eq!(reply.header("vary"), Some("accept"));
    assert!(reply.header("etag").is_some_and(|e| e.starts_with('"')));
    assert_eq!(
        reply.header("content-length"),
        Some(reply.body.len().to_string().as_str())
    );
    // The bytes are the embedded files: the HTML around the style and the script.
    let expected = PAGE_HTML
        .replace("{{view}}", view)
        .replace("{{style}}", PAGE_CSS)
        .replace("{{script}}", PAGE_JS);
    assert_eq!(reply.body, expected);
    assert!(!reply.body.contains("http://") && !reply.body.contains("https://"));
}

#[test]
fn mur_run_serves_the_page_to_a_browser_and_every_other_request_as_before() {
    let capsule = capsule("webview-run-route");
    let running = capsule.spawn(QUEUE);
    let address = running.address.as_str();

    let page = get(address, "/", &[("accept", BROWSER_ACCEPT)]);
    assert_page(&page, "capsule");
    assert_page(&get(address, "/", &[("accept", "text/html")]), "capsule");

    // A browser that holds the page is told so.
    let etag = page.header("etag").unwrap();
    let held = get(
        address,
        "/",
        &[("accept", "text/html"), ("if-none-match", etag)],
    );
    assert_eq!(held.status, 304, "{held:?}");
    assert!(held.body.is_empty());

    // Other GETs: the plain 404 they always had.
    for accept in [
        None,
        Some("*/*"),
        Some("application/json"),
        Some("text/html;q=0"),
    ] {
        let headers: Vec<(&str, &str)> = accept.map(|a| ("accept", a)).into_iter().collect();
        let reply = get(address, "/", &headers);
        assert_eq!(
            reply.head, "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close",
            "accept {accept:?}"
        );
    }
    let elsewhere = get(address, "/index.html", &[("accept", "text/html")]);
    assert_eq!(elsewhere.status, 404);
    // The agent card stays JSON, whatever the browser accepts.
    let card = get(
        address,
        "/.well-known/agent-card.json",
        &[("accept", BROWSER_ACCEPT)],
    );
    assert_eq!(card.status, 200);
    assert_eq!(card.header("content-type"), Some("application/json"));
    assert_eq!(card.json()["name"], "web-view-demo");

    // POST is unchanged: a stream/watch from a client that accepts HTML is a stream.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "stream/watch", "params": {}});
    let mut socket = post(
        address,
        &[
            ("content-type", "application/json"),
            ("accept", "text/html"),
        ],
        &body.to_string(),
    );
    let mut head = vec![0u8; SSE_HEAD.len()];
    std::io::Read::read_exact(&mut socket, &mut head).unwrap();
    assert_eq!(String::from_utf8(head).unwrap(), SSE_HEAD);
    let cancel =
        json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/cancel", "params": {"id": "tsk_none"}});
    let reply = read_to_close(post(
        address,
        &[
            ("content-type", "application/json"),
            ("accept", "text/html"),
        ],
        &cancel.to_string(),
    ));
    assert_eq!(
        serde_json::from_str::<Value>(json_body(&reply)).unwrap()["error"]["code"],
        -32001
    );
}

#[test]
fn mur_serve_serves_the_page_at_a_capsule_and_the_list_at_its_root_without_capsule_data() {
    let served = Served::start("webview-serve-route");
    let hosted = served.create_scripted("webview-hosted", "turns:\n  - text: hi\n");
    assert!(hosted.token.is_some(), "created with a token of its own");
    let address = served.address.as_str();

    // The capsule's page needs no token: it holds no data and asks for the token.
    let page = get(address, &hosted.path, &[("accept", BROWSER_ACCEPT)]);
    assert_page(&page, "capsule");
    assert!(!page.body.contains(&hosted.id));
    // Without HTML, the address still wants its token; a POST without it is refused.
    assert_eq!(get(address, &hosted.path, &[("accept", "*/*")]).status, 401);
    let watch = json!({"jsonrpc": "2.0", "id": 1, "method": "stream/watch", "params": {}});
    let refused = hosted.call_as(Some("Bearer wrong"), &watch.to_string());
    assert_eq!(refused.status, 401);
    // An unknown capsule has no page.
    let unknown = get(
        address,
        "/c/cap_00000000000000000000000000000000/",
        &[("accept", "text/html")],
    );
    assert_eq!(unknown.status, 404, "{unknown:?}");

    // The root lists the capsules, through the admin API and its token.
    let root = get(address, "/", &[("accept", BROWSER_ACCEPT)]);
    assert_page(&root, "fleet");
    assert!(!root.body.contains(&hosted.id));
    assert_eq!(get(address, "/", &[("accept", "*/*")]).status, 404);
    let admin = get(address, "/admin/capsules", &[("accept", "text/html")]);
    assert_eq!(
        admin.status, 401,
        "the admin API is not the page: {admin:?}"
    );
    assert_eq!(
        get(address, "/healthz", &[("accept", "text/html")]).body,
        "ok\n"
    );
}

#[test]
fn in_a_browser_tasks_stream_ask_resume_cancel_and_replay() {
    let Some(browser) = Browser::get() else {
        return;
    };
    let capsule = capsule("webview-browser");
    // Heartbeats every 200 ms: the page reads past them throughout.
    let running = capsule.spawn_env(QUEUE, &[("MUR_HEARTBEAT_MS", "200")]);
    let url = format!("http://{}/", running.address);
    let shot = browser::output("web-view.png");
    let _ = std::fs::remove_file(&shot);
    let seen = browser.scenario("capsule", &[&url, shot.to_str().unwrap()], &[]);
    let seen = &seen;

    assert_eq!(seen["title"], "web-view-demo");
    assert_eq!(seen["askedState"], "input-required");
    assert!(
        seen["csp"]
            .as_str()
            .unwrap()
            .starts_with("default-src 'none'"),
        "{seen}"
    );
    assert_eq!(seen["console"], json!([]), "no errors, no CSP violations");

    // The answered task: its tool's artifact carries the answer, then the streamed reply.
    let first = &seen["afterAnswer"][0];
    assert_eq!(first["state"], "completed", "{seen:#}");
    assert_eq!(first["tools"].as_array().unwrap().len(), 1, "{first:#}");
    assert_eq!(first["tools"][0]["name"], "ask");
    assert_eq!(
        first["tools"][0]["content"],
        "<untrusted-content source=tool:ask>\nREADME.md\n</untrusted-content>"
    );
    assert_eq!(first["replies"], json!(["README.md describes the build."]));
    assert_eq!(first["asks"], json!(["Which file should I read?"]));
    assert_eq!(
        first["answerBoxes"], 0,
        "the answer box is gone once resumed"
    );
    assert_eq!(first["answered"], json!(["answered: README.md"]));
    assert_eq!(first["cancelVisible"], false);

    // The task answered after a reload: the page asked the capsule for its context.
    let second = &seen["afterReloadAnswer"][0];
    assert_eq!(second["state"], "completed", "{seen:#}");
    assert_eq!(second["asks"], json!(["Anything else?"]));
    assert_eq!(second["answered"], json!(["answered: Nothing, thanks"]));
    assert_eq!(second["replies"], json!(["Noted."]));
    assert_eq!(
        second["tools"][0]["content"],
        "<untrusted-content source=tool:ask>\nNothing, thanks\n</untrusted-content>"
    );

    // The canceled task, and what the capsule recorded of all three.
    let tasks = seen["afterCancel"].as_array().unwrap();
    assert_eq!(tasks.len(), 3, "{seen:#}");
    assert_eq!(tasks[0]["state"], "canceled");
    assert_eq!(tasks[0]["cancelVisible"], false);
    assert_eq!(tasks[0]["asks"], json!(["Cancel me?"]));
    assert_eq!(tasks[1], *second);
    let trace = running.session();
    let ends: Vec<String> = trace
        .events("task_end")
        .iter()
        .map(|e| e["exit_status"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(ends, ["ok", "ok", "canceled"], "what the capsule recorded");

    // Reconnecting shows nothing twice.
    assert_eq!(seen["lost"], "connection lost; retrying in 1 s");
    assert_eq!(seen["reconnected"], 1);
    assert_eq!(seen["afterDrop"], seen["afterCancel"], "{seen:#}");
    // A reload replays all three tasks, each frame once. A task's first `working`
    // frame (id 0), which a replay from 0 never holds (says the protocol), comes from
    // the A2A door's lossless cursor instead; only what this page answered (in no
    // frame) is missing.
    let reloaded = seen["afterReload"].as_array().unwrap();
    assert_eq!(reloaded.len(), 3, "{seen:#}");
    for (before, after) in tasks.iter().zip(reloaded) {
        for key in ["id", "state", "replies", "tools", "asks", "answerBoxes"] {
            assert_eq!(before[key], after[key], "{key} after reload: {seen:#}");
        }
        assert_eq!(after["answered"], json!([]));
    }
    let answered = json!([
        "status",
        "ask",
        "status",
        "tool",
        "status",
        "text",
        "status end"
    ]);
    assert_eq!(reloaded[2]["entries"], answered, "{seen:#}");
    assert_eq!(reloaded[1]["entries"], answered, "{seen:#}");
    assert_eq!(
        reloaded[0]["entries"],
        json!(["status", "ask", "status end"])
    );
    assert_eq!(reloaded[2]["firstEntry"], "turn 1", "{seen:#}");
    // Seen live, before any reload, the first task showed the same.
    assert_eq!(first["entries"], answered, "{seen:#}");
    assert_eq!(
        seen["dark"], "rgb(21, 22, 24)",
        "the dark scheme is followed"
    );
    let bytes = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(
        bytes > 10_000,
        "a screenshot of the page: {}",
        shot.display()
    );
}

#[test]
fn in_a_browser_a_replay_that_lost_frames_says_so_and_shows_what_is_left() {
    let Some(browser) = Browser::get() else {
        return;
    };
    // One reply of 600 chunks: with its status frames, more than the 512 frames the
    // replay buffer keeps, so a page that attaches afterwards gets a `gap` first.
    let chunks: Vec<String> = (0..600).map(|n| format!("c{n} ")).collect();
    let script = format!("turns:\n  - chunks: {}\n", json!(chunks));
    let capsule = Capsule::new(
        "webview-gap",
        "name: web-view-gap\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\n",
        &script,
    );
    let running = capsule.spawn(QUEUE);
    let finished = read_to_close(post(
        &running.address,
        &[("content-type", "application/json")],
        &message_stream_body("go"),
    ));
    assert!(finished.contains("\"state\":\"completed\""), "{finished}");

    let url = format!("http://{}/", running.address);
    let seen = browser.scenario("gap", &[&url], &[]);
    let notice = seen["notice"].as_str().unwrap_or_default();
    assert!(
        notice.starts_with("Earlier frames may be gone") && notice.contains("oldest it has is id"),
        "{seen:#}"
    );
    let task = &seen["tasks"][0];
    assert_eq!(task["state"], "completed");
    // What is left of the reply: its last chunks, each once, ending with the last.
    let reply = task["replies"][0].as_str().unwrap();
    let all: String = chunks.concat();
    assert!(all.ends_with(reply) && reply.len() < all.len(), "{reply:?}");
    assert!(reply.ends_with("c599 "), "{reply:?}");
    assert_eq!(seen["console"], json!([]));
}

#[test]
fn in_a_browser_a_refused_task_is_said_beside_the_box() {
    let Some(browser) = Browser::get() else {
        return;
    };
    let capsule = capsule("webview-busy");
    let running = capsule.spawn(&[
        "--lifecycle-task-acceptance",
        "single",
        "--lifecycle-after-task",
        "sleep",
    ]);
    let url = format!("http://{}/", running.address);
    let seen = browser.scenario("busy", &[&url], &[]);
    assert_eq!(
        seen["note"], "not sent: task rejected: capsule is busy",
        "{seen:#}"
    );
    assert_eq!(seen["kept"], "Second", "the text stays to send again");
    let tasks = seen["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "a rejected task is not a task: {seen:#}");
    assert_eq!(tasks[0]["state"], "input-required");
    assert_eq!(seen["console"], json!([]));
}

#[test]
fn in_a_browser_the_serve_list_wants_the_admin_token_and_a_capsule_its_own() {
    let Some(browser) = Browser::get() else {
        return;
    };
    let served = Served::start("webview-serve-browser");
    let hosted = served.create_scripted("webview-listed", "turns:\n  - text: hi\n");
    let url = format!("http://{}/", served.address);
    let shot = browser::output("web-view-serve.png");
    let seen = browser.scenario(
        "fleet",
        &[&url, shot.to_str().unwrap()],
        &[
            ("MUR_ADMIN_TOKEN", served.admin_token.as_str()),
            ("MUR_CAPSULE_TOKEN", hosted.token.as_deref().unwrap()),
        ],
    );
    assert_eq!(seen["askedFor"], "Admin token");
    assert_eq!(seen["listedBeforeToken"], 0);
    assert_eq!(seen["listedWithWrongToken"], 0);
    assert_eq!(
        seen["links"],
        json!([{"text": "webview-listed", "href": hosted.path}]),
        "{seen:#}"
    );
    assert_eq!(seen["askedAfterReload"], false);
    assert_eq!(seen["capsuleAskedFor"], "Capsule token");
    assert_eq!(seen["capsuleConnBeforeToken"], "down");
    assert_eq!(seen["capsuleTitle"], "webview-listed");
    // A refused token logs the browser's own 401 line; nothing else may appear.
    let console: Vec<&str> = seen["console"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|line| !line.contains("401"))
        .collect();
    assert!(console.is_empty(), "{console:?}");
}
