//! Shell commands that outlived `lifecycle.shell_grace_secs` and run in the background.
//!
//! The shell module moves the command off the turn; this module keeps the session's
//! account of it: `shell_detached` when it leaves the turn, then exactly one of
//! `shell_completed` (its result enqueued as a `completion` task under the context that
//! started it) or `shell_abandoned` (the session ended first, so its group is killed).
//! Whoever takes a command out of the registry first writes its ending, so it is
//! never reported twice.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::task::{AbortHandle, JoinHandle};

use crate::ids;
use crate::queue::{Origin, Pending, Queue, Source};
use crate::quota::Quota;
use crate::shell::{Background, Ended};
use crate::trace::line::{self, Breach, Completed, Detached};
use crate::trace::{Place, SessionTrace};
use crate::workdir::Workdir;

/// How long teardown waits for a killed command's task to let go of it.
const ABANDON_WAIT: Duration = Duration::from_secs(5);

/// The detached commands still running, by work id, with what their endings reach:
/// the trace, the queue their results go to, and the workdir quota checked then.
pub struct Registry {
    works: Mutex<HashMap<String, Work>>,
    trace: Arc<SessionTrace>,
    queue: Arc<Queue>,
    quota: Quota,
    /// The host log, for a trace line that could not be written.
    workdir: Arc<Workdir>,
}

struct Work {
    binary: String,
    command: String,
    display: String,
    log_path: PathBuf,
    started: Instant,
    context_id: String,
    task_id: String,
    /// The `shell_detached` line: parent of the ending's line.
    detached_event: String,
    /// Aborting the command's task drops it, which kills its process group.
    abort: AbortHandle,
    watcher: Option<JoinHandle<()>>,
}

impl Work {
    /// The command as its ending lines name it.
    fn named<'a>(&'a self, work_id: &'a str) -> line::Work<'a> {
        line::Work {
            work_id,
            binary: &self.binary,
            command: &self.command,
        }
    }

    fn place(&self) -> Place<'_> {
        Place {
            parent: Some(&self.detached_event),
            task: Some(&self.task_id),
        }
    }
}

/// Where a command was started from: the task, its context and its turn.
pub struct StartedFrom {
    pub task_id: String,
    pub context_id: String,
    pub turn: u64,
    /// The trace line the `shell_detached` line hangs under (the turn).
    pub parent: String,
}

impl Registry {
    pub fn new(
        trace: Arc<SessionTrace>,
        queue: Arc<Queue>,
        quota: Quota,
        workdir: Arc<Workdir>,
    ) -> Self {
        Registry {
            works: Mutex::default(),
            trace,
            queue,
            quota,
            workdir,
        }
    }

    fn works(&self) -> MutexGuard<'_, HashMap<String, Work>> {
        self.works.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self, work_id: &str) -> Option<Work> {
        self.works().remove(work_id)
    }
}

/// Takes over a command that just detached: traces it and watches for its end.
///
/// # Errors
///
/// The `shell_detached` line could not be written; the command is killed, since a
/// command the trace does not know of could never be accounted for.
pub fn start(
    registry: &Arc<Registry>,
    background: Background,
    from: StartedFrom,
) -> std::io::Result<()> {
    let detached = line::shell_detached(&Detached {
        turn: from.turn,
        task_id: &from.task_id,
        context_id: &from.context_id,
        work_id: &background.work_id,
        binary: &background.resolved_binary,
        command: &background.command,
        grace_ms: millis(background.grace),
        output_path: &background.log_path,
        pid: background.pid,
    });
    let place = Place {
        parent: Some(&from.parent),
        task: Some(&from.task_id),
    };
    let detached_event = match registry.trace.write(place, detached) {
        Ok(event) => event,
        Err(e) => {
            background.task.abort();
            return Err(e);
        }
    };
    let work_id = background.work_id.clone();
    registry.works().insert(
        work_id.clone(),
        Work {
            binary: background.resolved_binary,
            command: background.command,
            display: background.display,
            log_path: background.log_path,
            started: background.started,
            context_id: from.context_id,
            task_id: from.task_id,
            detached_event,
            abort: background.task.abort_handle(),
            watcher: None,
        },
    );
    let watcher = tokio::spawn(watch(registry.clone(), work_id.clone(), background.task));
    if let Some(work) = registry.works().get_mut(&work_id) {
        work.watcher = Some(watcher);
    }
    Ok(())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

async fn watch(registry: Arc<Registry>, work_id: String, task: JoinHandle<Ended>) {
    let ended = task.await;
    // Gone when teardown abandoned it first: its ending is already written.
    let Some(work) = registry.take(&work_id) else {
        return;
    };
    let ended = ended.unwrap_or_else(|e| Ended {
        exit_code: -1,
        duration_ms: millis(work.started.elapsed()),
        output_bytes: 0,
        timed_out: false,
        error: Some(format!("the command's task failed: {e}")),
        tail: String::new(),
        resource_limit: None,
    });
    let breach = registry.quota_after(&work_id, &work).await;
    registry.complete(&work_id, &work, &ended, breach);
}

impl Registry {
    /// The workdir quota, checked when a detached command ends as after every tool
    /// call: over it, the trace says so and the completion task fails with the breach.
    async fn quota_after(&self, work_id: &str, work: &Work) -> Option<String> {
        let measured = self.quota.exceeded().await?;
        let breach = Breach {
            bytes: measured.bytes,
            baseline: self.quota.baseline,
            limit_bytes: self.quota.limit,
        };
        let written = self
            .trace
            .write(work.place(), line::quota_breach_after_work(work_id, breach));
        if let Err(e) = written {
            self.workdir.log(&format!(
                "could not write workdir_quota_breach for {work_id}: {e}"
            ));
        }
        Some(self.quota.breach_text(&measured))
    }

    /// `shell_completed`, and the result as a `completion` task in the `bg` lane.
    fn complete(&self, work_id: &str, work: &Work, ended: &Ended, breach: Option<String>) {
        let task_id = ids::task();
        let ok = ended.exit_code == 0
            && !ended.timed_out
            && ended.error.is_none()
            && ended.resource_limit.is_none();
        let completed = line::shell_completed(
            &work.named(work_id),
            &Completed {
                exit_code: ended.exit_code,
                duration_ms: ended.duration_ms,
                output_path: &work.log_path,
                output_bytes: ended.output_bytes,
                ok,
                completion_task_id: &task_id,
                resource_limit: ended.resource_limit,
            },
        );
        if let Err(e) = self.trace.write(work.place(), completed) {
            // The task below still carries the result; only the record of it is missing.
            self.workdir.log(&format!(
                "could not write shell_completed for {work_id}: {e}"
            ));
        }
        let mut text = completion_text(work_id, work, ended);
        if let Some(why) = &breach {
            text.push_str(&format!("\nThe workdir is over its quota: {why}"));
        }
        self.queue.push_own(Pending {
            breach,
            id: task_id,
            context_id: work.context_id.clone(),
            text,
            origin: Origin::Completion,
            source: Source::DetachedShell,
            message_id: None,
            traceparent: None,
        });
    }

    /// At session end: every command still running is recorded `shell_abandoned` (trace
    /// and stderr) and its process group killed, so the session leaves no orphans behind.
    pub async fn abandon_all(&self) {
        let mut works: Vec<(String, Work)> = self.works().drain().collect();
        // Work ids sort by creation, so the report follows the order they were started.
        works.sort_by(|a, b| a.0.cmp(&b.0));
        for (work_id, work) in works {
            let abandoned =
                line::shell_abandoned(&work.named(&work_id), millis(work.started.elapsed()));
            if let Err(e) = self.trace.write(work.place(), abandoned) {
                eprintln!("[murmur] could not write shell_abandoned for {work_id}: {e}");
            }
            // The command is the model's text: one escaped line, never a line of its own.
            eprintln!(
                "[murmur] shell_abandoned: {work_id} ({}): its result is lost; killing its process group",
                crate::escape::line(&work.command)
            );
            work.abort.abort();
            // The watcher ends once the aborted task has been dropped, i.e. the group killed.
            if let Some(watcher) = work.watcher {
                let _ = tokio::time::timeout(ABANDON_WAIT, watcher).await;
            }
        }
    }
}

fn completion_text(work_id: &str, work: &Work, ended: &Ended) -> String {
    let mut text = format!(
        "The background command {work_id} has ended.\nCommand: {}\nExit code: {}\n\
         Duration: {} ms\nOutput: {} bytes, in {}\n",
        work.display,
        ended.exit_code,
        ended.duration_ms,
        ended.output_bytes,
        work.log_path.display()
    );
    if ended.timed_out {
        text.push_str("It ran past the shell deadline and was killed.\n");
    }
    if let Some(limit) = ended.resource_limit {
        text.push_str(&format!(
            "It was killed by the sandbox: it passed {limit}.\n"
        ));
    }
    if let Some(error) = &ended.error {
        text.push_str(&format!("Problem: {error}\n"));
    }
    if ended.tail.is_empty() {
        text.push_str("It printed nothing.");
    } else {
        text.push_str(&format!(
            "Last {} bytes of its output:\n{}",
            ended.tail.len(),
            ended.tail
        ));
    }
    text
}
