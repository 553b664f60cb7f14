//! JSON that is JSON by nature: a tool call's input and a tool's input schema travel as
//! JSON text inside the typed request and response.
//!
//! A provider's body embeds that text as an object (or, for OpenAI's `arguments`, as the
//! string of it), written exactly as `serde_json` writes a value: compact, keys in their
//! order, strings escaped the one way it escapes them. Text already in that form (the
//! host's own, and what [`tool_input`] returns) is checked, not rebuilt, so a request of
//! many tool calls costs a scan of each, not a parse into a tree; anything else is parsed
//! and written again, as drivers always did.

use crate::clip;
use serde::{Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// The schema of a tool that gave none: an object of no particular properties.
pub const ANY_OBJECT: &str = r#"{"type":"object","properties":{}}"#;

/// The text of a JSON object in `serde_json`'s compact form, borrowed when it already was.
#[derive(Debug, Clone)]
pub enum Object<'a> {
    Borrowed(&'a RawValue),
    Owned(Box<RawValue>),
}

impl Object<'_> {
    /// `text` if it is a JSON object, made compact; `None` for anything else.
    pub fn parse(text: &str) -> Option<Object<'_>> {
        let raw: &RawValue = serde_json::from_str(text).ok()?;
        if !raw.get().starts_with('{') {
            return None;
        }
        if is_compact(raw.get()) {
            return Some(Object::Borrowed(raw));
        }
        let value: Value = serde_json::from_str(raw.get()).ok()?;
        serde_json::value::to_raw_value(&value)
            .ok()
            .map(Object::Owned)
    }

    /// `text` if it is a JSON object, else `fallback` (a constant object).
    pub fn or<'a>(text: &'a str, fallback: &'static str) -> Object<'a> {
        Object::parse(text).unwrap_or_else(|| Object::constant(fallback))
    }

    /// A constant the program itself wrote; `{}` should it ever not be JSON.
    fn constant(text: &'static str) -> Object<'static> {
        match serde_json::from_str(text) {
            Ok(raw) => Object::Borrowed(raw),
            Err(_) => Object::Owned(RawValue::from_string("{}".into()).unwrap_or_default()),
        }
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        match self {
            Object::Borrowed(raw) => raw.get(),
            Object::Owned(raw) => raw.get(),
        }
    }

    pub fn into_string(self) -> String {
        match self {
            Object::Borrowed(raw) => raw.get().to_string(),
            Object::Owned(raw) => String::from(Box::<str>::from(raw)),
        }
    }
}

/// Written into a body as the object itself.
impl Serialize for Object<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Object::Borrowed(raw) => raw.serialize(serializer),
            Object::Owned(raw) => raw.serialize(serializer),
        }
    }
}

/// Whether valid JSON `text` is already as `serde_json` would write it. Cautious: text
/// that might be written otherwise (any space between tokens, a number with a fraction,
/// an exponent, a minus zero or more than 18 digits, an escape other than `\"`, `\\`,
/// `\n`, `\r`, `\t`, `\b`, `\f`) answers no and is rewritten.
fn is_compact(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut in_string = false;
    // Digits in the number being read; 0 outside numbers.
    let mut digits = 0;
    let mut at = 0;
    while let Some(&byte) = bytes.get(at) {
        if in_string {
            match byte {
                b'"' => in_string = false,
                b'\\' => match bytes.get(at + 1) {
                    Some(b'"' | b'\\' | b'n' | b'r' | b't' | b'b' | b'f') => at += 1,
                    _ => return false,
                },
                _ => {}
            }
        } else {
            match byte {
                b'"' => in_string = true,
                b'0'..=b'9' => {
                    digits += 1;
                    if digits > 18 {
                        return false;
                    }
                }
                b'-' if bytes.get(at + 1) == Some(&b'0') => return false,
                // Outside strings these occur only in numbers with a fraction or exponent.
                b'.' | b'+' => return false,
                b'e' | b'E' if digits > 0 => return false,
                b' ' | b'\t' | b'\n' | b'\r' => return false,
                _ => {}
            }
            if !byte.is_ascii_digit() {
                digits = 0;
            }
        }
        at += 1;
    }
    true
}

/// Reads tool-call arguments a model produced as text into the call's input: a JSON
/// object in compact form. Empty or `null` means no arguments; a JSON string holding an
/// object (some models encode twice) is unwrapped.
pub fn tool_input(name: &str, arguments: &str) -> Result<String, String> {
    if arguments.trim().is_empty() {
        return Ok("{}".into());
    }
    if let Some(object) = Object::parse(arguments) {
        return Ok(object.into_string());
    }
    let value: Value = serde_json::from_str(arguments).map_err(|e| {
        format!(
            "the model sent tool-call arguments for '{name}' that are not JSON ({e}): {}",
            clip(arguments, 300)
        )
    })?;
    match value {
        Value::Null => Ok("{}".into()),
        Value::String(inner) if inner.trim_start().starts_with('{') => tool_input(name, &inner),
        _ => Err(format!(
            "the model sent tool-call arguments for '{name}' that are not a JSON object: {}",
            clip(arguments, 300)
        )),
    }
}

/// A provider's `arguments` or `input` field, which may be the object or the text of it.
pub fn object_or_text(raw: &RawValue) -> Option<Cow<'_, str>> {
    match raw.get().as_bytes().first() {
        Some(b'{') => Some(Cow::Borrowed(raw.get())),
        Some(b'"') => serde_json::from_str::<Cow<str>>(raw.get()).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the drivers wrote before this module: a round trip through `Value`.
    fn via_value(text: &str) -> String {
        serde_json::from_str::<Value>(text).unwrap().to_string()
    }

    #[test]
    fn compact_text_is_kept_and_anything_else_is_written_as_serde_json_would() {
        let cases = [
            r#"{"a":1,"b":[true,false,null],"c":{"d":"x\"y\\z\n"},"e":-5,"f":"1.5e3 .+"}"#,
            r#"{ "a" : 1 }"#,
            "{\n  \"path\": \".\"\n}",
            r#"{"a":1.50}"#,
            r#"{"a":1e3}"#,
            r#"{"a":-0}"#,
            r#"{"a":12345678901234567890}"#,
            r#"{"a":"\u00e9\/"}"#,
            r#"{"z":1,"a":2}"#,
            r#"{"a":"\u0001"}"#,
        ];
        for text in cases {
            let object = Object::parse(text).unwrap();
            assert_eq!(object.as_str(), via_value(text), "{text}");
            assert_eq!(serde_json::to_string(&object).unwrap(), via_value(text));
        }
        assert!(matches!(Object::parse(cases[0]), Some(Object::Borrowed(_))));
        assert!(matches!(Object::parse(cases[1]), Some(Object::Owned(_))));
    }

    #[test]
    fn what_is_not_an_object_takes_the_fallback() {
        for text in ["[1]", "3", "\"{}\"", "{", "", "null"] {
            assert!(Object::parse(text).is_none(), "{text}");
        }
        assert_eq!(Object::or("[1]", ANY_OBJECT).as_str(), ANY_OBJECT);
        assert_eq!(Object::or(" {\"a\":1} ", ANY_OBJECT).as_str(), r#"{"a":1}"#);
    }

    #[test]
    fn tool_arguments_are_read_tolerantly() {
        assert_eq!(tool_input("t", "").unwrap(), "{}");
        assert_eq!(tool_input("t", "null").unwrap(), "{}");
        assert_eq!(tool_input("t", r#""{\"a\":1}""#).unwrap(), r#"{"a":1}"#);
        assert_eq!(tool_input("t", r#"{"a": 1}"#).unwrap(), r#"{"a":1}"#);
        assert!(tool_input("t", "{\"a\":").unwrap_err().contains("not JSON"));
        assert!(
            tool_input("t", "[1]")
                .unwrap_err()
                .contains("not a JSON object")
        );
    }

    #[test]
    fn an_object_or_its_text() {
        let raw = |text: &str| serde_json::from_str::<Box<RawValue>>(text).unwrap();
        assert_eq!(
            object_or_text(&raw(r#"{"a":1}"#)).as_deref(),
            Some(r#"{"a":1}"#)
        );
        assert_eq!(
            object_or_text(&raw(r#""{\"a\":1}""#)).as_deref(),
            Some(r#"{"a":1}"#)
        );
        assert_eq!(object_or_text(&raw("[1]")), None);
    }
}
