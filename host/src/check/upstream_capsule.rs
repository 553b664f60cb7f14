//! Upstream Murmur's capsule world's scenarios (`murmur:capsule/run@0.1.0`): the
//! component runs a task to its end as a capsule of its own (a manifest with no
//! `inference`, the component as its `capsule.wasm`), then takes two tasks over A2A
//! and completes each. What a component does inside its run is its own: the check
//! declares no tools, so each tool it calls is refused ("not declared"), and the
//! first scenario's line names them.

use std::time::Duration;

use super::Target;
use super::capsule::{Finished, Scratch};
use super::report::{Noted, Outcome, Scenario, Step, ensure, fail};

/// The wall-clock limit of one scenario's capsule.
const LIMIT: Duration = Duration::from_secs(30);
/// The capsule's own deadline, within the limit, so a component that spins or waits
/// is stopped by the capsule and reported with its error.
const MANIFEST: &str = "name: check-capsule\nversion: \"0.1.0\"\nruntime: capsule\n\
                        capabilities:\n  limits:\n    deadline_seconds: 10\n";

pub fn scenarios(target: &Target) -> Vec<Scenario> {
    vec![
        Scenario::run_noted("capsule: runs a task to its end", || run_once(target)),
        Scenario::run("capsule: takes tasks over A2A and completes each", || {
            over_a2a(target)
        }),
    ]
}

/// A scratch capsule whose component is the target.
fn capsule(target: &Target, label: &str) -> Result<Scratch, Outcome> {
    let s = Scratch::new(label)?;
    s.manifest(MANIFEST)?;
    s.write("capsule.wasm", &target.bytes)?;
    Ok(s)
}

/// The flags that put the workdir and the records in the scratch directory.
fn places(s: &Scratch) -> [String; 4] {
    [
        "--workdir".into(),
        s.dir().join("work").display().to_string(),
        "--records".into(),
        s.dir().join("records").display().to_string(),
    ]
}

fn run_once(target: &Target) -> Noted {
    let s = capsule(target, "capsule-run")?;
    let mut args = vec!["--task".to_string(), "mur-check-task".to_string()];
    args.extend(places(&s));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let f: Finished = s.run(&args, &[], LIMIT);
    let launch = f.ok().map_err(|outcome| with_calls(outcome, &f))?;
    let end = launch
        .events("task_end")
        .into_iter()
        .next()
        .ok_or_else(|| fail("the session's trace has no task_end"))?;
    ensure(end["exit_status"] == "ok", || {
        format!("the task ended {}", end["exit_status"])
    })?;
    let answer = launch.read("out/result.txt").unwrap_or_default();
    let tools = called(&f).unwrap_or_else(|| "it called no tool".into());
    Ok(Some(format!(
        "{tools}; its answer (out/result.txt) is {} bytes",
        answer.len()
    )))
}

/// The tools the run called, from its trace, when it called any.
fn called(f: &Finished) -> Option<String> {
    let names: Vec<String> = f
        .launch
        .as_ref()?
        .events("tool_call")
        .iter()
        .filter_map(|c| c["tool_name"].as_str().map(String::from))
        .collect();
    (!names.is_empty()).then(|| {
        format!(
            "it called {} (none is declared here, so each was refused)",
            names.join(", ")
        )
    })
}

/// A failed run's outcome, with the tools it called: a component may fail only for
/// want of one of them.
fn with_calls(outcome: Outcome, f: &Finished) -> Outcome {
    match (outcome, called(f)) {
        (Outcome::Fail(why), Some(tools)) => fail(format!("{why} ({tools})")),
        (outcome, _) => outcome,
    }
}

fn over_a2a(target: &Target) -> Step {
    let s = capsule(target, "capsule-a2a")?;
    let mut args: Vec<String> = places(&s).into();
    args.extend(
        [
            "--lifecycle-task-acceptance",
            "queue",
            "--lifecycle-after-task",
            "sleep",
        ]
        .map(String::from),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let served = s.spawn(&args, &[], LIMIT)?;
    for id in [1, 2] {
        let frames = served.send(id, &format!("mur-check-task-{id}"), None, LIMIT)?;
        let states: Vec<&str> = frames
            .iter()
            .filter(|(event, _)| event == "status")
            .map(|(_, data)| data["status"]["state"].as_str().unwrap_or("?"))
            .collect();
        ensure(
            states.first() == Some(&"working") && states.last() == Some(&"completed"),
            || {
                format!(
                    "task {id} went through [{}], not working then completed",
                    states.join(", ")
                )
            },
        )?;
    }
    served.stop(LIMIT);
    Ok(())
}
