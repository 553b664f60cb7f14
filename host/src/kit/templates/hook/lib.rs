//! `{{name}}`: a lifecycle hook (world `murmur:hook/hook`), scaffolded for `{{binding}}`.
//!
//! The host hands it every event of the bindings the manifest binds it to and commits
//! its verdict only when the hook's `commit_policy` allows that verdict there
//! (`{{binding}}` commits `{{policy}}`). `Verdict::None` always means "proceed". An
//! `Err` is logged to `logs/hook-<name>.log`; at a decision point it refuses the call.

wit_bindgen::generate!({
    path: ["wit/message", "wit/hook"],
    world: "murmur:hook/hook",
    // `murmur:message` is a package of its own: ask for its bindings.
    generate_all,
});

use exports::murmur::hook::lifecycle::{Event, Guest, Verdict};

struct Component;

impl Guest for Component {
    fn handle(event: Event) -> Result<Verdict, String> {
        match event {
            // Before the session loop exists: may write tool manifests (`write-manifests`).
            Event::Stage(_) => Ok(Verdict::None),
            // The session started; nothing to commit.
            Event::SessionStart(_) => Ok(Verdict::None),
            // A task starts: may seed its context (`seed-context`).
            Event::TaskStart(_) => Ok(Verdict::None),
            // A model turn ended: may report an `artifact` (no policy needed).
            Event::Inference(_) => Ok(Verdict::None),
            // Before (`outcome: none`) and after a tool call: may refuse it (`deny`).
            Event::ToolCall(_) => Ok(Verdict::None),
            // The same for a shell command: may refuse it (`deny`).
            Event::Shell(_) => Ok(Verdict::None),
            // The conversation grew past the threshold: may replace it (`replace-context`).
            Event::Compaction(_) => Ok(Verdict::None),
            // An attempt ended: may run the task again (`reopen-task`).
            Event::TaskEnd(_) => Ok(Verdict::None),
            // The session ended; nothing to commit.
            Event::SessionEnd(_) => Ok(Verdict::None),
        }
    }
}
{{helpers}}
export!(Component);
