//! A deny-list policy hook (`binding: on-tool-call` or `on-shell`, `commit_policy: deny`):
//! refuses tool and shell calls that match a rule.
//!
//! Rules come from `/deny.txt` in the hook's scope (preopened as `/`), one per line:
//! `tool:<name>`, `binary:<name>` or `text:<substring>`; `#` comments and blank lines are
//! skipped. Without the file a built-in list applies. The file is read at every decision,
//! so an operator may edit it while the session runs.

wit_bindgen::generate!({
    path: ["../../wit/message", "../../wit/hook"],
    world: "murmur:hook/hook",
    // `murmur:message` is another package, so its bindings must be asked for explicitly.
    generate_all,
});

use std::io::ErrorKind;

use exports::murmur::hook::lifecycle::{Event, Guest, Shell, ToolCall, Verdict};

const DENY_FILE: &str = "/deny.txt";
/// Applies when the scope holds no `deny.txt` (or there is no scope at all).
const DEFAULT_RULES: &str = "text:rm -rf\ntext:curl \ntext:wget \nbinary:sudo\n";

#[derive(Debug, Clone, PartialEq, Eq)]
enum Rule {
    /// Refuses every call of this tool (exact name).
    Tool(String),
    /// Refuses a shell call whose resolved binary has this file name.
    Binary(String),
    /// Refuses a call whose input (tool) or command (shell) contains this, ignoring case.
    Text(String),
}

impl Rule {
    /// The rule as written in the list, for the refusal reason.
    fn source(&self) -> String {
        match self {
            Rule::Tool(name) => format!("tool:{name}"),
            Rule::Binary(name) => format!("binary:{name}"),
            Rule::Text(text) => format!("text:{text}"),
        }
    }
}

struct Component;

impl Guest for Component {
    fn handle(event: Event) -> Result<Verdict, String> {
        // Only decisions (`outcome: none`) can be refused; an observation comes after the
        // call ran, so there is nothing left to judge.
        match event {
            Event::ToolCall(call) if call.outcome.is_none() => {
                Ok(verdict(judge_tool(&load_rules()?, &call)))
            }
            Event::Shell(call) if call.outcome.is_none() => {
                Ok(verdict(judge_shell(&load_rules()?, &call)))
            }
            _ => Ok(Verdict::None),
        }
    }
}

fn verdict(refusal: Option<String>) -> Verdict {
    refusal.map_or(Verdict::None, Verdict::Deny)
}

/// The rules in force. A missing file (or a missing scope) means the defaults; a file that
/// cannot be understood is an error, which the host turns into a refusal: a policy that
/// cannot be read fails closed.
fn load_rules() -> Result<Vec<Rule>, String> {
    let text = match std::fs::read_to_string(DENY_FILE) {
        Ok(text) => text,
        Err(e) if e.kind() == ErrorKind::InvalidData => {
            return Err(format!("{DENY_FILE} is not UTF-8 text"));
        }
        // Without a preopened scope the open fails with a capability error rather than
        // "not found"; either way there is no list to read.
        Err(_) => return parse_rules(DEFAULT_RULES),
    };
    parse_rules(&text).map_err(|e| format!("{DENY_FILE}: {e}"))
}

/// Parses a rule list. A `text:` value is taken verbatim (only a CRLF's `\r` is dropped)
/// because trailing spaces matter: `text:curl ` must not refuse `curlew`.
fn parse_rules(text: &str) -> Result<Vec<Rule>, String> {
    let mut rules = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw).trim_start();
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let rule = parse_rule(line).map_err(|e| format!("line {}: {e}", index + 1))?;
        rules.push(rule);
    }
    Ok(rules)
}

fn parse_rule(line: &str) -> Result<Rule, String> {
    let Some((kind, value)) = line.split_once(':') else {
        return Err(format!(
            "'{line}' is not a rule (expected tool:, binary: or text:)"
        ));
    };
    let rule = match kind.trim() {
        "tool" => Rule::Tool(value.trim().to_string()),
        "binary" => Rule::Binary(value.trim().to_string()),
        "text" => Rule::Text(value.to_string()),
        other => {
            return Err(format!(
                "unknown rule kind '{other}' (expected tool, binary or text)"
            ));
        }
    };
    // An empty value would match everything (text) or nothing (names): both are typos.
    let empty = match &rule {
        Rule::Tool(v) | Rule::Binary(v) => v.is_empty(),
        Rule::Text(v) => v.trim().is_empty(),
    };
    if empty {
        return Err(format!("'{line}' has an empty value"));
    }
    Ok(rule)
}

/// The refusal reason for a tool call, or `None` to let it run. The first matching rule wins.
fn judge_tool(rules: &[Rule], call: &ToolCall) -> Option<String> {
    rules.iter().find_map(|rule| match rule {
        Rule::Tool(name) if *name == call.tool_name => Some(format!(
            "{} matched: the tool '{}' may not be called",
            rule.source(),
            call.tool_name
        )),
        Rule::Text(text) if contains_ignore_case(&call.input, text) => Some(format!(
            "{} matched: the tool input contains \"{text}\"",
            rule.source()
        )),
        _ => None,
    })
}

/// The refusal reason for a shell call, or `None` to let it run. The first matching rule wins.
fn judge_shell(rules: &[Rule], call: &Shell) -> Option<String> {
    let binary = basename(&call.binary);
    // `command` holds only the arguments, so `rm -rf x` arrives as binary `rm`, command
    // `-rf x`; text rules also see the two joined, as the command line the model meant.
    let command_line = format!("{binary} {}", call.command);
    rules.iter().find_map(|rule| match rule {
        Rule::Binary(name) if name == binary => Some(format!(
            "{} matched: the binary '{binary}' may not be run",
            rule.source()
        )),
        Rule::Text(text)
            if contains_ignore_case(&call.command, text)
                || contains_ignore_case(&command_line, text) =>
        {
            Some(format!(
                "{} matched: the command contains \"{text}\"",
                rule.source()
            ))
        }
        _ => None,
    })
}

/// The file name of a resolved binary (`/usr/bin/sudo` → `sudo`).
fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn contains_ignore_case(haystack: &str, needle: &str) -> bool {
    haystack.to_lowercase().contains(&needle.to_lowercase())
}

export!(Component);

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, input: &str) -> ToolCall {
        ToolCall {
            turn: 0,
            tool_name: name.into(),
            input: input.into(),
            outcome: None,
        }
    }

    fn shell(binary: &str, command: &str) -> Shell {
        Shell {
            turn: 0,
            binary: binary.into(),
            command: command.into(),
            outcome: None,
        }
    }

    fn defaults() -> Vec<Rule> {
        parse_rules(DEFAULT_RULES).unwrap()
    }

    #[test]
    fn parses_rules_comments_and_blanks() {
        let rules =
            parse_rules("# policy\n\n  tool: write_file \r\nbinary:sudo\ntext:curl \r\n").unwrap();
        assert_eq!(
            rules,
            vec![
                Rule::Tool("write_file".into()),
                Rule::Binary("sudo".into()),
                Rule::Text("curl ".into()),
            ]
        );
    }

    #[test]
    fn bad_lines_are_errors_with_their_number() {
        let err = parse_rules("tool:a\nfoo:bar\n").unwrap_err();
        assert!(err.starts_with("line 2: unknown rule kind 'foo'"), "{err}");
        assert!(
            parse_rules("just words")
                .unwrap_err()
                .contains("not a rule")
        );
        assert!(parse_rules("text:   ").unwrap_err().contains("empty value"));
        assert!(parse_rules("tool:").unwrap_err().contains("empty value"));
    }

    #[test]
    fn default_list_parses() {
        assert_eq!(defaults().len(), 4);
    }

    #[test]
    fn tool_rule_matches_the_exact_name() {
        let rules = parse_rules("tool:write_file").unwrap();
        assert_eq!(
            judge_tool(&rules, &tool("write_file", "{}")).as_deref(),
            Some("tool:write_file matched: the tool 'write_file' may not be called")
        );
        assert_eq!(judge_tool(&rules, &tool("write_files", "{}")), None);
    }

    #[test]
    fn text_rule_matches_tool_input_ignoring_case() {
        let refusal = judge_tool(&defaults(), &tool("fetch", r#"{"cmd":"CURL http://x"}"#));
        assert_eq!(
            refusal.as_deref(),
            Some("text:curl  matched: the tool input contains \"curl \"")
        );
        assert_eq!(
            judge_tool(&defaults(), &tool("birds", r#"{"q":"curlew"}"#)),
            None
        );
    }

    #[test]
    fn binary_rule_compares_the_basename() {
        let refusal = judge_shell(&defaults(), &shell("/usr/bin/sudo", "ls"));
        assert_eq!(
            refusal.as_deref(),
            Some("binary:sudo matched: the binary 'sudo' may not be run")
        );
        assert_eq!(
            judge_shell(&defaults(), &shell("/usr/bin/sudoku", "ls")),
            None
        );
        assert!(judge_shell(&defaults(), &shell("sudo", "ls")).is_some());
    }

    #[test]
    fn text_rule_sees_the_command_and_the_command_line() {
        assert!(judge_shell(&defaults(), &shell("/bin/bash", "rm -RF /tmp/x")).is_some());
        assert!(judge_shell(&defaults(), &shell("/bin/rm", "-rf /tmp/x")).is_some());
        assert_eq!(judge_shell(&defaults(), &shell("/bin/ls", "-la")), None);
    }

    #[test]
    fn shell_rules_do_not_apply_tool_rules_and_vice_versa() {
        let rules = parse_rules("tool:bash\nbinary:fetch").unwrap();
        assert_eq!(judge_shell(&rules, &shell("/bin/bash", "echo")), None);
        assert_eq!(judge_tool(&rules, &tool("fetch", "{}")), None);
    }

    #[test]
    fn observations_are_never_refused() {
        let mut call = shell("/usr/bin/sudo", "rm -rf /");
        call.outcome = Some(exports::murmur::hook::lifecycle::ShellOutcome {
            exit_code: Some(0),
            stdout_bytes: 0,
            stderr_bytes: 0,
            duration_ms: 1,
        });
        assert!(matches!(
            Component::handle(Event::Shell(call)),
            Ok(Verdict::None)
        ));
    }
}
