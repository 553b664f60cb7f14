//! Upstream's tool shape as an ordinary tool: what the model sent becomes
//! `tool-input.data`, and `tool-result` becomes the text the model receives.
//!
//! | Upstream | Here |
//! |---|---|
//! | `tool-input.data` | the model's input JSON, unchanged (the seed's failed `jsonl-line-count` call shows upstream passes it whole) |
//! | `tool-input.log-path` | `none`: the tool's stderr already goes to its log |
//! | `status` | `passed` is a success, `failed`/`error` an error result |
//! | `data`, else `data-path`, else `summary` | the result text (fenced by the host) |
//! | `data-path` | a file in the tool's view (the workdir), read beneath it, no more than `max_tool_result_bytes` |
//! | `truncated` | `truncated` on the artifact frame and trace line |
//! | `metadata` | dropped: neither the frame nor the trace line has a place for it |
//! | (no `describe`) | the entry's `description`, else `murmur.yaml` beside the `.wasm` (`description`, `input_schema`), else empty and `{"type":"object","properties":{}}` |

use std::path::Path;

use serde_json::{Value, json};

use crate::bindings::upstream::exports::murmur::tool::run::{Status, ToolInput, ToolResult};
use crate::limits;
use crate::rooted::Rooted;

/// The input of one call: `model_input` is the JSON object the model sent.
pub fn input(model_input: &str) -> ToolInput {
    ToolInput {
        data: Some(model_input.to_string()),
        log_path: None,
    }
}

/// What the model receives of a result.
#[derive(Debug)]
pub struct Outcome {
    pub text: String,
    pub is_error: bool,
    pub truncated: bool,
}

/// Reads `result`; `Err` is why it is refused (over `limit`, or a `data-path` that
/// cannot be read beneath `workdir`), in words the model receives.
pub fn outcome(result: ToolResult, workdir: &Path, limit: u64) -> Result<Outcome, String> {
    let len = |s: &Option<String>| s.as_ref().map_or(0, |s| s.len() as u64);
    let size = len(&result.data) + len(&result.summary);
    if size > limit {
        return Err(limits::over(
            "tool result",
            size,
            "max_tool_result_bytes",
            limit,
        ));
    }
    let is_error = result.status != Status::Passed;
    let text = match (result.data, result.data_path, result.summary) {
        (Some(data), _, _) => data,
        (None, Some(path), _) => read_data_path(workdir, &path, limit)?,
        (None, None, Some(summary)) => summary,
        (None, None, None) => "tool returned no data".to_string(),
    };
    Ok(Outcome {
        text,
        is_error,
        truncated: result.truncated,
    })
}

/// The file a tool named as its result. The tool sees the workdir as `/`, so its
/// absolute paths are taken beneath the workdir too.
fn read_data_path(workdir: &Path, path: &str, limit: u64) -> Result<String, String> {
    let rel = path.trim_start_matches('/');
    let rel = if rel.is_empty() { "." } else { rel };
    let refused = |e: std::io::Error| format!("data-path '{path}' could not be read: {e}");
    let (bytes, more) = Rooted::open(workdir)
        .and_then(|view| view.read_bounded(rel, limit))
        .map_err(refused)?;
    if more {
        return Err(format!(
            "data-path '{path}': tool result of more than {limit} bytes is over \
             capabilities.limits.max_tool_result_bytes ({limit})"
        ));
    }
    String::from_utf8(bytes).map_err(|_| format!("data-path '{path}' is not UTF-8 text"))
}

/// The largest packaging `murmur.yaml` read beside an upstream tool.
const PACKAGING_BYTES: u64 = 64 * 1024;

/// What the model is told about an upstream tool, which cannot describe itself:
/// the manifest entry's `description`, else the packaging `murmur.yaml` beside the
/// component (upstream's `description` and `input_schema`), else nothing and an
/// object schema with no properties.
pub fn describe(description: Option<&str>, source: &Path) -> (String, Value) {
    // The folder may be inside a workdir a component writes to: read it without
    // following links, and only a small regular file.
    let packaged = source
        .parent()
        .and_then(|dir| crate::rooted::Rooted::open(dir).ok())
        .and_then(|dir| dir.read_bounded("murmur.yaml", PACKAGING_BYTES).ok())
        .filter(|(_, cut)| !cut)
        .and_then(|(bytes, _)| String::from_utf8(bytes).ok())
        .and_then(|text| packaged(&text))
        .unwrap_or_default();
    let description = description
        .map(str::to_string)
        .or(packaged.0)
        .unwrap_or_default();
    let schema = packaged
        .1
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    (description, schema)
}

/// `description` and `input_schema` of an upstream packaging manifest; the schema may
/// be written as YAML or as a JSON string.
fn packaged(text: &str) -> Option<(Option<String>, Option<Value>)> {
    use yaml_rust2::{Yaml, YamlLoader};
    let doc = YamlLoader::load_from_str(text).ok()?.into_iter().next()?;
    let description = doc["description"].as_str().map(str::to_string);
    let schema = match &doc["input_schema"] {
        Yaml::String(s) => serde_json::from_str(s).ok(),
        Yaml::BadValue | Yaml::Null => None,
        other => Some(to_json(other)),
    };
    Some((description, schema))
}

fn to_json(yaml: &yaml_rust2::Yaml) -> Value {
    use yaml_rust2::Yaml;
    match yaml {
        Yaml::Real(r) => r.parse::<f64>().map_or(Value::Null, Value::from),
        Yaml::Integer(i) => (*i).into(),
        Yaml::String(s) => s.clone().into(),
        Yaml::Boolean(b) => (*b).into(),
        Yaml::Array(items) => items.iter().map(to_json).collect(),
        Yaml::Hash(map) => map
            .iter()
            .filter_map(|(k, v)| Some((k.as_str()?.to_string(), to_json(v))))
            .collect::<serde_json::Map<_, _>>()
            .into(),
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh folder, removed when dropped.
    struct Scratch(std::path::PathBuf);
    impl Scratch {
        fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn tempdir() -> Scratch {
        let dir = std::env::temp_dir().join(format!("mur-upstream-{}", crate::ids::event()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn result(data: Option<&str>, path: Option<&str>, summary: Option<&str>) -> ToolResult {
        ToolResult {
            status: Status::Passed,
            summary: summary.map(str::to_string),
            data: data.map(str::to_string),
            data_path: path.map(str::to_string),
            truncated: false,
            metadata: vec![("k".into(), "v".into())],
        }
    }

    #[test]
    fn data_path_is_read_beneath_the_workdir_and_bounded() {
        let dir = tempdir();
        std::fs::write(dir.path().join("out.txt"), "five\n").unwrap();
        std::fs::write(dir.path().join("big.txt"), "x".repeat(100)).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join("escape")).unwrap();
        let read = |p: &str| outcome(result(None, Some(p), None), dir.path(), 10);
        assert_eq!(read("/out.txt").unwrap().text, "five\n");
        assert_eq!(read("out.txt").unwrap().text, "five\n");
        assert!(
            read("big.txt")
                .unwrap_err()
                .contains("max_tool_result_bytes")
        );
        assert!(
            read("escape").is_err(),
            "a link out of the workdir is refused"
        );
        assert!(read("../etc/hostname").is_err());
    }

    #[test]
    fn data_wins_over_data_path_and_summary() {
        let dir = tempdir();
        let got = outcome(result(Some("d"), Some("nope"), Some("s")), dir.path(), 10).unwrap();
        assert_eq!(got.text, "d");
        let got = outcome(result(None, None, Some("s")), dir.path(), 10).unwrap();
        assert_eq!(got.text, "s");
    }

    #[test]
    fn the_packaging_manifest_describes_the_tool() {
        let dir = tempdir();
        let wasm = dir.path().join("t.wasm");
        let (d, s) = describe(None, &wasm);
        assert_eq!(
            (d.as_str(), s),
            ("", json!({"type":"object","properties":{}}))
        );
        std::fs::write(
            dir.path().join("murmur.yaml"),
            "name: t\ndescription: Counts.\ninput_schema:\n  type: object\n  properties:\n    data: {type: string}\n",
        )
        .unwrap();
        let (d, s) = describe(None, &wasm);
        assert_eq!(d, "Counts.");
        assert_eq!(s["properties"]["data"]["type"], "string");
        assert_eq!(describe(Some("Own."), &wasm).0, "Own.");
    }

    /// A packaging file planted as a link out of its folder, or one too large, is not
    /// read: the tool is described as having no packaging.
    #[test]
    fn a_linked_or_huge_packaging_manifest_is_not_read() {
        let dir = tempdir();
        let outside = tempdir();
        let secret = outside.path().join("secret.yaml");
        std::fs::write(&secret, "description: leaked\n").unwrap();
        std::os::unix::fs::symlink(&secret, dir.path().join("murmur.yaml")).unwrap();
        let wasm = dir.path().join("t.wasm");
        assert_eq!(describe(None, &wasm).0, "");

        std::fs::remove_file(dir.path().join("murmur.yaml")).unwrap();
        let huge = format!(
            "description: big\n#{}\n",
            "x".repeat(PACKAGING_BYTES as usize)
        );
        std::fs::write(dir.path().join("murmur.yaml"), huge).unwrap();
        assert_eq!(describe(None, &wasm).0, "");
    }
}
