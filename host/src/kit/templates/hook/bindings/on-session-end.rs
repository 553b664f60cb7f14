            Event::SessionEnd(end) => Ok(observe_end(end.total_turns)),
//--
/// `on-session-end` commits nothing: a hook bound here observes the totals (into a
/// file in its `capabilities.filesystem.scope`, say) and proceeds.
fn observe_end(total_turns: u32) -> Verdict {
    let _ = total_turns;
    Verdict::None
}
