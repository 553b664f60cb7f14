//! No orphans: mur adopts every process its shell commands leave behind and kills
//! them when the session ends.
//!
//! A command's process group is killed when it times out or is abandoned, but a process
//! that left the group (`setsid`) or outlived a command that ended normally
//! (`sleep 300 > /dev/null &`) would otherwise be re-parented to init and live on. As a
//! child subreaper, mur becomes the parent of every such orphan, so at session end it
//! finds them all by walking the parent links in `/proc` from its own pid.
//!
//! A command's background children keep running while the session lives (a model may
//! start a server in one turn and use it in the next); they die with the session. A mur
//! killed outright (SIGKILL) cannot do this: its leftovers go to init as before.
//!
//! Reaping never takes an exit status tokio waits for: the commands mur spawns lead
//! their own process group in mur's session, and those are left to tokio.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// How many rounds of killing catch processes forked while the previous round ran.
const KILL_ROUNDS: usize = 8;
/// How long the session end waits for killed processes to become reapable.
const REAP_WAIT: Duration = Duration::from_secs(2);

/// Makes mur the parent of every orphan among its descendants. Without it (an old
/// kernel), leftovers re-parent to init and survive, as they did before.
pub fn adopt_orphans() -> Result<(), String> {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes a plain integer and touches no memory of ours.
    let done = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if done == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().to_string())
    }
}

/// One process as `/proc/<pid>/stat` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Proc {
    pid: i32,
    command: String,
    state: char,
    ppid: i32,
    pgrp: i32,
    session: i32,
}

/// `pid (comm) state ppid pgrp session ...`; `comm` may hold spaces and parentheses,
/// so it ends at the last `)`.
fn parse_stat(text: &str) -> Option<Proc> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let command = text.get(open + 1..close)?.to_string();
    let mut rest = text.get(close + 1..)?.split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    let pgrp = rest.next()?.parse().ok()?;
    let session = rest.next()?.parse().ok()?;
    Some(Proc {
        pid,
        command,
        state,
        ppid,
        pgrp,
        session,
    })
}

fn processes() -> Vec<Proc> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|text| parse_stat(&text))
        .collect()
}

/// Every process below `root`, by parent links.
fn descendants(all: &[Proc], root: i32) -> Vec<Proc> {
    let mut children: HashMap<i32, Vec<&Proc>> = HashMap::new();
    for proc in all {
        children.entry(proc.ppid).or_default().push(proc);
    }
    let mut found = Vec::new();
    let mut seen = HashSet::new();
    let mut next = vec![root];
    while let Some(parent) = next.pop() {
        for child in children.get(&parent).into_iter().flatten() {
            if seen.insert(child.pid) {
                found.push((*child).clone());
                next.push(child.pid);
            }
        }
    }
    found
}

/// Ours to reap: a dead child that is not a command tokio spawned and waits for. Those
/// lead their own group in mur's session (`process_group(0)`), or are still in mur's
/// group between fork and exec.
fn reapable(proc: &Proc, me: &Proc) -> bool {
    let spawned = proc.pgrp == proc.pid && proc.session == me.session;
    let forking = proc.pgrp == me.pgrp;
    proc.ppid == me.pid && proc.state == 'Z' && !spawned && !forking
}

/// Reaps the orphans that died while the session runs, so adopted zombies do not pile
/// up; runs on every SIGCHLD until the session ends.
pub async fn reap_while_running() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut children) = signal(SignalKind::child()) else {
        return;
    };
    while children.recv().await.is_some() {
        reap();
    }
}

/// Reaps every reapable child; returns how many.
fn reap() -> usize {
    let all = processes();
    let me = std::process::id() as i32;
    let Some(myself) = all.iter().find(|p| p.pid == me) else {
        return 0;
    };
    let mut reaped = 0;
    for proc in all.iter().filter(|p| reapable(p, myself)) {
        let mut status = 0;
        // SAFETY: waitpid on one named pid, with WNOHANG; `status` is a local int.
        if unsafe { libc::waitpid(proc.pid, &mut status, libc::WNOHANG) } == proc.pid {
            reaped += 1;
        }
    }
    reaped
}

/// What the session end found still running below mur.
pub struct Killed {
    /// `pid (command)` of each process killed.
    pub processes: Vec<String>,
}

/// At session end: SIGKILLs every process still below mur, then reaps what it adopted.
/// Rounds repeat while the previous one found something, to catch a process forked
/// meanwhile.
pub fn kill_leftovers() -> Killed {
    let me = std::process::id() as i32;
    let mut killed = Vec::new();
    let mut seen = HashSet::new();
    for _ in 0..KILL_ROUNDS {
        let live: Vec<Proc> = descendants(&processes(), me)
            .into_iter()
            .filter(|p| p.state != 'Z' && p.state != 'X')
            .collect();
        if live.is_empty() {
            break;
        }
        for proc in live {
            // SAFETY: kill takes plain integers; a pid already gone yields ESRCH.
            unsafe {
                libc::kill(proc.pid, libc::SIGKILL);
            }
            if seen.insert(proc.pid) {
                killed.push(format!("{} ({})", proc.pid, proc.command));
            }
        }
    }
    let deadline = Instant::now() + REAP_WAIT;
    while !killed.is_empty() && Instant::now() < deadline {
        reap();
        let left = descendants(&processes(), me)
            .iter()
            .filter(|p| seen.contains(&p.pid) || p.ppid == me && p.state == 'Z')
            .count();
        if left == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Killed { processes: killed }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc(pid: i32, ppid: i32, state: char, pgrp: i32, session: i32) -> Proc {
        Proc {
            pid,
            command: "x".into(),
            state,
            ppid,
            pgrp,
            session,
        }
    }

    #[test]
    fn stat_lines_parse_with_spaces_and_parentheses_in_the_command() {
        let text = "4242 (we (ird) name) S 17 4242 9 0 -1 4194560 0 0";
        assert_eq!(
            parse_stat(text),
            Some(Proc {
                pid: 4242,
                command: "we (ird) name".into(),
                state: 'S',
                ppid: 17,
                pgrp: 4242,
                session: 9,
            })
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn descendants_follow_parent_links_and_nothing_else() {
        let all = vec![
            proc(10, 1, 'S', 10, 10),
            proc(11, 10, 'S', 11, 10),
            proc(12, 11, 'S', 11, 10),
            proc(13, 10, 'Z', 13, 13),
            proc(20, 1, 'S', 20, 20),
            proc(21, 20, 'S', 20, 20),
        ];
        let mut pids: Vec<i32> = descendants(&all, 10).iter().map(|p| p.pid).collect();
        pids.sort_unstable();
        assert_eq!(pids, vec![11, 12, 13]);
    }

    #[test]
    fn spawned_commands_are_left_to_tokio_and_adopted_zombies_are_reaped() {
        let me = proc(10, 1, 'S', 5, 5);
        // A command tokio spawned: its own group, mur's session.
        assert!(!reapable(&proc(11, 10, 'Z', 11, 5), &me));
        // Still in mur's group: between fork and exec.
        assert!(!reapable(&proc(12, 10, 'Z', 5, 5), &me));
        // Adopted: a `sleep &` from a command's group, and a `setsid` one.
        assert!(reapable(&proc(13, 10, 'Z', 11, 5), &me));
        assert!(reapable(&proc(14, 10, 'Z', 14, 14), &me));
        // Alive, or not our child.
        assert!(!reapable(&proc(15, 10, 'S', 11, 5), &me));
        assert!(!reapable(&proc(16, 13, 'Z', 11, 5), &me));
    }
}
