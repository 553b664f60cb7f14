//! CPU shares under `mur serve`: guests that fill the processors are charged for
//! what they use and held to their share, weighted, while a neighbour's task runs to
//! its end; the admin API shows the figures; shell commands run at the nice of their
//! capsule's share. Asserted on the CPU accounting, never on wall time.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::served::{Create, Served, scripted};
use crate::common::sse_frames::Frame;
use crate::common::*;

const WAIT: Duration = Duration::from_secs(60);

/// How long each spinning task burns CPU before its deadline ends it.
const SPIN_SECS: u64 = 4;

fn spinner_yaml(name: &str) -> String {
    driver_manifest(
        name,
        "probe-driver",
        MUR_DRIVER_PROBE,
        "{mode: spin}",
        &format!("  limits:\n    deadline_seconds: {SPIN_SECS}\n"),
        "  task_acceptance: queue\n  after_task: sleep\n",
    )
}

fn last(frames: &[Frame]) -> &Frame {
    frames.last().expect("the stream had frames")
}

fn cpu(served: &Served, id: &str) -> Value {
    served.capsule(id)["cpu"].clone()
}

fn seconds(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

/// One spinner more than there are processors, one of them weighted four times the
/// others: each is charged, each is held back (paused), the heavy one gets more, and a
/// neighbour's task with a shell call completes meanwhile.
#[test]
fn spinning_guests_are_charged_and_held_to_weighted_shares_while_a_neighbour_completes() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let served = Served::start_with("cpu-shares", &["--cpu-share", "0.05"], &[]);
    let light: Vec<_> = (0..cores)
        .map(|i| served.create(&Create::yaml(&spinner_yaml(&format!("light-{i}")))))
        .collect();
    let heavy = served.create(&Create::yaml(&spinner_yaml("heavy")).limits(json!({"cpu": 0.2})));
    let neighbour = served.create_scripted(
        "neighbour",
        "turns:\n  - tool_calls:\n      - id: t1\n        name: bash\n        input: {command: \"echo neighbour\"}\n  - text: the neighbour is done\n",
    );

    let mut streams: Vec<_> = light
        .iter()
        .chain([&heavy])
        .map(|c| c.stream("spin"))
        .collect();
    for s in &mut streams {
        assert_eq!(s.frame(WAIT).state(), "working");
    }
    std::thread::sleep(Duration::from_millis(500));
    let frames = neighbour.message("work beside them");
    assert_eq!(last(&frames).state(), "completed", "{frames:#?}");
    assert_eq!(
        last(&frames).data["status"]["response"],
        "the neighbour is done"
    );
    for s in &mut streams {
        let rest = s.rest(WAIT);
        assert_eq!(last(&rest).state(), "failed", "{rest:#?}");
    }

    let heavy_cpu = cpu(&served, &heavy.id);
    assert_eq!(heavy_cpu["share"], json!(0.2), "{heavy_cpu}");
    let heavy_used = seconds(&heavy_cpu, "guest_seconds");
    // Nobody runs past its deadline, nor uses more than a processor.
    assert!(
        heavy_used > 0.1 && heavy_used < SPIN_SECS as f64 + 1.0,
        "{heavy_cpu}"
    );
    let mut light_used = Vec::new();
    for c in &light {
        let figures = cpu(&served, &c.id);
        assert_eq!(figures["share"], json!(0.05), "{figures}");
        assert!(seconds(&figures, "guest_seconds") > 0.05, "{figures}");
        // Held back: it paused at its ticks rather than run on.
        assert!(seconds(&figures, "throttled_seconds") > 0.1, "{figures}");
        light_used.push(seconds(&figures, "guest_seconds"));
    }
    let most_light = light_used.iter().cloned().fold(0.0, f64::max);
    assert!(
        heavy_used > 1.5 * most_light,
        "the heavy spinner used {heavy_used} s, a light one up to {most_light} s"
    );
    let figures = cpu(&served, &neighbour.id);
    assert_eq!(figures["share"], json!(0.05), "{figures}");
}

/// A capsule's shell commands run at the nice its share maps to, which the admin API
/// names, and in its own CPU cgroup where the start line says one can be had; a share
/// of the whole machine keeps the host's priority and needs no group.
#[test]
fn shell_commands_run_at_the_nice_and_in_the_cpu_group_of_their_capsules_share() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let served = Served::start("cpu-nice");
    let in_force = served.launch["cpu"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let v1_group = in_force.contains("cgroup v1 cpu group");
    let script = "turns:\n  - tool_calls:\n      - id: t1\n        name: bash\n        input: {command: \"nice; grep -E '^[0-9]+:([a-z]+,)*cpu(,[a-z]+)*:' /proc/self/cgroup || true\"}\n  - text: \"{{last_tool_result}}\"\n";
    let small = served.create(&Create::yaml(&scripted("nice-small", script, "")));
    let whole = served
        .create(&Create::yaml(&scripted("nice-whole", script, "")).limits(json!({"cpu": cores})));
    for (capsule, expected) in [(&small, None), (&whole, Some(0))] {
        let figures = cpu(&served, &capsule.id);
        let nice = figures["shell_nice"].as_i64().unwrap_or(-1);
        if let Some(expected) = expected {
            assert_eq!(nice, expected, "{figures}");
        } else {
            assert!(nice > 0, "{figures}");
        }
        let frames = capsule.message("how nice?");
        let answer = last(&frames).data["status"]["response"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            answer.contains(&format!("Stdout:\n{nice}\n")),
            "expected nice {nice}: {answer}"
        );
        // Under cgroup v1, a capsule below the whole machine has a group of its own,
        // named for this server's process.
        let grouped = answer.contains(&format!("/mur-{}-", served.pid()));
        assert_eq!(grouped, v1_group && nice > 0, "{in_force}: {answer}");
    }
}

/// A share outside a thousandth to 1024 cores is refused at creation, naming it.
#[test]
fn a_share_out_of_range_is_refused_with_its_reason() {
    let served = Served::start("cpu-refused");
    for bad in [json!(0), json!(-1), json!(5000), json!("half")] {
        let reply = served.try_create(
            &Create::yaml(&scripted("refused", "turns: []\n", "")).limits(json!({"cpu": bad})),
        );
        assert_eq!(reply.status, 400, "{bad}: {reply:?}");
        let body = reply.json();
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!(
                "limits.cpu is {bad}: a share is a number of cores from 0.001 to 1024, such as 0.5"
            )),
            "{bad}: {body}"
        );
    }
}
