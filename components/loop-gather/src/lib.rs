//! A session loop of the 0.3.0 world that gathers: it hands each task to every peer
//! the capsule may call, all at once, and answers with what each said, one peer after
//! another in the order `names()` gives. No model is asked: the loop owns what happens
//! next, and here that is fanning out and gathering.

wit_bindgen::generate!({
    path: [
        "../../wit/message",
        "../../wit/text",
        "../../wit/session",
        "../../wit/session-0.3.0",
    ],
    world: "murmur:session/session-loop@0.3.0",
    generate_all,
});

use exports::murmur::session0_2_0::loop_::{Config, Guest};
use murmur::session0_2_0::host;
use murmur::session0_2_0::types::TaskOutcome;
use murmur::session0_3_0::peers::{self, PeerTask};

struct Component;

impl Guest for Component {
    fn run(_config: Config) -> Result<(), String> {
        while let Some(task) = host::next_task() {
            let outcome = gather(&task.text);
            // A reopened task is gathered again: the peers may answer differently.
            while host::finish_task(&outcome, None)?.is_some() {}
        }
        Ok(())
    }
}

/// Every peer's answer to `text`, or why there is none, as `name: answer` paragraphs.
fn gather(text: &str) -> TaskOutcome {
    let names = peers::names();
    if names.is_empty() {
        return TaskOutcome::Failed("the gather loop has no peer to call".into());
    }
    let _ = host::status(&format!("asking {} peers at once", names.len()));
    let calls: Vec<PeerTask> = names
        .iter()
        .map(|peer| PeerTask {
            peer: peer.clone(),
            task: text.to_string(),
        })
        .collect();
    match peers::call(&calls) {
        Err(why) => TaskOutcome::Failed(why),
        Ok(answers) => {
            let parts: Vec<String> = names
                .iter()
                .zip(answers)
                .map(|(name, answer)| match answer {
                    Ok(text) => format!("{name}:\n{text}"),
                    Err(why) => format!("{name} gave no answer:\n{why}"),
                })
                .collect();
            TaskOutcome::Completed(parts.join("\n\n"))
        }
    }
}

export!(Component);
