//! The one tool the door offers, and who the server says it is: both read from the
//! capsule's agent card (its manifest's name, version and description, and the tools
//! its model is given as the card's skills), so the MCP and A2A doors describe the
//! capsule alike.

use serde_json::{Value, json};

/// The longest tool name: what clients that prefix it (`mcp__server__name`) still take.
const NAME_MAX: usize = 64;
/// The most skills the description lists, and the most characters of each.
const SKILLS_MAX: usize = 12;
const SKILL_TEXT_MAX: usize = 160;

/// The capsule as the door describes it.
pub struct Capsule {
    /// The manifest's name: the tool's name, and the server's.
    pub name: String,
    pub version: String,
    description: String,
    skills: Vec<(String, String)>,
}

impl Capsule {
    /// Read from the encoded agent card; a card that cannot be read (it always can:
    /// the host encoded it) still gives a usable tool.
    pub fn of(card: &[u8]) -> Capsule {
        let card: Value = serde_json::from_slice(card).unwrap_or(Value::Null);
        let text = |key: &str| card.get(key).and_then(Value::as_str).unwrap_or_default();
        let skills = card
            .get("skills")
            .and_then(Value::as_array)
            .map(|skills| {
                skills
                    .iter()
                    .take(SKILLS_MAX)
                    .filter_map(|s| {
                        let name = s.get("name")?.as_str()?;
                        let about = s.get("description").and_then(Value::as_str);
                        Some((name.to_string(), clip(about.unwrap_or_default())))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Capsule {
            name: tool_name(text("name")),
            version: non_empty(text("version"), "0.0.0"),
            description: text("description").trim().to_string(),
            skills,
        }
    }

    /// The tool, as `tools/list` offers it.
    pub fn tool(&self) -> Value {
        json!({
            "name": self.name,
            "title": format!("Ask {}", self.name),
            "description": self.description(),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "task": {
                        "type": "string",
                        "description": "The task for the capsule, in plain language, with everything it needs to know."
                    }
                },
                "required": ["task"]
            },
            "annotations": {
                "title": format!("Ask {}", self.name),
                "readOnlyHint": false,
                "openWorldHint": true
            }
        })
    }

    fn description(&self) -> String {
        let mut text = String::new();
        if !self.description.is_empty() {
            text.push_str(&self.description);
            if !text.ends_with(['.', '!', '?']) {
                text.push('.');
            }
            text.push(' ');
        }
        text.push_str(&format!(
            "Hands a task to the agent capsule {} {}, served by mur: it works on the task on its own (with its model and its tools) and answers in text once the task ends, which may take minutes.",
            self.name, self.version
        ));
        if !self.skills.is_empty() {
            let skills: Vec<String> = self
                .skills
                .iter()
                .map(|(name, about)| match about.as_str() {
                    "" => name.clone(),
                    about => format!("{name} ({about})"),
                })
                .collect();
            text.push_str(&format!(" Its tools: {}.", skills.join("; ")));
        }
        text
    }

    /// `serverInfo` (and the stateless era's `_meta` stamp).
    pub fn server_info(&self) -> Value {
        json!({"name": self.name, "title": format!("{} (mur capsule)", self.name), "version": self.version})
    }

    /// What `initialize` and `server/discover` tell the client's model about the server.
    pub fn instructions(&self) -> String {
        format!(
            "This server is the mur capsule {name}. Call its one tool, {name}, with a whole task; the call returns the capsule's answer when the task ends.",
            name = self.name
        )
    }
}

/// The capsule's name as a tool name: a manifest name already is one
/// (`[a-z0-9][a-z0-9-]*`); anything else is made one.
fn tool_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
        .take(NAME_MAX)
        .collect();
    non_empty(&cleaned, "ask")
}

fn non_empty(text: &str, otherwise: &str) -> String {
    if text.is_empty() {
        otherwise.to_string()
    } else {
        text.to_string()
    }
}

/// At most [`SKILL_TEXT_MAX`] characters of `text`, on one line, without its closing
/// period (it is set in parentheses).
fn clip(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let line = line.strip_suffix('.').unwrap_or(&line).to_string();
    if line.chars().count() <= SKILL_TEXT_MAX {
        return line;
    }
    let cut: String = line.chars().take(SKILL_TEXT_MAX - 1).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tool_is_named_after_the_capsule_and_says_what_it_is() {
        let card = json!({
            "name": "researcher",
            "version": "1.2.3",
            "description": "Finds papers and summarizes them",
            "skills": [
                {"name": "bash", "description": "Runs a shell\n  command."},
                {"name": "ask"}
            ]
        });
        let capsule = Capsule::of(card.to_string().as_bytes());
        let tool = capsule.tool();
        assert_eq!(tool["name"], "researcher");
        assert_eq!(
            tool["description"],
            "Finds papers and summarizes them. Hands a task to the agent capsule researcher 1.2.3, served by mur: it works on the task on its own (with its model and its tools) and answers in text once the task ends, which may take minutes. Its tools: bash (Runs a shell command); ask."
        );
        assert_eq!(tool["inputSchema"]["required"], json!(["task"]));
        assert_eq!(
            capsule.server_info(),
            json!({"name": "researcher", "title": "researcher (mur capsule)", "version": "1.2.3"})
        );
    }

    #[test]
    fn an_unreadable_card_still_gives_a_tool() {
        let capsule = Capsule::of(b"not json");
        assert_eq!(capsule.tool()["name"], "ask");
        assert_eq!(capsule.version, "0.0.0");
        assert_eq!(tool_name(&"x".repeat(100)).len(), NAME_MAX);
        assert_eq!(clip(&"y".repeat(500)).chars().count(), SKILL_TEXT_MAX);
    }
}
