//! A hostile session loop for the limits tests: it calls `call-tool` in a tight loop,
//! forever, ignoring every result. Only the host's bounds can stop it.

wit_bindgen::generate!({
    path: "../../wit/session",
    world: "murmur:session/session-loop",
});

use exports::murmur::session::loop_::{Config, Guest};
use murmur::session::host;
use murmur::session::types::ToolCall;

struct Component;

impl Guest for Component {
    fn run(_config: Config) -> Result<(), String> {
        let Some(_task) = host::next_task() else {
            return Ok(());
        };
        let call = ToolCall {
            id: String::new(),
            name: "nothing".into(),
            input: "{}".into(),
        };
        loop {
            host::call_tool(&call);
        }
    }
}

export!(Component);
