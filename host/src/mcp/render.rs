//! A tool call's result as the model reads it: one text, the server's text blocks as
//! they came and every other block named in one bracketed line, cut to what the
//! capsule lets one tool result hold.
//!
//! Binary content (images, audio, blobs) is named, not passed: the model cannot use
//! base64 as text, and it would spend the result's bytes on nothing.

use std::fmt::Write as _;

use serde_json::Value;

/// What the model is told a call returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub text: String,
    /// The server said the tool failed (`isError: true`).
    pub is_error: bool,
    /// `text` was cut to the bound.
    pub truncated: bool,
}

/// `result` (a `CallToolResult`, whatever its shape) as at most `max_bytes` of text.
pub fn render(result: &Value, max_bytes: usize) -> Rendered {
    let blocks = result
        .get("content")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let mut parts: Vec<String> = blocks.iter().map(block).collect();
    let has_text = blocks
        .iter()
        .any(|b| b.get("type").and_then(Value::as_str) == Some("text"));
    if !has_text && let Some(structured) = result.get("structuredContent") {
        parts.push(format!("[structured content]\n{structured}"));
    }
    let mut text = parts.join("\n");
    let truncated = text.len() > max_bytes;
    if truncated {
        text.truncate(text.floor_char_boundary(max_bytes));
    }
    Rendered {
        text,
        is_error: result.get("isError").and_then(Value::as_bool) == Some(true),
        truncated,
    }
}

/// One content block.
fn block(block: &Value) -> String {
    let field = |name: &str| block.get(name).and_then(Value::as_str);
    match field("type") {
        Some("text") => field("text").unwrap_or_default().to_string(),
        Some(kind @ ("image" | "audio")) => {
            let mime = field("mimeType").unwrap_or("unknown type");
            let bytes = decoded_len(field("data").unwrap_or_default());
            format!("[{kind}: {}, {}]", one_line(mime), size(bytes))
        }
        Some("resource") => resource(block.get("resource").unwrap_or(&Value::Null)),
        Some("resource_link") => format!(
            "[resource link: {} {}]",
            one_line(field("name").unwrap_or_default()),
            one_line(field("uri").unwrap_or_default())
        ),
        Some(kind) => format!("[content of type {} not shown]", one_line(kind)),
        None => "[content without a type not shown]".into(),
    }
}

/// An embedded resource: its text under a line naming it, or a blob named.
fn resource(resource: &Value) -> String {
    let field = |name: &str| resource.get(name).and_then(Value::as_str);
    let uri = one_line(field("uri").unwrap_or_default());
    if let Some(text) = field("text") {
        return format!("[resource {uri}]\n{text}");
    }
    let mime = one_line(field("mimeType").unwrap_or("application/octet-stream"));
    let bytes = decoded_len(field("blob").unwrap_or_default());
    format!("[resource {uri}: {mime}, {bytes} bytes]")
}

/// A server's word put in a bracketed line: it cannot end the line or start another.
fn one_line(text: &str) -> String {
    crate::escape::line(text).into_owned()
}

/// How many bytes base64 `data` decodes to (padding and line breaks aside).
fn decoded_len(data: &str) -> usize {
    let symbols = data
        .bytes()
        .filter(|b| !b.is_ascii_whitespace() && *b != b'=')
        .count();
    symbols * 3 / 4
}

/// `12.3 KiB`, `2.0 MiB`, `512 bytes`.
fn size(bytes: usize) -> String {
    let mut out = String::new();
    if bytes < 1024 {
        let _ = write!(out, "{bytes} bytes");
    } else if bytes < 1024 * 1024 {
        let _ = write!(out, "{:.1} KiB", bytes as f64 / 1024.0);
    } else {
        let _ = write!(out, "{:.1} MiB", bytes as f64 / (1024.0 * 1024.0));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_blocks_come_as_they_are() {
        let result = json!({"content": [
            {"type": "text", "text": "first\nline"},
            {"type": "text", "text": "second"},
        ]});
        let rendered = render(&result, 1000);
        assert_eq!(rendered.text, "first\nline\nsecond");
        assert!(!rendered.is_error && !rendered.truncated);
    }

    #[test]
    fn binary_blocks_are_named_with_their_size() {
        let png = "A".repeat(16800); // 12,600 bytes decoded
        let result = json!({"content": [
            {"type": "image", "mimeType": "image/png", "data": png},
            {"type": "audio", "mimeType": "audio/wav", "data": "AAAA"},
        ]});
        assert_eq!(
            render(&result, 1000).text,
            "[image: image/png, 12.3 KiB]\n[audio: audio/wav, 3 bytes]"
        );
    }

    #[test]
    fn resources_and_links() {
        let result = json!({"content": [
            {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "hello"}},
            {"type": "resource", "resource": {"uri": "file:///b.bin", "mimeType": "application/zip", "blob": "AAAAAAAA"}},
            {"type": "resource_link", "name": "c", "uri": "file:///c"},
            {"type": "hologram"},
            {"text": "no type"},
        ]});
        assert_eq!(
            render(&result, 1000).text,
            "[resource file:///a.txt]\nhello\n\
             [resource file:///b.bin: application/zip, 6 bytes]\n\
             [resource link: c file:///c]\n\
             [content of type hologram not shown]\n\
             [content without a type not shown]"
        );
    }

    #[test]
    fn structured_content_only_without_text() {
        let both =
            json!({"content": [{"type": "text", "text": "t"}], "structuredContent": {"a": 1}});
        assert_eq!(render(&both, 100).text, "t");
        let only = json!({"content": [], "structuredContent": {"a": [1, 2]}});
        assert_eq!(
            render(&only, 100).text,
            "[structured content]\n{\"a\":[1,2]}"
        );
    }

    #[test]
    fn errors_are_flagged_and_long_text_cut_on_a_char_boundary() {
        let result = json!({"isError": true, "content": [{"type": "text", "text": "ééééé"}]});
        let rendered = render(&result, 5);
        assert!(rendered.is_error && rendered.truncated);
        assert_eq!(rendered.text, "éé");
    }

    #[test]
    fn a_server_cannot_forge_a_line_in_a_bracket() {
        let result =
            json!({"content": [{"type": "resource_link", "name": "a\n[image: x]", "uri": "u"}]});
        assert!(!render(&result, 1000).text.contains('\n'));
    }

    #[test]
    fn any_shape_renders_without_panicking() {
        for value in [
            Value::Null,
            json!(1),
            json!("s"),
            json!([]),
            json!({"content": "x"}),
            json!({"content": [1, null, [], {"type": 5}, {"type": "image", "data": 7}]}),
            json!({"content": [{"type": "resource", "resource": 3}], "isError": "yes"}),
        ] {
            let _ = render(&value, 0);
            let _ = render(&value, 10);
        }
    }
}
