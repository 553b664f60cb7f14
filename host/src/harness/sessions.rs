//! The harness's own session of each threaded context: the id its first task's run
//! reported, handed back to the next task of that context so the harness continues its
//! conversation. Kept in the host's records beside the threaded conversations (one file
//! per context, named by the context's hash), so a resumed capsule continues too. The
//! records are outside every guest's view (the sandbox never lets a program reach
//! them, see `confine::server`), so plain file calls cannot meet a planted link.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The longest session id kept: harnesses use UUIDs.
const MAX_ID: usize = 256;

pub struct Sessions {
    dir: PathBuf,
    harness: String,
    records: Arc<crate::records::Budget>,
}

impl Sessions {
    pub fn new(dir: PathBuf, harness: &str, records: Arc<crate::records::Budget>) -> Self {
        Sessions {
            dir,
            harness: harness.to_string(),
            records,
        }
    }

    /// The session to continue in `context_id`, if one was kept by the same harness,
    /// with what the harness had counted it using (input, output) when its last run
    /// ended.
    pub fn get(&self, context_id: &str) -> Option<(String, (u64, u64))> {
        let text = std::fs::read_to_string(self.file(context_id)).ok()?;
        let kept: Value = serde_json::from_str(&text).ok()?;
        let same = kept["context_id"] == context_id && kept["harness"] == self.harness.as_str();
        let id = kept["session"].as_str().filter(|_| same)?;
        let used = (
            kept["input"].as_u64().unwrap_or(0),
            kept["output"].as_u64().unwrap_or(0),
        );
        usable(id).then(|| (id.to_string(), used))
    }

    /// Keeps `id` as the context's session. An id that is not a plain token is not kept:
    /// it goes back on the harness's command line.
    ///
    /// # Errors
    ///
    /// The records budget refused it, or it could not be written.
    pub fn keep(&self, context_id: &str, id: &str, used: (u64, u64)) -> Result<(), String> {
        if !usable(id) {
            return Err(format!(
                "the harness reported a session id that is not a plain token ({} bytes); \
                 it was not kept",
                id.len()
            ));
        }
        let text = json!({"context_id": context_id, "harness": self.harness, "session": id,
                          "input": used.0, "output": used.1})
        .to_string();
        let file = self.file(context_id);
        let old = std::fs::symlink_metadata(&file).map_or(0, |m| m.len());
        let what = format!("keeping the harness session of context {context_id:?}");
        self.records.resize(&what, old, text.len() as u64)?;
        let tmp = file.with_extension("json.tmp");
        std::fs::create_dir_all(&self.dir)
            .and_then(|()| std::fs::write(&tmp, text.as_bytes()))
            .and_then(|()| std::fs::rename(&tmp, &file))
            .map_err(|e| {
                format!(
                    "could not keep the harness session in {}: {e}",
                    file.display()
                )
            })
    }

    /// Forgets the context's session (the harness could not resume it): its next task
    /// starts a new one.
    pub fn forget(&self, context_id: &str) {
        let file = self.file(context_id);
        let old = std::fs::symlink_metadata(&file).map_or(0, |m| m.len());
        if std::fs::remove_file(&file).is_ok() {
            let _ = self.records.resize("forgetting a harness session", old, 0);
        }
    }

    fn file(&self, context_id: &str) -> PathBuf {
        let digest = Sha256::digest(context_id.as_bytes());
        let name: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{name}.json"))
    }
}

/// Letters, digits, `-` and `_`: nothing an argument parser could read as an option.
fn usable(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID
        && !id.starts_with('-')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget() -> Arc<crate::records::Budget> {
        Arc::new(crate::records::Budget::unlimited())
    }

    #[test]
    fn a_context_gets_back_its_own_session_and_no_other() {
        let dir =
            std::env::temp_dir().join(format!("mur-harness-sessions-{}", crate::ids::token()));
        let sessions = Sessions::new(dir.clone(), "claude-code", budget());
        assert_eq!(sessions.get("ctx-a"), None);
        sessions
            .keep("ctx-a", "0b7c9c1e-2a52-4c39-9d5f-61f0e3c1a001", (40, 12))
            .unwrap();
        assert_eq!(
            sessions.get("ctx-a"),
            Some(("0b7c9c1e-2a52-4c39-9d5f-61f0e3c1a001".to_string(), (40, 12)))
        );
        assert_eq!(sessions.get("ctx-b"), None);
        let other = Sessions::new(dir.clone(), "codex", budget());
        assert_eq!(
            other.get("ctx-a"),
            None,
            "another harness's session is not resumed"
        );
        assert!(sessions.keep("ctx-a", "--dangerous", (0, 0)).is_err());
        sessions.forget("ctx-a");
        assert_eq!(
            sessions.get("ctx-a"),
            None,
            "a forgotten session is not resumed"
        );
        assert!(sessions.keep("ctx-a", "a b", (0, 0)).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }
}
