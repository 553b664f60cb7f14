//! Word-wrapping a completed task's response for the terminal.

/// Word-wraps each line of `text` at `width` columns, keeping its indentation.
/// A word longer than the width gets a line of its own rather than being split.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let indent: String = line.chars().take_while(|c| c.is_whitespace()).collect();
        let indent = if indent.chars().count() < width / 2 {
            indent
        } else {
            String::new()
        };
        let indent_len = indent.chars().count();
        let mut current = indent.clone();
        let mut len = indent_len;
        let mut empty = true;
        for word in line.split_whitespace() {
            let word_len = word.chars().count();
            if !empty && len + 1 + word_len > width {
                out.push(std::mem::replace(&mut current, indent.clone()));
                len = indent_len;
                empty = true;
            }
            if !empty {
                current.push(' ');
                len += 1;
            }
            current.push_str(word);
            len += word_len;
            empty = false;
        }
        out.push(if empty { String::new() } else { current });
    }
    while out.last().is_some_and(String::is_empty) {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_wrap_at_78_columns() {
        let text = "word ".repeat(40);
        let lines = wrap(&text, 78);
        assert!(lines.iter().all(|l| l.chars().count() <= 78), "{lines:?}");
        assert_eq!(lines.join(" ").split_whitespace().count(), 40);
        assert_eq!(lines[0].chars().count(), 74);
        assert_eq!(
            wrap("a\n\n  indented line\n\n", 78),
            vec!["a", "", "  indented line"]
        );
        let long = "x".repeat(100);
        assert_eq!(
            wrap(&format!("a {long} b"), 78),
            vec!["a".to_string(), long, "b".into()]
        );
        assert_eq!(wrap("", 78), Vec::<String>::new());
    }
}
