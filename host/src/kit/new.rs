//! `mur new tool|driver|hook|loop NAME`: a standalone component crate an author builds
//! outside this workspace: a `Cargo.toml` pinning the `wit-bindgen` this host's own
//! components build with, the WIT `mur wit` serves, a working `src/lib.rs`, a sample
//! capsule that runs offline, and a README with the commands to build and check it.
//!
//! The templates are files under `kit/templates/`, embedded at build time; `{{key}}`
//! placeholders are filled in here (others, like the scripted driver's
//! `{{last_tool_result}}`, are left as they are).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::cli::{KindArg, NewArgs};
use crate::error::Error;

const CARGO_TOML: &str = include_str!("templates/common/Cargo.toml");
const README: &str = include_str!("templates/common/README.md");
const GITIGNORE: &str = include_str!("templates/common/gitignore");

/// A hook binding: its name in the manifest, the event variant it receives, the
/// commit policy that belongs to it, and the template code showing its verdict.
struct Binding {
    name: &'static str,
    variant: &'static str,
    policy: &'static str,
    snippet: &'static str,
}

const BINDINGS: &[Binding] = &[
    binding(
        "on-stage",
        "Stage",
        "write-manifests",
        include_str!("templates/hook/bindings/on-stage.rs"),
    ),
    binding(
        "on-session-start",
        "SessionStart",
        "none",
        include_str!("templates/hook/bindings/on-session-start.rs"),
    ),
    binding(
        "on-task-start",
        "TaskStart",
        "seed-context",
        include_str!("templates/hook/bindings/on-task-start.rs"),
    ),
    binding(
        "on-inference",
        "Inference",
        "none",
        include_str!("templates/hook/bindings/on-inference.rs"),
    ),
    binding(
        "on-tool-call",
        "ToolCall",
        "deny",
        include_str!("templates/hook/bindings/on-tool-call.rs"),
    ),
    binding(
        "on-shell",
        "Shell",
        "deny",
        include_str!("templates/hook/bindings/on-shell.rs"),
    ),
    binding(
        "on-compaction",
        "Compaction",
        "replace-context",
        include_str!("templates/hook/bindings/on-compaction.rs"),
    ),
    binding(
        "on-task-end",
        "TaskEnd",
        "reopen-task",
        include_str!("templates/hook/bindings/on-task-end.rs"),
    ),
    binding(
        "on-session-end",
        "SessionEnd",
        "none",
        include_str!("templates/hook/bindings/on-session-end.rs"),
    ),
];

const fn binding(
    name: &'static str,
    variant: &'static str,
    policy: &'static str,
    snippet: &'static str,
) -> Binding {
    Binding {
        name,
        variant,
        policy,
        snippet,
    }
}

/// A hook scaffold's binding when none is given: the one most policies start from.
const DEFAULT_BINDING: &str = "on-tool-call";

/// The longest NAME, as the manifest allows for an artifact's name.
const MAX_NAME: usize = 100;

/// What one kind of component is scaffolded from.
struct Kind {
    word: &'static str,
    world: &'static str,
    /// For `cargo component`: the world's package folder under `wit/`, the world's
    /// name, and the other murmur packages it uses.
    package_dir: &'static str,
    world_name: &'static str,
    uses: &'static [&'static str],
    /// Why cargo-component is given another world than the kind's, when it is.
    component_note: &'static str,
    lib: &'static str,
    manifest: &'static str,
    script: Option<&'static str>,
    extra_deps: &'static str,
    task: &'static str,
    try_note: &'static str,
}

fn kind(arg: KindArg) -> Kind {
    match arg {
        KindArg::Tool => Kind {
            word: "tool",
            world: "murmur:tool/tool",
            package_dir: "tool",
            component_note: "",
            world_name: "tool",
            uses: &["text", "task"],
            lib: include_str!("templates/tool/lib.rs"),
            manifest: include_str!("templates/tool/murmur.yaml"),
            script: Some(include_str!("templates/tool/script.yaml")),
            extra_deps: "serde_json = \"1\"\n",
            task: "Turn a greeting to upper case.",
            try_note: "its scripted model calls the tool once and answers with the result.",
        },
        KindArg::Driver => Kind {
            word: "driver",
            world: "murmur:driver/driver",
            // cargo-component 0.21's WIT parser cannot read the WASI 0.2.12 packages
            // the driver world imports (wasi:cli's `@unstable` timezone import).
            package_dir: "hook",
            world_name: "hook",
            uses: &["message"],
            component_note: "\n# cargo-component 0.21 cannot parse the WASI 0.2.12 packages the driver world\n\
                             # imports (an `@unstable` import in wasi:cli), so it is given the hook world.",
            lib: include_str!("templates/driver/lib.rs"),
            manifest: include_str!("templates/driver/murmur.yaml"),
            script: None,
            extra_deps: "",
            task: "Say hello.",
            try_note: "the driver is its model, and echoes the task.",
        },
        KindArg::Hook => Kind {
            word: "hook",
            world: "murmur:hook/hook",
            package_dir: "hook",
            component_note: "",
            world_name: "hook",
            uses: &["message"],
            lib: include_str!("templates/hook/lib.rs"),
            manifest: include_str!("templates/hook/murmur.yaml"),
            script: Some(include_str!("templates/hook/script.yaml")),
            extra_deps: "",
            task: "May I clean the build folder?",
            try_note: "its scripted model calls the `notes` skill and answers with what the \
                       call returned; the hook answers every `{{binding}}` event{{demo}}.",
        },
        KindArg::Loop => Kind {
            word: "loop",
            world: "murmur:session/session-loop",
            package_dir: "session",
            component_note: "",
            world_name: "session-loop",
            uses: &["message", "text"],
            lib: include_str!("templates/loop/lib.rs"),
            manifest: include_str!("templates/loop/murmur.yaml"),
            script: Some(include_str!("templates/loop/script.yaml")),
            extra_deps: "",
            task: "Say hello.",
            try_note: "the loop runs its turns: its scripted model runs one shell command \
                       and answers with the output.",
        },
    }
}

pub fn run(args: NewArgs) -> Result<ExitCode, Error> {
    check_name(&args.name)?;
    let binding = pick_binding(args.kind, args.binding.as_deref())?;
    let dir = args.dir.unwrap_or_else(|| PathBuf::from(&args.name));
    check_dir(&dir)?;
    let files = scaffold(args.kind, &args.name, binding);
    super::write_tree(&dir, &files, false)?;
    print_next_steps(&kind(args.kind), &args.name, &dir);
    Ok(ExitCode::SUCCESS)
}

/// `[a-z][a-z0-9-]*`: a crate name, an artifact name and a file stem at once.
fn check_name(name: &str) -> Result<(), Error> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if first_ok && rest_ok && name.len() <= MAX_NAME && !name.ends_with('-') {
        return Ok(());
    }
    Err(
        Error::new("E-KIT-003", format!("'{name}' is not a component name")).hint(format!(
            "use lower-case letters, digits and '-', starting with a letter and not ending with \
         '-', at most {MAX_NAME} characters (e.g. 'word-count')"
        )),
    )
}

/// The hook binding to scaffold; `None` for the kinds that take none.
fn pick_binding(kind: KindArg, given: Option<&str>) -> Result<Option<&'static Binding>, Error> {
    let names = || {
        BINDINGS
            .iter()
            .map(|b| b.name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (kind, given) {
        (KindArg::Hook, None) => Ok(BINDINGS.iter().find(|b| b.name == DEFAULT_BINDING)),
        (KindArg::Hook, Some(given)) => match BINDINGS.iter().find(|b| b.name == given) {
            Some(found) => Ok(Some(found)),
            None => Err(
                Error::new("E-KIT-006", format!("'{given}' is not a hook binding"))
                    .hint(format!("use one of {}", names())),
            ),
        },
        (_, None) => Ok(None),
        (other, Some(given)) => Err(Error::new(
            "E-KIT-005",
            format!(
                "--binding {given} applies to hooks; a {} takes no binding",
                kind_word(other)
            ),
        )
        .hint("leave out --binding, or scaffold a hook: mur new hook NAME --binding BINDING")),
    }
}

fn kind_word(arg: KindArg) -> &'static str {
    kind(arg).word
}

/// The scaffold goes into a folder of its own: a new one, or an empty one.
fn check_dir(dir: &Path) -> Result<(), Error> {
    let occupied = match std::fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_some(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        // A file, or a folder that cannot be listed: not a place to scaffold into.
        Err(_) => true,
    };
    if !occupied {
        return Ok(());
    }
    Err(Error::new(
        "E-KIT-004",
        format!(
            "{} already exists and is not an empty folder",
            dir.display()
        ),
    )
    .hint("choose another NAME or --dir, or remove that folder first"))
}

/// Every file of the scaffold, as `(path in the crate, bytes)`.
fn scaffold(arg: KindArg, name: &str, binding: Option<&Binding>) -> Vec<(String, Vec<u8>)> {
    let kind = kind(arg);
    let file = name.replace('-', "_");
    let lib = match binding {
        Some(b) => hook_lib(kind.lib, b),
        None => kind.lib.to_string(),
    };
    let script_note = if kind.script.is_some() {
        " and `script.yaml`"
    } else {
        ""
    };
    // Only the default binding's verdict shows in the sample capsule's answer.
    let demo = match binding {
        Some(b) if b.name == DEFAULT_BINDING => {
            ", and refuses that call: its input asks to `rm -rf`"
        }
        _ => "",
    };
    let component_deps: String = kind
        .uses
        .iter()
        .map(|p| format!("\"murmur:{p}\" = {{ path = \"wit/{p}\" }}\n"))
        .collect();
    let vars: Vec<(&str, &str)> = vec![
        ("package_dir", kind.package_dir),
        ("world_name", kind.world_name),
        ("component_deps", &component_deps),
        ("component_note", kind.component_note),
        ("name", name),
        ("file", &file),
        ("kind", kind.word),
        ("world", kind.world),
        ("binding", binding.map_or("", |b| b.name)),
        ("policy", binding.map_or("", |b| b.policy)),
        ("wit_bindgen", env!("MUR_WIT_BINDGEN_VERSION")),
        ("mur_version", env!("CARGO_PKG_VERSION")),
        ("extra_deps", kind.extra_deps),
        ("task", kind.task),
        ("script_note", script_note),
        ("demo", demo),
    ];
    // The note names the binding, so it is filled in before the README is.
    let try_note = fill(kind.try_note, &vars);
    let mut readme_vars = vars.clone();
    readme_vars.push(("try_note", &try_note));
    let mut files = vec![
        ("Cargo.toml".to_string(), fill(CARGO_TOML, &vars)),
        (".gitignore".to_string(), GITIGNORE.to_string()),
        ("README.md".to_string(), fill(README, &readme_vars)),
        ("src/lib.rs".to_string(), fill(&lib, &vars)),
        ("murmur.yaml".to_string(), fill(kind.manifest, &vars)),
    ];
    if let Some(script) = kind.script {
        files.push(("script.yaml".to_string(), fill(script, &vars)));
    }
    if matches!(arg, KindArg::Hook) {
        files.push((
            "skills/notes/skill.md".to_string(),
            include_str!("templates/hook/skill.md").to_string(),
        ));
    }
    let mut files: Vec<(String, Vec<u8>)> = files
        .into_iter()
        .map(|(path, text)| (path, text.into_bytes()))
        .collect();
    files.extend(
        super::wit::files()
            .into_iter()
            .map(|(rel, bytes)| (format!("wit/{rel}"), bytes)),
    );
    files
}

/// The hook template with the binding's arm in place of its `Verdict::None` one, and
/// the functions that arm calls at the end.
fn hook_lib(template: &str, binding: &Binding) -> String {
    let (arm, helpers) = binding
        .snippet
        .split_once("//--\n")
        .unwrap_or((binding.snippet, ""));
    let plain = format!(
        "            Event::{}(_) => Ok(Verdict::None),\n",
        binding.variant
    );
    template
        .replacen(&plain, arm, 1)
        .replace("{{helpers}}", &format!("\n{helpers}"))
}

/// `template` with each `{{key}}` of `vars` replaced by its value.
fn fill(template: &str, vars: &[(&str, &str)]) -> String {
    vars.iter()
        .fold(template.to_string(), |text, (key, value)| {
            text.replace(&format!("{{{{{key}}}}}"), value)
        })
}

fn print_next_steps(kind: &Kind, name: &str, dir: &Path) {
    let file = name.replace('-', "_");
    println!(
        "created the {} component '{name}' in {}",
        kind.word,
        dir.display()
    );
    println!("next:");
    println!("  cd {}", dir.display());
    println!("  cargo build --release --target wasm32-wasip2");
    println!("  mur component check target/wasm32-wasip2/release/{file}.wasm");
    println!("  mur run --manifest murmur.yaml --task \"{}\"", kind.task);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_crate_and_artifact_rule() {
        for good in ["a", "word-count", "x2", "tool9-b"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "Word", "9x", "-a", "a_b", "a-", "a b", "é"] {
            let err = check_name(bad).unwrap_err();
            assert_eq!(err.code, "E-KIT-003", "{bad}");
        }
        assert!(check_name(&"a".repeat(MAX_NAME + 1)).is_err());
    }

    /// `{{key}}` placeholders left in `text`, but the scripted driver's own.
    fn placeholders(text: &str) -> Vec<String> {
        text.split("{{")
            .skip(1)
            .filter_map(|rest| rest.split_once("}}").map(|(key, _)| key))
            .filter(|key| {
                !key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c == '_')
            })
            .filter(|key| *key != "last_tool_result")
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn every_binding_replaces_its_own_arm_and_fills_every_placeholder() {
        let template = include_str!("templates/hook/lib.rs");
        for b in BINDINGS {
            let lib = hook_lib(template, b);
            let (arm, helpers) = b.snippet.split_once("//--\n").unwrap();
            assert!(lib.contains(arm) && lib.contains(helpers), "{}", b.name);
            let plain = format!(
                "            Event::{}(_) => Ok(Verdict::None),\n",
                b.variant
            );
            assert_eq!(
                lib.matches(&plain).count(),
                arm.matches(&plain).count(),
                "{}",
                b.name
            );
            for (path, bytes) in scaffold(KindArg::Hook, "my-hook", Some(b)) {
                let left = placeholders(&String::from_utf8_lossy(&bytes));
                assert!(left.is_empty(), "{path} of {}: {left:?}", b.name);
            }
        }
        for kind in [KindArg::Tool, KindArg::Driver, KindArg::Loop] {
            for (path, bytes) in scaffold(kind, "x", None) {
                let left = placeholders(&String::from_utf8_lossy(&bytes));
                assert!(left.is_empty(), "{path}: {left:?}");
            }
        }
    }

    #[test]
    fn cargo_toml_pins_the_workspace_wit_bindgen() {
        let files = scaffold(KindArg::Tool, "shout", None);
        let toml = String::from_utf8(files[0].1.clone()).unwrap();
        assert!(
            toml.contains(&format!(
                "version = \"={}\"",
                env!("MUR_WIT_BINDGEN_VERSION")
            )),
            "{toml}"
        );
        assert!(toml.contains("name = \"shout\""));
        assert!(toml.contains("\n[workspace]\n"));
    }
}
