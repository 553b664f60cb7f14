//! The exporter's HTTP client: the host's own connection pool and TLS, so spans go out
//! as every other request the host sends for itself does, bounded the same way.
//!
//! The SDK's batch processor exports from a thread of its own, outside the runtime; a
//! request is handed to the runtime and waited for there, so the exporter never blocks
//! a worker the capsules run on.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use opentelemetry_http::{HttpClient, HttpError};

use crate::outbound::{self, Waits, reply};

/// The most of a collector's answer that is read: it says only whether it took the spans.
const MAX_ANSWER: usize = 1024 * 1024;

#[derive(Debug, Clone)]
pub struct PoolClient {
    runtime: tokio::runtime::Handle,
    /// The whole request, answer read included (`OTEL_EXPORTER_OTLP_TIMEOUT`).
    timeout: Duration,
}

impl PoolClient {
    pub fn new(runtime: tokio::runtime::Handle, timeout: Duration) -> Self {
        PoolClient { runtime, timeout }
    }
}

#[async_trait::async_trait]
impl HttpClient for PoolClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let timeout = self.timeout;
        let request = request.map(Full::new);
        let sent = self.runtime.spawn(async move {
            tokio::time::timeout(timeout, send(request, timeout))
                .await
                .unwrap_or_else(|_| Err(format!("no answer within {} ms", timeout.as_millis())))
        });
        match sent.await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(why)) => Err(why.into()),
            Err(joined) => Err(format!("the request was stopped: {joined}").into()),
        }
    }
}

async fn send(request: Request<Full<Bytes>>, timeout: Duration) -> Result<Response<Bytes>, String> {
    let waits = Waits {
        connect: timeout,
        first_byte: timeout,
        between_bytes: timeout,
    };
    let response = outbound::send_own(request, waits)
        .await
        .map_err(|e| reply::transport(&e))?;
    let (parts, mut body) = response.into_parts();
    let body = reply::read_bounded(&mut body, MAX_ANSWER)
        .await
        .map_err(|e| match e {
            reply::Unread::TooBig { max } => format!("its answer was over {max} bytes"),
            reply::Unread::Transport(why) => why,
            reply::Unread::NotUtf8 => "its answer could not be read".into(),
        })?;
    Ok(Response::from_parts(parts, Bytes::from(body)))
}
