//! What the model sends a shell tool: the input schema, the `command` it carries, and the
//! argv a non-interpreter binary gets from it.

const INPUT_SCHEMA: &str =
    r#"{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}"#;
const MISSING_COMMAND: &str = "shell tool input must include a non-empty 'command' string";

/// Input schema of every shell tool (one tool per allowed binary).
pub fn input_schema() -> &'static str {
    INPUT_SCHEMA
}

/// Extracts the `command` string from a shell tool call's JSON input.
///
/// # Errors
///
/// The exact tool-error texts: `shell tool input must be valid JSON: <serde error>`, or
/// `shell tool input must include a non-empty 'command' string` when `command` is missing,
/// blank or not a string.
pub fn parse_input(input: &str) -> Result<String, String> {
    let value: serde_json::Value = serde_json::from_str(input)
        .map_err(|e| format!("shell tool input must be valid JSON: {e}"))?;
    match value.get("command").and_then(serde_json::Value::as_str) {
        Some(command) if !command.trim().is_empty() => Ok(command.to_string()),
        _ => Err(MISSING_COMMAND.to_string()),
    }
}

/// Splits `command` into argv the way a POSIX shell would, without any expansion.
///
/// Single quotes keep everything literally; inside double quotes a backslash escapes only
/// `"`, `\`, `$`, `` ` `` and newline (and is kept otherwise); outside quotes a backslash
/// escapes any character. An unterminated quote or a trailing backslash is an error rather than
/// a guess, because a guessed argv could run something the model did not mean.
///
/// # Errors
///
/// `unterminated single quote in command`, `unterminated double quote in command` or
/// `trailing backslash in command`.
pub(super) fn split_args(command: &str) -> Result<Vec<String>, String> {
    let mut args = Vec::new();
    let mut current = String::new();
    // Separate from `current.is_empty()` so that `''` still yields an (empty) argument.
    let mut in_word = false;
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                read_single_quoted(&mut chars, &mut current)?;
            }
            '"' => {
                in_word = true;
                read_double_quoted(&mut chars, &mut current)?;
            }
            '\\' => {
                in_word = true;
                let escaped = chars
                    .next()
                    .ok_or_else(|| "trailing backslash in command".to_string())?;
                current.push(escaped);
            }
            c if c.is_ascii_whitespace() => {
                if in_word {
                    args.push(std::mem::take(&mut current));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                current.push(c);
            }
        }
    }
    if in_word {
        args.push(current);
    }
    Ok(args)
}

fn read_single_quoted(chars: &mut std::str::Chars<'_>, out: &mut String) -> Result<(), String> {
    for c in chars.by_ref() {
        if c == '\'' {
            return Ok(());
        }
        out.push(c);
    }
    Err("unterminated single quote in command".to_string())
}

fn read_double_quoted(chars: &mut std::str::Chars<'_>, out: &mut String) -> Result<(), String> {
    let unterminated = || "unterminated double quote in command".to_string();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Ok(()),
            '\\' => {
                let next = chars.next().ok_or_else(unterminated)?;
                if !matches!(next, '"' | '\\' | '$' | '`' | '\n') {
                    out.push('\\');
                }
                out.push(next);
            }
            c => out.push(c),
        }
    }
    Err(unterminated())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_is_exact() {
        assert_eq!(
            input_schema(),
            r#"{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}"#
        );
        let parsed: serde_json::Value = serde_json::from_str(input_schema()).expect("valid JSON");
        assert_eq!(parsed["required"][0], "command");
    }

    #[test]
    fn parse_input_accepts_command() {
        assert_eq!(
            parse_input(r#"{"command":"echo hi"}"#),
            Ok("echo hi".to_string())
        );
    }

    #[test]
    fn parse_input_rejects_bad_json_with_exact_text() {
        let expected_err = serde_json::from_str::<serde_json::Value>("{not json")
            .expect_err("invalid")
            .to_string();
        assert_eq!(
            parse_input("{not json"),
            Err(format!(
                "shell tool input must be valid JSON: {expected_err}"
            ))
        );
        assert_eq!(
            parse_input("{not json"),
            Err(
                "shell tool input must be valid JSON: key must be a string at line 1 column 2"
                    .to_string()
            )
        );
    }

    #[test]
    fn parse_input_rejects_missing_blank_or_non_string_command() {
        let expected = Err(MISSING_COMMAND.to_string());
        assert_eq!(
            MISSING_COMMAND,
            "shell tool input must include a non-empty 'command' string"
        );
        for input in [
            "{}",
            r#"{"command":""}"#,
            r#"{"command":"  \n\t"}"#,
            r#"{"command":42}"#,
            r#"{"command":null}"#,
            r#"{"cmd":"ls"}"#,
            r#""ls""#,
            "[]",
        ] {
            assert_eq!(parse_input(input), expected, "input {input}");
        }
    }

    #[test]
    fn split_args_groups_quotes_and_escapes() {
        let cases: &[(&str, &[&str])] = &[
            ("", &[]),
            ("   ", &[]),
            ("-la /tmp", &["-la", "/tmp"]),
            ("  a \t b\nc  ", &["a", "b", "c"]),
            ("'a b' \"c d\"", &["a b", "c d"]),
            ("pre'mid dle'post", &["premid dlepost"]),
            ("'' \"\"", &["", ""]),
            (r"a\ b", &["a b"]),
            (r"\'x\'", &["'x'"]),
            (r#"'no \escape here'"#, &[r"no \escape here"]),
            (
                r#""q\"uote" "back\\slash" "keep\n""#,
                &["q\"uote", r"back\slash", r"keep\n"],
            ),
            ("'$HOME' \"$HOME\" *.rs", &["$HOME", "$HOME", "*.rs"]),
            ("\"it's\" 'say \"hi\"'", &["it's", "say \"hi\""]),
            ("ünï 'cödé 🚀'", &["ünï", "cödé 🚀"]),
        ];
        for (input, expected) in cases {
            let expected: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
            assert_eq!(split_args(input), Ok(expected), "input {input:?}");
        }
    }

    #[test]
    fn split_args_rejects_unterminated_input() {
        assert_eq!(
            split_args("'open"),
            Err("unterminated single quote in command".to_string())
        );
        assert_eq!(
            split_args("a \"open"),
            Err("unterminated double quote in command".to_string())
        );
        assert_eq!(
            split_args("\"ends in escape\\"),
            Err("unterminated double quote in command".to_string())
        );
        assert_eq!(
            split_args("trailing\\"),
            Err("trailing backslash in command".to_string())
        );
    }
}
