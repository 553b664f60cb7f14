//! How figures read in `mur trace`'s tables, as upstream prints them where it has them.

use serde_json::Value;

/// How wide a section rule is, heading included.
const RULE_WIDTH: usize = 49;

/// `── Name ─────…`, as wide as every other rule.
pub fn section(name: &str) -> String {
    let head = format!("── {name} ");
    let fill = RULE_WIDTH.saturating_sub(head.chars().count());
    format!("{head}{}", "─".repeat(fill))
}

/// `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `850ms` under a second, `1.2s` from one.
pub fn duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}

/// An id cut to `len` characters, with `…` when anything was cut.
pub fn short_id(id: &str, len: usize) -> String {
    match id.char_indices().nth(len) {
        Some((i, _)) => format!("{}…", &id[..i]),
        None => id.to_string(),
    }
}

/// A call's input as compact JSON, at most `limit` characters (then `…`).
pub fn input_inline(input: &Value, limit: usize) -> String {
    let text = match input {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    cut(&text, limit)
}

/// `text` on one line, at most `limit` characters (then `…`).
pub fn cut(text: &str, limit: usize) -> String {
    let one_line: String = text
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    short_id(&one_line, limit)
}

/// `✓` for a call that went well, `✗` for one that did not.
pub fn mark(ok: bool) -> &'static str {
    if ok { "✓" } else { "✗" }
}

/// The one line that says a torn last line was skipped.
pub fn torn_note(line: usize) -> String {
    format!(
        "line {line}, the last, is not valid JSON and was skipped (its writer was stopped mid-line)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_read_as_upstream_prints_them() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(duration(999), "999ms");
        assert_eq!(duration(1250), "1.2s");
        assert_eq!(short_id("tsk_0123456789abcdef", 12), "tsk_01234567…");
        assert_eq!(short_id("tsk_01", 12), "tsk_01");
        assert_eq!(section("Turns").chars().count(), RULE_WIDTH);
        assert!(section("Turns").starts_with("── Turns ──"));
        assert_eq!(cut("a\nb", 10), "a b");
    }
}
