//! A session loop that misbehaves on purpose, so the host's deadline, stop and cancel
//! paths can be tested end to end. `MUR_HOSTILE` (granted through
//! `capabilities.env.allow`) picks how:
//! - `sleep-in-run`: takes a task, then sleeps in guest code for an hour;
//! - `sleep-before-next`: sleeps for an hour before it asks for a task;
//! - `host-call-loop`: takes a task, then calls `infer` without end (past `max_turns`
//!   each call returns at once);
//! - `trap-early`: panics before it asks for a task;
//! - `sleep-then-trap`: sleeps 3 s, then panics before it asks for a task (so tasks
//!   can queue up meanwhile);
//! - `return-early`: returns before it asks for a task.

wit_bindgen::generate!({
    path: ["../../wit/message", "../../wit/text", "../../wit/session"],
    world: "murmur:session/session-loop",
    // `murmur:message` and `murmur:text` are other packages: their bindings are asked for.
    generate_all,
});

use exports::murmur::session::loop_::{Config, Guest};
use murmur::message::types::{Block, Message, Role};
use murmur::session::host;
use murmur::session::types::{InferenceRequest, Params, TaskOutcome};
use std::time::Duration;

struct Component;

const AN_HOUR: Duration = Duration::from_secs(3600);

impl Guest for Component {
    fn run(_config: Config) -> Result<(), String> {
        let mode = std::env::var("MUR_HOSTILE").unwrap_or_default();
        match mode.as_str() {
            "sleep-in-run" => {
                if host::next_task().is_some() {
                    // A WASI clock wait: a host future, outside every murmur host call.
                    std::thread::sleep(AN_HOUR);
                }
            }
            "sleep-before-next" => std::thread::sleep(AN_HOUR),
            "host-call-loop" => {
                if host::next_task().is_some() {
                    flood();
                }
            }
            "trap-early" => panic!("the hostile loop traps before next-task"),
            "sleep-then-trap" => {
                std::thread::sleep(Duration::from_secs(3));
                panic!("the hostile loop traps before next-task")
            }
            "return-early" => return Ok(()),
            other => return Err(format!("unknown MUR_HOSTILE mode '{other}'")),
        }
        // Only reached if the host let a sleep end: report it, so a test would see it
        // (after `sleep-before-next` no task runs and the host's refusal is moot).
        let _ = host::finish_task(
            &TaskOutcome::Completed("the hostile loop woke up".into()),
            None,
        );
        Ok(())
    }
}

/// Host calls without pause; once the turns are used up each returns at once, so only
/// a deadline that host calls do not reset can stop it.
fn flood() -> ! {
    let request = InferenceRequest {
        messages: vec![Message {
            role: Role::User,
            content: vec![Block::Text("again".into())],
        }],
        system: None,
        tools: Some(Vec::new()),
        max_tokens: None,
        params: Params {
            temperature: None,
            top_p: None,
            stop: Vec::new(),
        },
    };
    loop {
        let _ = host::infer(&request);
    }
}

export!(Component);
