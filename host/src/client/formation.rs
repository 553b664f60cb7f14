//! `mur stop` for formations (`mur run --roster`): one process runs every member.
//!
//! `mur stop frm_…` asks each member to end its session (the entry member last, so it
//! is not left calling a member already gone), then makes sure the process has ended,
//! signalling it once. Stopping a member other than the entry by its session ends that
//! member only: its process is never signalled, since that would end the others too.

use std::io::{self, Write};
use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;
use tokio::time::{Instant, sleep};

use super::session;
use super::stop::{
    POLL_EVERY, SESSION_ANSWER_TIMEOUT, SETTLE, ask_to_stop, end_process, still_serves,
    wait_for_exit,
};
use crate::address::parse_address;
use crate::error::Error;
use crate::escape;
use crate::running::{self, Entry, Membership};

/// Asks the capsule `entry` names to stop: its answer, or why it could not be asked.
async fn ask(entry: &Entry, flag: Option<&str>) -> Result<Value, String> {
    let token = session::token_for(flag, entry);
    match parse_address(&entry.address) {
        Ok(address) => ask_to_stop(&address, token.as_deref(), SESSION_ANSWER_TIMEOUT)
            .await
            .map_err(|e| e.message),
        Err(why) => Err(format!(
            "its entry's address {} is not one: {why}",
            entry.address
        )),
    }
}

/// The live members of formation `id`, the entry member last.
fn members_of(id: &str) -> Result<Vec<(Membership, Entry)>, Error> {
    let listing = running::list()?;
    let mut members: Vec<(Membership, Entry)> = listing
        .live
        .into_iter()
        .filter_map(|e| {
            let m = e.formation.clone().filter(|m| m.id == id)?;
            Some((m, e))
        })
        .collect();
    if members.is_empty() {
        let gone = listing
            .pruned
            .iter()
            .find(|(e, _)| e.formation.as_ref().is_some_and(|m| m.id == id));
        let message = match gone {
            Some((_, state)) => format!(
                "{id} is not running: {}; its members' entries were removed",
                state.why_pruned()
            ),
            None => format!("no running formation is {id}"),
        };
        return Err(Error::new("E-RUN-022", message)
            .hint("mur ps lists the formations running on this machine, each with its frm_ id"));
    }
    members.sort_by_key(|(m, e)| (m.entry, e.started_at));
    Ok(members)
}

/// `mur stop frm_…`: every member asked, the process signalled once if it has not
/// exited by itself.
pub async fn stop_formation(
    id: &str,
    token: Option<&str>,
    grace: Duration,
) -> Result<ExitCode, Error> {
    let members = members_of(id)?;
    let mut asked = Vec::with_capacity(members.len());
    for (membership, entry) in &members {
        asked.push((membership, entry, ask(entry, token).await));
    }
    // The entry member is last, so its entry names the process for all of them.
    let Some((last, others)) = members.split_last() else {
        return Ok(ExitCode::SUCCESS);
    };
    let process = &last.1;
    if asked.last().is_some_and(|(_, _, answer)| answer.is_ok()) {
        wait_for_exit(process, SETTLE).await;
    }
    let signal = end_process(process, grace).await?;
    for (_, entry) in &members {
        running::prune(entry);
    }
    let mut out = io::stdout();
    let _ = writeln!(out, "stopped: {id}");
    // Listed as `mur ps` lists them: the entry member first.
    let shown = std::iter::once(last).chain(others);
    for (membership, entry) in shown {
        let _ = writeln!(out, "member:  {}", member_line(membership, entry));
    }
    let _ = writeln!(out, "signal:  {signal}");
    let mut unasked = Vec::new();
    for (membership, _, answer) in &asked {
        match answer {
            Ok(answer) => {
                for task in canceled(answer) {
                    let _ = writeln!(
                        out,
                        "canceled: {} ({})",
                        escape::line(&task),
                        escape::line(&membership.member)
                    );
                }
            }
            Err(why) => unasked.push(format!("{}: {why}", membership.member)),
        }
    }
    if unasked.is_empty() {
        let _ = writeln!(out, "residue: nothing else was left running");
    } else {
        let _ = writeln!(
            out,
            "residue: unknown — not every member could be asked: {}",
            escape::line(&unasked.join("; "))
        );
    }
    let _ = out.flush();
    Ok(ExitCode::SUCCESS)
}

/// `worker  ses_…  worker@1.0.0`, the entry member marked.
fn member_line(membership: &Membership, entry: &Entry) -> String {
    let name = escape::line(&membership.member);
    let marked = if membership.entry {
        format!("{name} (entry)")
    } else {
        name.into_owned()
    };
    format!(
        "{marked}  {}  {}@{}",
        entry.session_id,
        escape::line(&entry.capsule_name),
        escape::line(&entry.capsule_version)
    )
}

/// The task ids a capsule's answer to `murmur/stop` says it canceled.
pub fn canceled(answer: &Value) -> Vec<String> {
    answer["canceled"]
        .as_array()
        .map(|tasks| {
            tasks
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Ends one member other than the entry: asked, then watched until its address stops
/// answering. Its process runs the rest of the formation, so it is never signalled.
pub async fn stop_member(
    entry: &Entry,
    membership: &Membership,
    token: Option<&str>,
    grace: Duration,
) -> Result<ExitCode, Error> {
    let unendable = |why: String| {
        Error::new(
            "E-RUN-024",
            format!(
                "{} (member '{}' of formation {}) could not be ended: {why}",
                entry.session_id, membership.member, membership.id
            ),
        )
        .hint(format!(
            "its process runs the whole formation and is not signalled for one member; mur stop {} ends every member",
            membership.id
        ))
    };
    let answer = ask(entry, token).await.map_err(&unendable)?;
    let address = parse_address(&entry.address).map_err(&unendable)?;
    let deadline = Instant::now() + SETTLE + grace;
    let token = session::token_for(token, entry);
    while still_serves(&address, token.as_deref()).await {
        if Instant::now() >= deadline {
            return Err(unendable(format!(
                "it still answers {} s after it accepted the stop",
                (SETTLE + grace).as_secs()
            )));
        }
        sleep(POLL_EVERY).await;
    }
    running::prune(entry);
    let mut out = io::stdout();
    let _ = writeln!(out, "stopped: {}", entry.session_id);
    let _ = writeln!(
        out,
        "capsule: {}@{}",
        escape::line(&entry.capsule_name),
        escape::line(&entry.capsule_version)
    );
    let _ = writeln!(
        out,
        "member:  {} of formation {} (its other members keep running)",
        escape::line(&membership.member),
        membership.id
    );
    let _ = writeln!(
        out,
        "signal:  none — the process runs the formation's other members"
    );
    for task in canceled(&answer) {
        let _ = writeln!(out, "canceled: {}", escape::line(&task));
    }
    let _ = writeln!(out, "residue: nothing else was left running");
    let _ = out.flush();
    Ok(ExitCode::SUCCESS)
}

/// Once a formation's process has exited (its entry member's session ended, which ends
/// the rest): the other members' entries go with it, and the output says so.
pub fn ended_with_entry(entry: &Entry, out: &mut impl Write) {
    let Some(membership) = entry.formation.as_ref().filter(|m| m.entry) else {
        return;
    };
    if entry.state().is_running() {
        return;
    }
    // Listing prunes every entry whose process has exited: the other members' too.
    let _ = running::list();
    let _ = writeln!(
        out,
        "formation: {} ended with its entry member {}",
        membership.id,
        escape::line(&membership.member)
    );
}
