//! `mur ps`: the capsules `mur run` is running on this machine, from the running-session
//! registry, newest first.

use std::io::{self, Write};
use std::process::ExitCode;

use serde_json::json;

use crate::cli::PsArgs;
use crate::error::Error;
use crate::escape;
use crate::running::{self, Entry};

/// `ses_` and 32 hex characters: never cut, so it can be copied into the next command.
const SESSION_WIDTH: usize = 36;
const PID_WIDTH: usize = 8;
/// `localhost:65535`.
const URL_WIDTH: usize = 16;
/// `HH:MM:SS`, with a `Nd ` prefix past a day.
const UPTIME_WIDTH: usize = 9;
const CAPSULE_WIDTH: usize = 24;

/// Lists the live entries; those whose process is gone are removed, each named on stderr.
pub fn ps(args: &PsArgs) -> Result<ExitCode, Error> {
    let listing = running::list()?;
    for (entry, state) in &listing.pruned {
        eprintln!(
            "pruned: {} — {}",
            escape::line(&entry.session_id),
            state.why_pruned()
        );
    }
    let now = running::now_ms();
    let text = if args.json {
        let sessions: Vec<_> = listing
            .live
            .iter()
            .map(|e| {
                json!({
                    "session_id": e.session_id,
                    "pid": e.pid,
                    "url": e.url,
                    "address": e.address,
                    "started_at": e.started_at,
                    "uptime_secs": now.saturating_sub(e.started_at) / 1000,
                    "capsule": capsule(e),
                    "name": e.capsule_name,
                    "version": e.capsule_version,
                    "workdir": e.workdir,
                    "records_dir": e.records_dir,
                })
            })
            .collect();
        format!(
            "{}\n",
            escape::json(&json!({ "sessions": sessions }).to_string())
        )
    } else {
        table(&listing.live, now)
    };
    let mut out = io::stdout();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
    Ok(ExitCode::SUCCESS)
}

fn capsule(e: &Entry) -> String {
    format!("{}@{}", e.capsule_name, e.capsule_version)
}

/// A registry entry is a file anyone who can write the registry may have made: its
/// fields are escaped, each kept to its row.
fn table(live: &[Entry], now_ms: u64) -> String {
    if live.is_empty() {
        return "no running capsules (mur run lists each session it runs here)\n".to_string();
    }
    let mut text = format!(
        "{:<SESSION_WIDTH$}  {:<PID_WIDTH$}  {:<URL_WIDTH$}  {:<UPTIME_WIDTH$}  {:<CAPSULE_WIDTH$}  WORKDIR\n",
        "SESSION", "PID", "URL", "UPTIME", "CAPSULE"
    );
    for e in live {
        text.push_str(&format!(
            "{:<SESSION_WIDTH$}  {:<PID_WIDTH$}  {:<URL_WIDTH$}  {:<UPTIME_WIDTH$}  {:<CAPSULE_WIDTH$}  {}\n",
            escape::line(&e.session_id),
            e.pid,
            escape::line(&e.url),
            uptime(now_ms.saturating_sub(e.started_at) / 1000),
            escape::line(&capsule(e)),
            escape::line(&e.workdir.display().to_string())
        ));
    }
    text
}

/// `HH:MM:SS`, with a `Nd ` prefix once the session has been up longer than a day.
fn uptime(seconds: u64) -> String {
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    let clock = format!(
        "{:02}:{:02}:{:02}",
        rest / 3600,
        (rest % 3600) / 60,
        rest % 60
    );
    if days == 0 {
        clock
    } else {
        format!("{days}d {clock}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uptime_is_a_clock_with_days_in_front() {
        assert_eq!(uptime(0), "00:00:00");
        assert_eq!(uptime(3_661), "01:01:01");
        assert_eq!(uptime(86_400 + 59), "1d 00:00:59");
    }
}
