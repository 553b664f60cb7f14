//! How much the task store keeps: of each task's events, of its tool results, and of
//! all its tasks' text.

/// How many of a task's events are kept for resubscription. While it runs, its latest
/// `events` (and `bytes`); once it has ended, its latest `ended`, when a late reader can
/// read the whole task with `GetTask`. Those trims never take an event a connection
/// following the task has not read yet: a live stream is never cut because its task
/// raced ahead. Only past `hard_events` or `hard_bytes` is a follower that far behind
/// left behind (and told so), so one stalled client cannot hold a task's log unbounded.
#[derive(Clone, Copy, Debug)]
pub struct Cap {
    pub events: usize,
    pub bytes: usize,
    pub ended: usize,
    pub hard_events: usize,
    pub hard_bytes: usize,
    /// How much of its tool results one task keeps (the stream carries each whole): a
    /// model may call a tool a thousand times for megabytes each.
    pub task_results: usize,
    /// How much text the whole store keeps (messages and artifacts, all tasks). Past
    /// it the oldest ended tasks go first, whatever `lifecycle.task_history` allows.
    pub store_text: usize,
}

impl Default for Cap {
    fn default() -> Self {
        Cap {
            events: 4096,
            bytes: 4 * 1024 * 1024,
            ended: 256,
            hard_events: 16_384,
            // A task's answer is logged up to three times (its chunks, the `response`
            // artifact, the final status), and a driver's reply may be 16 MiB.
            hard_bytes: 64 * 1024 * 1024,
            task_results: 16 * 1024 * 1024,
            store_text: 256 * 1024 * 1024,
        }
    }
}
