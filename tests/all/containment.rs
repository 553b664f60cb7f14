//! Containment of the workdir, end to end: a hostile tool (`mur_tool_hostile_fs`, built
//! from source) plants links that climb out of its view where the host writes, and
//! reaches for the host's records. Each test checks that the file outside stays byte
//! for byte as it was, and that the host's records are out of the tool's reach.

use std::path::Path;

use crate::common::*;
use serde_json::{Value, json};

const PRECIOUS: &str = "precious bytes\nnot to be overwritten\n";

/// A capsule with the hostile tool (and wordcount, an innocent one), `extra` appended.
fn capsule(name: &str, script: &str, extra: &str) -> Capsule {
    let manifest = format!(
        r#"name: containment
version: "0.1.0"
artifacts:
  - name: hostile
    runtime: tool
    source: {hostile}
  - name: wordcount
    runtime: tool
    source: {wordcount}
{extra}inference:
  driver: scripted
  script: ./script.yaml
  model: scripted-test
lifecycle:
  task_acceptance: none
trace:
  include_tool_output: true
"#,
        hostile = guest(MUR_TOOL_HOSTILE_FS).display(),
        wordcount = guest(MUR_TOOL_WORDCOUNT).display(),
    );
    Capsule::new(name, &manifest, script)
}

/// One turn per hostile act, then `answer`.
fn script(acts: &[Value], answer: &str) -> String {
    let mut script = String::from("turns:\n");
    for (i, act) in acts.iter().enumerate() {
        script.push_str(&format!(
            "  - tool_calls: [{{id: c{i}, name: hostile, input: {act}}}]\n"
        ));
    }
    script.push_str(&format!("  - text: {}\n", json!(answer)));
    script
}

/// What each hostile act answered, in order.
fn findings(session: &Session) -> Vec<String> {
    session
        .events("tool_call")
        .iter()
        .filter(|c| c["tool_name"] == "hostile")
        .map(|c| c["output"].as_str().unwrap().to_string())
        .collect()
}

fn victim(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("victim.txt");
    std::fs::write(&path, PRECIOUS).unwrap();
    path
}

fn assert_untouched(path: &Path) {
    assert_eq!(
        std::fs::read_to_string(path).unwrap(),
        PRECIOUS,
        "{} was written through a link",
        path.display()
    );
}

fn assert_plain_file(path: &Path, text: &str) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    assert!(meta.is_file(), "{} is not a plain file", path.display());
    assert_eq!(std::fs::read_to_string(path).unwrap(), text);
}

#[test]
fn a_link_at_out_result_txt_is_replaced_not_followed() {
    // The default layout: the view is <capsule>/workdir/<session>, three levels below.
    let plant = json!({"act": "plant", "at": "out/result.txt", "to": "../../../victim.txt"});
    let cap = capsule("link-result", &script(&[plant], "the answer"), "");
    let victim = victim(&cap.dir);
    let run = cap.run(&["--task", "go"]);
    run.assert_ok();
    let s = run.session();
    assert_eq!(
        findings(&s),
        ["<untrusted-content source=tool:hostile>\nok\n</untrusted-content>"]
    );
    assert_untouched(&victim);
    assert_plain_file(&s.workdir.join("out/result.txt"), "the answer");
}

#[test]
fn a_link_at_out_result_txt_under_a_chosen_workdir() {
    let plant = json!({"act": "plant", "at": "out/result.txt", "to": "../../victim.txt"});
    let cap = capsule("link-result-wd", &script(&[plant], "the answer"), "");
    let victim = victim(&cap.dir);
    let wd = cap.dir.join("wd");
    let run = cap.run(&["--task", "go", "--workdir", wd.to_str().unwrap()]);
    run.assert_ok();
    assert_eq!(findings(&run.session()).len(), 1);
    assert_untouched(&victim);
    assert_plain_file(&wd.join("out/result.txt"), "the answer");
}

/// A link one session leaves at `task.md` is replaced by the next session's task.
#[test]
fn a_link_at_task_md_is_replaced_not_followed() {
    let plant = json!({"act": "plant", "at": "task.md", "to": "../victim.txt"});
    let cap = capsule("link-task", &script(&[plant], "planted"), "");
    let victim = victim(&cap.dir);
    let wd = cap.dir.join("wd");
    let wd_arg = wd.to_str().unwrap();
    let first = cap.run(&["--task", "first", "--workdir", wd_arg]);
    first.assert_ok();
    assert!(
        std::fs::symlink_metadata(wd.join("task.md"))
            .unwrap()
            .file_type()
            .is_symlink(),
        "the tool planted its link"
    );
    cap.file("script.yaml", "turns:\n  - text: ok\n");
    cap.run(&["--task", "second task", "--workdir", wd_arg])
        .assert_ok();
    assert_untouched(&victim);
    assert_plain_file(&wd.join("task.md"), "second task");
}

/// Hook data lives in the host's records: a link where a tool can write does not
/// redirect the hook, and a link in the records themselves is refused.
#[test]
fn a_hook_scope_is_out_of_reach_and_never_a_link() {
    let hook = format!(
        r#"  - name: memory
    runtime: hook
    source: {}
    commit_policy: seed-context
    capabilities:
      filesystem: {{scope: memory}}
"#,
        guest(MUR_HOOK_MEMORY).display()
    );
    // Seeding needs a ceiling; a top-level key, after the artifacts.
    let extra = format!("{hook}context:\n  max_tokens: 32000\n");
    let plant = json!({"act": "plant", "at": "memory", "to": "../elsewhere"});
    let cap = capsule("link-scope", &script(&[plant], "remembered"), &extra);
    let elsewhere = cap.dir.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let wd = cap.dir.join("wd");
    let records = cap.dir.join("records");
    let args = [
        "--task",
        "go",
        "--workdir",
        wd.to_str().unwrap(),
        "--records",
        records.to_str().unwrap(),
    ];
    let run = cap.run(&args);
    run.assert_ok();
    assert_eq!(findings(&run.session()).len(), 1);
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    let memory = std::fs::read_to_string(records.join("hooks/memory/memory.md")).unwrap();
    assert!(memory.ends_with(": remembered\n"), "{memory}");

    // Someone swapped the scope itself for a link: the hook is not started there.
    std::fs::remove_dir_all(records.join("hooks/memory")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, records.join("hooks/memory")).unwrap();
    let run = cap.run(&args);
    run.assert_ok();
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    let log = run.session().record("logs/hook-memory.log");
    assert!(
        log.contains("hooks/memory is a symbolic link; the host does not follow links there"),
        "{log}"
    );
}

/// The tool sees only what the model works with: no trace, no logs, no other
/// session; a `trace.jsonl` it writes is its own file, not the record.
#[test]
pub(crate) fn the_trace_and_other_sessions_are_out_of_sight() {
    let acts = [
        json!({"act": "list", "path": "/"}),
        json!({"act": "list", "path": ".."}),
        json!({"act": "list", "path": "../.murmur"}),
        json!({"act": "write", "path": "../.murmur/forged.txt", "text": "x"}),
        json!({"act": "write", "path": "trace.jsonl", "text": "{\"event_type\":\"forged\"}\n"}),
    ];
    let cap = capsule("records", &script(&acts, "done"), "");
    cap.run(&["--task", "go"]).assert_ok();
    let run = cap.run(&["--task", "again"]);
    run.assert_ok();
    let s = run.session();
    let found: Vec<String> = findings(&s)
        .iter()
        .map(|f| {
            f.trim_start_matches("<untrusted-content source=tool:hostile>\n")
                .trim_end_matches("\n</untrusted-content>")
                .to_string()
        })
        .collect();
    assert_eq!(found[0], "ok: MURMUR.md,out,task.md,tools");
    for escape in &found[1..4] {
        assert!(escape.starts_with("err: "), "{found:?}");
    }
    assert_eq!(found[4], "ok");
    let trace = s.trace();
    assert_eq!(trace[0]["event_type"], "session_start");
    assert!(trace.iter().all(|e| e["event_type"] != "forged"));
    assert!(!cap.dir.join("workdir/.murmur/forged.txt").exists());
}

/// The deny-list's policy file is in the host's records: the tool cannot empty it,
/// and the next denied call is still refused.
#[test]
fn a_policy_file_cannot_be_rewritten_by_a_tool() {
    let hook = format!(
        r#"  - name: deny-list
    runtime: hook
    source: {}
    binding: on-tool-call
    commit_policy: deny
    capabilities:
      filesystem: {{scope: policy}}
"#,
        guest(MUR_HOOK_DENY_LIST).display()
    );
    let script = r#"turns:
  - tool_calls: [{id: c0, name: hostile, input: {act: write, path: policy/deny.txt, text: ""}}]
  - tool_calls: [{id: c1, name: hostile, input: {act: write, path: ../.murmur/hooks/policy/deny.txt, text: ""}}]
  - tool_calls: [{id: c2, name: wordcount, input: {text: "a b c"}}]
  - text: "{{last_tool_result}}"
"#;
    let cap = capsule("policy", script, &hook);
    let policy = cap.dir.join("workdir/.murmur/hooks/policy");
    std::fs::create_dir_all(&policy).unwrap();
    std::fs::write(policy.join("deny.txt"), "tool:wordcount\n").unwrap();
    let run = cap.run(&["--task", "count"]);
    run.assert_ok();
    let s = run.session();
    for finding in findings(&s) {
        assert!(finding.contains("\nerr: "), "{finding}");
    }
    assert_eq!(
        std::fs::read_to_string(policy.join("deny.txt")).unwrap(),
        "tool:wordcount\n"
    );
    let denied = s.events("call_denied");
    assert_eq!(denied.len(), 1, "{denied:?}");
    assert_eq!(denied[0]["hook_name"], "deny-list");
    assert!(
        s.events("tool_call")
            .iter()
            .all(|c| c["tool_name"] != "wordcount")
    );
    assert!(
        s.read("out/result.txt")
            .starts_with("Refused by policy hook 'deny-list'")
    );
}
