//! `mur trace show`: one session in sections, laid out as upstream's so the two read
//! alike side by side.

use super::fmt::{self, section};
use super::select::Places;
use super::summary::{Summary, summarize};
use super::{ShowArgs, print_json};
use crate::error::Error;

/// How many characters of a call's input a row shows.
const INPUT_CHARS: usize = 120;

pub fn run(args: &ShowArgs) -> Result<(), Error> {
    let found = Places::new(&args.place).resolve(args.session.as_deref())?;
    let parsed = found.read()?;
    let summary = summarize(&found.id, &parsed);
    if args.place.json {
        print_json(&serde_json::to_value(&summary).unwrap_or_default());
    } else {
        super::out(&render(&summary));
    }
    Ok(())
}

/// Every section, each ending with a blank line.
pub fn render(s: &Summary) -> String {
    let mut out = Vec::new();
    session(s, &mut out);
    turns(s, &mut out);
    tokens(s, &mut out);
    tool_calls(s, &mut out);
    shell_calls(s, &mut out);
    compaction(s, &mut out);
    failed(s, &mut out);
    reopens(s, &mut out);
    denied(s, &mut out);
    tasks(s, &mut out);
    // A row quotes the trace (tool names, inputs, reasons): it stays one line.
    out.iter()
        .map(|l| format!("{}\n", crate::escape::line(l)))
        .collect()
}

/// A `label:` padded to upstream's column, and its value.
fn field(label: &str, value: impl std::fmt::Display) -> String {
    format!("{:<11} {value}", format!("{label}:"))
}

fn session(s: &Summary, out: &mut Vec<String>) {
    out.push(section("Session"));
    out.push(field("session", &s.session_id));
    if let Some(name) = &s.capsule_name {
        let version = s.capsule_version.as_deref().unwrap_or("?");
        out.push(field("capsule", format!("{name} v{version}")));
    }
    if let Some(model) = &s.model {
        out.push(field("model", model));
    }
    if s.ended {
        out.push(field("status", s.status()));
        out.push(field("duration", fmt::duration(s.duration_ms)));
    } else {
        out.push(field(
            "status",
            "ended without a session_end (killed, or still running)",
        ));
        out.push(field(
            "duration",
            format!("{}  (first to last event)", fmt::duration(s.duration_ms)),
        ));
        out.push(field(
            "totals",
            "counted from the events recorded; no session_end recorded the session's own",
        ));
    }
    if !s.capabilities.is_empty() {
        out.push(field("capabilities", s.capabilities.join(", ")));
    }
    if !s.tools_declared.is_empty() {
        out.push(field("tools", s.tools_declared.join(", ")));
    }
    if let Some(source) = &s.system_prompt_source {
        let sha = s
            .system_prompt_sha256
            .as_deref()
            .map(|sha| format!("  {}", fmt::short_id(sha, 12)))
            .unwrap_or_default();
        out.push(field("prompt", format!("{source}{sha}")));
    }
    out.push(field("trace", &s.path));
    if let Some(line) = s.torn_line {
        out.push(field("note", fmt::torn_note(line)));
    }
    out.push(String::new());
}

fn turns(s: &Summary, out: &mut Vec<String>) {
    out.push(section("Turns"));
    let max = s
        .max_turns
        .map_or_else(|| "no cap".to_string(), |m| m.to_string());
    out.push(field("count", format!("{}  (max: {max})", s.turns)));
    for row in s.turn_rows.iter().filter(|r| r.error_code.is_some()) {
        let code = row.error_code.as_deref().unwrap_or_default();
        out.push(field("failed", format!("turn {}  {code}", row.turn)));
    }
    out.push(String::new());
}

fn tokens(s: &Summary, out: &mut Vec<String>) {
    out.push(section("Tokens"));
    let per_turn = |n: u64| match s.turns {
        0 => "—".to_string(),
        t => format!("{:.0}", n as f64 / t as f64),
    };
    out.push(field(
        "input",
        format!(
            "{}  (avg {}/turn)",
            fmt::thousands(s.input_tokens),
            per_turn(s.input_tokens)
        ),
    ));
    out.push(field(
        "output",
        format!(
            "{}  (avg {}/turn)",
            fmt::thousands(s.output_tokens),
            per_turn(s.output_tokens)
        ),
    ));
    out.push(field(
        "total",
        fmt::thousands(s.input_tokens.saturating_add(s.output_tokens)),
    ));
    out.push(String::new());
}

fn tool_calls(s: &Summary, out: &mut Vec<String>) {
    out.push(section("Tool calls"));
    if s.calls.is_empty() {
        out.push(field("count", s.tool_calls));
        out.push(String::new());
        return;
    }
    let ok = s.calls.iter().filter(|c| c.ok).count();
    let rate = 100.0 * ok as f64 / s.calls.len() as f64;
    out.push(field(
        "count",
        format!(
            "{}  ({ok} ok, {} error)  success {rate:.1}%",
            s.tool_calls, s.tool_errors
        ),
    ));
    let durations: Vec<u64> = s.calls.iter().map(|c| c.duration_ms).collect();
    out.push(field("latency", format!("avg {}", average(&durations))));
    // In trace order: each call, and each turn that made none with what it decided.
    let mut rows: Vec<(usize, String)> = s
        .calls
        .iter()
        .map(|c| {
            let input = c
                .input
                .as_ref()
                .map(|i| format!("  {}", fmt::input_inline(i, INPUT_CHARS)))
                .unwrap_or_default();
            let row = format!(
                "  turn {}  {} {}ms {}{input}",
                c.turn,
                c.tool_name,
                c.duration_ms,
                fmt::mark(c.ok)
            );
            (c.line, row)
        })
        .collect();
    rows.extend(
        s.turn_rows
            .iter()
            .filter(|t| {
                !s.calls
                    .iter()
                    .any(|c| c.turn == t.turn && c.task_id == t.task_id)
            })
            .map(|t| (t.line, format!("  turn {}  {}", t.turn, t.decision))),
    );
    rows.sort_by_key(|(line, _)| *line);
    out.extend(rows.into_iter().map(|(_, row)| row));
    out.push(String::new());
}

fn shell_calls(s: &Summary, out: &mut Vec<String>) {
    out.push(section("Shell calls"));
    out.push(field("count", s.shell_calls));
    if !s.shells.is_empty() {
        out.push(field("exit codes", exit_codes(s)));
        let durations: Vec<u64> = s.shells.iter().map(|c| c.duration_ms).collect();
        out.push(field("latency", format!("avg {}", average(&durations))));
        for c in &s.shells {
            out.push(format!(
                "  turn {}  {}  exit {}  {}ms  {}",
                c.turn,
                c.binary,
                c.exit_code,
                c.duration_ms,
                fmt::cut(&c.command, INPUT_CHARS)
            ));
        }
    }
    let d = &s.detached;
    if d.detached > 0 || d.lost > 0 {
        out.push(field(
            "detached",
            format!(
                "{}  ({} completed, {} abandoned, {} lost)",
                d.detached, d.completed, d.abandoned, d.lost
            ),
        ));
    }
    out.push(String::new());
}

/// The mean of a non-empty list of durations, as a duration (summed in u128: the
/// figures are input and must not overflow).
fn average(ms: &[u64]) -> String {
    let total: u128 = ms.iter().map(|m| u128::from(*m)).sum();
    let mean = total / ms.len().max(1) as u128;
    fmt::duration(u64::try_from(mean).unwrap_or(u64::MAX))
}

/// `2 ok, 1 failed (exit 2)`.
fn exit_codes(s: &Summary) -> String {
    let mut codes: Vec<i64> = s.shells.iter().map(|c| c.exit_code).collect();
    codes.sort_unstable();
    codes.dedup();
    codes
        .iter()
        .map(|code| {
            let n = s.shells.iter().filter(|c| c.exit_code == *code).count();
            match code {
                0 => format!("{n} ok"),
                code => format!("{n} failed (exit {code})"),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn compaction(s: &Summary, out: &mut Vec<String>) {
    out.push(section("Compaction"));
    if s.compactions.is_empty() {
        out.push(field("fired", "no"));
    }
    for c in &s.compactions {
        out.push(field(
            "fired",
            format!(
                "yes  at turn {}  ({} → {} tokens)",
                c.turn,
                fmt::thousands(c.tokens_before),
                fmt::thousands(c.tokens_after)
            ),
        ));
    }
    for d in &s.compactions_declined {
        out.push(field(
            "declined",
            format!(
                "at turn {}  ({} tokens)  {}",
                d.turn,
                fmt::thousands(d.tokens),
                d.reason
            ),
        ));
    }
    out.push(String::new());
}

/// Only when a runtime error ended an attempt.
fn failed(s: &Summary, out: &mut Vec<String>) {
    if s.failures.is_empty() {
        return;
    }
    out.push(section("Failed"));
    for f in &s.failures {
        let task = f
            .task_id
            .as_deref()
            .map(|t| format!("  {t}"))
            .unwrap_or_default();
        let turn = f.turn.map(|t| format!("  at turn {t}")).unwrap_or_default();
        out.push(format!("task_failed  {}{task}{turn}", f.cause));
        out.push(format!("  reason: {}", fmt::cut(&f.reason, 2000)));
    }
    out.push(String::new());
}

/// Only when a hook sent a task back.
fn reopens(s: &Summary, out: &mut Vec<String>) {
    if s.reopens.is_empty() {
        return;
    }
    out.push(section("Reopens"));
    for r in &s.reopens {
        out.push(format!(
            "reopen {}  by {}  “{}”",
            r.reopen_number,
            r.hook_name,
            fmt::cut(&r.reason, 80)
        ));
    }
    out.push(String::new());
}

/// Only when a policy hook refused a call: no `tool_call` or `shell` line exists for
/// it, so this is its only account.
fn denied(s: &Summary, out: &mut Vec<String>) {
    if s.denials.is_empty() {
        return;
    }
    out.push(section("Denied calls"));
    for d in &s.denials {
        out.push(format!(
            "turn {}  {}  {}  by {}  “{}”",
            d.turn,
            d.event,
            d.target,
            d.hook_name,
            fmt::cut(&d.reason, 80)
        ));
    }
    out.push(String::new());
}

/// Only for a session that ran more than one task.
fn tasks(s: &Summary, out: &mut Vec<String>) {
    if s.tasks.len() < 2 {
        return;
    }
    out.push(section("Tasks"));
    for (i, t) in s.tasks.iter().enumerate() {
        let reopens = match t.reopen_count {
            0 => String::new(),
            n => format!("  reopens: {n}"),
        };
        out.push(format!(
            "task {}  {}  turns: {}  in: {}  out: {}  {}  {}{reopens}",
            i + 1,
            fmt::short_id(&t.task_id, 12),
            t.turns,
            fmt::thousands(t.input_tokens),
            fmt::thousands(t.output_tokens),
            t.exit_status.as_deref().unwrap_or("unended"),
            fmt::duration(t.duration_ms),
        ));
    }
    out.push(String::new());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The sections a session has only when something went so: each line, as upstream
    /// prints it.
    #[test]
    fn failures_reopens_and_denials_have_sections_of_their_own() {
        let text = [
            r#"{"event_type":"task_reopened","task_id":"tsk_1","hook_name":"gate","reason":"say France","reopen_number":1}"#,
            r#"{"event_type":"call_denied","turn":2,"event":"on-shell","hook_name":"guard","target":"/bin/bash","reason":"no curl"}"#,
            r#"{"event_type":"task_failed","task_id":"tsk_1","cause":"runtime_error","reason":"trapped"}"#,
        ]
        .join("\n");
        let parsed = super::super::parse::parse(Path::new("t"), text.as_bytes()).unwrap();
        let shown = render(&summarize("ses_x", &parsed));
        let tail: Vec<&str> = shown
            .lines()
            .skip_while(|l| !l.starts_with("── Failed"))
            .collect();
        assert_eq!(
            tail,
            [
                section("Failed").as_str(),
                "task_failed  runtime_error  tsk_1",
                "  reason: trapped",
                "",
                section("Reopens").as_str(),
                "reopen 1  by gate  “say France”",
                "",
                section("Denied calls").as_str(),
                "turn 2  on-shell  /bin/bash  by guard  “no curl”",
                "",
            ]
        );
    }

    /// Figures at the edge of u64, in a trace no `session_end` closed: summed without
    /// overflowing, and shown.
    #[test]
    fn huge_figures_are_shown_not_overflowed() {
        let max = u64::MAX;
        let text = format!(
            "{{\"event_type\":\"inference\",\"turn\":0,\"input_tokens\":{max},\"output_tokens\":{max},\"decision\":\"tool_call\",\"tool_name\":\"t\"}}\n\
             {{\"event_type\":\"inference\",\"turn\":1,\"input_tokens\":{max},\"output_tokens\":1,\"decision\":\"end_turn\"}}\n\
             {{\"event_type\":\"tool_call\",\"turn\":0,\"tool_name\":\"t\",\"duration_ms\":{max},\"status\":\"ok\"}}\n\
             {{\"event_type\":\"tool_call\",\"turn\":0,\"tool_name\":\"t\",\"duration_ms\":{max},\"status\":\"error\"}}\n"
        );
        let parsed = super::super::parse::parse(Path::new("t"), text.as_bytes()).unwrap();
        let shown = render(&summarize("ses_x", &parsed));
        assert!(
            shown.contains("input:      18,446,744,073,709,551,615  (avg "),
            "{shown}"
        );
        assert!(
            shown.contains("count:      2  (1 ok, 1 error)  success 50.0%"),
            "{shown}"
        );
        assert!(
            shown.contains("status:     ended without a session_end"),
            "{shown}"
        );
    }
}
