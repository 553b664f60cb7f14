//! `mur watch` and `mur stop`: clients of a capsule's A2A address.
//!
//! The server closes every connection after its response and an event stream is
//! close-delimited (no chunked encoding), so a few lines of HTTP/1.1 over a plain TCP
//! stream are all either command needs.

use std::collections::HashMap;
use std::io::{self, Write};
use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep, timeout};

use crate::cli::{StopArgs, WatchArgs};
use crate::error::Error;
use crate::sse::{Event, FrameReader};

/// How long a connection attempt may take before it counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `mur stop` waits for the capsule to answer the stop request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// How often `mur stop` checks whether the address still answers, and how long one
/// check may take.
const POLL_EVERY: Duration = Duration::from_millis(50);
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// The largest response head either command reads.
const MAX_HEAD: usize = 64 * 1024;
/// The column a completed task's response is wrapped at.
const WRAP_WIDTH: usize = 78;

const WATCH_BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"stream/watch","params":{}}"#;
const STOP_BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"murmur/stop","params":{}}"#;

/// A capsule's address as the user typed it, and where it points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Address {
    /// Exactly what was typed: messages name the address this way.
    pub typed: String,
    /// The host to connect to (an IPv6 literal without its brackets).
    pub host: String,
    pub port: u16,
    /// `host:port` as the `Host` header wants it (IPv6 literals keep their brackets).
    pub authority: String,
}

/// Parses `host:port`, `localhost:port` or `http://host:port`, with an optional
/// trailing `/`. Used as clap's value parser, so a bad address is a usage error.
pub fn parse_address(typed: &str) -> Result<Address, String> {
    let trimmed = typed.trim();
    let rest = match trimmed.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
        Some((scheme, _)) => {
            return Err(format!(
                "'{scheme}://' is not supported: a capsule's address is plain http (HOST:PORT or http://HOST:PORT)"
            ));
        }
        None => trimmed,
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains('/') {
        return Err("expected HOST:PORT with no path (the capsule answers on /)".into());
    }
    let (host, port) = authority
        .rsplit_once(':')
        .ok_or_else(|| "expected HOST:PORT, for example localhost:52222".to_string())?;
    let host = match host.strip_prefix('[') {
        Some(inner) => inner
            .strip_suffix(']')
            .ok_or_else(|| format!("'{host}' is not a valid host"))?,
        None if host.contains(':') => {
            return Err("write an IPv6 address in brackets, for example [::1]:52222".into());
        }
        None => host,
    };
    if host.is_empty() {
        return Err("the host is missing: expected HOST:PORT, for example localhost:52222".into());
    }
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("'{port}' is not a port (1-65535)"))?;
    Ok(Address {
        typed: typed.to_string(),
        host: host.to_string(),
        port,
        authority: authority.to_string(),
    })
}

async fn connect(address: &Address) -> io::Result<TcpStream> {
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

/// A JSON-RPC call as `POST /`, with any extra headers.
fn request(address: &Address, extra: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut text = format!(
        "POST / HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
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

/// A response's status and headers.
#[derive(Debug)]
struct Head {
    code: u16,
    /// The status line as received, e.g. `HTTP/1.1 404 Not Found`.
    status_line: String,
    headers: Vec<(String, String)>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Why no response head could be read.
#[derive(Debug)]
enum HeadError {
    /// The connection ended, or failed, before a whole head arrived.
    Closed(Option<io::Error>),
    /// Bytes arrived that are not an HTTP response head.
    Malformed(String),
}

/// Reads a response head; returns it and whatever body bytes came with it.
async fn read_head(socket: &mut TcpStream) -> Result<(Head, Vec<u8>), HeadError> {
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
                headers: crate::server::owned_headers(response.headers),
            };
            Ok(Some((head, buf[len..].to_vec())))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(e) => Err(HeadError::Malformed(format!(
            "the answer is not an HTTP response ({e})"
        ))),
    }
}

// ---------------------------------------------------------------------------------
// mur watch

/// What the watch does after a frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// `capsule-closed`: the stream ended on purpose.
    CapsuleClosed,
    /// The reader closed stdout: nobody is watching any more.
    StdoutClosed,
}

/// Turns frames into what `mur watch` prints: stdout for the capsule's work, stderr
/// for what the watch itself has to say.
pub struct Printer<O: Write, E: Write> {
    out: O,
    err: E,
    threaded: bool,
    /// A text chunk left the cursor mid-line.
    open_line: bool,
    /// The id of the last complete frame that had one.
    last_id: Option<u64>,
    /// Tasks ended so far in each context (threaded mode).
    ended: HashMap<String, u64>,
    /// The context of every task seen with one, for frames that omit it.
    contexts: HashMap<String, String>,
}

impl<O: Write, E: Write> Printer<O, E> {
    pub fn new(out: O, err: E) -> Self {
        Printer {
            out,
            err,
            threaded: false,
            open_line: false,
            last_id: None,
            ended: HashMap::new(),
            contexts: HashMap::new(),
        }
    }

    pub fn last_id(&self) -> Option<u64> {
        self.last_id
    }

    /// Handles one frame. Errors are stdout failures other than a closed pipe.
    pub fn frame(&mut self, event: &Event) -> io::Result<Flow> {
        if let Some(id) = event.id {
            self.last_id = Some(id);
        }
        // Unknown event types and data that is not a JSON object are ignored.
        let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
        let printed = match event.event.as_str() {
            "connection-ack" => {
                self.threaded = data["conversation_mode"] == "threaded";
                Ok(())
            }
            "status" => self.status(&data),
            "artifact" => self.artifact(&data),
            "text" => self.text(&data),
            "gap" => {
                if let Some(first) = data["first_available_id"].as_u64() {
                    self.warn(&format!(
                        "[murmur] warning: buffer overflow — some earlier events were lost (first available id: {first})"
                    ))?;
                }
                Ok(())
            }
            "lagged" => {
                if let Some(missed) = data["missed"].as_u64() {
                    self.warn(&format!(
                        "[murmur] warning: this watch fell behind and missed {missed} frames"
                    ))?;
                }
                Ok(())
            }
            "capsule-closed" => {
                self.warn("[murmur] capsule closed")?;
                return Ok(Flow::CapsuleClosed);
            }
            _ => Ok(()),
        };
        match printed.and_then(|()| self.out.flush()) {
            Ok(()) => Ok(Flow::Continue),
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(Flow::StdoutClosed),
            Err(e) => Err(e),
        }
    }

    /// Ends a line a text chunk left open, so what follows starts on its own line.
    pub fn end_line(&mut self) -> io::Result<()> {
        if self.open_line {
            self.open_line = false;
            self.out.write_all(b"\n")?;
            self.out.flush()?;
        }
        Ok(())
    }

    /// A line on stderr, after ending any open stdout line so the two do not mix.
    fn warn(&mut self, line: &str) -> io::Result<()> {
        self.end_line()?;
        let _ = writeln!(self.err, "{line}");
        let _ = self.err.flush();
        Ok(())
    }

    fn status(&mut self, data: &Value) -> io::Result<()> {
        let Some(state) = data["status"]["state"].as_str() else {
            return Ok(());
        };
        let task = data["id"].as_str();
        if let (Some(task), Some(context)) = (task, data["context_id"].as_str()) {
            self.contexts.insert(task.to_string(), context.to_string());
        }
        let context = data["context_id"]
            .as_str()
            .or_else(|| task.and_then(|t| self.contexts.get(t)).map(String::as_str))
            .map(str::to_string);
        let label = match (&context, self.threaded) {
            (Some(context), true) => {
                let turn = self.ended.get(context).copied().unwrap_or(0) + 1;
                format!("[{} / turn {turn} / {state}]", short_context(context))
            }
            _ => format!("[{state}]"),
        };
        let message = data["status"]["message"].as_str();
        self.end_line()?;
        if data["final"] != true {
            match message {
                Some(message) => writeln!(self.out, "{label}  {message}")?,
                None => writeln!(self.out, "{label}")?,
            }
            return Ok(());
        }
        writeln!(self.out, "{label}")?;
        if state == "completed" {
            let response = data["status"]["response"].as_str().unwrap_or_default();
            for line in wrap(response, WRAP_WIDTH) {
                if line.is_empty() {
                    writeln!(self.out)?;
                } else {
                    writeln!(self.out, "  {line}")?;
                }
            }
            writeln!(self.out)?;
        }
        // A task has ended, and with it a turn of its conversation; the seed's
        // `input-timeout` failure is final but the task goes on.
        let goes_on = state == "failed" && message == Some("input-timeout");
        if let (Some(context), false) = (context, goes_on) {
            *self.ended.entry(context).or_insert(0) += 1;
        }
        Ok(())
    }

    fn artifact(&mut self, data: &Value) -> io::Result<()> {
        let artifact = &data["artifact"];
        let Some(tool) = artifact["tool_name"].as_str() else {
            return Ok(());
        };
        let mut facts = Vec::new();
        if let Some(is_error) = artifact["is_error"].as_bool() {
            facts.push(if is_error { "error" } else { "ok" }.to_string());
        }
        if let Some(code) = artifact["exit_code"].as_i64() {
            facts.push(format!("exit {code}"));
        }
        if let Some(ms) = artifact["duration_ms"].as_u64() {
            facts.push(format!("{ms}ms"));
        }
        if artifact["truncated"] == true {
            facts.push("truncated".to_string());
        }
        let mut line = format!("[artifact] tool: {tool}");
        if !facts.is_empty() {
            line.push_str(&format!(" [{}]", facts.join(", ")));
        }
        let content = artifact["content"].as_str().unwrap_or_default();
        let content = if artifact["fence_source"].is_string() {
            unfence(content)
        } else {
            content
        };
        let mut lines: Vec<&str> = content.lines().collect();
        while lines.last().is_some_and(|l| l.trim().is_empty()) {
            lines.pop();
        }
        self.end_line()?;
        let mut lines = lines.into_iter();
        match lines.next() {
            Some(first) => writeln!(self.out, "{line} | {first}")?,
            None => writeln!(self.out, "{line}")?,
        }
        for rest in lines {
            if rest.is_empty() {
                writeln!(self.out)?;
            } else {
                writeln!(self.out, "  {rest}")?;
            }
        }
        Ok(())
    }

    fn text(&mut self, data: &Value) -> io::Result<()> {
        // A final text frame is the end-of-chunks marker, or the whole reply that
        // the `completed` status prints anyway.
        if data["final"] == true {
            return Ok(());
        }
        let Some(text) = data["text"].as_str() else {
            return Ok(());
        };
        if text.is_empty() {
            return Ok(());
        }
        self.out.write_all(text.as_bytes())?;
        self.open_line = !text.ends_with('\n');
        Ok(())
    }
}

/// `ctx_0199c4e2...` for a minted context id; any other id shortened the same way.
fn short_context(context: &str) -> String {
    let (prefix, rest) = match context.strip_prefix("ctx_") {
        Some(rest) => ("ctx_", rest),
        None => ("", context),
    };
    if rest.chars().count() <= 8 {
        return context.to_string();
    }
    let head: String = rest.chars().take(8).collect();
    format!("{prefix}{head}...")
}

/// The body of fenced content, for display; anything else unchanged.
fn unfence(content: &str) -> &str {
    let Some(rest) = content.strip_prefix("<untrusted-content source=") else {
        return content;
    };
    let Some((_, body)) = rest.split_once('\n') else {
        return content;
    };
    if body == "</untrusted-content>" {
        return "";
    }
    body.strip_suffix("\n</untrusted-content>")
        .unwrap_or(content)
}

/// Word-wraps each line of `text` at `width` columns, keeping its indentation.
/// A word longer than the width gets a line of its own rather than being split.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let indent: String = line.chars().take_while(|c| c.is_whitespace()).collect();
        let indent = if indent.chars().count() < width / 2 {
            indent
        } else {
            String::new()
        };
        let indent_len = indent.chars().count();
        let mut current = indent.clone();
        let mut len = indent_len;
        let mut empty = true;
        for word in line.split_whitespace() {
            let word_len = word.chars().count();
            if !empty && len + 1 + word_len > width {
                out.push(std::mem::replace(&mut current, indent.clone()));
                len = indent_len;
                empty = true;
            }
            if !empty {
                current.push(' ');
                len += 1;
            }
            current.push_str(word);
            len += word_len;
            empty = false;
        }
        out.push(if empty { String::new() } else { current });
    }
    while out.last().is_some_and(String::is_empty) {
        out.pop();
    }
    out
}

fn lost(label: &str, last_id: Option<u64>) -> Error {
    let when = match last_id {
        Some(id) => format!("after event id {id}"),
        None => "before any event".to_string(),
    };
    Error::new(
        "E-IO-003",
        format!(
            "connection to {label} lost {when} — the capsule may still be running; run mur watch again to reattach"
        ),
    )
    .hint("a capsule that exits (after its task, or through mur stop) closes the watch this way too")
}

fn connect_failed(label: &str, e: &io::Error) -> Error {
    Error::new("E-IO-003", format!("failed to connect to {label}: {e}"))
        .hint("check the address mur run printed (murmur: url ...); the capsule may have exited")
}

pub async fn watch(args: WatchArgs) -> Result<ExitCode, Error> {
    let address = args.address;
    let label = address.typed.as_str();
    let mut socket = connect(&address)
        .await
        .map_err(|e| connect_failed(label, &e))?;
    let sent = socket
        .write_all(&request(&address, &[("last-event-id", "0")], WATCH_BODY))
        .await;
    if sent.is_err() {
        return Err(lost(label, None));
    }
    let (head, body) = match read_head(&mut socket).await {
        Ok(answer) => answer,
        Err(HeadError::Closed(_)) => return Err(lost(label, None)),
        Err(HeadError::Malformed(why)) => {
            return Err(Error::new(
                "E-IO-003",
                format!("{label} did not answer as a capsule: {why}"),
            )
            .hint("check the address mur run printed (murmur: url ...)"));
        }
    };
    if head.code != 200 {
        return Err(Error::new(
            "E-IO-003",
            format!("capsule returned non-200 response: {}", head.status_line),
        )
        .hint("check the address mur run printed (murmur: url ...)"));
    }
    let content_type = head.header("content-type").unwrap_or_default();
    if !content_type
        .split(';')
        .next()
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("text/event-stream"))
    {
        return Err(Error::new(
            "E-IO-003",
            format!(
                "{label} did not answer with an event stream (content-type: {})",
                if content_type.is_empty() {
                    "none"
                } else {
                    content_type
                }
            ),
        )
        .hint("is this a mur capsule's address? it must serve stream/watch"));
    }

    // Printed once the capsule has answered: from here on every frame it writes
    // reaches this watch.
    eprintln!(
        "[murmur] watching {label} — Ctrl-C ends the watch, not the capsule; use `mur stop` to end the capsule"
    );
    let mut printer = Printer::new(io::stdout(), io::stderr());
    let mut reader = FrameReader::default();
    let mut pending = body;
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        for event in reader.feed(&pending) {
            match printer.frame(&event) {
                Ok(Flow::Continue) => {}
                Ok(Flow::CapsuleClosed | Flow::StdoutClosed) => return Ok(ExitCode::SUCCESS),
                Err(e) => {
                    return Err(Error::new(
                        "E-IO-003",
                        format!("could not write to stdout: {e}"),
                    ));
                }
            }
        }
        let n = socket.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        pending = chunk[..n].to_vec();
    }
    if let Err(e) = printer.end_line()
        && e.kind() == io::ErrorKind::BrokenPipe
    {
        return Ok(ExitCode::SUCCESS);
    }
    Err(lost(label, printer.last_id()))
}

// ---------------------------------------------------------------------------------
// mur stop

fn no_capsule(address: &Address, e: &io::Error) -> Error {
    let message = if e.kind() == io::ErrorKind::ConnectionRefused {
        format!("no capsule is listening at {}", address.typed)
    } else {
        format!("no capsule is listening at {}: {e}", address.typed)
    };
    Error::new("E-RUN-022", message).hint(
        "give the address mur run printed (murmur: url ...); there is no session registry yet, so a session id cannot name a capsule",
    )
}

fn silent(address: &Address, why: &str) -> Error {
    Error::new(
        "E-RUN-023",
        format!(
            "{} accepted the connection but did not answer the stop request: {why}",
            address.typed
        ),
    )
    .hint("the capsule may be wedged; end its process (its pid is in the launch line of mur run --json)")
}

fn not_ended(address: &Address, why: &str) -> Error {
    Error::new(
        "E-RUN-024",
        format!("{} could not be ended: {why}", address.typed),
    )
}

/// Sends `murmur/stop` and returns the session id the capsule says it stopped.
async fn ask_to_stop(address: &Address) -> Result<String, Error> {
    let mut socket = connect(address)
        .await
        .map_err(|e| no_capsule(address, &e))?;
    let exchange = async {
        socket
            .write_all(&request(address, &[], STOP_BODY))
            .await
            .map_err(|e| HeadError::Closed(Some(e)))?;
        let (head, mut body) = read_head(&mut socket).await?;
        // The server closes after its answer; content-length, when given, bounds it.
        let length = head
            .header("content-length")
            .and_then(|v| v.trim().parse::<usize>().ok());
        let mut chunk = [0u8; 4096];
        while length.is_none_or(|l| body.len() < l) {
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => body.extend_from_slice(&chunk[..n]),
            }
        }
        if let Some(l) = length {
            body.truncate(l);
        }
        Ok::<_, HeadError>((head, body))
    };
    let (head, body) = match timeout(ANSWER_TIMEOUT, exchange).await {
        Err(_) => {
            return Err(silent(
                address,
                &format!("no answer within {} s", ANSWER_TIMEOUT.as_secs()),
            ));
        }
        Ok(Err(HeadError::Closed(Some(e)))) => return Err(silent(address, &e.to_string())),
        Ok(Err(HeadError::Closed(None))) => {
            return Err(silent(address, "it closed the connection"));
        }
        Ok(Err(HeadError::Malformed(why))) => return Err(not_ended(address, &why)),
        Ok(Ok(answer)) => answer,
    };
    if head.code != 200 {
        return Err(
            not_ended(address, &format!("it answered {}", head.status_line))
                .hint("is this a mur capsule's address? it must answer murmur/stop"),
        );
    }
    let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if let Some(id) = answer["result"]["stopped"].as_str() {
        return Ok(id.to_string());
    }
    let why = match (
        answer["error"]["code"].as_i64(),
        answer["error"]["message"].as_str(),
    ) {
        (Some(code), Some(message)) => format!("it answered error {code}: {message}"),
        _ => format!(
            "its answer names no stopped session: {}",
            String::from_utf8_lossy(&body)
                .chars()
                .take(200)
                .collect::<String>()
        ),
    };
    Err(not_ended(address, &why)
        .hint("is this a mur capsule's address? it must answer murmur/stop"))
}

pub async fn stop(args: StopArgs) -> Result<ExitCode, Error> {
    let address = args.address;
    let session = ask_to_stop(&address).await?;
    let mut out = io::stdout();
    let _ = writeln!(out, "stopped: {session}");
    let _ = out.flush();
    if args.timeout == 0 {
        return Ok(ExitCode::SUCCESS);
    }
    // The capsule answers first and then ends its session; its address stops
    // answering when the process is done serving.
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    loop {
        let probe = timeout(
            PROBE_TIMEOUT,
            TcpStream::connect((address.host.as_str(), address.port)),
        )
        .await;
        match probe {
            Ok(Ok(socket)) => drop(socket),
            Ok(Err(_)) => break,
            Err(_) => {}
        }
        if Instant::now() >= deadline {
            return Err(not_ended(
                &address,
                &format!("it still answers after {} s", args.timeout),
            )
            .hint("a task may be inside a long tool call; run mur stop again, or end the process (its pid is in the launch line of mur run --json)"));
        }
        sleep(POLL_EVERY).await;
    }
    let _ = writeln!(out, "residue: nothing else was left running");
    let _ = out.flush();
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(wire: &str) -> Vec<Event> {
        FrameReader::default().feed(wire.as_bytes())
    }

    /// Runs frames through a printer: (stdout, stderr, the flow after the last one).
    fn print(wire: &str) -> (String, String, Flow, Option<u64>) {
        let mut printer = Printer::new(Vec::new(), Vec::new());
        let mut flow = Flow::Continue;
        for event in events(wire) {
            flow = printer.frame(&event).unwrap();
            if flow != Flow::Continue {
                break;
            }
        }
        let last = printer.last_id();
        (
            String::from_utf8(printer.out).unwrap(),
            String::from_utf8(printer.err).unwrap(),
            flow,
            last,
        )
    }

    fn status(id: u64, task: &str, ctx: &str, state: &str, message: &str, fin: bool) -> String {
        format!(
            "id: {id}\nevent: status\ndata: {{\"id\":\"{task}\",\"context_id\":\"{ctx}\",\"status\":{{\"state\":\"{state}\",\"message\":\"{message}\"}},\"final\":{fin}}}\n\n"
        )
    }

    fn completed(id: u64, task: &str, ctx: &str, response: &str) -> String {
        let data = serde_json::json!({
            "id": task, "context_id": ctx,
            "status": {"state": "completed", "message": "session ended", "response": response},
            "final": true
        });
        format!("id: {id}\nevent: status\ndata: {data}\n\n")
    }

    #[test]
    fn addresses_as_typed() {
        let a = parse_address("localhost:52222").unwrap();
        assert_eq!((a.host.as_str(), a.port), ("localhost", 52222));
        assert_eq!(a.typed, "localhost:52222");
        let a = parse_address("http://127.0.0.1:8080/").unwrap();
        assert_eq!((a.host.as_str(), a.port), ("127.0.0.1", 8080));
        assert_eq!(a.authority, "127.0.0.1:8080");
        assert_eq!(a.typed, "http://127.0.0.1:8080/");
        let a = parse_address("HTTP://[::1]:9").unwrap();
        assert_eq!(
            (a.host.as_str(), a.port, a.authority.as_str()),
            ("::1", 9, "[::1]:9")
        );
        for bad in [
            "localhost",
            "localhost:",
            ":80",
            "localhost:0",
            "localhost:70000",
            "https://localhost:1",
            "http://localhost:1/path",
            "::1:80",
        ] {
            assert!(parse_address(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn frames_split_anywhere_still_parse() {
        let wire = "event: connection-ack\ndata: {\"role\":\"observer\"}\n\n:heartbeat\n\nid: 7\nevent: text\ndata: {\"text\":\"hé\"}\n\n";
        let whole = events(wire);
        assert_eq!(whole.len(), 2);
        assert_eq!(whole[1].id, Some(7));
        assert_eq!(whole[1].data, "{\"text\":\"hé\"}");
        for split in 0..wire.len() {
            let mut reader = FrameReader::default();
            let mut got = reader.feed(&wire.as_bytes()[..split]);
            got.extend(reader.feed(&wire.as_bytes()[split..]));
            assert_eq!(got, whole, "split at {split}");
        }
        // An incomplete frame is not a frame.
        assert!(events("id: 3\nevent: status\ndata: {}\n").is_empty());
    }

    #[test]
    fn a_stateless_task_prints_as_the_table_says() {
        let mut wire = String::from(
            "event: connection-ack\ndata: {\"role\":\"observer\",\"conversation_mode\":\"stateless\"}\n\n",
        );
        wire += &status(0, "tsk_a", "ctx_a", "working", "inference turn 1", false);
        wire += "id: 1\nevent: thinking\ndata: {\"id\":\"tsk_a\",\"text\":\"hidden\",\"final\":false}\n\n";
        wire +=
            "id: 2\nevent: text\ndata: {\"id\":\"tsk_a\",\"text\":\"Let me \",\"final\":false}\n\n";
        wire += ":heartbeat\n\n";
        wire +=
            "id: 3\nevent: text\ndata: {\"id\":\"tsk_a\",\"text\":\"look.\",\"final\":false}\n\n";
        wire += "id: 4\nevent: text\ndata: {\"id\":\"tsk_a\",\"text\":\"\",\"final\":true}\n\n";
        wire += "id: 5\nevent: artifact\ndata: {\"id\":\"tsk_a\",\"artifact\":{\"tool_name\":\"bash\",\"content\":\"<untrusted-content source=tool:bash>\\n$ echo hi\\nExit code: 0\\nStdout:\\nhi\\n\\nStderr:\\n\\n</untrusted-content>\",\"fence_source\":\"tool:bash\",\"tool_call_id\":\"t1\",\"is_error\":false,\"duration_ms\":12,\"exit_code\":0,\"truncated\":false,\"future_key\":1}}\n\n";
        wire += "id: 6\nevent: future-frame\ndata: {\"x\":1}\n\n";
        wire += &status(7, "tsk_a", "ctx_a", "working", "inference turn 2", false);
        wire += "id: 8\nevent: text\ndata: {\"id\":\"tsk_a\",\"text\":\"Done\",\"final\":true}\n\n";
        wire += &completed(9, "tsk_a", "ctx_a", "Done");
        let (out, err, flow, last) = print(&wire);
        assert_eq!(
            out,
            "[working]  inference turn 1\nLet me look.\n[artifact] tool: bash [ok, exit 0, 12ms] | $ echo hi\n  Exit code: 0\n  Stdout:\n  hi\n\n  Stderr:\n[working]  inference turn 2\n[completed]\n  Done\n\n"
        );
        assert_eq!(err, "");
        assert_eq!(flow, Flow::Continue);
        assert_eq!(last, Some(9));
    }

    #[test]
    fn artifact_brackets_show_only_what_is_known() {
        let frame = |a: &str| {
            format!("id: 1\nevent: artifact\ndata: {{\"id\":\"t\",\"artifact\":{a}}}\n\n")
        };
        let (out, ..) = print(&frame(
            "{\"tool_name\":\"no-such-tool\",\"content\":\"tool 'no-such-tool' is not declared in manifest allowlist\",\"fence_source\":null,\"tool_call_id\":\"t3\",\"is_error\":true,\"duration_ms\":0,\"exit_code\":null,\"truncated\":false}",
        ));
        assert_eq!(
            out,
            "[artifact] tool: no-such-tool [error, 0ms] | tool 'no-such-tool' is not declared in manifest allowlist\n"
        );
        let (out, ..) = print(&frame(
            "{\"tool_name\":\"my-hook\",\"content\":\"{\\\"reviewed\\\":true}\",\"fence_source\":null,\"tool_call_id\":null,\"is_error\":false,\"duration_ms\":null,\"exit_code\":null,\"truncated\":false}",
        ));
        assert_eq!(out, "[artifact] tool: my-hook [ok] | {\"reviewed\":true}\n");
        let (out, ..) = print(&frame(
            "{\"tool_name\":\"big\",\"content\":\"<untrusted-content source=tool:big>\\n\\n</untrusted-content>\",\"fence_source\":\"tool:big\",\"is_error\":false,\"duration_ms\":3,\"exit_code\":2,\"truncated\":true}",
        ));
        assert_eq!(out, "[artifact] tool: big [ok, exit 2, 3ms, truncated]\n");
        let (out, ..) = print(&frame("{\"tool_name\":\"bare\",\"content\":\"x\\ny\"}"));
        assert_eq!(out, "[artifact] tool: bare | x\n  y\n");
    }

    #[test]
    fn other_final_states_print_the_label_alone() {
        let mut wire = status(2, "tsk_a", "ctx_a", "failed", "max_turns exceeded", true);
        wire += &status(1, "tsk_b", "ctx_b", "canceled", "task canceled", true);
        let (out, ..) = print(&wire);
        assert_eq!(out, "[failed]\n[canceled]\n");
    }

    #[test]
    fn threaded_labels_count_turns_per_context() {
        let ctx = "ctx_0199c4e2f1b7712a9d3e4f50617283a1";
        let other = "ctx_0aaabbbbccccdddd0000111122223333";
        let mut wire = String::from(
            "event: connection-ack\ndata: {\"role\":\"observer\",\"conversation_mode\":\"threaded\"}\n\n",
        );
        wire += &status(0, "tsk_1", ctx, "working", "inference turn 1", false);
        wire += &completed(1, "tsk_1", ctx, "first");
        wire += &status(0, "tsk_2", other, "working", "inference turn 1", false);
        wire += &status(1, "tsk_2", other, "failed", "session ended", true);
        wire += &status(0, "tsk_3", ctx, "working", "inference turn 1", false);
        // The input-wait frames carry no context id: the task's is remembered.
        wire += "id: 9223372036854775807\nevent: status\ndata: {\"id\":\"tsk_3\",\"status\":{\"state\":\"input-required\",\"message\":\"Which file?\"},\"final\":false}\n\n";
        wire += "id: 9223372036854775808\nevent: status\ndata: {\"id\":\"tsk_3\",\"status\":{\"state\":\"failed\",\"message\":\"input-timeout\"},\"final\":true}\n\n";
        wire += &completed(2, "tsk_3", ctx, "second");
        let (out, ..) = print(&wire);
        assert_eq!(
            out,
            "[ctx_0199c4e2... / turn 1 / working]  inference turn 1\n\
             [ctx_0199c4e2... / turn 1 / completed]\n  first\n\n\
             [ctx_0aaabbbb... / turn 1 / working]  inference turn 1\n\
             [ctx_0aaabbbb... / turn 1 / failed]\n\
             [ctx_0199c4e2... / turn 2 / working]  inference turn 1\n\
             [ctx_0199c4e2... / turn 2 / input-required]  Which file?\n\
             [ctx_0199c4e2... / turn 2 / failed]\n\
             [ctx_0199c4e2... / turn 2 / completed]\n  second\n\n"
        );
        assert_eq!(short_context("my-conversation"), "my-conve...");
        assert_eq!(short_context("short"), "short");
    }

    #[test]
    fn gap_and_lagged_warn_on_stderr() {
        let mut wire = String::from("event: gap\ndata: {\"first_available_id\":37}\n\n");
        wire += "id: 40\nevent: text\ndata: {\"id\":\"t\",\"text\":\"abc\",\"final\":false}\n\n";
        wire += "event: lagged\ndata: {\"missed\":5}\n\n";
        wire += &status(41, "t", "c", "working", "inference turn 3", false);
        let (out, err, flow, last) = print(&wire);
        assert_eq!(out, "abc\n[working]  inference turn 3\n");
        assert_eq!(
            err,
            "[murmur] warning: buffer overflow — some earlier events were lost (first available id: 37)\n\
             [murmur] warning: this watch fell behind and missed 5 frames\n"
        );
        assert_eq!(flow, Flow::Continue);
        assert_eq!(last, Some(41));
    }

    #[test]
    fn capsule_closed_ends_the_watch() {
        let mut wire = status(3, "t", "c", "working", "inference turn 1", false);
        wire += "event: capsule-closed\ndata: {}\n\n";
        wire += &status(4, "t", "c", "working", "never printed", false);
        let (out, err, flow, last) = print(&wire);
        assert_eq!(out, "[working]  inference turn 1\n");
        assert_eq!(err, "[murmur] capsule closed\n");
        assert_eq!(flow, Flow::CapsuleClosed);
        assert_eq!(last, Some(3));
    }

    struct ClosedPipe;

    impl Write for ClosedPipe {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_stdout_ends_the_watch_quietly() {
        let mut printer = Printer::new(ClosedPipe, Vec::new());
        let event = &events(&status(0, "t", "c", "working", "inference turn 1", false))[0];
        assert_eq!(printer.frame(event).unwrap(), Flow::StdoutClosed);
    }

    #[test]
    fn lost_connection_messages() {
        assert_eq!(
            lost("localhost:1", Some(12))
                .to_string()
                .lines()
                .next()
                .unwrap(),
            "error[E-IO-003]: connection to localhost:1 lost after event id 12 — the capsule may still be running; run mur watch again to reattach"
        );
        assert_eq!(
            lost("localhost:1", None)
                .to_string()
                .lines()
                .next()
                .unwrap(),
            "error[E-IO-003]: connection to localhost:1 lost before any event — the capsule may still be running; run mur watch again to reattach"
        );
    }

    #[test]
    fn responses_wrap_at_78_columns() {
        let text = "word ".repeat(40);
        let lines = wrap(&text, 78);
        assert!(lines.iter().all(|l| l.chars().count() <= 78), "{lines:?}");
        assert_eq!(lines.join(" ").split_whitespace().count(), 40);
        assert_eq!(lines[0].chars().count(), 74);
        assert_eq!(
            wrap("a\n\n  indented line\n\n", 78),
            vec!["a", "", "  indented line"]
        );
        let long = "x".repeat(100);
        assert_eq!(
            wrap(&format!("a {long} b"), 78),
            vec!["a".to_string(), long, "b".into()]
        );
        assert_eq!(wrap("", 78), Vec::<String>::new());
    }
}
