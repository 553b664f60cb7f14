//! `mur ps`: the capsules `mur run` is running on this machine, from the running-session
//! registry, newest first. The members of a formation (`mur run --roster`) are listed
//! under it rather than among the capsules run alone, whose table is unchanged.

use std::io::{self, Write};
use std::process::ExitCode;

use serde_json::json;

use crate::cli::PsArgs;
use crate::error::Error;
use crate::escape;
use crate::running::{self, Entry, Membership};

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
    let (alone, formations) = grouped(listing.live);
    let text = if args.json {
        let sessions: Vec<_> = alone.iter().map(|e| session_json(e, now)).collect();
        let mut document = json!({ "sessions": sessions });
        // Only when there is one, so a listing without formations reads as it always did.
        if !formations.is_empty() {
            document["formations"] = formations.iter().map(|f| f.json(now)).collect();
        }
        format!("{}\n", escape::json(&document.to_string()))
    } else if formations.is_empty() {
        table(&alone, now)
    } else {
        let mut blocks: Vec<String> = Vec::new();
        if !alone.is_empty() {
            blocks.push(table(&alone, now));
        }
        blocks.extend(formations.iter().map(|f| f.block(now)));
        blocks.join("\n")
    };
    let mut out = io::stdout();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
    Ok(ExitCode::SUCCESS)
}

fn session_json(e: &Entry, now: u64) -> serde_json::Value {
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
}

/// The members of one formation, the entry member first, then the others in the order
/// they started (the roster's).
struct Formation {
    id: String,
    members: Vec<(Membership, Entry)>,
}

/// The capsules run alone, newest first, and the formations, newest first by their
/// newest member.
fn grouped(live: Vec<Entry>) -> (Vec<Entry>, Vec<Formation>) {
    let mut alone = Vec::new();
    let mut formations: Vec<Formation> = Vec::new();
    for entry in live {
        let Some(membership) = entry.formation.clone() else {
            alone.push(entry);
            continue;
        };
        match formations.iter_mut().find(|f| f.id == membership.id) {
            Some(formation) => formation.members.push((membership, entry)),
            None => formations.push(Formation {
                id: membership.id.clone(),
                members: vec![(membership, entry)],
            }),
        }
    }
    for formation in &mut formations {
        formation.members.sort_by(|(a, x), (b, y)| {
            (!a.entry, x.started_at, &x.session_id).cmp(&(!b.entry, y.started_at, &y.session_id))
        });
    }
    (alone, formations)
}

impl Formation {
    fn lead(&self) -> &(Membership, Entry) {
        // Never empty: a formation is made with its first member.
        &self.members[0]
    }

    /// When its first member started.
    fn started_at(&self) -> u64 {
        self.members
            .iter()
            .map(|(_, e)| e.started_at)
            .min()
            .unwrap_or_default()
    }

    fn json(&self, now: u64) -> serde_json::Value {
        let (membership, entry) = self.lead();
        let members: Vec<_> = self
            .members
            .iter()
            .map(|(m, e)| {
                let mut member = session_json(e, now);
                member["member"] = json!(m.member);
                member["entry"] = json!(m.entry);
                member
            })
            .collect();
        json!({
            "id": self.id,
            "pid": entry.pid,
            "started_at": self.started_at(),
            "uptime_secs": now.saturating_sub(self.started_at()) / 1000,
            "roster": membership.roster,
            "members": members,
        })
    }

    /// `formation frm_…` with its process, uptime and roster, then one row per member.
    fn block(&self, now: u64) -> String {
        let (membership, entry) = self.lead();
        let mut text = format!(
            "FORMATION {}  PID {}  UPTIME {}  ROSTER {}\n",
            escape::line(&self.id),
            entry.pid,
            uptime(now.saturating_sub(self.started_at()) / 1000),
            escape::line(&membership.roster.display().to_string())
        );
        let names: Vec<String> = self
            .members
            .iter()
            .map(|(m, _)| {
                let name = escape::line(&m.member).into_owned();
                if m.entry {
                    format!("{name} (entry)")
                } else {
                    name
                }
            })
            .collect();
        let width = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
        let width = width.max("MEMBER".len());
        text.push_str(&format!(
            "  {:<width$}  {:<SESSION_WIDTH$}  {:<URL_WIDTH$}  {:<CAPSULE_WIDTH$}  WORKDIR\n",
            "MEMBER", "SESSION", "URL", "CAPSULE"
        ));
        for (name, (_, e)) in names.iter().zip(&self.members) {
            text.push_str(&format!(
                "  {:<width$}  {:<SESSION_WIDTH$}  {:<URL_WIDTH$}  {:<CAPSULE_WIDTH$}  {}\n",
                name,
                escape::line(&e.session_id),
                escape::line(&e.url),
                escape::line(&capsule(e)),
                escape::line(&e.workdir.display().to_string())
            ));
        }
        text
    }
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

    fn entry(session: &str, started_at: u64, member: Option<(&str, bool)>) -> Entry {
        Entry {
            session_id: session.into(),
            pid: 42,
            start_time: 1,
            started_at,
            address: "http://127.0.0.1:1".into(),
            url: "localhost:1".into(),
            workdir: format!("/w/{session}").into(),
            records_dir: "/r".into(),
            capsule_name: "c".into(),
            capsule_version: "1.0.0".into(),
            door_token: None,
            formation: member.map(|(name, entry)| Membership {
                id: "frm_1".into(),
                member: name.into(),
                entry,
                roster: "/f/roster.yaml".into(),
            }),
        }
    }

    #[test]
    fn members_are_grouped_under_their_formation_the_entry_first() {
        let live = vec![
            entry("ses_lead", 3, Some(("lead", true))),
            entry("ses_alone", 2, None),
            entry("ses_b", 2, Some(("b", false))),
            entry("ses_a", 1, Some(("a", false))),
        ];
        let (alone, formations) = grouped(live);
        assert_eq!(alone.len(), 1);
        assert_eq!(formations.len(), 1);
        let block = formations[0].block(61_000);
        let mut lines = block.lines();
        assert_eq!(
            lines.next(),
            Some("FORMATION frm_1  PID 42  UPTIME 00:01:00  ROSTER /f/roster.yaml")
        );
        let rows: Vec<Vec<&str>> = lines.map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(rows[0], ["MEMBER", "SESSION", "URL", "CAPSULE", "WORKDIR"]);
        assert_eq!(rows[1][..3], ["lead", "(entry)", "ses_lead"]);
        assert_eq!(rows[2][..2], ["a", "ses_a"]);
        assert_eq!(rows[3][..2], ["b", "ses_b"]);
    }

    #[test]
    fn uptime_is_a_clock_with_days_in_front() {
        assert_eq!(uptime(0), "00:00:00");
        assert_eq!(uptime(3_661), "01:01:01");
        assert_eq!(uptime(86_400 + 59), "1d 00:00:59");
    }
}
