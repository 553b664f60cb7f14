//! The component store: every component pulled from a registry, kept under its
//! digest (`<cache>/blobs/sha256/<hex>.wasm`) beside the compiled forms, so a locked
//! capsule runs offline and two capsules naming one digest share one file and one
//! compiled form. A file is written under a temporary name, hashed as it is written,
//! and renamed into place only when its digest is the one asked for.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use http_body_util::BodyExt;
use sha2::{Digest, Sha256};

use super::progress::Progress;
use crate::error::Error;
use crate::outbound::PooledBody;
use crate::outbound::reply::transport;

/// The largest component mur pulls.
pub const MAX_COMPONENT: u64 = 512 * 1024 * 1024;

/// `sha256:<hex>` of `bytes`.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(bytes)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// The store of this user's component cache.
    pub fn open() -> Result<Store, Error> {
        let root = crate::engine::cache_root().ok_or_else(|| {
            Error::new(
                "E-REG-010",
                "there is no component cache to keep components in",
            )
            .hint("set MUR_CACHE_DIR, XDG_CACHE_HOME or HOME")
        })?;
        let dir = root.join("blobs").join("sha256");
        std::fs::create_dir_all(&dir).map_err(|e| {
            Error::new(
                "E-REG-010",
                format!("could not create {}: {e}", dir.display()),
            )
            .hint("make the cache folder writable, or set MUR_CACHE_DIR to another")
        })?;
        Ok(Store { dir })
    }

    /// Where the component `digest` is kept.
    pub fn path(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
        self.dir.join(format!("{hex}.wasm"))
    }

    /// The kept component `digest`, if a file of a component's size is there; its bytes
    /// are checked where they are read and hashed anyway (staging).
    pub fn kept(&self, digest: &str) -> Option<PathBuf> {
        let path = self.path(digest);
        let meta = std::fs::symlink_metadata(&path).ok()?;
        (meta.is_file() && meta.len() <= MAX_COMPONENT).then_some(path)
    }

    /// The kept component `digest`, read back and checked: a file whose bytes no longer
    /// hash to its name is refused, naming both digests.
    pub fn verified(&self, digest: &str, what: &str) -> Result<Option<PathBuf>, Error> {
        let path = self.path(digest);
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            return Ok(None);
        };
        if !meta.is_file() || meta.len() > MAX_COMPONENT {
            return Err(mismatch(
                what,
                digest,
                "a file that is not a component",
                &path,
            ));
        }
        let found = file_digest(&path).map_err(|e| {
            Error::new(
                "E-REG-010",
                format!("could not read {}: {e}", path.display()),
            )
        })?;
        if found != digest {
            return Err(mismatch(what, digest, &found, &path));
        }
        Ok(Some(path))
    }

    /// Writes `body` as the component `digest` (`size` bytes, as its descriptor says),
    /// refusing more bytes than that, fewer, or bytes that hash to another digest.
    pub async fn write(
        &self,
        digest: &str,
        size: u64,
        body: &mut PooledBody,
        progress: &mut Progress,
    ) -> Result<PathBuf, Error> {
        if size > MAX_COMPONENT {
            return Err(Error::new(
                "E-REG-007",
                format!(
                    "{} is {size} bytes, more than the {MAX_COMPONENT} mur takes",
                    progress.what()
                ),
            )
            .hint("a component that large is not one mur runs"));
        }
        let tmp = self.dir.join(format!(
            ".{}.{}.part",
            digest.trim_start_matches("sha256:"),
            uuid::Uuid::new_v4().simple()
        ));
        let written = write_checked(&tmp, size, body, progress).await;
        let found = match written {
            Ok(found) => found,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
        };
        if found != digest {
            let _ = std::fs::remove_file(&tmp);
            return Err(Error::new(
                "E-REG-006",
                format!(
                    "{} does not match its digest: the registry named {digest}, the bytes that came are {found}",
                    progress.what()
                ),
            )
            .hint("the registry's copy is damaged or was tampered with; nothing was kept"));
        }
        let path = self.path(digest);
        std::fs::rename(&tmp, &path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Error::new(
                "E-REG-010",
                format!("could not keep {}: {e}", path.display()),
            )
        })?;
        Ok(path)
    }
}

async fn write_checked(
    tmp: &Path,
    size: u64,
    body: &mut PooledBody,
    progress: &mut Progress,
) -> Result<String, Error> {
    let io = |e: std::io::Error| {
        Error::new(
            "E-REG-010",
            format!("could not write {}: {e}", tmp.display()),
        )
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(tmp)
        .map_err(io)?;
    let mut hasher = Sha256::new();
    let mut got: u64 = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            Error::new(
                "E-REG-002",
                format!("{} broke off: {}", progress.what(), transport(&e)),
            )
            .hint("try again; a pull that breaks keeps nothing")
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        got += data.len() as u64;
        if got > size {
            return Err(Error::new(
                "E-REG-006",
                format!(
                    "{} sent more than the {size} bytes its manifest names",
                    progress.what()
                ),
            )
            .hint("the registry's copy is damaged or was tampered with; nothing was kept"));
        }
        hasher.update(&data);
        file.write_all(&data).map_err(io)?;
        progress.advance(data.len() as u64);
    }
    if got != size {
        return Err(Error::new(
            "E-REG-006",
            format!("{} ended after {got} of its {size} bytes", progress.what()),
        )
        .hint("try again; a pull that breaks keeps nothing"));
    }
    file.sync_all().map_err(io)?;
    progress.done();
    Ok(format!("sha256:{}", hex(&hasher.finalize())))
}

/// `sha256:<hex>` of a file, read in pieces.
pub fn file_digest(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(format!("sha256:{}", hex(&hasher.finalize())))
}

/// A kept component whose bytes hash to another digest than its lock's.
pub fn mismatch(what: &str, want: &str, found: &str, path: &Path) -> Error {
    Error::new(
        "E-REG-006",
        format!("{what}: the lock pins {want}, but the cached copy is {found}"),
    )
    .hint(format!(
        "the cache was changed behind mur's back; remove {} and run `mur install` again",
        path.display()
    ))
}
