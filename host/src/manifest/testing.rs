//! What the manifest tests share: a scratch capsule directory, a fixed environment and
//! the manifests they start from.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{Loaded, Result, load_with_env};
use crate::error::Error;

/// A unique directory under the system temp dir, removed on drop.
pub(super) struct Scratch(pub(super) PathBuf);

impl Scratch {
    pub(super) fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("mur-manifest-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let scratch = Scratch(std::path::absolute(dir).unwrap());
        scratch.file("s.json", "[]");
        scratch
    }

    pub(super) fn file(&self, rel: &str, content: &str) -> PathBuf {
        let path = self.0.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
        path
    }

    pub(super) fn load(&self, yaml: &str) -> Result<Loaded> {
        let path = self.file("murmur.yaml", yaml);
        load_with_env(&path, &test_env)
    }

    pub(super) fn ok(&self, yaml: &str) -> Loaded {
        match self.load(yaml) {
            Ok(loaded) => loaded,
            Err(e) => panic!("expected a valid manifest, got:\n{e}"),
        }
    }

    pub(super) fn err(&self, yaml: &str) -> Error {
        match self.load(yaml) {
            Ok(loaded) => panic!("expected an error, got {loaded:#?}"),
            Err(e) => e,
        }
    }

    pub(super) fn path(&self, rel: &str) -> String {
        self.0.join(rel).display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(super) fn test_env(name: &str) -> Option<String> {
    match name {
        "LOCAL_MODEL_KEY" => Some("sk-local".to_string()),
        "MODEL_URL" => Some("http://127.0.0.1:11434/v1".to_string()),
        "MODEL_NAME" => Some("qwen2.5-coder".to_string()),
        "ANTHROPIC_API_KEY" => Some("sk-test".to_string()),
        _ => None,
    }
}

/// Lines 1-5; whatever a test appends starts at line 6.
pub(super) const BASE: &str =
    "name: t\nversion: \"1\"\ninference:\n  driver: scripted\n  script: s.json\n";

pub(super) fn base(extra: &str) -> String {
    format!("{BASE}{extra}")
}

pub(super) fn text(e: &Error) -> String {
    e.to_string()
}

pub(super) const EXAMPLE: &str = r#"name: notes-agent
version: "0.3.0"

artifacts:
  - name: driver-openai-compat
    version: "0.1.0"
    runtime: driver
    source: ./components/driver-openai-compat.wasm
    local_source: true
  - name: house-style
    source: ./skills/house-style/
    runtime: skill
  - name: memory-seed          # binding on-task-start, seed-context
    version: "1.0.0"
    runtime: hook
    source: hooks/memory-seed.wasm
    capabilities:
      filesystem:
        scope: memory
  - name: result-gate          # binding on-task-end, reopen-task
    version: "1.0.0"
    runtime: hook
    source: hooks/result-gate.wasm
    on_overflow: block

capabilities:
  network:
    allow:
      - http://127.0.0.1:11434
  shell:
    allow: [bash]

network:
  internal_port: 52222

inference:
  transport: http
  endpoint: http://127.0.0.1:11434
  model: qwen2.5-coder
  api_key: ${LOCAL_MODEL_KEY}
  driver:
    artifact: driver-openai-compat
    config: { temperature: 0.2 }
  max_turns: 12
  max_tokens: 4096
  system_prompt: |
    Keep answers short. Write final notes to notes.md.
  compaction:
    threshold: 0.9

context:
  max_tokens: 128000
  seed_budget: 0.05
  seed_overflow_margin: 0.2

lifecycle:
  task_acceptance: queue
  after_task: sleep
  queue_depth: 4
  conversation: threaded
  max_task_reopens: 2
  shell_grace_secs: 20
  input_timeout_secs: 300
  task_history: 250

description: Keeps notes on what it reads.
"#;

pub(super) fn example_files(s: &Scratch) {
    s.file("components/driver-openai-compat.wasm", "");
    s.file("skills/house-style/skill.md", "# House style");
    s.file("hooks/memory-seed.wasm", "");
    s.file("hooks/result-gate.wasm", "");
}

pub(super) fn hook_entry(extra: &str) -> String {
    format!("{BASE}artifacts:\n  - name: gate\n    runtime: hook\n    source: h.wasm\n{extra}")
}

pub(super) fn caps(extra: &str) -> String {
    base(&format!("capabilities:\n{extra}"))
}

pub(super) fn artifact_yaml(entry: &str) -> String {
    base(&format!("artifacts:\n  - name: a\n{entry}"))
}
