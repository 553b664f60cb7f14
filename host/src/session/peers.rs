//! `murmur:session/peers@0.3.0`: a loop hands tasks to peers. Each call is made as the
//! model's `call-member` tool call would be, through `call-tools`, so the loop's calls
//! pass the same bounds, policy hooks, frames and trace lines as the model's.

use serde_json::json;

use super::LoopState;
use crate::bindings::message::ToolCall;
use crate::bindings::session_loop::murmur::session::host::Host;
use crate::bindings::session_peers::murmur::session0_3_0::peers::{self, PeerTask};
use crate::peer::tool::NAME;

type Answers = Result<Vec<Result<String, String>>, String>;

impl peers::Host for LoopState {
    async fn names(&mut self) -> wasmtime::Result<Vec<String>> {
        Ok(self.session.tools.peer_names())
    }

    async fn call(&mut self, calls: Vec<PeerTask>) -> wasmtime::Result<Answers> {
        if calls.is_empty() {
            return Ok(Err("peers.call needs at least one call".into()));
        }
        let as_tools = calls
            .iter()
            .enumerate()
            .map(|(i, call)| ToolCall {
                id: format!("peer_{}", i + 1),
                name: NAME.to_string(),
                input: json!({"member": call.peer, "task": call.task}).to_string(),
            })
            .collect();
        let results = Host::call_tools(self, as_tools).await?;
        Ok(results.map(|results| {
            results
                .into_iter()
                .map(|r| {
                    if r.is_error {
                        Err(r.content)
                    } else {
                        Ok(r.content)
                    }
                })
                .collect()
        }))
    }
}
