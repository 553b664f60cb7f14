//! The seccomp programs: what Landlock cannot say. No socket beyond the allowed kinds
//! (Landlock sees only TCP ports), no new namespaces (a fresh user namespace would hand
//! back capabilities), no tracing or reading another process's memory, no io_uring
//! (its operations bypass seccomp), no kernel keyrings (shared by every process of
//! the user), no BPF, no kernel modules. A refused call fails with EPERM, so a program
//! sees an ordinary error rather than dying.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

use crate::error::Error;

/// Which sockets a command may open.
pub struct Allowed {
    /// TCP over IPv4 and IPv6 (Landlock then allows connecting to the proxy's port only).
    pub inet_stream: bool,
    /// Unix sockets (Landlock or the sealed root then keeps them inside the workdir).
    pub unix_sockets: bool,
}

/// Calls refused whatever their arguments.
const REFUSED: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_open_by_handle_at,
    libc::SYS_fsopen,
    libc::SYS_fsmount,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
];

/// The namespace flags `clone` may not carry.
const NAMESPACE_FLAGS: &[i32] = &[
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWNS,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWCGROUP,
];

/// The programs to install, in order.
pub fn programs(allowed: &Allowed) -> Result<Vec<BpfProgram>, Error> {
    let refused = compile(refusals(allowed), SeccompAction::Errno(libc::EPERM as u32))?;
    // `clone3` passes its flags in memory seccomp cannot read: ENOSYS makes the C
    // library fall back to `clone`, whose flags the first program checks.
    let clone3 = BTreeMap::from([(libc::SYS_clone3, Vec::new())]);
    let fallback = compile(Ok(clone3), SeccompAction::Errno(libc::ENOSYS as u32))?;
    Ok(vec![refused, fallback])
}

fn compile(
    rules: Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::BackendError>,
    action: SeccompAction,
) -> Result<BpfProgram, Error> {
    let failed = |e: String| {
        Error::new(
            "E-CAP-011",
            format!("the seccomp program for shell commands could not be built: {e}"),
        )
        .hint("declare 'capabilities.containment: advisory' to run shell commands unconfined")
    };
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| failed(e.to_string()))?;
    let filter = SeccompFilter::new(
        rules.map_err(|e| failed(e.to_string()))?,
        SeccompAction::Allow,
        action,
        arch,
    )
    .map_err(|e| failed(e.to_string()))?;
    BpfProgram::try_from(filter).map_err(|e| failed(e.to_string()))
}

fn refusals(
    allowed: &Allowed,
) -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::BackendError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        REFUSED.iter().map(|nr| (*nr, Vec::new())).collect();
    rules.insert(libc::SYS_socket, socket_rules(allowed)?);
    rules.insert(libc::SYS_clone, clone_rules()?);
    Ok(rules)
}

fn arg(index: u8, op: Op, value: u64) -> Result<SeccompCondition, seccompiler::BackendError> {
    SeccompCondition::new(index, Len::Dword, op, value)
}

/// `socket(domain, type, ...)` is refused unless the domain is allowed, and an inet
/// socket unless it is a stream (a datagram could go anywhere; Landlock checks TCP only).
fn socket_rules(allowed: &Allowed) -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
    let mut permitted = Vec::new();
    if allowed.unix_sockets {
        permitted.push(libc::AF_UNIX);
    }
    if allowed.inet_stream {
        permitted.extend([libc::AF_INET, libc::AF_INET6]);
    }
    let other_domain = permitted
        .iter()
        .map(|d| arg(0, Op::Ne, *d as u64))
        .collect::<Result<Vec<_>, _>>()?;
    let mut rules = Vec::new();
    if other_domain.is_empty() {
        // Nothing is permitted: every socket() is refused (domain is always >= 0).
        rules.push(SeccompRule::new(vec![arg(0, Op::Ge, 0)?])?);
    } else {
        rules.push(SeccompRule::new(other_domain)?);
    }
    if allowed.inet_stream {
        // The type's low bits name it; SOCK_NONBLOCK and SOCK_CLOEXEC sit above them.
        for domain in [libc::AF_INET, libc::AF_INET6] {
            for kind in (0..16).filter(|k| *k != libc::SOCK_STREAM as u64) {
                rules.push(SeccompRule::new(vec![
                    arg(0, Op::Eq, domain as u64)?,
                    arg(1, Op::MaskedEq(0xf), kind)?,
                ])?);
            }
        }
    }
    Ok(rules)
}

/// `clone(flags, ...)` carrying any namespace flag.
fn clone_rules() -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
    NAMESPACE_FLAGS
        .iter()
        .map(|flag| {
            let bit = *flag as u64;
            SeccompRule::new(vec![SeccompCondition::new(
                0,
                Len::Qword,
                Op::MaskedEq(bit),
                bit,
            )?])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_build_for_every_socket_choice() {
        for (inet_stream, unix_sockets) in
            [(false, false), (true, false), (false, true), (true, true)]
        {
            let programs = programs(&Allowed {
                inet_stream,
                unix_sockets,
            })
            .unwrap();
            assert_eq!(programs.len(), 2);
            assert!(programs.iter().all(|p| !p.is_empty()));
        }
    }
}
