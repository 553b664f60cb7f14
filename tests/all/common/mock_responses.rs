//! OpenAI's Responses API as the loopback model mock streams it (`POST /v1/responses`
//! with `stream: true`): the events Codex CLI reads, built one response at a time.
//!
//! ```ignore
//! mock.push(Reply::sse(Stream::new("resp_1").function_call("call_1", "mcp__mur", "wordcount", r#"{"text":"a b"}"#).completed(20, 6).events()));
//! ```

use serde_json::{Value, json};

/// The events of one streamed response.
pub struct Stream {
    id: String,
    events: Vec<String>,
    output_index: u64,
}

impl Stream {
    /// `response.created`.
    pub fn new(id: &str) -> Stream {
        let mut s = Stream {
            id: id.to_string(),
            events: Vec::new(),
            output_index: 0,
        };
        s.event(
            "response.created",
            json!({"type": "response.created", "response": {"id": id, "status": "in_progress"}}),
        );
        s
    }

    fn event(&mut self, name: &str, data: Value) {
        self.events.push(format!("event: {name}\ndata: {data}\n\n"));
    }

    fn item(&mut self, added: Value, deltas: Vec<Value>, done: Value) {
        let index = self.output_index;
        self.output_index += 1;
        self.event(
            "response.output_item.added",
            json!({"type": "response.output_item.added", "output_index": index, "item": added}),
        );
        for mut delta in deltas {
            delta["output_index"] = index.into();
            let name = delta["type"].as_str().unwrap_or("").to_string();
            self.event(&name, delta);
        }
        self.event(
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": index, "item": done}),
        );
    }

    /// An assistant message streamed in `pieces`.
    pub fn message(mut self, pieces: &[&str]) -> Stream {
        let id = format!("msg_{}", self.output_index);
        let deltas = pieces
            .iter()
            .map(|p| {
                json!({"type": "response.output_text.delta", "item_id": id,
                       "content_index": 0, "delta": p})
            })
            .collect();
        let text: String = pieces.concat();
        let added = json!({"type": "message", "id": id, "role": "assistant", "content": []});
        let done = json!({"type": "message", "id": id, "role": "assistant", "status": "completed",
                          "content": [{"type": "output_text", "text": text, "annotations": []}]});
        self.item(added, deltas, done);
        self
    }

    /// A function call; an MCP server's tool is named by its `namespace` (`mcp__<server>`)
    /// and its bare name, as Codex offers them.
    pub fn function_call(
        mut self,
        call_id: &str,
        namespace: Option<&str>,
        name: &str,
        arguments: &str,
    ) -> Stream {
        let mut item = json!({"type": "function_call", "id": format!("fc_{call_id}"),
                              "call_id": call_id, "name": name, "arguments": arguments});
        if let Some(namespace) = namespace {
            item["namespace"] = namespace.into();
        }
        self.item(item.clone(), Vec::new(), item);
        self
    }

    /// `response.completed` with the usage the API reports.
    pub fn completed(mut self, input_tokens: u64, output_tokens: u64) -> Stream {
        let id = self.id.clone();
        self.event(
            "response.completed",
            json!({"type": "response.completed", "response": {
                "id": id, "status": "completed",
                "usage": {"input_tokens": input_tokens,
                          "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens": output_tokens,
                          "output_tokens_details": {"reasoning_tokens": 0},
                          "total_tokens": input_tokens + output_tokens}}}),
        );
        self
    }

    pub fn events(&self) -> Vec<Vec<u8>> {
        self.events.iter().map(|e| e.clone().into_bytes()).collect()
    }
}
