//! Text a guest chose, made safe to show: on mur's terminal (an answer, a frame `mur
//! watch` prints, a trace `mur trace` reads back) and in a line of a host log.
//!
//! Raw, such text could retitle the terminal, clear it, move the cursor or print a
//! coloured line that passes for one of mur's. So every control character (C0, DEL and
//! the C1 range, which holds a second CSI introducer), and the bidi overrides that
//! reorder what a line seems to say, become a visible `\u{..}`. The one rule serves
//! component output (`crate::guest_log`), host logs (`crate::host_log`) and the CLI.
//!
//! Only what is printed is escaped: frames on the wire, the trace and what the model
//! is sent keep the guest's text byte for byte.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` may not reach a terminal or a log as it is.
pub fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn push_escaped(c: char, out: &mut String) {
    let _ = write!(out, "\\u{{{:x}}}", c as u32);
}

/// Multi-line text (an answer, a text chunk): line ends and tabs are kept, every other
/// control character, carriage returns included, is escaped.
pub fn text(text: &str) -> Cow<'_, str> {
    if !text
        .chars()
        .any(|c| c != '\n' && c != '\t' && needs_escape(c))
    {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    text_into(text, &mut out);
    Cow::Owned(out)
}

/// [`text`], appended to `out`.
pub fn text_into(text: &str, out: &mut String) {
    for c in text.chars() {
        if c == '\n' || c == '\t' || !needs_escape(c) {
            out.push(c);
        } else {
            push_escaped(c, out);
        }
    }
}

/// One line: line ends are escaped too, so the text cannot start a line of its own.
pub fn line(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if needs_escape(c) {
            push_escaped(c, &mut out);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A JSON document for a terminal: the same value, with DEL, the C1 range and the bidi
/// overrides written as `\uXXXX` (serde escapes the C0 range, not those). They can
/// only stand inside strings, so the escape is always a valid one.
pub fn json(document: &str) -> Cow<'_, str> {
    if !document.chars().any(needs_escape) {
        return Cow::Borrowed(document);
    }
    let mut out = String::with_capacity(document.len() + 16);
    for c in document.chars() {
        // A line end between values (pretty printing) stays one.
        if needs_escape(c) && c != '\n' {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// At most `max` bytes of `text`, cut on a character boundary, with how long it was
/// when anything was cut.
pub fn cut(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let at = text.floor_char_boundary(max);
    Cow::Owned(format!(
        "{}… [cut: {} bytes in all]",
        &text[..at],
        text.len()
    ))
}

/// An error for mur's stderr, whatever guest text its message quotes: escaped, and
/// every line after the first indented, so no line of it starts where mur's own do.
pub fn error_text(rendered: &str) -> String {
    let escaped = text(rendered);
    let mut out = String::with_capacity(escaped.len());
    for (i, line) in escaped.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
            if !line.starts_with("  ") && !line.is_empty() {
                out.push_str("  ");
            }
        }
        out.push_str(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTILE: &str = "\x1b]0;pwned\x07\x1b[2J\x1b[31m[murmur] FORGED\x1b[0m\r\u{9b}31m";

    #[test]
    fn text_keeps_line_ends_and_tabs_and_escapes_the_rest() {
        assert_eq!(
            text(&format!("a\n\t{HOSTILE}\n")),
            "a\n\t\\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\u{1b}[31m[murmur] FORGED\\u{1b}[0m\\u{d}\\u{9b}31m\n"
        );
        assert!(matches!(text("plain\nlines é"), Cow::Borrowed(_)));
        assert_eq!(
            text("a\u{7f}b\u{202e}c\u{2066}"),
            "a\\u{7f}b\\u{202e}c\\u{2066}"
        );
    }

    #[test]
    fn a_line_escapes_its_line_ends() {
        assert_eq!(line("a\nb\x1b"), "a\\u{a}b\\u{1b}");
        assert_eq!(line("tab\there"), "tab\\u{9}here");
        assert!(matches!(line("ok"), Cow::Borrowed(_)));
    }

    #[test]
    fn json_stays_the_same_value() {
        let document = serde_json::json!({"text": HOSTILE, "bidi": "\u{202e}x"}).to_string();
        let shown = json(&document);
        assert!(!shown.chars().any(needs_escape), "{shown}");
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back["text"], HOSTILE);
        assert_eq!(back["bidi"], "\u{202e}x");
        assert_eq!(json("{\n  \"a\": 1\n}"), "{\n  \"a\": 1\n}");
    }

    #[test]
    fn cut_says_how_long_the_text_was() {
        assert_eq!(cut("abcdef", 10), "abcdef");
        assert_eq!(cut("abcdef", 3), "abc… [cut: 6 bytes in all]");
        // Never inside a character.
        assert_eq!(cut("ééé", 3), "é… [cut: 6 bytes in all]");
    }

    #[test]
    fn an_error_cannot_start_a_line_of_its_own() {
        let rendered =
            "error[E-RUN-007]: the loop failed: no\n[murmur] FORGED\x1b[0m\n  hint: see x";
        assert_eq!(
            error_text(rendered),
            "error[E-RUN-007]: the loop failed: no\n  [murmur] FORGED\\u{1b}[0m\n  hint: see x"
        );
    }
}
