//! The manifest as a YAML tree, built from yaml-rust2's parser events. Every node keeps
//! its line and every scalar its source text; nesting and alias expansion are capped, so a
//! hostile file ends in an error, never in a crash.

use std::collections::HashMap;

use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::scanner::{Marker, ScanError, TScalarStyle};

use super::Result;
use crate::error::Error;

/// A string value and the line of its key.
pub(super) type Located = (String, usize);

/// Deeper than any real manifest (plus a nested driver config); low enough that the recursive
/// walks below cannot exhaust even a 2 MiB test-thread stack.
const MAX_DEPTH: usize = 64;
/// Caps nodes copied by aliases, so `&a [*b, *b, …]` chains cannot explode memory.
const MAX_ALIAS_NODES: usize = 10_000;

#[derive(Debug, Clone)]
pub(super) struct Node {
    pub(super) line: usize,
    pub(super) val: Val,
}

#[derive(Debug, Clone)]
pub(super) enum Val {
    /// `plain` = unquoted and untagged, so YAML's core schema (numbers, booleans, null) applies.
    Scalar {
        text: String,
        plain: bool,
    },
    Seq(Vec<Node>),
    Map(Vec<Entry>),
}

#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) key: String,
    pub(super) line: usize,
    pub(super) node: Node,
}

enum Frame {
    Seq {
        line: usize,
        anchor: usize,
        items: Vec<Node>,
    },
    Map {
        line: usize,
        anchor: usize,
        entries: Vec<Entry>,
        seen: HashMap<String, usize>,
        key: Option<Located>,
    },
}

struct Builder<'f> {
    pub(super) file: &'f str,
    pub(super) stack: Vec<Frame>,
    pub(super) anchors: HashMap<usize, (Node, usize)>,
    pub(super) alias_budget: usize,
    pub(super) docs: Vec<Node>,
}

pub(super) fn parse_tree(src: &str, file: &str) -> Result<Option<Node>> {
    let mut parser = Parser::new_from_str(src);
    let mut builder = Builder {
        file,
        stack: Vec::new(),
        anchors: HashMap::new(),
        alias_budget: MAX_ALIAS_NODES,
        docs: Vec::new(),
    };
    loop {
        let (event, mark) = parser.next_token().map_err(|e| scan_error(src, file, &e))?;
        if event == Event::StreamEnd {
            break;
        }
        builder.event(event, mark)?;
    }
    builder.finish()
}

/// `murmur.yaml:12`, or `line 12` when there is no file name (see [`super::yaml_to_json`]).
pub(super) fn at(file: &str, line: usize) -> String {
    if file.is_empty() {
        format!("line {line}")
    } else {
        format!("{file}:{line}")
    }
}

fn scan_error(src: &str, file: &str, e: &ScanError) -> Error {
    let mut line = e.marker().line();
    let hint = if e.info().contains("tab") {
        // The parser marks where the scalar began, which can be lines above the tab itself.
        let mut tab = src.lines().enumerate().skip(line.saturating_sub(1));
        let tab = tab.find(|(_, text)| text.contains('\t'));
        line = tab.map_or(line, |(i, _)| i + 1);
        "indent with spaces: YAML does not allow tabs in indentation".to_string()
    } else {
        format!("check the indentation and quoting on line {line} and the line before it")
    };
    Error::new("E-MAN-002", format!("{}: {}", at(file, line), e.info())).hint(hint)
}

impl Builder<'_> {
    fn event(&mut self, event: Event, mark: Marker) -> Result<()> {
        let line = mark.line();
        match event {
            Event::Scalar(text, style, anchor, tag) => {
                let tagged = tag.is_some_and(|t| t.suffix == "str");
                let plain = style == TScalarStyle::Plain && !tagged;
                let val = Val::Scalar { text, plain };
                self.complete(Node { line, val }, anchor)
            }
            Event::SequenceStart(anchor, _) => self.open(
                Frame::Seq {
                    line,
                    anchor,
                    items: Vec::new(),
                },
                line,
            ),
            Event::MappingStart(anchor, _) => self.open(
                Frame::Map {
                    line,
                    anchor,
                    entries: Vec::new(),
                    seen: HashMap::new(),
                    key: None,
                },
                line,
            ),
            Event::SequenceEnd | Event::MappingEnd => self.close(),
            Event::Alias(id) => self.alias(id, line),
            _ => Ok(()),
        }
    }

    fn open(&mut self, frame: Frame, line: usize) -> Result<()> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(self.too_deep(line));
        }
        self.stack.push(frame);
        Ok(())
    }

    fn too_deep(&self, line: usize) -> Error {
        let msg = format!(
            "{}: nested deeper than {MAX_DEPTH} levels",
            at(self.file, line)
        );
        Error::new("E-MAN-002", msg).hint("a manifest nests only a few levels; flatten it")
    }

    fn close(&mut self) -> Result<()> {
        let Some(frame) = self.stack.pop() else {
            return Ok(());
        };
        let (node, anchor) = match frame {
            Frame::Seq {
                line,
                anchor,
                items,
            } => (
                Node {
                    line,
                    val: Val::Seq(items),
                },
                anchor,
            ),
            Frame::Map {
                line,
                anchor,
                entries,
                ..
            } => (
                Node {
                    line,
                    val: Val::Map(entries),
                },
                anchor,
            ),
        };
        self.complete(node, anchor)
    }

    fn alias(&mut self, id: usize, line: usize) -> Result<()> {
        let file = self.file;
        let Some((node, height)) = self.anchors.get(&id) else {
            let msg = format!("{}: alias to an unknown anchor", at(file, line));
            return Err(Error::new("E-MAN-002", msg));
        };
        if self.stack.len() + height > MAX_DEPTH {
            return Err(self.too_deep(line));
        }
        let size = count_nodes(node);
        if size > self.alias_budget {
            let msg = format!(
                "{}: aliases expand to more than {MAX_ALIAS_NODES} nodes",
                at(file, line)
            );
            return Err(Error::new("E-MAN-002", msg).hint("write the values out instead"));
        }
        self.alias_budget -= size;
        let mut copy = node.clone();
        copy.line = line;
        self.complete(copy, 0)
    }

    fn complete(&mut self, node: Node, anchor: usize) -> Result<()> {
        if anchor > 0 {
            self.anchors.insert(anchor, (node.clone(), height(&node)));
        }
        let path = self.path();
        match self.stack.last_mut() {
            None => self.docs.push(node),
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map {
                entries, seen, key, ..
            }) => match key.take() {
                None => *key = Some(map_key(self.file, node)?),
                Some((k, line)) => {
                    if let Some(first) = seen.insert(k.clone(), line) {
                        return Err(duplicate_key(self.file, line, &path, &k, first));
                    }
                    entries.push(Entry { key: k, line, node });
                }
            },
        }
        Ok(())
    }

    /// Dotted path of the innermost open mapping, for messages raised before any schema walk.
    pub(super) fn path(&self) -> String {
        let mut path = String::new();
        let parents = self.stack.len().saturating_sub(1);
        for frame in &self.stack[..parents] {
            match frame {
                Frame::Seq { items, .. } => path.push_str(&format!("[{}]", items.len())),
                Frame::Map { key: Some(k), .. } => path = join(&path, &k.0),
                Frame::Map { .. } => {}
            }
        }
        path
    }

    fn finish(self) -> Result<Option<Node>> {
        let mut docs = self.docs.into_iter();
        let first = docs.next();
        if let Some(second) = docs.next() {
            let msg = format!(
                "{}: more than one YAML document",
                at(self.file, second.line)
            );
            let hint = "a manifest is a single document: remove the extra '---' section";
            return Err(Error::new("E-MAN-002", msg).hint(hint));
        }
        Ok(first)
    }
}

fn map_key(file: &str, node: Node) -> Result<(String, usize)> {
    match node.val {
        Val::Scalar { text, .. } => Ok((text, node.line)),
        _ => {
            let msg = format!(
                "{}: a mapping key must be a plain string",
                at(file, node.line)
            );
            Err(Error::new("E-MAN-002", msg))
        }
    }
}

fn duplicate_key(file: &str, line: usize, parent: &str, key: &str, first: usize) -> Error {
    let key = show(&join(parent, key));
    Error::new(
        "E-MAN-002",
        format!("{}: duplicate key '{key}'", at(file, line)),
    )
    .hint(format!("it is already set at line {first}; keep one"))
}

fn height(node: &Node) -> usize {
    match &node.val {
        Val::Scalar { .. } => 0,
        Val::Seq(items) => 1 + items.iter().map(height).max().unwrap_or(0),
        Val::Map(entries) => 1 + entries.iter().map(|e| height(&e.node)).max().unwrap_or(0),
    }
}

fn count_nodes(node: &Node) -> usize {
    match &node.val {
        Val::Scalar { .. } => 1,
        Val::Seq(items) => 1 + items.iter().map(count_nodes).sum::<usize>(),
        Val::Map(entries) => {
            1 + entries
                .iter()
                .map(|e| 1 + count_nodes(&e.node))
                .sum::<usize>()
        }
    }
}

pub(super) fn is_null(node: &Node) -> bool {
    matches!(&node.val, Val::Scalar { text, plain: true } if matches!(text.as_str(), "" | "~" | "null" | "Null" | "NULL"))
}

/// YAML 1.2 core-schema integer; `None` if `text` is not one (or does not fit an i128).
pub(super) fn yaml_int(text: &str) -> Option<i128> {
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (digits, radix) = if let Some(hex) = body.strip_prefix("0x") {
        (hex, 16)
    } else if let Some(oct) = body.strip_prefix("0o") {
        (oct, 8)
    } else {
        (body, 10)
    };
    // from_str_radix would also take a sign after the prefix ("0x-5").
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let value = i128::from_str_radix(digits, radix).ok()?;
    Some(if negative { -value } else { value })
}

/// YAML 1.2 core-schema float. Rust's own parser would also take "nan" and "infinity".
pub(super) fn yaml_float(text: &str) -> Option<f64> {
    match text {
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => return Some(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => return Some(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Some(f64::NAN),
        _ => {}
    }
    let body = text.strip_prefix(['+', '-']).unwrap_or(text);
    let starts_ok = body.starts_with(|c: char| c.is_ascii_digit() || c == '.');
    let chars_ok = body
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'));
    if starts_ok && chars_ok {
        text.parse().ok()
    } else {
        None
    }
}

pub(super) fn describe(node: &Node) -> String {
    match &node.val {
        _ if is_null(node) => "an empty value".to_string(),
        Val::Scalar { text, .. } => format!("'{}'", show(text)),
        Val::Seq(_) => "a list".to_string(),
        Val::Map(_) => "a mapping".to_string(),
    }
}

/// Echoes user text on one line and at a bounded length.
pub(super) fn show(text: &str) -> String {
    const MAX: usize = 80;
    let mut out: String = text
        .chars()
        .take(MAX)
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect();
    if text.chars().nth(MAX).is_some() {
        out.push('…');
    }
    out
}

pub(super) fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    #[test]
    fn yaml_syntax_error_names_line() {
        let s = Scratch::new();
        let e = s.err("name: a\nversion: 1\n  bad: 2\n");
        let want = "error[E-MAN-002]: murmur.yaml:3: mapping values are not allowed in this \
                    context\n  hint: check the indentation and quoting on line 3 and the line \
                    before it";
        assert_eq!(text(&e), want);
    }

    #[test]
    fn tab_error_points_at_the_tab() {
        let s = Scratch::new();
        let e = s.err("name: a\n\tversion: 1\n");
        assert_eq!(e.code, "E-MAN-002");
        assert!(e.message.starts_with("murmur.yaml:2: "), "{e}");
        let hint = "indent with spaces: YAML does not allow tabs in indentation";
        assert_eq!(e.hint.as_deref(), Some(hint));
    }

    #[test]
    fn duplicate_key_is_a_syntax_error() {
        let s = Scratch::new();
        let e = s.err(&base("lifecycle:\n  queue_depth: 2\n  queue_depth: 3\n"));
        let want = "error[E-MAN-002]: murmur.yaml:8: duplicate key 'lifecycle.queue_depth'\n  \
                    hint: it is already set at line 7; keep one";
        assert_eq!(text(&e), want);
    }

    #[test]
    fn two_documents_rejected() {
        let s = Scratch::new();
        let e = s.err(&format!("{BASE}---\nname: other\n"));
        assert_eq!(e.code, "E-MAN-002");
        assert!(e.message.contains("more than one YAML document"), "{e}");
    }

    #[test]
    fn aliases_expand_but_are_bounded() {
        let s = Scratch::new();
        let yaml = base("capabilities:\n  shell:\n    allow: &bins [bash]\n    strip_env: *bins\n");
        let m = s.ok(&yaml).manifest;
        assert_eq!(m.capabilities.shell_allow, vec!["bash"]);
        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..8 {
            let p = i - 1;
            bomb.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        let e = s.err(&bomb);
        assert_eq!(e.code, "E-MAN-002");
        assert!(e.message.contains("aliases expand to more than"), "{e}");
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let s = Scratch::new();
        for yaml in [
            format!("{}x", "- ".repeat(20_000)),
            format!("name: {}", "[".repeat(20_000)),
            format!("{}x: 1", "{a: ".repeat(5_000)),
            (0..200)
                .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
                .collect(),
        ] {
            let e = s.err(&yaml);
            assert_eq!(e.code, "E-MAN-002", "{e}");
        }
        let e = s.err(&format!("{}x\n", "- ".repeat(100)));
        assert_eq!(e.message, "murmur.yaml:1: nested deeper than 64 levels");
    }
}
