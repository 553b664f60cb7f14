//! Anthropic Messages payloads, as the mock model answers them.

use serde_json::{Value, json};

pub const ID: &str = "msg_01MockMockMockMockMockMock";

pub fn text(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

/// A non-streaming `message`.
pub fn message(content: Vec<Value>, stop_reason: &str, usage: (u64, u64)) -> Value {
    json!({
        "id": ID,
        "type": "message",
        "role": "assistant",
        "model": "test-model",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "usage": {
            "input_tokens": usage.0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": usage.1
        }
    })
}

/// An error body (`overloaded_error`, `authentication_error`, ...).
pub fn error(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// The events of a streamed message. Content blocks are numbered in the order added.
#[derive(Default)]
pub struct Stream {
    events: Vec<String>,
    next_index: u64,
}

impl Stream {
    /// `message_start`, with the input tokens (and 1 output token, as the API does).
    pub fn new(input_tokens: u64) -> Stream {
        let mut s = Stream::default();
        s.event(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": ID, "type": "message", "role": "assistant", "model": "test-model",
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": input_tokens, "cache_creation_input_tokens": 0,
                          "cache_read_input_tokens": 0, "output_tokens": 1}
            }}),
        );
        s
    }

    fn event(&mut self, name: &str, data: Value) {
        self.events.push(format!("event: {name}\ndata: {data}\n\n"));
    }

    pub fn ping(mut self) -> Stream {
        self.event("ping", json!({"type": "ping"}));
        self
    }

    fn block(&mut self, start: Value, deltas: Vec<Value>) {
        let index = self.next_index;
        self.next_index += 1;
        self.event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": start}),
        );
        for delta in deltas {
            self.event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": delta}),
            );
        }
        self.event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        );
    }

    pub fn text_block(mut self, pieces: &[&str]) -> Stream {
        let deltas = pieces
            .iter()
            .map(|p| json!({"type": "text_delta", "text": p}))
            .collect();
        self.block(json!({"type": "text", "text": ""}), deltas);
        self
    }

    /// A thinking block: its pieces, then its signature.
    pub fn thinking_block(mut self, pieces: &[&str], signature: &str) -> Stream {
        let mut deltas: Vec<Value> = pieces
            .iter()
            .map(|p| json!({"type": "thinking_delta", "thinking": p}))
            .collect();
        deltas.push(json!({"type": "signature_delta", "signature": signature}));
        self.block(json!({"type": "thinking", "thinking": ""}), deltas);
        self
    }

    /// A tool_use block whose input arrives as `input_json_delta` pieces (the API
    /// sends an empty one first).
    pub fn tool_use_block(mut self, id: &str, name: &str, json_pieces: &[&str]) -> Stream {
        let mut deltas = vec![json!({"type": "input_json_delta", "partial_json": ""})];
        deltas.extend(
            json_pieces
                .iter()
                .map(|p| json!({"type": "input_json_delta", "partial_json": p})),
        );
        self.block(
            json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
            deltas,
        );
        self
    }

    /// `message_delta` with the stop reason and the output tokens.
    pub fn message_delta(mut self, stop_reason: &str, output_tokens: u64) -> Stream {
        self.event(
            "message_delta",
            json!({"type": "message_delta",
                   "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                   "usage": {"output_tokens": output_tokens}}),
        );
        self
    }

    pub fn stop(mut self) -> Stream {
        self.event("message_stop", json!({"type": "message_stop"}));
        self
    }

    /// An `error` event, as the API sends mid-stream (e.g. `overloaded_error`).
    pub fn error(mut self, kind: &str, message: &str) -> Stream {
        self.event("error", error(kind, message));
        self
    }

    pub fn events(&self) -> Vec<Vec<u8>> {
        self.events.iter().map(|e| e.clone().into_bytes()).collect()
    }

    pub fn bytes(&self) -> Vec<u8> {
        self.events.concat().into_bytes()
    }
}
