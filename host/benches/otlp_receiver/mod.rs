//! The benches' loopback OTLP receiver: a hyper server that takes `POST /v1/traces`
//! (live: reads each body whole, counts its spans, answers 200 with an empty body) or
//! accepts and never answers (hung).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::runtime::Handle;

#[derive(Default)]
pub struct Taken {
    pub connections: AtomicU64,
    pub requests: AtomicU64,
    pub bytes: AtomicU64,
    pub spans: AtomicU64,
    /// Bodies whose spans could not be counted.
    pub unreadable: AtomicU64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// `200`, empty body, once the request body is read whole.
    Live,
    /// Reads what comes, never answers.
    Hung,
}

pub struct Receiver {
    pub addr: SocketAddr,
    pub taken: Arc<Taken>,
}

impl Receiver {
    pub fn start(runtime: &Handle, answer: Answer) -> Receiver {
        let listener = runtime
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .expect("the receiver binds");
        let addr = listener.local_addr().unwrap();
        let taken = Arc::new(Taken::default());
        runtime.spawn(serve(listener, answer, taken.clone()));
        Receiver { addr, taken }
    }

    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn get(&self) -> (u64, u64, u64, u64) {
        let t = &self.taken;
        (
            t.requests.load(Ordering::Relaxed),
            t.spans.load(Ordering::Relaxed),
            t.bytes.load(Ordering::Relaxed),
            t.unreadable.load(Ordering::Relaxed),
        )
    }

    pub fn said(&self) -> String {
        let (requests, spans, bytes, unreadable) = self.get();
        let mut line = format!(
            "{requests} requests, {spans} spans, {:.1} KiB of protobuf ({:.0} B per span)",
            bytes as f64 / 1024.0,
            bytes as f64 / spans.max(1) as f64
        );
        if unreadable > 0 {
            line.push_str(&format!(", {unreadable} bodies not counted"));
        }
        line
    }
}

pub async fn serve(listener: TcpListener, answer: Answer, taken: Arc<Taken>) {
    loop {
        let Ok((mut socket, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        taken.connections.fetch_add(1, Ordering::Relaxed);
        let taken = taken.clone();
        if answer == Answer::Hung {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n) = socket.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    taken.bytes.fetch_add(n as u64, Ordering::Relaxed);
                }
            });
            continue;
        }
        let _ = socket.set_nodelay(true);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let taken = taken.clone();
                async move { Ok::<_, Infallible>(take(request, &taken).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(socket), service)
                .await;
        });
    }
}

pub async fn take(
    request: hyper::Request<Incoming>,
    taken: &Taken,
) -> hyper::Response<Empty<Bytes>> {
    let traces = request.method() == hyper::Method::POST && request.uri().path() == "/v1/traces";
    let body = request.into_body().collect().await.map(|b| b.to_bytes());
    let status = match body {
        Ok(body) if traces => {
            taken.requests.fetch_add(1, Ordering::Relaxed);
            taken.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
            match count_spans(&body) {
                Some(n) => taken.spans.fetch_add(n, Ordering::Relaxed),
                None => taken.unreadable.fetch_add(1, Ordering::Relaxed),
            };
            200
        }
        Ok(_) => 404,
        Err(_) => 400,
    };
    hyper::Response::builder()
        .status(status)
        .header("content-type", "application/x-protobuf")
        .body(Empty::new())
        .unwrap()
}

pub fn varint(buf: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *buf.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(value);
        }
    }
    None
}

/// The bodies of a protobuf message's length-delimited fields numbered `field`.
pub fn fields(message: &[u8], field: u64) -> Option<Vec<&[u8]>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < message.len() {
        let key = varint(message, &mut at)?;
        match key & 7 {
            0 => {
                varint(message, &mut at)?;
            }
            1 => at += 8,
            2 => {
                let len = usize::try_from(varint(message, &mut at)?).ok()?;
                let end = at.checked_add(len)?;
                if key >> 3 == field {
                    out.push(message.get(at..end)?);
                }
                at = end;
            }
            5 => at += 4,
            _ => return None,
        }
    }
    (at == message.len()).then_some(out)
}

/// The spans of an `ExportTraceServiceRequest`: `resource_spans` (1) → `scope_spans`
/// (2) → `spans` (2).
pub fn count_spans(request: &[u8]) -> Option<u64> {
    let mut n = 0;
    for resource in fields(request, 1)? {
        for scope in fields(resource, 2)? {
            n += fields(scope, 2)?.len() as u64;
        }
    }
    Some(n)
}

/// A loopback port nobody listens on (bound, then let go).
pub fn closed_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}
