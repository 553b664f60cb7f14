//! The web view of a formation's lead, in headless Chromium: while the lead waits on its
//! worker, the wait links to the worker's page.

use std::io::BufRead;

use crate::common::browser::Browser;
use crate::common::*;

fn write_member(dir: &std::path::Path, name: &str, extra: &str, turns: &str) {
    let home = dir.join(name);
    std::fs::create_dir_all(&home).unwrap();
    let manifest = format!(
        "name: {name}\nversion: \"1.0.0\"\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: m\n{extra}"
    );
    std::fs::write(home.join("murmur.yaml"), manifest).unwrap();
    std::fs::write(
        home.join("script.yaml"),
        format!("{SPAN_SESSION}turns:\n{turns}"),
    )
    .unwrap();
}

#[test]
fn in_a_browser_a_wait_on_a_member_links_to_its_page() {
    let Some(browser) = Browser::get() else {
        return;
    };
    let dir = scratch("webview-formation");
    write_member(
        &dir,
        "lead",
        "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n",
        &format!(
            "  - tool_calls: [{{id: c1, name: call-member, input: {{member: worker, task: \"Take a moment.\"}}}}]\n{}",
            text_turn("{{last_tool_result}}")
        ),
    );
    write_member(
        &dir,
        "worker",
        "capabilities:\n  shell:\n    allow: [bash]\nlifecycle:\n  task_acceptance: queue\n  after_task: sleep\nexports:\n  peer_tasks:\n    accept: true\n",
        &format!("{}{}", bash_turn("sleep 2"), text_turn("done")),
    );
    std::fs::write(
        dir.join("roster.yaml"),
        "roster_version: 1\nmembers:\n  - {name: lead, path: ./lead, entry: true}\n  - {name: worker, path: ./worker}\nreachability:\n  - {from: lead, to: [worker]}\n",
    )
    .unwrap();
    let mut cmd = mur();
    cmd.args(["run", "--json", "--port", "0", "--roster"])
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut running = Running::start_command(cmd);
    let worker = member_url(&mut running, "worker");
    let url = format!("http://{}/", running.address);
    let seen = browser.scenario("formation", &[&url], &[]);
    assert_eq!(seen["link"]["text"], "open worker's page", "{seen}");
    assert_eq!(seen["link"]["href"], worker, "{seen}");
    assert_eq!(seen["link"]["rel"], "noopener noreferrer");
    assert_eq!(seen["state"], "completed");
    assert_eq!(seen["console"], serde_json::json!([]));
}

/// The URL the formation block gives `member`.
fn member_url(running: &mut Running, member: &str) -> String {
    let stderr = running.child.stderr.take().unwrap();
    let mut lines = std::io::BufReader::new(stderr).lines();
    let prefix = format!("  member {member}  ");
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix(&prefix) {
            let url = rest.split_whitespace().nth(1).unwrap().to_string();
            std::thread::spawn(move || lines.for_each(drop));
            return url;
        }
    }
    panic!("no line for {member}");
}
