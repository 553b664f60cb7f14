//! Threaded conversations (`lifecycle.conversation: threaded`): each context's history,
//! kept across its tasks and written to disk, so a restarted or resumed capsule picks up
//! a conversation where it stopped.
//!
//! The files live in the host's records, beside the sessions' own (`conversations/`),
//! out of every guest's view, one per context. A client's
//! `contextId` is kept verbatim and may hold any character, so the file is named by its
//! hash and the id is stored inside.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

pub struct Threads {
    dir: PathBuf,
    loaded: Mutex<HashMap<String, Vec<Value>>>,
}

impl Threads {
    pub fn new(dir: PathBuf) -> Self {
        Threads {
            dir,
            loaded: Mutex::new(HashMap::new()),
        }
    }

    /// The context's conversation so far; empty for a new context or an unreadable file
    /// (which is logged by the caller's `warn`).
    pub fn history(&self, context_id: &str, warn: impl Fn(String)) -> Vec<Value> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(messages) = loaded.get(context_id) {
            return messages.clone();
        }
        let messages = match read(&self.file(context_id), context_id) {
            Ok(messages) => messages,
            Err(why) => {
                warn(why);
                Vec::new()
            }
        };
        loaded.insert(context_id.to_string(), messages.clone());
        messages
    }

    /// Replaces the context's conversation, in memory and on disk (written whole to a
    /// temporary file, then renamed, so a crash never leaves half a conversation).
    pub fn keep(&self, context_id: &str, messages: Vec<Value>) -> Result<(), String> {
        let text = json!({"context_id": context_id, "messages": messages}).to_string();
        self.loaded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(context_id.to_string(), messages);
        let file = self.file(context_id);
        let tmp = file.with_extension("json.tmp");
        std::fs::create_dir_all(&self.dir)
            .and_then(|()| std::fs::write(&tmp, crate::secret::scrub(&text).as_bytes()))
            .and_then(|()| std::fs::rename(&tmp, &file))
            .map_err(|e| format!("could not keep the conversation in {}: {e}", file.display()))
    }

    fn file(&self, context_id: &str) -> PathBuf {
        let digest = Sha256::digest(context_id.as_bytes());
        let name: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{name}.json"))
    }
}

/// A stored conversation; a missing file is a new context.
fn read(file: &Path, context_id: &str) -> Result<Vec<Value>, String> {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("could not read {}: {e}", file.display())),
    };
    let stored: Value = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a stored conversation: {e}", file.display()))?;
    if stored["context_id"] != context_id {
        return Err(format!(
            "{} belongs to another context; starting this one afresh",
            file.display()
        ));
    }
    match &stored["messages"] {
        Value::Array(messages) => Ok(messages.clone()),
        _ => Err(format!("{} holds no message list", file.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mur-threads-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_kept_conversation_is_found_by_a_new_store() {
        let dir = dir("reload");
        let messages = vec![json!({"role": "user", "content": "hi"})];
        Threads::new(dir.clone())
            .keep("ctx/../odd id", messages.clone())
            .expect("kept");
        let again = Threads::new(dir.clone());
        assert_eq!(again.history("ctx/../odd id", |w| panic!("{w}")), messages);
        assert!(again.history("other", |w| panic!("{w}")).is_empty());
        let names: Vec<_> = std::fs::read_dir(&dir).expect("dir").collect();
        assert_eq!(names.len(), 1, "one file, named by hash, inside the folder");
    }

    #[test]
    fn a_damaged_file_starts_the_context_afresh_and_says_so() {
        let dir = dir("damaged");
        let threads = Threads::new(dir.clone());
        threads.keep("c", vec![json!(1)]).expect("kept");
        let file = threads.file("c");
        std::fs::write(&file, "{not json").expect("write");
        let warnings = Mutex::new(Vec::new());
        let fresh = Threads::new(dir);
        assert!(
            fresh
                .history("c", |w| warnings.lock().expect("lock").push(w))
                .is_empty()
        );
        assert_eq!(warnings.lock().expect("lock").len(), 1);
    }
}
