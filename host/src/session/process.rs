//! An `infer` under `inference.transport: process`: the harness runs the task, its own
//! loop of model calls and all. The loop's request gives the task's text (a reopen's
//! feedback included); the harness's conversation is its own, continued from its
//! session when the context is threaded. What the host keeps while it runs:
//! - each model call the driver reports is an inference turn: a `working`
//!   `inference turn N` status, an `inference` line, counted against `max_turns`;
//! - streamed text and thinking become `text` and `thinking` frames;
//! - each call of a capsule tool comes through the bridge and runs as a model's call
//!   does (bounds, policy hooks, `artifact` frame, `tool_call` line); the harness's own
//!   tools are `harness_tool` lines;
//! - a cancel interrupts the harness and then kills it, as does passing the turn limit,
//!   a spend ceiling or the run's deadline;
//! - the answer is the reply the loop finishes the task with.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::CANCELED;
use super::current::Current;
use crate::bindings::message::{Block, Message, Role, ToolCall};
use crate::bindings::process::exports::murmur::process::harness::{
    Event, ExitClass, ExitStatus, Failure, LaunchRequest, SessionInfo, Usage,
};
use crate::bindings::session_loop::murmur::session::types::{
    self, InferenceError, InferenceReply, InferenceRequest, StopReason,
};
use crate::conversation::estimate_tokens;
use crate::frames::State;
use crate::harness::process::{self, INTERRUPT_GRACE, Line};
use crate::harness::{Harness, bridge};
use crate::spend::Reservation;
use crate::trace::line;

type Replied = Result<InferenceReply, InferenceError>;

/// The harness's own tool calls awaiting their results, at most this many.
const OPEN_CALLS: usize = 256;
/// The answer kept, at most: the rest is cut like any reply past its bound.
const MAX_ANSWER: usize = 1024 * 1024;
/// Notes a run may write to the trace: a harness printing garbage cannot fill it.
const MAX_NOTES: u32 = 100;
/// The longest tool name or call id kept of the harness's own tools.
const MAX_NAME: usize = 256;

fn cut(text: &str) -> String {
    text[..text.floor_char_boundary(MAX_NAME.min(text.len()))].to_string()
}

/// Why the host stopped the harness.
#[derive(Clone, Debug)]
enum Stop {
    Canceled,
    MaxTurns(u32),
    Spend(String),
    Deadline(Duration),
    Broken(String),
}

impl Stop {
    fn name(&self) -> &'static str {
        match self {
            Stop::Canceled => "canceled",
            Stop::MaxTurns(_) => "max_turns",
            Stop::Spend(_) => "spend_ceiling",
            Stop::Deadline(_) => "deadline",
            Stop::Broken(_) => "driver_failed",
        }
    }
}

/// A turn under way: its line is written when it closes.
struct Open {
    /// The tool the turn ended calling, once one is called.
    calls: Option<String>,
    index: u64,
    event: String,
    started: Instant,
    input_at_start: u64,
    output_at_start: u64,
}

/// What one run has seen so far.
#[derive(Default)]
struct Seen {
    turn: Option<Open>,
    usage: Totals,
    reported: bool,
    answer: Option<String>,
    failure: Option<Failure>,
    stop: Option<Stop>,
    own_calls: HashMap<String, (String, usize, Instant)>,
    reservations: Vec<Reservation>,
    reserved: u64,
    /// `harness_note` lines written in this run, at most [`MAX_NOTES`].
    notes: u32,
    /// A model call is under way: opened, and no tool result since.
    in_call: bool,
    /// A bridged call opened the model call before its `turn-started` was read.
    started_early: bool,
    /// The session it said, kept for a threaded context at the run's end.
    session_id: Option<String>,
    /// The usage the harness counted, as it counted it (input, output).
    counted: (u64, u64),
    /// What it had counted of its session before this run, when its counts cover
    /// the whole session.
    before: (u64, u64),
}

#[derive(Default, Clone, Copy)]
struct Totals {
    input: u64,
    output: u64,
}

impl Current<'_> {
    pub async fn process_turn(
        &mut self,
        harness: &Harness,
        asked: InferenceRequest,
    ) -> wasmtime::Result<Replied> {
        if let Some(why) = &self.run.breach {
            return Ok(Err(InferenceError::Failed(why.clone())));
        }
        if let Some(why) = &self.run.spent {
            return Ok(Err(InferenceError::Refused(why.clone())));
        }
        let max_turns = self.session.settings.max_turns;
        if self.run.counts.turns >= u64::from(max_turns) {
            return Ok(Err(InferenceError::TurnsExhausted(max_turns)));
        }
        let Some(task) = task_text(&asked.messages) else {
            return Ok(Err(InferenceError::Refused(
                "under inference.transport: process the request must end with the task's \
                 text, as a user message"
                    .into(),
            )));
        };
        let cap = asked.max_tokens.unwrap_or(harness.settings.max_tokens);
        let first = estimate_tokens(&task).saturating_add(u64::from(cap));
        let mut seen = Seen::default();
        match self.reserve_spend(first.max(1))? {
            Ok(reserved) => {
                seen.reserved = first.max(1);
                seen.reservations.push(reserved);
            }
            Err(why) => return Ok(Err(InferenceError::Refused(why))),
        }
        self.hold_deadline();
        let ran = self.run_harness(harness, &task, &mut seen).await;
        self.resume_deadline();
        self.close_turn(&mut seen)?;
        self.settle(&mut seen);
        if let Err(why) = ran? {
            return Ok(Err(why));
        }
        Ok(self.outcome(harness, &mut seen))
    }

    /// Runs the harness to its end. `Err` is a failure before or while it started.
    async fn run_harness(
        &mut self,
        harness: &Harness,
        task: &str,
        seen: &mut Seen,
    ) -> wasmtime::Result<Result<(), InferenceError>> {
        let session = self.session;
        let mut instance = match harness.driver.instance().await {
            Ok(instance) => instance,
            Err(why) => return Ok(Err(InferenceError::Invocation(why))),
        };
        // MCP servers' tools are listed after launch, and may change: the run is offered
        // the capsule's tools as they are now.
        harness
            .bridge
            .offer(crate::harness::open::offered(&session.tools));
        let context = self.run.task.context_id.clone();
        let kept = session
            .threads
            .as_ref()
            .and_then(|_| harness.sessions.get(&context));
        // A harness that counts its whole session's usage had counted this much of it
        // before this run: only what grows past it is this run's.
        if let Some((_, used)) = kept
            && harness.description.usage_covers_session
        {
            seen.before = used;
        }
        let resume = kept.map(|(id, _)| id);
        let request = LaunchRequest {
            task: task.to_string(),
            model: harness.settings.model.clone(),
            endpoint: harness.settings.endpoint.clone(),
            system_prompt: harness.settings.system_prompt.clone(),
            config: harness.settings.config.clone(),
            resume: resume.clone(),
            new_session: uuid::Uuid::new_v4().to_string(),
            max_turns: harness.settings.max_turns,
            bridge: Some(
                crate::bindings::process::exports::murmur::process::harness::Bridge {
                    server_name: bridge::SERVER_NAME.into(),
                    url: harness.bridge.url(),
                    token_env: bridge::TOKEN_ENV.into(),
                    tools: harness.bridge.tool_names(),
                },
            ),
            home: harness.home.to_string_lossy().into_owned(),
            workdir: session.workdir.root.to_string_lossy().into_owned(),
            harness_version: harness.version.clone(),
        };
        let plan = match instance.launch(&request).await {
            Err(why) => return Ok(Err(InferenceError::Invocation(why))),
            Ok(Err(why)) => {
                let why = format!("{} refused the run: {why}", harness.driver.label);
                return Ok(Err(InferenceError::Failed(why)));
            }
            Ok(Ok(plan)) => plan,
        };
        let prepared = harness
            .write_files(&plan.files)
            .and_then(|()| harness.environment(&plan));
        let env = match prepared {
            Ok(env) => env,
            Err(why) => return Ok(Err(InferenceError::Failed(why))),
        };
        let program = harness.program.to_string_lossy().into_owned();
        let started = Instant::now();
        let mut installation = harness.installation.clone();
        installation.state = Some(harness.home.clone());
        let start = process::Start {
            program: &program,
            args: &plan.args,
            env: &env,
            cwd: &session.workdir.root,
            installation: &installation,
            stdin: plan.stdin.as_deref(),
            keep_stdin_open: plan.keep_stdin_open,
            log: crate::guest_log::Target {
                label: format!("harness {}", harness.name()),
                path: harness.logs_dir.join("harness.log"),
            },
        };
        let mut running = match process::start(&harness.jail, start).await {
            Ok(running) => running,
            Err(why) => return Ok(Err(InferenceError::Invocation(why))),
        };
        let by_signal = harness.description.interrupt
            == crate::bindings::process::exports::murmur::process::harness::Interrupt::Signal;
        let limit = run_deadline(session, harness);
        let deadline = tokio::time::sleep(limit);
        tokio::pin!(deadline);
        let mut calls = harness.bridge.attach();
        let control = session.running.clone();
        let mut killing: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
        loop {
            if seen.stop.is_some() && killing.is_none() {
                running.interrupt(by_signal);
                killing = Some(Box::pin(tokio::time::sleep(INTERRUPT_GRACE)));
            }
            // Biased, so a line the harness printed before it called a tool (the
            // turn that asks for it) is read before the call is run.
            tokio::select! {
                biased;
                () = async { if let Some(k) = killing.as_mut() { k.await } }, if killing.is_some() => break,
                () = control.canceled(), if seen.stop.is_none() => seen.stop = Some(Stop::Canceled),
                () = &mut deadline, if seen.stop.is_none() => seen.stop = Some(Stop::Deadline(limit)),
                line = running.lines.recv() => {
                    let Some(line) = line else { break };
                    if seen.stop.is_some() {
                        continue;
                    }
                    self.on_line(harness, &mut instance, line, seen, resume.is_some()).await?;
                    // The run is over: what the harness does after is not waited for
                    // past its grace.
                    if seen.answer.is_some() || seen.failure.is_some() {
                        break;
                    }
                }
                Some(call) = calls.recv() => {
                    // A tool call stops at a cancel or the run's deadline like the rest.
                    let stopped = seen.stop.is_some();
                    let ran = tokio::select! {
                        ran = self.bridge_call(call, seen) => Some(ran),
                        () = control.canceled(), if !stopped => None,
                        () = &mut deadline, if !stopped => Some(Ok(false)),
                    };
                    match ran {
                        Some(Ok(true)) => {}
                        Some(Ok(false)) => seen.stop = Some(Stop::Deadline(limit)),
                        Some(Err(e)) => return Err(e),
                        None => seen.stop = Some(Stop::Canceled),
                    }
                }
            }
        }
        drop(calls);
        let grace = if seen.stop.is_some() {
            Duration::ZERO
        } else {
            INTERRUPT_GRACE * 3
        };
        let (status, stderr_tail) = running.exit(grace).await;
        self.close_turn(seen)?;
        let (code, signal) = exit_parts(status);
        let stopped = seen.stop.as_ref().map(Stop::name);
        let ms = started.elapsed().as_millis() as u64;
        self.record(line::harness_exit(code, signal, stopped, ms))?;
        self.keep_session(harness, &context, resume.is_some(), seen);
        if seen.answer.is_none() && seen.failure.is_none() && seen.stop.is_none() {
            let exit = ExitStatus {
                code,
                signal,
                stderr_tail,
                interrupted: false,
            };
            match instance.classify_exit(&exit).await {
                Ok(failure) => seen.failure = Some(failure),
                Err(why) => seen.stop = Some(Stop::Broken(why)),
            }
        }
        Ok(Ok(()))
    }

    async fn on_line(
        &mut self,
        harness: &Harness,
        instance: &mut crate::harness::component::Instance,
        line: Line,
        seen: &mut Seen,
        resumed: bool,
    ) -> wasmtime::Result<()> {
        let text = match line {
            Line::Text(text) => text,
            Line::TooLong(n) => {
                let note = format!(
                    "the harness printed a line of {n} bytes, over the {} read whole; it was skipped",
                    process::MAX_LINE
                );
                return self.on_event(harness, Event::Note(note), seen, resumed);
            }
            Line::NotText => {
                let note = "the harness printed a line that is not UTF-8; it was skipped";
                return self.on_event(harness, Event::Note(note.into()), seen, resumed);
            }
        };
        if text.trim().is_empty() {
            return Ok(());
        }
        let events = match instance.parse(&text).await {
            Ok(events) => events,
            Err(why) => {
                seen.stop = Some(Stop::Broken(why));
                return Ok(());
            }
        };
        for event in events {
            self.on_event(harness, event, seen, resumed)?;
            // Past a spend ceiling the tokens are spent: an answer that came in the
            // same line as the count that passed it is still read.
            if seen
                .stop
                .as_ref()
                .is_some_and(|stop| !matches!(stop, Stop::Spend(_)))
            {
                break;
            }
        }
        Ok(())
    }

    fn on_event(
        &mut self,
        harness: &Harness,
        event: Event,
        seen: &mut Seen,
        resumed: bool,
    ) -> wasmtime::Result<()> {
        let wire = &self.session.wire;
        match event {
            Event::Session(info) => {
                seen.session_id = Some(info.id.clone());
                self.on_session(harness, &info, resumed)?;
            }
            // The model call a bridged call already opened (its line came late).
            Event::TurnStarted if std::mem::take(&mut seen.started_early) => {}
            Event::TurnStarted => {
                seen.in_call = true;
                self.open_turn(seen)?;
            }
            Event::Text(text) => {
                wire.text_chunk(&text);
            }
            Event::Thinking(text) => {
                wire.thinking_chunk(&text);
            }
            Event::ToolCall(call) if !call.bridged => {
                // The turn closes at the result: what the model call used is reported
                // after it asks for the tool.
                if let Some(open) = seen.turn.as_mut() {
                    open.calls = Some(cut(&call.name));
                }
                if seen.own_calls.len() < OPEN_CALLS {
                    let at = Instant::now();
                    seen.own_calls
                        .insert(cut(&call.id), (cut(&call.name), call.input.len(), at));
                }
            }
            Event::ToolCall(_) => {}
            Event::ToolResult(result) => {
                seen.in_call = false;
                if let Some((tool, input_bytes, at)) = seen.own_calls.remove(&cut(&result.id)) {
                    self.close_turn(seen)?;
                    let own = line::OwnTool {
                        turn: self.run.counts.turns.saturating_sub(1),
                        tool: &tool,
                        call_id: &result.id,
                        input_bytes,
                        output_bytes: result.output.len(),
                        is_error: result.is_error,
                        duration_ms: at.elapsed().as_millis() as u64,
                    };
                    self.record_under_turn(line::harness_tool(&own))?;
                }
            }
            Event::Usage(usage) => self.on_usage(&usage, seen)?,
            Event::Answer(text) => {
                let cut = text.floor_char_boundary(MAX_ANSWER.min(text.len()));
                seen.answer = Some(text[..cut].to_string());
            }
            Event::Failed(failure) => seen.failure = Some(failure),
            Event::Note(note) => {
                seen.notes += 1;
                if seen.notes > MAX_NOTES {
                    return Ok(());
                }
                let note = match seen.notes {
                    MAX_NOTES => format!("{MAX_NOTES} notes in this run: later ones are not kept"),
                    _ => crate::escape::cut(&note, 1024).into_owned(),
                };
                self.record(line::harness_note(&note))?;
            }
        }
        Ok(())
    }

    fn on_session(
        &mut self,
        harness: &Harness,
        info: &SessionInfo,
        resumed: bool,
    ) -> wasmtime::Result<()> {
        let session = self.session;
        let auth = crate::escape::cut(&info.auth, 64);
        let model = info
            .model
            .as_deref()
            .map(|m| crate::escape::cut(m, 200).into_owned());
        let id = crate::escape::cut(&info.id, 256);
        self.record(line::harness_session(
            harness.name(),
            &id,
            &auth,
            model.as_deref(),
            resumed,
        ))?;
        if info.auth != "subscription" && harness.first_warning() {
            let warning = format!(
                "warning[W-SEC-031]: {} is billed by {} rather than a subscription login\n  \
                 hint: every token it uses is paid for by that key; log the harness in with its \
                 own login in inference.home to use a subscription",
                harness.name(),
                crate::escape::line(&auth)
            );
            session.workdir.log(&warning);
            eprintln!("{warning}");
        }
        Ok(())
    }

    /// A model call began: counted against `max_turns`, or the run is stopped.
    fn open_turn(&mut self, seen: &mut Seen) -> wasmtime::Result<()> {
        self.close_turn(seen)?;
        let max_turns = self.session.settings.max_turns;
        if self.run.counts.turns >= u64::from(max_turns) {
            seen.stop = Some(Stop::MaxTurns(max_turns));
            return Ok(());
        }
        let index = self.run.counts.turns;
        self.run.counts.turns += 1;
        self.run.calls.replied();
        let attempt_turn = index - self.run.attempt_start;
        let wire = &self.session.wire;
        wire.status(
            State::Working,
            &format!("inference turn {}", attempt_turn + 1),
            None,
        );
        wire.before_inference();
        let event = crate::ids::event();
        seen.turn = Some(Open {
            calls: None,
            index,
            event,
            started: Instant::now(),
            input_at_start: seen.usage.input,
            output_at_start: seen.usage.output,
        });
        Ok(())
    }

    /// The open turn's `inference` line, with what it used as the harness reported it.
    fn close_turn(&mut self, seen: &mut Seen) -> wasmtime::Result<()> {
        let Some(open) = seen.turn.take() else {
            return Ok(());
        };
        self.session.wire.after_inference();
        let input = seen.usage.input.saturating_sub(open.input_at_start);
        let output = seen.usage.output.saturating_sub(open.output_at_start);
        let measured = line::Turn {
            turn: open.index,
            duration_ms: open.started.elapsed().as_millis() as u64,
            input_estimate: input,
            output_estimate: output,
        };
        let mut reported = serde_json::Map::new();
        if seen.reported {
            reported.insert("input_tokens".into(), input.into());
            reported.insert("output_tokens".into(), output.into());
        }
        self.run.counts.input_tokens += input;
        self.run.counts.output_tokens += output;
        // Upstream's readers know these words only: a turn that went on to a tool
        // asked for it, any other ended the harness's answer.
        let (decision, stop) = match &open.calls {
            Some(_) => ("tool_call", "tool_call"),
            None => ("end_turn", "end_turn"),
        };
        let line = line::inference(
            &measured,
            (decision, open.calls.clone()),
            stop,
            &reported,
            None,
        );
        self.run.turn_event = Some(self.record_as(open.event, line)?);
        Ok(())
    }

    /// A threaded context keeps the session the harness ran in, and what it had counted
    /// using by the end. One the harness could not resume (its home was wiped, it was
    /// upgraded) is forgotten, so the context's next task starts afresh.
    fn keep_session(&self, harness: &Harness, context: &str, resumed: bool, seen: &Seen) {
        let session = self.session;
        if session.threads.is_none() {
            return;
        }
        match &seen.session_id {
            Some(id) => {
                if let Err(why) = harness.sessions.keep(context, id, seen.counted) {
                    session.workdir.log(&why);
                }
            }
            None if resumed && seen.answer.is_none() => harness.sessions.forget(context),
            None => {}
        }
    }

    /// The run's running totals; what passes the spend reserved so far is reserved now,
    /// and a ceiling that refuses it stops the run.
    fn on_usage(&mut self, usage: &Usage, seen: &mut Seen) -> wasmtime::Result<()> {
        let input = usage.input.unwrap_or(0)
            + usage.cache_read.unwrap_or(0)
            + usage.cache_write.unwrap_or(0);
        let output = usage.output.unwrap_or(0);
        seen.reported |= usage.input.is_some() || usage.output.is_some();
        seen.counted = (seen.counted.0.max(input), seen.counted.1.max(output));
        seen.usage.input = seen.counted.0.saturating_sub(seen.before.0);
        seen.usage.output = seen.counted.1.saturating_sub(seen.before.1);
        let used = seen.usage.input + seen.usage.output;
        if used > seen.reserved {
            let more = used - seen.reserved;
            match self.reserve_spend(more)? {
                Ok(reserved) => {
                    seen.reserved += more;
                    seen.reservations.push(reserved);
                }
                Err(why) => seen.stop = Some(Stop::Spend(why)),
            }
        }
        Ok(())
    }

    /// What the run used, settled against the reservations: all of it on the first.
    fn settle(&mut self, seen: &mut Seen) {
        let mut used = Some((seen.usage.input, seen.usage.output));
        for reserved in seen.reservations.drain(..) {
            let (input, output) = used.take().unwrap_or((0, 0));
            if let Err(e) = self.session.spend.settle(reserved, input, output) {
                self.session.workdir.log(&e.to_string());
            }
        }
    }

    /// A capsule tool the harness called through the bridge: run as a model's call is.
    /// `Ok(true)`: answered (or refused, the run being stopped).
    async fn bridge_call(&mut self, call: bridge::Call, seen: &mut Seen) -> wasmtime::Result<bool> {
        if seen.stop.is_some() {
            let _ = call.answer.send(bridge::Answer {
                text: "the run is being stopped: the call was not made".into(),
                is_error: true,
            });
            return Ok(true);
        }
        // A harness may call the tool before the line that opens its model call is read
        // (it prints and calls at once): the call opens the turn then, and the line's
        // `turn-started`, when it comes, is that same turn.
        if seen.turn.is_none() && !seen.in_call {
            self.open_turn(seen)?;
            seen.in_call = true;
            seen.started_early = seen.turn.is_some();
        }
        if let Some(open) = seen.turn.as_mut() {
            open.calls = Some(call.name.clone());
        }
        self.close_turn(seen)?;
        if seen.stop.is_some() {
            let _ = call.answer.send(bridge::Answer {
                text: "the run is being stopped: the call was not made".into(),
                is_error: true,
            });
            return Ok(true);
        }
        let tool_call = ToolCall {
            id: crate::ids::event(),
            name: call.name,
            input: call.input,
        };
        // The call holds and resumes the loop's deadline itself: the run's hold ends
        // around it and begins again after, so the two never overlap.
        self.resume_deadline();
        let result = self.tools(vec![tool_call]).await;
        self.hold_deadline();
        let result = result?.pop();
        let answer = match result {
            Some(result) => bridge::Answer {
                text: result.content,
                is_error: result.is_error,
            },
            None => bridge::Answer {
                text: "the call has no result".into(),
                is_error: true,
            },
        };
        let _ = call.answer.send(answer);
        if let Some(why) = &self.run.breach {
            seen.stop = Some(Stop::Broken(why.clone()));
        }
        Ok(true)
    }

    /// What the loop is told of the run.
    fn outcome(&mut self, harness: &Harness, seen: &mut Seen) -> Replied {
        let usage = types::Usage {
            input_tokens: seen.usage.input,
            output_tokens: seen.usage.output,
            reported: seen.reported,
        };
        if matches!(seen.stop, Some(Stop::Spend(_))) && seen.answer.is_some() {
            seen.stop = None;
        }
        match seen.stop.take() {
            Some(Stop::Canceled) => return Err(InferenceError::Failed(CANCELED.into())),
            Some(Stop::MaxTurns(max)) => return Err(InferenceError::TurnsExhausted(max)),
            Some(Stop::Spend(why)) => return Err(InferenceError::Refused(why)),
            Some(Stop::Deadline(limit)) => {
                return Err(InferenceError::Failed(format!(
                    "deadline exceeded: {} ran for more than {} s on this task \
                     (capabilities.limits.deadline_seconds for each of its inference.max_turns turns)",
                    harness.name(),
                    limit.as_secs()
                )));
            }
            Some(Stop::Broken(why)) => return Err(InferenceError::Invocation(why)),
            None => {}
        }
        if let Some(text) = seen.answer.take() {
            return Ok(InferenceReply {
                stop_reason: StopReason::EndTurn,
                message: Message {
                    role: Role::Assistant,
                    content: vec![Block::Text(text.clone())],
                },
                text,
                tool_calls: Vec::new(),
                usage,
            });
        }
        let failure = seen.failure.take().unwrap_or(Failure {
            class: ExitClass::Crashed,
            message: "the harness ended without an answer".into(),
        });
        let message = crate::escape::cut(&failure.message, 4096);
        Err(InferenceError::Failed(format!(
            "{} {}: {message}",
            harness.name(),
            class_words(failure.class)
        )))
    }
}

fn class_words(class: ExitClass) -> &'static str {
    match class {
        ExitClass::Done => "ended without an answer",
        ExitClass::Refused => "refused to run",
        ExitClass::Auth => "could not authenticate with its model server",
        ExitClass::RateLimit => "was rate-limited by its model server",
        ExitClass::Crashed => "failed",
    }
}

/// The task as the harness is asked it: the text of the request's last user message.
fn task_text(messages: &[Message]) -> Option<String> {
    let last = messages.iter().rev().find(|m| m.role == Role::User)?;
    let text: Vec<&str> = last
        .content
        .iter()
        .filter_map(|b| match b {
            Block::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    (!text.is_empty()).then(|| text.join("\n"))
}

/// The whole run's bound: a driver call's deadline for each turn it may take.
fn run_deadline(session: &super::Session, harness: &Harness) -> Duration {
    let per_turn = session.driver.deadline();
    per_turn.saturating_mul(harness.settings.max_turns.max(1))
}

fn exit_parts(status: Option<std::process::ExitStatus>) -> (Option<i32>, Option<i32>) {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => (s.code(), s.signal()),
        None => (None, Some(libc::SIGKILL)),
    }
}
