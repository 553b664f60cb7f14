//! One inference turn: the loop's request checked and built, the turn counted against
//! `max_turns`, the driver called (a fresh instance after a trap), its reply read and
//! recorded, then the `on-inference` hooks.

use std::time::Instant;

use serde_json::{Map, Value};

use super::current::Current;
use crate::bindings::driver::exports::murmur::driver::inference::{InferError, Request, Response};
use crate::bindings::message::Message;
use crate::bindings::session_loop::murmur::session::types::{
    InferenceError, InferenceReply, InferenceRequest,
};
use crate::conversation::estimate_tokens;
use crate::driver::reply;
use crate::driver::{request, trap_text};
use crate::frames::State;
use crate::trace::line;

type Replied = Result<InferenceReply, InferenceError>;

impl Current<'_> {
    pub async fn turn(&mut self, asked: InferenceRequest) -> wasmtime::Result<Replied> {
        let session = self.session;
        if let Some(harness) = &session.harness {
            return self.process_turn(harness, asked).await;
        }
        let settings = &session.settings;
        if let Some(why) = &self.run.breach {
            return Ok(Err(InferenceError::Failed(why.clone())));
        }
        // Past a spend ceiling the loop only gets the refusal again: nothing is
        // recorded, so a loop that ignores it cannot grow the trace.
        if let Some(why) = &self.run.spent {
            return Ok(Err(InferenceError::Refused(why.clone())));
        }
        if let Err(why) = crate::handed::messages("the request", &asked.messages, &settings.limits)
        {
            return Ok(Err(InferenceError::Refused(why)));
        }
        let request = match settings.request.build(asked, &session.tools.typed_specs()) {
            Ok(request) => request,
            Err(why) => return Ok(Err(InferenceError::Refused(why))),
        };
        if self.run.counts.turns >= u64::from(settings.max_turns) {
            return Ok(Err(InferenceError::TurnsExhausted(settings.max_turns)));
        }
        let input_estimate = estimate_tokens(&request::json_form(&request));
        // Refused here, no turn is counted and the driver is never called.
        let could_use = input_estimate.saturating_add(u64::from(request.max_tokens));
        let reserved = match self.reserve_spend(could_use)? {
            Ok(reserved) => reserved,
            Err(why) => return Ok(Err(InferenceError::Refused(why))),
        };
        let turn = self.run.counts.turns;
        self.run.counts.turns += 1;
        let attempt_turn = turn - self.run.attempt_start;
        session.wire.status(
            State::Working,
            &format!("inference turn {}", attempt_turn + 1),
            None,
        );
        let carried = self.seed_carried(&request.messages);
        // The turn's line gets this id, so its span is the one the requests named.
        let event = crate::ids::event();
        let span = session.trace.future_span(Some(&self.run.task.id), &event);
        session.driver.set_traceparent(Some(span.traceparent()));
        let (called, started) = self.call_driver(&request).await;
        session.driver.set_traceparent(None);
        self.run.calls.replied();
        self.trace_outbound()?;
        let mut measured = line::Turn {
            turn,
            duration_ms: started.elapsed().as_millis() as u64,
            input_estimate,
            output_estimate: 0,
        };
        let mut reported = Map::new();
        // A call with no usable reply still sent its input: that much is settled at
        // least, and what the provider reported of a reply the host then refused.
        let mut used = (input_estimate, 0);
        let result = match called {
            Err(why) => Err(InferenceError::Invocation(why)),
            Ok(Err(InferError::Failed(e))) => Err(InferenceError::Failed(e)),
            Ok(Err(InferError::Malformed(e))) => Err(InferenceError::Malformed(e)),
            Ok(Ok(response)) => {
                let usage = &response.usage;
                used = (
                    usage.input_tokens.unwrap_or(input_estimate),
                    usage.output_tokens.unwrap_or(0),
                );
                // Past the task's bound every further call is refused unrun.
                let keep = settings.limits.max_tool_calls_per_task.saturating_add(1);
                reply::read(response, input_estimate, keep).map(|parsed| {
                    reported = parsed.reported;
                    measured.output_estimate = parsed.output_estimate;
                    parsed.reply
                })
            }
        };
        // A reply the loop gets: what the provider reported, the estimate where not.
        if let Ok(reply) = &result {
            used = (reply.usage.input_tokens, reply.usage.output_tokens);
        }
        if let Err(e) = session.spend.settle(reserved, used.0, used.1) {
            session.workdir.log(&e.to_string());
        }
        self.trace_turn(&measured, &reported, &result, (carried, event))?;
        let Ok(reply) = result else {
            return Ok(result);
        };
        self.inference_hooks(
            turn,
            &reply,
            measured.input_estimate,
            measured.output_estimate,
        )
        .await?;
        Ok(Ok(reply))
    }

    /// On the task's first request after a seed was offered: whether the request
    /// carries every seeded message, in order. The trace never claims a seed the loop
    /// left out.
    fn seed_carried(&mut self, messages: &[Message]) -> Option<bool> {
        let seed = self.run.seed.take()?;
        let mut rest = messages.iter();
        Some(seed.iter().all(|m| rest.any(|sent| sent == m)))
    }

    /// Calls the driver under its own deadline (the loop's holds meanwhile), with the
    /// instance kept from the last turn or a fresh one. `Err` is why the driver could
    /// not be called; `Ok(Err)` the driver's own failure. The call's duration counts
    /// from the returned instant, once the instance is ready.
    async fn call_driver(
        &mut self,
        request: &Request,
    ) -> (Result<Result<Response, InferError>, String>, Instant) {
        let session = self.session;
        self.hold_deadline();
        let driver = match self.driver.take() {
            Some(driver) => Ok(driver),
            None => {
                let started = Instant::now();
                let driver = session.driver.instantiate(session.wire.clone()).await;
                session.log_instantiation("driver", started);
                driver
            }
        };
        session.wire.before_inference();
        let started = Instant::now();
        let called = match driver {
            Ok(mut driver) => {
                let called = driver.infer(request).await;
                // A trapped instance is unusable; the next turn gets a fresh one.
                if called.is_ok() {
                    *self.driver = Some(driver);
                }
                called.map_err(|e| trap_text(&e))
            }
            Err(why) => Err(why),
        };
        self.resume_deadline();
        session.wire.after_inference();
        (called, started)
    }

    /// What the driver's requests ran into (refusals, retries), under the task, before
    /// the turn's own line.
    pub fn trace_outbound(&mut self) -> wasmtime::Result<()> {
        for event in self.session.driver.take_events() {
            self.record(line::outbound(event))?;
        }
        Ok(())
    }

    /// The turn's `inference` line, which its tool calls hang under; a reply's usage
    /// counts toward the task's.
    fn trace_turn(
        &mut self,
        measured: &line::Turn,
        reported: &Map<String, Value>,
        result: &Replied,
        (seed_carried, event): (Option<bool>, String),
    ) -> wasmtime::Result<()> {
        let line = match result {
            Ok(reply) => {
                self.run.counts.input_tokens += reply.usage.input_tokens;
                self.run.counts.output_tokens += reply.usage.output_tokens;
                let stop = reply::stop_reason_name(reply.stop_reason);
                line::inference(
                    measured,
                    reply::decision(reply),
                    stop,
                    reported,
                    seed_carried,
                )
            }
            Err(e) => {
                let (code, text) = match e {
                    InferenceError::Invocation(t) => ("driver_failed", t),
                    InferenceError::Failed(t) => ("driver_error", t),
                    InferenceError::Malformed(t) => ("malformed_response", t),
                    InferenceError::TurnsExhausted(_) | InferenceError::Refused(_) => {
                        return Ok(());
                    }
                };
                line::inference_failed(measured, code, text, seed_carried)
            }
        };
        self.run.turn_event = Some(self.record_as(event, line)?);
        Ok(())
    }
}
