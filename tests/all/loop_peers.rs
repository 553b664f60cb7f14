//! A session loop of the 0.3.0 world hands tasks to peers itself
//! (`murmur:session/peers`): the gather loop (`components/loop-gather`) sends each task
//! to every peer at once and answers with what each said. Its calls are the model's
//! `call-member` calls in every way the host sees them: frames, bounds, trace lines.

use std::time::Duration;

use crate::common::*;

const WORKER: &str = "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\nexports:\n  peer_tasks:\n    accept: true\n";

/// A formation of a lead running the gather loop and workers `a` and `b`.
fn formation(test: &str) -> std::path::PathBuf {
    let dir = scratch(test);
    let member = |name: &str, extra: &str, turns: &str| {
        let home = dir.join(name);
        std::fs::create_dir_all(&home).unwrap();
        let manifest = format!(
            "name: {name}\nversion: \"1.0.0\"\n{extra}inference:\n  driver: scripted\n  script: ./script.yaml\n  model: m\n"
        );
        std::fs::write(home.join("murmur.yaml"), manifest).unwrap();
        std::fs::write(
            home.join("script.yaml"),
            format!("{SPAN_SESSION}turns:\n{turns}"),
        )
        .unwrap();
    };
    let lead = format!(
        "artifacts:\n  - name: gather\n    runtime: loop\n    source: {}\nlifecycle:\n  parallel_tools: 2\n",
        guest(MUR_LOOP_GATHER).display()
    );
    member("lead", &lead, "");
    member("a", WORKER, &text_turn("red"));
    member("b", WORKER, &text_turn("blue"));
    std::fs::write(
        dir.join("roster.yaml"),
        "roster_version: 1\nmembers:\n  - {name: lead, path: ./lead, entry: true}\n  - {name: a, path: ./a}\n  - {name: b, path: ./b}\nreachability: all\n",
    )
    .unwrap();
    dir
}

#[test]
pub(crate) fn a_gathering_loop_asks_every_peer_at_once_and_answers_with_each() {
    let dir = formation("loop-gather");
    let mut cmd = mur();
    cmd.args(["run", "--port", "0", "--roster"])
        .arg(&dir)
        .args(["--task", "Name a colour."]);
    let run = finish_within(&mut cmd, Duration::from_secs(90));
    run.assert_ok();
    let want = "a:\n<untrusted-content source=peer:a>\nred\n</untrusted-content>\n\nb:\n<untrusted-content source=peer:b>\nblue\n</untrusted-content>\nstatus:  ok\n";
    assert!(run.stdout.ends_with(want), "{}", run.stdout);
    let records = dir.join("lead/workdir/.murmur");
    let session = std::fs::read_dir(&records)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("trace.jsonl").exists())
        .unwrap();
    let lines = json_lines(&session.join("trace.jsonl"));
    let calls: Vec<_> = lines
        .iter()
        .filter(|l| l["event_type"] == "member_call")
        .collect();
    assert_eq!(calls.len(), 2, "{lines:?}");
    assert!(calls.iter().all(|c| c["status"] == "answered"), "{calls:?}");
}
