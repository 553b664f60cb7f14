//! The top-level `loop: NAME`: which `runtime: loop` artifact runs the session. A
//! manifest with exactly one loop artifact needs no `loop:`; with several it must choose,
//! so that adding a loop to `artifacts[]` never silently changes which one runs.

use super::fields::{Cx, Section};
use super::schema::suggest;
use super::tree::show;
use super::{Artifact, Result, Runtime};
use crate::error::Error;

/// The chosen loop artifact's name; `None` when the manifest declares no loop (the
/// built-in one runs).
pub(super) fn session_loop(
    cx: &Cx,
    top: &Section,
    artifacts: &[Artifact],
) -> Result<Option<String>> {
    let loops: Vec<&Artifact> = artifacts
        .iter()
        .filter(|a| a.runtime == Runtime::Loop)
        .collect();
    let Some((name, line)) = top.opt_str(cx, "loop")? else {
        return match loops.as_slice() {
            [] => Ok(None),
            [only] => Ok(Some(only.name.clone())),
            several => Err(undecided(cx, several)),
        };
    };
    let Some(found) = artifacts
        .iter()
        .find(|a| a.name == name || a.full_name == name)
    else {
        return Err(unknown_loop(cx, &name, line, &loops));
    };
    let name = found.name.clone();
    if found.runtime != Runtime::Loop {
        let why = format!(
            "artifact '{name}' has runtime {}, not loop",
            found.runtime.as_str()
        );
        let hint = format!("set 'runtime: loop' on the artifact at line {}", found.line);
        return Err(cx.invalid(line, "loop", why).hint(hint));
    }
    Ok(Some(name))
}

/// Several loop artifacts and no `loop:`: which one runs is the author's call.
fn undecided(cx: &Cx, loops: &[&Artifact]) -> Error {
    let message = format!(
        "{}: missing required field 'loop': artifacts[] declares {} session loops, {}",
        cx.loc(None),
        loops.len(),
        listed(loops)
    );
    let first = loops.first().map_or("NAME", |a| a.name.as_str());
    Error::new("E-MAN-001", message).hint(format!(
        "choose the one to run with a top-level key, e.g. 'loop: {first}'"
    ))
}

fn unknown_loop(cx: &Cx, name: &str, line: usize, loops: &[&Artifact]) -> Error {
    let why = format!(
        "'{}' names no artifacts[] entry with 'runtime: loop'",
        show(name)
    );
    let err = cx.invalid(line, "loop", why);
    let names: Vec<&str> = loops.iter().map(|a| a.name.as_str()).collect();
    if let Some(guess) = suggest(name, &names) {
        return err.hint(format!("did you mean '{guess}'?"));
    }
    if loops.is_empty() {
        return err.hint(format!(
            "add an artifacts[] entry with 'name: {}', 'runtime: loop' and 'source: PATH.wasm', \
             or remove 'loop' to run the built-in loop",
            show(name)
        ));
    }
    err.hint(format!("the loop artifacts are {}", listed(loops)))
}

/// `'a' (line 7)`, `'a' (line 7) and 'b' (line 10)`, `'a' (line 7), 'b' (line 10) and …`.
fn listed(loops: &[&Artifact]) -> String {
    let each: Vec<String> = loops
        .iter()
        .map(|a| format!("'{}' (line {})", a.name, a.line))
        .collect();
    match each.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => each.join(""),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    /// Lines 6 onwards: `loop` (when given), then artifacts `a` (tool), and one loop
    /// artifact per name in `loops`.
    fn with_loops(choice: Option<&str>, loops: &[&str]) -> String {
        let mut yaml = String::new();
        if let Some(name) = choice {
            yaml.push_str(&format!("loop: {name}\n"));
        }
        yaml.push_str("artifacts:\n  - name: a\n    source: t.wasm\n");
        for name in loops {
            yaml.push_str(&format!(
                "  - name: {name}\n    version: \"1.0.0\"\n    runtime: loop\n    source: l.wasm\n"
            ));
        }
        base(&yaml)
    }

    fn scratch() -> Scratch {
        let s = Scratch::new();
        s.file("t.wasm", "");
        s.file("l.wasm", "");
        s
    }

    #[test]
    fn no_loop_artifact_runs_the_builtin_one() {
        let s = scratch();
        let m = s.ok(&with_loops(None, &[])).manifest;
        assert_eq!(m.session_loop, None);
        assert_eq!(m.loop_artifact(), None);
    }

    #[test]
    fn the_only_loop_artifact_is_chosen_without_a_key() {
        let s = scratch();
        let m = s.ok(&with_loops(None, &["planner"])).manifest;
        assert_eq!(m.session_loop.as_deref(), Some("planner"));
        let artifact = m.loop_artifact().expect("the loop artifact");
        assert_eq!(artifact.runtime, super::Runtime::Loop);
        assert_eq!(artifact.version.as_deref(), Some("1.0.0"));
        assert_eq!(artifact.source, s.0.join("l.wasm"));
    }

    #[test]
    fn loop_picks_one_of_several() {
        let s = scratch();
        let m = s.ok(&with_loops(Some("critic"), &["planner", "critic"]));
        assert_eq!(m.warnings, vec![]);
        assert_eq!(m.manifest.session_loop.as_deref(), Some("critic"));
    }

    #[test]
    fn several_loops_and_no_key_is_an_error_naming_them() {
        let s = scratch();
        let e = s.err(&with_loops(None, &["planner", "critic", "third"]));
        let want = "error[E-MAN-001]: murmur.yaml: missing required field 'loop': artifacts[] \
                    declares 3 session loops, 'planner' (line 9), 'critic' (line 13) and \
                    'third' (line 17)\n  hint: choose the one to run with a top-level key, \
                    e.g. 'loop: planner'";
        assert_eq!(text(&e), want);
    }

    #[test]
    fn loop_naming_no_loop_artifact_names_the_key_and_its_line() {
        let s = scratch();
        let e = s.err(&with_loops(Some("planer"), &["planner", "critic"]));
        let want = "error[E-MAN-003]: murmur.yaml:6: invalid manifest config for 'loop': \
                    'planer' names no artifacts[] entry with 'runtime: loop'\n  hint: did you \
                    mean 'planner'?";
        assert_eq!(text(&e), want);

        let e = s.err(&with_loops(Some("zzz"), &["planner", "critic"]));
        let hint = "the loop artifacts are 'planner' (line 10) and 'critic' (line 14)";
        assert_eq!(e.hint.as_deref(), Some(hint));

        let e = s.err(&with_loops(Some("planner"), &[]));
        let hint = "add an artifacts[] entry with 'name: planner', 'runtime: loop' and \
                    'source: PATH.wasm', or remove 'loop' to run the built-in loop";
        assert_eq!(
            (e.message.as_str(), e.hint.as_deref()),
            (
                "murmur.yaml:6: invalid manifest config for 'loop': 'planner' names no \
                 artifacts[] entry with 'runtime: loop'",
                Some(hint)
            )
        );
    }

    #[test]
    fn loop_naming_another_runtime_says_which() {
        let s = scratch();
        let e = s.err(&with_loops(Some("a"), &["planner"]));
        let want = "error[E-MAN-003]: murmur.yaml:6: invalid manifest config for 'loop': \
                    artifact 'a' has runtime tool, not loop\n  hint: set 'runtime: loop' on \
                    the artifact at line 8";
        assert_eq!(text(&e), want);
    }

    #[test]
    fn loop_must_be_a_name() {
        let s = scratch();
        let e = s.err(&with_loops(Some("[a, b]"), &["planner"]));
        let want = "murmur.yaml:6: invalid manifest config for 'loop': expected a string, \
                    found a list";
        assert_eq!(e.message, want);
    }

    #[test]
    fn a_loop_artifact_is_a_wasm_file_without_hook_keys() {
        let s = scratch();
        s.file("l.txt", "");
        let e = s.err(&artifact_yaml("    runtime: loop\n    source: l.txt\n"));
        let want = format!(
            "murmur.yaml:9: invalid artifacts config for 'artifacts[0].source': a loop \
             artifact's source must be a .wasm file, found {}",
            s.path("l.txt")
        );
        assert_eq!(e.message, want);
        let e = s.err(&artifact_yaml(
            "    runtime: loop\n    source: l.wasm\n    binding: on-task-end\n",
        ));
        assert!(
            e.message
                .contains("only hooks have a binding; this is a loop"),
            "{e}"
        );
    }
}
