//! HTTP/1.1 as a capsule's address speaks it: a request read whole (its head parsed
//! with httparse), and a whole reply written back before the connection closes. Both
//! doors and `mur serve`'s own routes answer through these; the event stream both
//! doors write is [`event_stream`].

pub mod event_stream;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 1024 * 1024;

/// An HTTP request as read: its head, and the whole body.
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A whole response, written and then the connection closed.
pub struct Reply {
    pub status: &'static str,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(status: &'static str, body: &Value) -> Reply {
        Reply {
            status,
            content_type: "application/json",
            headers: Vec::new(),
            body: body.to_string().into_bytes(),
        }
    }

    pub fn text(status: &'static str, content_type: &'static str, body: String) -> Reply {
        Reply {
            status,
            content_type,
            headers: Vec::new(),
            body: body.into_bytes(),
        }
    }

    /// The seed's plain HTTP error: no body.
    pub fn status(status: &'static str) -> Reply {
        Reply {
            status,
            content_type: "",
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub async fn write(self, socket: &mut TcpStream) {
        let mut head = format!("HTTP/1.1 {}\r\n", self.status);
        if !self.content_type.is_empty() {
            head.push_str(&format!("content-type: {}\r\n", self.content_type));
        }
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str(&format!(
            "content-length: {}\r\nconnection: close\r\n\r\n",
            self.body.len()
        ));
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(&self.body);
        let _ = socket.write_all(&bytes).await;
        let _ = socket.shutdown().await;
    }
}

/// Reads one request: head, then a body of `content-length` bytes.
pub async fn read_request(socket: &mut TcpStream) -> Result<Request, &'static str> {
    let mut buf = Vec::with_capacity(4096);
    loop {
        read_more(socket, &mut buf).await?;
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut parsed = httparse::Request::new(&mut headers);
        match parsed.parse(&buf) {
            Ok(httparse::Status::Complete(head_len)) => {
                let request = Request {
                    method: parsed.method.unwrap_or_default().to_string(),
                    path: parsed.path.unwrap_or_default().to_string(),
                    headers: owned_headers(parsed.headers),
                    body: Vec::new(),
                };
                return read_body(socket, request, buf.split_off(head_len)).await;
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => continue,
            Ok(httparse::Status::Partial) => return Err("431 Request Header Fields Too Large"),
            Err(_) => return Err("400 Bad Request"),
        }
    }
}

/// Appends what the client sent next; a client that closed or broke mid-request sent a
/// bad request.
async fn read_more(socket: &mut TcpStream, buf: &mut Vec<u8>) -> Result<(), &'static str> {
    let mut chunk = [0u8; 8192];
    match socket.read(&mut chunk).await {
        Ok(0) | Err(_) => Err("400 Bad Request"),
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            Ok(())
        }
    }
}

/// Header names and values as owned strings (values decoded lossily: a header is
/// never a reason to panic or to refuse a request).
pub fn owned_headers(headers: &[httparse::Header<'_>]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|h| {
            (
                h.name.to_string(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect()
}

async fn read_body(
    socket: &mut TcpStream,
    mut request: Request,
    mut body: Vec<u8>,
) -> Result<Request, &'static str> {
    if request.header("transfer-encoding").is_some() {
        return Err("411 Length Required");
    }
    let length = match request.header("content-length") {
        None => 0,
        Some(v) => v.trim().parse::<usize>().map_err(|_| "400 Bad Request")?,
    };
    if length > MAX_BODY {
        return Err("413 Content Too Large");
    }
    while body.len() < length {
        read_more(socket, &mut body).await?;
    }
    body.truncate(length);
    request.body = body;
    Ok(request)
}
