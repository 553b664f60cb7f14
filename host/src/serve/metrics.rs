//! `GET /metrics`: the server's figures in the Prometheus text format (0.0.4). Only
//! totals: no capsule id or name appears, so the endpoint needs no token and tells a
//! scraper nothing about any tenant.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::fleet::Fleet;

/// Upper bounds, in seconds, of the start-time histogram's buckets.
const BUCKETS: [f64; 10] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0];

/// What the server counts as it goes.
#[derive(Default)]
pub struct Stats {
    /// Capsule starts (staging to ready) per bucket, then every start, then the
    /// summed microseconds.
    buckets: [AtomicU64; BUCKETS.len()],
    starts: AtomicU64,
    start_micros: AtomicU64,
}

impl Stats {
    pub fn started(&self, took: Duration) {
        let secs = took.as_secs_f64();
        for (bound, bucket) in BUCKETS.iter().zip(&self.buckets) {
            if secs <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.starts.fetch_add(1, Ordering::Relaxed);
        self.start_micros
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }
}

pub fn render(fleet: &Fleet) -> String {
    let mut out = String::new();
    let capsules = fleet.all();
    let mut by_state: Vec<(&str, u64)> =
        ["starting", "running", "idle", "ended", "stopped", "failed"]
            .into_iter()
            .map(|s| (s, 0))
            .collect();
    let (mut tasks, mut memory) = (0u64, 0u64);
    for hosted in &capsules {
        let state = hosted.state();
        if let Some(count) = by_state.iter_mut().find(|(s, _)| *s == state) {
            count.1 += 1;
        }
        tasks += hosted.tasks_run();
        memory += hosted.memory_bytes();
    }
    header(
        &mut out,
        "mur_capsules",
        "gauge",
        "Capsules hosted, by state.",
    );
    for (state, n) in by_state {
        let _ = writeln!(out, "mur_capsules{{state=\"{state}\"}} {n}");
    }
    let bus = crate::bus::totals();
    let frames_dropped = bus.frames_dropped;
    let counters = [
        (
            "mur_components_compiled_total",
            "counter",
            "Components compiled from their WebAssembly; one shared by several capsules counts once.",
            crate::engine::compiled_total(),
        ),
        (
            "mur_tasks_total",
            "counter",
            "Tasks the hosted capsules have run.",
            tasks,
        ),
        (
            "mur_frames_written_total",
            "counter",
            "Frames written to clients.",
            bus.frames_written,
        ),
        (
            "mur_frames_dropped_total",
            "counter",
            "Frames dropped for clients that fell behind.",
            frames_dropped,
        ),
        (
            "mur_connections",
            "gauge",
            "Connections open to the listener.",
            fleet.connections.load(Ordering::Relaxed) as u64,
        ),
        (
            "mur_guest_memory_bytes",
            "gauge",
            "Linear memory the capsules' instances hold.",
            memory,
        ),
        (
            "mur_resident_memory_bytes",
            "gauge",
            "Resident set size of the process.",
            resident_bytes(),
        ),
    ];
    for (name, kind, help, value) in counters {
        header(&mut out, name, kind, help);
        let _ = writeln!(out, "{name} {value}");
    }
    let spent = crate::spend::totals();
    header(
        &mut out,
        "mur_inference_tokens_total",
        "counter",
        "Tokens the capsules' inference used: what providers reported, else the host's estimate.",
    );
    for (kind, n) in [
        ("input", spent.input_tokens),
        ("output", spent.output_tokens),
    ] {
        let _ = writeln!(out, "mur_inference_tokens_total{{kind=\"{kind}\"}} {n}");
    }
    header(
        &mut out,
        "mur_spend_refusals_total",
        "counter",
        "Inference calls a spend ceiling refused.",
    );
    let _ = writeln!(out, "mur_spend_refusals_total {}", spent.refusals);
    spans(&mut out);
    let stats = &fleet.stats;
    header(
        &mut out,
        "mur_capsule_start_seconds",
        "histogram",
        "Time from staging a capsule to its address taking tasks.",
    );
    for (bound, bucket) in BUCKETS.iter().zip(&stats.buckets) {
        let n = bucket.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "mur_capsule_start_seconds_bucket{{le=\"{bound}\"}} {n}"
        );
    }
    let starts = stats.starts.load(Ordering::Relaxed);
    let sum = stats.start_micros.load(Ordering::Relaxed) as f64 / 1e6;
    let _ = writeln!(
        out,
        "mur_capsule_start_seconds_bucket{{le=\"+Inf\"}} {starts}"
    );
    let _ = writeln!(out, "mur_capsule_start_seconds_sum {sum}");
    let _ = writeln!(out, "mur_capsule_start_seconds_count {starts}");
    out
}

/// What the OpenTelemetry exporter sent and lost.
fn spans(out: &mut String) {
    let spans = crate::telemetry::export::totals();
    header(
        out,
        "mur_otel_spans_exported_total",
        "counter",
        "Spans the OpenTelemetry collector took.",
    );
    let _ = writeln!(out, "mur_otel_spans_exported_total {}", spans.exported);
    header(
        out,
        "mur_otel_spans_lost_total",
        "counter",
        "Spans lost: the export queue was full, or the collector refused or never answered.",
    );
    for (reason, n) in [
        ("queue_full", spans.dropped),
        ("export_failed", spans.failed),
    ] {
        let _ = writeln!(out, "mur_otel_spans_lost_total{{reason=\"{reason}\"}} {n}");
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The process's resident set, from `/proc/self/statm` (0 where there is none).
pub fn resident_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    // SAFETY: sysconf only reads a configuration value.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}
