//! The loopback HTTP proxy that is a sandboxed command's only way out to the network.
//! The OS sandbox can only pin commands to one local port, not to host names, so this
//! proxy is where `capabilities.network.allow` is actually enforced, and where every
//! attempt is seen so the host can trace it.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_TYPE, HOST, PROXY_AUTHENTICATE, PROXY_AUTHORIZATION};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri, Version};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

/// Where a command asked to go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// `"CONNECT"` for a tunnel (HTTPS and anything else), otherwise the HTTP method of a forwarded plain-http request.
    pub method: String,
    /// `"https"` for CONNECT, `"http"` for an absolute-form request.
    pub scheme: &'static str,
    /// As the client named it, lowercased, IPv6 without brackets.
    pub host: String,
    pub port: u16,
}

/// What became of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub destination: Destination,
    pub allowed: bool,
    /// Why it was refused or failed, in words for a trace line (None when it went through).
    pub reason: Option<String>,
}

pub type Decide = Arc<dyn Fn(&Destination) -> bool + Send + Sync>;
pub type Report = Arc<dyn Fn(Verdict) + Send + Sync>;

/// More than this many sockets at once is a command misbehaving, not working; capping it
/// keeps a hostile command from exhausting the host's file descriptors.
const MAX_CONNECTIONS: usize = 64;
/// Also bounds how long an idle keep-alive connection may hold one of the slots.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Long enough for slow downloads and long polls, short enough that forgotten tunnels free their slot.
const TUNNEL_IDLE_TIMEOUT: Duration = Duration::from_mins(5);
/// Accept errors such as EMFILE repeat at once; pausing keeps the loop from spinning a core.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

const BAD_CREDENTIALS: &str = "missing or wrong proxy credentials";
const NOT_ALLOWED: &str = "not in capabilities.network.allow";

/// Headers that describe one hop, not the message; passing them on would let the client
/// steer our upstream connection or leak the proxy token to the destination.
const HOP_BY_HOP: [&str; 9] = [
    "proxy-authorization",
    "proxy-authenticate",
    "proxy-connection",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

type Body = Either<Full<Bytes>, Incoming>;
/// Work that outlives the response that started it (a tunnel, an upstream connection
/// still streaming a body); run by the connection's task so it dies with it.
type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The session's proxy; dropping it stops the listener and every connection it serves.
pub struct Proxy {
    addr: SocketAddr,
    url: String,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Binds 127.0.0.1 on an OS-assigned port and serves until dropped.
    ///
    /// # Errors
    /// When the loopback listener cannot be bound.
    pub async fn start(token: String, decide: Decide, report: Report) -> io::Result<Proxy> {
        Self::start_with_idle(token, decide, report, TUNNEL_IDLE_TIMEOUT).await
    }

    /// `start`, with the tunnel idle limit short enough for a test to watch it fire.
    async fn start_with_idle(
        token: String,
        decide: Decide,
        report: Report,
        tunnel_idle: Duration,
    ) -> io::Result<Proxy> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            credentials: base64(format!("murmur:{token}").as_bytes()).into_bytes(),
            decide,
            report,
            tunnel_idle,
        });
        let url = format!("http://murmur:{}@{addr}", escape_userinfo(&token));
        let accept = tokio::spawn(accept_loop(listener, shared));
        Ok(Proxy { addr, url, accept })
    }

    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://murmur:<token>@127.0.0.1:<port>`, the value for `HTTP_PROXY` and `HTTPS_PROXY`.
    #[must_use]
    pub fn url(&self) -> String {
        self.url.clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // The accept loop owns the JoinSet of connections, which owns their jobs, so
        // dropping this one future tears down everything the proxy ever started.
        self.accept.abort();
    }
}

impl std::fmt::Debug for Proxy {
    // By hand, so the token in `url` never ends up in a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

struct Shared {
    /// `base64("murmur:" + token)`, precomputed so checking a request needs no decoding.
    credentials: Vec<u8>,
    decide: Decide,
    report: Report,
    tunnel_idle: Duration,
}

impl Shared {
    fn report(&self, destination: Destination, allowed: bool, reason: Option<String>) {
        (self.report)(Verdict {
            destination,
            allowed,
            reason,
        });
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        // Taking the slot before accepting leaves extra clients queued in the kernel's
        // backlog, costing us nothing until a slot frees up.
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        match listener.accept().await {
            Ok((stream, _)) => {
                connections.spawn(serve_connection(stream, Arc::clone(&shared), slot));
            }
            Err(_) => tokio::time::sleep(ACCEPT_BACKOFF).await,
        }
    }
}

async fn serve_connection(stream: TcpStream, shared: Arc<Shared>, _slot: OwnedSemaphorePermit) {
    let _ = stream.set_nodelay(true);
    let (jobs, mut queued) = mpsc::unbounded_channel::<Job>();
    let service =
        hyper::service::service_fn(move |req| handle(req, Arc::clone(&shared), jobs.clone()));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let conn = builder
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    let mut conn = std::pin::pin!(conn);
    let mut running = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut conn => break,
            Some(job) = queued.recv() => { running.spawn(job); }
            Some(_) = running.join_next() => {}
        }
    }
    // A tunnel begins only once hyper hands over the socket, which is also when the
    // connection future ends, so its job may still be queued or running here.
    while let Ok(job) = queued.try_recv() {
        running.spawn(job);
    }
    while running.join_next().await.is_some() {}
}

async fn handle(
    mut req: Request<Incoming>,
    shared: Arc<Shared>,
    jobs: mpsc::UnboundedSender<Job>,
) -> Result<Response<Body>, Infallible> {
    let parsed = parse_destination(req.method(), req.uri());
    if !authorized(req.headers(), &shared.credentials) {
        let destination = match parsed {
            Ok(destination) | Err(NotProxyable { destination, .. }) => destination,
        };
        shared.report(destination, false, Some(BAD_CREDENTIALS.to_owned()));
        return Ok(proxy_auth_required());
    }
    let destination = match parsed {
        Ok(destination) => destination,
        Err(NotProxyable {
            destination,
            reason,
        }) => {
            shared.report(destination, false, Some(reason.to_owned()));
            return Ok(text(StatusCode::BAD_REQUEST, format!("murmur: {reason}\n")));
        }
    };
    if !(shared.decide)(&destination) {
        let message = format!("murmur: {} is {NOT_ALLOWED}\n", authority(&destination));
        shared.report(destination, false, Some(NOT_ALLOWED.to_owned()));
        return Ok(text(StatusCode::FORBIDDEN, message));
    }
    let response = if req.method() == Method::CONNECT {
        let on_upgrade = hyper::upgrade::on(&mut req);
        open_tunnel(on_upgrade, destination, shared, &jobs).await
    } else {
        forward(req, destination, &shared, &jobs).await
    };
    Ok(response)
}

/// What could be read of a request that names no destination this proxy serves.
struct NotProxyable {
    destination: Destination,
    reason: &'static str,
}

fn parse_destination(method: &Method, uri: &Uri) -> Result<Destination, NotProxyable> {
    let named = uri.authority().map(|a| (a.host(), a.port_u16()));
    if method == Method::CONNECT {
        return match named {
            Some((host, Some(port))) => Ok(destination("CONNECT", "https", host, port)),
            _ => Err(NotProxyable {
                destination: destination("CONNECT", "https", "", 0),
                reason: "CONNECT needs host:port",
            }),
        };
    }
    let (scheme, Some((host, port))) = (uri.scheme_str().unwrap_or(""), named) else {
        return Err(NotProxyable {
            destination: destination(method.as_str(), "http", "", 0),
            reason: "not a proxy request",
        });
    };
    if scheme.eq_ignore_ascii_case("http") {
        Ok(destination(
            method.as_str(),
            "http",
            host,
            port.unwrap_or(80),
        ))
    } else if scheme.eq_ignore_ascii_case("https") {
        // We cannot speak TLS for the client; it has to tunnel instead.
        Err(NotProxyable {
            destination: destination(method.as_str(), "https", host, port.unwrap_or(443)),
            reason: "https:// URLs must be tunnelled with CONNECT",
        })
    } else {
        Err(NotProxyable {
            destination: destination(method.as_str(), "http", "", 0),
            reason: "only http:// URLs can be forwarded",
        })
    }
}

fn destination(method: &str, scheme: &'static str, host: &str, port: u16) -> Destination {
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Destination {
        method: method.to_owned(),
        scheme,
        host: host.to_ascii_lowercase(),
        port,
    }
}

/// `host:port` as it would be written in a URL, so IPv6 stays readable.
fn authority(destination: &Destination) -> String {
    format!("{}:{}", bracketed(&destination.host), destination.port)
}

fn bracketed(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

fn authorized(headers: &HeaderMap, credentials: &[u8]) -> bool {
    headers
        .get_all(PROXY_AUTHORIZATION)
        .iter()
        .any(|value| basic_matches(value.as_bytes(), credentials))
}

fn basic_matches(value: &[u8], credentials: &[u8]) -> bool {
    let Some(space) = value.iter().position(|&b| b == b' ') else {
        return false;
    };
    let (scheme, rest) = value.split_at(space);
    scheme.eq_ignore_ascii_case(b"basic") && same_secret(rest.trim_ascii(), credentials)
}

/// Takes as long for a near miss as for a wild guess, so timing does not leak the token.
fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected)
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

async fn connect(destination: &Destination) -> Result<TcpStream, String> {
    let target = (destination.host.as_str(), destination.port);
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await {
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            Ok(stream)
        }
        Ok(Err(e)) => Err(format!("connect failed: {e}")),
        Err(_) => Err(format!(
            "connect failed: no answer within {}s",
            CONNECT_TIMEOUT.as_secs()
        )),
    }
}

async fn open_tunnel(
    on_upgrade: OnUpgrade,
    destination: Destination,
    shared: Arc<Shared>,
    jobs: &mpsc::UnboundedSender<Job>,
) -> Response<Body> {
    let upstream = match connect(&destination).await {
        Ok(upstream) => upstream,
        Err(reason) => return bad_gateway(&shared, destination, reason),
    };
    let job = Box::pin(run_tunnel(on_upgrade, upstream, destination, shared));
    if jobs.send(job).is_err() {
        // Only when the connection is already going away; nobody will read this.
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            "murmur: shutting down\n".to_owned(),
        );
    }
    Response::new(Either::Left(Full::new(Bytes::new())))
}

async fn run_tunnel(
    on_upgrade: OnUpgrade,
    upstream: TcpStream,
    destination: Destination,
    shared: Arc<Shared>,
) {
    let upgraded = match on_upgrade.await {
        Ok(upgraded) => upgraded,
        Err(e) => {
            shared.report(
                destination,
                true,
                Some(format!("tunnel not established: {e}")),
            );
            return;
        }
    };
    shared.report(destination, true, None);
    let mut client = TokioIo::new(upgraded);
    let activity = Arc::new(Activity::new());
    let mut upstream = Watched {
        inner: upstream,
        activity: Arc::clone(&activity),
    };
    // Every byte either way passes through `upstream`, so watching it alone sees all traffic.
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
        () = activity.idle_for(shared.tunnel_idle) => {}
    }
}

async fn forward(
    mut req: Request<Incoming>,
    destination: Destination,
    shared: &Shared,
    jobs: &mpsc::UnboundedSender<Job>,
) -> Response<Body> {
    if let Err(reason) = to_origin_form(&mut req, &destination) {
        shared.report(destination, true, Some(reason.clone()));
        return text(StatusCode::BAD_REQUEST, format!("murmur: {reason}\n"));
    }
    let upstream = match connect(&destination).await {
        Ok(upstream) => upstream,
        Err(reason) => return bad_gateway(shared, destination, reason),
    };
    let (mut sender, conn) =
        match hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await {
            Ok(pair) => pair,
            Err(e) => return bad_gateway(shared, destination, format!("forward failed: {e}")),
        };
    // The upstream connection must keep running after we return, to stream the body.
    if jobs
        .send(Box::pin(async move {
            let _ = conn.await;
        }))
        .is_err()
    {
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            "murmur: shutting down\n".to_owned(),
        );
    }
    match sender.send_request(req).await {
        Ok(mut response) => {
            shared.report(destination, true, None);
            strip_hop_by_hop(response.headers_mut());
            response.map(Either::Right)
        }
        Err(e) => bad_gateway(shared, destination, format!("forward failed: {e}")),
    }
}

/// Rewrites a proxy request into the request the origin server expects from a client.
fn to_origin_form(req: &mut Request<Incoming>, destination: &Destination) -> Result<(), String> {
    let target = req.uri().path_and_query().map_or_else(
        || "/".to_owned(),
        |pq| match pq.query() {
            Some(query) => format!("{}?{query}", pq.path()),
            None => pq.path().to_owned(),
        },
    );
    *req.uri_mut() = target
        .parse()
        .map_err(|e| format!("bad request target: {e}"))?;
    *req.version_mut() = Version::HTTP_11;
    // The default port is left out, as clients do, since some servers compare Host literally.
    let host = if destination.port == 80 {
        bracketed(&destination.host)
    } else {
        authority(destination)
    };
    let host = HeaderValue::from_str(&host).map_err(|e| format!("bad host: {e}"))?;
    let headers = req.headers_mut();
    strip_hop_by_hop(headers);
    headers.insert(HOST, host);
    Ok(())
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Connection may name further headers that are just as local to this hop.
    let named: Vec<String> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|name| name.trim().to_ascii_lowercase())
        .filter(|name| !name.is_empty())
        .collect();
    for name in &named {
        headers.remove(name.as_str());
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

fn bad_gateway(shared: &Shared, destination: Destination, reason: String) -> Response<Body> {
    let message = format!("murmur: {}: {reason}\n", authority(&destination));
    shared.report(destination, true, Some(reason));
    text(StatusCode::BAD_GATEWAY, message)
}

fn proxy_auth_required() -> Response<Body> {
    let mut response = text(
        StatusCode::PROXY_AUTHENTICATION_REQUIRED,
        format!("murmur: {BAD_CREDENTIALS}\n"),
    );
    let headers = response.headers_mut();
    headers.insert(
        PROXY_AUTHENTICATE,
        HeaderValue::from_static(r#"Basic realm="murmur""#),
    );
    // Someone without the token gets one answer per connection, not a slot to sit on.
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

fn text(status: StatusCode, message: String) -> Response<Body> {
    let mut response = Response::new(Either::Left(Full::new(Bytes::from(message))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// When a tunnel last carried a byte, shared between the stream and the idle watchdog.
struct Activity {
    origin: Instant,
    last_millis: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity {
            origin: Instant::now(),
            last_millis: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let elapsed = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_millis.store(elapsed, Ordering::Relaxed);
    }

    /// Resolves once nothing has moved for `limit`.
    async fn idle_for(&self, limit: Duration) {
        loop {
            let last = Duration::from_millis(self.last_millis.load(Ordering::Relaxed));
            let Some(deadline) = last
                .checked_add(limit)
                .and_then(|quiet| self.origin.checked_add(quiet))
            else {
                return;
            };
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// A stream that records in `activity` whenever bytes move through it.
struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.touch();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        polled
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

fn base64(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let byte = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let bits = (byte(0) << 16) | (byte(1) << 8) | byte(2);
        for i in 0..4 {
            if i <= chunk.len() {
                let index = (bits >> (18 - 6 * i)) & 0x3f;
                out.push(char::from(ALPHABET[index as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Percent-encodes a token for the userinfo of a URL, so any token yields a URL that
/// clients split correctly (they decode it again before sending credentials).
fn escape_userinfo(raw: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(raw.len());
    for byte in raw.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::sync::oneshot;

    const TOKEN: &str = "secret";
    /// `base64("murmur:secret")`, worked out independently of `base64()` above.
    const GOOD_AUTH: &str = "Proxy-Authorization: Basic bXVybXVyOnNlY3JldA==\r\n";
    const WAIT: Duration = Duration::from_secs(5);

    struct Harness {
        proxy: Proxy,
        verdicts: mpsc::UnboundedReceiver<Verdict>,
        asked: Arc<Mutex<Vec<Destination>>>,
    }

    impl Harness {
        async fn verdict(&mut self) -> Verdict {
            tokio::time::timeout(WAIT, self.verdicts.recv())
                .await
                .expect("a verdict in time")
                .expect("proxy still reporting")
        }

        async fn client(&self) -> TcpStream {
            TcpStream::connect(self.proxy.addr())
                .await
                .expect("connect to proxy")
        }
    }

    async fn harness(allow: impl Fn(&Destination) -> bool + Send + Sync + 'static) -> Harness {
        harness_with_idle(allow, TUNNEL_IDLE_TIMEOUT).await
    }

    async fn harness_with_idle(
        allow: impl Fn(&Destination) -> bool + Send + Sync + 'static,
        tunnel_idle: Duration,
    ) -> Harness {
        let (tx, verdicts) = mpsc::unbounded_channel();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&asked);
        let decide: Decide = Arc::new(move |d: &Destination| {
            seen.lock().expect("lock").push(d.clone());
            allow(d)
        });
        let report: Report = Arc::new(move |v| {
            let _ = tx.send(v);
        });
        let proxy = Proxy::start_with_idle(TOKEN.to_owned(), decide, report, tunnel_idle)
            .await
            .expect("proxy starts");
        Harness {
            proxy,
            verdicts,
            asked,
        }
    }

    fn dest(method: &str, scheme: &'static str, host: &str, port: u16) -> Destination {
        Destination {
            method: method.to_owned(),
            scheme,
            host: host.to_owned(),
            port,
        }
    }

    async fn echo_server() -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind echo");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = stream.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        port
    }

    /// A port that refuses connections: bound once by us, then released.
    async fn closed_port() -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        listener.local_addr().expect("addr").port()
    }

    async fn read_head(stream: &mut TcpStream) -> String {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            let n = tokio::time::timeout(WAIT, stream.read(&mut byte))
                .await
                .expect("head in time")
                .expect("read head");
            assert_eq!(
                n,
                1,
                "EOF inside head: {:?}",
                String::from_utf8_lossy(&head)
            );
            head.push(byte[0]);
        }
        String::from_utf8(head).expect("utf-8 head")
    }

    fn content_length(head: &str) -> usize {
        head.lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().expect("numeric length"))
            })
            .unwrap_or(0)
    }

    async fn read_response(stream: &mut TcpStream) -> (String, String) {
        let head = read_head(stream).await;
        let mut body = vec![0u8; content_length(&head)];
        tokio::time::timeout(WAIT, stream.read_exact(&mut body))
            .await
            .expect("body in time")
            .expect("read body");
        (head, String::from_utf8(body).expect("utf-8 body"))
    }

    async fn send(stream: &mut TcpStream, request: &str) {
        stream
            .write_all(request.as_bytes())
            .await
            .expect("write request");
    }

    /// Answers one request with `hello`, handing back the head and body it received.
    async fn http_server() -> (u16, oneshot::Receiver<(String, String)>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind http");
        let port = listener.local_addr().expect("addr").port();
        let (tx, rx) = oneshot::channel();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.expect("accept");
            let head = read_head(&mut stream).await;
            let mut body = vec![0u8; content_length(&head)];
            stream.read_exact(&mut body).await.expect("request body");
            let _ = tx.send((head, String::from_utf8(body).expect("utf-8")));
            stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\nKeep-Alive: timeout=5\r\n\r\nhello")
                .await
                .expect("answer");
        });
        (port, rx)
    }

    async fn open_tunnel_to(h: &Harness, port: u16) -> TcpStream {
        let mut c = h.client().await;
        send(
            &mut c,
            &format!(
                "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{GOOD_AUTH}\r\n"
            ),
        )
        .await;
        let head = read_head(&mut c).await;
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        c
    }

    async fn round_trip(c: &mut TcpStream, bytes: &[u8]) {
        c.write_all(bytes).await.expect("write through tunnel");
        let mut back = vec![0u8; bytes.len()];
        tokio::time::timeout(WAIT, c.read_exact(&mut back))
            .await
            .expect("echo in time")
            .expect("read echo");
        assert_eq!(back, bytes);
    }

    #[tokio::test]
    async fn connect_to_allowed_host_tunnels_both_ways() {
        let port = echo_server().await;
        let mut h = harness(move |d| d.host == "127.0.0.1" && d.port == port).await;
        let mut c = open_tunnel_to(&h, port).await;
        round_trip(&mut c, b"ping").await;
        round_trip(&mut c, &[0u8, 1, 2, 255, b'\r', b'\n']).await;
        let expected = Verdict {
            destination: dest("CONNECT", "https", "127.0.0.1", port),
            allowed: true,
            reason: None,
        };
        assert_eq!(h.verdict().await, expected);
        assert_eq!(*h.asked.lock().expect("lock"), vec![expected.destination]);
    }

    #[tokio::test]
    async fn bytes_sent_before_the_answer_reach_the_destination() {
        let port = echo_server().await;
        let h = harness(|_| true).await;
        let mut c = h.client().await;
        send(
            &mut c,
            &format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n{GOOD_AUTH}\r\nearly"),
        )
        .await;
        let head = read_head(&mut c).await;
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        let mut back = [0u8; 5];
        tokio::time::timeout(WAIT, c.read_exact(&mut back))
            .await
            .expect("in time")
            .expect("read");
        assert_eq!(&back, b"early");
    }

    #[tokio::test]
    async fn connect_to_refused_host_gets_403() {
        let mut h = harness(|_| false).await;
        let mut c = h.client().await;
        send(
            &mut c,
            &format!(
                "CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n{GOOD_AUTH}\r\n"
            ),
        )
        .await;
        let (head, body) = read_response(&mut c).await;
        assert!(head.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{head}");
        assert_eq!(
            body,
            "murmur: evil.example:443 is not in capabilities.network.allow\n"
        );
        assert_eq!(
            h.verdict().await,
            Verdict {
                destination: dest("CONNECT", "https", "evil.example", 443),
                allowed: false,
                reason: Some("not in capabilities.network.allow".to_owned()),
            }
        );
    }

    #[tokio::test]
    async fn hosts_are_lowercased_and_ipv6_unbracketed() {
        let mut h = harness(|_| false).await;
        for (target, host, port) in [
            ("Example.COM:8443", "example.com", 8443),
            ("[::1]:443", "::1", 443),
        ] {
            let mut c = h.client().await;
            send(
                &mut c,
                &format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{GOOD_AUTH}\r\n"),
            )
            .await;
            let (head, _) = read_response(&mut c).await;
            assert!(head.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{head}");
            assert_eq!(
                h.verdict().await.destination,
                dest("CONNECT", "https", host, port)
            );
        }
    }

    #[tokio::test]
    async fn plain_http_is_forwarded_in_origin_form() {
        let (port, received) = http_server().await;
        let mut h = harness(|_| true).await;
        let mut c = h.client().await;
        send(
            &mut c,
            &format!(
                "GET http://127.0.0.1:{port}/hello?x=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{GOOD_AUTH}Proxy-Connection: keep-alive\r\n\r\n"
            ),
        )
        .await;
        let (head, body) = read_response(&mut c).await;
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert_eq!(body, "hello");
        let lower = head.to_ascii_lowercase();
        assert!(
            !lower.contains("keep-alive:") && !lower.contains("connection: close"),
            "{head}"
        );

        let (upstream_head, _) = received.await.expect("server saw the request");
        assert!(
            upstream_head.starts_with("GET /hello?x=1 HTTP/1.1\r\n"),
            "{upstream_head}"
        );
        let lower = upstream_head.to_ascii_lowercase();
        assert!(!lower.contains("proxy-authorization"), "{upstream_head}");
        assert!(!lower.contains("proxy-connection"), "{upstream_head}");
        assert!(
            lower.contains(&format!("\r\nhost: 127.0.0.1:{port}\r\n")),
            "{upstream_head}"
        );
        assert_eq!(
            h.verdict().await,
            Verdict {
                destination: dest("GET", "http", "127.0.0.1", port),
                allowed: true,
                reason: None,
            }
        );
    }

    #[tokio::test]
    async fn plain_http_request_body_is_forwarded() {
        let (port, received) = http_server().await;
        let h = harness(|_| true).await;
        let mut c = h.client().await;
        send(
            &mut c,
            &format!(
                "POST http://127.0.0.1:{port}/up HTTP/1.1\r\nHost: x\r\n{GOOD_AUTH}Content-Length: 7\r\n\r\npayload"
            ),
        )
        .await;
        let (head, body) = read_response(&mut c).await;
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert_eq!(body, "hello");
        let (upstream_head, upstream_body) = received.await.expect("server saw the request");
        assert!(
            upstream_head.starts_with("POST /up HTTP/1.1\r\n"),
            "{upstream_head}"
        );
        assert_eq!(upstream_body, "payload");
    }

    #[tokio::test]
    async fn plain_http_to_refused_host_gets_403() {
        let mut h = harness(|_| false).await;
        let mut c = h.client().await;
        send(
            &mut c,
            &format!("GET http://evil.example/ HTTP/1.1\r\nHost: evil.example\r\n{GOOD_AUTH}\r\n"),
        )
        .await;
        let (head, body) = read_response(&mut c).await;
        assert!(head.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{head}");
        assert_eq!(
            body,
            "murmur: evil.example:80 is not in capabilities.network.allow\n"
        );
        assert_eq!(
            h.verdict().await.destination,
            dest("GET", "http", "evil.example", 80)
        );
    }

    #[tokio::test]
    async fn wrong_or_missing_credentials_get_407() {
        let mut h = harness(|_| true).await;
        let wrong = format!(
            "Proxy-Authorization: Basic {}\r\n",
            base64(b"murmur:guess!")
        );
        for auth in [wrong.as_str(), "", "Proxy-Authorization: Bearer secret\r\n"] {
            let mut c = h.client().await;
            send(
                &mut c,
                &format!("CONNECT 127.0.0.1:9 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n{auth}\r\n"),
            )
            .await;
            let (head, _) = read_response(&mut c).await;
            assert!(
                head.starts_with("HTTP/1.1 407 Proxy Authentication Required\r\n"),
                "{head}"
            );
            assert!(
                head.to_ascii_lowercase()
                    .contains("\r\nproxy-authenticate: basic realm=\"murmur\"\r\n"),
                "{head}"
            );
            assert_eq!(
                h.verdict().await,
                Verdict {
                    destination: dest("CONNECT", "https", "127.0.0.1", 9),
                    allowed: false,
                    reason: Some("missing or wrong proxy credentials".to_owned()),
                }
            );
        }
        assert!(
            h.asked.lock().expect("lock").is_empty(),
            "decide must not run unauthenticated"
        );
    }

    #[tokio::test]
    async fn origin_form_request_gets_400() {
        let mut h = harness(|_| true).await;
        let mut c = h.client().await;
        send(
            &mut c,
            &format!("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n{GOOD_AUTH}\r\n"),
        )
        .await;
        let (head, body) = read_response(&mut c).await;
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{head}");
        assert_eq!(body, "murmur: not a proxy request\n");
        assert_eq!(
            h.verdict().await,
            Verdict {
                destination: dest("GET", "http", "", 0),
                allowed: false,
                reason: Some("not a proxy request".to_owned()),
            }
        );
    }

    #[tokio::test]
    async fn allowed_host_with_nothing_listening_gets_502() {
        let port = closed_port().await;
        let mut h = harness(|_| true).await;
        let requests = [
            format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n{GOOD_AUTH}\r\n"),
            format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: x\r\n{GOOD_AUTH}\r\n"),
        ];
        for request in requests {
            let mut c = h.client().await;
            send(&mut c, &request).await;
            let (head, body) = read_response(&mut c).await;
            assert!(head.starts_with("HTTP/1.1 502 Bad Gateway\r\n"), "{head}");
            assert!(
                body.starts_with(&format!("murmur: 127.0.0.1:{port}: connect failed")),
                "{body}"
            );
            let verdict = h.verdict().await;
            assert!(verdict.allowed);
            assert_eq!(verdict.destination.port, port);
            let reason = verdict.reason.expect("a reason");
            assert!(reason.starts_with("connect failed: "), "{reason}");
        }
    }

    #[tokio::test]
    async fn dropping_the_proxy_closes_open_tunnels() {
        let port = echo_server().await;
        let h = harness(|_| true).await;
        let mut c = open_tunnel_to(&h, port).await;
        round_trip(&mut c, b"ping").await;
        drop(h);
        let mut buf = [0u8; 8];
        let read = tokio::time::timeout(Duration::from_secs(1), c.read(&mut buf)).await;
        assert!(
            matches!(read, Ok(Ok(0) | Err(_))),
            "tunnel still open: {read:?}"
        );
    }

    #[tokio::test]
    async fn idle_tunnels_are_closed_but_busy_ones_are_not() {
        let port = echo_server().await;
        let h = harness_with_idle(|_| true, Duration::from_millis(300)).await;
        let mut c = open_tunnel_to(&h, port).await;
        // Traffic every 200 ms keeps it open well past one idle period.
        for _ in 0..4 {
            round_trip(&mut c, b"ping").await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        round_trip(&mut c, b"still here").await;
        let mut buf = [0u8; 8];
        let read = tokio::time::timeout(Duration::from_secs(2), c.read(&mut buf)).await;
        assert!(
            matches!(read, Ok(Ok(0) | Err(_))),
            "idle tunnel still open: {read:?}"
        );
    }

    #[tokio::test]
    async fn connections_beyond_the_limit_wait_for_a_free_slot() {
        let h = harness(|_| false).await;
        let mut idle = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            idle.push(h.client().await);
        }
        // Let the accept loop take every slot before the extra client arrives.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut extra = h.client().await;
        send(
            &mut extra,
            &format!("GET / HTTP/1.1\r\nHost: x\r\n{GOOD_AUTH}\r\n"),
        )
        .await;
        let mut byte = [0u8; 1];
        let early = tokio::time::timeout(Duration::from_millis(300), extra.read(&mut byte)).await;
        assert!(early.is_err(), "served beyond the limit: {early:?}");
        drop(idle.pop());
        let (head, _) = read_response(&mut extra).await;
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{head}");
    }

    #[tokio::test]
    async fn url_carries_the_token() {
        let h = harness(|_| true).await;
        assert_eq!(
            h.proxy.url(),
            format!("http://murmur:secret@127.0.0.1:{}", h.proxy.addr().port())
        );
    }

    #[test]
    fn base64_matches_known_vectors() {
        for (raw, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("murmur:s3cr3t-t0ken", "bXVybXVyOnMzY3IzdC10MGtlbg=="),
        ] {
            assert_eq!(base64(raw.as_bytes()), encoded);
        }
    }

    #[test]
    fn credentials_compare_exactly() {
        let expected = b"bXVybXVyOnNlY3JldA==";
        assert!(basic_matches(b"Basic bXVybXVyOnNlY3JldA==", expected));
        assert!(basic_matches(b"basic  bXVybXVyOnNlY3JldA== ", expected));
        assert!(!basic_matches(b"Basic bXVybXVyOnNlY3JldA=", expected));
        assert!(!basic_matches(b"Basic bXVybXVyOnNlY3JldB==", expected));
        assert!(!basic_matches(b"BasicbXVybXVyOnNlY3JldA==", expected));
        assert!(!basic_matches(b"", expected));
    }

    #[test]
    fn tokens_are_escaped_in_the_url() {
        assert_eq!(escape_userinfo("a-Z_0.~"), "a-Z_0.~");
        assert_eq!(escape_userinfo("a@b:c/d%"), "a%40b%3Ac%2Fd%25");
    }
}
