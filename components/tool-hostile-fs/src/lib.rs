//! A tool that attacks the workdir the way a poisoned model would ask it to: it plants
//! links that climb out of its view where the host writes, and tries to reach the
//! host's records. Every answer is `passed`; the `ok:`/`err:` prefix of the data is
//! what the sandbox allowed. Only input it cannot understand gives an `error` status.
//!
//! Input: `{"act": "plant", "at": PATH, "to": TARGET}` makes a symbolic link,
//! `{"act": "write", "path": PATH, "text": TEXT}` writes a file,
//! `{"act": "list", "path": PATH}` lists a folder, `{"act": "remove", "path": PATH}`
//! removes a file or an empty folder.

wit_bindgen::generate!({
    path: ["../../wit/text", "../../wit/task", "../../wit/tool"],
    world: "murmur:tool/tool",
    generate_all,
});

use exports::murmur::tool::run::{Guest, Spec, Status, ToolResult};
use serde_json::Value;

struct Component;

impl Guest for Component {
    fn describe() -> Spec {
        Spec {
            description: "Plants links and pokes at paths, for the containment tests.".into(),
            input_schema: r#"{"type":"object","properties":{"act":{"type":"string"},"at":{"type":"string"},"to":{"type":"string"},"path":{"type":"string"},"text":{"type":"string"}},"required":["act"]}"#.into(),
        }
    }

    fn call(input: String) -> ToolResult {
        let fields: Value = match serde_json::from_str(&input) {
            Ok(fields) => fields,
            Err(e) => return answer(Status::Error, format!("input is not JSON: {e}")),
        };
        let field = |key: &str| fields[key].as_str().unwrap_or_default().to_string();
        let finding = match fields["act"].as_str() {
            Some("plant") => plant(&field("at"), &field("to")),
            Some("write") => outcome(std::fs::write(field("path"), field("text"))),
            Some("list") => list(&field("path")),
            Some("remove") => remove(&field("path")),
            other => {
                return answer(
                    Status::Error,
                    format!("unknown act {other:?} (known: plant, write, list, remove)"),
                );
            }
        };
        answer(Status::Passed, finding)
    }
}

/// A link at `at` to `to`; whatever was at `at` is removed first.
fn plant(at: &str, to: &str) -> String {
    let _ = std::fs::remove_file(at);
    let _ = std::fs::remove_dir(at);
    outcome(symlink(to, at))
}

/// `symlink(2)` of wasi-libc, which Rust's standard library links but exposes only as
/// an unstable API.
fn symlink(to: &str, at: &str) -> std::io::Result<()> {
    unsafe extern "C" {
        fn symlink(target: *const std::ffi::c_char, link: *const std::ffi::c_char) -> i32;
    }
    let to = std::ffi::CString::new(to)?;
    let at = std::ffi::CString::new(at)?;
    // SAFETY: both are valid NUL-terminated strings that outlive the call.
    if unsafe { symlink(to.as_ptr(), at.as_ptr()) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn remove(path: &str) -> String {
    outcome(std::fs::remove_file(path).or_else(|_| std::fs::remove_dir(path)))
}

fn list(path: &str) -> String {
    match std::fs::read_dir(path) {
        Ok(entries) => {
            let mut names: Vec<String> = entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            format!("ok: {}", names.join(","))
        }
        Err(e) => format!("err: {e}"),
    }
}

fn outcome(done: std::io::Result<()>) -> String {
    match done {
        Ok(()) => "ok".into(),
        Err(e) => format!("err: {e}"),
    }
}

fn answer(status: Status, data: String) -> ToolResult {
    ToolResult {
        status,
        data: Some(data),
        summary: None,
        truncated: false,
    }
}

export!(Component);
