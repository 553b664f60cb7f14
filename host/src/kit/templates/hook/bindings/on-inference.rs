            Event::Inference(turn) => Ok(report(turn.turn, &turn.decision, turn.output_tokens)),
//--
/// An `artifact`: a JSON object the host reports as an `artifact` frame before the
/// task's final status. No commit policy is needed for it.
fn report(turn: u32, decision: &str, output_tokens: u64) -> Verdict {
    // `decision` is one of a few fixed words, so it needs no JSON escaping.
    Verdict::Artifact(format!(
        r#"{{"hook":"{{name}}","turn":{turn},"decision":"{decision}","output_tokens":{output_tokens}}}"#
    ))
}
