//! A remote A2A v1.0 agent, named in the manifest's `peers[]` by its agent card's URL
//! and called over HTTP: the card read once for its JSON-RPC interface, then each call
//! one task sent with `SendStreamingMessage` and followed to its end.
//!
//! Everything the peer sends is hostile input: every event and body is bounded, the
//! answer is held only up to what the caller keeps, and the peer's words reach a
//! failure escaped and cut. Failures name the peer by its manifest name only, never
//! its URL, port or token: they are what the caller's model reads.
//!
//! A stream that breaks before the task ends is reattached (`SubscribeToTask`, from the
//! last event the door numbered when it numbers them), and a task that ended meanwhile
//! is read with `GetTask`, so an answer comes back whole. A call abandoned before its
//! task ended (its own task canceled, its deadline passed) cancels the remote task.

mod card;
mod seen;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use ::a2a::{Message, TaskState};
use mur_authority::NetRule;
use serde_json::json;
use tokio::sync::{OnceCell, watch};

use super::{Answer, Ask, Failure, FailureKind, Watcher};
use card::Endpoint;
use seen::{Seen, user_message};
use wire::{Carried, Door, Reply, Trouble};

/// The waits before each reattach of a broken stream; one attempt each.
const REATTACH_AFTER: [Duration; 3] = [
    Duration::from_millis(100),
    Duration::from_millis(400),
    Duration::from_millis(1600),
];
/// How long the cancel of an abandoned call may take.
const CANCEL_WITHIN: Duration = Duration::from_secs(5);

pub struct Remote {
    name: String,
    card_url: String,
    token: Option<String>,
    allow: Vec<NetRule>,
    /// The card's interface, once read: a failed read leaves it empty, so the next
    /// call tries again.
    endpoint: OnceCell<Endpoint>,
    /// How many cancels of abandoned calls are still on their way.
    cancelling: Arc<watch::Sender<usize>>,
}

impl Remote {
    /// The peer `name` (its manifest name, the only one failures show) whose card is at
    /// `card_url`, called with `token` when its door wants one, through `allow`.
    pub fn new(name: &str, card_url: &str, token: Option<String>, allow: Vec<NetRule>) -> Remote {
        if let Some(token) = &token {
            crate::secret::set(token);
        }
        Remote {
            name: name.to_string(),
            card_url: card_url.to_string(),
            token,
            allow,
            endpoint: OnceCell::new(),
            cancelling: Arc::new(watch::Sender::new(0)),
        }
    }

    /// Waits (at most the time a cancel may take) until every abandoned call's cancel
    /// has been sent and answered, so that a caller told "its task was canceled" is
    /// told so only once the peer has heard it, even when the process ends next.
    pub async fn settled(&self) {
        let mut seen = self.cancelling.subscribe();
        let _ = tokio::time::timeout(CANCEL_WITHIN, seen.wait_for(|n| *n == 0)).await;
    }

    /// One call. Never panics; every failure is a [`Failure`] naming the peer by name.
    pub async fn call(&self, ask: &Ask, watcher: &dyn Watcher) -> Result<Answer, Failure> {
        let endpoint = self
            .endpoint
            .get_or_try_init(|| card::endpoint(self))
            .await?
            .clone();
        let carried = Carried {
            call_id: &ask.call_id,
            caller_task: &ask.caller_task,
            chain: ask.chain.header(),
            traceparent: ask.traceparent.as_deref(),
            token: self.token.as_deref(),
        };
        let headers = carried
            .headers()
            .map_err(|()| card::bad_token(&self.name))?;
        let door = Arc::new(Door::new(
            endpoint.url,
            endpoint.tenant,
            self.allow.clone(),
            headers,
        ));
        let mut call = Call {
            name: &self.name,
            watcher,
            seen: Seen::new(ask.max_answer_bytes),
            abandon: Abandon {
                door: door.clone(),
                task: None,
                cancelling: self.cancelling.clone(),
            },
            door,
        };
        call.run(&ask.text).await
    }
}

/// One call under way.
struct Call<'a> {
    name: &'a str,
    watcher: &'a dyn Watcher,
    door: Arc<Door>,
    seen: Seen,
    abandon: Abandon,
}

/// What the next request is.
enum Next {
    Send(Message),
    Reattach,
}

/// Why reading one answer stopped.
enum Stop {
    /// The task ended (or waits on what the caller cannot give).
    Ended,
    /// The task waits for input.
    Input,
    /// The answer ended, or broke, before either.
    Dropped(String),
}

impl Call<'_> {
    async fn run(&mut self, text: &str) -> Result<Answer, Failure> {
        let mut next = Next::Send(user_message(text, None, None));
        // The input request already answered, and the answer while it is not known to
        // have arrived: a reattach finds the request again in the task's snapshot, and
        // must send the answer again, not ask the person twice.
        let mut answered: Option<String> = None;
        let mut unsent: Option<Message> = None;
        let mut tries = 0;
        loop {
            let before = self.seen.events;
            let resend = unsent.is_some();
            let stop = match &next {
                Next::Send(message) => {
                    let opened = self
                        .door
                        .call("SendStreamingMessage", json!({"message": message}), None)
                        .await;
                    if opened.is_ok() {
                        unsent = None;
                    }
                    self.follow(opened, answered.as_deref(), false).await
                }
                Next::Reattach => self.reattach(answered.as_deref(), resend).await,
            };
            match stop {
                Ok(Stop::Ended) => return self.end(),
                Ok(Stop::Input) => {
                    tries = 0;
                    let key = self.seen.status_key().to_string();
                    if let Some(reply) = unsent.clone().filter(|_| answered.as_ref() == Some(&key))
                    {
                        next = Next::Send(reply);
                        continue;
                    }
                    let reply = self.ask_input().await?;
                    answered = Some(key);
                    unsent = Some(reply.clone());
                    next = Next::Send(reply);
                }
                Ok(Stop::Dropped(why)) | Err(Trouble::Transport(why)) => {
                    if self.seen.task_id.is_none() {
                        let failure = Failure::new(
                            FailureKind::Unreachable,
                            format!("{} could not be reached: {why}", self.name),
                        );
                        return Err(failure);
                    }
                    // More than a snapshot came: the stream was moving, so the count
                    // starts again.
                    if self.seen.events > before + 1 {
                        tries = 0;
                    }
                    let Some(wait) = REATTACH_AFTER.get(tries) else {
                        return Err(self.failed(
                            FailureKind::Unreachable,
                            format!(
                                "{} stopped answering and could not be reattached after {} tries: {why}",
                                self.name,
                                REATTACH_AFTER.len()
                            ),
                        ));
                    };
                    tokio::time::sleep(*wait).await;
                    tries += 1;
                    next = Next::Reattach;
                }
                Err(trouble) => return Err(self.trouble(trouble)),
            }
        }
    }

    /// Follows the task again after a broken stream. A door that will not resume it
    /// (the task ended meanwhile, or the events after the last one are gone) is asked
    /// how the task stands.
    async fn reattach(&mut self, answered: Option<&str>, resend: bool) -> Result<Stop, Trouble> {
        let task = self.seen.task_id.clone().unwrap_or_default();
        let last = self.seen.last_event_id.clone();
        let params = json!({"id": task});
        let opened = self
            .door
            .call("SubscribeToTask", params, last.as_deref())
            .await;
        let followed = self.follow(opened, answered, resend).await;
        if !matches!(followed, Err(Trouble::Rpc(..))) {
            return followed;
        }
        let looked = self.door.call("GetTask", json!({"id": task}), None).await;
        let stop = self.follow(looked, answered, resend).await;
        if matches!(stop, Ok(Stop::Dropped(_))) {
            // Still running: the next subscription starts from the task as it stands.
            self.seen.last_event_id = None;
        }
        stop
    }

    /// Reads one answer (a stream, or one JSON document) until the task ends, waits for
    /// input not yet answered, or the answer stops.
    async fn follow(
        &mut self,
        opened: Result<Reply, Trouble>,
        answered: Option<&str>,
        resend: bool,
    ) -> Result<Stop, Trouble> {
        let mut events = match opened? {
            Reply::Json(envelope) => {
                self.take(wire::result(envelope)?)?;
                return Ok(self.stop(answered, resend).unwrap_or_else(|| {
                    Stop::Dropped("its door answered without a stream".into())
                }));
            }
            Reply::Stream(events) => events,
        };
        while let Some(event) = events.next().await? {
            if event.id.is_some() {
                self.seen.last_event_id = event.id;
            }
            let envelope = serde_json::from_str(&event.data).map_err(|_| {
                Trouble::Garbled("its stream carried an event that is not JSON".into())
            })?;
            self.take(wire::result(envelope)?)?;
            if let Some(stop) = self.stop(answered, resend) {
                return Ok(stop);
            }
        }
        Ok(Stop::Dropped("its stream ended before the task did".into()))
    }

    /// Takes in one result; the first that names the task tells the watcher.
    fn take(&mut self, result: serde_json::Value) -> Result<(), Trouble> {
        let event = seen::parse(result).map_err(Trouble::Garbled)?;
        let named = self.seen.task_id.is_some();
        self.seen.apply(event).map_err(Trouble::Garbled)?;
        if let (false, Some(task)) = (named, &self.seen.task_id) {
            self.abandon.task = Some(task.clone());
            self.watcher.taken(task, None);
        }
        Ok(())
    }

    fn stop(&self, answered: Option<&str>, resend: bool) -> Option<Stop> {
        match self.seen.state {
            ref state if state.is_terminal() => Some(Stop::Ended),
            TaskState::AuthRequired => Some(Stop::Ended),
            TaskState::InputRequired => {
                let stale = answered == Some(self.seen.status_key()) && !resend;
                (!stale).then_some(Stop::Input)
            }
            _ => None,
        }
    }

    /// Asks the caller's side for the input the task waits on: the reply as the next
    /// message, or the failure that ends the call (and cancels the task).
    async fn ask_input(&mut self) -> Result<Message, Failure> {
        let prompt = self.seen.status_text().to_string();
        match self.watcher.input(&prompt).await {
            Ok(reply) => Ok(user_message(
                &reply,
                self.seen.task_id.as_deref(),
                self.seen.context_id.as_deref(),
            )),
            Err(why) => Err(self.failed(
                FailureKind::Failed,
                format!(
                    "{}'s task asked for input and got none: {}",
                    self.name,
                    wire::said(&why)
                ),
            )),
        }
    }

    /// The answer of a task in its final state, or why there is none.
    fn end(&mut self) -> Result<Answer, Failure> {
        let name = self.name;
        let said = match wire::said(self.seen.status_text()) {
            said if said.is_empty() => "no reason given".to_string(),
            said => said,
        };
        let (kind, message) = match self.seen.state {
            TaskState::Completed => {
                self.abandon.task = None;
                let (text, truncated) = self.seen.answer();
                return Ok(Answer {
                    text: crate::secret::scrub(&text).into_owned(),
                    task_id: self.seen.task_id.clone().unwrap_or_default(),
                    truncated,
                });
            }
            TaskState::AuthRequired => (
                FailureKind::Refused,
                format!("{name} asks for an authentication the caller cannot give: {said}"),
            ),
            TaskState::Rejected if self.seen.rejected_busy() => (
                FailureKind::Busy,
                format!("{name} had no room for the task: {said}"),
            ),
            TaskState::Rejected => (
                FailureKind::Refused,
                format!("{name} rejected the task: {said}"),
            ),
            TaskState::Canceled => (
                FailureKind::Failed,
                format!("{name}'s task ended canceled: {said}"),
            ),
            _ => (
                FailureKind::Failed,
                format!("{name}'s task ended failed: {said}"),
            ),
        };
        if self.seen.state.is_terminal() {
            self.abandon.task = None;
        }
        Err(self.failed(kind, message))
    }

    fn trouble(&self, trouble: Trouble) -> Failure {
        let failure = failure(self.name, trouble, self.seen.task_id.is_some());
        self.with_task(failure)
    }

    fn failed(&self, kind: FailureKind, message: String) -> Failure {
        self.with_task(Failure::new(kind, message))
    }

    fn with_task(&self, failure: Failure) -> Failure {
        match &self.seen.task_id {
            Some(task) => failure.of_task(task),
            None => failure,
        }
    }
}

/// What went wrong on the wire, as the caller's model reads it. `taken`: whether the
/// peer already holds a task of this call.
fn failure(name: &str, trouble: Trouble, taken: bool) -> Failure {
    let (kind, message) = match trouble {
        Trouble::Transport(why) => (
            FailureKind::Unreachable,
            format!("{name} could not be reached: {why}"),
        ),
        Trouble::Denied => (
            FailureKind::Unreachable,
            format!("{name} is outside capabilities.network.allow"),
        ),
        Trouble::Status(status, said) => {
            // A door that turns the caller away refuses; one without room is busy;
            // any other answer means there is nothing at that door to call.
            let kind = match status {
                401 | 403 | 407 => FailureKind::Refused,
                429 | 503 => FailureKind::Busy,
                _ => FailureKind::Unreachable,
            };
            let message = match said {
                Some(said) => format!("{name}'s door answered {status}: {said}"),
                None => format!("{name}'s door answered {status}"),
            };
            (kind, message)
        }
        Trouble::Rpc(code, message) if taken => (
            FailureKind::Failed,
            format!("{name}'s door answered error {code}: {message}"),
        ),
        Trouble::Rpc(code, message) => (
            FailureKind::Refused,
            format!("{name} refused the task (error {code}): {message}"),
        ),
        Trouble::Garbled(why) => (
            if taken {
                FailureKind::Failed
            } else {
                FailureKind::Unreachable
            },
            format!("{name} does not speak A2A 1.0 as mur reads it: {why}"),
        ),
    };
    Failure::new(kind, message)
}

/// The remote task of a call that has not ended: canceled when the call is dropped
/// before its task ended (the caller's own task canceled, its deadline passed), or
/// gives up on it.
struct Abandon {
    door: Arc<Door>,
    task: Option<String>,
    cancelling: Arc<watch::Sender<usize>>,
}

impl Drop for Abandon {
    fn drop(&mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        // Dropped outside a runtime there is nothing to send the cancel on.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let door = self.door.clone();
        let cancelling = self.cancelling.clone();
        cancelling.send_modify(|n| *n += 1);
        runtime.spawn(async move {
            let cancel = async {
                let sent = door.call("CancelTask", json!({"id": task}), None).await;
                if let Ok(Reply::Stream(mut events)) = sent {
                    let _ = events.next().await;
                }
            };
            let _ = tokio::time::timeout(CANCEL_WITHIN, cancel).await;
            cancelling.send_modify(|n| *n = n.saturating_sub(1));
        });
    }
}

#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;
