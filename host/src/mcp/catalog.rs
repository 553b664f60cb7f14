//! Which of a server's tools the model is offered, and under what name.
//!
//! A server's tool list is untrusted input that ends up in every request to the model:
//! a name the model's API refuses, a schema that is not an object, or a description of
//! a megabyte would break or bloat every turn. So each tool passes the checks below or
//! is refused with a reason the operator reads; one bad tool never takes the others
//! down with it.

use std::collections::HashSet;

use serde_json::Value;

/// The longest tool name model APIs take (OpenAI's limit is the tightest).
const MAX_FULL_NAME: usize = 128;
/// The longest tool name a server may use: the rest of the full name is ours.
const MAX_TOOL_NAME: usize = 64;
/// The largest input schema offered, serialized.
const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// A longer description is cut: the tool is still worth offering.
const MAX_DESCRIPTION_BYTES: usize = 8 * 1024;

/// A tool as the server listed it.
#[derive(Debug, Clone, PartialEq)]
pub struct RawTool {
    pub name: String,
    pub description: Option<String>,
    /// `inputSchema`, `Null` when the server gave none.
    pub input_schema: Value,
    pub title: Option<String>,
}

/// The manifest's choice among a server's tools, as Codex reads it: `enabled` lists
/// the only tools offered when present, `disabled` removes tools.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    pub enabled: Option<Vec<String>>,
    pub disabled: Vec<String>,
}

/// A tool the model is offered.
#[derive(Debug, Clone, PartialEq)]
pub struct Offered {
    /// `mcp__<server>__<tool>`: what the model calls it.
    pub name: String,
    /// The server's own name for it.
    pub tool: String,
    pub description: String,
    pub schema: Value,
}

/// A tool left out, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    pub tool: String,
    pub why: String,
}

/// The tools of `server` the model may be offered: those `filter` keeps and that pass
/// every check, in the server's order; and those refused.
pub fn offer(server: &str, raw: Vec<RawTool>, filter: &Filter) -> (Vec<Offered>, Vec<Refused>) {
    let mut offered = Vec::new();
    let mut refused = Vec::new();
    let mut seen = HashSet::new();
    for tool in raw.into_iter().filter(|tool| filter.keeps(&tool.name)) {
        match check(server, tool, &mut seen) {
            Ok(tool) => offered.push(tool),
            Err(refusal) => refused.push(refusal),
        }
    }
    (offered, refused)
}

impl Filter {
    fn keeps(&self, tool: &str) -> bool {
        let enabled = self
            .enabled
            .as_ref()
            .is_none_or(|enabled| enabled.iter().any(|name| name == tool));
        enabled && !self.disabled.iter().any(|name| name == tool)
    }
}

fn check(server: &str, tool: RawTool, seen: &mut HashSet<String>) -> Result<Offered, Refused> {
    let refuse = |why: String| Refused {
        tool: tool.name.clone(),
        why,
    };
    if !valid_name(&tool.name) {
        return Err(refuse(format!(
            "its name is not 1 to {MAX_TOOL_NAME} letters, digits, '_' or '-'"
        )));
    }
    let name = format!("mcp__{server}__{}", tool.name);
    if name.len() > MAX_FULL_NAME {
        return Err(refuse(format!(
            "its full name {name} is longer than {MAX_FULL_NAME} characters; a shorter server name would fit it"
        )));
    }
    schema_fits(&tool.input_schema).map_err(refuse)?;
    if !seen.insert(name.clone()) {
        return Err(refuse(
            "the server listed a tool of the same name before it".into(),
        ));
    }
    let description = tool.description.or(tool.title).unwrap_or_default();
    Ok(Offered {
        name,
        tool: tool.name,
        description: cut(description, MAX_DESCRIPTION_BYTES),
        schema: tool.input_schema,
    })
}

/// `^[A-Za-z0-9_-]{1,64}$`.
fn valid_name(name: &str) -> bool {
    (1..=MAX_TOOL_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Why `schema` cannot be offered as a tool's parameters, if it cannot.
fn schema_fits(schema: &Value) -> Result<(), String> {
    let Some(fields) = schema.as_object() else {
        return Err("its inputSchema is not a JSON object".into());
    };
    match fields.get("type") {
        Some(Value::String(kind)) if kind == "object" => {}
        Some(_) => return Err("its inputSchema's type is not \"object\"".into()),
        None => return Err("its inputSchema has no type; it must be \"object\"".into()),
    }
    if fields.get("properties").is_some_and(|p| !p.is_object()) {
        return Err("its inputSchema's properties is not a JSON object".into());
    }
    let bytes = serde_json::to_vec(schema).map_or(usize::MAX, |s| s.len());
    if bytes > MAX_SCHEMA_BYTES {
        return Err(format!(
            "its inputSchema is {} bytes, more than the {} KiB allowed",
            bytes,
            MAX_SCHEMA_BYTES / 1024
        ));
    }
    Ok(())
}

/// `text` cut to at most `max` bytes on a character boundary.
fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let at = text.floor_char_boundary(max);
        text.truncate(at);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, schema: Value) -> RawTool {
        RawTool {
            name: name.into(),
            description: Some(format!("{name} does things")),
            input_schema: schema,
            title: None,
        }
    }

    fn object() -> Value {
        json!({"type": "object", "properties": {"q": {"type": "string"}}})
    }

    fn names(offered: &[Offered]) -> Vec<&str> {
        offered.iter().map(|o| o.name.as_str()).collect()
    }

    #[test]
    fn good_tools_are_offered_under_their_full_name() {
        let (offered, refused) = offer("gh", vec![tool("search", object())], &Filter::default());
        assert!(refused.is_empty());
        assert_eq!(offered[0].name, "mcp__gh__search");
        assert_eq!(offered[0].tool, "search");
        assert_eq!(offered[0].description, "search does things");
        assert_eq!(offered[0].schema, object());
    }

    #[test]
    fn enabled_is_an_allow_list_and_disabled_removes() {
        let raw = vec![
            tool("a", object()),
            tool("b", object()),
            tool("c", object()),
        ];
        let filter = Filter {
            enabled: Some(vec!["a".into(), "b".into()]),
            disabled: vec!["b".into()],
        };
        let (offered, refused) = offer("s", raw.clone(), &filter);
        assert_eq!(names(&offered), ["mcp__s__a"]);
        assert!(refused.is_empty());
        let filter = Filter {
            enabled: None,
            disabled: vec!["c".into()],
        };
        assert_eq!(
            names(&offer("s", raw, &filter).0),
            ["mcp__s__a", "mcp__s__b"]
        );
    }

    #[test]
    fn bad_names_are_refused() {
        let long = "x".repeat(65);
        let raw = vec![
            tool("", object()),
            tool("has space", object()),
            tool("dot.ted", object()),
            tool(&long, object()),
            tool("ünï", object()),
        ];
        let (offered, refused) = offer("s", raw, &Filter::default());
        assert!(offered.is_empty());
        assert_eq!(refused.len(), 5);
        assert!(refused[0].why.contains("letters, digits"));
    }

    #[test]
    fn a_full_name_past_128_characters_is_refused() {
        let server = "s".repeat(60);
        let (offered, refused) = offer(
            &server,
            vec![tool(&"t".repeat(64), object())],
            &Filter::default(),
        );
        assert!(offered.is_empty());
        assert!(
            refused[0].why.contains("longer than 128"),
            "{}",
            refused[0].why
        );
    }

    #[test]
    fn schemas_must_be_objects_of_type_object() {
        let raw = vec![
            tool("none", Value::Null),
            tool("array", json!([])),
            tool("untyped", json!({"properties": {}})),
            tool("string", json!({"type": "string"})),
            tool("props", json!({"type": "object", "properties": []})),
            tool("bare", json!({"type": "object"})),
        ];
        let (offered, refused) = offer("s", raw, &Filter::default());
        assert_eq!(names(&offered), ["mcp__s__bare"]);
        let why: Vec<&str> = refused.iter().map(|r| r.why.as_str()).collect();
        assert!(why[0].contains("not a JSON object"));
        assert!(why[2].contains("has no type"));
        assert!(why[3].contains("not \"object\""));
        assert!(why[4].contains("properties"));
    }

    #[test]
    fn a_huge_schema_is_refused_and_a_long_description_cut() {
        let huge = json!({"type": "object", "description": "d".repeat(70 * 1024)});
        let mut long = tool("long", object());
        long.description = Some("é".repeat(5000));
        let (offered, refused) = offer("s", vec![tool("huge", huge), long], &Filter::default());
        assert!(refused[0].why.contains("64 KiB"));
        assert_eq!(offered[0].description.len(), 8 * 1024);
        assert!(offered[0].description.chars().all(|c| c == 'é'));
    }

    #[test]
    fn a_duplicate_name_is_refused_and_the_first_kept() {
        let mut second = tool("t", object());
        second.description = Some("second".into());
        let (offered, refused) = offer("s", vec![tool("t", object()), second], &Filter::default());
        assert_eq!(offered.len(), 1);
        assert_eq!(offered[0].description, "t does things");
        assert!(refused[0].why.contains("same name"));
    }

    #[test]
    fn the_title_stands_in_for_a_missing_description() {
        let mut titled = tool("t", object());
        titled.description = None;
        titled.title = Some("Title".into());
        assert_eq!(
            offer("s", vec![titled], &Filter::default()).0[0].description,
            "Title"
        );
    }
}
