//! A manifest without `inference` runs an upstream Murmur capsule component in place
//! of a model-driven loop, found as upstream's `mur run` finds it: `capsule.wasm` beside
//! `murmur.yaml`, else the only other `*.wasm` file there (upstream's fixtures name it
//! in no key). The `.wasm` files its artifacts[] entries name are theirs, not the
//! capsule's. With no such file the manifest is what it was: one that lacks its driver.
//!
//! The top-level `runtime` is upstream's packaging role of the manifest; `capsule` is
//! the one a manifest run here can have. It selects nothing: upstream writes it on
//! model-driven capsules too.

use std::path::{Path, PathBuf};

use super::fields::{Cx, Section};
use super::tree::show;
use super::{Artifact, Compaction, DriverRef, Inference, Result, Retry, Timeouts, Transport};
use crate::error::Error;

/// The component upstream looks for first.
const PREFERRED: &str = "capsule.wasm";

/// Checks the top-level `runtime`, if written.
pub(super) fn runtime(cx: &Cx, top: &Section) -> Result<()> {
    let Some((runtime, line)) = top.opt_str(cx, "runtime")? else {
        return Ok(());
    };
    if runtime == "capsule" {
        return Ok(());
    }
    // Worded as the other top-level keys' errors (`name`, `loop`): "manifest config".
    let message = format!(
        "{}: invalid manifest config for 'runtime': '{}' is not a capsule's runtime",
        cx.loc(Some(line)),
        show(&runtime)
    );
    Err(Error::new("E-MAN-003", message).hint(
        "write 'runtime: capsule' or leave it out; tool, driver, hook, skill and loop are \
         runtimes of artifacts[] entries",
    ))
}

/// The capsule component a manifest without `inference` runs; `None` when it has
/// `inference`, or when no component sits beside it.
pub(super) fn component(cx: &Cx, top: &Section, artifacts: &[Artifact]) -> Result<Option<PathBuf>> {
    if top.entries.iter().any(|e| e.key == "inference") {
        return Ok(None);
    }
    let preferred = cx.dir.join(PREFERRED);
    if preferred.is_file() {
        return Ok(Some(preferred));
    }
    let mut found = candidates(&cx.dir, artifacts);
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => {
            let names: Vec<String> = found
                .iter()
                .filter_map(|p| p.file_name())
                .map(|n| format!("'{}'", show(&n.to_string_lossy())))
                .collect();
            Err(Error::new(
                "E-RUN-004",
                format!(
                    "{}: there is no 'inference', and more than one component beside it could \
                     be the capsule's: {}",
                    cx.loc(None),
                    names.join(", ")
                ),
            )
            .hint(format!(
                "name the capsule's component {PREFERRED}, or set 'inference' to run a \
                 model-driven capsule"
            )))
        }
    }
}

/// The `*.wasm` files in `dir` that no artifact names as its source, sorted.
fn candidates(dir: &Path, artifacts: &[Artifact]) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "wasm") && p.is_file())
        .filter(|p| !artifacts.iter().any(|a| same_file(&a.source, p)))
        .collect();
    found.sort();
    found
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// What a capsule component's session has for `inference`: no model. The driver is
/// never called (the component cannot ask for inference), so the cheapest built-in
/// stands in for it; `model: none` is what the host's records and hooks show.
pub(super) fn no_inference() -> Inference {
    Inference {
        transport: Transport::Http,
        endpoint: None,
        model: "none".to_string(),
        api_key: None,
        driver: DriverRef::Builtin {
            name: "openai".to_string(),
            script: None,
        },
        max_turns: 1,
        max_tokens: 1,
        max_session_tokens: None,
        system_prompt: None,
        system_prompt_from_cli: false,
        temperature: None,
        top_p: None,
        stream: false,
        retry: Retry::default(),
        timeouts: Timeouts::default(),
        compaction: Compaction::default(),
        command: None,
        home: None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    const HEAD: &str = "name: t\nversion: \"1\"\n";

    #[test]
    fn without_inference_the_capsule_wasm_beside_it_is_run() {
        let s = Scratch::new();
        s.file("capsule.wasm", "");
        s.file("other.wasm", "");
        let m = s.ok(&format!("{HEAD}runtime: capsule\n"));
        assert_eq!(m.warnings, vec![]);
        assert_eq!(m.manifest.capsule, Some(s.0.join("capsule.wasm")));
        assert_eq!(m.manifest.inference.model, "none");
    }

    #[test]
    fn the_only_wasm_that_is_no_artifact_s_is_the_capsule_s() {
        let s = Scratch::new();
        s.file("tool.wasm", "");
        s.file("probe.wasm", "");
        let yaml = format!("{HEAD}artifacts:\n  - name: tool\n    source: tool.wasm\n");
        assert_eq!(s.ok(&yaml).manifest.capsule, Some(s.0.join("probe.wasm")));
        s.file("second.wasm", "");
        let e = s.err(&yaml);
        assert_eq!(e.code, "E-RUN-004");
        assert_eq!(
            e.message,
            "murmur.yaml: there is no 'inference', and more than one component beside it \
             could be the capsule's: 'probe.wasm', 'second.wasm'"
        );
    }

    #[test]
    fn with_inference_or_no_component_nothing_changes() {
        let s = Scratch::new();
        s.file("capsule.wasm", "");
        let m = s
            .ok(&format!("{HEAD}inference:\n  script: s.json\n"))
            .manifest;
        assert_eq!(m.capsule, None);
        let bare = Scratch::new();
        assert_eq!(bare.err(HEAD).code, "E-RUN-005", "the driver is missing");
    }

    #[test]
    fn runtime_is_capsule_or_nothing() {
        let s = Scratch::new();
        s.file("capsule.wasm", "");
        let e = s.err(&format!("{HEAD}runtime: tool\n"));
        assert_eq!(
            text(&e),
            "error[E-MAN-003]: murmur.yaml:3: invalid manifest config for 'runtime': 'tool' is \
             not a capsule's runtime\n  hint: write 'runtime: capsule' or leave it out; tool, \
             driver, hook, skill and loop are runtimes of artifacts[] entries"
        );
    }
}
