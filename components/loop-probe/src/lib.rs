//! A test loop that calls the host with bad input and reports what the host answered,
//! so the tests can read every refusal's exact words in the task's result.
//!
//! Before it takes its first task it calls what needs a task (`infer`, `status`,
//! `budget`, `compact`, `call-tools`, `finish-task`) and keeps the answers as notes. A task's text holds one command per line (see [`command`]); the task's
//! result has a line per command, `<the command>: <what the host answered>` in the
//! words of [`words`].

wit_bindgen::generate!({
    path: ["../../wit/message", "../../wit/text", "../../wit/session"],
    world: "murmur:session/session-loop",
    // `murmur:message` and `murmur:text` are other packages: their bindings are asked for.
    generate_all,
});

mod command;
mod outside;
mod words;

use exports::murmur::session::loop_::{Config, Guest};
use murmur::session::host;
use murmur::session::types::TaskOutcome;

struct Component;

impl Guest for Component {
    fn run(_config: Config) -> Result<(), String> {
        // Answers that cannot be reported in the task they were asked in: the calls
        // outside a task, those after `finish-task`. The `report` command lists them.
        let mut notes = outside::probe();
        while let Some(task) = host::next_task() {
            let mut commands = task.text;
            // `None`: a command ended the task itself.
            while let Some(lines) = command::run_all(&commands, &mut notes) {
                let outcome = TaskOutcome::Completed(lines.join("\n"));
                // A reopened task runs the hook's feedback as more commands.
                match host::finish_task(&outcome, None)? {
                    Some(feedback) => commands = feedback,
                    None => break,
                }
            }
        }
        Ok(())
    }
}

export!(Component);
