//! The pool against small servers on 127.0.0.1 that count the connections they accept.

use super::*;
use http_body_util::BodyExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// How a test server treats each connection.
#[derive(Clone, Copy)]
enum Serve {
    /// Answers every request on it (HTTP/1.1 keep-alive).
    KeepAlive,
    /// Answers one request, then closes the socket without saying so in a header.
    OneThenClose,
    /// Reads the request and never answers.
    Silent,
}

const ANSWER: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n\r\nhello";

/// A server on a free port; returns its `http://` URL and its count of connections.
async fn server(serve: Serve) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/x", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 64 * 1024];
                loop {
                    // Every test request fits one read: a head and a short body.
                    match socket.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                    match serve {
                        Serve::Silent => continue,
                        Serve::KeepAlive => {
                            if socket.write_all(ANSWER.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                        Serve::OneThenClose => {
                            let _ = socket.write_all(ANSWER.as_bytes()).await;
                            return;
                        }
                    }
                }
            });
        }
    });
    (url, accepted)
}

fn post(url: &str) -> Request<Full<Bytes>> {
    let uri: Uri = url.parse().unwrap();
    Request::post(uri.clone())
        .header("host", uri.authority().unwrap().as_str())
        .body(Full::new(Bytes::from_static(b"{\"q\":1}")))
        .unwrap()
}

fn options(read: Duration) -> RequestOptions {
    RequestOptions {
        connect_timeout: Some(Duration::from_secs(2)),
        first_byte_timeout: Some(read),
        between_bytes_timeout: Some(read),
    }
}

/// One request, its answer read whole.
async fn exchange(url: &str) -> String {
    let response = send(post(url), options(Duration::from_secs(5)))
        .await
        .unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(body.to_vec()).unwrap()
}

#[tokio::test]
async fn answers_read_whole_leave_one_connection_for_every_request() {
    let (url, accepted) = server(Serve::KeepAlive).await;
    for _ in 0..5 {
        assert_eq!(exchange(&url).await, "hello");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_answer_dropped_unread_closes_its_connection() {
    let (url, accepted) = server(Serve::KeepAlive).await;
    let response = send(post(&url), options(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    drop(response);
    assert_eq!(exchange(&url).await, "hello");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_connection_the_server_closed_is_not_used_again() {
    let (url, accepted) = server(Serve::OneThenClose).await;
    for _ in 0..3 {
        assert_eq!(exchange(&url).await, "hello");
        // The server's close takes a moment to arrive; a request may meet it either way.
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_silent_server_times_out_as_the_default_sender_does() {
    let (url, _) = server(Serve::Silent).await;
    let err = send(post(&url), options(Duration::from_millis(200)))
        .await
        .err()
        .unwrap();
    assert!(matches!(err, Error::ConnectionReadTimeout), "{err:?}");
}

#[tokio::test]
async fn a_refused_connection_is_a_connect_error() {
    // Bound, then closed: nothing listens on the port.
    let port = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = send(
        post(&format!("http://127.0.0.1:{port}/")),
        options(Duration::from_secs(1)),
    )
    .await
    .err()
    .unwrap();
    assert!(matches!(err, Error::Connect(_)), "{err:?}");
}

#[test]
fn targets_fill_in_the_port_and_key_by_origin() {
    let target = Target::of(&"https://api.example.com/v1/x".parse().unwrap()).unwrap();
    assert_eq!(
        (target.origin.as_str(), target.address.as_str(), target.tls),
        ("https://api.example.com:443", "api.example.com:443", true)
    );
    let target = Target::of(&"http://[::1]:8080/".parse().unwrap()).unwrap();
    assert_eq!(target.origin, "http://[::1]:8080");
    assert!(Target::of(&"/relative".parse().unwrap()).is_err());
    assert_eq!(
        origin_form(&"http://h:1/v1/x?k=v".parse().unwrap()),
        "/v1/x?k=v"
    );
}

#[test]
fn certificate_names_come_from_the_address() {
    assert_eq!(
        server_name("example.com:443").unwrap(),
        ServerName::try_from("example.com").unwrap()
    );
    assert_eq!(
        server_name("[::1]:443").unwrap(),
        ServerName::from(std::net::Ipv6Addr::LOCALHOST)
    );
    assert!(server_name("bad name:443").is_err());
}
