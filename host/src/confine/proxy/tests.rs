//! The proxy end to end over loopback: real clients, an echo server and a one-shot http
//! server as destinations.

use std::sync::Mutex;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use super::credentials::basic_matches;
use super::listener::MAX_CONNECTIONS;
use super::*;

const TOKEN: &str = "secret";
/// `base64("murmur:secret")`, worked out independently of `base64()`.
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
/// A port nothing listens on, held bound (not listening) so that no other test's
/// server can take it meanwhile: a connection to it is refused.
fn closed_port() -> (tokio::net::TcpSocket, u16) {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind");
    let port = socket.local_addr().expect("addr").port();
    (socket, port)
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
        &format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{GOOD_AUTH}\r\n"),
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
        &format!("CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n{GOOD_AUTH}\r\n"),
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
    let (_held, port) = closed_port();
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
