//! What this kernel can back. Each class needs named mechanisms; a missing one is an
//! error naming it, never a quietly weaker sandbox.

use crate::error::Error;

use super::Class;

/// Landlock's signal and abstract-socket scoping arrived in ABI 6: below it a command
/// could signal mur itself, so `scoped` needs at least this.
pub const MIN_LANDLOCK_ABI: i32 = 6;
/// ABI 9 restricts connecting to a Unix socket by its path; below it, Unix sockets are
/// refused outright, since a command could reach any socket on the machine by name.
const RESOLVE_UNIX_ABI: i32 = 9;

/// The mechanisms found, probed once per process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kernel {
    /// 0 when Landlock is not enabled; otherwise its ABI version.
    pub landlock_abi: i32,
    pub seccomp: bool,
    /// `Err(errno)` of the `unshare` that tried a user and PID namespace.
    pub user_namespaces: Result<(), i32>,
    /// A mount namespace as well, for `sealed`.
    pub mount_namespaces: Result<(), i32>,
    /// x86_64's x32 system-call numbers, which a seccomp program keyed on the
    /// x86_64 numbers would not see.
    pub x32: bool,
}

impl Kernel {
    /// For `advisory`, which needs nothing: no probe, no throwaway processes.
    pub fn unprobed() -> Kernel {
        Kernel {
            landlock_abi: 0,
            seccomp: false,
            user_namespaces: Err(0),
            mount_namespaces: Err(0),
            x32: false,
        }
    }

    /// What this kernel offers. Probing forks throwaway processes, so it is done once
    /// per process: `mur serve` starts every capsule's shell on the same answer.
    pub fn probe() -> Kernel {
        static PROBED: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
        *PROBED.get_or_init(Kernel::probe_now)
    }

    fn probe_now() -> Kernel {
        // Each namespace probe forks and waits for its child: side by side, the launch
        // waits for one of them, not both.
        let (user_namespaces, mount_namespaces) = std::thread::scope(|scope| {
            let mount = scope.spawn(|| {
                try_unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID | libc::CLONE_NEWNS)
            });
            let user = try_unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID);
            (user, mount.join().unwrap_or(Err(0)))
        });
        Kernel {
            landlock_abi: landlock_abi(),
            seccomp: seccomp_available(),
            user_namespaces,
            mount_namespaces,
            x32: x32_enabled(),
        }
    }

    /// Whether Landlock can restrict connecting to Unix sockets by path.
    pub fn resolves_unix(&self) -> bool {
        self.landlock_abi >= RESOLVE_UNIX_ABI
    }

    /// `Ok` when every mechanism `class` needs is here.
    pub fn backs(&self, class: Class) -> Result<(), Error> {
        if class == Class::Advisory {
            return Ok(());
        }
        let refuse = |code: &'static str, what: String, fix: &str| {
            Err(Error::new(
                code,
                format!("containment '{}' cannot be backed: {what}", class.name()),
            )
            .hint(format!(
                "{fix}; or declare 'capabilities.containment: advisory' to run shell commands \
                 unconfined, as the user who started mur"
            )))
        };
        if self.landlock_abi == 0 {
            return refuse(
                "E-CAP-010",
                "this kernel has no Landlock (it is not built in, or not in the lsm= boot list)"
                    .into(),
                "run on Linux 6.12 or newer with Landlock enabled (lsm=...,landlock)",
            );
        }
        if self.landlock_abi < MIN_LANDLOCK_ABI {
            return refuse(
                "E-CAP-010",
                format!(
                    "this kernel's Landlock ABI is {}, and signal scoping needs ABI {MIN_LANDLOCK_ABI}",
                    self.landlock_abi
                ),
                "run on Linux 6.12 or newer",
            );
        }
        if !self.seccomp {
            return refuse(
                "E-CAP-011",
                "this kernel has no seccomp filters (CONFIG_SECCOMP_FILTER)".into(),
                "run on a kernel built with CONFIG_SECCOMP_FILTER",
            );
        }
        if self.x32 {
            return refuse(
                "E-CAP-011",
                "this kernel runs x32 system calls, which the seccomp program does not cover"
                    .into(),
                "boot with syscall.x32=n",
            );
        }
        if let Err(errno) = self.user_namespaces {
            return refuse(
                "E-CAP-012",
                format!(
                    "a user and PID namespace could not be created ({})",
                    std::io::Error::from_raw_os_error(errno)
                ),
                "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, \
                 user.max_user_namespaces > 0, or the AppArmor userns restriction lifted)",
            );
        }
        if class == Class::Sealed
            && let Err(errno) = self.mount_namespaces
        {
            return refuse(
                "E-CAP-013",
                format!(
                    "a private mount namespace could not be created ({})",
                    std::io::Error::from_raw_os_error(errno)
                ),
                "allow unprivileged user and mount namespaces, or declare 'scoped'",
            );
        }
        Ok(())
    }
}

fn landlock_abi() -> i32 {
    // SAFETY: with a null attribute and size 0, LANDLOCK_CREATE_RULESET_VERSION only
    // returns the ABI version; no memory is read or written.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    i32::try_from(abi).unwrap_or(0).max(0)
}

fn seccomp_available() -> bool {
    // SAFETY: PR_GET_SECCOMP takes no pointers; it fails with EINVAL without seccomp.
    unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 }
}

#[cfg(target_arch = "x86_64")]
fn x32_enabled() -> bool {
    const X32_SYSCALL_BIT: libc::c_long = 0x4000_0000;
    // SAFETY: getpid takes no arguments; a kernel without x32 answers ENOSYS.
    unsafe { libc::syscall(X32_SYSCALL_BIT | libc::SYS_getpid) >= 0 }
}

#[cfg(not(target_arch = "x86_64"))]
fn x32_enabled() -> bool {
    false
}

/// Tries `unshare(flags)` in a throwaway child, since a multithreaded process cannot
/// enter a user namespace itself.
fn try_unshare(flags: libc::c_int) -> Result<(), i32> {
    // SAFETY: the child only calls unshare and _exit, both async-signal-safe, and
    // touches no memory; the parent waits for it, so nothing is left behind.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
        }
        if pid == 0 {
            let code = if libc::unshare(flags) == 0 {
                0
            } else {
                // errno values fit in the exit code's byte.
                *libc::__errno_location() & 0xff
            };
            libc::_exit(code);
        }
        let mut status = 0;
        while libc::waitpid(pid, &raw mut status, 0) < 0 {
            if *libc::__errno_location() != libc::EINTR {
                return Err(libc::ECHILD);
            }
        }
        match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
            (true, 0) => Ok(()),
            (true, errno) => Err(errno),
            _ => Err(libc::EPERM),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> Kernel {
        Kernel {
            landlock_abi: 7,
            seccomp: true,
            user_namespaces: Ok(()),
            mount_namespaces: Ok(()),
            x32: false,
        }
    }

    fn refusal(kernel: Kernel, class: Class) -> String {
        let e = kernel.backs(class).expect_err("refused");
        format!("{e}")
    }

    #[test]
    fn a_kernel_with_every_mechanism_backs_every_class() {
        for class in [Class::Advisory, Class::Scoped, Class::Sealed] {
            assert!(full().backs(class).is_ok());
        }
    }

    #[test]
    fn advisory_needs_nothing() {
        assert!(Kernel::unprobed().backs(Class::Advisory).is_ok());
    }

    #[test]
    fn each_missing_mechanism_is_named_with_the_opt_out() {
        let no_landlock = Kernel {
            landlock_abi: 0,
            ..full()
        };
        let text = refusal(no_landlock, Class::Scoped);
        assert!(
            text.starts_with(
                "error[E-CAP-010]: containment 'scoped' cannot be backed: this kernel has no Landlock"
            ),
            "{text}"
        );
        assert!(
            text.contains("declare 'capabilities.containment: advisory'"),
            "{text}"
        );
        let old = Kernel {
            landlock_abi: 5,
            ..full()
        };
        assert!(
            refusal(old, Class::Scoped)
                .contains("this kernel's Landlock ABI is 5, and signal scoping needs ABI 6"),
        );
        let no_seccomp = Kernel {
            seccomp: false,
            ..full()
        };
        assert!(refusal(no_seccomp, Class::Scoped).starts_with("error[E-CAP-011]"));
        let x32 = Kernel {
            x32: true,
            ..full()
        };
        assert!(refusal(x32, Class::Scoped).contains("x32"));
        let no_userns = Kernel {
            user_namespaces: Err(libc::EPERM),
            ..full()
        };
        let text = refusal(no_userns, Class::Scoped);
        assert!(
            text.starts_with("error[E-CAP-012]: containment 'scoped' cannot be backed: a user and PID namespace could not be created (Operation not permitted"),
            "{text}"
        );
        let no_mountns = Kernel {
            mount_namespaces: Err(libc::EPERM),
            ..full()
        };
        assert!(no_mountns.backs(Class::Scoped).is_ok());
        assert!(refusal(no_mountns, Class::Sealed).starts_with("error[E-CAP-013]"));
    }
}
