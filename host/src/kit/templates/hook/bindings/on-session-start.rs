            Event::SessionStart(start) => Ok(observe_start(&start.session_id)),
//--
/// `on-session-start` commits nothing: a hook bound here observes (a count, a
/// timestamp, a file in its `capabilities.filesystem.scope`) and proceeds.
fn observe_start(session_id: &str) -> Verdict {
    let _ = session_id;
    Verdict::None
}
