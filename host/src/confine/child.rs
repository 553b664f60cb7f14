//! The steps a command's child takes between clone and exec to enter its sandbox.
//!
//! They run in the cloned child, in memory it shares with mur until it execs, where
//! only system calls are allowed: everything is prepared by [`Steps::new`] in the parent
//! (paths as C strings, map texts, limits), and [`confine_self`] only makes system
//! calls on it. The child is already process 1 of its own user and PID namespaces
//! (see `spawn`).

use std::os::fd::RawFd;

use seccompiler::BpfProgram;

use super::Limits;
use super::sealed::Root;

/// What the child does, prepared in the parent.
pub struct Steps {
    active: bool,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    /// Resource, soft limit, hard limit.
    rlimits: Vec<(libc::__rlimit_resource_t, libc::rlim_t, libc::rlim_t)>,
    nice: i32,
    root: Option<Root>,
    /// A `/proc` of its own, mounted in a mount namespace of its own: it shows only the
    /// processes of the command's PID namespace.
    own_proc: bool,
}

const UID_MAP: &std::ffi::CStr = c"/proc/self/uid_map";
const GID_MAP: &std::ffi::CStr = c"/proc/self/gid_map";
const SETGROUPS: &std::ffi::CStr = c"/proc/self/setgroups";

impl Steps {
    /// No sandbox: the `advisory` class.
    pub fn none() -> Steps {
        Steps {
            active: false,
            uid_map: Vec::new(),
            gid_map: Vec::new(),
            rlimits: Vec::new(),
            nice: 0,
            root: None,
            own_proc: false,
        }
    }

    pub fn new(limits: &Limits, root: Option<Root>) -> Steps {
        // SAFETY: geteuid and getegid cannot fail and take no arguments.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Steps {
            active: true,
            // The user keeps their own ids inside, so files look as they do outside.
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            rlimits: vec![
                (libc::RLIMIT_AS, limits.memory_bytes, limits.memory_bytes),
                // A second past the soft limit: SIGXCPU (which says why) comes first,
                // SIGKILL only for a process that ignores it.
                (
                    libc::RLIMIT_CPU,
                    limits.cpu_seconds,
                    limits.cpu_seconds.saturating_add(1),
                ),
                (libc::RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes),
                (libc::RLIMIT_NOFILE, limits.open_files, limits.open_files),
                (libc::RLIMIT_NPROC, limits.processes, limits.processes),
                (libc::RLIMIT_CORE, 0, 0),
            ],
            nice: limits.nice,
            root,
            own_proc: false,
        }
    }

    /// The command gets a `/proc` of its own (a harness reads its own `/proc/self`).
    #[must_use]
    pub fn with_own_proc(mut self) -> Steps {
        self.own_proc = true;
        self
    }
}

/// The namespaces a command's clone makes: a user and PID namespace, and a mount
/// namespace for the sealed root.
pub fn namespaces(steps: &Steps) -> libc::c_int {
    let mount = if steps.root.is_some() || steps.own_proc {
        libc::CLONE_NEWNS
    } else {
        0
    };
    libc::CLONE_NEWUSER | libc::CLONE_NEWPID | mount
}

/// Confines the freshly cloned child, process 1 of its new namespaces, before it execs.
/// `cgroup_joins` are its pids and CPU cgroups' files to write `0` to (see `pids` and
/// `cpu_group`); `file_bytes`
/// is this command's file-size limit: what the workdir quota had left when it started,
/// never more than the session's.
///
/// Runs between clone and exec in memory shared with mur: no allocation, no locks,
/// system calls only.
pub fn confine_self(
    steps: &Steps,
    cgroup_joins: [Option<&std::ffi::CStr>; 2],
    ruleset: Option<RawFd>,
    file_bytes: libc::rlim_t,
    filters: &[BpfProgram],
) -> std::io::Result<()> {
    if !steps.active {
        return Ok(());
    }
    // SAFETY: plain system calls on memory `steps` owns, in the child.
    unsafe {
        // If mur dies, so does the command (and with it, its PID namespace).
        check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
        for join in cgroup_joins.into_iter().flatten() {
            // Joined first, so every process the command starts counts in them.
            write_file(join, b"0")?;
        }
        write_file(SETGROUPS, b"deny")?;
        write_file(UID_MAP, &steps.uid_map)?;
        write_file(GID_MAP, &steps.gid_map)?;
        if let Some(root) = &steps.root {
            root.enter()?;
        }
        if steps.own_proc {
            // A composed root (`sealed`) mounted its own before it was entered.
            if steps.root.is_none() {
                mount_own_proc()?;
            }
            if let Some(ruleset) = ruleset {
                allow_proc(ruleset)?;
            }
        }
        for (resource, soft, hard) in &steps.rlimits {
            let (soft, hard) = if *resource == libc::RLIMIT_FSIZE {
                (file_bytes.min(*soft), file_bytes.min(*hard))
            } else {
                (*soft, *hard)
            };
            let limit = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            check(libc::setrlimit(*resource, &raw const limit))?;
        }
        if steps.nice > 0 {
            // Lowering one's own priority needs no privilege, and every process the
            // command starts inherits it.
            check(libc::setpriority(libc::PRIO_PROCESS, 0, steps.nice))?;
        }
        drop_capabilities()?;
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
        if let Some(fd) = ruleset {
            check(libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) as libc::c_int)?;
        }
        for filter in filters {
            seccompiler::apply_filter(filter).map_err(|_| std::io::Error::last_os_error())?;
        }
    }
    Ok(())
}

/// Mounts a fresh `/proc` over the host's, in the child's own mount namespace: it
/// lists the PID namespace's processes only, so reading it shows nothing of the host's.
unsafe fn mount_own_proc() -> std::io::Result<()> {
    // SAFETY: mount on C string literals, in the child's own mount namespace.
    unsafe {
        check(libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ))?;
        check(libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        ))
    }
}

/// Lets the command read its own `/proc`: the rule is added here, to the command's own
/// ruleset, since a rule names an inode and this mount's root did not exist before.
unsafe fn allow_proc(ruleset: RawFd) -> std::io::Result<()> {
    /// `struct landlock_path_beneath_attr`, packed as the kernel reads it.
    #[repr(C, packed)]
    struct PathBeneath {
        allowed_access: u64,
        parent_fd: i32,
    }
    const RULE_PATH_BENEATH: libc::c_int = 1;
    const READ_FILE: u64 = 1 << 2;
    const READ_DIR: u64 = 1 << 3;
    // SAFETY: open, landlock_add_rule and close on a C string literal and a stack value.
    unsafe {
        let fd = libc::open(c"/proc".as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
        check(fd)?;
        let rule = PathBeneath {
            allowed_access: READ_FILE | READ_DIR,
            parent_fd: fd,
        };
        let added = libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            RULE_PATH_BENEATH,
            &raw const rule,
            0u32,
        ) as libc::c_int;
        libc::close(fd);
        check(added)
    }
}

/// Root inside the user namespace keeps no capability across exec, so a command cannot
/// use the namespace's privileges (over its own files, say) even as uid 0.
unsafe fn drop_capabilities() -> std::io::Result<()> {
    const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
    const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
    const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;
    const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
    const SECBIT_NO_CAP_AMBIENT_RAISE: libc::c_ulong = 1 << 6;
    const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: libc::c_ulong = 1 << 7;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let bits = SECBIT_NOROOT
        | SECBIT_NOROOT_LOCKED
        | SECBIT_NO_SETUID_FIXUP
        | SECBIT_NO_SETUID_FIXUP_LOCKED
        | SECBIT_NO_CAP_AMBIENT_RAISE
        | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    // SAFETY: prctl and capset on stack values this function owns.
    unsafe {
        check(libc::prctl(libc::PR_SET_SECUREBITS, bits, 0, 0, 0))?;
        let mut cap = 0;
        while libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) == 0 {
            cap += 1;
        }
        let header = Header {
            version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
            pid: 0,
        };
        let data = [
            Data {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            },
            Data {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            },
        ];
        check(libc::syscall(libc::SYS_capset, &raw const header, data.as_ptr()) as libc::c_int)?;
    }
    Ok(())
}

unsafe fn write_file(path: &std::ffi::CStr, text: &[u8]) -> std::io::Result<()> {
    // SAFETY: open, write and close on a C string and a byte slice the caller owns.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let written = libc::write(fd, text.as_ptr().cast(), text.len());
        libc::close(fd);
        if written != text.len() as isize {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

fn check(rc: libc::c_int) -> std::io::Result<()> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}
