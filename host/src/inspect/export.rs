//! `mur trace export`: a stored session's `trace.jsonl` sent to an OpenTelemetry
//! collector as the spans it would have given live, ids included, so a run that
//! happened without a collector can be looked at in one afterwards.
//!
//! A trace written before lines carried span ids (or by upstream Murmur) gets the ids
//! a live run would have given it, from its own event and session ids.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use super::ExportArgs;
use super::select::Places;
use crate::error::Error;
use crate::telemetry::settings::{self, Observability};
use crate::telemetry::spans::Mapper;
use crate::telemetry::{Exporter, export};
use crate::trace::SpanStamp;

/// How long the export waits for the collector to take the last batch.
const WAIT: Duration = Duration::from_secs(30);

pub async fn run(args: &ExportArgs) -> Result<(), Error> {
    let found = Places::new(&args.place).resolve(args.session.as_deref())?;
    let parsed = found.read()?;
    let fallback = Observability {
        otel_endpoint: args.endpoint.clone(),
        capture_content: args.capture_content,
    };
    let warn = &mut |w: String| eprintln!("warning: {w}");
    let settings =
        settings::resolve(&settings::process_env, &fallback, warn)?.ok_or_else(|| {
            Error::new("E-TRC-007", "no collector to export to").hint(
                "set OTEL_EXPORTER_OTLP_ENDPOINT (e.g. http://127.0.0.1:4318) or pass --endpoint",
            )
        })?;
    let exporter = Exporter::start(
        &settings,
        &settings::process_env,
        tokio::runtime::Handle::current(),
    )?;
    let lines: Vec<Map<String, Value>> = parsed.events.into_iter().map(|e| e.fields).collect();
    let spans = to_spans(lines, settings.capture_content, exporter.max_value);
    let count = spans.len();
    for span in spans {
        exporter.send(span);
    }
    let flushing = exporter.clone();
    let _ = tokio::task::spawn_blocking(move || flushing.flush(WAIT)).await;
    let (lost, why) = exporter.lost();
    let taken = export::totals().exported;
    if lost > 0 || taken < count as u64 {
        let why = why.unwrap_or_else(|| format!("no answer within {} s", WAIT.as_secs()));
        return Err(Error::new(
            "E-TRC-008",
            format!(
                "the collector at {} took {taken} of session {}'s {count} spans: {why}",
                settings.endpoint, found.id
            ),
        )
        .hint("check that the collector is up and takes OTLP/HTTP, then export again"));
    }
    super::out(&format!(
        "exported {count} spans of session {} to {}\n",
        found.id, settings.endpoint
    ));
    Ok(())
}

/// The spans of a trace's lines, in the order they end; spans its lines never closed
/// end at its last line.
pub fn to_spans(
    lines: Vec<Map<String, Value>>,
    content: bool,
    max_value: usize,
) -> Vec<opentelemetry_sdk::trace::SpanData> {
    let mut mapper = Mapper::new(content, None).with_max_value(max_value);
    let mut stamp = SpanStamp::default();
    let mut spans = Vec::new();
    let mut last = UNIX_EPOCH;
    for mut line in lines {
        stamp.fill(&mut line);
        if let Some(ms) = line.get("timestamp").and_then(Value::as_u64) {
            last = last.max(UNIX_EPOCH + Duration::from_millis(ms));
        }
        spans.extend(mapper.line(&Value::Object(line)));
    }
    let end = if last == UNIX_EPOCH {
        SystemTime::now()
    } else {
        last
    };
    spans.extend(mapper.finish(end));
    spans
}
