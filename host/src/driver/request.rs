//! The request a driver receives for one inference turn: the loop's messages in the
//! neutral JSON shape `murmur:driver/inference` documents, with the capsule's model,
//! output cap, system prompt and the tools the model may call.

use serde_json::{Value, json};

/// What every request of a session carries besides the loop's messages.
pub struct Base {
    pub model: String,
    pub max_tokens: u32,
    pub system: Option<String>,
}

impl Base {
    /// The request body, or why the loop's `messages` cannot be sent (they must be a
    /// JSON array). `tools` are the specs offered, empty when the loop asked for none.
    pub fn encode(&self, messages: &str, tools: Vec<Value>) -> Result<String, String> {
        let messages: Value = serde_json::from_str(messages)
            .map_err(|e| format!("the session loop sent messages that are not JSON: {e}"))?;
        if !messages.is_array() {
            return Err("the session loop sent messages that are not a JSON array".into());
        }
        let mut body = json!({"model": self.model, "max_tokens": self.max_tokens});
        if let Some(system) = &self.system {
            body["system"] = system.clone().into();
        }
        body["messages"] = messages;
        body["tools"] = tools.into();
        body["params"] = json!({});
        Ok(body.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(system: Option<&str>) -> Base {
        Base {
            model: "m-1".into(),
            max_tokens: 512,
            system: system.map(str::to_string),
        }
    }

    #[test]
    fn a_request_carries_model_cap_system_messages_tools_and_params_in_order() {
        let tools = vec![json!({"name": "echo", "parameters": {"type": "object"}})];
        let body = base(Some("be brief"))
            .encode(r#"[{"role":"user","content":"hi"}]"#, tools)
            .unwrap();
        assert_eq!(
            body,
            r#"{"model":"m-1","max_tokens":512,"system":"be brief","messages":[{"role":"user","content":"hi"}],"tools":[{"name":"echo","parameters":{"type":"object"}}],"params":{}}"#
        );
    }

    #[test]
    fn without_a_system_prompt_or_tools_the_keys_are_absent_or_empty() {
        let body = base(None).encode("[]", Vec::new()).unwrap();
        assert_eq!(
            body,
            r#"{"model":"m-1","max_tokens":512,"messages":[],"tools":[],"params":{}}"#
        );
    }

    #[test]
    fn messages_that_are_not_json_are_refused() {
        let err = base(None).encode("[{", Vec::new()).unwrap_err();
        assert!(
            err.starts_with("the session loop sent messages that are not JSON: "),
            "{err}"
        );
    }

    #[test]
    fn messages_that_are_not_an_array_are_refused() {
        assert_eq!(
            base(None).encode(r#"{"role":"user"}"#, Vec::new()),
            Err("the session loop sent messages that are not a JSON array".to_string())
        );
    }
}
