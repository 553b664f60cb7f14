//! What the model, a driver and a loop are told of the tools: the capsule's own, then
//! what its MCP servers offer now, made once for each state of the servers' lists.

use std::sync::Arc;

use serde_json::Value;

use super::Tools;
use crate::bindings::message::ToolSpec;

impl Tools {
    /// What the model is told about the tools: `[{name, description?, parameters}]`.
    pub fn specs(&self) -> Vec<Value> {
        self.typed_specs()
            .iter()
            .map(|t| {
                let mut spec = serde_json::Map::new();
                spec.insert("name".into(), t.name.clone().into());
                if !t.description.is_empty() {
                    spec.insert("description".into(), t.description.clone().into());
                }
                let schema = serde_json::from_str(&t.input_schema).unwrap_or(Value::Null);
                spec.insert("parameters".into(), schema);
                Value::Object(spec)
            })
            .collect()
    }

    /// Every tool's name, the capsule's own first, then its MCP servers'.
    pub fn names(&self) -> Vec<String> {
        self.typed_specs().iter().map(|t| t.name.clone()).collect()
    }

    /// The specs as a session loop and a driver receive them: the capsule's own tools,
    /// then what its MCP servers offer now.
    pub fn typed_specs(&self) -> Arc<Vec<ToolSpec>> {
        let generation = self.mcp_generation();
        let mut typed = self
            .typed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((made_at, specs)) = typed.as_ref()
            && *made_at == generation
        {
            return specs.clone();
        }
        let mut specs: Vec<ToolSpec> = self
            .list
            .iter()
            .map(|t| ToolSpec {
                name: t.name.clone(),
                description: t.description.clone(),
                input_schema: t.schema.to_string(),
            })
            .collect();
        specs.extend(self.mcp_specs());
        let specs = Arc::new(specs);
        *typed = Some((generation, specs.clone()));
        specs
    }

    pub(super) fn forget_specs(&mut self) {
        *self
            .typed
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }
}
