//! Threaded conversations (`lifecycle.conversation: threaded`): each context's history,
//! kept across its tasks and written to disk, so a restarted or resumed capsule picks up
//! a conversation where it stopped.
//!
//! The files live in the host's records, beside the sessions' own (`conversations/`),
//! out of every guest's view, one per context. A client's
//! `contextId` is kept verbatim and may hold any character, so the file is named by its
//! hash and the id is stored inside.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::memory::Cap;

/// Conversations kept in memory, at most this many bytes of their JSON text: the
/// rest are read back from disk when their context speaks again, so a capsule with
/// thousands of contexts holds no more than this.
const CACHE_BYTES: u64 = 64 * 1024 * 1024;

pub struct Threads {
    dir: PathBuf,
    loaded: Mutex<Cache>,
    records: Arc<crate::records::Budget>,
    /// Under `mur serve`, what the cache holds is charged to the capsule's memory
    /// budget; a conversation the budget cannot hold is read from disk when needed.
    memory: crate::memory::Cap,
}

/// The most recently used conversations, within `CACHE_BYTES`.
#[derive(Default)]
struct Cache {
    entries: HashMap<String, (Vec<Value>, u64, crate::memory::Charge)>,
    /// Least recently used first.
    order: VecDeque<String>,
    bytes: u64,
}

impl Cache {
    fn get(&mut self, context_id: &str) -> Option<Vec<Value>> {
        let messages = self.entries.get(context_id)?.0.clone();
        self.touch(context_id);
        Some(messages)
    }

    fn touch(&mut self, context_id: &str) {
        self.order.retain(|c| c != context_id);
        self.order.push_back(context_id.to_string());
    }

    fn put(&mut self, context_id: &str, messages: Vec<Value>, bytes: u64, memory: &Cap) {
        if let Some((_, old, _)) = self.entries.remove(context_id) {
            self.bytes -= old;
        }
        self.order.retain(|c| c != context_id);
        let Ok(charge) = memory.charge(bytes, "a cached conversation") else {
            return;
        };
        self.touch(context_id);
        self.entries
            .insert(context_id.to_string(), (messages, bytes, charge));
        self.bytes += bytes;
        while self.bytes > CACHE_BYTES {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some((_, freed, _)) = self.entries.remove(&oldest) {
                self.bytes -= freed;
            }
        }
    }
}

impl Threads {
    /// The conversations in `dir`, whose writes ask `records` first.
    pub fn new(dir: PathBuf, records: Arc<crate::records::Budget>, memory: Cap) -> Self {
        Threads {
            dir,
            loaded: Mutex::new(Cache::default()),
            records,
            memory,
        }
    }

    /// The context's conversation so far; empty for a new context or an unreadable file
    /// (which is logged by the caller's `warn`).
    pub fn history(&self, context_id: &str, warn: impl Fn(String)) -> Vec<Value> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(messages) = loaded.get(context_id) {
            return messages;
        }
        let file = self.file(context_id);
        let messages = match read(&file, context_id) {
            Ok(messages) => messages,
            Err(why) => {
                warn(why);
                Vec::new()
            }
        };
        let bytes = std::fs::metadata(&file).map_or(0, |m| m.len());
        loaded.put(context_id, messages.clone(), bytes, &self.memory);
        messages
    }

    /// Replaces the context's conversation, in memory and on disk (written whole to a
    /// temporary file, then renamed, so a crash never leaves half a conversation).
    /// The records budget may refuse it: the conversation then stays as it was, in
    /// memory and on disk, and `Err` says why.
    pub fn keep(&self, context_id: &str, messages: Vec<Value>) -> Result<(), String> {
        let text = json!({"context_id": context_id, "messages": messages}).to_string();
        let text = crate::secret::scrub(&text);
        let file = self.file(context_id);
        let old = std::fs::symlink_metadata(&file).map_or(0, |m| m.len());
        let what = format!("keeping the conversation of context {context_id:?}");
        self.records.resize(&what, old, text.len() as u64)?;
        self.loaded.lock().unwrap_or_else(|p| p.into_inner()).put(
            context_id,
            messages,
            text.len() as u64,
            &self.memory,
        );
        let tmp = file.with_extension("json.tmp");
        std::fs::create_dir_all(&self.dir)
            .and_then(|()| std::fs::write(&tmp, text.as_bytes()))
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

    fn alone() -> Cap {
        Cap {
            each: 1,
            shared: None,
            hostcall_bytes: 1,
        }
    }

    fn unlimited() -> Arc<crate::records::Budget> {
        Arc::new(crate::records::Budget::unlimited())
    }

    #[test]
    fn the_records_budget_refuses_a_conversation_and_keeps_the_old_one() {
        let dir = dir("budget");
        let budget = Arc::new(crate::records::Budget::new(200, 0));
        let threads = Threads::new(dir.clone(), budget.clone(), alone());
        threads.keep("c", vec![json!("short")]).expect("kept");
        let e = threads.keep("c", vec![json!("x".repeat(300))]).unwrap_err();
        assert!(
            e.contains("capabilities.limits.max_records_bytes (200)"),
            "{e}"
        );
        let fresh = Threads::new(dir, unlimited(), alone());
        assert_eq!(fresh.history("c", |w| panic!("{w}")), vec![json!("short")]);
        assert!(budget.failure().is_some());
    }

    #[test]
    fn the_cache_keeps_only_the_most_recent_within_its_bytes() {
        let mut cache = Cache::default();
        let m = alone();
        cache.put("a", vec![json!(1)], CACHE_BYTES / 2, &m);
        cache.put("b", vec![json!(2)], CACHE_BYTES / 2, &m);
        assert!(cache.get("a").is_some());
        cache.put("c", vec![json!(3)], 10, &m);
        assert!(cache.get("b").is_none(), "the least recently used went");
        assert!(cache.get("a").is_some() && cache.get("c").is_some());
        assert_eq!(cache.bytes, CACHE_BYTES / 2 + 10);
    }

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mur-threads-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_kept_conversation_is_found_by_a_new_store() {
        let dir = dir("reload");
        let messages = vec![json!({"role": "user", "content": "hi"})];
        Threads::new(dir.clone(), unlimited(), alone())
            .keep("ctx/../odd id", messages.clone())
            .expect("kept");
        let again = Threads::new(dir.clone(), unlimited(), alone());
        assert_eq!(again.history("ctx/../odd id", |w| panic!("{w}")), messages);
        assert!(again.history("other", |w| panic!("{w}")).is_empty());
        let names: Vec<_> = std::fs::read_dir(&dir).expect("dir").collect();
        assert_eq!(names.len(), 1, "one file, named by hash, inside the folder");
    }

    #[test]
    fn a_damaged_file_starts_the_context_afresh_and_says_so() {
        let dir = dir("damaged");
        let threads = Threads::new(dir.clone(), unlimited(), alone());
        threads.keep("c", vec![json!(1)]).expect("kept");
        let file = threads.file("c");
        std::fs::write(&file, "{not json").expect("write");
        let warnings = Mutex::new(Vec::new());
        let fresh = Threads::new(dir, unlimited(), alone());
        assert!(
            fresh
                .history("c", |w| warnings.lock().expect("lock").push(w))
                .is_empty()
        );
        assert_eq!(warnings.lock().expect("lock").len(), 1);
    }
}
