//! The registry on disk: one folder per capsule under `DATA/capsules/`, holding its
//! entry (`capsule.json`), its manifest when it came in a request body, its workdir
//! (`work/`) and its records (`records/`). What a restart brings back is what is here.
//!
//! Only `work/` is in a guest's view; everything else here is the host's alone, so it
//! is read and written with plain file calls. `work/` itself is only ever removed whole,
//! and `remove_dir_all` never follows a link a guest planted there.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// A capsule as the registry keeps it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Entry {
    pub id: String,
    /// Milliseconds since the Unix epoch.
    pub created_at: u64,
    /// The manifest it is loaded from.
    pub manifest: PathBuf,
    /// Whether the manifest came in the request body (and lives beside the entry).
    pub from_body: bool,
    /// The SHA-256 of its address's token; `None` when its address is open.
    pub token_sha256: Option<String>,
    pub limits: Limits,
    /// Stopped by the operator: it stays stopped across restarts until started.
    pub stopped: bool,
    /// The formation it is a member of (`POST /admin/formations`); absent for a capsule
    /// created alone, and in every entry written before formations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formation: Option<Membership>,
}

/// A capsule's place in a formation.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Membership {
    /// `frm_` and 32 hex digits.
    pub id: String,
    /// Its name in the roster, which its callers call it by.
    pub member: String,
    #[serde(default)]
    pub entry: bool,
}

/// The ceilings set at creation.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Linear memory across all the capsule's instances.
    pub memory_bytes: Option<u64>,
    /// Connections open to its address at once.
    pub connections: Option<usize>,
    /// Tasks waiting in its queue.
    pub queued_tasks: Option<u32>,
    /// Its CPU share in millicores: what its guests are sure of when others wait, and
    /// its weight among guests. Written in cores (`"cpu": 0.5`), as Kubernetes does.
    #[serde(default, with = "cores")]
    pub cpu: Option<u32>,
    /// Tokens its inference may use per UTC day (`crate::spend`).
    pub tokens_per_day: Option<u64>,
}

/// `limits.cpu` in cores on the wire and on disk, in millicores here.
mod cores {
    use serde::{Deserialize, Deserializer, Serializer};

    /// A thousandth of a core, up to a machine far larger than any today.
    const MOST: f64 = 1024.0;

    pub fn serialize<S: Serializer>(v: &Option<u32>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(m) => s.serialize_f64(f64::from(*m) / 1000.0),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
        let written = match Option::<serde_json::Value>::deserialize(d)? {
            None | Some(serde_json::Value::Null) => return Ok(None),
            Some(v) => v,
        };
        let cores = written.as_f64().filter(|c| (0.001..=MOST).contains(c));
        let Some(cores) = cores else {
            return Err(serde::de::Error::custom(format!(
                "limits.cpu is {written}: a share is a number of cores from 0.001 to {MOST}, \
                 such as 0.5"
            )));
        };
        // In range, so the product fits u32.
        Ok(Some((cores * 1000.0).round() as u32))
    }
}

pub struct Registry {
    root: PathBuf,
    /// `DATA/formations/`: one folder per formation (`serve::formations`).
    formations: PathBuf,
}

/// Whether `id` is one the registry mints (`cap_` and 32 hex digits): anything else
/// names no capsule, and never a path.
pub fn is_id(id: &str) -> bool {
    id.strip_prefix("cap_")
        .is_some_and(|hex| hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

impl Registry {
    pub fn open(data: &Path) -> Result<Registry, Error> {
        let root = data.join("capsules");
        std::fs::create_dir_all(&root).map_err(|e| {
            Error::new(
                "E-SERVE-001",
                format!("could not create {}: {e}", root.display()),
            )
            .hint("pass --data DIR on a writable disk")
        })?;
        Ok(Registry {
            root,
            formations: data.join("formations"),
        })
    }

    /// The folder of formation `id`, which [`crate::formation::is_id`] has checked.
    pub fn formation_dir(&self, id: &str) -> PathBuf {
        self.formations.join(id)
    }

    /// Every formation folder's name that is a formation id.
    pub fn formation_ids(&self) -> Vec<String> {
        let Ok(dirs) = std::fs::read_dir(&self.formations) else {
            return Vec::new();
        };
        let mut ids: Vec<String> = dirs
            .flatten()
            .map(|d| d.file_name().to_string_lossy().into_owned())
            .filter(|name| crate::formation::is_id(name))
            .collect();
        ids.sort();
        ids
    }

    pub fn dir(&self, id: &str) -> PathBuf {
        self.root.join(id)
    }

    pub fn workdir(&self, id: &str) -> PathBuf {
        self.dir(id).join("work")
    }

    pub fn records(&self, id: &str) -> PathBuf {
        self.dir(id).join("records")
    }

    pub fn journal(&self, id: &str) -> PathBuf {
        self.records(id).join("replay.journal")
    }

    /// The capsule's A2A task store, kept across its sessions.
    pub fn tasks(&self, id: &str) -> PathBuf {
        self.records(id).join(crate::task_store::JOURNAL_FILE)
    }

    /// The capsule's tokens of the UTC day, kept across restarts of the server.
    pub fn spend_ledger(&self, id: &str) -> PathBuf {
        self.records(id).join("spend-day")
    }

    /// Every entry on disk, oldest first; folders without a readable entry are skipped
    /// and named in the second list.
    pub fn load(&self) -> (Vec<Entry>, Vec<String>) {
        let mut entries = Vec::new();
        let mut skipped = Vec::new();
        let Ok(dirs) = std::fs::read_dir(&self.root) else {
            return (entries, skipped);
        };
        for dir in dirs.flatten() {
            let name = dir.file_name().to_string_lossy().into_owned();
            if !is_id(&name) {
                continue;
            }
            let path = dir.path().join("capsule.json");
            match std::fs::read(&path) {
                Ok(bytes) => match serde_json::from_slice::<Entry>(&bytes) {
                    Ok(entry) if entry.id == name => entries.push(entry),
                    Ok(_) => skipped.push(format!("{}: the id does not match", path.display())),
                    Err(e) => skipped.push(format!("{}: {e}", path.display())),
                },
                // Deleted with its workdir kept: no entry, nothing to bring back.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => skipped.push(format!("{}: {e}", path.display())),
            }
        }
        entries.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        (entries, skipped)
    }

    /// Writes the entry whole or not at all: a crash leaves the old one or the new one.
    pub fn save(&self, entry: &Entry) -> Result<(), Error> {
        let dir = self.dir(&entry.id);
        let bytes = serde_json::to_vec_pretty(entry)
            .map_err(|e| Error::new("E-SERVE-003", format!("could not encode the entry: {e}")))?;
        let tmp = dir.join("capsule.json.tmp");
        let written = std::fs::create_dir_all(&dir)
            .and_then(|()| write_new(&tmp, &bytes))
            .and_then(|()| std::fs::rename(&tmp, dir.join("capsule.json")));
        written.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Error::new(
                "E-SERVE-003",
                format!(
                    "could not save capsule {} in {}: {e}",
                    entry.id,
                    dir.display()
                ),
            )
            .hint("check that the --data folder is writable and not full")
        })
    }

    /// Stores a manifest that came in a request body beside the entry.
    pub fn save_manifest(&self, id: &str, yaml: &str) -> Result<PathBuf, Error> {
        let dir = self.dir(id);
        let path = dir.join("murmur.yaml");
        std::fs::create_dir_all(&dir)
            .and_then(|()| write_new(&path, yaml.as_bytes()))
            .map_err(|e| {
                Error::new(
                    "E-SERVE-003",
                    format!("could not store the manifest in {}: {e}", dir.display()),
                )
            })?;
        Ok(path)
    }

    /// Forgets a capsule: its entry goes, and with `workdir` its whole folder.
    pub fn remove(&self, id: &str, workdir: bool) -> Result<(), Error> {
        let dir = self.dir(id);
        // `remove_dir_all` never follows a link, so a link a tenant left in its
        // workdir cannot take the operator's files with it.
        let removed = if workdir {
            std::fs::remove_dir_all(&dir)
        } else {
            std::fs::remove_file(dir.join("capsule.json"))
        };
        match removed {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::new(
                "E-SERVE-003",
                format!("could not remove capsule {id} from {}: {e}", dir.display()),
            )),
            _ => Ok(()),
        }
    }
}

/// A file written afresh (what was at the path, a link included, is replaced).
pub fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let _ = std::fs::remove_file(path);
    super::create_private(path, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_minted_ids_name_a_capsule() {
        assert!(is_id("cap_0123456789abcdef0123456789abcdef"));
        for bad in [
            "cap_",
            "cap_../../etc",
            "ses_0123456789abcdef0123456789abcdef",
            "",
        ] {
            assert!(!is_id(bad), "{bad}");
        }
    }
}
