//! What this kernel can back. Each class needs named mechanisms; a missing one is an
//! error naming it, never a quietly weaker sandbox.
//!
//! Landlock, seccomp and x32 are asked on every launch (a system call each). The two
//! namespace probes fork a throwaway process each, so their success is kept across
//! runs (`kept`), keyed by this boot and by everything that decides it: the user and
//! capabilities, the namespaces and root this process is in, its seccomp and LSM
//! confinement, and the sysctls that gate unprivileged namespaces. A changed key
//! probes again. Keeping it cannot weaken a sandbox: every command is still cloned into
//! its namespaces, and where they cannot be made it fails to start instead of running
//! unconfined (and the kept answer is dropped, so the next launch probes and refuses
//! with the reason). A failed probe is never kept: a refusal is always decided afresh.

use std::ffi::CStr;

use crate::error::Error;

use super::Class;
use super::kept;

/// The kept success of the namespace probes, in the confined shell's cache folder.
const KEPT: &CStr = c"kernel-probe";
const KEPT_HEAD: &str = "mur-kernel-probe 1";
/// The gates of unprivileged namespaces a distribution may add (Debian and Ubuntu's
/// `unprivileged_userns_clone`, Ubuntu's AppArmor restriction) and the counts.
const GATES: &[&str] = &[
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/user/max_pid_namespaces",
    "/proc/sys/user/max_mnt_namespaces",
    "/proc/sys/kernel/unprivileged_userns_clone",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
];
/// The lines of `/proc/self/status` that decide what this process may unshare.
const STATUS: &[&str] = &[
    "Uid:",
    "Gid:",
    "CapEff:",
    "CapBnd:",
    "NoNewPrivs:",
    "Seccomp:",
    "Seccomp_filters:",
];

/// Landlock's signal and abstract-socket scoping arrived in ABI 6: below it a command
/// could signal mur itself, so `scoped` needs at least this.
pub const MIN_LANDLOCK_ABI: i32 = 6;
/// ABI 9 restricts connecting to a Unix socket by its path; below it, Unix sockets are
/// refused outright, since a command could reach any socket on the machine by name.
const RESOLVE_UNIX_ABI: i32 = 9;

/// The mechanisms found, probed once per process (the namespaces once per boot, where
/// they could be made).
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

    /// What this kernel offers, once per process (`mur serve` starts every capsule's
    /// shell on the same answer), the namespaces once per boot where that was a success.
    pub fn probe() -> Kernel {
        static PROBED: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
        *PROBED.get_or_init(|| {
            let folder = kept::Folder::open();
            let (user_namespaces, mount_namespaces) =
                namespaces(folder.as_ref(), probe_key(), probe_namespaces);
            Kernel {
                landlock_abi: landlock_abi(),
                seccomp: seccomp_available(),
                user_namespaces,
                mount_namespaces,
                x32: x32_enabled(),
            }
        })
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

/// Both namespace probes' answers.
type Namespaces = (Result<(), i32>, Result<(), i32>);

/// The namespaces' answer: kept in `folder` under `key`, or `probe`d (and kept there
/// when both succeed).
fn namespaces(
    folder: Option<&kept::Folder>,
    key: Option<String>,
    probe: impl FnOnce() -> Namespaces,
) -> Namespaces {
    let folder = folder.zip(key);
    if let Some((folder, key)) = &folder
        && folder.read(KEPT, 4096).as_deref() == Some(kept_bytes(key).as_slice())
    {
        return (Ok(()), Ok(()));
    }
    let probed = probe();
    if let Some((folder, key)) = &folder
        && probed == (Ok(()), Ok(()))
    {
        let _ = folder.write(KEPT, &kept_bytes(key));
    }
    probed
}

/// The kept file's whole text: the only thing ever kept is a success under `key`.
fn kept_bytes(key: &str) -> Vec<u8> {
    format!(
        "{KEPT_HEAD}\nkey {}\nnamespaces ok\n",
        kept::escape(key.as_bytes())
    )
    .into_bytes()
}

/// Drops the kept namespace probe: a command could not be started in its namespaces,
/// so the next launch probes again (and refuses, naming why, if they are gone).
pub fn forget_probe() {
    if let Some(folder) = kept::Folder::open() {
        folder.forget(KEPT);
    }
}

/// Everything the namespace probes' success depends on; `None` without a boot id.
fn probe_key() -> Option<String> {
    let boot = kept::boot_id()?;
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let status: Vec<&str> = status
        .lines()
        .filter(|line| STATUS.iter().any(|s| line.starts_with(s)))
        .collect();
    let read = |path: &str| {
        std::fs::read_to_string(path).map_or_else(|_| "-".to_string(), |v| v.trim().to_string())
    };
    let gates: Vec<String> = GATES.iter().map(|path| read(path)).collect();
    let namespaces: Vec<String> = ["user", "mnt", "pid", "pid_for_children"]
        .iter()
        .map(|kind| kept::namespace(kind))
        .collect();
    // A chroot (which refuses user namespaces) shows as another root.
    let root = std::fs::metadata("/").map_or_else(
        |_| "-".to_string(),
        |m| {
            use std::os::unix::fs::MetadataExt;
            format!("{}:{}", m.dev(), m.ino())
        },
    );
    Some(format!(
        "boot={boot} status={} ns={} root={root} gates={} lsm={}",
        status.join(","),
        namespaces.join(","),
        gates.join(","),
        read("/proc/self/attr/current"),
    ))
}

/// Each namespace probe forks and waits for its child: side by side, the launch waits
/// for one of them, not both.
fn probe_namespaces() -> Namespaces {
    std::thread::scope(|scope| {
        let mount = scope
            .spawn(|| try_unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID | libc::CLONE_NEWNS));
        let user = try_unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID);
        (user, mount.join().unwrap_or(Err(0)))
    })
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

    /// `namespaces` with a probe that counts its calls and answers `answer`.
    fn probed(folder: &kept::Folder, key: &str, answer: Namespaces) -> (Namespaces, usize) {
        let mut calls = 0;
        let got = namespaces(Some(folder), Some(key.to_string()), || {
            calls += 1;
            answer
        });
        (got, calls)
    }

    fn folder(name: &str) -> (std::path::PathBuf, kept::Folder) {
        let root = std::env::temp_dir().join(format!("mur-kernel-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let folder = kept::Folder::open_in(&root).unwrap();
        (root, folder)
    }

    const OK: Namespaces = (Ok(()), Ok(()));

    #[test]
    fn a_success_is_kept_for_its_key_and_a_changed_key_probes_again() {
        let (root, folder) = folder("kept");
        let key = "boot=a status=Uid:1000 gates=65536,-,1";
        assert_eq!(probed(&folder, key, OK), (OK, 1));
        assert_eq!(probed(&folder, key, OK), (OK, 0), "kept: no probe");
        // Another boot, or a gate turned: probed again, and the answer is the probe's.
        let refused = (Err(libc::EPERM), Err(libc::EPERM));
        let other_boot = key.replace("boot=a", "boot=b");
        assert_eq!(probed(&folder, &other_boot, refused), (refused, 1));
        let gate_closed = key.replace(",1", ",0");
        assert_eq!(probed(&folder, &gate_closed, refused), (refused, 1));
        // A refusal was not kept over the success: the first key still stands.
        assert_eq!(probed(&folder, key, refused), (OK, 0));
        folder.forget(KEPT);
        assert_eq!(probed(&folder, key, refused), (refused, 1), "forgotten");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_failure_is_never_kept_and_a_hostile_file_is_probed_past() {
        let (root, folder) = folder("hostile");
        let key = "boot=a";
        let half = (Ok(()), Err(libc::EPERM));
        assert_eq!(probed(&folder, key, half), (half, 1));
        assert_eq!(probed(&folder, key, half), (half, 1), "not kept");
        let file = root.join("confine").join("kernel-probe");
        let good = kept_bytes(key);
        let hostile = [
            good[..good.len() - 1].to_vec(),
            [good.as_slice(), b"namespaces ok\n"].concat(),
            String::from_utf8(good.clone())
                .unwrap()
                .replace("boot=a", "boot=b")
                .into_bytes(),
            b"mur-kernel-probe 1\nkey boot%3da\nnamespaces ok\n".to_vec(),
            vec![0xff; 100],
        ];
        for bytes in hostile {
            std::fs::write(&file, &bytes).unwrap();
            assert_eq!(probed(&folder, key, half), (half, 1), "{bytes:?}");
        }
        std::fs::write(&file, &good).unwrap();
        assert_eq!(
            probed(&folder, key, half),
            (OK, 0),
            "the file as written is taken"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_key_names_this_boot_and_what_gates_namespaces() {
        let key = probe_key().expect("a boot id");
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
        assert!(key.starts_with(&format!("boot={} ", boot.trim())), "{key}");
        for part in [
            "Uid:",
            "CapEff:",
            "Seccomp:",
            "ns=user:[",
            "gates=",
            "root=",
        ] {
            assert!(key.contains(part), "{key} lacks {part}");
        }
        let max = std::fs::read_to_string("/proc/sys/user/max_user_namespaces").unwrap();
        assert!(key.contains(&format!("gates={},", max.trim())), "{key}");
    }
}
