//! The small top-level sections: `context`, `lifecycle`, `network` and `trace`.

use super::fields::{Cx, Section};
use super::{
    AfterTask, Context, Conversation, Lifecycle, Network, Result, TaskAcceptance, TraceSettings,
};

pub(super) fn context(cx: &mut Cx, top: &Section) -> Result<Context> {
    let sec = top.sub(cx, "context")?;
    let defaults = Context::default();
    let hint = "a fraction, e.g. 0.10 for 10%";
    let fraction = |key| sec.opt_fraction(cx, key).map_err(|e| e.hint(hint));
    Ok(Context {
        max_tokens: sec.opt_u32(cx, "max_tokens", 1)?,
        seed_budget: fraction("seed_budget")?.unwrap_or(defaults.seed_budget),
        seed_overflow_margin: fraction("seed_overflow_margin")?
            .unwrap_or(defaults.seed_overflow_margin),
    })
}

pub(super) fn lifecycle(cx: &mut Cx, top: &Section) -> Result<Lifecycle> {
    let sec = top.sub(cx, "lifecycle")?;
    let d = Lifecycle::default();
    let acceptance = [
        ("none", TaskAcceptance::None),
        ("single", TaskAcceptance::Single),
        ("queue", TaskAcceptance::Queue),
    ];
    let after = [("exit", AfterTask::Exit), ("sleep", AfterTask::Sleep)];
    let conversation = [
        ("stateless", Conversation::Stateless),
        ("threaded", Conversation::Threaded),
    ];
    let depth_hint = "hold at least 1 waiting task, or use 'task_acceptance: single'";
    let queue_depth = sec.opt_uint(
        cx,
        "queue_depth",
        1,
        u64::try_from(usize::MAX).unwrap_or(u64::MAX),
    );
    Ok(Lifecycle {
        task_acceptance: sec
            .opt_enum(cx, "task_acceptance", &acceptance)?
            .unwrap_or(d.task_acceptance),
        after_task: sec
            .opt_enum(cx, "after_task", &after)?
            .unwrap_or(d.after_task),
        queue_depth: queue_depth
            .map_err(|e| e.hint(depth_hint))?
            .map_or(d.queue_depth, |v| usize::try_from(v).unwrap_or(usize::MAX)),
        conversation: sec
            .opt_enum(cx, "conversation", &conversation)?
            .unwrap_or(d.conversation),
        max_task_reopens: sec
            .opt_u32(cx, "max_task_reopens", 0)?
            .unwrap_or(d.max_task_reopens),
        shell_grace_secs: sec
            .opt_uint(cx, "shell_grace_secs", 0, u64::MAX)?
            .unwrap_or(d.shell_grace_secs),
        input_timeout_secs: sec.opt_uint(cx, "input_timeout_secs", 0, u64::MAX)?,
        parallel_tools: sec
            .opt_uint(cx, "parallel_tools", 1, MAX_PARALLEL_TOOLS)?
            .map_or(d.parallel_tools, |v| v as usize),
        task_history: sec
            .opt_uint(cx, "task_history", 1, MAX_TASK_HISTORY)?
            .map_or(d.task_history, |v| v as usize),
    })
}

/// Tool calls of one reply that may run side by side: each holds its own component
/// instance or process, so the ceiling keeps one reply from taking the machine.
const MAX_PARALLEL_TOOLS: u64 = 16;

/// Tasks the A2A task store may keep: each holds its messages and tool results in
/// memory, so the ceiling keeps a typo from holding gigabytes.
const MAX_TASK_HISTORY: u64 = 100_000;

pub(super) fn network(cx: &mut Cx, top: &Section) -> Result<Network> {
    let sec = top.sub(cx, "network")?;
    let port = sec.opt_uint(cx, "internal_port", 1, u16::MAX.into());
    let hint = "omit 'internal_port' to let the OS pick a free port";
    let port = port.map_err(|e| e.hint(hint))?;
    Ok(Network {
        internal_port: port.map(|p| u16::try_from(p).unwrap_or(u16::MAX)),
        authentication: super::authentication::read(cx, &sec)?,
    })
}

pub(super) fn trace(cx: &mut Cx, top: &Section) -> Result<TraceSettings> {
    let sec = top.sub(cx, "trace")?;
    Ok(TraceSettings {
        include_tool_output: sec.opt_bool(cx, "include_tool_output")?.unwrap_or(false),
    })
}

/// `observability`: upstream's `otel_endpoint` (a collector's base URL), and
/// `capture_content` (prompt and reply text on the spans).
pub(super) fn observability(
    cx: &mut Cx,
    top: &Section,
) -> Result<crate::telemetry::settings::Observability> {
    let sec = top.sub(cx, "observability")?;
    let otel_endpoint = match sec.opt_str(cx, "otel_endpoint")? {
        Some((url, line)) => Some(
            crate::telemetry::settings::checked(&url, "observability.otel_endpoint").map_err(
                |e| {
                    cx.invalid(line, "observability.otel_endpoint", e.message)
                        .hint("name the collector's OTLP/HTTP base URL, e.g. http://127.0.0.1:4318")
                },
            )?,
        ),
        None => None,
    };
    Ok(crate::telemetry::settings::Observability {
        otel_endpoint,
        capture_content: sec.opt_bool(cx, "capture_content")?.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    #[test]
    fn seed_fractions_outside_zero_to_one_rejected() {
        let s = Scratch::new();
        let e = s.err(&base("context:\n  seed_budget: 1.5\n"));
        let want = "error[E-MAN-003]: murmur.yaml:7: invalid context config for \
                    'context.seed_budget': expected a number from 0 to 1, found '1.5'\n  \
                    hint: a fraction, e.g. 0.10 for 10%";
        assert_eq!(text(&e), want);
        let e = s.err(&base("context:\n  seed_overflow_margin: -0.1\n"));
        assert!(e.message.contains("'context.seed_overflow_margin'"), "{e}");
        let m = s.ok(&base(
            "context:\n  seed_budget: 0\n  seed_overflow_margin: 1\n",
        ));
        assert_eq!(m.manifest.context.seed_overflow_margin, 1.0);
    }

    #[test]
    fn internal_port_range() {
        let s = Scratch::new();
        let e = s.err(&base("network:\n  internal_port: 65536\n"));
        assert!(
            e.message.ends_with("must be at most 65535, found 65536"),
            "{e}"
        );
        let e = s.err(&base("network:\n  internal_port: 0\n"));
        assert!(e.hint.unwrap().contains("OS pick"));
    }
}
