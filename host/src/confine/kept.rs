//! Small files the confined shell keeps across runs (what the `/etc` walk found, the
//! kernel's namespace probes), in `<cache>/confine/`, where `<cache>` is found as the
//! compiled components' cache is: `MUR_CACHE_DIR`, else `$XDG_CACHE_HOME/mur`, else
//! `~/.cache/mur`.
//!
//! A kept file is hostile input. It is read only from a folder the user owns and no one
//! else may write, opened without following a link, and only when it is a regular file
//! of the user's, writable by no one else, and small; anything else reads as nothing
//! kept. Writes go to a fresh name and are renamed over the old, so a reader never sees
//! half a file. Both happen relative to the folder once opened and checked, so swapping
//! a folder on the way for another does not redirect them.

use std::ffi::{CStr, CString};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The folder's name beside `components/`.
const FOLDER: &str = "confine";

/// `<cache>`, by the rule the components' cache follows (see `engine::cache_dir`).
fn cache_root() -> Option<PathBuf> {
    let from = |var: &str| std::env::var_os(var).filter(|v| !v.is_empty());
    from("MUR_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| from("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("mur")))
        .or_else(|| from("HOME").map(|h| PathBuf::from(h).join(".cache").join("mur")))
}

/// The folder kept files live in, opened; `None` when there is no cache dir or the
/// folder is not the user's alone (then nothing is kept, and every run works afresh).
pub struct Folder {
    fd: OwnedFd,
}

impl Folder {
    /// `<cache>/confine`, made (0700) when missing.
    pub fn open() -> Option<Folder> {
        let root = cache_root()?;
        Folder::open_in(&root)
    }

    /// `<root>/confine`: the tests' own cache root.
    pub fn open_in(root: &Path) -> Option<Folder> {
        let dir = root.join(FOLDER);
        if std::fs::symlink_metadata(&dir).is_err() {
            std::fs::create_dir_all(root).ok()?;
            let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
        }
        let path = c_path(&dir)?;
        // SAFETY: open on a C string; the descriptor is owned from here on.
        let fd = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return None;
        }
        // SAFETY: a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let stat = fstat(&fd)?;
        let ours = stat.st_uid == euid() && stat.st_mode & 0o022 == 0;
        ours.then_some(Folder { fd })
    }

    /// The bytes of `name`, when it is a regular file of the user's that no one else
    /// may write, of at most `max` bytes.
    pub fn read(&self, name: &CStr, max: u64) -> Option<Vec<u8>> {
        // SAFETY: openat relative to the folder's descriptor, on a C string.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                name.as_ptr(),
                // O_NONBLOCK: a FIFO planted under the name must not hang the launch.
                libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK,
            )
        };
        if fd < 0 {
            return None;
        }
        // SAFETY: a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let stat = fstat(&fd)?;
        let size = u64::try_from(stat.st_size).ok()?;
        let plain = stat.st_mode & libc::S_IFMT == libc::S_IFREG;
        if !plain || stat.st_uid != euid() || stat.st_mode & 0o022 != 0 || size > max {
            return None;
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).ok()?);
        // One byte past the limit tells a file that grew since the fstat.
        std::fs::File::from(fd)
            .take(max + 1)
            .read_to_end(&mut bytes)
            .ok()?;
        (bytes.len() as u64 <= max).then_some(bytes)
    }

    /// Replaces `name` with `bytes`: written under a fresh name, then renamed over it.
    /// Failing, it leaves the old file (or none) and no stray one.
    pub fn write(&self, name: &CStr, bytes: &[u8]) -> std::io::Result<()> {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let mut tmp = name.to_bytes().to_vec();
        tmp.extend_from_slice(format!(".{}-{n}.tmp", std::process::id()).as_bytes());
        let tmp = CString::new(tmp).map_err(std::io::Error::other)?;
        // SAFETY: openat relative to the folder's descriptor, on a C string.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                tmp.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o600,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nothing else owns.
        let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let dir = self.fd.as_raw_fd();
        // SAFETY: renameat within the folder, on C strings; it replaces a link at the
        // destination rather than following it.
        let written = file.write_all(bytes).and_then(|()| {
            let rc = unsafe { libc::renameat(dir, tmp.as_ptr(), dir, name.as_ptr()) };
            if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
        if written.is_err() {
            // SAFETY: unlinkat within the folder, on a C string.
            unsafe { libc::unlinkat(dir, tmp.as_ptr(), 0) };
        }
        written
    }

    /// Removes `name`; nothing when it is not there.
    pub fn forget(&self, name: &CStr) {
        // SAFETY: unlinkat within the folder, on a C string.
        unsafe { libc::unlinkat(self.fd.as_raw_fd(), name.as_ptr(), 0) };
    }
}

fn fstat(fd: &OwnedFd) -> Option<libc::stat> {
    // SAFETY: fstat fills the zeroed struct it is given.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    (unsafe { libc::fstat(fd.as_raw_fd(), &raw mut stat) } == 0).then_some(stat)
}

fn euid() -> libc::uid_t {
    // SAFETY: geteuid cannot fail and takes no arguments.
    unsafe { libc::geteuid() }
}

fn c_path(path: &Path) -> Option<CString> {
    CString::new(path.as_os_str().as_bytes()).ok()
}

/// This boot of the kernel: what it keeps is not carried into the next one, where
/// device and inode numbers, namespaces and settings may all differ.
pub fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let id = id.trim();
    (!id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'))
        .then(|| id.to_string())
}

/// The namespace `kind` (`mnt`, `user`, `pid`) this process is in, as `kind:[inode]`.
pub fn namespace(kind: &str) -> String {
    std::fs::read_link(format!("/proc/self/ns/{kind}"))
        .map_or_else(|_| "-".into(), |l| l.to_string_lossy().into_owned())
}

/// `bytes` as one token with no space, newline or `%` in it (and back), so a path of
/// any bytes fits on a line of a kept file.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_graphic() && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02x}"));
        }
    }
    out
}

/// The inverse of [`escape`]; `None` for anything [`escape`] would not have written.
pub fn unescape(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len());
    let mut bytes = text.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex = [bytes.next()?, bytes.next()?];
            let hex = std::str::from_utf8(&hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
        } else if b.is_ascii_graphic() {
            out.push(b);
        } else {
            return None;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mur-kept-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_kept_file_reads_back_and_is_replaced_whole() {
        let root = scratch("roundtrip");
        let folder = Folder::open_in(&root).expect("a folder of the user's");
        assert_eq!(folder.read(c"x", 100), None);
        folder.write(c"x", b"first").unwrap();
        folder.write(c"x", b"second").unwrap();
        assert_eq!(folder.read(c"x", 100).as_deref(), Some(&b"second"[..]));
        // Nothing but the file itself is left behind.
        let names: Vec<_> = std::fs::read_dir(root.join(FOLDER))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["x"]);
        let mode = std::fs::metadata(root.join(FOLDER).join("x"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        folder.forget(c"x");
        assert_eq!(folder.read(c"x", 100), None);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_link_a_large_file_and_a_file_of_another_user_or_writable_by_others_are_not_read() {
        let root = scratch("hostile");
        let folder = Folder::open_in(&root).unwrap();
        let dir = root.join(FOLDER);
        std::fs::write(dir.join("target"), "kept").unwrap();
        symlink(dir.join("target"), dir.join("link")).unwrap();
        assert_eq!(folder.read(c"target", 100).as_deref(), Some(&b"kept"[..]));
        assert_eq!(folder.read(c"link", 100), None, "a link is not followed");
        assert_eq!(folder.read(c"target", 3), None, "over the size limit");
        std::fs::set_permissions(dir.join("target"), std::fs::Permissions::from_mode(0o666))
            .unwrap();
        assert_eq!(folder.read(c"target", 100), None, "writable by others");
        std::fs::create_dir(dir.join("folder")).unwrap();
        assert_eq!(folder.read(c"folder", 100), None, "not a regular file");
        // Another user's file (only root can make one to try).
        std::fs::write(dir.join("theirs"), "kept").unwrap();
        if std::os::unix::fs::chown(dir.join("theirs"), Some(65534), Some(65534)).is_ok() {
            assert_eq!(folder.read(c"theirs", 100), None, "another user's");
        }
        // A write replaces the link itself and leaves its target alone.
        folder.write(c"link", b"new").unwrap();
        assert_eq!(std::fs::read(dir.join("target")).unwrap(), b"kept");
        assert_eq!(folder.read(c"link", 100).as_deref(), Some(&b"new"[..]));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_folder_of_another_user_or_writable_by_others_or_a_link_keeps_nothing() {
        let root = scratch("folder");
        std::fs::create_dir(root.join(FOLDER)).unwrap();
        std::fs::set_permissions(root.join(FOLDER), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        assert!(Folder::open_in(&root).is_none(), "writable by others");
        std::fs::set_permissions(root.join(FOLDER), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        if std::os::unix::fs::chown(root.join(FOLDER), Some(65534), None).is_ok() {
            assert!(Folder::open_in(&root).is_none(), "another user's");
        }
        let other = scratch("folder-elsewhere");
        std::fs::remove_dir_all(root.join(FOLDER)).unwrap();
        symlink(&other, root.join(FOLDER)).unwrap();
        assert!(Folder::open_in(&root).is_none(), "a link to a folder");
        std::fs::remove_dir_all(&root).unwrap();
        std::fs::remove_dir_all(&other).unwrap();
    }

    #[test]
    fn any_bytes_escape_to_one_token_and_back() {
        let bytes = b"/etc/a b\n%c\xff\x00";
        let token = escape(bytes);
        assert!(!token.contains([' ', '\n']), "{token}");
        assert_eq!(unescape(&token).as_deref(), Some(&bytes[..]));
        assert_eq!(unescape("%zz"), None);
        assert_eq!(unescape("a%4"), None);
        assert_eq!(unescape("a b"), None);
    }
}
