            Event::TaskEnd(end) => Ok(review(&end.exit_status, &end.result, end.attempt)),
//--
/// `reopen-task`: runs the task once more, with feedback, when its first attempt ended
/// `ok` with an empty answer. Every attempt shares the task's turn budget.
fn review(exit_status: &str, result: &str, attempt: u32) -> Verdict {
    if exit_status == "ok" && result.trim().is_empty() && attempt == 1 {
        return Verdict::ReopenTask("Your answer was empty: answer the task.".into());
    }
    Verdict::None
}
