//! The composed root of the `sealed` class: a private mount namespace whose `/` is an
//! empty tmpfs holding only the system directories (read-only), `/etc` (read-only), a
//! few devices and the workdir at its own path; a server's root also holds its
//! installation (read-only), each place at its own path. Paths outside simply do not
//! exist, so a command cannot even name another session, the records or a socket
//! elsewhere.
//!
//! Planned in the parent (every path a C string, every mount's flags read from the
//! original mount), entered by the PID namespace's first process before exec.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::error::Error;

use super::filesystem::{CONFIG_DIR, DEVICES_RO, DEVICES_RW, Installed, SYSTEM_DIRS};

/// One thing to put into the new root.
enum Part {
    /// A directory bind-mounted at the same path; read-only with the flags it had.
    Dir {
        source: CString,
        target: CString,
        read_only: Option<libc::c_ulong>,
    },
    /// A device file bind-mounted onto an empty file.
    Device { source: CString, target: CString },
    /// A file of a server's installation bind-mounted onto an empty file, read-only
    /// with the flags it had.
    File {
        source: CString,
        target: CString,
        read_only: libc::c_ulong,
    },
    /// A symbolic link as it is outside (`/bin -> usr/bin`).
    Link { points_to: CString, target: CString },
    /// A directory on the way to a mount point.
    Mkdir { target: CString },
    /// A fresh procfs of the command's PID namespace, mounted while the host's is still
    /// visible (the kernel mounts a procfs only beside a visible one).
    Proc { target: CString },
}

/// The root, planned.
pub struct Root {
    scratch: CString,
    workdir: CString,
    parts: Vec<Part>,
}

impl Root {
    /// Plans a root for `workdir`, composed on the empty folder `scratch`.
    pub fn plan(workdir: &Path, scratch: &Path) -> Result<Root, Error> {
        Root::plan_with(workdir, scratch, &[])
    }

    /// Plans a server's root: a command's, and its `installed` places read-only.
    pub fn plan_with(
        workdir: &Path,
        scratch: &Path,
        installed: &[Installed],
    ) -> Result<Root, Error> {
        let mut parts = Vec::new();
        for dir in SYSTEM_DIRS.iter().chain(std::iter::once(&CONFIG_DIR)) {
            let dir = Path::new(dir);
            match std::fs::symlink_metadata(dir) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    let points_to = std::fs::read_link(dir).map_err(|e| io(dir, &e))?;
                    parts.push(Part::Link {
                        points_to: c_path(&points_to)?,
                        target: c_path(&scratch.join(relative(dir)))?,
                    });
                }
                Ok(meta) if meta.is_dir() => {
                    mkdirs(&mut parts, scratch, dir)?;
                    parts.push(Part::Dir {
                        source: c_path(dir)?,
                        target: c_path(&scratch.join(relative(dir)))?,
                        read_only: Some(read_only_flags(dir)?),
                    });
                }
                _ => {}
            }
        }
        mkdirs(&mut parts, scratch, Path::new("/dev"))?;
        for device in DEVICES_RW.iter().chain(DEVICES_RO).map(Path::new) {
            if device.exists() {
                parts.push(Part::Device {
                    source: c_path(device)?,
                    target: c_path(&scratch.join(relative(device)))?,
                });
            }
        }
        for place in bound_apart(installed) {
            install(&mut parts, scratch, place)?;
        }
        mkdirs(&mut parts, scratch, workdir)?;
        parts.push(Part::Dir {
            source: c_path(workdir)?,
            target: c_path(&scratch.join(relative(workdir)))?,
            read_only: None,
        });
        Ok(Root {
            scratch: c_path(scratch)?,
            workdir: c_path(workdir)?,
            parts,
        })
    }

    /// The root with a `/proc` of the command's own (see `Installation::own_proc`).
    ///
    /// # Errors
    ///
    /// The scratch path cannot be a C string.
    pub fn with_proc(mut self, scratch: &Path) -> Result<Root, Error> {
        let target = scratch.join("proc");
        self.parts.push(Part::Mkdir {
            target: c_path(&target)?,
        });
        self.parts.push(Part::Proc {
            target: c_path(&target)?,
        });
        Ok(self)
    }

    /// Mounts the root and pivots onto it. Runs between fork and exec, with the
    /// capabilities of the new user namespace: system calls only.
    pub fn enter(&self) -> std::io::Result<()> {
        // SAFETY: mount, mkdir, open, symlink, pivot_root and chdir on C strings this
        // plan owns; the mount namespace is this process's own.
        unsafe {
            // Nothing mounted here may propagate back to the host's namespace.
            mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE)?;
            mount(
                Some(c"tmpfs"),
                &self.scratch,
                Some(c"tmpfs"),
                libc::MS_NOSUID | libc::MS_NODEV,
            )?;
            for part in &self.parts {
                part.place()?;
            }
            check(libc::chdir(self.scratch.as_ptr()))?;
            // pivot_root(".", ".") stacks the old root on the new one; detaching it
            // leaves only the new root.
            check(libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) as i32)?;
            check(libc::umount2(c".".as_ptr(), libc::MNT_DETACH))?;
            check(libc::chdir(self.workdir.as_ptr()))?;
        }
        Ok(())
    }
}

impl Part {
    unsafe fn place(&self) -> std::io::Result<()> {
        // SAFETY: as `Root::enter`.
        unsafe {
            match self {
                Part::Mkdir { target } => {
                    if libc::mkdir(target.as_ptr(), 0o755) != 0
                        && *libc::__errno_location() != libc::EEXIST
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Part::Proc { target } => {
                    mount(
                        Some(c"proc"),
                        target,
                        Some(c"proc"),
                        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    )?;
                }
                Part::Link { points_to, target } => {
                    check(libc::symlink(points_to.as_ptr(), target.as_ptr()))?;
                }
                Part::Device { source, target } => {
                    touch(target)?;
                    mount(Some(source), target, None, libc::MS_BIND)?;
                }
                Part::File {
                    source,
                    target,
                    read_only,
                } => {
                    touch(target)?;
                    mount(Some(source), target, None, libc::MS_BIND)?;
                    mount(
                        None,
                        target,
                        None,
                        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | read_only,
                    )?;
                }
                Part::Dir {
                    source,
                    target,
                    read_only,
                } => {
                    mount(Some(source), target, None, libc::MS_BIND | libc::MS_REC)?;
                    if let Some(flags) = read_only {
                        mount(
                            None,
                            target,
                            None,
                            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags,
                        )?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// An empty file to mount onto.
unsafe fn touch(target: &std::ffi::CStr) -> std::io::Result<()> {
    // SAFETY: open and close on a C string the caller owns.
    unsafe {
        let fd = libc::open(
            target.as_ptr(),
            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
            0o644,
        );
        check(fd)?;
        libc::close(fd);
    }
    Ok(())
}

/// The installation's places that need a mount of their own: not those the root holds
/// already (beneath a system directory or `/etc`), nor those beneath another place, whose
/// mount is read-only and could not take a mount point made inside it.
fn bound_apart(installed: &[Installed]) -> Vec<&Installed> {
    let held: Vec<PathBuf> = SYSTEM_DIRS
        .iter()
        .chain(std::iter::once(&CONFIG_DIR))
        .filter_map(|dir| Path::new(dir).canonicalize().ok())
        .collect();
    let mut places: Vec<&Installed> = installed
        .iter()
        .filter(|place| !held.iter().any(|dir| place.path.starts_with(dir)))
        .collect();
    // Shorter paths first, so a folder comes before what lies beneath it.
    places.sort_by(|a, b| a.path.cmp(&b.path));
    let mut apart: Vec<&Installed> = Vec::new();
    for place in places {
        let beneath = apart
            .iter()
            .any(|outer| outer.dir && place.path.starts_with(&outer.path));
        if !beneath {
            apart.push(place);
        }
    }
    apart
}

/// Mounts one place of a server's installation at its own path, read-only.
fn install(parts: &mut Vec<Part>, scratch: &Path, place: &Installed) -> Result<(), Error> {
    let target = c_path(&scratch.join(relative(&place.path)))?;
    let read_only = read_only_flags(&place.path)?;
    if place.dir {
        mkdirs(parts, scratch, &place.path)?;
        parts.push(Part::Dir {
            source: c_path(&place.path)?,
            target,
            // A server's state folder is the one place it writes outside the workdir.
            read_only: (!place.writable).then_some(read_only),
        });
    } else {
        if let Some(folder) = place.path.parent() {
            mkdirs(parts, scratch, folder)?;
        }
        parts.push(Part::File {
            source: c_path(&place.path)?,
            target,
            read_only,
        });
    }
    Ok(())
}

unsafe fn mount(
    source: Option<&std::ffi::CStr>,
    target: &std::ffi::CStr,
    kind: Option<&std::ffi::CStr>,
    flags: libc::c_ulong,
) -> std::io::Result<()> {
    let ptr = |s: Option<&std::ffi::CStr>| s.map_or(std::ptr::null(), std::ffi::CStr::as_ptr);
    // SAFETY: every pointer is a C string the caller owns, or null where mount allows it.
    check(unsafe {
        libc::mount(
            ptr(source),
            target.as_ptr(),
            ptr(kind),
            flags,
            std::ptr::null(),
        )
    })
}

/// The flags a read-only remount must repeat: in a user namespace the kernel refuses
/// to clear `nosuid`, `nodev`, `noexec` or the atime mode of a mount it did not make.
fn read_only_flags(dir: &Path) -> Result<libc::c_ulong, Error> {
    let path = c_path(dir)?;
    // SAFETY: statvfs fills the zeroed struct it is given from a C string path.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &raw mut stat) } != 0 {
        return Err(io(dir, &std::io::Error::last_os_error()));
    }
    let pairs = [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ];
    Ok(pairs
        .iter()
        .filter(|(st, _)| stat.f_flag & st != 0)
        .fold(0, |flags, (_, ms)| flags | ms))
}

/// Each directory from `scratch` down to `scratch/<path>`.
fn mkdirs(parts: &mut Vec<Part>, scratch: &Path, path: &Path) -> Result<(), Error> {
    let mut at = scratch.to_path_buf();
    for component in relative(path).components() {
        at.push(component);
        parts.push(Part::Mkdir {
            target: c_path(&at)?,
        });
    }
    Ok(())
}

fn relative(path: &Path) -> PathBuf {
    path.strip_prefix("/").unwrap_or(path).to_path_buf()
}

fn c_path(path: &Path) -> Result<CString, Error> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        Error::new(
            "E-CAP-013",
            format!("the path {} holds a NUL byte", path.display()),
        )
    })
}

fn io(path: &Path, e: &std::io::Error) -> Error {
    Error::new(
        "E-CAP-013",
        format!(
            "the sealed root could not be planned: {}: {e}",
            path.display()
        ),
    )
}

fn check(rc: libc::c_int) -> std::io::Result<()> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}
