//! What a server asks of the client while a call runs, and the answer: a ping, the
//! roots (none: a server sees only what its sandbox shows it), and elicitation, which
//! goes to the person the call belongs to. Everything else mur does not do.
//!
//! An elicitation is one question and one free-text answer: the server's message and
//! the names of the fields it wants make the question, and the answer is fitted to the
//! requested schema. An answer that does not fit is a decline, never a guess.

use serde_json::{Map, Value, json};

use super::connection::Person;
use super::protocol::Refusal;

/// The most of a server's message a question quotes, in characters.
const MAX_MESSAGE: usize = 1000;

/// The answer to what needs no person; `None` for an elicitation, which does.
pub(super) fn plain(method: &str) -> Option<Result<Value, Refusal>> {
    match method {
        "ping" => Some(Ok(json!({}))),
        "roots/list" => Some(Ok(json!({"roots": []}))),
        "elicitation/create" => None,
        other => Some(Err(Refusal::unsupported(other))),
    }
}

/// The answer to the server's request `method`, asking `person` when it is an
/// elicitation.
pub(super) async fn serve(
    server: &str,
    method: &str,
    params: &Value,
    person: Option<&dyn Person>,
) -> Result<Value, Refusal> {
    match plain(method) {
        Some(answer) => answer,
        None => Ok(elicit(server, params, person).await),
    }
}

/// The `ElicitResult` for an `elicitation/create` with `params`.
pub(super) async fn elicit(server: &str, params: &Value, person: Option<&dyn Person>) -> Value {
    let decline = json!({"action": "decline"});
    let Some(person) = person else {
        return decline;
    };
    let message = quoted(params.get("message").and_then(Value::as_str).unwrap_or(""));
    if params.get("mode").and_then(Value::as_str) == Some("url") {
        let url = quoted(params.get("url").and_then(Value::as_str).unwrap_or(""));
        let prompt = format!(
            "MCP server '{server}' asks you to open {url} and finish there: {message}. \
             Answer anything once done, or nothing to decline."
        );
        return match person.ask(&prompt).await {
            Ok(answer) if !answer.trim().is_empty() => json!({"action": "accept"}),
            _ => decline,
        };
    }
    let schema = params.get("requestedSchema").unwrap_or(&Value::Null);
    let fields = Fields::of(schema);
    let prompt = format!("MCP server '{server}' asks: {message}{}", fields.hint());
    match person.ask(&prompt).await {
        Ok(answer) => match fields.content(&answer) {
            Some(content) => json!({"action": "accept", "content": content}),
            None => decline,
        },
        Err(_) => decline,
    }
}

/// A server's words, made one line and cut, for a question a person reads.
fn quoted(text: &str) -> String {
    let scrubbed = crate::secret::scrub(text.trim());
    let line = crate::escape::line(&scrubbed);
    match line.char_indices().nth(MAX_MESSAGE) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.into_owned(),
    }
}

/// The fields a form asks for, in the schema's order.
struct Fields<'a> {
    properties: Vec<(&'a str, &'a Value)>,
    required: Vec<&'a str>,
}

impl<'a> Fields<'a> {
    fn of(schema: &'a Value) -> Fields<'a> {
        let properties = schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.iter().map(|(k, v)| (k.as_str(), v)).collect())
            .unwrap_or_default();
        let required = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        Fields {
            properties,
            required,
        }
    }

    /// What the question adds so the person knows what to answer.
    fn hint(&self) -> String {
        match self.properties.as_slice() {
            [] => " (answer yes to go on, no to decline)".into(),
            [(name, schema)] => {
                let kind = schema.get("type").and_then(Value::as_str).unwrap_or("text");
                format!(" (answer: {}, {})", quoted(name), quoted(kind))
            }
            many => {
                let names: Vec<String> = many.iter().map(|(n, _)| quoted(n)).collect();
                format!(" (answer with a JSON object of: {})", names.join(", "))
            }
        }
    }

    /// The form's content from `answer`, or `None` when it does not fit.
    fn content(&self, answer: &str) -> Option<Value> {
        match self.properties.as_slice() {
            // A form with no fields is a confirmation.
            [] => (!is_no(answer)).then(|| json!({})),
            [(name, schema)] => {
                let value = coerce(answer.trim(), schema)?;
                let mut content = Map::new();
                content.insert((*name).to_string(), value);
                Some(Value::Object(content))
            }
            _ => self.object(answer),
        }
    }

    /// A JSON object answering a form of several fields: only its fields, each of its
    /// type, every required one there.
    fn object(&self, answer: &str) -> Option<Value> {
        let Ok(Value::Object(given)) = serde_json::from_str::<Value>(answer.trim()) else {
            return None;
        };
        let mut content = Map::new();
        for (name, value) in given {
            let (_, schema) = self.properties.iter().find(|(n, _)| *n == name)?;
            if !fits(&value, schema) {
                return None;
            }
            content.insert(name, value);
        }
        if self.required.iter().any(|r| !content.contains_key(*r)) {
            return None;
        }
        Some(Value::Object(content))
    }
}

fn is_no(answer: &str) -> bool {
    matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "" | "no" | "n" | "decline" | "cancel"
    )
}

/// `answer` as a value of the property's type.
fn coerce(answer: &str, schema: &Value) -> Option<Value> {
    let value = match schema.get("type").and_then(Value::as_str) {
        Some("number") => {
            let number = answer.parse::<f64>().ok().filter(|n| n.is_finite())?;
            serde_json::Number::from_f64(number).map(Value::Number)?
        }
        Some("integer") => Value::from(answer.parse::<i64>().ok()?),
        Some("boolean") => match answer.to_ascii_lowercase().as_str() {
            "true" | "yes" | "y" => Value::Bool(true),
            "false" | "no" | "n" => Value::Bool(false),
            _ => return None,
        },
        Some("array") => Value::from(
            answer
                .split(',')
                .map(|item| item.trim().to_string())
                .filter(|item| !item.is_empty())
                .collect::<Vec<_>>(),
        ),
        _ => Value::String(answer.to_string()),
    };
    fits(&value, schema).then_some(value)
}

/// Whether `value` is of the property's type and among its choices, when it has some.
fn fits(value: &Value, schema: &Value) -> bool {
    let typed = match schema.get("type").and_then(Value::as_str) {
        Some("number") => value.is_number(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("boolean") => value.is_boolean(),
        Some("string") => value.is_string(),
        Some("array") => value
            .as_array()
            .is_some_and(|items| items.iter().all(Value::is_string)),
        _ => !value.is_object(),
    };
    typed && among_choices(value, schema)
}

/// An `enum` or a titled `oneOf` of `const`s limits a value to its choices; an array's
/// items are limited by its `items`' choices.
fn among_choices(value: &Value, schema: &Value) -> bool {
    if let Some(items) = value.as_array() {
        let item_schema = schema.get("items").unwrap_or(&Value::Null);
        return items.iter().all(|item| among_choices(item, item_schema));
    }
    let mut choices = Vec::new();
    if let Some(listed) = schema.get("enum").and_then(Value::as_array) {
        choices.extend(listed.iter());
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(options) = schema.get(key).and_then(Value::as_array) {
            choices.extend(options.iter().filter_map(|o| o.get("const")));
        }
    }
    choices.is_empty() || choices.contains(&value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::future::BoxFuture;
    use std::sync::Mutex;

    /// A person who gives one answer and keeps the question.
    struct Says {
        answer: Result<String, String>,
        asked: Mutex<Vec<String>>,
    }

    impl Says {
        fn new(answer: &str) -> Says {
            Says {
                answer: Ok(answer.into()),
                asked: Mutex::new(Vec::new()),
            }
        }
    }

    impl Person for Says {
        fn ask<'a>(&'a self, prompt: &'a str) -> BoxFuture<'a, Result<String, String>> {
            self.asked.lock().unwrap().push(prompt.into());
            let answer = self.answer.clone();
            Box::pin(async move { answer })
        }
    }

    fn form(properties: Value, required: Value) -> Value {
        json!({
            "message": "Which\nrepo?",
            "requestedSchema": {"type": "object", "properties": properties, "required": required},
        })
    }

    async fn answer(person: &Says, params: &Value) -> Value {
        elicit("gh", params, Some(person)).await
    }

    #[tokio::test]
    async fn one_field_takes_the_answer_in_its_type() {
        let params = form(json!({"count": {"type": "integer"}}), json!(["count"]));
        let person = Says::new(" 42 ");
        assert_eq!(
            answer(&person, &params).await,
            json!({"action": "accept", "content": {"count": 42}})
        );
        let question = person.asked.lock().unwrap()[0].clone();
        assert!(
            question.starts_with("MCP server 'gh' asks: Which\\u{a}repo?"),
            "{question}"
        );
        assert!(question.contains("count, integer"));
        let flag = form(json!({"ok": {"type": "boolean"}}), json!([]));
        assert_eq!(
            answer(&Says::new("yes"), &flag).await["content"],
            json!({"ok": true})
        );
        let number = form(json!({"n": {"type": "number"}}), json!([]));
        assert_eq!(
            answer(&Says::new("1.5"), &number).await["content"],
            json!({"n": 1.5})
        );
    }

    #[tokio::test]
    async fn an_answer_that_does_not_fit_declines() {
        let decline = json!({"action": "decline"});
        let count = form(json!({"count": {"type": "integer"}}), json!([]));
        assert_eq!(answer(&Says::new("many"), &count).await, decline);
        let pick = form(
            json!({"c": {"type": "string", "enum": ["red", "blue"]}}),
            json!([]),
        );
        assert_eq!(answer(&Says::new("green"), &pick).await, decline);
        assert_eq!(
            answer(&Says::new("red"), &pick).await["content"],
            json!({"c": "red"})
        );
    }

    #[tokio::test]
    async fn several_fields_take_a_json_object() {
        let params = form(
            json!({"owner": {"type": "string"}, "stars": {"type": "integer"}}),
            json!(["owner"]),
        );
        let good = Says::new(r#"{"owner": "me", "stars": 3}"#);
        assert_eq!(
            answer(&good, &params).await,
            json!({"action": "accept", "content": {"owner": "me", "stars": 3}})
        );
        for bad in [
            r#"{"stars": 3}"#,
            r#"{"owner": "me", "extra": 1}"#,
            "me",
            r#"{"owner": 5}"#,
        ] {
            assert_eq!(
                answer(&Says::new(bad), &params).await["action"],
                "decline",
                "{bad}"
            );
        }
    }

    #[tokio::test]
    async fn no_person_or_no_answer_declines() {
        let params = form(json!({"a": {"type": "string"}}), json!([]));
        assert_eq!(
            elicit("s", &params, None).await,
            json!({"action": "decline"})
        );
        let refuses = Says {
            answer: Err("no one is there".into()),
            asked: Mutex::new(Vec::new()),
        };
        assert_eq!(
            answer(&refuses, &params).await,
            json!({"action": "decline"})
        );
    }

    #[tokio::test]
    async fn a_url_elicitation_names_the_url_and_accepts_without_content() {
        let params = json!({"mode": "url", "url": "https://x.test/auth", "message": "Sign in", "elicitationId": "e1"});
        let person = Says::new("done");
        assert_eq!(answer(&person, &params).await, json!({"action": "accept"}));
        assert!(person.asked.lock().unwrap()[0].contains("https://x.test/auth"));
    }

    #[test]
    fn what_needs_no_person_is_answered_plainly() {
        assert_eq!(plain("ping"), Some(Ok(json!({}))));
        assert_eq!(plain("roots/list"), Some(Ok(json!({"roots": []}))));
        assert_eq!(plain("elicitation/create"), None);
        let Some(Err(refusal)) = plain("sampling/createMessage") else {
            panic!("sampling is refused");
        };
        assert_eq!(refusal.code, -32601);
        assert!(refusal.message.contains("not supported by mur"));
    }
}
