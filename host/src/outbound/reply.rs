//! Reading an answer to a request the host sent for itself (a remote peer's door, an
//! MCP server) as the hostile input it may be: a whole body read only up to a bound,
//! an event stream read event by event with no event past its bound, and what went
//! wrong on the wire said in words that name no address.

use http_body_util::BodyExt;
use wasmtime_wasi_http::Error;

use super::PooledBody;

/// The most of a remote's own words a failure quotes, in characters.
const MAX_SAID: usize = 300;

/// Why an answer could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unread {
    /// The connection failed, timed out or broke, in [`transport`]'s words.
    Transport(String),
    /// The body, or one event of a stream, held more than `max` bytes.
    TooBig { max: usize },
    /// An event's data is not UTF-8.
    NotUtf8,
}

/// A body read whole, up to `max` bytes; past that, [`Unread::TooBig`] without reading
/// further.
pub(crate) async fn read_bounded(body: &mut PooledBody, max: usize) -> Result<Vec<u8>, Unread> {
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Unread::Transport(transport(&e)))?;
        if let Ok(data) = frame.into_data() {
            if bytes.len() + data.len() > max {
                return Err(Unread::TooBig { max });
            }
            bytes.extend_from_slice(&data);
        }
    }
    Ok(bytes)
}

/// A transport error in words that name no address: the reader of a failure is a
/// model, and an address is none of its business.
pub(crate) fn transport(e: &Error) -> String {
    match e {
        Error::Connect(_) | Error::ConnectionRefused => "the connection was refused".into(),
        Error::ConnectionTimeout => "connecting timed out".into(),
        Error::ConnectionReadTimeout | Error::HttpResponseTimeout => {
            "it stopped answering (timed out)".into()
        }
        Error::DnsTimeout | Error::DnsError { .. } | Error::DestinationNotFound => {
            "its host name did not resolve".into()
        }
        Error::Tls(_)
        | Error::TlsProtocolError
        | Error::TlsCertificateError
        | Error::TlsAlertReceived { .. }
        | Error::InvalidDnsNameError(_) => "the TLS handshake failed".into(),
        e => said(&e.to_string()),
    }
}

/// A remote's own words, fit to quote in a failure: secrets redacted, one line, at
/// most [`MAX_SAID`] characters.
pub(crate) fn said(text: &str) -> String {
    let scrubbed = crate::secret::scrub(text.trim());
    let line = crate::escape::line(&scrubbed);
    match line.char_indices().nth(MAX_SAID) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.into_owned(),
    }
}

/// One server-sent event: its data and the stream's last event id when it came.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Event {
    pub id: Option<String>,
    pub data: String,
}

/// An event stream, read as it arrives: lines end with LF, CRLF or CR; `data` lines
/// join with LF; comments (heartbeats) are skipped; nothing grows past the bound the
/// reader was made with.
pub(crate) struct Events {
    body: Option<PooledBody>,
    max: usize,
    buf: Vec<u8>,
    /// Where unread bytes of `buf` start.
    start: usize,
    data: Vec<u8>,
    has_data: bool,
    last_id: Option<String>,
}

impl Events {
    /// The events of `body`, none of them (nor any line) longer than `max` bytes.
    pub(crate) fn new(body: PooledBody, max: usize) -> Events {
        Events {
            body: Some(body),
            max,
            buf: Vec::new(),
            start: 0,
            data: Vec::new(),
            has_data: false,
            last_id: None,
        }
    }

    /// The next event; `None` when the stream ended (an event it did not finish is
    /// dropped, as the SSE rules say).
    pub(crate) async fn next(&mut self) -> Result<Option<Event>, Unread> {
        loop {
            while let Some(line) = self.line() {
                if let Some(event) = self.field(line)? {
                    return Ok(Some(event));
                }
            }
            let Some(body) = self.body.as_mut() else {
                return Ok(None);
            };
            if self.buf.len() - self.start > self.max {
                return Err(Unread::TooBig { max: self.max });
            }
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.drain(..self.start);
                        self.start = 0;
                        self.buf.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => return Err(Unread::Transport(transport(&e))),
                None => self.body = None,
            }
        }
    }

    /// The next whole line of what has arrived, without its end.
    fn line(&mut self) -> Option<Vec<u8>> {
        let unread = &self.buf[self.start..];
        let at = unread.iter().position(|&b| b == b'\n' || b == b'\r')?;
        let mut end = at + 1;
        if unread[at] == b'\r' {
            match unread.get(at + 1) {
                Some(b'\n') => end += 1,
                // A CR last of what came may be half of a CRLF still on its way.
                None if self.body.is_some() => return None,
                _ => {}
            }
        }
        let line = unread[..at].to_vec();
        self.start += end;
        Some(line)
    }

    /// Takes in one line: an event when it is the blank line that ends one.
    fn field(&mut self, line: Vec<u8>) -> Result<Option<Event>, Unread> {
        if line.is_empty() {
            if !std::mem::take(&mut self.has_data) {
                return Ok(None);
            }
            let data =
                String::from_utf8(std::mem::take(&mut self.data)).map_err(|_| Unread::NotUtf8)?;
            let id = self.last_id.clone();
            return Ok(Some(Event { id, data }));
        }
        if line[0] == b':' {
            return Ok(None);
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(at) => {
                let value = &line[at + 1..];
                (&line[..at], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (&line[..], &[][..]),
        };
        match name {
            b"data" => {
                if self.data.len() + value.len() + 1 > self.max {
                    return Err(Unread::TooBig { max: self.max });
                }
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"id" if !value.contains(&0) && value.len() <= 128 => {
                self.last_id = std::str::from_utf8(value).ok().map(str::to_string);
            }
            _ => {}
        }
        Ok(None)
    }
}
