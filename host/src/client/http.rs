//! The little HTTP/1.1 both commands speak: one `POST /` with a JSON-RPC body, and the
//! response head read back with whatever body bytes came with it.

use std::io;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::address::Address;

/// How long a connection attempt may take before it counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest response head either command reads.
const MAX_HEAD: usize = 64 * 1024;

/// A TCP connection to the capsule, given up after [`CONNECT_TIMEOUT`].
pub(super) async fn connect(address: &Address) -> io::Result<TcpStream> {
    match timeout(
        CONNECT_TIMEOUT,
        TcpStream::connect((address.host.as_str(), address.port)),
    )
    .await
    {
        Ok(result) => {
            let socket = result?;
            let _ = socket.set_nodelay(true);
            Ok(socket)
        }
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
        )),
    }
}

/// A JSON-RPC call as a `POST` to the address's path, with any extra headers.
pub(super) fn request(address: &Address, extra: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut text = format!(
        "POST {} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        address.path,
        address.authority,
        body.len()
    );
    for (name, value) in extra {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text.push_str(body);
    text.into_bytes()
}

/// `Authorization: Bearer <token>` when there is a token.
pub(super) fn bearer(token: Option<&str>) -> Option<String> {
    token.map(|t| format!("Bearer {}", t.trim()))
}

/// The `authorization` header of [`bearer`], as extra request headers.
pub(super) fn auth_header(bearer: Option<&str>) -> Vec<(&str, &str)> {
    bearer.map(|a| ("authorization", a)).into_iter().collect()
}

/// What a 401 from `address` means to the user of a client command: a capsule `mur
/// serve` hosts (a `/c/<id>/` path) has the token its creation returned, one `mur run`
/// serves at `/` the one `mur token` prints.
pub(super) fn unauthorized(
    label: &str,
    address: &Address,
    token: Option<&str>,
) -> crate::error::Error {
    let hosted = address.path != "/";
    let (what, hint) = match (token, hosted) {
        (None, true) => (
            "asks for a token",
            "pass the token mur serve returned when the capsule was created: --token TOKEN",
        ),
        (Some(_), true) => (
            "refused the token",
            "check --token: it must be the token returned when this capsule was created",
        ),
        (None, false) => (
            "asks for a token",
            "pass its token: --token TOKEN, or MURMUR_DOOR_TOKEN in the environment; mur token SESSION prints it where the capsule runs",
        ),
        (Some(_), false) => (
            "refused the token",
            "it must be the token mur token SESSION prints for the capsule's running session: each run mints a new one",
        ),
    };
    crate::error::Error::new("E-IO-005", format!("{label} {what} (401 Unauthorized)")).hint(hint)
}

/// The token a client presents to an address it was given: `--token`, else
/// `MURMUR_DOOR_TOKEN`. A named session's own token comes from its registry entry
/// instead (see `session`).
pub(super) fn token_for_address(flag: Option<&str>) -> Option<String> {
    flag.map(str::to_string).or_else(|| {
        std::env::var(crate::door::TOKEN_ENV)
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
    })
}

/// A response's status and headers.
#[derive(Debug)]
pub(super) struct Head {
    pub(super) code: u16,
    /// The status line as received, e.g. `HTTP/1.1 404 Not Found`.
    pub(super) status_line: String,
    headers: Vec<(String, String)>,
}

impl Head {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Why no response head could be read.
#[derive(Debug)]
pub(super) enum HeadError {
    /// The connection ended, or failed, before a whole head arrived.
    Closed(Option<io::Error>),
    /// Bytes arrived that are not an HTTP response head.
    Malformed(String),
}

/// Reads a response head; returns it and whatever body bytes came with it.
pub(super) async fn read_head(socket: &mut TcpStream) -> Result<(Head, Vec<u8>), HeadError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = socket
            .read(&mut chunk)
            .await
            .map_err(|e| HeadError::Closed(Some(e)))?;
        if n == 0 {
            return Err(HeadError::Closed(None));
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(parsed) = parse_head(&buf)? {
            return Ok(parsed);
        }
        if buf.len() > MAX_HEAD {
            return Err(HeadError::Malformed(
                "the response head is too large".into(),
            ));
        }
    }
}

fn parse_head(buf: &[u8]) -> Result<Option<(Head, Vec<u8>)>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut headers);
    match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            let first = buf.split(|b| *b == b'\n').next().unwrap_or_default();
            let status_line = String::from_utf8_lossy(first).trim_end().to_string();
            let head = Head {
                code: response.code.unwrap_or_default(),
                status_line,
                headers: crate::http1::owned_headers(response.headers),
            };
            Ok(Some((head, buf[len..].to_vec())))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(e) => Err(HeadError::Malformed(format!(
            "the answer is not an HTTP response ({e})"
        ))),
    }
}
