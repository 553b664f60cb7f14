//! Typed access to the tree with located errors: every value read names its dotted key
//! and line when it is not what the manifest needs. `${NAME}` substitution lives here too.

use std::fmt;
use std::path::{Component, PathBuf};

use serde_json::Value as Json;

use super::schema::{known_keys, misplaced, suggest};
use super::tree::{
    Entry, Located, Node, Val, at, describe, is_null, join, show, yaml_float, yaml_int,
};
use super::{Result, Warning};
use crate::error::Error;

pub(super) struct Cx<'a> {
    pub(super) file: String,
    pub(super) dir: PathBuf,
    pub(super) env: &'a dyn Fn(&str) -> Option<String>,
    pub(super) warnings: Vec<Warning>,
    /// `mur run --system-prompt` replaces the prompt: `inference.system_prompt_file` is
    /// not read (it need not exist).
    pub(super) prompt_from_cli: bool,
}

impl Cx<'_> {
    pub(super) fn loc(&self, line: Option<usize>) -> String {
        match line {
            Some(line) => at(&self.file, line),
            None => self.file.clone(),
        }
    }

    pub(super) fn invalid(&self, line: usize, path: &str, why: impl fmt::Display) -> Error {
        self.invalid_as("E-MAN-003", line, path, why)
    }

    pub(super) fn invalid_as(
        &self,
        code: &'static str,
        line: usize,
        path: &str,
        why: impl fmt::Display,
    ) -> Error {
        let loc = self.loc(Some(line));
        let path = show(path);
        let message = format!("{loc}: invalid {} config for '{path}': {why}", area(&path));
        Error::new(code, message)
    }

    pub(super) fn missing(&self, line: Option<usize>, path: &str) -> Error {
        let loc = self.loc(line);
        let message = format!("{loc}: missing required field '{path}'");
        Error::new("E-MAN-001", message)
    }

    pub(super) fn not_found(&self, line: usize, what: impl fmt::Display) -> Error {
        Error::new("E-IO-001", format!("{}: {what}", self.loc(Some(line))))
    }

    pub(super) fn resolve(&self, rel: &str) -> PathBuf {
        self.dir
            .join(rel)
            .components()
            .filter(|c| !matches!(c, Component::CurDir))
            .collect()
    }

    pub(super) fn warn_unknown(&mut self, parent: &str, schema: &str, entry: &Entry) {
        let Some(known) = known_keys(schema) else {
            return;
        };
        if known.contains(&entry.key.as_str()) {
            return;
        }
        let key = join(parent, &entry.key);
        let guess = suggest(&entry.key, known)
            .map(|k| join(parent, k))
            .or_else(|| misplaced(&entry.key, schema));
        let loc = self.loc(Some(entry.line));
        let mut text = format!(
            "[capsule-runtime] warning[W-MAN-001]: {loc}: unknown key '{}' ignored",
            show(&key)
        );
        if let Some(guess) = &guess {
            text.push_str(&format!(" (did you mean '{}'?)", show(guess)));
        }
        let line = entry.line;
        self.warnings.push(Warning {
            line,
            key,
            guess,
            text,
        });
    }
}

/// The error-message area: the first path segment, or "manifest" for the top-level
/// scalars `name`, `version` and `loop`.
fn area(path: &str) -> &str {
    let first = path.split(['.', '[']).next().unwrap_or(path);
    match first {
        "name" | "version" | "loop" => "manifest",
        _ => first,
    }
}

/// One value in the tree and how to name it in messages.
pub(super) struct Field<'n> {
    pub(super) path: String,
    /// The key's line for a mapping value (the value of a block scalar starts below it).
    pub(super) line: usize,
    pub(super) node: &'n Node,
}

impl<'n> Field<'n> {
    pub(super) fn expected(&self, cx: &Cx, what: &str) -> Error {
        cx.invalid(
            self.line,
            &self.path,
            format!("expected {what}, found {}", describe(self.node)),
        )
    }

    pub(super) fn string(&self, cx: &Cx) -> Result<String> {
        match &self.node.val {
            Val::Scalar { text, .. } if !is_null(self.node) => Ok(text.clone()),
            _ => Err(self.expected(cx, "a string")),
        }
    }

    fn plain(&self) -> Option<&'n str> {
        match &self.node.val {
            Val::Scalar { text, plain: true } => Some(text),
            _ => None,
        }
    }

    fn boolean(&self, cx: &Cx) -> Result<bool> {
        match self.plain() {
            Some("true" | "True" | "TRUE") => Ok(true),
            Some("false" | "False" | "FALSE") => Ok(false),
            _ => Err(self.expected(cx, "true or false")),
        }
    }

    fn uint(&self, cx: &Cx, min: u64, max: u64) -> Result<u64> {
        let Some(text) = self.plain() else {
            return Err(self.expected(cx, "a whole number"));
        };
        let Some(value) = yaml_int(text) else {
            if text.chars().all(|c| c.is_ascii_digit()) && !text.is_empty() {
                let why = format!("'{}' is too large (at most {max})", show(text));
                return Err(cx.invalid(self.line, &self.path, why));
            }
            return Err(self.expected(cx, "a whole number"));
        };
        if value < i128::from(min) {
            let why = format!("must be at least {min}, found {value}");
            return Err(cx.invalid(self.line, &self.path, why));
        }
        u64::try_from(value)
            .ok()
            .filter(|v| *v <= max)
            .ok_or_else(|| {
                let why = format!("must be at most {max}, found {value}");
                cx.invalid(self.line, &self.path, why)
            })
    }

    fn float(&self, cx: &Cx, ok: fn(f64) -> bool, expect: &str) -> Result<f64> {
        let value = self.plain().and_then(yaml_float);
        match value {
            Some(v) if v.is_finite() && ok(v) => Ok(v),
            _ => Err(self.expected(cx, expect)),
        }
    }

    fn list(&self, cx: &Cx) -> Result<Vec<Field<'n>>> {
        let Val::Seq(items) = &self.node.val else {
            return Err(self.expected(cx, "a list"));
        };
        let fields = items.iter().enumerate().map(|(i, node)| Field {
            path: format!("{}[{i}]", self.path),
            line: node.line,
            node,
        });
        Ok(fields.collect())
    }

    pub(super) fn section(&self, cx: &mut Cx, schema: &str) -> Result<Section<'n>> {
        let Val::Map(entries) = &self.node.val else {
            return Err(self.expected(cx, "a mapping"));
        };
        for entry in entries {
            cx.warn_unknown(&self.path, schema, entry);
        }
        Ok(Section {
            path: self.path.clone(),
            schema: schema.to_string(),
            line: Some(self.line),
            entries,
        })
    }

    pub(super) fn json(&self, cx: &Cx) -> Result<Json> {
        match &self.node.val {
            Val::Scalar { text, plain } => self.json_scalar(cx, text, *plain),
            Val::Seq(_) => {
                let items = self.list(cx)?;
                let values = items.iter().map(|f| f.json(cx));
                Ok(Json::Array(values.collect::<Result<_>>()?))
            }
            Val::Map(entries) => {
                let mut map = serde_json::Map::new();
                for e in entries {
                    let path = join(&self.path, &e.key);
                    let field = Field {
                        path,
                        line: e.line,
                        node: &e.node,
                    };
                    map.insert(e.key.clone(), field.json(cx)?);
                }
                Ok(Json::Object(map))
            }
        }
    }

    fn json_scalar(&self, cx: &Cx, text: &str, plain: bool) -> Result<Json> {
        if !plain {
            return Ok(Json::String(text.to_string()));
        }
        if is_null(self.node) {
            return Ok(Json::Null);
        }
        if let Ok(b) = self.boolean(cx) {
            return Ok(Json::Bool(b));
        }
        if let Some(i) = yaml_int(text) {
            let number = i64::try_from(i)
                .map(Json::from)
                .or_else(|_| u64::try_from(i).map(Json::from));
            return number
                .map_err(|_| cx.invalid(self.line, &self.path, "integer too large for JSON"));
        }
        match yaml_float(text) {
            Some(f) => serde_json::Number::from_f64(f)
                .map(Json::Number)
                .ok_or_else(|| cx.invalid(self.line, &self.path, "JSON has no NaN or infinity")),
            None => Ok(Json::String(text.to_string())),
        }
    }
}

/// A mapping of known keys. An absent (or null) section is an empty one, so defaults apply.
pub(super) struct Section<'n> {
    pub(super) path: String,
    pub(super) schema: String,
    /// Line of the section's key (None for the top level and for absent sections).
    pub(super) line: Option<usize>,
    pub(super) entries: &'n [Entry],
}

impl<'n> Section<'n> {
    pub(super) fn field(&self, key: &str) -> Option<Field<'n>> {
        let entry = self.entries.iter().find(|e| e.key == key)?;
        (!is_null(&entry.node)).then(|| Field {
            path: join(&self.path, key),
            line: entry.line,
            node: &entry.node,
        })
    }

    pub(super) fn sub(&self, cx: &mut Cx, key: &str) -> Result<Section<'n>> {
        let schema = join(&self.schema, key);
        match self.field(key) {
            Some(field) => field.section(cx, &schema),
            None => Ok(Section {
                path: join(&self.path, key),
                schema,
                line: self.entries.iter().find(|e| e.key == key).map(|e| e.line),
                entries: &[],
            }),
        }
    }

    pub(super) fn req_str(&self, cx: &Cx, key: &str) -> Result<(String, usize)> {
        let field = self.field(key);
        let field = field.ok_or_else(|| cx.missing(self.line, &join(&self.path, key)))?;
        Ok((field.string(cx)?, field.line))
    }

    pub(super) fn opt_str(&self, cx: &Cx, key: &str) -> Result<Option<Located>> {
        self.field(key)
            .map(|f| f.string(cx).map(|s| (s, f.line)))
            .transpose()
    }

    pub(super) fn opt_bool(&self, cx: &Cx, key: &str) -> Result<Option<bool>> {
        self.field(key).map(|f| f.boolean(cx)).transpose()
    }

    pub(super) fn opt_uint(&self, cx: &Cx, key: &str, min: u64, max: u64) -> Result<Option<u64>> {
        self.field(key).map(|f| f.uint(cx, min, max)).transpose()
    }

    pub(super) fn opt_u32(&self, cx: &Cx, key: &str, min: u32) -> Result<Option<u32>> {
        let v = self.opt_uint(cx, key, min.into(), u32::MAX.into())?;
        Ok(v.map(|v| u32::try_from(v).unwrap_or(u32::MAX)))
    }

    pub(super) fn opt_f64(
        &self,
        cx: &Cx,
        key: &str,
        ok: fn(f64) -> bool,
        expect: &str,
    ) -> Result<Option<f64>> {
        self.field(key).map(|f| f.float(cx, ok, expect)).transpose()
    }

    pub(super) fn opt_fraction(&self, cx: &Cx, key: &str) -> Result<Option<f64>> {
        let expect = "a number from 0 to 1";
        self.opt_f64(cx, key, |v| (0.0..=1.0).contains(&v), expect)
    }

    pub(super) fn opt_enum<T: Copy>(
        &self,
        cx: &Cx,
        key: &str,
        options: &[(&str, T)],
    ) -> Result<Option<T>> {
        let Some(field) = self.field(key) else {
            return Ok(None);
        };
        let text = field.string(cx).ok();
        let found = options
            .iter()
            .find(|(name, _)| Some(*name) == text.as_deref());
        if let Some((_, value)) = found {
            return Ok(Some(*value));
        }
        let names: Vec<&str> = options.iter().map(|(name, _)| *name).collect();
        let why = format!(
            "expected one of {}, found {}",
            names.join(", "),
            describe(field.node)
        );
        let err = cx.invalid(field.line, &field.path, why);
        let guess = text.as_deref().and_then(|t| suggest(t, &names));
        Err(match guess {
            Some(g) => err.hint(format!("did you mean '{g}'?")),
            None => err,
        })
    }

    pub(super) fn opt_list(&self, cx: &Cx, key: &str) -> Result<Option<Vec<Field<'n>>>> {
        self.field(key).map(|f| f.list(cx)).transpose()
    }

    pub(super) fn str_list(&self, cx: &Cx, key: &str) -> Result<Vec<String>> {
        let items = self.opt_list(cx, key)?.unwrap_or_default();
        items.iter().map(|f| f.string(cx)).collect()
    }
}

/// `${NAME}` as a whole value; anything else (even `${lower}` or `a${B}`) stays literal.
fn env_reference(value: &str) -> Option<&str> {
    let name = value.strip_prefix("${")?.strip_suffix('}')?;
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_uppercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    (first_ok && rest_ok).then_some(name)
}

/// A whole-value `${NAME}` replaced by that environment variable, which must be set;
/// anything else as written.
pub(super) fn substitute(cx: &Cx, value: &str, line: usize, key: &str) -> Result<String> {
    let Some(var) = env_reference(value) else {
        return Ok(value.to_string());
    };
    match (cx.env)(var) {
        Some(resolved) => Ok(resolved),
        None => {
            let why = format!("environment variable {var} is not set");
            let hint = format!("export {var}=... in the environment mur runs in");
            Err(cx.invalid(line, key, why).hint(hint))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    #[test]
    fn missing_model_names_parent_line() {
        let s = Scratch::new();
        s.file("d.wasm", "");
        let yaml = "name: t\nversion: \"1\"\nartifacts:\n  - name: d\n    runtime: driver\n    \
                    source: d.wasm\ninference:\n  endpoint: https://api.example.com\n  driver:\n    \
                    artifact: d\n";
        let e = s.err(yaml);
        let want = "error[E-MAN-001]: murmur.yaml:7: missing required field 'inference.model'\n  \
                    hint: set the model id the driver should request, e.g. 'model: qwen2.5-coder'";
        assert_eq!(text(&e), want);
    }

    #[test]
    fn enum_value_rejected_with_did_you_mean() {
        let s = Scratch::new();
        let e = s.err(&base("lifecycle:\n  task_acceptance: queu\n"));
        let want = "error[E-MAN-003]: murmur.yaml:7: invalid lifecycle config for \
                    'lifecycle.task_acceptance': expected one of none, single, queue, found \
                    'queu'\n  hint: did you mean 'queue'?";
        assert_eq!(text(&e), want);
    }

    #[test]
    fn zero_max_turns_and_queue_depth_rejected() {
        let s = Scratch::new();
        let e = s.err(&base("  max_turns: 0\n"));
        let want = "murmur.yaml:6: invalid inference config for 'inference.max_turns': must be \
                    at least 1, found 0";
        assert_eq!((e.code, e.message.as_str()), ("E-MAN-003", want));
        assert!(e.hint.is_some());
        let e = s.err(&base("lifecycle:\n  queue_depth: 0\n"));
        let want = "murmur.yaml:7: invalid lifecycle config for 'lifecycle.queue_depth': must be \
                    at least 1, found 0";
        assert_eq!(e.message, want);
        let e = s.err(&base("lifecycle:\n  task_history: 0\n"));
        let want = "murmur.yaml:7: invalid lifecycle config for 'lifecycle.task_history': must be \
                    at least 1, found 0";
        assert_eq!(e.message, want);
        let e = s.err(&base("lifecycle:\n  task_history: 100001\n"));
        assert!(e.message.contains("at most 100000"), "{}", e.message);
        let m = s.ok(&base(
            "lifecycle:\n  max_task_reopens: 0\n  shell_grace_secs: 0\n",
        ));
        assert_eq!(m.manifest.lifecycle.max_task_reopens, 0);
    }

    #[test]
    fn numbers_of_the_wrong_kind_rejected() {
        let s = Scratch::new();
        let cases = [
            ("  max_turns: -3\n", "must be at least 1, found -3"),
            ("  max_turns: 1.5\n", "expected a whole number, found '1.5'"),
            (
                "  max_turns: \"12\"\n",
                "expected a whole number, found '12'",
            ),
            (
                "  max_turns: [1]\n",
                "expected a whole number, found a list",
            ),
            (
                "  max_turns: 4294967296\n",
                "must be at most 4294967295, found 4294967296",
            ),
            (
                "  max_tokens: 99999999999999999999999999999999999999999999\n",
                "'99999999999999999999999999999999999999999999' is too large (at most \
                 4294967295)",
            ),
            ("  stream: yes\n", "expected true or false, found 'yes'"),
            (
                "  temperature: .nan\n",
                "expected a number from 0 to 2, found '.nan'",
            ),
            ("  top_p: 2\n", "expected a number from 0 to 1, found '2'"),
        ];
        for (extra, why) in cases {
            let e = s.err(&base(extra));
            assert_eq!(e.code, "E-MAN-003", "{extra}");
            assert!(
                e.message
                    .starts_with("murmur.yaml:6: invalid inference config for 'inference.")
            );
            assert!(e.message.ends_with(why), "{extra}: {e}");
        }
        let m = s.ok(&base("  max_turns: 0x10\n  temperature: 1\n"));
        assert_eq!(m.manifest.inference.max_turns, 16);
        assert_eq!(m.manifest.inference.temperature, Some(1.0));
    }

    #[test]
    fn wrong_section_types() {
        let s = Scratch::new();
        let e = s.err(&base("lifecycle: [a]\n"));
        let want = "murmur.yaml:6: invalid lifecycle config for 'lifecycle': expected a \
                    mapping, found a list";
        assert_eq!(e.message, want);
        let e = s.err(&base("artifacts: {a: 1}\n"));
        assert!(
            e.message.ends_with("expected a list, found a mapping"),
            "{e}"
        );
        let e = s.err(&base("artifacts:\n  - just-a-string\n"));
        assert!(
            e.message
                .ends_with("expected a mapping, found 'just-a-string'"),
            "{e}"
        );
        let e = s.err("name: [x]\nversion: \"1\"\n");
        assert!(
            e.message.ends_with("expected a string, found a list"),
            "{e}"
        );
    }

    #[test]
    fn env_substitution() {
        let s = Scratch::new();
        let m = s.ok(&base("  api_key: ${LOCAL_MODEL_KEY}\n")).manifest;
        assert_eq!(m.inference.api_key.as_deref(), Some("sk-local"));
        let e = s.err(&base("  api_key: ${MISSING_KEY}\n"));
        let want = "error[E-MAN-003]: murmur.yaml:6: invalid inference config for \
                    'inference.api_key': environment variable MISSING_KEY is not set\n  hint: \
                    export MISSING_KEY=... in the environment mur runs in";
        assert_eq!(text(&e), want);
        for literal in [
            "${lower}",
            "x${LOCAL_MODEL_KEY}",
            "$LOCAL_MODEL_KEY",
            "${1A}",
            "sk-raw",
        ] {
            let m = s.ok(&base(&format!("  api_key: \"{literal}\"\n"))).manifest;
            assert_eq!(m.inference.api_key.as_deref(), Some(literal));
        }
    }
}
