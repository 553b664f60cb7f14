//! The exporter: spans batched by the SDK's batch processor and posted by the OTLP
//! exporter (encoding, retries with backoff) to the collector.
//!
//! It never holds a task up: a span is handed over without waiting, into a queue of at
//! most `OTEL_BSP_MAX_QUEUE_SIZE` spans (2048); a span that finds the queue full, and a
//! batch the collector refused or never answered, are lost and counted, never retried
//! without end nor kept without bound.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SpanData, SpanExporter, SpanProcessor,
};

use super::client::PoolClient;
use super::settings::{Encoding, Env, Settings};
use crate::error::Error;

/// Spans sent, and lost, by every exporter of the process: for `/metrics`.
static EXPORTED: AtomicU64 = AtomicU64::new(0);
static DROPPED: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Spans the collector took.
    pub exported: u64,
    /// Spans that found the queue full.
    pub dropped: u64,
    /// Spans in batches the collector refused or never answered.
    pub failed: u64,
}

pub fn totals() -> Totals {
    Totals {
        exported: EXPORTED.load(Ordering::Relaxed),
        dropped: DROPPED.load(Ordering::Relaxed),
        failed: FAILED.load(Ordering::Relaxed),
    }
}

/// What the queue holds and what was lost, shared by the handing side and the
/// exporting thread.
#[derive(Debug, Default)]
struct Ledger {
    queued: AtomicUsize,
    /// Spans of the batch being posted.
    posting: AtomicUsize,
    lost: AtomicU64,
    /// Why the first span was lost: said once in each session's records.
    first_loss: Mutex<Option<String>>,
}

impl Ledger {
    fn lose(&self, n: u64, why: impl FnOnce() -> String) {
        self.lost.fetch_add(n, Ordering::Relaxed);
        let mut first = self.first_loss.lock().unwrap_or_else(|p| p.into_inner());
        if first.is_none() {
            *first = Some(why());
        }
    }
}

/// One process's exporter, shared by every capsule it runs.
pub struct Exporter {
    processor: BatchSpanProcessor,
    ledger: Arc<Ledger>,
    max_queue: usize,
    endpoint: String,
    pub capture_content: bool,
    /// The longest text attribute (`OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`).
    pub max_value: usize,
}

/// The OTLP exporter, counting what it sends and loses.
#[derive(Debug)]
struct Counting {
    inner: opentelemetry_otlp::SpanExporter,
    ledger: Arc<Ledger>,
}

impl SpanExporter for Counting {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len();
        self.ledger.queued.fetch_sub(n, Ordering::Relaxed);
        self.ledger.posting.store(n, Ordering::Relaxed);
        let result = self.inner.export(batch).await;
        self.ledger.posting.store(0, Ordering::Relaxed);
        match &result {
            Ok(()) => {
                EXPORTED.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) => {
                FAILED.fetch_add(n as u64, Ordering::Relaxed);
                self.ledger
                    .lose(n as u64, || format!("the collector did not take them: {e}"));
            }
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// A number of milliseconds in `name`, else `default`.
fn millis(env: Env<'_>, names: &[&str], default: Duration) -> Duration {
    names
        .iter()
        .find_map(|n| env(n))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_millis)
        .unwrap_or(default)
}

fn count(env: Env<'_>, name: &str, default: usize) -> usize {
    env(name)
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

impl Exporter {
    /// Starts the exporter's thread; requests go out on `runtime`.
    pub fn start(
        settings: &Settings,
        env: Env<'_>,
        runtime: tokio::runtime::Handle,
    ) -> Result<Arc<Exporter>, Error> {
        let timeout = millis(
            env,
            &[
                "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
                "OTEL_EXPORTER_OTLP_TIMEOUT",
            ],
            Duration::from_secs(10),
        );
        let protocol = match settings.encoding {
            Encoding::Protobuf => Protocol::HttpBinary,
            Encoding::Json => Protocol::HttpJson,
        };
        let inner = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(PoolClient::new(runtime, timeout))
            .with_endpoint(settings.endpoint.clone())
            .with_protocol(protocol)
            .with_timeout(timeout)
            .build()
            .map_err(|e| {
                Error::new(
                    "E-OTEL-002",
                    format!("the span exporter could not be set up: {e}"),
                )
                .hint("check OTEL_EXPORTER_OTLP_HEADERS and the endpoint")
            })?;
        let ledger = Arc::new(Ledger::default());
        let max_queue = count(env, "OTEL_BSP_MAX_QUEUE_SIZE", 2048);
        let batch = count(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512).min(max_queue);
        let delay = millis(env, &["OTEL_BSP_SCHEDULE_DELAY"], Duration::from_secs(5));
        let config = BatchConfigBuilder::default()
            .with_max_queue_size(max_queue)
            .with_max_export_batch_size(batch)
            .with_scheduled_delay(delay)
            .build();
        let counting = Counting {
            inner,
            ledger: ledger.clone(),
        };
        let mut processor = BatchSpanProcessor::builder(counting)
            .with_batch_config(config)
            .build();
        processor.set_resource(&resource(env));
        Ok(Arc::new(Exporter {
            processor,
            ledger,
            max_queue,
            endpoint: settings.endpoint.clone(),
            capture_content: settings.capture_content,
            max_value: count(
                env,
                "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
                super::spans::MAX_VALUE,
            ),
        }))
    }

    /// Hands a finished span over, without waiting: when the queue is full it is lost
    /// and counted.
    pub fn send(&self, span: SpanData) {
        let queued = self.ledger.queued.fetch_add(1, Ordering::Relaxed);
        if queued >= self.max_queue {
            self.ledger.queued.fetch_sub(1, Ordering::Relaxed);
            DROPPED.fetch_add(1, Ordering::Relaxed);
            let max = self.max_queue;
            self.ledger.lose(1, || {
                format!("{max} spans were waiting for the collector and no more are kept")
            });
            return;
        }
        self.processor.on_end(span);
    }

    /// Spans lost so far, and why the first was.
    pub fn lost(&self) -> (u64, Option<String>) {
        let lost = self.ledger.lost.load(Ordering::Relaxed);
        let why = self
            .ledger
            .first_loss
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        (lost, why)
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Sends what waits, giving up after `within`: blocks the calling thread. What the
    /// collector has not taken by then (queued, or in a batch it never answered) is
    /// lost and counted: the process is about to end.
    pub fn flush(&self, within: Duration) {
        if self.processor.shutdown_with_timeout(within).is_ok() {
            return;
        }
        let left = self.ledger.queued.swap(0, Ordering::Relaxed)
            + self.ledger.posting.swap(0, Ordering::Relaxed);
        if left > 0 {
            FAILED.fetch_add(left as u64, Ordering::Relaxed);
            let secs = within.as_secs();
            self.ledger.lose(left as u64, || {
                format!("the collector had not taken them when mur stopped waiting ({secs} s)")
            });
        }
    }
}

/// `service.name` is `OTEL_SERVICE_NAME`, else one `OTEL_RESOURCE_ATTRIBUTES` names,
/// else `mur`.
fn resource(env: Env<'_>) -> Resource {
    let named = env("OTEL_SERVICE_NAME").is_some()
        || env("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| a.contains("service.name="));
    let builder = Resource::builder();
    if named {
        builder.build()
    } else {
        builder.with_service_name("mur").build()
    }
}
