//! Host file I/O inside a directory that guests can write.
//!
//! A tool or a shell command may leave a symbolic link anywhere in the capsule's
//! workdir, pointing anywhere (`out/result.txt -> ../../../etc/cron.d/x`). The host
//! writes there too, so it never opens a path joined from workdir pieces: every
//! operation goes through a handle on the workdir that resolves paths beneath it and
//! refuses any that would lead out, and every file it writes is created fresh beside
//! its target and renamed over it, which replaces a planted link instead of following
//! it.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::fs::{Dir, OpenOptions};

/// A directory the host writes into although a guest may have planted links in it.
pub struct Rooted {
    dir: Dir,
    path: PathBuf,
}

static TEMP_SEQ: AtomicU64 = AtomicU64::new(0);

impl Rooted {
    /// Opens `path`, which the host itself chose (never a guest).
    pub fn open(path: &Path) -> io::Result<Self> {
        let dir = Dir::open_ambient_dir(path, cap_std::ambient_authority())?;
        Ok(Rooted {
            dir,
            path: path.to_path_buf(),
        })
    }

    /// Replaces the file at `rel` with `bytes`. A link at `rel` is replaced, not
    /// followed; a parent folder that leads outside is refused.
    pub fn write(&self, rel: &str, bytes: &[u8]) -> io::Result<()> {
        self.write_beside(rel, bytes)
            .map_err(|e| self.link_on_the_way(rel).unwrap_or(e))
    }

    fn write_beside(&self, rel: &str, bytes: &[u8]) -> io::Result<()> {
        let (mut file, tmp) = self.temp_beside(rel)?;
        let written = file.write_all(bytes).and_then(|()| file.flush());
        drop(file);
        let renamed = written.and_then(|()| self.dir.rename(&tmp, &self.dir, rel));
        if renamed.is_err() {
            let _ = self.dir.remove_file(&tmp);
        }
        renamed.map_err(|e| refused(rel, e))
    }

    /// Adds `bytes` at the end of the file at `rel` by writing it anew: for the host's
    /// small append-only files in the workdir, which a link must not redirect either.
    pub fn append(&self, rel: &str, bytes: &[u8]) -> io::Result<()> {
        let mut text = match self.regular_file(rel) {
            Ok(true) => self.dir.read(rel).map_err(|e| refused(rel, e))?,
            Ok(false) => Vec::new(),
            Err(e) => return Err(e),
        };
        text.extend_from_slice(bytes);
        self.write(rel, &text)
    }

    /// A new file at `rel` (its folders created), open for writing and reading back,
    /// for output the host streams into it. Fails if anything, a link included, is
    /// already there. Read it back through this handle, never by its path again.
    pub fn create_new(&self, rel: &str) -> io::Result<std::fs::File> {
        if let Some(parent) = parent_of(rel) {
            self.dir
                .create_dir_all(parent)
                .map_err(|e| refused(rel, e))?;
        }
        self.dir
            .open_with(
                rel,
                OpenOptions::new().read(true).write(true).create_new(true),
            )
            .map(cap_std::fs::File::into_std)
            .map_err(|e| refused(rel, e))
    }

    /// The text of the file at `rel`, if it resolves beneath this directory.
    pub fn read_to_string(&self, rel: &str) -> io::Result<String> {
        self.dir.read_to_string(rel)
    }

    /// At most `limit` bytes of the regular file at `rel`, if it resolves beneath this
    /// directory, and whether the file holds more: for files a guest names, which may
    /// be endless (a fifo, a device) or huge. Links are followed only while they stay
    /// beneath this directory.
    pub fn read_bounded(&self, rel: &str, limit: u64) -> io::Result<(Vec<u8>, bool)> {
        use std::io::Read;
        // Checked before opening too: opening a fifo for reading would wait for a writer.
        if !self.dir.metadata(rel)?.is_file() {
            return Err(io::Error::other(format!("{rel} is not a regular file")));
        }
        let file = self.dir.open(rel)?;
        if !file.metadata()?.is_file() {
            return Err(io::Error::other(format!("{rel} is not a regular file")));
        }
        let mut bytes = Vec::new();
        file.into_std()
            .take(limit.saturating_add(1))
            .read_to_end(&mut bytes)?;
        let more = bytes.len() as u64 > limit;
        bytes.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        Ok((bytes, more))
    }

    /// Removes the file (or link) at `rel`, beneath this directory.
    pub fn remove_file(&self, rel: &str) -> io::Result<()> {
        self.dir.remove_file(rel).map_err(|e| refused(rel, e))
    }

    /// Creates the folder `rel` and its parents beneath this directory.
    pub fn create_dir_all(&self, rel: &str) -> io::Result<()> {
        self.dir.create_dir_all(rel).map_err(|e| refused(rel, e))
    }

    /// Opens the folder `rel` (created if missing), refusing it when it, or any
    /// folder on the way to it, is a symbolic link.
    pub fn open_dir_strict(&self, rel: &str) -> io::Result<Rooted> {
        let mut walked = PathBuf::new();
        for part in Path::new(rel).components() {
            walked.push(part);
            match self.dir.symlink_metadata(&walked) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    return Err(io::Error::other(format!(
                        "{} is a symbolic link; the host does not follow links there",
                        self.path.join(&walked).display()
                    )));
                }
                Ok(meta) if !meta.is_dir() => {
                    return Err(io::Error::other(format!(
                        "{} is not a folder",
                        self.path.join(&walked).display()
                    )));
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    self.dir.create_dir(&walked).map_err(|e| refused(rel, e))?;
                }
                Err(e) => return Err(refused(rel, e)),
            }
        }
        Ok(Rooted {
            dir: self.dir.open_dir(rel).map_err(|e| refused(rel, e))?,
            path: self.path.join(rel),
        })
    }

    /// A path that names exactly the opened folder, even if its name is later swapped
    /// for a link: for APIs that take a path, such as a component's preopen.
    pub fn fd_path(&self) -> PathBuf {
        use std::os::fd::AsRawFd;
        PathBuf::from(format!("/proc/self/fd/{}", self.dir.as_raw_fd()))
    }

    /// What the entry at `rel` occupies now (a link as itself), 0 when missing: what a
    /// write replacing it gives back.
    pub fn size_of(&self, rel: &str) -> u64 {
        self.dir.symlink_metadata(rel).map_or(0, |m| m.len())
    }

    /// After a refused write: the folder on the way to `rel` that is a link (one that
    /// stays inside is followed; this one led out), named, in place of the system's
    /// less telling error.
    fn link_on_the_way(&self, rel: &str) -> Option<io::Error> {
        let mut walked = PathBuf::new();
        for part in parent_of(rel)?.components() {
            walked.push(part);
            let meta = self.dir.symlink_metadata(&walked).ok()?;
            if meta.file_type().is_symlink() {
                return Some(io::Error::other(format!(
                    "{} is a symbolic link that leads outside the workdir; the host does \
                     not write through it",
                    walked.display()
                )));
            }
        }
        None
    }

    /// Whether `rel` is a regular file (`false` when missing); a link is refused.
    fn regular_file(&self, rel: &str) -> io::Result<bool> {
        match self.dir.symlink_metadata(rel) {
            Ok(meta) if meta.file_type().is_symlink() => Err(io::Error::other(format!(
                "{rel} is a symbolic link; the host does not follow links there"
            ))),
            Ok(meta) => Ok(meta.is_file()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(refused(rel, e)),
        }
    }

    /// A fresh temporary file in `rel`'s folder, and its name.
    fn temp_beside(&self, rel: &str) -> io::Result<(std::fs::File, PathBuf)> {
        let parent = parent_of(rel);
        if let Some(parent) = parent {
            self.dir
                .create_dir_all(parent)
                .map_err(|e| refused(rel, e))?;
        }
        let name = Path::new(rel)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let seq = TEMP_SEQ.fetch_add(1, Ordering::Relaxed);
        let tmp_name = format!(".{name}.{}-{seq}.tmp", std::process::id());
        let tmp = match parent {
            Some(parent) => parent.join(tmp_name),
            None => PathBuf::from(tmp_name),
        };
        let file = self
            .dir
            .open_with(&tmp, OpenOptions::new().write(true).create_new(true))
            .map_err(|e| refused(rel, e))?;
        Ok((file.into_std(), tmp))
    }
}

fn parent_of(rel: &str) -> Option<&Path> {
    Path::new(rel)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
}

/// The error, saying which path it was about (cap-std's own text names no path).
fn refused(rel: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{rel}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mur-rooted-{name}-{}", crate::ids::event()));
        std::fs::create_dir_all(dir.join("view")).unwrap();
        dir
    }

    #[test]
    fn a_link_at_the_target_is_replaced_not_followed() {
        let dir = scratch("target");
        std::fs::write(dir.join("victim"), "precious").unwrap();
        std::fs::create_dir_all(dir.join("view/out")).unwrap();
        symlink("../../victim", dir.join("view/out/result.txt")).unwrap();
        let view = Rooted::open(&dir.join("view")).unwrap();
        view.write("out/result.txt", b"answer").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("victim")).unwrap(),
            "precious"
        );
        let meta = std::fs::symlink_metadata(dir.join("view/out/result.txt")).unwrap();
        assert!(meta.is_file());
        assert_eq!(
            std::fs::read_to_string(dir.join("view/out/result.txt")).unwrap(),
            "answer"
        );
    }

    #[test]
    fn a_parent_that_leads_outside_is_refused() {
        let dir = scratch("parent");
        std::fs::create_dir_all(dir.join("elsewhere")).unwrap();
        symlink("../elsewhere", dir.join("view/out")).unwrap();
        let view = Rooted::open(&dir.join("view")).unwrap();
        let e = view.write("out/result.txt", b"answer").unwrap_err();
        assert_eq!(
            e.to_string(),
            "out is a symbolic link that leads outside the workdir; the host does not write \
             through it"
        );
        assert!(view.create_new("out/log.txt").is_err());
        assert_eq!(std::fs::read_dir(dir.join("elsewhere")).unwrap().count(), 0);
    }

    #[test]
    fn a_parent_link_that_stays_inside_is_followed() {
        let dir = scratch("inside");
        std::fs::create_dir_all(dir.join("view/results")).unwrap();
        symlink("results", dir.join("view/out")).unwrap();
        let view = Rooted::open(&dir.join("view")).unwrap();
        view.write("out/result.txt", b"answer").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("view/results/result.txt")).unwrap(),
            "answer"
        );
    }

    #[test]
    fn append_refuses_a_link_and_keeps_what_was_there() {
        let dir = scratch("append");
        std::fs::write(dir.join("victim"), "precious").unwrap();
        let view = Rooted::open(&dir.join("view")).unwrap();
        view.append("log.jsonl", b"one\n").unwrap();
        view.append("log.jsonl", b"two\n").unwrap();
        assert_eq!(view.read_to_string("log.jsonl").unwrap(), "one\ntwo\n");
        symlink("../victim", dir.join("view/linked.jsonl")).unwrap();
        assert!(view.append("linked.jsonl", b"x").is_err());
        assert_eq!(
            std::fs::read_to_string(dir.join("victim")).unwrap(),
            "precious"
        );
    }

    #[test]
    fn reads_do_not_leave_the_directory() {
        let dir = scratch("read");
        std::fs::write(dir.join("secret"), "s3cret").unwrap();
        symlink("../secret", dir.join("view/task.md")).unwrap();
        let view = Rooted::open(&dir.join("view")).unwrap();
        assert!(view.read_to_string("task.md").is_err());
    }

    #[test]
    fn a_strict_folder_refuses_links_on_the_way() {
        let dir = scratch("strict");
        std::fs::create_dir_all(dir.join("elsewhere")).unwrap();
        symlink("../elsewhere", dir.join("view/hooks")).unwrap();
        let view = Rooted::open(&dir.join("view")).unwrap();
        let e = view.open_dir_strict("hooks/memory").err().unwrap();
        assert!(e.to_string().contains("is a symbolic link"), "{e}");
        let fresh = view.open_dir_strict("data/memory").unwrap();
        fresh.write("memory.md", b"m").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("view/data/memory/memory.md")).unwrap(),
            "m"
        );
        assert!(fresh.fd_path().is_dir());
    }
}
