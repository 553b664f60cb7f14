//! The request a driver receives for one inference turn: the loop's messages, with the
//! capsule's model, output cap and system prompt, the tools the loop offers and the
//! parameters it set, each checked here. A request the host refuses never reaches the
//! driver and uses no turn.

use serde_json::{Value, json};

use crate::bindings::driver::exports::murmur::driver::inference::{Params, Request};
use crate::bindings::message::ToolSpec;
use crate::bindings::session_loop::murmur::session::types::{
    InferenceRequest, Params as LoopParams,
};
use crate::conversation;

/// What every request of a session carries besides the loop's messages.
pub struct Base {
    pub model: String,
    /// `inference.max_tokens`.
    pub max_tokens: u32,
    /// The capsule's system prompt: its `[Capsule]` block and the manifest's prompt.
    pub system: Option<String>,
}

/// Stop sequences a request may carry, as the providers allow.
const MAX_STOP: usize = 4;

impl Base {
    /// The driver's request, or why the loop's request is refused (in the words the
    /// loop receives).
    /// `all` are the specs of the capsule's tools.
    pub fn build(&self, asked: InferenceRequest, all: &[ToolSpec]) -> Result<Request, String> {
        let offered = offered_tools(asked.tools.as_deref(), all)?;
        let max_tokens = self.output_cap(asked.max_tokens)?;
        let params = checked(asked.params)?;
        Ok(Request {
            model: self.model.clone(),
            max_tokens,
            system: self.system_with(asked.system),
            messages: asked.messages,
            tools: offered,
            params,
        })
    }

    /// The capsule's prompt first, then the loop's addition.
    fn system_with(&self, addition: Option<String>) -> Option<String> {
        match (&self.system, addition) {
            (Some(own), Some(more)) => Some(format!("{own}\n\n{more}")),
            (Some(own), None) => Some(own.clone()),
            (None, more) => more,
        }
    }

    fn output_cap(&self, asked: Option<u32>) -> Result<u32, String> {
        match asked {
            None => Ok(self.max_tokens),
            Some(n) if (1..=self.max_tokens).contains(&n) => Ok(n),
            Some(n) => Err(format!(
                "max-tokens must be between 1 and inference.max_tokens ({}); the loop sent {n}",
                self.max_tokens
            )),
        }
    }
}

/// The specs of the tools offered: every tool for `None`, else those named, in the
/// order named.
fn offered_tools(names: Option<&[String]>, all: &[ToolSpec]) -> Result<Vec<ToolSpec>, String> {
    let Some(names) = names else {
        return Ok(all.to_vec());
    };
    names
        .iter()
        .map(|name| {
            all.iter()
                .find(|spec| &spec.name == name)
                .cloned()
                .ok_or_else(|| unknown_tool(name, all))
        })
        .collect()
}

fn unknown_tool(name: &str, all: &[ToolSpec]) -> String {
    let have = if all.is_empty() {
        "it has no tools".to_string()
    } else {
        let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
        format!("its tools: {}", names.join(", "))
    };
    format!("the loop offered tool '{name}', which this capsule does not have ({have})")
}

/// The loop's parameters, each within the range every provider accepts.
fn checked(params: LoopParams) -> Result<Params, String> {
    if let Some(t) = params.temperature
        && !(0.0..=2.0).contains(&t)
    {
        return Err(format!(
            "params.temperature must be between 0 and 2; the loop sent {t}"
        ));
    }
    if let Some(p) = params.top_p
        && !(p > 0.0 && p <= 1.0)
    {
        return Err(format!(
            "params.top_p must be above 0 and at most 1; the loop sent {p}"
        ));
    }
    if params.stop.len() > MAX_STOP {
        return Err(format!(
            "params.stop holds at most {MAX_STOP} sequences; the loop sent {}",
            params.stop.len()
        ));
    }
    if params.stop.iter().any(String::is_empty) {
        return Err("params.stop holds an empty sequence".into());
    }
    Ok(Params {
        temperature: params.temperature,
        top_p: params.top_p,
        stop: params.stop,
    })
}

/// The request in the JSON shape drivers used to receive. The host measures a request
/// by it (4 bytes a token), so estimates stay what they were.
pub fn json_form(request: &Request) -> String {
    let mut body = json!({"model": request.model, "max_tokens": request.max_tokens});
    if let Some(system) = &request.system {
        body["system"] = system.clone().into();
    }
    body["messages"] = conversation::all_to_json(&request.messages).into();
    let tools: Vec<Value> = request.tools.iter().map(spec_json).collect();
    body["tools"] = tools.into();
    body["params"] = params_json(&request.params);
    body.to_string()
}

fn spec_json(spec: &ToolSpec) -> Value {
    let mut value = json!({"name": spec.name});
    if !spec.description.is_empty() {
        value["description"] = spec.description.clone().into();
    }
    value["parameters"] =
        serde_json::from_str(&spec.input_schema).unwrap_or_else(|_| json!({"type": "object"}));
    value
}

fn params_json(params: &Params) -> Value {
    let mut value = json!({});
    if let Some(t) = params.temperature {
        value["temperature"] = t.into();
    }
    if let Some(p) = params.top_p {
        value["top_p"] = p.into();
    }
    if !params.stop.is_empty() {
        value["stop"] = params.stop.clone().into();
    }
    value
}

#[cfg(test)]
mod tests;
