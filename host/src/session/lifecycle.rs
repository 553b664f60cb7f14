//! Where the session fires its hooks, and what it commits of their verdicts: seeds at
//! task start, artifacts after inference, compaction, policy refusals, reopening at
//! task end. The hooks decide; this module keeps the seed's rules and writes the
//! frames, trace lines and logs.

use std::sync::Arc;

use serde_json::{Value, json};

use super::current::Current;
use super::{ContextPolicy, Session};
use crate::bindings::message::{Message, ToolCall};
use crate::bindings::session_loop::murmur::session::types::{InferenceReply, Usage};
use crate::compaction;
use crate::conversation;
use crate::driver::reply;
use crate::exit_status::ExitStatus;
use crate::handed;
use crate::hooks::{
    self, Answer, CallOutcome, Compaction, Event, Hooks, Inference, SessionEnd, SessionStart,
    Shell, ShellOutcome, TaskEnd, TaskStart, ToolCall as HookToolCall, Verdict,
};
use crate::manifest::{Binding, CommitPolicy};
use crate::queue::Pending;
use crate::seed::{self, Budget, Decision};
use crate::tools::{Dispatched, Kind, Tools};
use crate::trace::SessionTrace;
use crate::trace::line::{self, Denied, Seeded, Totals};
use crate::workdir::Workdir;

/// What the model is told after a policy hook refused its call.
pub fn refusal_text(hook: &str, reason: &str) -> String {
    format!(
        "Refused by policy hook '{hook}': {reason}\n\nThis call did not run. Retrying it \
         unchanged will be refused again."
    )
}

/// The conversation's size after a reply, and whether the provider counted it
/// (`actual`) or the host estimated it (`estimate`).
#[derive(Clone, Copy)]
pub struct Size {
    pub tokens: u64,
    pub source: &'static str,
}

/// A refused call: who refused and why.
pub struct Refused {
    pub hook: String,
    pub reason: String,
}

/// The session's hooks, with what they are told at session start and where what they
/// do wrong is recorded: the trace and the host log.
pub struct SessionHooks {
    hooks: Hooks,
    start: SessionStart,
    trace: Arc<SessionTrace>,
    workdir: Arc<Workdir>,
}

impl SessionHooks {
    pub fn new(
        hooks: Hooks,
        start: SessionStart,
        trace: Arc<SessionTrace>,
        workdir: Arc<Workdir>,
    ) -> Self {
        SessionHooks {
            hooks,
            start,
            trace,
            workdir,
        }
    }

    fn listens(&self, binding: Binding) -> bool {
        self.hooks.listens(binding)
    }

    /// Fires `binding`'s hooks; each blocking hook's answer is a `hook` line (its span),
    /// about `task`.
    async fn fire(&self, binding: Binding, event: &Event, task: Option<&str>) -> Vec<Answer> {
        let answers = self.hooks.fire(binding, event).await;
        for answer in &answers {
            let (verdict, error) = match &answer.verdict {
                Ok(verdict) => (hooks::arm_name(verdict), None),
                Err(why) => ("error", Some(why.as_str())),
            };
            let hook = line::Hook {
                hook: &answer.hook,
                event: binding.as_str(),
                verdict,
                error,
                duration_us: answer.took.as_micros() as u64,
            };
            // A failed write is kept by the trace: the loop's next step ends on it.
            let _ = self.trace.under_session(task, line::hook(&hook));
        }
        answers
    }

    /// `on-session-start`: once per launch, before the first task.
    pub async fn session_start(&self) {
        if !self.hooks.listens(Binding::SessionStart) {
            return;
        }
        let event = Event::SessionStart(self.start.clone());
        let answers = self.fire(Binding::SessionStart, &event, None).await;
        self.unhonored(&answers, Binding::SessionStart, None);
    }

    /// `on-session-end`: once per launch at teardown; async hooks then drain.
    pub async fn session_end(&self, totals: &Totals, exit_status: ExitStatus, duration_ms: u64) {
        if self.hooks.listens(Binding::SessionEnd) {
            let event = Event::SessionEnd(SessionEnd {
                total_turns: totals.turns as u32,
                total_input_tokens: totals.input_tokens,
                total_output_tokens: totals.output_tokens,
                total_tool_calls: totals.tool_calls as u32,
                total_shell_calls: totals.shell_calls as u32,
                duration_ms,
                exit_status: exit_status.as_str().to_string(),
            });
            let answers = self.fire(Binding::SessionEnd, &event, None).await;
            self.unhonored(&answers, Binding::SessionEnd, None);
        }
        self.hooks.drain().await;
        self.trace_faults(None);
    }

    /// Verdicts a hook may not commit here: logged and traced, then treated as `none`.
    fn unhonored(&self, answers: &[Answer], binding: Binding, task: Option<&str>) {
        for answer in answers {
            let Ok(verdict) = &answer.verdict else {
                continue;
            };
            if hooks::honored(verdict, answer.policy, binding) {
                continue;
            }
            self.workdir.log(&format!(
                "hook '{}' answered {} at {}, which its commit_policy '{}' does not allow; \
                 treated as none",
                answer.hook,
                hooks::arm_name(verdict),
                binding.as_str(),
                answer.policy.as_str()
            ));
            self.dispatch_error(
                &answer.hook,
                binding.as_str(),
                hooks::arm_name(verdict),
                task,
            );
        }
        self.trace_faults(task);
    }

    /// Async hooks' failures since the last look.
    fn trace_faults(&self, task: Option<&str>) {
        for fault in self.hooks.take_faults() {
            self.dispatch_error(&fault.hook, fault.event, &fault.arm, task);
        }
    }

    fn dispatch_error(&self, hook: &str, event: &str, arm: &str, task: Option<&str>) {
        // A failed write is kept by the trace: the loop's next step ends on it.
        let _ = self
            .trace
            .under_session(task, line::hook_dispatch_error(hook, event, arm));
    }

    /// The event a call fires: `on-shell` for a shell binary, `on-tool-call` for the
    /// rest; `None` when no hook listens.
    fn call_event(
        &self,
        tools: &Tools,
        turn: u64,
        call: &ToolCall,
        done: Option<&Dispatched>,
    ) -> Option<(Binding, Event)> {
        let shell = match tools.get(&call.name).map(|t| &t.kind) {
            Some(Kind::Shell { binary }) => Some(binary.clone()),
            _ => None,
        };
        let binding = if shell.is_some() {
            Binding::Shell
        } else {
            Binding::ToolCall
        };
        if !self.hooks.listens(binding) {
            return None;
        }
        let event = match shell {
            Some(binary) => Event::Shell(Shell {
                turn: turn as u32,
                binary: done
                    .and_then(|d| d.shell.as_ref().map(|s| s.resolved_binary.clone()))
                    .unwrap_or_else(|| crate::shell::resolve_binary(&binary, &path_env())),
                command: command_of(&call.input),
                outcome: done.map(|d| ShellOutcome {
                    exit_code: d.exit_code,
                    stdout_bytes: d.shell.as_ref().map_or(0, |s| s.stdout_bytes),
                    stderr_bytes: d.shell.as_ref().map_or(0, |s| s.stderr_bytes),
                    duration_ms: d.duration_ms,
                }),
            }),
            None => Event::ToolCall(HookToolCall {
                turn: turn as u32,
                tool_name: call.name.clone(),
                input: call.input.clone(),
                outcome: done.map(|d| CallOutcome {
                    output_bytes: d.content.len() as u64,
                    duration_ms: d.duration_ms,
                    status: if d.is_error { "error" } else { "ok" }.to_string(),
                }),
            }),
        };
        Some((binding, event))
    }
}

impl Current<'_> {
    /// `on-task-start`: the seed to put ahead of the task's history, if a hook proposed
    /// one and the seed's table lets it in.
    pub(super) async fn task_start_hooks(
        &mut self,
        task: &Pending,
        history: &[Message],
    ) -> wasmtime::Result<Vec<Message>> {
        let session = self.session;
        let hooks = &session.hooks;
        if !hooks.listens(Binding::TaskStart) {
            return Ok(Vec::new());
        }
        let context = &session.settings.context;
        let budget = context.seed_budget();
        let event = Event::TaskStart(TaskStart {
            task_id: task.id.clone(),
            context_id: task.context_id.clone(),
            source: task.source.as_str().to_string(),
            origin: task.origin.as_str().into(),
            text: task.text.clone(),
            input_bytes: task.text.len() as u64,
            budget_tokens: budget.tokens,
            context_window: context.window.map_or(0, u64::from),
            prior_tokens: conversation::tokens_all(history),
        });
        let answers = hooks.fire(Binding::TaskStart, &event, Some(&task.id)).await;
        hooks.unhonored(&answers, Binding::TaskStart, Some(&task.id));
        // The first hook that returns a seed wins.
        let proposal = answers.into_iter().find_map(|a| match a.verdict {
            Ok(Verdict::SeedContext(messages)) if !messages.is_empty() => {
                (a.policy == CommitPolicy::SeedContext).then_some((a.hook, messages))
            }
            _ => None,
        });
        let Some((hook, messages)) = proposal else {
            return Ok(Vec::new());
        };
        let limits = &session.settings.limits;
        if let Err(why) = handed::messages("the proposed seed", &messages, limits) {
            return self.refuse_seed(&hook, &messages, budget, &why);
        }
        self.commit_seed(&hook, &messages, budget).await
    }

    /// A seed past the capsule's limits is not committed (the task runs without it, as
    /// with any seed that cannot be): logged, and traced as rejected with the key.
    fn refuse_seed(
        &mut self,
        hook: &str,
        proposal: &[Message],
        budget: Budget,
        why: &str,
    ) -> wasmtime::Result<Vec<Message>> {
        self.session.workdir.log(&format!(
            "context seed from hook '{hook}': rejected ({why})"
        ));
        self.record(line::context_seed(&Seeded {
            task_id: &self.run.task.id,
            hook,
            tokens: 0,
            proposed_tokens: handed::text_bytes(proposal) / 4,
            budget_tokens: budget.tokens,
            outcome: "rejected",
            message_ids: &[],
            reason: Some(why),
        }))?;
        Ok(Vec::new())
    }

    async fn commit_seed(
        &mut self,
        hook: &str,
        proposal: &[Message],
        budget: Budget,
    ) -> wasmtime::Result<Vec<Message>> {
        let seed: Vec<Message> = proposal.iter().map(seed::seed_message).collect();
        let sizes: Vec<u64> = seed.iter().map(conversation::tokens).collect();
        let proposed: u64 = sizes.iter().sum();
        let (committed, outcome, reason) = match seed::decide(&sizes, budget) {
            Decision::Rejected(why) => (Vec::new(), "rejected", Some(why.as_str())),
            Decision::Seeded => (seed, "seeded", None),
            Decision::Trimmed { keep } => (seed[seed.len() - keep..].to_vec(), "trimmed", None),
            Decision::Summarize { front, keep } => {
                self.summarize_seed(&seed, front, keep, budget).await
            }
        };
        let tokens = conversation::tokens_all(&committed);
        let ids: Vec<String> = committed.iter().map(|_| crate::ids::message()).collect();
        self.session.workdir.log(&format!(
            "context seed from hook '{hook}': {outcome}{}, {tokens} of {proposed} proposed \
             tokens committed (budget {})",
            reason.map(|r| format!(" ({r})")).unwrap_or_default(),
            budget.tokens
        ));
        self.record(line::context_seed(&Seeded {
            task_id: &self.run.task.id,
            hook,
            tokens,
            proposed_tokens: proposed,
            budget_tokens: budget.tokens,
            outcome,
            message_ids: &ids,
            reason,
        }))?;
        Ok(committed)
    }

    /// Rows 7 and 8: a compaction hook summarizes the overflowing front (its first
    /// `front` messages); the summary goes first, then the newest messages that still
    /// fit beside it. Without a summary, the oldest messages are dropped.
    async fn summarize_seed(
        &mut self,
        seed: &[Message],
        front: usize,
        keep: usize,
        budget: Budget,
    ) -> (Vec<Message>, &'static str, Option<&'static str>) {
        let trimmed = || (seed[seed.len() - keep..].to_vec(), "trimmed", None);
        let session = self.session;
        let hooks = &session.hooks;
        if !hooks
            .hooks
            .commits(Binding::Compaction, CommitPolicy::ReplaceContext)
        {
            return trimmed();
        }
        let compaction = &session.settings.context.compaction;
        let event = Event::Compaction(Compaction {
            messages: seed[..front].to_vec(),
            session_tokens: conversation::tokens_all(&seed[..front]),
            threshold: compaction.threshold,
            model: compaction.model.clone(),
            system_prompt: compaction.system_prompt.clone(),
        });
        let answers = hooks
            .fire(Binding::Compaction, &event, Some(&self.run.task.id))
            .await;
        let summary = answers.into_iter().find_map(|a| match a.verdict {
            Ok(Verdict::ReplaceContext(messages)) if a.policy == CommitPolicy::ReplaceContext => {
                Some(messages)
            }
            _ => None,
        });
        let Some(summary) = summary else {
            return trimmed();
        };
        if handed::messages("a seed summary", &summary, &session.settings.limits).is_err() {
            return trimmed();
        }
        let summary: Vec<Message> = summary.iter().map(seed::seed_message).collect();
        let summary_tokens = conversation::tokens_all(&summary);
        if summary_tokens > budget.tokens {
            return (
                Vec::new(),
                "rejected",
                Some(seed::Rejected::MessageOverBudget.as_str()),
            );
        }
        let sizes: Vec<u64> = seed.iter().map(conversation::tokens).collect();
        let fit = seed::newest_that_fit(&sizes, budget.tokens - summary_tokens);
        let mut committed = summary;
        committed.extend_from_slice(&seed[seed.len() - fit..]);
        (committed, "compacted", None)
    }

    /// `on-inference`: after each parsed reply. Artifacts are kept for the frames
    /// before the task's final status.
    pub(super) async fn inference_hooks(
        &mut self,
        turn: u64,
        reply: &InferenceReply,
        input_tokens: u64,
        output_tokens: u64,
    ) -> wasmtime::Result<()> {
        let hooks = &self.session.hooks;
        if !hooks.listens(Binding::Inference) {
            return Ok(());
        }
        let (decision, tool) = reply::decision(reply);
        let event = Event::Inference(Inference {
            turn: turn as u32,
            input_tokens,
            output_tokens,
            decision: decision.to_string(),
            tool_name: tool,
            output: reply.text.clone(),
        });
        let answers = hooks
            .fire(Binding::Inference, &event, Some(&self.run.task.id))
            .await;
        let task = Some(self.run.task.id.as_str());
        hooks.unhonored(&answers, Binding::Inference, task);
        for answer in answers {
            if let Ok(Verdict::Artifact(json)) = answer.verdict {
                match self.admit_artifact(&answer.hook, &json) {
                    Ok(charge) => {
                        self.run.artifact_bytes += json.len() as u64;
                        self.run.artifact_charges.push(charge);
                        self.run.hook_artifacts.push((answer.hook, json));
                    }
                    Err(why) => {
                        self.session.workdir.log(&why);
                        hooks.dispatch_error(&answer.hook, "on-inference", "artifact", task);
                    }
                }
            }
        }
        Ok(())
    }

    /// An artifact is kept until the task's end only within the task's
    /// `max_hook_artifact_bytes` and the capsule's memory budget; `Err` says why not.
    fn admit_artifact(&self, hook: &str, json: &str) -> Result<crate::memory::Charge, String> {
        let limit = self.session.settings.limits.max_hook_artifact_bytes;
        let bytes = json.len() as u64;
        if self.run.artifact_bytes.saturating_add(bytes) > limit {
            return Err(format!(
                "hook '{hook}': artifact of {bytes} bytes dropped: the task's artifacts would \
                 pass capabilities.limits.max_hook_artifact_bytes ({limit}), {} bytes already \
                 kept",
                self.run.artifact_bytes
            ));
        }
        if !matches!(serde_json::from_str::<Value>(json), Ok(Value::Object(_))) {
            return Err(format!(
                "hook '{hook}': artifact dropped: it is not a JSON object"
            ));
        }
        let memory = &self.session.settings.grants.memory;
        memory
            .charge(bytes, "a hook artifact")
            .map_err(|why| format!("hook '{hook}': artifact dropped: {why}"))
    }

    /// `compact`: the `on-compaction` hooks over the loop's conversation. `Ok(None)`:
    /// nothing replaced; `Err`: the compaction hook failed, which should end the task.
    pub(super) async fn compact(
        &mut self,
        messages: Vec<Message>,
        size: Option<Usage>,
    ) -> wasmtime::Result<Result<Option<Vec<Message>>, String>> {
        let turn = self.run.counts.turns.saturating_sub(1);
        let size = match size {
            Some(usage) => Size {
                tokens: usage.input_tokens.saturating_add(usage.output_tokens),
                source: if usage.reported { "actual" } else { "estimate" },
            },
            None => Size {
                tokens: conversation::tokens_all(&messages),
                source: "estimate",
            },
        };
        let tokens = size.tokens;
        let session = self.session;
        let limits = &session.settings.limits;
        if let Err(why) = handed::messages("the conversation to compact", &messages, limits) {
            return Ok(Err(why));
        }
        let context = &session.settings.context;
        let hooks = &session.hooks;
        if !hooks.listens(Binding::Compaction) {
            let past = match context.window {
                Some(window) => {
                    format!("past the compaction threshold of context.max_tokens {window}")
                }
                None => "and the session loop asked to compact it".to_string(),
            };
            session.workdir.log(&format!(
                "warning: the conversation holds {tokens} tokens, {past}, and no \
                 on-compaction hook is bound"
            ));
            return Ok(Ok(None));
        }
        let threshold = context.compaction.threshold;
        let event = Event::Compaction(Compaction {
            messages: messages.clone(),
            session_tokens: tokens,
            threshold,
            model: context.compaction.model.clone(),
            system_prompt: context.compaction.system_prompt.clone(),
        });
        let answers = hooks
            .fire(Binding::Compaction, &event, Some(&self.run.task.id))
            .await;
        hooks.unhonored(&answers, Binding::Compaction, Some(&self.run.task.id));
        let mut replacement = None;
        for answer in answers {
            match answer.verdict {
                // Only a hook that may replace the conversation is the compaction hook;
                // another one failing here is only logged.
                Err(why) if answer.policy == CommitPolicy::ReplaceContext => {
                    return Ok(Err(format!(
                        "compaction hook '{}' failed: {why}",
                        answer.hook
                    )));
                }
                Err(_) => {}
                Ok(Verdict::ReplaceContext(messages))
                    if answer.policy == CommitPolicy::ReplaceContext && replacement.is_none() =>
                {
                    replacement = Some((answer.hook, messages));
                }
                Ok(_) => {}
            }
        }
        let Some((hook, replacement)) = replacement else {
            self.record(declined(turn, size, "no_hook_replacement"))?;
            return Ok(Ok(None));
        };
        if let Err(why) = handed::messages("its replacement", &replacement, limits) {
            return Ok(Err(format!("compaction hook '{hook}' failed: {why}")));
        }
        match compaction::check(&messages, replacement) {
            Ok(compacted) => {
                let after = conversation::tokens_all(&compacted);
                let task_id = &self.run.task.id;
                self.record(line::compaction(task_id, turn, tokens, after, size.source))?;
                session.workdir.log(&format!(
                    "compaction at turn {turn}: {tokens} tokens before, {after} after"
                ));
                if context.compaction.dump_summaries {
                    session.dump_summary(turn, tokens, after, &messages, &compacted);
                }
                Ok(Ok(Some(compacted)))
            }
            Err(reason) => {
                self.record(declined(turn, size, reason))?;
                Ok(Ok(None))
            }
        }
    }

    /// The decision before a call runs: `Some` when a policy hook refused it. A `deny`
    /// hook fails closed: only a clean `none` lets the call through.
    pub(super) async fn call_decision(
        &mut self,
        turn: u64,
        call: &ToolCall,
    ) -> wasmtime::Result<Option<Refused>> {
        let session = self.session;
        let hooks = &session.hooks;
        let Some((binding, event)) = hooks.call_event(&session.tools, turn, call, None) else {
            return Ok(None);
        };
        let answers = hooks.fire(binding, &event, Some(&self.run.task.id)).await;
        let task = Some(self.run.task.id.as_str());
        let mut refused = None;
        for answer in &answers {
            if answer.policy != CommitPolicy::Deny || refused.is_some() {
                continue;
            }
            refused = match &answer.verdict {
                Ok(Verdict::None) => None,
                Ok(Verdict::Deny(reason)) if reason.trim().is_empty() => {
                    Some("refused by policy".to_string())
                }
                Ok(Verdict::Deny(reason)) => Some(reason.clone()),
                // Fail-closed, and a fault like any arm a policy does not allow.
                Ok(other) => {
                    let arm = hooks::arm_name(other);
                    session.workdir.log(&format!(
                        "hook '{}' answered {arm} at {}, which its commit_policy 'deny' \
                         does not allow; the call is refused",
                        answer.hook,
                        binding.as_str()
                    ));
                    hooks.dispatch_error(&answer.hook, binding.as_str(), arm, task);
                    Some(format!(
                        "the policy hook answered {arm}, which is not a decision"
                    ))
                }
                Err(why) => Some(format!("the policy hook failed: {why}")),
            }
            .map(|reason| Refused {
                hook: answer.hook.clone(),
                reason,
            });
        }
        let others: Vec<Answer> = answers
            .into_iter()
            .filter(|a| a.policy != CommitPolicy::Deny)
            .collect();
        hooks.unhonored(&others, binding, task);
        if let Some(refused) = &refused {
            let target = match &event {
                Event::Shell(shell) => shell.binary.clone(),
                _ => call.name.clone(),
            };
            self.record(line::call_denied(&Denied {
                turn,
                event: binding.as_str(),
                hook: &refused.hook,
                target: &target,
                reason: &refused.reason,
            }))?;
        }
        Ok(refused)
    }

    /// The observation after a call ran; verdicts are not decisions any more.
    pub(super) async fn call_observation(
        &mut self,
        turn: u64,
        call: &ToolCall,
        done: &Dispatched,
    ) -> wasmtime::Result<()> {
        let session = self.session;
        let hooks = &session.hooks;
        let Some((binding, event)) = hooks.call_event(&session.tools, turn, call, Some(done))
        else {
            return Ok(());
        };
        let answers = hooks.fire(binding, &event, Some(&self.run.task.id)).await;
        let task = Some(self.run.task.id.as_str());
        for answer in &answers {
            if let Ok(verdict @ Verdict::Deny(_)) = &answer.verdict {
                hooks.dispatch_error(
                    &answer.hook,
                    binding.as_str(),
                    hooks::arm_name(verdict),
                    task,
                );
            }
        }
        let rest: Vec<Answer> = answers
            .into_iter()
            .filter(|a| !matches!(a.verdict, Ok(Verdict::Deny(_))))
            .collect();
        hooks.unhonored(&rest, binding, task);
        Ok(())
    }

    /// `on-task-end`: the reopen a hook asks for, if any (first one wins).
    pub(super) async fn task_end_hooks(
        &mut self,
        exit_status: ExitStatus,
        result: &str,
        completed: bool,
    ) -> wasmtime::Result<Option<(String, String)>> {
        let hooks = &self.session.hooks;
        if !hooks.listens(Binding::TaskEnd) {
            return Ok(None);
        }
        let event = Event::TaskEnd(TaskEnd {
            task_id: self.run.task.id.clone(),
            exit_status: exit_status.as_str().to_string(),
            result: result.to_string(),
            attempt: self.run.reopens + 1,
        });
        let answers = hooks
            .fire(Binding::TaskEnd, &event, Some(&self.run.task.id))
            .await;
        // Only a completed attempt is reopened: a failed one has already told its
        // clients it is final.
        let (reopens, rest): (Vec<Answer>, Vec<Answer>) = answers.into_iter().partition(|a| {
            completed
                && a.policy == CommitPolicy::ReopenTask
                && matches!(a.verdict, Ok(Verdict::ReopenTask(_)))
        });
        hooks.unhonored(&rest, Binding::TaskEnd, Some(&self.run.task.id));
        Ok(reopens.into_iter().find_map(|a| match a.verdict {
            Ok(Verdict::ReopenTask(reason)) => Some((a.hook, reason)),
            _ => None,
        }))
    }
}

impl Session {
    /// `inference.compaction.dump_summaries`: what the hook wrote in place of the
    /// dropped messages, one line per committed compaction in
    /// `out/compaction-summaries.jsonl`.
    fn dump_summary(&self, turn: u64, before: u64, after: u64, old: &[Message], new: &[Message]) {
        let line = json!({
            "turn": turn,
            "tokens_before": before,
            "tokens_after": after,
            "summary": compaction::summary(old, new),
        });
        let rel = "out/compaction-summaries.jsonl";
        let text = format!("{}\n", crate::secret::scrub(&line.to_string()));
        // The dump is a host file in the workdir: it counts against the quota too. A
        // refusal is logged; the compaction stands.
        let _ = self.append_counted(rel, &text);
    }
}

impl ContextPolicy {
    fn seed_budget(&self) -> Budget {
        let tokens = self
            .window
            .map_or(0, |w| (f64::from(w) * self.seed_budget).floor() as u64);
        Budget {
            tokens,
            margin: self.seed_margin,
            process_transport: self.process_transport,
        }
    }
}

fn declined(turn: u64, size: Size, reason: &str) -> line::Line {
    line::compaction_declined(turn, size.tokens, size.source, reason)
}

/// A shell call's `command` argument, as the trace records it.
pub(super) fn shell_command(input: &str) -> String {
    serde_json::from_str::<Value>(input)
        .ok()
        .and_then(|v| v.get("command").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_default()
}

/// A shell call's command as hooks see it: at most 200 characters.
fn command_of(input: &str) -> String {
    shell_command(input).chars().take(200).collect()
}

fn path_env() -> String {
    std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into())
}
