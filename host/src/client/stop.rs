//! `mur stop`: ask a capsule to end its session, then make sure it has ended.
//!
//! By address, the capsule is only asked, and its address watched until it stops
//! answering. By session, its registry entry names the process too: after asking,
//! `mur stop` escalates to SIGTERM and SIGKILL if it has not exited, and never signals a
//! pid whose start time is not the entry's. A formation (`frm_…`) and a formation's
//! member are stopped as [`super::formation`] says.

use std::io::{self, Write};
use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep, timeout};

use super::http::{
    HeadError, auth_header, bearer, connect, read_head, request, token_for_address, unauthorized,
};
use super::{formation, session};
use crate::address::{Address, parse_address};
use crate::cli::{StopArgs, Target};
use crate::error::Error;
use crate::escape;
use crate::running::{self, Entry, Signaled};

/// How long `mur stop ADDRESS` waits for the capsule to answer the stop request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// By session, a capsule that does not answer is signalled instead: a shorter wait.
pub(super) const SESSION_ANSWER_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a capsule that accepted the stop gets to wind down and exit by itself
/// before it is signalled.
pub(super) const SETTLE: Duration = Duration::from_secs(5);
/// How long SIGKILL gets to take effect.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// How often `mur stop` checks whether the address still answers, and how long one
/// check may take.
pub(super) const POLL_EVERY: Duration = Duration::from_millis(50);
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
        "give the address mur run printed (murmur: url ...), or name the session: mur ps lists them",
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
    .hint("the capsule may be wedged; mur stop SESSION (see mur ps) also signals its process")
}

fn not_ended(address: &Address, why: &str) -> Error {
    Error::new(
        "E-RUN-024",
        format!("{} could not be ended: {why}", address.typed),
    )
}

/// Sends `murmur/stop` and returns the capsule's answer: `{"stopped": SESSION,
/// "canceled": [TASK...]}`. `wait` bounds the answer.
pub(super) async fn ask_to_stop(
    address: &Address,
    token: Option<&str>,
    wait: Duration,
) -> Result<Value, Error> {
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
    let (head, body) = match timeout(wait, exchange).await {
        Err(_) => {
            return Err(silent(
                address,
                &format!("no answer within {} s", wait.as_secs()),
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
        return Err(unauthorized(&address.typed, address, token));
    }
    if head.code != 200 {
        return Err(
            not_ended(address, &format!("it answered {}", head.status_line)).hint(NOT_A_CAPSULE),
        );
    }
    let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if answer["result"]["stopped"].is_string() {
        return Ok(answer["result"].clone());
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
pub(super) async fn still_serves(address: &Address, token: Option<&str>) -> bool {
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

/// `mur stop`: by session or by address.
pub async fn stop(args: StopArgs) -> Result<ExitCode, Error> {
    match args.target {
        Target::Address(address) => {
            let token = token_for_address(args.token.as_deref());
            stop_address(address, token.as_deref(), args.timeout).await
        }
        Target::Session(selector) if selector.starts_with("frm_") => {
            let grace = Duration::from_secs(args.timeout);
            formation::stop_formation(&selector, args.token.as_deref(), grace).await
        }
        Target::Session(selector) => {
            let entry = session::resolve(&selector)?;
            let grace = Duration::from_secs(args.timeout);
            if let Some(membership) = entry.formation.as_ref().filter(|m| !m.entry) {
                let membership = membership.clone();
                return formation::stop_member(&entry, &membership, args.token.as_deref(), grace)
                    .await;
            }
            let token = session::token_for(args.token.as_deref(), &entry);
            stop_session(&entry, token.as_deref(), grace).await
        }
    }
}

/// Asks the capsule at `address` to stop, then waits up to `timeout` seconds for its
/// address to stop answering.
async fn stop_address(
    address: Address,
    token: Option<&str>,
    timeout: u64,
) -> Result<ExitCode, Error> {
    let answer = ask_to_stop(&address, token, ANSWER_TIMEOUT).await?;
    // Whatever answers at the address chose these words: escaped, each on its line.
    let session = answer["stopped"].as_str().unwrap_or_default();
    let mut out = io::stdout();
    let _ = writeln!(out, "stopped: {}", escape::line(session));
    let _ = out.flush();
    if timeout == 0 {
        return Ok(ExitCode::SUCCESS);
    }
    // The capsule answers first and then ends its session; its address stops
    // answering when the process is done serving.
    let deadline = Instant::now() + Duration::from_secs(timeout);
    loop {
        if !still_serves(&address, token).await {
            break;
        }
        if Instant::now() >= deadline {
            return Err(not_ended(
                &address,
                &format!("it still answers after {timeout} s"),
            )
            .hint("a task may be inside a long tool call; mur stop SESSION (see mur ps) also signals its process"));
        }
        sleep(POLL_EVERY).await;
    }
    let _ = writeln!(out, "residue: nothing else was left running");
    let _ = out.flush();
    Ok(ExitCode::SUCCESS)
}

/// Ends the session `entry` names: ask its capsule, then SIGTERM, wait `grace`, SIGKILL,
/// wait [`KILL_WAIT`]. Its entry is removed once the process is gone.
async fn stop_session(
    entry: &Entry,
    token: Option<&str>,
    grace: Duration,
) -> Result<ExitCode, Error> {
    // Asked first: only the capsule can say which tasks the stop canceled.
    let door = match parse_address(&entry.address) {
        Ok(address) => ask_to_stop(&address, token, SESSION_ANSWER_TIMEOUT)
            .await
            .map_err(|e| e.message),
        Err(why) => Err(format!(
            "its entry's address {} is not one: {why}",
            entry.address
        )),
    };
    // A capsule that accepted the stop winds down and exits by itself.
    if door.is_ok() {
        wait_for_exit(entry, SETTLE).await;
    }
    let signal = end_process(entry, grace).await?;
    running::prune(entry);
    let mut out = io::stdout();
    let _ = writeln!(out, "stopped: {}", entry.session_id);
    let _ = writeln!(
        out,
        "capsule: {}@{}",
        entry.capsule_name, entry.capsule_version
    );
    let _ = writeln!(out, "signal:  {signal}");
    match &door {
        Ok(answer) => {
            let canceled = answer["canceled"].as_array().cloned().unwrap_or_default();
            for task in canceled.iter().filter_map(Value::as_str) {
                let _ = writeln!(out, "canceled: {}", escape::line(task));
            }
            let _ = writeln!(out, "residue: nothing else was left running");
        }
        Err(why) => {
            let _ = writeln!(
                out,
                "residue: unknown — the capsule could not be asked: {}",
                escape::line(why)
            );
        }
    }
    formation::ended_with_entry(entry, &mut out);
    let _ = out.flush();
    Ok(ExitCode::SUCCESS)
}

/// SIGTERM, then SIGKILL once `grace` is out (at once when it is zero); what ended it.
pub(super) async fn end_process(entry: &Entry, grace: Duration) -> Result<&'static str, Error> {
    match running::signal(entry, libc::SIGTERM) {
        Signaled::AlreadyGone => return Ok("none — the process had already exited"),
        Signaled::Refused(why) => {
            return Err(unendable(
                entry,
                &format!("SIGTERM to pid {} was refused: {why}", entry.pid),
            ));
        }
        Signaled::Sent => {}
    }
    if wait_for_exit(entry, grace).await {
        return Ok("SIGTERM");
    }
    match running::signal(entry, libc::SIGKILL) {
        // It exited between the grace running out and the signal.
        Signaled::AlreadyGone => return Ok("SIGTERM"),
        Signaled::Refused(why) => {
            return Err(unendable(
                entry,
                &format!("SIGKILL to pid {} was refused: {why}", entry.pid),
            ));
        }
        Signaled::Sent => {}
    }
    if wait_for_exit(entry, KILL_WAIT).await {
        return Ok("SIGKILL");
    }
    Err(unendable(
        entry,
        &format!(
            "pid {} was still running {} s after SIGKILL",
            entry.pid,
            KILL_WAIT.as_secs()
        ),
    ))
}

/// Whether the process exits within `limit`.
pub(super) async fn wait_for_exit(entry: &Entry, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if !entry.state().is_running() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        sleep(POLL_EVERY.min(deadline - Instant::now())).await;
    }
}

fn unendable(entry: &Entry, why: &str) -> Error {
    Error::new(
        "E-RUN-024",
        format!("{} could not be ended: {why}", entry.session_id),
    )
    .hint("its entry is kept, so mur ps still lists it; the process may belong to another user")
}
