//! Connections to model servers, kept open between requests. wasmtime-wasi-http's default
//! sender opens a connection (and, for `https`, a TLS session) for every request; a driver
//! makes one request per inference turn to the same server, so each connection is kept
//! after its answer has been read and the next request to that origin takes it.
//!
//! A new connection is made exactly as the default sender makes one (the same timeouts,
//! the same TLS set-up with the webpki roots, the same errors), so a request behaves as
//! before except that it may find a connection already open. A request that finds one
//! the server has closed meanwhile goes out on a fresh connection; that is safe because
//! hyper hands back a request it did not send. One that was sent is never sent again
//! here: the retry rules of the caller decide.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::Scheme;
use http::{Request, Response, Uri};
use http_body_util::Full;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::{InvalidDnsNameError, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use wasmtime_wasi_http::{Error, RequestOptions};

/// What the default sender waits when a request sets no timeout.
const NO_TIMEOUT: Duration = Duration::from_secs(600);
/// An idle connection older than this is closed rather than used: servers close idle
/// keep-alive connections after a minute or more, and a request should not meet one
/// that is just closing.
const IDLE_FOR: Duration = Duration::from_secs(30);
/// Idle connections kept per origin; more are closed.
const IDLE_PER_ORIGIN: usize = 8;

type Sender = SendRequest<Full<Bytes>>;

/// The process's open connections, idle ones by origin (`scheme://host:port`).
static POOL: LazyLock<Pool> = LazyLock::new(Pool::default);

#[derive(Default)]
struct Pool {
    idle: Mutex<HashMap<String, Vec<Idle>>>,
}

struct Idle {
    sender: Sender,
    since: Instant,
}

impl Pool {
    /// The most recently used idle connection to `origin` that is still open.
    fn take(&self, origin: &str) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = idle.get_mut(origin)?;
        while let Some(Idle { sender, since }) = list.pop() {
            if !sender.is_closed() && since.elapsed() < IDLE_FOR {
                return Some(sender);
            }
        }
        None
    }

    /// Keeps a connection whose answer has been read whole, for the next request.
    fn put(&self, origin: String, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = idle.entry(origin).or_default();
        list.retain(|idle| !idle.sender.is_closed() && idle.since.elapsed() < IDLE_FOR);
        if list.len() < IDLE_PER_ORIGIN {
            list.push(Idle {
                sender,
                since: Instant::now(),
            });
        }
    }
}

/// Where a request goes: the pool's key, the address to connect to, and whether TLS.
struct Target {
    origin: String,
    /// `host:port`, the port filled in as the default sender does.
    address: String,
    tls: bool,
}

impl Target {
    fn of(uri: &Uri) -> Result<Target, Error> {
        let authority = uri.authority().ok_or(Error::HttpRequestUriInvalid)?;
        let tls = uri.scheme() == Some(&Scheme::HTTPS);
        let address = match authority.port() {
            Some(_) => authority.to_string(),
            None => format!("{authority}:{}", if tls { 443 } else { 80 }),
        };
        let scheme = if tls { "https" } else { "http" };
        Ok(Target {
            origin: format!("{scheme}://{address}"),
            address,
            tls,
        })
    }
}

/// Sends `request` on an open connection to its origin, or a new one, with the default
/// sender's timeouts: `connect_timeout` for the connection, `first_byte_timeout` for the
/// answer's head, `between_bytes_timeout` between pieces of its body.
pub async fn send(
    mut request: Request<Full<Bytes>>,
    options: RequestOptions,
) -> Result<Response<PooledBody>, Error> {
    let target = Target::of(request.uri())?;
    let connect_timeout = options.connect_timeout.unwrap_or(NO_TIMEOUT);
    let first_byte_timeout = options.first_byte_timeout.unwrap_or(NO_TIMEOUT);
    let between_bytes_timeout = options.between_bytes_timeout.unwrap_or(NO_TIMEOUT);
    // The request line carries only the path: scheme and authority are for proxies.
    *request.uri_mut() = origin_form(request.uri());
    loop {
        let (sender, reused) = match POOL.take(&target.origin) {
            Some(sender) => (sender, true),
            None => (connect(&target, connect_timeout).await?, false),
        };
        let attempt = tokio::time::timeout(first_byte_timeout, attempt(sender, request))
            .await
            .map_err(|_| Error::ConnectionReadTimeout)?;
        match attempt {
            Attempt::Answered(response, sender) => {
                let lease = Lease {
                    sender,
                    origin: target.origin,
                };
                let body = |incoming| PooledBody::new(incoming, between_bytes_timeout, lease);
                return Ok(response.map(body));
            }
            // An idle connection the server had closed: nothing was sent on it.
            Attempt::Unsent(unsent, _) if reused => request = unsent,
            Attempt::Unsent(_, e) | Attempt::Failed(e) => return Err(Error::from(e)),
        }
    }
}

/// How one try on one connection went.
enum Attempt {
    Answered(Response<Incoming>, Sender),
    /// The connection could not take the request, which comes back unsent.
    Unsent(Request<Full<Bytes>>, hyper::Error),
    Failed(hyper::Error),
}

async fn attempt(mut sender: Sender, request: Request<Full<Bytes>>) -> Attempt {
    if let Err(e) = sender.ready().await {
        return Attempt::Unsent(request, e);
    }
    match sender.try_send_request(request).await {
        Ok(response) => Attempt::Answered(response, sender),
        Err(mut e) => match e.take_message() {
            Some(request) => Attempt::Unsent(request, e.into_error()),
            None => Attempt::Failed(e.into_error()),
        },
    }
}

/// The URI as the request line has it: path and query only.
fn origin_form(uri: &Uri) -> Uri {
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    Uri::try_from(path).unwrap_or_else(|_| Uri::from_static("/"))
}

/// A connection's stream, plain or TLS.
trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {}

/// A new connection to `target`, made as the default sender makes one. Its driving task
/// is spawned: the connection outlives the request, kept by the pool while idle, and
/// ends when its last sender is dropped or the server closes it.
async fn connect(target: &Target, connect_timeout: Duration) -> Result<Sender, Error> {
    let stream = tokio::time::timeout(connect_timeout, TcpStream::connect(&target.address))
        .await
        .map_err(|_| Error::ConnectionTimeout)?
        .map_err(Error::Connect)?;
    let stream: Box<dyn Stream> = if target.tls {
        let name = server_name(&target.address)?;
        let stream = tls().connect(name, stream).await.map_err(Error::Tls)?;
        Box::new(stream)
    } else {
        Box::new(stream)
    };
    let handshake = http1::Builder::new().handshake(TokioIo::new(stream));
    let (sender, connection) = tokio::time::timeout(connect_timeout, handshake)
        .await
        .map_err(|_| Error::ConnectionTimeout)??;
    // Its errors reach the request or the body that meets them; here there is no one to tell.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// The TLS client set-up of the default sender (the webpki roots, no client
/// certificate), made once rather than for every connection.
fn tls() -> &'static TlsConnector {
    static TLS: OnceLock<TlsConnector> = OnceLock::new();
    TLS.get_or_init(|| {
        let roots = RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.into(),
        };
        let config = ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        TlsConnector::from(Arc::new(config))
    })
}

/// The name a certificate must carry, from `host:port`: an IP literal (IPv6 in brackets)
/// as an address, anything else as a host name. The default sender's rule.
fn server_name(address: &str) -> Result<ServerName<'static>, InvalidDnsNameError> {
    if let Ok(socket) = address.parse::<std::net::SocketAddr>() {
        return Ok(ServerName::from(socket.ip()));
    }
    let host = address.split_once(':').map_or(address, |(host, _)| host);
    Ok(ServerName::try_from(host)?.to_owned())
}

/// A connection lent to one request, returned to the pool when its answer was read whole.
struct Lease {
    sender: Sender,
    origin: String,
}

impl Lease {
    fn give_back(self) {
        POOL.put(self.origin, self.sender);
    }
}

/// An answer's body, timed as the default sender times it: a read that waits longer
/// than `between_bytes_timeout` for the next piece fails. Read to its end, it gives its
/// connection back to the pool; dropped before, the connection closes with it.
pub struct PooledBody {
    incoming: Incoming,
    timeout: tokio::time::Interval,
    lease: Option<Lease>,
}

impl PooledBody {
    fn new(incoming: Incoming, between_bytes: Duration, lease: Lease) -> PooledBody {
        // Tokio panics on an interval of zero; 1 ns is as good as none.
        let between_bytes = between_bytes.max(Duration::from_nanos(1));
        let mut timeout = tokio::time::interval(between_bytes);
        timeout.reset();
        PooledBody {
            incoming,
            timeout,
            lease: Some(lease),
        }
    }

    fn give_back(&mut self) {
        if let Some(lease) = self.lease.take() {
            lease.give_back();
        }
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        match Pin::new(&mut self.incoming).poll_frame(cx) {
            Poll::Ready(None) => {
                self.give_back();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                self.lease = None;
                let e = if e.is_timeout() {
                    Error::HttpResponseTimeout
                } else {
                    Error::from(e)
                };
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(Some(Ok(frame))) => {
                self.timeout.reset();
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => {
                ready!(self.timeout.poll_tick(cx));
                self.lease = None;
                Poll::Ready(Some(Err(Error::ConnectionReadTimeout)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming.size_hint()
    }
}

impl Drop for PooledBody {
    /// A reader that stopped at the body's end without asking past it still leaves a
    /// reusable connection.
    fn drop(&mut self) {
        if self.incoming.is_end_stream() {
            self.give_back();
        }
    }
}

#[cfg(test)]
mod tests;
