//! A hostile session loop for the limits tests: it calls `call-tools` in a tight loop,
//! one call at a time, forever, ignoring every result. Only the host's bounds can stop it.

wit_bindgen::generate!({
    path: ["../../wit/message", "../../wit/text", "../../wit/session"],
    world: "murmur:session/session-loop",
    // `murmur:message` and `murmur:text` are other packages: their bindings are asked for.
    generate_all,
});

use exports::murmur::session::loop_::{Config, Guest};
use murmur::message::types::ToolCall;
use murmur::session::host;

struct Component;

impl Guest for Component {
    fn run(_config: Config) -> Result<(), String> {
        let Some(_task) = host::next_task() else {
            return Ok(());
        };
        // No inference in between: every call counts against the same reply's bound.
        let calls = [ToolCall {
            id: String::new(),
            name: "nothing".into(),
            input: "{}".into(),
        }];
        loop {
            let _ = host::call_tools(&calls);
        }
    }
}

export!(Component);
