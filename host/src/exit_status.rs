//! How a task or a session ended, as the trace's `exit_status` and the launcher's
//! `status:` line name it.

/// How a task or a session ended: the trace's `exit_status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    Ok,
    Failed,
    MaxTurnsReached,
    /// An `on-task-end` hook still wanted a reopen when the reopens or turns ran out.
    ReopenBudgetExhausted,
    Canceled,
    /// The session loop ran past its deadline (a session's status, never a task's).
    DeadlineReached,
    /// A spend ceiling refused an inference call (`crate::spend`).
    SpendCeilingReached,
}

impl ExitStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ExitStatus::Ok => "ok",
            ExitStatus::Failed => "failed",
            ExitStatus::MaxTurnsReached => "max_turns_reached",
            ExitStatus::ReopenBudgetExhausted => "reopen_budget_exhausted",
            ExitStatus::Canceled => "canceled",
            ExitStatus::DeadlineReached => "deadline_reached",
            ExitStatus::SpendCeilingReached => "spend_ceiling_reached",
        }
    }

    /// The session's status when its last task ended this way: a session's statuses are
    /// upstream's, so a task status beyond them ends the session `failed`.
    pub fn for_session(self) -> ExitStatus {
        match self {
            ExitStatus::ReopenBudgetExhausted => ExitStatus::Failed,
            other => other,
        }
    }
}

impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
