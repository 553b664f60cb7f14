//! `mur watch`: attach to a capsule's event stream and print it until the capsule closes,
//! the connection is lost or nobody reads stdout any more.

use std::io;
use std::process::ExitCode;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::http::{
    HeadError, auth_header, bearer, connect, read_head, request, token_for_address, unauthorized,
};
use super::printer::{Flow, Printer};
use super::session;
use crate::address::{Address, parse_address};
use crate::cli::{Target, WatchArgs};
use crate::error::Error;
use crate::sse::FrameReader;

/// The hint for an address that answered, but not as a capsule's event stream should.
const CHECK_ADDRESS: &str = "check the address mur run printed (murmur: url ...)";
const WATCH_BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"stream/watch","params":{}}"#;

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
        .hint("check the address mur run printed (murmur: url ...) or mur ps; the capsule may have exited")
}

/// The address to dial, the label messages name it by (the session id when a session
/// was named, else the address as typed) and the token to present.
fn resolve(target: Target, flag: Option<&str>) -> Result<(Address, String, Option<String>), Error> {
    match target {
        Target::Address(address) => {
            let label = address.typed.clone();
            Ok((address, label, token_for_address(flag)))
        }
        Target::Session(selector) => {
            let entry = session::resolve(&selector)?;
            let address = parse_address(&entry.address).map_err(|why| {
                Error::new(
                    "E-IO-003",
                    format!(
                        "the registry entry of {} has no usable address ({}): {why}",
                        entry.session_id, entry.address
                    ),
                )
            })?;
            let token = session::token_for(flag, &entry);
            Ok((address, entry.session_id, token))
        }
    }
}

/// Attaches to the capsule `args.target` names and prints its event stream from the start.
pub async fn watch(args: WatchArgs) -> Result<ExitCode, Error> {
    let (address, label, token) = resolve(args.target, args.token.as_deref())?;
    let label = label.as_str();
    let mut socket = connect(&address)
        .await
        .map_err(|e| connect_failed(label, &e))?;
    let auth = bearer(token.as_deref());
    let mut headers = vec![("last-event-id", "0")];
    headers.extend(auth_header(auth.as_deref()));
    let sent = socket
        .write_all(&request(&address, &headers, WATCH_BODY))
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
            .hint(CHECK_ADDRESS));
        }
    };
    if head.code == 401 {
        return Err(unauthorized(label, &address, token.as_deref()));
    }
    if head.code != 200 {
        return Err(Error::new(
            "E-IO-003",
            format!("capsule returned non-200 response: {}", head.status_line),
        )
        .hint(CHECK_ADDRESS));
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
