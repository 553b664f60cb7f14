//! One task over the wire, for the driver and hook scenarios: the scratch capsule
//! ([`super::super::capsule`]) runs with no task on its command line, so it serves one
//! task and ends; the task is sent as `message/stream`, and what a user sees is kept —
//! the frames, the exit status, stderr, and the session's records (`trace.jsonl`,
//! `logs/`), which `--records` puts outside the capsule's workdir.

use std::time::Duration;

use serde_json::Value;

use crate::check::capsule::{Finished, Launch, Scratch, first_error};
use crate::check::report::Outcome;

/// Runs the scratch's `murmur.yaml` as a capsule serving one task, sends it `task`
/// and reads the stream to its end; the whole run killed at `limit`.
pub fn stream_one(scratch: Scratch, task: &str, limit: Duration) -> Result<Ran, Outcome> {
    let wd = scratch.dir().join("wd");
    let records = scratch.dir().join("records");
    let args = [
        "--workdir",
        &wd.to_string_lossy(),
        "--records",
        &records.to_string_lossy(),
    ]
    .map(str::to_string);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let served = scratch.spawn(&args, &[], limit)?;
    let launch = served.launch.clone();
    let sent = served.send(1, task, None, limit);
    let finished = served.finish();
    let (frames, problem) = match sent {
        Ok(frames) => (frames, None),
        Err(Outcome::Fail(why) | Outcome::Skip(why)) => (Vec::new(), Some(why)),
        Err(Outcome::Pass) => (Vec::new(), None),
    };
    Ok(Ran {
        _scratch: scratch,
        launch,
        finished,
        frames,
        problem,
    })
}

/// What a run left for a user to see.
pub struct Ran {
    /// Kept until the run has been judged: its records are in there.
    _scratch: Scratch,
    launch: Launch,
    finished: Finished,
    /// `(event, data)` of each frame of the task's stream.
    frames: Vec<(String, Value)>,
    /// Why the stream could not be read, when it could not.
    problem: Option<String>,
}

impl Ran {
    /// The session's trace, read after the process ended.
    pub fn trace(&self) -> Vec<Value> {
        self.launch.trace()
    }

    /// The trace lines of one `event_type`.
    pub fn lines(&self, kind: &str) -> Vec<Value> {
        self.launch.events(kind)
    }

    /// A file of the session's records (`logs/hook-x.log`), written by the host; empty
    /// when absent.
    pub fn record(&self, rel: &str) -> String {
        std::fs::read_to_string(self.launch.records.join(rel)).unwrap_or_default()
    }

    fn last_status(&self) -> Option<&Value> {
        self.frames
            .iter()
            .rev()
            .find(|(event, _)| event == "status")
            .map(|(_, data)| &data["status"])
    }

    /// The state of the last status frame (`completed`, `failed`, ...).
    pub fn final_state(&self) -> Option<String> {
        self.last_status()
            .and_then(|s| s["state"].as_str())
            .map(str::to_string)
    }

    /// The completed task's answer.
    pub fn response(&self) -> String {
        self.last_status()
            .and_then(|s| s["response"].as_str())
            .unwrap_or_default()
            .to_string()
    }

    /// Why the task failed, in the host's words: its `task_failed` reason, else the
    /// failed inference's error, else the last status message.
    pub fn failure(&self) -> String {
        let trace = self.trace();
        let said = |kind: &str, key: &str| {
            trace
                .iter()
                .rev()
                .find(|l| l["event_type"] == kind && l[key].is_string())
                .and_then(|l| l[key].as_str())
                .map(str::to_string)
        };
        said("task_failed", "reason")
            .or_else(|| said("inference", "error"))
            .or_else(|| {
                self.last_status()
                    .and_then(|s| s["message"].as_str())
                    .map(str::to_string)
            })
            .unwrap_or_default()
    }

    /// The text of each non-final `text` frame, in order.
    pub fn text_pieces(&self) -> Vec<String> {
        self.frames
            .iter()
            .filter(|(event, data)| event == "text" && data["final"] != true)
            .map(|(_, data)| data["text"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// How the run ended, for a failure message.
    pub fn ending(&self) -> String {
        let status = match (self.finished.timed_out, self.finished.status) {
            (true, _) => "mur was stopped at its time limit".to_string(),
            (false, Some(code)) => format!("mur exited {code}"),
            (false, None) => "mur was killed".to_string(),
        };
        let mut out = match self.final_state() {
            Some(state) if state == "completed" => format!("completed ({status})"),
            Some(state) => format!("ended {state}: {} ({status})", self.failure()),
            None => format!("sent no final status ({status})"),
        };
        if let Some(problem) = &self.problem {
            out.push_str(&format!("; {problem}"));
        }
        if self.finished.stderr.contains("error[") {
            // Its hint names files of the scratch capsule, which are gone by now.
            let error = first_error(&self.finished.stderr);
            let error = error.split(" hint: ").next().unwrap_or_default();
            out.push_str(&format!("; {error}"));
        }
        out
    }
}
