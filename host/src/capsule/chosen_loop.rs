//! Which session loop a run uses, and how it is named wherever a user looks: `--loop
//! PATH.wasm` first, else the upstream capsule component of a manifest without
//! `inference` (it runs in the loop's place), else the manifest's loop artifact
//! (`loop: NAME`, or its only `runtime: loop` entry), else the loop built into mur.

use std::path::{Path, PathBuf};

use super::stage::{artifact_wasm, read_component};
use crate::builtin;
use crate::engine::Wasm;
use crate::error::Error;
use crate::manifest::Manifest;

/// Where the loop came from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Origin {
    Builtin,
    Artifact,
    Path(PathBuf),
    Capsule,
}

/// The loop's identity: `name` and `version` go on `session_start` (`loop`,
/// `loop_version`) and the `--json` launch line; `label` names it in errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopIdentity {
    pub name: String,
    pub version: Option<String>,
    pub label: String,
    origin: Origin,
}

/// The name `session_start.loop` gives the built-in loop.
const BUILTIN_NAME: &str = "default";

impl LoopIdentity {
    fn builtin() -> Self {
        LoopIdentity {
            name: BUILTIN_NAME.to_string(),
            version: Some(env!("CARGO_PKG_VERSION").to_string()),
            label: "built-in session loop".to_string(),
            origin: Origin::Builtin,
        }
    }

    fn artifact(name: &str, version: Option<&str>) -> Self {
        LoopIdentity {
            name: name.to_string(),
            version: version.map(str::to_string),
            label: format!("session loop artifact '{name}'"),
            origin: Origin::Artifact,
        }
    }

    /// A file passed with `--loop` has no name but its own and no version.
    fn path(path: &Path) -> Self {
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        LoopIdentity {
            name,
            version: None,
            label: format!("session loop {}", path.display()),
            origin: Origin::Path(path.to_path_buf()),
        }
    }

    /// An upstream capsule component is named by its file, as upstream finds it.
    fn capsule(path: &Path) -> Self {
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        LoopIdentity {
            label: format!("capsule component '{name}'"),
            name,
            version: None,
            origin: Origin::Capsule,
        }
    }

    /// One line for people: the launch line's `loop:` and MURMUR.md's "Session loop".
    pub fn shown(&self) -> String {
        match (&self.origin, &self.version) {
            (Origin::Builtin, version) => format!(
                "{} (built-in, mur {})",
                self.name,
                version.as_deref().unwrap_or_default()
            ),
            (Origin::Artifact, Some(version)) => format!("{} v{version}", self.name),
            (Origin::Artifact, None) => format!("{} (no version)", self.name),
            (Origin::Path(path), _) => format!("{} (--loop {})", self.name, path.display()),
            (Origin::Capsule, _) => format!("{} (upstream capsule component, no model)", self.name),
        }
    }
}

/// The loop's component bytes and identity. The manifest checked at load that its loop
/// artifact exists; the bytes are read here, before anything is created.
pub(super) fn choose(
    m: &Manifest,
    loop_path: Option<&Path>,
) -> Result<(Wasm, LoopIdentity), Error> {
    if let Some(path) = loop_path {
        let identity = LoopIdentity::path(path);
        return Ok((Wasm::read(read_component(path, &identity.label)?), identity));
    }
    if let Some(path) = &m.capsule {
        let identity = LoopIdentity::capsule(path);
        return Ok((Wasm::read(read_component(path, &identity.label)?), identity));
    }
    match m.loop_artifact() {
        Some(artifact) => {
            let identity = LoopIdentity::artifact(&artifact.name, artifact.version.as_deref());
            Ok((artifact_wasm(artifact, &identity.label)?, identity))
        }
        None => Ok((builtin::session_loop(), LoopIdentity::builtin())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_origin_is_shown_with_its_name_and_version() {
        let mur = env!("CARGO_PKG_VERSION");
        let builtin = LoopIdentity::builtin();
        assert_eq!(
            (builtin.name.as_str(), builtin.version.as_deref()),
            ("default", Some(mur))
        );
        assert_eq!(builtin.shown(), format!("default (built-in, mur {mur})"));
        assert_eq!(builtin.label, "built-in session loop");

        let planner = LoopIdentity::artifact("planner", Some("0.2.1"));
        assert_eq!(planner.shown(), "planner v0.2.1");
        assert_eq!(planner.label, "session loop artifact 'planner'");
        let bare = LoopIdentity::artifact("bare", None);
        assert_eq!(bare.shown(), "bare (no version)");

        let file = LoopIdentity::path(Path::new("/loops/my-loop.wasm"));
        assert_eq!(
            (file.name.as_str(), file.version.as_deref()),
            ("my-loop.wasm", None)
        );
        assert_eq!(file.shown(), "my-loop.wasm (--loop /loops/my-loop.wasm)");
        assert_eq!(file.label, "session loop /loops/my-loop.wasm");

        let capsule = LoopIdentity::capsule(Path::new("/c/capsule.wasm"));
        assert_eq!(
            (capsule.name.as_str(), capsule.label.as_str()),
            ("capsule.wasm", "capsule component 'capsule.wasm'")
        );
        assert_eq!(
            capsule.shown(),
            "capsule.wasm (upstream capsule component, no model)"
        );
    }
}
