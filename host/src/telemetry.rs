//! OpenTelemetry: a capsule's work as spans after the GenAI semantic conventions, posted
//! over OTLP/HTTP to the collector an operator already runs.
//!
//! Spans are made from the trace's own lines ([`spans`]), as each is written, so the
//! spans and `trace.jsonl` say the same things under the same ids ([`context`]), and
//! `mur trace export` sends a stored run as it would have gone live. Export never holds a
//! task up, nor fails a session: what the collector does not take is lost, counted in
//! `/metrics`, and said once in each session's records ([`export`]).

pub mod client;
pub mod context;
pub mod export;
pub mod genai;
pub mod settings;
pub mod shape;
pub mod spans;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;

pub use export::Exporter;

/// How a capsule's session is attached to the process's exporter.
#[derive(Clone)]
pub struct Attach {
    pub exporter: Arc<Exporter>,
    /// `mur.capsule.id` on every span: under `mur serve`, when the operator asks.
    pub capsule_id: Option<String>,
    /// The `traceparent` the session was started with (`TRACEPARENT`), its parent.
    pub parent: Option<context::SpanRef>,
}

/// Exporters this process started, one per set of settings: a formation's members
/// that name the same collector share one.
static STARTED: Mutex<Vec<(settings::Settings, Arc<Exporter>)>> = Mutex::new(Vec::new());

/// The exporter for `settings`, started on first use.
fn exporter_for(settings: &settings::Settings) -> Result<Arc<Exporter>, crate::error::Error> {
    let mut started = STARTED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, exporter)) = started.iter().find(|(s, _)| s == settings) {
        return Ok(exporter.clone());
    }
    let runtime = tokio::runtime::Handle::current();
    let exporter = Exporter::start(settings, &settings::process_env, runtime)?;
    started.push((settings.clone(), exporter.clone()));
    Ok(exporter)
}

/// `mur run`'s: the environment, else the manifest's `observability`; a `TRACEPARENT`
/// in the environment is the session's parent. Warnings go to stderr.
pub fn for_run(
    observability: &settings::Observability,
) -> Result<Option<Attach>, crate::error::Error> {
    let warn = &mut |w: String| eprintln!("warning: {w}");
    let Some(settings) = settings::resolve(&settings::process_env, observability, warn)? else {
        return Ok(None);
    };
    let parent = settings::process_env("TRACEPARENT").and_then(|t| context::parse(t.trim()));
    Ok(Some(Attach {
        exporter: exporter_for(&settings)?,
        capsule_id: None,
        parent,
    }))
}

/// `mur serve`'s one exporter for all its capsules: the environment, else
/// `--otel-endpoint`.
pub fn for_serve(endpoint: Option<&str>) -> Result<Option<Arc<Exporter>>, crate::error::Error> {
    let fallback = settings::Observability {
        otel_endpoint: endpoint.map(str::to_string),
        capture_content: false,
    };
    let warn = &mut |w: String| eprintln!("warning: {w}");
    match settings::resolve(&settings::process_env, &fallback, warn)? {
        Some(settings) => exporter_for(&settings).map(Some),
        None => Ok(None),
    }
}

/// Sends what every exporter holds, giving each up to `within`; for the end of the
/// process. Blocks: call it off the runtime's workers.
pub fn flush_all(within: std::time::Duration) {
    let started: Vec<Arc<Exporter>> = STARTED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .drain(..)
        .map(|(_, e)| e)
        .collect();
    for exporter in started {
        exporter.flush(within);
    }
}

/// How long the end of `mur run` waits for the collector to take what is left.
const LAST_FLUSH: std::time::Duration = std::time::Duration::from_secs(5);

/// The end of `mur run`: the session's last spans are sent, waiting up to
/// [`LAST_FLUSH`] for the collector, and a loss is said in its records. A formation's
/// members end after their entry: `flush` is false for the entry, and the formation
/// flushes once they all have ended ([`flush_at_exit`]).
pub async fn wind_down(trace: Arc<crate::trace::SessionTrace>, flush: bool) {
    if let Some(feed) = trace.feed() {
        feed.finish();
    }
    if flush {
        flush_at_exit().await;
    }
    if let Some(feed) = trace.feed() {
        feed.report_loss();
    }
}

/// Sends what every exporter holds before the process exits, waiting up to
/// [`LAST_FLUSH`] for each.
pub async fn flush_at_exit() {
    let _ = tokio::task::spawn_blocking(|| flush_all(LAST_FLUSH)).await;
}

/// One A2A request the door answered.
pub struct Served<'a> {
    pub method: &'a str,
    /// As the caller sent it; used only when well formed.
    pub traceparent: Option<&'a str>,
    pub started: std::time::SystemTime,
    pub task: Option<&'a str>,
    /// The task's state when the answer was done (`completed`, `input-required`, ...).
    pub state: Option<&'a str>,
}

/// Where a function that says something once in the session's records writes it.
pub type Say = Box<dyn Fn(&str) + Send + Sync>;

/// One session's lines on their way to the exporter.
pub struct Feed {
    exporter: Arc<Exporter>,
    mapper: Mutex<spans::Mapper>,
    /// Losses before the session began are other sessions' to report.
    lost_before: u64,
    reported: AtomicBool,
    say: Say,
    /// `mur.capsule.id` on spans made outside the mapper (a request the door served).
    capsule_id: Option<String>,
}

impl Feed {
    pub fn new(attach: &Attach, say: Say) -> Self {
        let exporter = attach.exporter.clone();
        let mapper = spans::Mapper::new(exporter.capture_content, attach.capsule_id.clone())
            .with_max_value(exporter.max_value);
        Feed {
            lost_before: exporter.lost().0,
            exporter,
            mapper: Mutex::new(mapper),
            reported: AtomicBool::new(false),
            say,
            capsule_id: attach.capsule_id.clone(),
        }
    }

    pub fn captures_content(&self) -> bool {
        self.exporter.capture_content
    }

    /// One line as the trace wrote it: the spans it ends go to the exporter.
    pub fn line(&self, line: &Value) {
        let finished = self
            .mapper
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .line(line);
        for span in finished {
            self.exporter.send(span);
        }
        self.report_loss();
    }

    /// A request the door answered, as a server span under the caller's context (a
    /// trace of its own without one).
    pub fn request(&self, served: &Served<'_>) {
        let mut span = spans::request(served, std::time::SystemTime::now());
        if let Some(id) = &self.capsule_id {
            span.attributes
                .push(opentelemetry::KeyValue::new("mur.capsule.id", id.clone()));
        }
        self.exporter.send(span);
        self.report_loss();
    }

    /// The session is over: spans still open (a session that failed without its
    /// closing lines) go as they stand.
    pub fn finish(&self) {
        let left = self
            .mapper
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .finish(std::time::SystemTime::now());
        for span in left {
            self.exporter.send(span);
        }
        self.report_loss();
    }

    /// Says once in the session's records that spans were lost, and why.
    pub fn report_loss(&self) {
        let (lost, why) = self.exporter.lost();
        if lost <= self.lost_before || self.reported.swap(true, Ordering::Relaxed) {
            return;
        }
        let why = why.unwrap_or_default();
        (self.say)(&format!(
            "error[E-OTEL-003]: spans for {} are being lost: {why}\nhint: the capsule runs on; \
             lost spans are counted in mur serve's /metrics (mur_otel_spans_lost_total); check \
             that the collector is up and takes OTLP/HTTP",
            self.exporter.endpoint()
        ));
    }
}
