//! The tool world's scenarios: `describe` gives a valid JSON Schema; inputs valid
//! under it answer, within the deadline, as a non-error result (an error result too,
//! when the input names nothing the tool could work on); inputs it refuses get an
//! error result, not a trap; and the tool reaches nothing outside its view.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::Target;
use super::capsule::{Launch, Scratch, yaml_str};
use super::provider::Provider;
use super::report::{Noted, Scenario, Step, ensure, fail, skip};

/// The wall-clock limit of one scenario's capsule.
const LIMIT: Duration = Duration::from_secs(30);
/// The tool's own deadline per call (`capabilities.limits.deadline_seconds`).
const DEADLINE_SECS: u64 = 10;
/// What the canary beside the workdir holds: no result may carry it.
const CANARY: &str = "mur-check-canary-5f1c2e";
/// How much of what a tool said a note quotes.
const SAID_AT_MOST: usize = 200;

/// The behavioural scenarios of a tool component.
pub fn scenarios(target: &Target) -> Vec<Scenario> {
    let mut schema = None;
    let mut out = vec![Scenario::run(
        "tool: describe gives a valid JSON Schema",
        || {
            schema = Some(described(target)?);
            Ok(())
        },
    )];
    let Some(schema) = schema else {
        for name in [VALID, INVALID, VIEW] {
            out.push(Scenario::skipped(
                name,
                "describe gave no schema to build inputs from",
            ));
        }
        return out;
    };
    out.push(Scenario::run_noted(VALID, || valid_inputs(target, &schema)));
    out.push(Scenario::run(INVALID, || invalid_inputs(target, &schema)));
    out.push(Scenario::run(VIEW, || stays_in_view(target, &schema)));
    out
}

const VALID: &str = "tool: a schema-valid input answers within the deadline";
const INVALID: &str = "tool: a schema-invalid input gets an error result, not a trap";
const VIEW: &str = "tool: no filesystem outside its view";

// ---------------------------------------------------------------------------------
// describe

/// The schema the model is told, read where a user would: in the request a capsule
/// sends its model (a loopback mock of the OpenAI wire), then checked against the
/// JSON Schema metaschema.
fn described(target: &Target) -> Result<Value, super::report::Outcome> {
    let mock = Provider::answering("done")
        .map_err(|e| skip(format!("the loopback model could not start: {e}")))?;
    let s = Scratch::new("tool-describe")?;
    s.manifest(&format!(
        "name: check-tool\nversion: \"0.1.0\"\nartifacts:\n  - name: {name}\n    runtime: tool\n    \
         source: {source}\ninference:\n  driver: openai\n  endpoint: {origin}/v1\n  model: m\n  \
         api_key: sk-check\n  stream: false\n  max_tokens: 64\n  \
         retry: {{max_attempts: 1}}\n  timeouts: {{connect_secs: 5, read_secs: 20}}\n\
         capabilities:\n  network:\n    allow: [{origin}]\n  limits:\n    deadline_seconds: {DEADLINE_SECS}\n\
         lifecycle:\n  task_acceptance: none\n",
        name = target.name,
        source = yaml_str(&target.absolute),
        origin = mock.origin(),
    ))?;
    s.run(&["--task", "describe yourself"], &[], LIMIT).ok()?;
    let request =
        mock.requests().first().map(|r| r.json()).ok_or_else(|| {
            fail("the capsule never asked its model (no request reached the mock)")
        })?;
    let tools = request["tools"].as_array().cloned().unwrap_or_default();
    let spec = tools
        .iter()
        .find(|t| t["function"]["name"] == target.name.as_str())
        .ok_or_else(|| fail(format!("the model was not offered the tool: {request}")))?;
    let schema = spec["function"]["parameters"].clone();
    valid_schema(&schema)?;
    ensure(schema.get("type").is_none_or(|t| t == "object"), || {
        format!(
            "the input schema does not describe an object (type {})",
            schema["type"]
        )
    })?;
    Ok(schema)
}

/// `schema` compiles as a JSON Schema (its draft from `$schema`, else 2020-12),
/// which validates it against the draft's metaschema.
fn valid_schema(schema: &Value) -> Step {
    compile(schema)
        .map(drop)
        .map_err(|e| fail(format!("describe gives an invalid JSON Schema: {e}")))
}

fn compile(schema: &Value) -> Result<(boon::Schemas, boon::SchemaIndex), String> {
    let mut schemas = boon::Schemas::new();
    let mut compiler = boon::Compiler::new();
    compiler.set_default_draft(boon::Draft::V2020_12);
    let url = "urn:mur-check:tool-input";
    compiler
        .add_resource(url, schema.clone())
        .map_err(|e| format!("{e:#}"))?;
    let index = compiler
        .compile(url, &mut schemas)
        .map_err(|e| format!("{e:#}"))?;
    Ok((schemas, index))
}

/// Whether `instance` is valid under `schema` (which compiled before).
fn accepts(schema: &Value, instance: &Value) -> bool {
    compile(schema).is_ok_and(|(schemas, index)| schemas.validate(instance, index).is_ok())
}

// ---------------------------------------------------------------------------------
// inputs

/// The string every generated input uses: it also names a file the workdir holds,
/// since so many tools take a path.
const SOME_FILE: &str = "task.md";

/// A small instance of `schema`: every required property with a typed value, the
/// first of an enum, a const as it is. `None` when the schema says too little (or
/// too much: `$ref`, patterns) to make one with confidence.
fn instance(schema: &Value, depth: usize) -> Option<Value> {
    if depth > 8 {
        return None;
    }
    if let Some(c) = schema.get("const") {
        return Some(c.clone());
    }
    if let Some(first) = schema.get("enum").and_then(|e| e.as_array()?.first()) {
        return Some(first.clone());
    }
    if let Some(first) = ["anyOf", "oneOf"]
        .iter()
        .find_map(|k| schema.get(*k)?.as_array()?.first())
    {
        return instance(first, depth + 1);
    }
    if schema.get("$ref").is_some() || schema.get("pattern").is_some() {
        return None;
    }
    let ty = match schema.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(ts)) => ts.first()?.as_str()?,
        None if schema.get("properties").is_some() => "object",
        None => return Some(json!({})),
        _ => return None,
    };
    let number = |integer: bool| {
        let low = schema["minimum"]
            .as_f64()
            .or(schema["exclusiveMinimum"].as_f64().map(|m| m + 1.0))
            .unwrap_or(0.0)
            .max(if schema["maximum"].as_f64().is_some_and(|m| m < 0.0) {
                f64::MIN
            } else {
                0.0
            });
        let low = low.min(schema["maximum"].as_f64().unwrap_or(f64::MAX));
        if integer {
            json!(low.ceil() as i64)
        } else {
            json!(low)
        }
    };
    Some(match ty {
        "object" => {
            let mut out = serde_json::Map::new();
            let props = schema.get("properties").and_then(Value::as_object);
            for name in schema["required"].as_array().into_iter().flatten() {
                let name = name.as_str()?;
                let sub = props
                    .and_then(|p| p.get(name))
                    .cloned()
                    .unwrap_or(json!({}));
                out.insert(name.to_string(), instance(&sub, depth + 1)?);
            }
            Value::Object(out)
        }
        "string" => {
            let min = schema["minLength"].as_u64().unwrap_or(0) as usize;
            let max = schema["maxLength"].as_u64().unwrap_or(u64::MAX) as usize;
            let text = if (min..=max).contains(&SOME_FILE.len()) {
                SOME_FILE.to_string()
            } else {
                "a".repeat(min.max(1).min(max))
            };
            json!(text)
        }
        "integer" => number(true),
        "number" => number(false),
        "boolean" => json!(false),
        "null" => Value::Null,
        "array" => {
            let n = schema["minItems"].as_u64().unwrap_or(0) as usize;
            let item = schema.get("items").cloned().unwrap_or(json!({}));
            let one = if n > 0 {
                instance(&item, depth + 1)?
            } else {
                Value::Null
            };
            Value::Array(vec![one; n])
        }
        _ => return None,
    })
}

/// A value of another JSON type than `schema` allows.
fn wrong_type(schema: &Value) -> Value {
    match schema["type"].as_str() {
        Some("string") => json!(12345),
        Some("integer" | "number" | "boolean" | "null") => json!("not-this-type"),
        Some("array" | "object") => json!(12345),
        _ => json!(12345),
    }
}

/// Inputs the schema refuses, each named: a required property of a wrong type, a
/// required property missing. Never a non-object: no driver hands a tool one (the
/// scripted driver sends objects only, the openai driver fails the turn instead).
fn invalid(schema: &Value, valid: &Value) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let props = schema.get("properties").and_then(Value::as_object);
    let required: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if let Some(name) = required.first() {
        let sub = props
            .and_then(|p| p.get(*name))
            .cloned()
            .unwrap_or(json!({}));
        let mut input = valid.clone();
        input[*name] = wrong_type(&sub);
        out.push((format!("required '{name}' of a wrong type"), input));
        let mut input = valid.clone();
        if let Some(o) = input.as_object_mut() {
            o.remove(*name);
        }
        out.push((format!("required '{name}' missing"), input));
    } else if let Some((name, sub)) =
        props.and_then(|p| p.iter().find(|(_, s)| s.get("type").is_some()))
    {
        let mut input = valid.clone();
        input[name.as_str()] = wrong_type(sub);
        out.push((format!("'{name}' of a wrong type"), input));
    }
    out.retain(|(_, input)| !accepts(schema, input));
    out
}

// ---------------------------------------------------------------------------------
// scenarios

fn valid_inputs(target: &Target, schema: &Value) -> Noted {
    let input = instance(schema, 0).ok_or_else(|| {
        skip("cannot make a valid input from this schema ($ref, pattern or an unknown type)")
    })?;
    ensure(accepts(schema, &input), || {
        format!("the input made from the schema is not valid under it: {input}")
    })
    .map_err(|_| {
        skip(format!(
            "cannot make a valid input from this schema (made {input})"
        ))
    })?;
    let started = Instant::now();
    let (_, calls) = call(target, "tool-valid", std::slice::from_ref(&input))?;
    let judged = judge_valid(&target.name, &input, &calls[0])?;
    ensure(started.elapsed() < LIMIT, || {
        "the call did not answer within the scenario's limit".into()
    })?;
    Ok(judged)
}

/// One traced call of a schema-valid input. A trap, the deadline, or a result the host
/// could not take (all of which the trace line's `error` says) fails, and so does a
/// line without the result's status and text. An error result fails too, unless the
/// input names nothing: a tool may rightly refuse to work on nothing, and the pass
/// then says what it answered.
fn judge_valid(tool: &str, input: &Value, call: &Value) -> Noted {
    if let Some(error) = call["error"].as_str() {
        return Err(fail(format!("input {input}: {error}")));
    }
    let said = said(tool, call).ok_or_else(|| {
        fail(format!(
            "input {input}: the call's trace line holds no result"
        ))
    })?;
    match call["status"].as_str() {
        Some("ok") => Ok(None),
        Some("error") if names_nothing(input) => Ok(Some(format!(
            "input {input} names nothing, and the tool answered with an error result: {said}"
        ))),
        Some("error") => Err(fail(format!("input {input} got an error result: {said}"))),
        _ => Err(fail(format!(
            "input {input}: the result's status is {}, neither ok nor error",
            call["status"]
        ))),
    }
}

/// Whether a generated input names nothing: it holds no string (so no file, no text),
/// only values of other types, or nothing at all when the schema requires nothing.
fn names_nothing(input: &Value) -> bool {
    match input {
        Value::String(_) => false,
        Value::Array(items) => items.iter().all(names_nothing),
        Value::Object(fields) => fields.values().all(names_nothing),
        _ => true,
    }
}

/// The text of a traced call's result, taken out of the fence the model reads it in,
/// on one line and cut to [`SAID_AT_MOST`] bytes (the report escapes what is left).
fn said(tool: &str, call: &Value) -> Option<String> {
    let output = call["output"].as_str()?;
    let empty = crate::fence::fence(&crate::fence::tool_source(tool), "");
    let body = empty.split_once("\n\n").and_then(|(open, close)| {
        let rest = output.strip_prefix(open)?.strip_prefix('\n')?;
        rest.strip_suffix(close)?.strip_suffix('\n')
    });
    let line = body
        .unwrap_or(output)
        .split_whitespace()
        .collect::<Vec<_>>();
    Some(crate::escape::cut(&line.join(" "), SAID_AT_MOST).into_owned())
}

fn invalid_inputs(target: &Target, schema: &Value) -> Step {
    let valid = instance(schema, 0).unwrap_or(json!({}));
    let cases = invalid(schema, &valid);
    if cases.is_empty() {
        return Err(skip(
            "the schema accepts every object, and no driver passes a tool anything else",
        ));
    }
    let inputs: Vec<Value> = cases.iter().map(|(_, v)| v.clone()).collect();
    let (_, calls) = call(target, "tool-invalid", &inputs)?;
    for ((what, input), c) in cases.iter().zip(&calls) {
        if let Some(error) = c["error"].as_str() {
            return Err(fail(format!("{what} ({input}): {error}")));
        }
        ensure(c["status"] == "error", || {
            format!(
                "{what} ({input}) got a non-error result: {}",
                c["output"].as_str().unwrap_or_default()
            )
        })?;
    }
    Ok(())
}

/// Calls the tool with every string of its input naming the canary beside the
/// workdir, relative and absolute, then checks the canary is unchanged, no result
/// carries it, and nothing outside the workdir changed.
fn stays_in_view(target: &Target, schema: &Value) -> Step {
    let s = Scratch::new("tool-view")?;
    let canary = s.write("canary.txt", CANARY)?;
    let outside = s.dir().join("outside");
    std::fs::create_dir_all(&outside).map_err(|e| skip(format!("{e}")))?;
    let valid = instance(schema, 0).unwrap_or(json!({}));
    let props = schema
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut inputs = Vec::new();
    for path in [
        "../canary.txt".to_string(),
        canary.display().to_string(),
        "../outside/new.txt".to_string(),
        outside.join("new.txt").display().to_string(),
    ] {
        let mut input = valid.clone();
        for (name, sub) in &props {
            if sub["type"] == "string" && sub.get("enum").is_none() {
                input[name.as_str()] = json!(path);
            }
        }
        inputs.push(input);
    }
    let before = snapshot(s.dir());
    let (_, calls) = call_in(&s, target, &inputs)?;
    let after = snapshot(s.dir());
    ensure(
        std::fs::read_to_string(&canary).ok().as_deref() == Some(CANARY),
        || "the canary file beside the workdir was changed or removed".into(),
    )?;
    for c in &calls {
        ensure(
            !c["output"].as_str().unwrap_or_default().contains(CANARY),
            || {
                format!(
                    "a result carried the canary file's content (input {})",
                    c["input"]
                )
            },
        )?;
    }
    let changed: Vec<&PathBuf> = after
        .iter()
        .filter(|(p, v)| before.get(*p) != Some(v))
        .map(|(p, _)| p)
        .chain(before.keys().filter(|p| !after.contains_key(*p)))
        .collect();
    ensure(changed.is_empty(), || {
        format!(
            "files outside the workdir changed: {}",
            changed
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

/// Every file under `dir` but the capsule's own (`work/`, `records/`, `.home/`) and
/// the check's (the manifest, the script), with its length and content hash.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u64, u64)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            let rel = path.strip_prefix(dir).unwrap_or(&path).to_path_buf();
            let top = rel.components().next().map(|c| c.as_os_str().to_owned());
            if top.as_deref().is_some_and(|t| {
                ["work", "records", ".home", "murmur.yaml", "script.yaml"]
                    .iter()
                    .any(|own| t == *own)
            }) {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(path);
                continue;
            }
            let bytes = std::fs::read(&path).unwrap_or_default();
            let hash = bytes.iter().fold(0xcbf29ce484222325u64, |h, b| {
                (h ^ *b as u64).wrapping_mul(0x100000001b3)
            });
            out.insert(rel, (meta.len(), hash));
        }
    }
    out
}

/// Runs the tool once per input in a fresh scratch capsule: the trace's
/// `tool_call` events, one per input.
fn call(
    target: &Target,
    label: &str,
    inputs: &[Value],
) -> Result<(Launch, Vec<Value>), super::report::Outcome> {
    let s = Scratch::new(label)?;
    call_in(&s, target, inputs)
}

/// [`call`] in the scratch directory `s`: the workdir is `work/`, the records
/// `records/`, both inside it.
fn call_in(
    s: &Scratch,
    target: &Target,
    inputs: &[Value],
) -> Result<(Launch, Vec<Value>), super::report::Outcome> {
    s.manifest(&format!(
        "name: check-tool\nversion: \"0.1.0\"\nartifacts:\n  - name: {name}\n    runtime: tool\n    \
         source: {source}\ninference:\n  driver: scripted\n  script: ./script.yaml\n  model: scripted-test\n  \
         max_turns: {turns}\ncapabilities:\n  limits:\n    deadline_seconds: {DEADLINE_SECS}\n\
         lifecycle:\n  task_acceptance: none\ntrace:\n  include_tool_output: true\n",
        name = target.name,
        source = yaml_str(&target.absolute),
        turns = inputs.len() + 2,
    ))?;
    let mut script = String::from("span: session\nturns:\n");
    for (i, input) in inputs.iter().enumerate() {
        script.push_str(&format!(
            "  - tool_calls: [{{id: c{i}, name: {name}, input: {input}}}]\n",
            name = target.name
        ));
    }
    script.push_str("  - text: done\n");
    s.script(&script)?;
    let work = s.dir().join("work");
    let records = s.dir().join("records");
    let finished = s.run(
        &[
            "--task",
            "check the tool",
            "--workdir",
            &work.display().to_string(),
            "--records",
            &records.display().to_string(),
        ],
        &[],
        LIMIT,
    );
    let launch = finished.launched()?.clone();
    let calls = launch.events("tool_call");
    if calls.len() < inputs.len() {
        return Err(fail(format!(
            "{} of {} calls reached the trace{}",
            calls.len(),
            inputs.len(),
            if finished.timed_out {
                " before the scenario's limit killed the capsule".to_string()
            } else {
                format!(": {}", super::capsule::first_error(&finished.stderr))
            }
        )));
    }
    Ok((launch, calls))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_has_every_required_property_typed() {
        let schema = json!({"type": "object", "properties": {
            "path": {"type": "string"}, "n": {"type": "integer", "minimum": 3},
            "mode": {"enum": ["a", "b"]}, "opt": {"type": "string"}},
            "required": ["path", "n", "mode"]});
        let made = instance(&schema, 0).unwrap();
        assert_eq!(made, json!({"path": "task.md", "n": 3, "mode": "a"}));
        assert!(accepts(&schema, &made));
        let bad = invalid(&schema, &made);
        assert_eq!(bad.len(), 2);
        assert_eq!(bad[0].1, json!({"path": 12345, "n": 3, "mode": "a"}));
    }

    /// A trace line as `call_in` reads it: `output` fenced, `error` the host's words.
    fn traced(status: &str, text: &str, error: Option<&str>) -> Value {
        let output = crate::fence::fence("tool:t", text);
        let mut line = json!({"tool_name": "t", "status": status, "output": output});
        if let Some(error) = error {
            line["error"] = json!(error);
        }
        line
    }

    #[test]
    fn an_input_naming_nothing_may_get_an_error_result() {
        let nothing = json!({});
        let failed = "failed to read '{}': No such file\n (os error 44)";
        let judged = judge_valid("t", &nothing, &traced("error", failed, None));
        let note = "input {} names nothing, and the tool answered with an error result: \
                    failed to read '{}': No such file (os error 44)";
        assert_eq!(judged, Ok(Some(note.to_string())));
        assert_eq!(
            judge_valid("t", &nothing, &traced("ok", "3", None)),
            Ok(None)
        );
        let numbers = json!({"n": 0, "flags": [false], "none": null});
        assert!(names_nothing(&numbers));
        assert!(judge_valid("t", &numbers, &traced("error", "no", None)).is_ok());
        let long = "x".repeat(500);
        let Ok(Some(note)) = judge_valid("t", &nothing, &traced("error", &long, None)) else {
            panic!("an error result for {{}} passes");
        };
        assert!(note.ends_with("… [cut: 500 bytes in all]"), "{note}");
    }

    #[test]
    fn traps_deadlines_and_malformed_results_still_fail() {
        let nothing = json!({});
        let trap = "tool 't' failed: wasm trap: wasm `unreachable` instruction executed";
        let judged = judge_valid("t", &nothing, &traced("error", trap, Some(trap)));
        assert_eq!(judged, Err(fail(format!("input {{}}: {trap}"))));
        let late = "tool 't' failed: deadline of 10 s exceeded";
        let judged = judge_valid("t", &nothing, &traced("error", late, Some(late)));
        assert_eq!(judged, Err(fail(format!("input {{}}: {late}"))));
        let judged = judge_valid("t", &nothing, &json!({"status": "error"}));
        let want = "input {}: the call's trace line holds no result";
        assert_eq!(judged, Err(fail(want)));
        let judged = judge_valid("t", &nothing, &traced("maybe", "x", None));
        let want = "input {}: the result's status is \"maybe\", neither ok nor error";
        assert_eq!(judged, Err(fail(want)));
        let file = json!({"path": "task.md"});
        assert!(!names_nothing(&file));
        let judged = judge_valid("t", &file, &traced("error", "unknown act", None));
        let want = "input {\"path\":\"task.md\"} got an error result: unknown act";
        assert_eq!(judged, Err(fail(want)));
    }

    #[test]
    fn a_schema_that_breaks_the_metaschema_is_refused() {
        assert!(valid_schema(&json!({"type": "object"})).is_ok());
        assert!(valid_schema(&json!({"type": "objekt"})).is_err());
        assert!(valid_schema(&json!({"type": "object", "required": "path"})).is_err());
    }
}
