            // Only a decision (`outcome: none`) can be refused: an observation comes
            // after the call ran.
            Event::ToolCall(call) if call.outcome.is_none() => {
                Ok(judge(&call.tool_name, &call.input))
            }
            Event::ToolCall(_) => Ok(Verdict::None),
//--
/// Inputs this hook refuses, by a substring of the call's JSON input.
const DENIED: &[&str] = &["rm -rf", "sudo "];

/// `deny`: refuses a call whose input matches a rule, with the reason the model reads.
fn judge(tool: &str, input: &str) -> Verdict {
    match DENIED.iter().find(|rule| input.contains(*rule)) {
        Some(rule) => Verdict::Deny(format!(
            "{{name}} refused the call of '{tool}': its input contains \"{rule}\""
        )),
        None => Verdict::None,
    }
}
