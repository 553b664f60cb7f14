//! Formations hosted by `mur serve`: created through `POST /admin/formations` from a
//! roster on the server's disk, one hosted capsule per member, the entry member taking
//! tasks at its `/c/<id>/` and calling a worker through its door code; described,
//! brought back by a restart, refused when incomplete, and deleted whole.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::common::served::{Hosted, Served};
use crate::common::*;

/// A lead (the entry) that calls `worker` once and answers with what it said, and a
/// worker that answers "A fact.", each in a folder of its own beside `roster.yaml`.
fn lead_and_worker(test: &str) -> PathBuf {
    let dir = scratch(test);
    let members = [
        (
            "lead",
            true,
            "",
            format!(
                "  - tool_calls: [{{id: c1, name: call-member, input: {{member: worker, task: \"One fact.\"}}}}]\n{}",
                text_turn("{{last_tool_result}}")
            ),
        ),
        (
            "worker",
            false,
            "exports:\n  peer_tasks:\n    accept: true\n",
            text_turn("A fact."),
        ),
    ];
    let mut roster = String::from("roster_version: 1\nmembers:\n");
    for (name, entry, extra, turns) in &members {
        roster.push_str(&format!(
            "  - name: {name}\n    path: ./{name}\n    entry: {entry}\n"
        ));
        let home = dir.join(name);
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(
            home.join("murmur.yaml"),
            format!(
                "name: {name}\nversion: \"1.0.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-{name}\n  max_turns: 6\nlifecycle:\n  task_acceptance: queue\n  after_task: sleep\n{extra}"
            ),
        )
        .unwrap();
        std::fs::write(
            home.join("script.yaml"),
            format!("{SPAN_SESSION}turns:\n{turns}"),
        )
        .unwrap();
    }
    roster.push_str("reachability:\n  - {from: lead, to: [worker]}\n");
    std::fs::write(dir.join("roster.yaml"), roster).unwrap();
    dir
}

fn fenced(peer: &str, text: &str) -> String {
    format!("<untrusted-content source=peer:{peer}>\n{text}\n</untrusted-content>")
}

/// The member `name` of a formation as the creation's answer describes it.
fn member<'a>(formation: &'a Value, name: &str) -> &'a Value {
    formation["members"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["name"] == name))
        .unwrap_or_else(|| panic!("no member {name} in {formation}"))
}

/// The member's capsule, to send it tasks as any hosted capsule.
fn hosted(served: &Served, member: &Value) -> Hosted {
    let text = |key: &str| member[key].as_str().unwrap().to_string();
    Hosted {
        id: text("id"),
        url: text("address"),
        path: text("path"),
        token: member["token"].as_str().map(str::to_string),
        workdir: PathBuf::from(text("workdir")),
        socket: served.address.clone(),
        created: member.clone(),
    }
}

/// Sends the entry a task and checks that the worker's fenced answer is its answer.
fn assert_the_lead_answers_with_the_workers_fact(entry: &Hosted) {
    let frames = entry.message("Tell me one thing.");
    let artifacts: Vec<&Value> = frames
        .iter()
        .filter(|f| f.event == "artifact")
        .map(|f| &f.data["artifact"])
        .collect();
    assert_eq!(artifacts.len(), 1, "{frames:?}");
    assert_eq!(artifacts[0]["content"], fenced("worker", "A fact."));
    assert_eq!(artifacts[0]["fence_source"], "peer:worker");
    let last = frames.last().unwrap();
    assert_eq!(last.state(), "completed", "{frames:?}");
    assert_eq!(
        last.data["status"]["response"],
        fenced("worker", "A fact."),
        "{frames:?}"
    );
}

fn create(served: &Served, dir: &std::path::Path) -> Value {
    let reply = served.admin("POST", "/admin/formations", Some(&json!({ "path": dir })));
    assert_eq!(
        reply.status,
        201,
        "{reply:?}\nserver stderr:\n{}",
        served.stderr()
    );
    reply.json()
}

#[test]
fn a_formation_created_through_the_admin_api_answers_through_its_worker_and_is_deleted_whole() {
    let served = Served::start("formation-served");
    let dir = lead_and_worker("formation-served-roster");
    let created = create(&served, &dir);
    let id = created["id"].as_str().unwrap().to_string();
    assert!(is_minted(&id, "frm_", 32), "{created}");
    assert_eq!(created["state"], "running", "{created}");
    assert_eq!(created["roster"], json!(dir.join("roster.yaml")));
    assert_eq!(created["edges"], json!([{"from": "lead", "to": "worker"}]));
    let (lead, worker) = (member(&created, "lead"), member(&created, "worker"));
    assert_eq!(created["entry"]["id"], lead["id"]);
    assert_eq!(
        (&lead["entry"], &worker["entry"]),
        (&json!(true), &json!(false))
    );
    for m in [lead, worker] {
        let capsule = m["id"].as_str().unwrap();
        assert!(is_minted(capsule, "cap_", 32), "{created}");
        assert_eq!(m["path"], format!("/c/{capsule}/"));
        assert!(m["token"].is_string(), "each member has a token: {created}");
    }

    let entry = hosted(&served, lead);
    assert_the_lead_answers_with_the_workers_fact(&entry);

    // Described without its tokens; each member is a capsule of the fleet as well.
    let described = served.admin("GET", &format!("/admin/formations/{id}"), None);
    assert_eq!(described.status, 200, "{described:?}");
    let described = described.json();
    assert_eq!(described["state"], "running");
    assert_eq!(member(&described, "worker")["id"], worker["id"]);
    assert!(
        member(&described, "lead").get("token").is_none(),
        "{described}"
    );
    assert!(member(&described, "lead")["session_id"].is_string());
    let listed = served.admin("GET", "/admin/formations", None).json();
    assert_eq!(listed["formations"][0]["id"], json!(id));
    let worker_id = worker["id"].as_str().unwrap();
    let capsule = served.capsule(worker_id);
    assert_eq!(
        capsule["formation"],
        json!({"id": id, "member": "worker", "entry": false})
    );
    assert_eq!(served.list().len(), 2);

    // One member is not deleted alone: its caller would be left calling nobody.
    let refused = served.delete(worker_id, "");
    assert_eq!(refused.status, 409, "{refused:?}");
    assert_eq!(refused.json()["error"]["code"], "E-SERVE-023");

    let deleted = served.admin("DELETE", &format!("/admin/formations/{id}"), None);
    assert_eq!(deleted.status, 200, "{deleted:?}");
    let deleted = deleted.json();
    assert_eq!(deleted["deleted"], true);
    assert_eq!(deleted["workdir"], "kept");
    assert_eq!(deleted["members"].as_array().unwrap().len(), 2);
    assert_eq!(
        served
            .admin("GET", &format!("/admin/formations/{id}"), None)
            .status,
        404
    );
    assert!(served.list().is_empty());
    let gone = entry.call(&[], &message_stream_body("Anyone there?"));
    assert_eq!(gone.status, 404, "{gone:?}");
}

#[test]
fn a_restart_rewires_a_whole_formation_and_refuses_an_incomplete_one_naming_the_member() {
    let mut served = Served::start("formation-restart");
    let whole = create(&served, &lead_and_worker("formation-restart-whole"));
    let broken = create(&served, &lead_and_worker("formation-restart-broken"));
    served.kill();
    // A member's entry lost while the server was down: its formation cannot be wired.
    let lost = member(&broken, "worker")["id"]
        .as_str()
        .unwrap()
        .to_string();
    std::fs::remove_file(served.capsule_dir(&lost).join("capsule.json")).unwrap();
    served.restart();

    // New edge credentials, the same members at the same addresses.
    let entry = hosted(&served, member(&whole, "lead"));
    assert_the_lead_answers_with_the_workers_fact(&entry);
    let id = whole["id"].as_str().unwrap();
    let described = served
        .admin("GET", &format!("/admin/formations/{id}"), None)
        .json();
    assert_eq!(described["state"], "running", "{described}");

    let id = broken["id"].as_str().unwrap();
    let described = served
        .admin("GET", &format!("/admin/formations/{id}"), None)
        .json();
    assert_eq!(described["state"], "broken", "{described}");
    assert_eq!(
        described["reason"],
        format!("member 'worker' ({lost}) has no entry"),
        "{described}"
    );
    let lead = member(&described, "lead");
    assert_eq!(lead["state"], "failed", "{described}");
    assert_eq!(member(&described, "worker")["state"], "missing");
    let capsule = served.capsule(lead["id"].as_str().unwrap());
    assert!(
        capsule["reason"].as_str().unwrap().starts_with(&format!(
            "formation {id} was not brought back: member 'worker'"
        )),
        "{capsule}"
    );
    assert!(
        served.stderr().contains(&format!(
            "formation {id}: member 'worker' ({lost}) has no entry; none of its members started"
        )),
        "{}",
        served.stderr()
    );
    // What is left is deleted as any formation.
    let deleted = served.admin(
        "DELETE",
        &format!("/admin/formations/{id}?workdir=remove"),
        None,
    );
    assert_eq!(deleted.status, 200, "{deleted:?}");
    assert!(!served.data.join("formations").join(id).exists());
}

/// `kill -9` of the server while the lead waits on its worker: after the restart the
/// lead's task has ended, saying why, and nothing waits on a call that died with the
/// process.
#[test]
fn a_kill_in_the_middle_of_a_call_leaves_no_task_waiting_after_the_restart() {
    let dir = lead_and_worker("formation-kill");
    // The worker's one task sleeps for a minute in the foreground.
    let worker = dir.join("worker");
    std::fs::write(
        worker.join("murmur.yaml"),
        "name: worker\nversion: \"1.0.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: m\ncapabilities:\n  shell:\n    allow: [bash]\nlifecycle:\n  task_acceptance: queue\n  after_task: sleep\n  shell_grace_secs: 120\nexports:\n  peer_tasks:\n    accept: true\n",
    )
    .unwrap();
    std::fs::write(
        worker.join("script.yaml"),
        format!(
            "{SPAN_SESSION}turns:\n{}{}",
            bash_turn("sleep 60"),
            text_turn("woke")
        ),
    )
    .unwrap();
    let mut served = Served::start("formation-kill");
    let formation = create(&served, &dir);
    let entry = hosted(&served, member(&formation, "lead"));
    let sent = v1(
        &entry,
        "SendMessage",
        json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "Go."}]},
               "configuration": {"returnImmediately": true}}),
    );
    let task = sent["task"]["id"]
        .as_str()
        .or(sent["id"].as_str())
        .unwrap()
        .to_string();
    eventually(
        std::time::Duration::from_secs(60),
        "the lead waits on its worker",
        || {
            status(&entry, &task)
                .1
                .starts_with("waiting on peer worker")
        },
    );
    served.restart();
    let entry = hosted(&served, member(&formation, "lead"));
    assert_eq!(
        status(&entry, &task),
        (
            "TASK_STATE_FAILED".to_string(),
            "the server stopped while the task ran".to_string()
        )
    );
}

/// An A2A v1.0 call to `entry`: its `result`.
fn v1(entry: &Hosted, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let headers = [("a2a-version", "1.0"), ("content-type", "application/json")];
    let reply = entry.call(&headers, &body.to_string());
    serde_json::from_str::<Value>(&reply.body).unwrap()["result"].clone()
}

/// A task's state and status message, as `GetTask` tells them.
fn status(entry: &Hosted, task: &str) -> (String, String) {
    let got = v1(entry, "GetTask", json!({"id": task}));
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (
        text(&got["status"]["state"]),
        text(&got["status"]["message"]["parts"][0]["text"]),
    )
}
