//! What the caller has seen of the remote task: its id, its state, its last status
//! message and its artifacts' text, put together from the stream's events (or a
//! `GetTask`), never holding more of the answer than the caller keeps.

use ::a2a::{Artifact, Message, Part, StreamResponse, Task, TaskState, TaskStatus};

/// The text our door's `REJECTED` carries when the capsule has no room (server.rs's
/// `REJECTED_BUSY`): what tells busy from refused.
const BUSY: &str = "capsule is busy";
/// The most artifacts kept apart, and the most of an id that tells them apart: a peer
/// that sends endless new artifacts (or endless ids) costs no more than its text.
const MAX_ARTIFACTS: usize = 256;
const MAX_ID: usize = 256;

pub(super) struct Seen {
    max: usize,
    pub task_id: Option<String>,
    pub context_id: Option<String>,
    pub state: TaskState,
    /// The text parts of the last status message, cut to `max`.
    status: Bounded,
    /// What tells one status message from another: an input request already answered
    /// comes back in a snapshot after a reattach, and must not be asked again.
    status_key: String,
    /// Each artifact's text, by id, in the order they came; together cut to `max`.
    artifacts: Vec<(String, String)>,
    held: usize,
    cut: bool,
    /// The stream's event id, when the door numbers its events.
    pub last_event_id: Option<String>,
    /// How many events have been taken in.
    pub events: u64,
}

#[derive(Default)]
struct Bounded {
    text: String,
    cut: bool,
}

impl Seen {
    pub(super) fn new(max: usize) -> Seen {
        Seen {
            max,
            task_id: None,
            context_id: None,
            state: TaskState::Unspecified,
            status: Bounded::default(),
            status_key: String::new(),
            artifacts: Vec::new(),
            held: 0,
            cut: false,
            last_event_id: None,
            events: 0,
        }
    }

    /// Takes in one event. `Err` says why it cannot be the peer's task's.
    pub(super) fn apply(&mut self, event: StreamResponse) -> Result<(), String> {
        self.events += 1;
        match event {
            StreamResponse::Task(task) => self.task(task),
            StreamResponse::StatusUpdate(update) => {
                self.name(&update.task_id, &update.context_id)?;
                self.status(update.status);
                Ok(())
            }
            StreamResponse::ArtifactUpdate(update) => {
                self.name(&update.task_id, &update.context_id)?;
                let append = update.append.unwrap_or(false);
                self.artifact(update.artifact, append);
                Ok(())
            }
            StreamResponse::Message(message) => {
                // An answer without a task: the message is the whole answer.
                if let Some(task) = &message.task_id {
                    let context = message.context_id.clone().unwrap_or_default();
                    self.name(task, &context)?;
                }
                self.status(TaskStatus {
                    state: TaskState::Completed,
                    message: Some(message),
                    timestamp: None,
                });
                Ok(())
            }
        }
    }

    /// The task as it stands, whole: what was gathered before is replaced.
    pub(super) fn task(&mut self, task: Task) -> Result<(), String> {
        self.name(&task.id, &task.context_id)?;
        self.artifacts.clear();
        self.held = 0;
        self.cut = false;
        for artifact in task.artifacts.unwrap_or_default() {
            self.artifact(artifact, false);
        }
        self.status(task.status);
        Ok(())
    }

    fn name(&mut self, task: &str, context: &str) -> Result<(), String> {
        match &self.task_id {
            Some(known) if known != task => {
                return Err("its stream carried events of another task".into());
            }
            Some(_) => {}
            None if task.is_empty() => return Err("its event names no task".into()),
            None => self.task_id = Some(task.to_string()),
        }
        if self.context_id.is_none() && !context.is_empty() {
            self.context_id = Some(context.to_string());
        }
        Ok(())
    }

    fn status(&mut self, status: TaskStatus) {
        self.state = status.state;
        self.status_key = match &status.message {
            Some(message) => message.message_id.clone(),
            None => status.timestamp.map(|t| t.to_rfc3339()).unwrap_or_default(),
        };
        self.status = status
            .message
            .as_ref()
            .map(|m| bounded(text_of(&m.parts, "\n"), self.max))
            .unwrap_or_default();
    }

    fn artifact(&mut self, artifact: Artifact, append: bool) {
        let text = text_of(&artifact.parts, "\n");
        let (id, _) = crate::peer::bounded(artifact.artifact_id, MAX_ID);
        let found = self.artifacts.iter().position(|(known, _)| *known == id);
        let at = match found {
            Some(at) => {
                if !append {
                    self.held -= self.artifacts[at].1.len();
                    self.artifacts[at].1.clear();
                }
                at
            }
            None if self.artifacts.len() >= MAX_ARTIFACTS => {
                self.cut |= !text.is_empty();
                return;
            }
            None => {
                self.artifacts.push((id, String::new()));
                self.artifacts.len() - 1
            }
        };
        let room = self.max.saturating_sub(self.held);
        let kept = bounded(text, room);
        self.cut |= kept.cut;
        self.held += kept.text.len();
        self.artifacts[at].1.push_str(&kept.text);
    }

    /// The id of the status message the task stands at (an input request's identity).
    pub(super) fn status_key(&self) -> &str {
        &self.status_key
    }

    /// The last status message's text.
    pub(super) fn status_text(&self) -> &str {
        &self.status.text
    }

    /// The answer of a completed task: its final status message's text if it has
    /// any, else its artifacts' text joined by lines; cut to the caller's bound.
    pub(super) fn answer(&self) -> (String, bool) {
        if !self.status.text.is_empty() {
            return (self.status.text.clone(), self.status.cut);
        }
        let parts: Vec<&str> = self
            .artifacts
            .iter()
            .map(|(_, text)| text.as_str())
            .filter(|text| !text.is_empty())
            .collect();
        let (text, cut) = crate::peer::bounded(parts.join("\n"), self.max);
        (text, cut || self.cut)
    }

    /// Whether a rejection says the peer had no room rather than that it refused.
    pub(super) fn rejected_busy(&self) -> bool {
        self.status.text.contains(BUSY)
    }
}

/// The text parts of `parts`, joined by `between`.
fn text_of(parts: &[Part], between: &str) -> String {
    let texts: Vec<&str> = parts.iter().filter_map(Part::as_text).collect();
    texts.join(between)
}

fn bounded(text: String, max: usize) -> Bounded {
    let (text, cut) = crate::peer::bounded(text, max);
    Bounded { text, cut }
}

/// A task's result as a JSON value (from `GetTask`, or a non-streamed answer): a task,
/// or an event.
pub(super) fn parse(value: serde_json::Value) -> Result<StreamResponse, String> {
    let event = if value.get("id").is_some() && value.get("status").is_some() {
        serde_json::from_value::<Task>(value).map(StreamResponse::Task)
    } else {
        serde_json::from_value::<StreamResponse>(value)
    };
    event.map_err(|_| "its answer is not an A2A task or event".to_string())
}

/// A message of the caller's: one text part, fresh id, for the task when it continues
/// one.
pub(super) fn user_message(text: &str, task: Option<&str>, context: Option<&str>) -> Message {
    let mut message = Message::new(::a2a::Role::User, vec![Part::text(text)]);
    message.task_id = task.map(str::to_string);
    message.context_id = context.map(str::to_string);
    message
}
