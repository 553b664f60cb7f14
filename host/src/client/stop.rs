//! `mur stop`: ask a capsule to end its session, then wait until its address stops
//! answering.

use std::io::{self, Write};
use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep, timeout};

use super::http::{HeadError, auth_header, bearer, connect, read_head, request, unauthorized};
use crate::address::Address;
use crate::cli::StopArgs;
use crate::error::Error;

/// How long `mur stop` waits for the capsule to answer the stop request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// How often `mur stop` checks whether the address still answers, and how long one
/// check may take.
const POLL_EVERY: Duration = Duration::from_millis(50);
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// The hint for an address whose answer is not a capsule's answer to `murmur/stop`.
const NOT_A_CAPSULE: &str = "is this a mur capsule's address? it must answer murmur/stop";
/// A call every capsule answers (with "Method not found") while it serves.
const PROBE_BODY: &str = r#"{"jsonrpc":"2.0","id":0,"method":"murmur/still-there"}"#;
const STOP_BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"murmur/stop","params":{}}"#;

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
async fn ask_to_stop(address: &Address, token: Option<&str>) -> Result<String, Error> {
    let auth = bearer(token);
    let headers = auth_header(auth.as_deref());
    let mut socket = connect(address)
        .await
        .map_err(|e| no_capsule(address, &e))?;
    let exchange = async {
        socket
            .write_all(&request(address, &headers, STOP_BODY))
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
    if head.code == 401 {
        return Err(unauthorized(&address.typed, token));
    }
    if head.code != 200 {
        return Err(
            not_ended(address, &format!("it answered {}", head.status_line)).hint(NOT_A_CAPSULE),
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
    Err(not_ended(address, &why).hint(NOT_A_CAPSULE))
}

/// Whether the capsule still serves: under `mur run` its port still accepts (the
/// process has not exited); a capsule `mur serve` hosts has ended its session once
/// its address stops answering a call with 200.
async fn still_serves(address: &Address, token: Option<&str>) -> bool {
    let probe = async {
        let mut socket = TcpStream::connect((address.host.as_str(), address.port)).await?;
        if address.path == "/" {
            return Ok(true);
        }
        let auth = bearer(token);
        let headers = auth_header(auth.as_deref());
        socket
            .write_all(&request(address, &headers, PROBE_BODY))
            .await?;
        match read_head(&mut socket).await {
            Ok((head, _)) => Ok(head.code == 200),
            Err(_) => Ok(false),
        }
    };
    match timeout(PROBE_TIMEOUT, probe).await {
        Ok(Ok(serves)) => serves,
        Ok(Err::<_, io::Error>(_)) => false,
        // No answer within the probe's time: count it as still there, and look again.
        Err(_) => true,
    }
}

/// Asks the capsule at `args.address` to stop, then waits up to `args.timeout` seconds for
/// its address to stop answering.
pub async fn stop(args: StopArgs) -> Result<ExitCode, Error> {
    let address = args.address;
    let token = args.token.as_deref();
    let session = ask_to_stop(&address, token).await?;
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
        if !still_serves(&address, token).await {
            break;
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
