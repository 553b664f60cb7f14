            // Only a decision (`outcome: none`) can be refused: an observation comes
            // after the command ran.
            Event::Shell(call) if call.outcome.is_none() => Ok(judge(&call.binary, &call.command)),
            Event::Shell(_) => Ok(Verdict::None),
//--
/// Binaries this hook refuses, by file name.
const DENIED: &[&str] = &["rm", "sudo"];

/// `deny`: refuses a command of a listed binary, with the reason the model reads.
fn judge(binary: &str, command: &str) -> Verdict {
    // `binary` is resolved (an absolute path when found); `command` holds its arguments.
    let name = binary.rsplit('/').next().unwrap_or(binary);
    if DENIED.contains(&name) {
        return Verdict::Deny(format!(
            "{{name}} refused `{name} {command}`: '{name}' may not run"
        ));
    }
    Verdict::None
}
