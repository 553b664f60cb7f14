//! `murmur.lock`, beside the manifest: what `mur install` resolved, so that `mur run`
//! runs exactly those components, from the cache, offline. Upstream Murmur's
//! `lock_version: 3` shape (`name`, `resolved_version`, `sha256.any`, `origin`), with
//! the registry each came from; upstream ignores the keys it does not know.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::Error;

pub const FILE: &str = "murmur.lock";
const VERSION: u64 = 3;
/// Far larger than any lock of a real capsule; reading stops there.
const MAX_BYTES: u64 = 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The artifact's full name, scope included.
    pub name: String,
    pub version: String,
    /// `sha256:<hex>` of the component.
    pub digest: String,
    /// `host[:port]/namespace` it was resolved under.
    pub registry: String,
    /// The full reference it was resolved from.
    pub reference: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lock {
    pub entries: Vec<Entry>,
}

pub fn path_beside(manifest: &Path) -> PathBuf {
    manifest
        .parent()
        .map_or_else(|| PathBuf::from(FILE), |dir| dir.join(FILE))
}

impl Lock {
    /// The lock at `path`, `None` when there is none.
    pub fn read(path: &Path) -> Result<Option<Lock>, Error> {
        let bad = |why: String| {
            Error::new(
                "E-REG-011",
                format!("{} cannot be used: {why}", path.display()),
            )
            .hint("run `mur install` to write it again")
        };
        let text = match crate::home_config::read_small(path, MAX_BYTES) {
            Ok(None) => return Ok(None),
            Ok(Some(text)) => text,
            Err(why) => return Err(bad(why)),
        };
        let doc = crate::manifest::yaml_to_json(&text)
            .map_err(|why| bad(format!("it is not YAML ({why})")))?;
        let raw: Raw = serde_json::from_value(doc).map_err(|e| bad(format!("{e}")))?;
        if raw.lock_version != VERSION {
            return Err(bad(format!(
                "its lock_version is {}, and this mur reads {VERSION}",
                raw.lock_version
            )));
        }
        let mut entries = Vec::new();
        for a in raw.artifacts {
            let hex = a.sha256.any.unwrap_or_default();
            let digest = format!("sha256:{hex}");
            if !super::reference::is_digest(&digest) {
                return Err(bad(format!(
                    "the sha256 of '{}' is not 64 hex digits",
                    crate::escape::line(&a.name)
                )));
            }
            entries.push(Entry {
                name: a.name,
                version: a.resolved_version,
                digest,
                registry: a.registry.unwrap_or_default(),
                reference: a.reference.unwrap_or_default(),
            });
        }
        Ok(Some(Lock { entries }))
    }

    /// The entry for artifact `name` at `version`.
    pub fn find(&self, name: &str, version: &str) -> Option<&Entry> {
        self.entries
            .iter()
            .find(|e| e.name == name && e.version == version)
    }

    /// The lock as text: upstream's keys first, then ours.
    pub fn render(&self) -> String {
        let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
        let mut out = String::from(
            "# Written by `mur install`: the components this capsule runs, by digest.\n\
             # `mur run` runs exactly these; delete an entry (or the file) to resolve again.\n\
             lock_version: 3\nartifacts:\n",
        );
        if self.entries.is_empty() {
            out = out.replace("artifacts:\n", "artifacts: []\n");
        }
        for e in &self.entries {
            out.push_str(&format!(
                "  - name: {}\n    resolved_version: {}\n    sha256:\n      any: {}\n    origin: operator\n    registry: {}\n    reference: {}\n",
                q(&e.name),
                q(&e.version),
                e.digest.trim_start_matches("sha256:"),
                q(&e.registry),
                q(&e.reference),
            ));
        }
        out
    }

    /// Writes the lock at `path`, replacing it whole (a temporary file renamed).
    pub fn write(&self, path: &Path) -> Result<(), Error> {
        let tmp = path.with_extension(format!("lock.tmp{}", std::process::id()));
        let written =
            std::fs::write(&tmp, self.render()).and_then(|()| std::fs::rename(&tmp, path));
        written.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Error::new(
                "E-REG-011",
                format!("could not write {}: {e}", path.display()),
            )
            .hint("make the manifest's folder writable")
        })
    }
}

#[derive(Deserialize)]
struct Raw {
    lock_version: u64,
    #[serde(default)]
    artifacts: Vec<RawEntry>,
}

#[derive(Deserialize)]
struct RawEntry {
    name: String,
    resolved_version: String,
    sha256: RawSha,
    registry: Option<String>,
    reference: Option<String>,
}

#[derive(Deserialize)]
struct RawSha {
    any: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str) -> Entry {
        Entry {
            name: name.into(),
            version: "1.0.0".into(),
            digest: format!("sha256:{}", "ab".repeat(32)),
            registry: "127.0.0.1:5000/team".into(),
            reference: format!("127.0.0.1:5000/team/{name}:1.0.0"),
        }
    }

    #[test]
    fn a_lock_reads_back_as_written() {
        let dir = std::env::temp_dir().join(format!("mur-lock-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(FILE);
        let lock = Lock {
            entries: vec![entry("echo"), entry("murmur/driver-anthropic")],
        };
        lock.write(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("lock_version: 3\n"), "{text}");
        assert!(
            text.contains(&format!("      any: {}\n", "ab".repeat(32))),
            "{text}"
        );
        assert_eq!(Lock::read(&path).unwrap(), Some(lock));
        assert_eq!(Lock::read(&dir.join("none")).unwrap(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_bad_lock_is_refused_naming_why() {
        let dir = std::env::temp_dir().join(format!("mur-lock-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(FILE);
        for (text, why) in [
            (
                "lock_version: 2\nartifacts: []\n",
                "its lock_version is 2, and this mur reads 3",
            ),
            (
                "lock_version: 3\nartifacts:\n  - name: a\n    resolved_version: \"1\"\n    sha256: {any: zz}\n",
                "the sha256 of 'a' is not 64 hex digits",
            ),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = Lock::read(&path).unwrap_err();
            assert_eq!(e.code, "E-REG-011");
            assert!(e.message.ends_with(why), "{}", e.message);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
