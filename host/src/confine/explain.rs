//! What a confined command can reach, said three ways: one line at launch, a record on
//! `session_start`, and the full account of `--explain-scope` (whose core MURMUR.md
//! gives the model, so it does not spend turns finding out).

use std::fmt::Write;

use serde_json::json;

use super::filesystem::{CONFIG_DIR, DEVICES_RO, DEVICES_RW, SYSTEM_DIRS};
use super::{Class, Jail, Network};

/// `shell: scoped (landlock abi 7 + seccomp), no network`.
pub fn launch_line(jail: &Jail) -> String {
    let mechanisms = match jail.class() {
        Class::Advisory => {
            return "shell: advisory (unconfined: commands run as the user who started mur, \
                    with its whole filesystem and network)"
                .to_string();
        }
        Class::Scoped => format!(
            "landlock abi {} + seccomp + pid namespace",
            jail.kernel().landlock_abi
        ),
        Class::Sealed => format!(
            "private root + landlock abi {} + seccomp + pid namespace",
            jail.kernel().landlock_abi
        ),
    };
    format!(
        "shell: {} ({mechanisms}), {}",
        jail.class().name(),
        network_phrase(jail)
    )
}

fn network_phrase(jail: &Jail) -> String {
    match (jail.network(), jail.proxy_port()) {
        (Network::Proxy, Some(port)) => {
            format!("network through the session proxy on 127.0.0.1:{port}")
        }
        _ => "no network".to_string(),
    }
}

/// `session_start.containment`.
pub fn record(jail: &Jail, declared: Class) -> serde_json::Value {
    let confined = jail.class() != Class::Advisory;
    let limits = jail.limits();
    json!({
        "declared": declared.name(),
        "achieved": jail.class().name(),
        "landlock_abi": confined.then_some(jail.kernel().landlock_abi),
        "seccomp": confined,
        "pid_namespace": confined,
        "mount_namespace": jail.class() == Class::Sealed,
        "network": match jail.network() {
            Network::None => "none",
            Network::Proxy => "proxy",
        },
        "workdir_exec": jail.workdir_exec(),
        "unix_sockets": confined && jail.unix_sockets(),
        "limits": {
            "memory_bytes": limits.memory_bytes,
            "cpu_seconds": limits.cpu_seconds,
            "file_bytes": limits.file_bytes,
            "open_files": limits.open_files,
            "processes": limits.processes,
            "commands": limits.commands,
        },
    })
}

/// What a command can and cannot reach, as bullet lines addressed to `who`
/// ("a command" for the operator, "your command" for the model).
pub fn reach(jail: &Jail, allowed_hosts: &[String]) -> Vec<String> {
    if jail.class() == Class::Advisory {
        return vec![
            "Commands are NOT confined (containment: advisory): they run as the user who \
             started mur, with that user's whole filesystem, network and processes."
                .to_string(),
        ];
    }
    let mut lines = vec![
        format!(
            "Read, write and create files in the workdir {} (and nowhere else).",
            jail.workdir().display()
        ),
        format!(
            "Read and run programs in {}.",
            present(SYSTEM_DIRS).join(", ")
        ),
        format!(
            "Read the files in {CONFIG_DIR} that every user of the machine may read; secrets \
             such as {CONFIG_DIR}/shadow are left out."
        ),
        format!(
            "Use {} (read and write) and {} (read).",
            present(DEVICES_RW).join(", "),
            present(DEVICES_RO).join(", ")
        ),
    ];
    lines.push(
        "Nothing else on the machine can be read or written: not your home directory, not \
         /tmp (TMPDIR and HOME point inside the workdir), not /proc, not other sessions, not \
         the capsule's records."
            .to_string(),
    );
    if jail.class() == Class::Sealed {
        lines
            .push("The filesystem root is private: only the directories above exist in it.".into());
    }
    lines.push(if jail.workdir_exec() {
        "Files written in the workdir may be executed (capabilities.filesystem.workdir_exec: true)."
            .to_string()
    } else {
        "Files written in the workdir cannot be executed (capabilities.filesystem.workdir_exec: \
         false); run scripts through their interpreter, e.g. `bash script.sh`."
            .to_string()
    });
    lines.push(network_reach(jail, allowed_hosts));
    lines.push(if jail.unix_sockets() {
        "Unix sockets work only inside the workdir.".to_string()
    } else {
        format!(
            "Unix sockets cannot be opened (this kernel's Landlock ABI {} cannot confine them \
             to the workdir).",
            jail.kernel().landlock_abi
        )
    });
    lines.push(
        "No process outside the command's own sandbox can be signalled, traced or read \
         (mur included), no privileges can be gained (setuid programs run unprivileged), and \
         no new namespaces made."
            .to_string(),
    );
    lines.push(
        "Every process a command starts ends when the command ends, is killed or times out, \
         background (`&`, `setsid`) ones included; long work stays in the foreground and moves \
         to the background by itself."
            .to_string(),
    );
    let l = jail.limits();
    lines.push(format!(
        "Limits per process: {} of address space, {} s of CPU, files up to {}, {} open files; \
         {} processes per command; at most {} commands at once.",
        bytes(l.memory_bytes),
        l.cpu_seconds,
        bytes(l.file_bytes),
        l.open_files,
        l.processes,
        l.commands
    ));
    lines.push(format!(
        "The workdir may grow by {} in all (capabilities.limits.workdir_bytes): a command \
         that passes it, over one file or many, is stopped while it runs and the task fails; \
         a file can grow only as far as the room left when its command started.",
        bytes(l.file_bytes)
    ));
    lines
}

fn network_reach(jail: &Jail, allowed_hosts: &[String]) -> String {
    match (jail.network(), jail.proxy_port()) {
        (Network::Proxy, Some(port)) => format!(
            "The network is reachable only through the session proxy at 127.0.0.1:{port} \
             (HTTP_PROXY and HTTPS_PROXY name it), and only for {}; every other address and \
             every non-TCP socket is refused.",
            if allowed_hosts.is_empty() {
                "no host (capabilities.network.allow is empty)".to_string()
            } else {
                allowed_hosts.join(", ")
            }
        ),
        _ => "No network: IPv4 and IPv6 sockets of every kind are refused, loopback included \
              (capabilities.shell.network: none)."
            .to_string(),
    }
}

/// `mur run --explain-scope`.
pub fn explain(jail: &Jail, allowed_hosts: &[String], records: &std::path::Path) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", launch_line(jail));
    if jail.class() != Class::Advisory {
        let _ = writeln!(out, "A shell command can:");
    }
    for line in reach(jail, allowed_hosts) {
        let _ = writeln!(out, "  - {line}");
    }
    let _ = writeln!(
        out,
        "Records (trace, logs) at {}: never reachable by a command.",
        records.display()
    );
    out
}

fn present(paths: &[&str]) -> Vec<String> {
    paths
        .iter()
        .filter(|p| std::path::Path::new(p).exists())
        .map(|p| (*p).to_string())
        .collect()
}

fn bytes(n: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if n.is_multiple_of(1024 * MIB) {
        format!("{} GiB", n / (1024 * MIB))
    } else if n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else {
        format!("{n} bytes")
    }
}
