//! `artifacts[]`: the tools, drivers, hooks, skills and session loops a capsule declares,
//! and their sources on disk.

use std::path::PathBuf;

use super::fields::{Cx, Field, Section};
use super::hooks::{hook_contract, no_hook_keys, on_overflow};
use super::tree::{Val, join};
use super::{Artifact, Result, Runtime, checked_name};

const RUNTIMES: &[(&str, Runtime)] = &[
    ("tool", Runtime::Tool),
    ("driver", Runtime::Driver),
    ("hook", Runtime::Hook),
    ("skill", Runtime::Skill),
    ("loop", Runtime::Loop),
];

impl Runtime {
    pub(super) fn as_str(self) -> &'static str {
        RUNTIMES
            .iter()
            .find(|(_, r)| *r == self)
            .map_or("tool", |(name, _)| name)
    }
}

pub(super) fn artifacts(cx: &mut Cx, top: &Section) -> Result<Vec<Artifact>> {
    let items = top.opt_list(cx, "artifacts")?.unwrap_or_default();
    let mut out: Vec<Artifact> = Vec::new();
    for item in &items {
        let artifact = artifact(cx, item)?;
        if let Some(first) = out.iter().find(|a| a.name == artifact.name) {
            let why = format!("artifact name '{}' is used twice", artifact.name);
            let hint = format!("the first is at line {}; names must be unique", first.line);
            let path = format!("{}.name", item.path);
            return Err(cx.invalid(artifact.line, &path, why).hint(hint));
        }
        out.push(artifact);
    }
    Ok(out)
}

fn artifact(cx: &mut Cx, item: &Field) -> Result<Artifact> {
    let sec = item.section(cx, "artifacts[]")?;
    let (full_name, line) = sec.req_str(cx, "name")?;
    let name_path = join(&sec.path, "name");
    let name = match full_name.split_once('/') {
        // Upstream's scoped names: the session knows the artifact by the part after
        // the scope, the registry and the lock by the whole.
        Some((scope, bare)) => {
            checked_name(cx, scope.to_string(), line, &name_path)?;
            checked_name(cx, bare.to_string(), line, &name_path)?
        }
        None => checked_name(cx, full_name.clone(), line, &name_path)?,
    };
    let runtime = sec
        .opt_enum(cx, "runtime", RUNTIMES)?
        .unwrap_or(Runtime::Tool);
    sec.opt_bool(cx, "local_source")?;
    let capabilities = match sec.field("capabilities") {
        Some(f) if matches!(f.node.val, Val::Map(_)) => Some(f.json(cx)?),
        Some(f) => return Err(f.expected(cx, "a mapping")),
        None => None,
    };
    let hook = match runtime {
        Runtime::Hook => Some(hook_contract(cx, &sec)?),
        _ => {
            no_hook_keys(cx, &sec, runtime)?;
            None
        }
    };
    let version = sec.opt_str(cx, "version")?.map(|(v, _)| v);
    let source = artifact_source(cx, &sec, &name, runtime)?;
    if source.is_none() && version.is_none() {
        let hint = "an artifact without 'source' is fetched from the registry by its name and \
                    version: add 'version', or set 'source' to its file";
        return Err(cx.missing(sec.line, &join(&sec.path, "version")).hint(hint));
    }
    Ok(Artifact {
        description: sec.opt_str(cx, "description")?.map(|(v, _)| v),
        on_overflow: on_overflow(cx, &sec, runtime)?,
        hook,
        gateway: super::gateway::gateway(cx, &sec, runtime)?,
        from_registry: source.is_none(),
        pinned: None,
        source: source.unwrap_or_default(),
        version,
        line: item.line,
        name,
        full_name,
        runtime,
        capabilities,
    })
}

/// The artifact's `source`, absolute; `None` when it has none (the registry's).
fn artifact_source(
    cx: &Cx,
    sec: &Section,
    name: &str,
    runtime: Runtime,
) -> Result<Option<PathBuf>> {
    let path = join(&sec.path, "source");
    let Some((rel, line)) = sec.opt_str(cx, "source")? else {
        return Ok(None);
    };
    let abs = cx.resolve(&rel);
    if !abs.exists() {
        let what = format!("source of artifact '{name}' not found at {}", abs.display());
        let hint = format!("'source' is resolved against {}", cx.dir.display());
        return Err(cx.not_found(line, what).hint(hint));
    }
    if runtime == Runtime::Skill {
        return skill_dir(cx, abs, line, &path).map(Some);
    }
    let is_wasm = abs.extension().is_some_and(|e| e == "wasm");
    if !abs.is_file() || !is_wasm {
        let why = format!(
            "a {} artifact's source must be a .wasm file, found {}",
            runtime.as_str(),
            abs.display()
        );
        return Err(cx.invalid(line, &path, why));
    }
    Ok(Some(abs))
}

fn skill_dir(cx: &Cx, abs: PathBuf, line: usize, path: &str) -> Result<PathBuf> {
    if !abs.is_dir() {
        let why = format!(
            "a skill's source must be a directory holding skill.md, found {}",
            abs.display()
        );
        return Err(cx.invalid(line, path, why));
    }
    let doc = abs.join("skill.md");
    if !doc.is_file() {
        let what = format!("skill.md not found at {}", doc.display());
        return Err(cx
            .not_found(line, what)
            .hint("a skill is a directory with a skill.md file"));
    }
    Ok(abs)
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::*;

    #[test]
    fn skill_source_rules() {
        let s = Scratch::new();
        s.file("skills/ok/skill.md", "# ok");
        s.file("skills/empty/readme.md", "");
        s.file("skills/file.md", "");
        let ok = s.ok(&artifact_yaml(
            "    runtime: skill\n    source: skills/ok\n",
        ));
        assert_eq!(ok.manifest.artifacts[0].source, s.0.join("skills/ok"));

        let e = s.err(&artifact_yaml(
            "    runtime: skill\n    source: skills/empty\n",
        ));
        let want = format!(
            "murmur.yaml:9: skill.md not found at {}",
            s.path("skills/empty/skill.md")
        );
        assert_eq!((e.code, e.message.as_str()), ("E-IO-001", want.as_str()));

        let e = s.err(&artifact_yaml(
            "    runtime: skill\n    source: skills/file.md\n",
        ));
        let want = format!(
            "murmur.yaml:9: invalid artifacts config for 'artifacts[0].source': a skill's \
             source must be a directory holding skill.md, found {}",
            s.path("skills/file.md")
        );
        assert_eq!((e.code, e.message.as_str()), ("E-MAN-003", want.as_str()));
    }

    #[test]
    fn artifact_source_rules() {
        let s = Scratch::new();
        s.file("t.wasm", "");
        s.file("t.txt", "");
        let m = s.ok(&artifact_yaml("    source: ./t.wasm\n")).manifest;
        assert_eq!(m.artifacts[0].runtime, Runtime::Tool);
        assert_eq!(m.artifacts[0].source, s.0.join("t.wasm"));

        let e = s.err(&artifact_yaml("    source: gone.wasm\n"));
        let want = format!(
            "error[E-IO-001]: murmur.yaml:8: source of artifact 'a' not found at {}\n  hint: \
             'source' is resolved against {}",
            s.path("gone.wasm"),
            s.0.display()
        );
        assert_eq!(text(&e), want);

        let e = s.err(&artifact_yaml("    source: t.txt\n"));
        let want = format!(
            "murmur.yaml:8: invalid artifacts config for 'artifacts[0].source': a tool \
             artifact's source must be a .wasm file, found {}",
            s.path("t.txt")
        );
        assert_eq!(e.message, want);

        let e = s.err(&artifact_yaml("    runtime: tool\n"));
        assert_eq!(
            text(&e),
            "error[E-MAN-001]: murmur.yaml:7: missing required field 'artifacts[0].version'\n  \
             hint: an artifact without 'source' is fetched from the registry by its name and \
             version: add 'version', or set 'source' to its file"
        );
        let m = s.ok(&artifact_yaml("    version: \"1\"\n")).manifest;
        assert!(m.artifacts[0].from_registry);
        assert_eq!(m.artifacts[0].source, std::path::PathBuf::new());
        let e = s.err(&artifact_yaml(
            "    source: t.wasm\n    on_overflow: block\n",
        ));
        assert!(e.message.contains("'artifacts[0].on_overflow'"), "{e}");
        let e = s.err(&artifact_yaml(
            "    source: t.wasm\n    capabilities: [x]\n",
        ));
        assert!(
            e.message.ends_with("expected a mapping, found a list"),
            "{e}"
        );
    }

    #[test]
    fn artifact_names() {
        let s = Scratch::new();
        s.file("t.wasm", "");
        let e = s.err(&base("artifacts:\n  - name: My_Tool\n    source: t.wasm\n"));
        assert_eq!(e.code, "E-MAN-003");
        assert!(e.message.starts_with(
            "murmur.yaml:7: invalid artifacts config for 'artifacts[0].name': 'My_Tool' is not \
             a valid name"
        ));
        assert_eq!(e.hint.as_deref(), Some("e.g. 'my-tool'"));
        let long = "a".repeat(101);
        let e = s.err(&base(&format!(
            "artifacts:\n  - name: {long}\n    source: t.wasm\n"
        )));
        assert!(e.message.contains("is not a valid name"), "{e}");
        let yaml =
            base("artifacts:\n  - name: x\n    source: t.wasm\n  - name: x\n    source: t.wasm\n");
        let e = s.err(&yaml);
        let want = "error[E-MAN-003]: murmur.yaml:9: invalid artifacts config for \
                    'artifacts[1].name': artifact name 'x' is used twice\n  hint: the first is \
                    at line 7; names must be unique";
        assert_eq!(text(&e), want);
        let e = s.err("name: Bad Name\nversion: \"1\"\n");
        assert!(
            e.message
                .starts_with("murmur.yaml:1: invalid manifest config for 'name'")
        );
    }
}
