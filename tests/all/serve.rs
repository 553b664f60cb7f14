//! `mur serve` end to end: the real binary hosting real capsules on 127.0.0.1, driven
//! the way an operator and the capsules' users drive it (the admin API, each capsule's
//! address with its token, signals, `mur watch` and `mur stop`), and checked on what
//! they see: statuses, exact bodies and frames, files on disk, exit codes.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::mock_model::{
    MockModel, Reply as ModelReply, assert_carried, openai, roles_texts,
};
use crate::common::served::{Create, Reply, Served, WATCH, scripted};
use crate::common::sse_frames::{Frame, labels, one_call_task};
use crate::common::*;

/// The bound on any one wait here: what the capsules do takes seconds.
const WAIT: Duration = Duration::from_secs(60);

/// How long what happens at once may take: a replay (written as a watch attaches), a
/// watch ending as its capsule goes.
const AT_ONCE: Duration = Duration::from_secs(15);

/// The body of every refused token, admin or capsule.
const UNAUTHORIZED: &str =
    r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Unauthorized"}}"#;

/// The whole head of every refused token.
const UNAUTHORIZED_HEAD: &str = "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\nwww-authenticate: Bearer\r\ncontent-length: 76\r\nconnection: close";

/// A script of one bash call, then an answer.
fn bash_then(command: &str, answer: &str) -> String {
    format!("turns:\n{}{}", bash_turn(command), text_turn(answer))
}

/// The result of a bash call as the model receives it (and the artifact frame shows).
fn bash_result(command: &str, stdout: &str) -> String {
    format!(
        "<untrusted-content source=tool:bash>\n$ {command}\nExit code: 0\nStdout:\n{stdout}\n\nStderr:\n\n</untrusted-content>"
    )
}

/// The exact bytes of a final status frame.
fn final_block(
    id: u64,
    task: &Frame,
    state: &str,
    message: &str,
    response: Option<&str>,
) -> String {
    let mut status = json!({"state": state, "message": message});
    if let Some(response) = response {
        status["response"] = json!(response);
    }
    let data = json!({
        "id": task.task(),
        "context_id": task.data["context_id"],
        "status": status,
        "final": true,
    });
    format!("id: {id}\nevent: status\ndata: {data}")
}

/// The last frame, which must be a final status.
fn last(frames: &[Frame]) -> &Frame {
    let f = frames.last().expect("frames");
    assert!(f.is_final(), "the last frame is not final: {frames:#?}");
    f
}

/// The one refusal of a wrong or missing token, admin or capsule, to the byte.
fn assert_unauthorized(reply: &Reply, what: &str) {
    assert_eq!(
        (reply.head.as_str(), reply.body.as_str()),
        (UNAUTHORIZED_HEAD, UNAUTHORIZED),
        "{what}"
    );
}

/// An admin error: the status and `{"error": {"code", "message", "hint"}}`.
fn assert_admin_error(reply: &Reply, status: u16, code: &str, message: &str) {
    assert_eq!(reply.status, status, "{reply:?}");
    assert_eq!(reply.header("content-type"), Some("application/json"));
    let body = reply.json();
    assert_eq!(body["error"]["code"], code, "{body}");
    assert_eq!(body["error"]["message"], message, "{body}");
    assert!(
        body["error"]["hint"]
            .as_str()
            .is_some_and(|h| !h.is_empty()),
        "an admin error says what to do: {body}"
    );
    assert_eq!(
        body.as_object().unwrap().len() + body["error"].as_object().unwrap().len(),
        4,
        "nothing but error.code, error.message and error.hint: {body}"
    );
}

fn keys(v: &Value) -> Vec<String> {
    let mut keys: Vec<String> = v.as_object().expect("an object").keys().cloned().collect();
    keys.sort();
    keys
}

fn sorted(keys: &[&str]) -> Vec<String> {
    let mut keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    keys.sort();
    keys
}

/// The capsule `id` in a list.
fn listed<'a>(list: &'a [Value], id: &str) -> &'a Value {
    list.iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("{id} is not listed: {list:#?}"))
}

// ---------------------------------------------------------------------------------
// 1. An operator session.

/// Create two capsules from YAML, talk to each with its token, list them, look at
/// one, stop and start one, delete one with its workdir and one without.
#[test]
fn an_operator_creates_talks_to_lists_stops_and_deletes_capsules() {
    let mut served = Served::start("serve-operator");
    let note = |name: &str| format!("echo {name} > note.txt; cat note.txt");
    let alpha_yaml = scripted(
        "alpha",
        &bash_then(&note("alpha"), "alpha wrote its note"),
        "",
    );
    let beta_yaml = scripted("beta", &bash_then(&note("beta"), "beta wrote its note"), "");

    // One in JSON, one as a bare YAML body.
    let alpha = served.create(&Create::yaml(&alpha_yaml));
    let admin = format!("Bearer {}", served.admin_token);
    let beta = served.hosted(&served.request(
        "POST",
        "/admin/capsules",
        &[
            ("authorization", &admin),
            ("content-type", "application/yaml"),
        ],
        &beta_yaml,
    ));
    for hosted in [&alpha, &beta] {
        let id = hosted.id.as_str();
        assert!(is_minted(id, "cap_", 32), "{id}");
        assert_eq!(
            keys(&hosted.created),
            sorted(&["id", "address", "path", "token", "state", "workdir"])
        );
        assert_eq!(hosted.url, format!("{}/c/{id}/", served.url()));
        assert_eq!(hosted.path, format!("/c/{id}/"));
        let token = hosted.token.as_deref().unwrap();
        assert!(is_minted(token, "mur_", 64), "{token}");
        assert_eq!(hosted.created["state"], "idle");
        assert_eq!(hosted.workdir, served.capsule_dir(id).join("work"));
        assert!(hosted.workdir.is_dir());
    }
    assert_ne!(alpha.token, beta.token);
    // The admin token: made on the first start, owner-only, 64 hex characters.
    let token_file = served.data.join("admin-token");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&token_file).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    assert!(
        served.admin_token.len() == 64 && served.admin_token.bytes().all(|b| b.is_ascii_hexdigit()),
        "{}",
        served.admin_token
    );
    // The YAML it was sent is kept beside its entry.
    assert_eq!(
        std::fs::read_to_string(served.capsule_dir(&alpha.id).join("murmur.yaml")).unwrap(),
        alpha_yaml
    );

    // Each answers at its own address, in its own workdir.
    for (hosted, name) in [(&alpha, "alpha"), (&beta, "beta")] {
        let frames = hosted.message("write your note");
        assert_eq!(labels(&frames), one_call_task(), "{frames:#?}");
        assert_eq!(
            frames[1].data["artifact"]["content"],
            bash_result(&note(name), name)
        );
        let answer = format!("{name} wrote its note");
        assert_eq!(
            last(&frames).block,
            final_block(3, &frames[0], "completed", "session ended", Some(&answer))
        );
        assert_eq!(
            std::fs::read_to_string(hosted.workdir.join("note.txt")).unwrap(),
            format!("{name}\n")
        );
    }

    let list = served.list();
    assert_eq!(list.len(), 2, "{list:#?}");
    assert_eq!(
        (&list[0]["id"], &list[1]["id"]),
        (&json!(alpha.id), &json!(beta.id))
    );
    for (hosted, name) in [(&alpha, "alpha"), (&beta, "beta")] {
        let c = listed(&list, &hosted.id);
        assert_eq!(
            keys(c),
            sorted(&[
                "id",
                "name",
                "state",
                "tasks_run",
                "memory_bytes",
                "cpu",
                "address",
                "created_at"
            ])
        );
        assert_eq!(
            (&c["name"], &c["state"], &c["tasks_run"], &c["address"]),
            (&json!(name), &json!("idle"), &json!(1), &json!(hosted.url))
        );
        assert!(c["memory_bytes"].as_u64().unwrap() > 0, "{c}");
    }

    let one = served.capsule(&alpha.id);
    for key in ["id", "name", "state", "tasks_run", "address", "created_at"] {
        assert_eq!(one[key], listed(&list, &alpha.id)[key], "{key}");
    }
    assert!(
        is_minted(one["session_id"].as_str().unwrap(), "ses_", 32),
        "{one}"
    );
    assert_eq!(one["workdir"], json!(alpha.workdir));
    assert_eq!(
        one["limits"],
        json!({
            "memory_bytes": null,
            "connections": null,
            "queued_tasks": null,
            "cpu": null,
            "tokens_per_day": null
        })
    );
    assert_eq!(one["open"], false);

    // Stopped, beta keeps its place; its address refuses, as JSON-RPC; a watch on it
    // is closed, as a `mur run` capsule's is when its process exits (no
    // `capsule-closed`).
    let mut watch = beta.watch(None);
    let stopped = served.stop(&beta.id);
    assert_eq!(stopped.status, 200, "{stopped:?}");
    assert_eq!(stopped.json()["state"], "stopped");
    let watched = watch.rest(AT_ONCE);
    assert_eq!(watched[0].event, "connection-ack");
    assert!(
        watched.iter().all(|f| f.event != "capsule-closed"),
        "{watched:#?}"
    );
    Reply::assert_refused(
        &beta.call(&[], &message_stream_body("are you there?")),
        "503 Service Unavailable",
        &format!("capsule {} is stopped", beta.id),
    );
    assert_eq!(listed(&served.list(), &beta.id)["state"], "stopped");

    // Started again, it takes tasks again, in the same workdir.
    let started = served.start_capsule(&beta.id);
    assert_eq!(started.status, 200, "{started:?}");
    assert_eq!(started.json()["state"], "idle");
    let again = beta.message("write your note again");
    assert_eq!(last(&again).state(), "completed", "{again:#?}");
    assert_eq!(listed(&served.list(), &beta.id)["tasks_run"], 2);

    // Deleted with ?workdir=remove: its folder is gone, its address and id unknown.
    let deleted = served.delete(&alpha.id, "?workdir=remove");
    assert_eq!(deleted.status, 200, "{deleted:?}");
    assert_eq!(
        deleted.json(),
        json!({"id": alpha.id, "deleted": true, "workdir": "removed"})
    );
    assert!(!served.capsule_dir(&alpha.id).exists());
    let gone = alpha.call(&[], &message_stream_body("hello?"));
    assert_eq!(
        (gone.head.as_str(), gone.body.as_str()),
        (
            "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close",
            ""
        ),
    );
    assert_admin_error(
        &served.admin("GET", &format!("/admin/capsules/{}", alpha.id), None),
        404,
        "E-SERVE-012",
        &format!("no capsule {} on this server", alpha.id),
    );

    // Deleted with ?workdir=keep: the workdir stays, the capsule is gone from the list
    // and does not come back on a restart.
    let kept = served.delete(&beta.id, "?workdir=keep");
    assert_eq!(kept.status, 200, "{kept:?}");
    assert_eq!(
        kept.json(),
        json!({"id": beta.id, "deleted": true, "workdir": "kept"})
    );
    assert_eq!(
        std::fs::read_to_string(beta.workdir.join("note.txt")).unwrap(),
        "beta\n"
    );
    assert_eq!(served.list(), Vec::<Value>::new());
    let admin_token = served.admin_token.clone();
    served.restart();
    assert_eq!(
        served.admin_token, admin_token,
        "the admin token outlives a restart"
    );
    assert_eq!(served.launch["capsules"], 0, "{}", served.launch);
    assert_eq!(served.list(), Vec::<Value>::new());
    assert_eq!(
        std::fs::read_to_string(beta.workdir.join("note.txt")).unwrap(),
        "beta\n"
    );
}

// ---------------------------------------------------------------------------------
// 2. Tenants.

/// A capsule's token opens its own address and no other; a refused request looks
/// the same whatever was wrong with it; admin routes take no capsule token.
#[test]
fn a_token_opens_its_own_capsule_only_and_every_refusal_is_alike() {
    let served = Served::start("serve-tokens");
    let a = served.create_scripted("tenant-a", "turns:\n  - text: a\n");
    let b = served.create_scripted("tenant-b", "turns:\n  - text: b\n");
    let (a_token, b_token) = (a.token.clone().unwrap(), b.token.clone().unwrap());
    let body = message_stream_body("let me in");
    let wrong = [
        Some(format!("Bearer {a_token}")),
        None,
        Some(format!("Basic {b_token}")),
        Some(b_token.clone()),
        Some(format!("Bearer {b_token}x")),
        Some(format!("Bearer {}", &b_token[..b_token.len() - 1])),
        Some("Bearer ".to_string()),
        Some(format!("Bearer {}", served.admin_token)),
    ];
    for authorization in &wrong {
        let reply = b.call_as(authorization.as_deref(), &body);
        assert_unauthorized(&reply, &format!("{authorization:?}"));
    }
    // The token check comes before anything else is read: a GET is refused alike;
    // with the token, it is the seed's 404, as is any other path under /c/.
    let get = served.request("GET", &b.path, &[], "");
    let bearer = b.bearer().unwrap();
    let not_found = "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close";
    for path in [
        b.path.clone(),
        b.path.trim_end_matches('/').to_string(),
        format!("{}x", b.path),
    ] {
        let reply = served.request("GET", &path, &[("authorization", &bearer)], "");
        assert_eq!(
            (reply.head.as_str(), reply.body.as_str()),
            (not_found, ""),
            "{path}"
        );
    }
    assert_unauthorized(&get, "a GET without the token");
    // Its own token (the scheme in any case) gets in.
    let frames = b.message("hello");
    assert_eq!(last(&frames).data["status"]["response"], "b");
    let lower = b.call_as(Some(&format!("bearer {b_token}")), &body);
    assert_eq!(lower.status, 200, "{lower:?}");

    for (method, path) in [
        ("GET", "/admin/capsules".to_string()),
        ("GET", format!("/admin/capsules/{}", a.id)),
        ("POST", format!("/admin/capsules/{}/stop", a.id)),
        ("DELETE", format!("/admin/capsules/{}", b.id)),
        ("GET", "/admin/nowhere".to_string()),
    ] {
        let tokens = [&a_token, &b_token].map(|t| Some(format!("Bearer {t}")));
        for auth in tokens.into_iter().chain([None]) {
            let headers: Vec<(&str, &str)> =
                auth.iter().map(|a| ("authorization", a.as_str())).collect();
            let reply = served.request(method, &path, &headers, "");
            assert_unauthorized(&reply, &format!("{method} {path} as {auth:?}"));
        }
    }
    let create = served.request(
        "POST",
        "/admin/capsules",
        &[
            ("authorization", &format!("Bearer {a_token}")),
            ("content-type", "application/json"),
        ],
        &json!({"path": "/"}).to_string(),
    );
    assert_unauthorized(&create, "a create with a capsule's token");
    // An open capsule (created from a folder on the server) needs no token at all.
    let folder = scratch("tenant-open-folder");
    let manifest = scripted("tenant-open", "turns:\n  - text: open\n", "");
    std::fs::write(folder.join("murmur.yaml"), manifest).unwrap();
    let open = served.create(&Create::path(&folder).open());
    assert_eq!(open.created["token"], Value::Null);
    assert_eq!(served.capsule(&open.id)["open"], true);
    let reply = open.call_as(None, &body);
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(last(&reply.frames()).data["status"]["response"], "open");

    // Nothing the refused calls asked for happened.
    let list = served.list();
    assert_eq!(list.len(), 3);
    assert!(list.iter().all(|c| c["state"] == "idle"), "{list:#?}");
}

/// Two tenants on one server: B's watch sees B's frames only, and A's shell cannot
/// read B's workdir or records, by a relative path or an absolute one.
#[test]
fn a_tenant_sees_neither_the_frames_nor_the_files_of_another() {
    let served = Served::start("serve-tenants");
    let secret = format!("B-SECRET-{}-{}", std::process::id(), 7919 * 7);
    let b = served.create_scripted(
        "tenant-b",
        &bash_then(
            &format!("echo {secret} > secret.txt; cat secret.txt"),
            "stored",
        ),
    );
    let stored = b.message("store the secret");
    assert_eq!(
        stored[1].data["artifact"]["content"],
        bash_result(
            &format!("echo {secret} > secret.txt; cat secret.txt"),
            &secret
        )
    );
    let b_session = served.session_id(&b.id);
    let b_trace = served.records(&b.id).join(&b_session).join("trace.jsonl");
    assert!(b_trace.is_file());
    assert!(b.workdir.join("secret.txt").is_file());

    // A tries every way to B's files; none of the commands names the secret itself.
    let reads = [
        format!("cat ../../{}/work/secret.txt", b.id),
        format!("cat {}", b.workdir.join("secret.txt").display()),
        format!("cat {}", b_trace.display()),
        format!("ls {}", b.workdir.display()),
        format!("ls {}", served.data.join("capsules").display()),
        format!("grep -r B-SECRET {}", served.data.display()),
    ];
    let mut script = String::from("turns:\n  - tool_calls:\n");
    script.push_str(
        "      - {id: own, name: bash, input: {command: \"echo mine > own.txt; cat own.txt\"}}\n",
    );
    for (i, command) in reads.iter().enumerate() {
        script.push_str(&format!(
            "      - {{id: r{i}, name: bash, input: {{command: {}}}}}\n",
            json!(command)
        ));
    }
    script.push_str(&text_turn("tried"));
    let a = served.create_scripted("tenant-a", &script);

    let mut watch = b.watch(None);
    let ack = watch.frame(WAIT);
    assert_eq!(
        ack.block,
        "event: connection-ack\ndata: {\"role\":\"observer\",\"conversation_mode\":\"stateless\"}"
    );
    let a_frames = a.message("read your neighbour's secret");
    assert_eq!(last(&a_frames).state(), "completed", "{a_frames:#?}");
    let artifacts: Vec<&Value> = a_frames
        .iter()
        .filter(|f| f.event == "artifact")
        .map(|f| &f.data["artifact"])
        .collect();
    assert_eq!(artifacts.len(), 1 + reads.len(), "{a_frames:#?}");
    // A's shell runs: its own file is there for it.
    assert_eq!(
        artifacts[0]["content"],
        bash_result("echo mine > own.txt; cat own.txt", "mine")
    );
    for (artifact, command) in artifacts[1..].iter().zip(&reads) {
        let content = artifact["content"].as_str().unwrap();
        assert!(
            content.starts_with(&format!(
                "<untrusted-content source=tool:bash>\n$ {command}\n"
            )),
            "{content}"
        );
        assert_ne!(artifact["exit_code"], 0, "{command} succeeded: {content}");
    }
    for f in &a_frames {
        assert!(!f.block.contains(&secret), "A saw B's secret: {}", f.block);
    }
    // Nor did A's shell change anything of B's.
    assert_eq!(
        std::fs::read_to_string(b.workdir.join("secret.txt")).unwrap(),
        format!("{secret}\n")
    );

    // B's watch: the replay of B's task, then B's next task, and nothing of A's.
    let again = b.message("store it again");
    let b_task = again[0].task().to_string();
    let watched = watch.until(WAIT, |f| f.task() == b_task && f.is_final());
    let a_task = a_frames[0].task();
    let b_tasks = [stored[0].task(), b_task.as_str()];
    for f in &watched {
        assert!(
            b_tasks.contains(&f.task()),
            "a frame not of B's: {}",
            f.block
        );
        assert!(
            !f.block.contains(a_task) && !f.block.contains("tried"),
            "{}",
            f.block
        );
    }
    let live: Vec<&Frame> = watched.iter().filter(|f| f.task() == b_task).collect();
    assert_eq!(
        live.iter().map(|f| f.block.clone()).collect::<Vec<_>>(),
        again.iter().map(|f| f.block.clone()).collect::<Vec<_>>(),
        "B's watch sees B's task frame for frame"
    );
}

// ---------------------------------------------------------------------------------
// 3. A hostile tenant.

/// The deadline of the hostile capsules: long enough for a neighbour's task of a
/// second or so to finish well inside it on a loaded machine.
const HOSTILE_SECS: u64 = 8;

/// The `lifecycle` lines of a capsule that takes tasks and stays up after each.
const TAKES_TASKS: &str = "  task_acceptance: queue\n  after_task: sleep\n";

/// A manifest for the probe driver in `mode` (`spin`, `trap`), taking tasks.
fn probe_driver_yaml(name: &str, mode: &str, deadline: u64) -> String {
    driver_manifest(
        name,
        "probe-driver",
        MUR_DRIVER_PROBE,
        &format!("{{mode: {mode}}}"),
        &format!("  limits:\n    deadline_seconds: {deadline}\n"),
        TAKES_TASKS,
    )
}

/// A manifest run by the hostile session loop (its mode comes from the server's
/// `MUR_HOSTILE`, granted to this capsule alone).
fn hostile_loop_yaml(deadline: u64) -> String {
    let script = scratch("hostile-loop-script").join("script.yaml");
    std::fs::write(&script, "turns: []\n").unwrap();
    let artifacts = format!(
        "artifacts:\n  - name: hostile\n    runtime: loop\n    source: {}\n",
        guest(MUR_LOOP_HOSTILE).display()
    );
    let script = script.display().to_string();
    let manifest = hostile_loop_manifest("hostile-loop", &artifacts, &script, deadline);
    format!("{manifest}lifecycle:\n{TAKES_TASKS}")
}

/// A driver that spins, one that traps and a loop that sleeps in guest code each fail
/// their own task, while a neighbour's task runs to completion at the same time; the
/// server goes on serving all four.
#[test]
fn a_hostile_tenant_fails_its_own_task_and_its_neighbour_completes() {
    let served = Served::start_with("serve-hostile", &[], &[("MUR_HOSTILE", "sleep-in-run")]);
    let spinner = served.create(&Create::yaml(&probe_driver_yaml(
        "spinner",
        "spin",
        HOSTILE_SECS,
    )));
    let trapper = served.create(&Create::yaml(&probe_driver_yaml(
        "trapper",
        "trap",
        HOSTILE_SECS,
    )));
    let sleeper = served.create(&Create::yaml(&hostile_loop_yaml(HOSTILE_SECS)));
    let neighbour = served.create_scripted(
        "neighbour",
        &bash_then("sleep 1; echo neighbour", "the neighbour is done"),
    );

    let started = Instant::now();
    let mut spin = spinner.stream("spin");
    let mut trap = trapper.stream("trap");
    let mut sleep = sleeper.stream("sleep");
    // All three hostile tasks are under way before the neighbour's starts.
    let first = spin.frame(WAIT);
    assert_eq!(first.state(), "working");
    served.wait_for_event(&sleeper.id, "task_start", 0);
    assert_eq!(served.capsule(&spinner.id)["state"], "running");
    let frames = neighbour.message("work beside them");
    let neighbour_done = started.elapsed();
    assert_eq!(labels(&frames), one_call_task(), "{frames:#?}");
    assert_eq!(
        last(&frames).data["status"]["response"],
        "the neighbour is done"
    );
    // While the spinner still spins and the sleeper still sleeps.
    assert!(
        neighbour_done < Duration::from_secs(HOSTILE_SECS),
        "{neighbour_done:?}"
    );
    assert_eq!(served.capsule(&spinner.id)["state"], "running");
    assert_eq!(served.capsule(&sleeper.id)["state"], "running");
    assert_eq!(served.healthz().body, "ok\n");

    let spun = spin.rest(WAIT);
    assert_eq!(
        last(&spun).block,
        final_block(
            1,
            &first,
            "failed",
            &format!(
                "driver invocation failed: deadline exceeded: the component ran for more than {HOSTILE_SECS} s without returning"
            ),
            None
        )
    );
    assert!(started.elapsed() >= Duration::from_secs(HOSTILE_SECS));
    let trapped = trap.rest(WAIT);
    let message = last(&trapped).data["status"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(last(&trapped).state(), "failed", "{trapped:#?}");
    assert!(
        message.starts_with("driver invocation failed: wasm trap: "),
        "{message}"
    );
    let slept = sleep.rest(WAIT);
    assert_eq!(
        last(&slept).data["status"],
        json!({"state": "failed", "message": format!("deadline exceeded: the session loop ran for more than {HOSTILE_SECS} s on this task, not counting its tool and driver calls (capabilities.limits.deadline_seconds)")})
    );

    // The server serves on: all four are listed, the neighbour takes another task.
    assert_eq!(served.healthz().body, "ok\n");
    let list = served.list();
    assert_eq!(list.len(), 4, "{list:#?}");
    for hosted in [&spinner, &trapper, &neighbour] {
        let c = listed(&list, &hosted.id);
        assert_eq!(
            (&c["state"], &c["tasks_run"]),
            (&json!("idle"), &json!(1)),
            "{c}"
        );
    }
    // The sleeping loop's session ends at its deadline, as under `mur run`.
    let ended = served.until_state(&sleeper.id, AT_ONCE, |s| s == "ended");
    let reason = ended["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("session ended: deadline_reached: ") && reason.contains("deadline"),
        "{ended}"
    );
    let again = neighbour.message("once more");
    assert_eq!(last(&again).state(), "completed");
    let trapped_again = trapper.message("trap again");
    assert_eq!(last(&trapped_again).state(), "failed");
}

/// A manifest whose driver answers with `n` bytes of text.
fn big_reply_yaml(n: u64) -> String {
    driver_manifest(
        "big-reply",
        "flood-driver",
        MUR_DRIVER_FLOOD,
        &format!("{{mode: big, n: {n}}}"),
        "",
        TAKES_TASKS,
    )
}

/// `limits.memory_bytes` set at creation: 4 MiB fails the task of a driver that needs
/// 3 MiB more, while the same manifest without the ceiling completes; 1 MiB is too
/// little to start at all, and creation says so.
#[test]
fn a_memory_ceiling_fails_its_own_capsule_and_not_its_neighbour() {
    const N: u64 = 3 << 20;
    let served = Served::start("serve-memory");
    let yaml = big_reply_yaml(N);
    let small = served.create(&Create::yaml(&yaml).limits(json!({"memory_bytes": 4 << 20})));
    let free = served.create(&Create::yaml(&yaml));

    let failed = small.message("answer big");
    assert_eq!(
        last(&failed).block,
        final_block(
            1,
            &failed[0],
            "failed",
            "driver invocation failed: wasm trap: wasm `unreachable` instruction executed",
            None
        )
    );
    // Why is on record: the driver's allocator said so in its log.
    let session = served.session_id(&small.id);
    let log = log_file(
        &served
            .records(&small.id)
            .join(&session)
            .join("logs/driver.log"),
    );
    assert!(
        log.contains(&format!("memory allocation of {N} bytes failed")),
        "{log}"
    );
    let detail = served.capsule(&small.id);
    assert_eq!(detail["limits"]["memory_bytes"], 4 << 20);
    assert!(
        detail["memory_bytes"].as_u64().unwrap() <= 4 << 20,
        "{detail}"
    );

    let done = free.message("answer big");
    let answer = "b".repeat(N as usize);
    assert_eq!(
        last(&done).block,
        final_block(1, &done[0], "completed", "session ended", Some(&answer))
    );
}

/// `limits.memory_bytes` below what a capsule needs to start at all (1 MiB: its
/// session loop and driver take more): the operator is told so, naming memory, at
/// creation (400, nothing left behind) or in the capsule's `reason` once its start
/// failed; never a capsule that is listed and dead for no reason given.
#[test]
fn a_memory_ceiling_too_small_to_start_says_so() {
    let served = Served::start("serve-memory-tiny");
    let create = Create::yaml(&big_reply_yaml(1024)).limits(json!({"memory_bytes": 1 << 20}));
    // The capsule is created (a task could be sent at once); its loop cannot start
    // under the ceiling, and its state and reason say so.
    let hosted = served.create(&create);
    let why = served.until_state(&hosted.id, WAIT, |s| s == "ended")["reason"].clone();
    assert!(
        why.as_str()
            .is_some_and(|why| why.starts_with("session ended: failed: ")),
        "{why}"
    );
    assert!(
        why.as_str().is_some_and(|why| why.contains("memory")),
        "nothing says the memory ceiling stopped it: {why}"
    );
}

// ---------------------------------------------------------------------------------
// 4. Admin errors.

/// Every refusal of the admin API: its status and the code and message a user reads.
/// None of them leaves a capsule behind.
#[test]
fn admin_errors_name_what_was_wrong() {
    let served = Served::start("serve-admin-errors");
    let create = |body: Value| served.admin("POST", "/admin/capsules", Some(&body));

    // A manifest that is not YAML, and one that misses a field: each names its line.
    assert_admin_error(
        &create(json!({"manifest": "name: x\n  - [: bad"})),
        400,
        "E-MAN-002",
        "murmur.yaml:2: mapping values are not allowed in this context",
    );
    assert_admin_error(
        &create(
            json!({"manifest": "name: x\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  model: m\n"}),
        ),
        400,
        "E-MAN-001",
        "murmur.yaml:3: missing required field 'inference.script'",
    );
    let nowhere = scratch("serve-no-manifest");
    assert_admin_error(
        &create(json!({"path": nowhere})),
        400,
        "E-SERVE-011",
        &format!(
            "there is no manifest at {} on the server",
            nowhere.join("murmur.yaml").display()
        ),
    );
    let yaml = scripted("errors", "turns:\n  - text: ok\n", "");
    let reply = create(json!({"manifest": yaml, "color": "blue"}));
    assert_eq!(reply.status, 400, "{reply:?}");
    assert_eq!(reply.json()["error"]["code"], "E-SERVE-010");
    assert!(
        reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("the body is not a capsule request: unknown field `color`"),
        "{reply:?}"
    );
    assert_admin_error(
        &create(json!({"open": true})),
        400,
        "E-SERVE-010",
        "the body names no manifest, or two: give exactly one of \"manifest\" and \"path\"",
    );
    assert_admin_error(
        &create(json!({"manifest": yaml, "limits": {"connections": 0}})),
        400,
        "E-SERVE-010",
        "limits.connections is 0, which would refuse everything",
    );
    let reply = create(json!({"manifest": yaml, "limits": {"gpu": 1}}));
    assert_eq!(
        (reply.status, &reply.json()["error"]["code"]),
        (400, &json!("E-SERVE-010"))
    );
    let admin = format!("Bearer {}", served.admin_token);
    assert_admin_error(
        &served.request(
            "POST",
            "/admin/capsules",
            &[("authorization", &admin), ("content-type", "text/plain")],
            &json!({"manifest": yaml}).to_string(),
        ),
        415,
        "E-SERVE-010",
        "a capsule is created from application/json or application/yaml, not 'text/plain'",
    );
    let none = yaml.replace("task_acceptance: queue", "task_acceptance: none");
    assert_admin_error(
        &create(json!({"manifest": none})),
        400,
        "E-SERVE-017",
        "lifecycle.task_acceptance is none, so the capsule could take no task at its address",
    );

    // An id the server does not host, on every route that takes one.
    let unknown = "cap_0123456789abcdef0123456789abcdef";
    for (method, path) in [
        ("GET", format!("/admin/capsules/{unknown}")),
        ("POST", format!("/admin/capsules/{unknown}/stop")),
        ("POST", format!("/admin/capsules/{unknown}/start")),
        ("DELETE", format!("/admin/capsules/{unknown}")),
        ("GET", "/admin/capsules/not-an-id".to_string()),
    ] {
        let id = path.split('/').nth(3).unwrap();
        assert_admin_error(
            &served.admin(method, &path, None),
            404,
            "E-SERVE-012",
            &format!("no capsule {id} on this server"),
        );
    }
    assert_admin_error(
        &served.admin("GET", "/admin/pools", None),
        404,
        "E-SERVE-014",
        "no admin route /admin/pools",
    );
    assert_admin_error(
        &served.admin("PUT", "/admin/capsules", None),
        405,
        "E-SERVE-015",
        "PUT is not served on /admin/capsules",
    );

    // The admin token, wrong or missing: the same 401 as a capsule's.
    for auth in [
        vec![("authorization", "Bearer 0000")],
        vec![],
        vec![("authorization", admin.trim_start_matches("Bearer "))],
    ] {
        let reply = served.request("GET", "/admin/capsules", &auth, "");
        assert_unauthorized(&reply, &format!("{auth:?}"));
    }

    // Nothing was created by any of it.
    assert_eq!(served.list(), Vec::<Value>::new());
    assert_eq!(
        std::fs::read_dir(served.data.join("capsules"))
            .unwrap()
            .count(),
        0
    );

    // A capsule that runs cannot be started again; a delete takes only its options.
    let hosted = served.create(&Create::yaml(&yaml));
    assert_admin_error(
        &served.start_capsule(&hosted.id),
        409,
        "E-SERVE-016",
        &format!("capsule {} is already idle", hosted.id),
    );
    assert_admin_error(
        &served.delete(&hosted.id, "?workdir=shred"),
        400,
        "E-SERVE-010",
        "'?workdir=shred' is not a delete option",
    );
    assert_eq!(served.list().len(), 1);
}

/// `--max-capsules 1`: the second creation is refused until the first is deleted.
#[test]
fn the_capsule_ceiling_refuses_one_more() {
    let served = Served::start_with("serve-ceiling", &["--max-capsules", "1"], &[]);
    let yaml = scripted("ceiling", "turns:\n  - text: ok\n", "");
    let first = served.create(&Create::yaml(&yaml));
    assert_admin_error(
        &served.try_create(&Create::yaml(&yaml)),
        503,
        "E-SERVE-013",
        "the server hosts its ceiling of 1 capsules",
    );
    assert_eq!(served.list().len(), 1);
    let deleted = served.delete(&first.id, "");
    assert_eq!(deleted.status, 200);
    let second = served.create(&Create::yaml(&yaml));
    assert_eq!(last(&second.message("hi")).data["status"]["response"], "ok");
}

/// `limits.connections: 1`: a second watch at once is refused with 429 while a
/// neighbour without the ceiling takes two; once the first closes, a new one gets in.
#[test]
fn a_capsule_connection_ceiling_refuses_the_next_connection_with_429() {
    let served = Served::start_with("serve-connections", &[], &[("MUR_HEARTBEAT_MS", "100")]);
    let yaml = scripted("connections", "turns:\n  - text: ok\n", "");
    let one = served.create(&Create::yaml(&yaml).limits(json!({"connections": 1})));
    let many = served.create(&Create::yaml(&yaml));

    let mut first = one.watch(None);
    first.frame(WAIT);
    let second = one.call(&[], WATCH);
    Reply::assert_refused(
        &second,
        "429 Too Many Requests",
        &format!(
            "capsule {} holds its ceiling of 1 connections; retry later",
            one.id
        ),
    );
    // The ceiling is the capsule's own.
    let mut w1 = many.watch(None);
    let mut w2 = many.watch(None);
    assert_eq!(w1.frame(WAIT).event, "connection-ack");
    assert_eq!(w2.frame(WAIT).event, "connection-ack");

    drop(first);
    eventually(WAIT, "a watch after the first one closed", || {
        let reply = one.call(
            &[],
            r#"{"jsonrpc":"2.0","id":1,"method":"murmur/still-there"}"#,
        );
        reply.status == 200
    });
}

/// `limits.queued_tasks: 1` over a manifest's `queue_depth: 4`: with one task running
/// and one waiting, the next is rejected; without the ceiling it waits its turn.
#[test]
fn the_queued_tasks_ceiling_rejects_the_task_past_it() {
    let served = Served::start("serve-queued");
    let script = bash_then("sleep 2; echo slept", "done");
    let yaml = scripted("queued", &script, "  queue_depth: 4\n");
    let capped = served.create(&Create::yaml(&yaml).limits(json!({"queued_tasks": 1})));
    let roomy = served.create(&Create::yaml(&yaml));
    assert_eq!(served.capsule(&capped.id)["limits"]["queued_tasks"], 1);

    for (hosted, rejects) in [(&capped, true), (&roomy, false)] {
        let mut running = hosted.stream("first");
        assert_eq!(running.frame(WAIT).state(), "working");
        let mut waiting = hosted.stream("second");
        served.wait_for_event(&hosted.id, "a2a_task_received", 1);
        // A `message/stream` closes at the first final status of any task.
        let third = hosted.message("third");
        if rejects {
            assert_eq!(third.len(), 1, "{third:#?}");
            assert_eq!(
                third[0].block,
                final_block(
                    0,
                    &third[0],
                    "rejected",
                    "task rejected: capsule is busy",
                    None
                )
            );
        } else {
            assert!(third.iter().all(|f| f.state() != "rejected"), "{third:#?}");
            // It waited its turn and ran: the third task's end is on record.
            served.wait_for_event(&hosted.id, "task_end", 2);
        }
        assert_eq!(last(&running.rest(WAIT)).state(), "completed");
        // The waiting task's connection closes at the first final status it sees.
        assert!(last(&waiting.rest(WAIT)).is_final());
    }
}

// ---------------------------------------------------------------------------------
// 5. Restart.

fn openai_threaded_yaml(mock: &MockModel) -> String {
    format!(
        r#"name: threaded
version: "0.1.0"
capabilities:
  network:
    allow: [{origin}]
inference:
  driver: openai
  endpoint: {origin}/v1
  model: test-model
  stream: false
  max_tokens: 64
  timeouts: {{connect_secs: 5, read_secs: 10}}
lifecycle:
  conversation: threaded
  task_acceptance: queue
  after_task: sleep
"#,
        origin = mock.origin()
    )
}

fn answer(text: &str) -> ModelReply {
    ModelReply::json(200, openai::completion(Some(text), &[], "stop", (10, 3)))
}

/// `kill -9` and a start on the same `--data`: the capsule is back at its address, its
/// threaded conversation carried, its frames replayable, its new session resuming the
/// old; a capsule stopped before stays stopped.
#[test]
fn a_killed_server_brings_its_capsules_back_where_they_were() {
    let mock = MockModel::with(vec![answer("Noted: PELICAN."), answer("PELICAN.")]);
    let mut served = Served::start("serve-restart");
    let threaded = served.create(&Create::yaml(&openai_threaded_yaml(&mock)));
    let keeper = served.create_scripted("keeper", "turns:\n  - text: kept\n");
    let context = "ctx-serve-restart";

    let first = threaded.message_body(&message_stream_body_in(
        "Remember the word PELICAN.",
        context,
    ));
    assert_eq!(last(&first).data["status"]["response"], "Noted: PELICAN.");
    assert_eq!(first[0].data["context_id"], context);
    let old_session = served.session_id(&threaded.id);
    let stopped = served.stop(&keeper.id);
    assert_eq!(stopped.status, 200);

    served.restart();
    assert_eq!(served.launch["capsules"], 2, "{}", served.launch);
    assert_eq!(served.healthz().body, "ok\n");
    let list = served.list();
    let back = listed(&list, &threaded.id);
    assert_eq!(
        (&back["address"], &back["state"]),
        (&json!(threaded.url), &json!("idle"))
    );
    assert_eq!(listed(&list, &keeper.id)["state"], "stopped");
    Reply::assert_refused(
        &keeper.call(&[], &message_stream_body("still there?")),
        "503 Service Unavailable",
        &format!("capsule {} is stopped", keeper.id),
    );

    // A new session, resuming the one that was killed.
    let new_session = served.session_id(&threaded.id);
    assert_ne!(new_session, old_session);
    let start = served
        .trace(&threaded.id, &new_session)
        .into_iter()
        .find(|e| e["event_type"] == "session_start")
        .expect("a session_start");
    assert_eq!(start["resumed_from"], old_session, "{start}");

    // The conversation goes on in the same context.
    let second = threaded.message_body(&message_stream_body_in("Which word?", context));
    assert_eq!(last(&second).data["status"]["response"], "PELICAN.");
    assert_carried(
        &roles_texts(&mock.request(1).json()),
        "Remember the word PELICAN.",
        "Noted: PELICAN.",
        "Which word?",
    );

    // The frames the killed process wrote replay from the journal, byte for byte,
    // before those of the new session. The replay is written as the watch attaches.
    let mut watch = threaded.watch(Some("0"));
    let replayed = watch.until(AT_ONCE, |f| f.task() == second[0].task() && f.is_final());
    assert_eq!(
        replayed[0].block,
        "event: connection-ack\ndata: {\"role\":\"observer\",\"conversation_mode\":\"threaded\"}"
    );
    let expected: Vec<&str> = first
        .iter()
        .chain(&second)
        .filter(|f| f.id.is_some_and(|id| id > 0))
        .map(|f| f.block.as_str())
        .collect();
    let got: Vec<&str> = replayed[1..].iter().map(|f| f.block.as_str()).collect();
    assert_eq!(got, expected);
}

// ---------------------------------------------------------------------------------
// 6. SIGTERM.

/// With `--drain-secs` longer than the running task: healthz says `draining`, new
/// requests are refused, the task completes and its client gets the final frame; the
/// server exits 0, and the next start brings the capsule back.
#[test]
fn sigterm_drains_a_running_task_to_completion_and_exits_0() {
    let mut served = Served::start_with("serve-drain", &["--drain-secs", "30"], &[]);
    let hosted = served.create_scripted("drain", &bash_then("sleep 2; echo slept", "drained"));
    let mut stream = hosted.stream("sleep");
    assert_eq!(stream.frame(WAIT).state(), "working");
    served.signal(libc::SIGTERM);
    eventually(WAIT, "healthz says draining", || {
        served.healthz().status == 503
    });
    let health = served.healthz();
    assert_eq!(
        (health.header("content-type"), health.body.as_str()),
        (Some("text/plain"), "draining\n")
    );
    Reply::assert_refused(
        &hosted.call(&[], &message_stream_body("one more")),
        "503 Service Unavailable",
        "the server is shutting down; retry at the same address once it is back",
    );
    let rest = stream.rest(WAIT);
    assert_eq!(labels(&rest), one_call_task()[1..].to_vec(), "{rest:#?}");
    assert_eq!(
        rest[0].data["artifact"]["content"],
        bash_result("sleep 2; echo slept", "slept")
    );
    assert_eq!(last(&rest).data["status"]["response"], "drained");
    assert_eq!(served.wait(WAIT), 0, "{}", served.stderr());
    assert!(
        served.stderr().contains(
            "[murmur] draining: new requests are refused; running tasks have 30s to finish"
        ),
        "{}",
        served.stderr()
    );

    served.restart();
    assert_eq!(listed(&served.list(), &hosted.id)["state"], "idle");
}

/// With `--drain-secs` shorter than the running task: the task is canceled, its client
/// gets the `canceled` status, its command is killed, and the server exits 0.
#[test]
fn sigterm_cancels_a_task_longer_than_the_drain_and_exits_0() {
    let mut served = Served::start_with("serve-drain-short", &["--drain-secs", "1"], &[]);
    let sleep = marker(30);
    let _cleanup = KillOnDrop(sleep.clone());
    let hosted = served.create_scripted(
        "drain-short",
        &bash_then(&format!("exec sleep {sleep}"), "never"),
    );
    let mut stream = hosted.stream("sleep");
    let working = stream.frame(WAIT);
    eventually(WAIT, "the command runs", || {
        !pids_running(&sleep).is_empty()
    });
    let signalled = Instant::now();
    served.signal(libc::SIGTERM);
    let rest = stream.rest(WAIT);
    assert_eq!(
        last(&rest).block,
        final_block(1, &working, "canceled", "task canceled", None),
        "{rest:#?}"
    );
    assert_eq!(served.wait(WAIT), 0, "{}", served.stderr());
    assert!(
        signalled.elapsed() < Duration::from_secs(20),
        "{:?}",
        signalled.elapsed()
    );
    eventually(WAIT, "the command is gone", || {
        pids_running(&sleep).is_empty()
    });
}

// ---------------------------------------------------------------------------------
// 7. /metrics.

/// The value of the sample `name` (with its labels) in a metrics body.
fn sample(body: &str, name: &str) -> f64 {
    body.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {name} in:\n{body}"))
        .parse()
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Every line is a `# HELP`, a `# TYPE` or a sample of a family typed before it.
fn assert_text_format(body: &str) {
    let mut typed: Vec<String> = Vec::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "{line}"
            );
            typed.push(name.to_string());
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line:?}"));
        assert!(value.parse::<f64>().is_ok(), "not a number: {line}");
        let name = series.split('{').next().unwrap();
        assert!(
            typed.iter().any(|t| name == t
                || ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|s| name.strip_suffix(s) == Some(t))),
            "a sample of a family with no # TYPE before it: {line}"
        );
    }
}

/// The text format, the capsule count by state, a task counted, a running capsule
/// shown running, and no tenant named anywhere.
#[test]
fn metrics_count_capsules_and_tasks_and_name_no_tenant() {
    let served = Served::start("serve-metrics");
    let quick = served.create_scripted("metrics-quick", "turns:\n  - text: ok\n");
    let slow = served.create_scripted("metrics-slow", &bash_then("sleep 2", "slept"));
    let reply = served.request("GET", "/metrics", &[], "");
    assert_eq!(
        reply.header("content-type"),
        Some("text/plain; version=0.0.4")
    );
    let before = reply.body;
    assert_text_format(&before);
    assert_eq!(sample(&before, r#"mur_capsules{state="idle"}"#), 2.0);
    assert_eq!(sample(&before, r#"mur_capsules{state="running"}"#), 0.0);
    assert_eq!(sample(&before, "mur_tasks_total"), 0.0);

    assert_eq!(last(&quick.message("hi")).state(), "completed");
    let mut stream = slow.stream("sleep");
    stream.frame(WAIT);
    let during = served.metrics();
    assert_text_format(&during);
    assert_eq!(sample(&during, r#"mur_capsules{state="running"}"#), 1.0);
    assert_eq!(sample(&during, r#"mur_capsules{state="idle"}"#), 1.0);
    assert_eq!(sample(&during, "mur_tasks_total"), 1.0);
    assert!(sample(&during, "mur_connections") >= 2.0, "{during}");
    assert_eq!(last(&stream.rest(WAIT)).state(), "completed");
    let after = served.metrics();
    assert_eq!(sample(&after, "mur_tasks_total"), 2.0);
    assert!(
        sample(&after, "mur_frames_written_total") > sample(&before, "mur_frames_written_total")
    );
    assert!(sample(&after, "mur_resident_memory_bytes") > 0.0);
    for body in [&before, &during, &after] {
        for hosted in [&quick, &slow] {
            assert!(!body.contains(&hosted.id), "{body}");
            assert!(!body.contains(&hosted.id["cap_".len()..]), "{body}");
        }
        assert!(!body.contains("metrics-quick") && !body.contains("metrics-slow"));
        assert!(!body.contains(&served.admin_token));
    }
}

/// The metric families the README's route table names for `GET /metrics`.
fn documented_families() -> Vec<String> {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let row = readme
        .lines()
        .find(|l| l.starts_with("| `GET /metrics` |"))
        .expect("the README's route table has a GET /metrics row");
    let families: Vec<String> = row
        .split('`')
        .filter(|piece| piece.starts_with("mur_"))
        .map(|piece| piece.split('{').next().unwrap().to_string())
        .collect();
    assert!(families.len() >= 5, "{row}");
    families
}

/// The families the README lists are exactly those served, each with its `# TYPE`.
#[test]
fn metrics_have_exactly_the_families_the_readme_lists() {
    let served = Served::start("serve-metrics-families");
    let body = served.metrics();
    let mut served_families: Vec<String> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|rest| rest.split(' ').next().unwrap().to_string())
        .collect();
    served_families.sort();
    let mut documented = documented_families();
    documented.sort();
    assert_eq!(served_families, documented, "{body}");
}

// ---------------------------------------------------------------------------------
// 8. `mur watch` and `mur stop` on a hosted capsule.

/// `mur watch URL --token T` prints the hosted capsule's frames; without the token, or
/// with another, it fails with E-IO-005 and says what to pass; `mur stop URL --token T`
/// ends the capsule's session, which the admin API then lists `ended`.
#[test]
fn mur_watch_and_mur_stop_reach_a_hosted_capsule_with_its_token() {
    let served = Served::start("serve-watch");
    let hosted = served.create_scripted("watched", "turns:\n  - text: hosted hello\n");
    let other = served.create_scripted("other", "turns:\n  - text: x\n");
    let token = hosted.token.clone().unwrap();
    let url = hosted.url.as_str();

    let refused = finish(mur().args(["watch", url]));
    assert_eq!(refused.status, 1, "{}", refused.stderr);
    assert_eq!(refused.stdout, "");
    assert_eq!(
        refused.stderr,
        format!(
            "error[E-IO-005]: {url} asks for a token (401 Unauthorized)\n  hint: pass the token mur serve returned when the capsule was created: --token TOKEN\n"
        )
    );
    let wrong = finish(mur().args(["watch", url, "--token", other.token.as_deref().unwrap()]));
    assert_eq!(wrong.status, 1, "{}", wrong.stderr);
    assert_eq!(
        wrong.stderr,
        format!(
            "error[E-IO-005]: {url} refused the token (401 Unauthorized)\n  hint: check --token: it must be the token returned when this capsule was created\n"
        )
    );
    let no_stop = finish(mur().args(["stop", url]));
    assert_eq!(no_stop.status, 1);
    assert!(
        no_stop.stderr.starts_with("error[E-IO-005]: "),
        "{}",
        no_stop.stderr
    );
    assert_eq!(listed(&served.list(), &hosted.id)["state"], "idle");

    let mut watch = Watch::start(url, Some(&token), true);
    assert_eq!(
        watch.attached(),
        format!(
            "[murmur] watching {url} — Ctrl-C ends the watch, not the capsule; use `mur stop` to end the capsule"
        )
    );
    let frames = hosted.message("say hello");
    assert_eq!(last(&frames).data["status"]["response"], "hosted hello");
    watch.printed("[completed]\n  hosted hello\n\n");

    let session = served.session_id(&hosted.id);
    let stopped = finish(mur().args(["stop", url, "--token", &token, "--timeout", "30"]));
    assert_eq!(stopped.status, 0, "{}", stopped.stderr);
    assert_eq!(
        stopped.stdout,
        format!("stopped: {session}\nresidue: nothing else was left running\n")
    );
    assert_eq!(stopped.stderr, "");
    let c = listed(&served.list(), &hosted.id).clone();
    assert_eq!(c["state"], "ended", "{c}");
    Reply::assert_refused(
        &hosted.call(&[], &message_stream_body("hello?")),
        "503 Service Unavailable",
        &format!("capsule {} has ended its session", hosted.id),
    );
    // The neighbour was not touched.
    assert_eq!(listed(&served.list(), &other.id)["state"], "idle");

    // The capsule's session ended: its watch is closed as a `mur run` capsule's is
    // when its process exits, and `mur watch` says where it was.
    // It must end at once: its capsule has gone.
    let run = watch.finish(AT_ONCE);
    assert_eq!(
        run.stdout,
        "[working]  inference turn 1\n[completed]\n  hosted hello\n\n"
    );
    let last_id = last(&frames).id.unwrap();
    assert_eq!(
        (run.status, run.stderr),
        (
            1,
            format!(
                "error[E-IO-003]: connection to {url} lost after event id {last_id} — the capsule may still be running; run mur watch again to reattach\n  hint: a capsule that exits (after its task, or through mur stop) closes the watch this way too\n"
            )
        )
    );
}
