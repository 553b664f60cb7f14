//! Upstream Murmur's components, run unchanged. Upstream (murmur-cli 0.8.0) exports
//! `murmur:tool/run@0.1.0` (`run(tool-input) -> tool-result`) from its tools and its
//! drivers alike, and streams through `murmur:stream/events@0.1.0`; the adapters here
//! turn that shape into an ordinary tool (`tool`) and an ordinary driver (`driver`), so
//! the session, the trace and the wire never see the difference. The WIT is in
//! `wit/upstream/`; `engine::classify` decides which components come here.
//!
//! Upstream's hook world (`murmur:hook/lifecycle@0.9.0`) is served through `hook`, and
//! its capsule world (`murmur:capsule/run@0.1.0`, a whole capsule with no model) through
//! `capsule`, which runs it in place of a session loop.

pub mod capsule;
pub mod driver;
pub mod hook;
pub mod tool;

use std::sync::Arc;

use crate::bindings::chunks::Host as _;
use crate::bindings::upstream::murmur::stream::events;
use crate::wire::Wire;

/// Upstream's stream events, written as the same frames as our `murmur:text/chunks`.
impl events::Host for Arc<Wire> {
    async fn emit_chunk(&mut self, chunk: String) -> wasmtime::Result<()> {
        self.text(chunk).await
    }

    async fn emit_thinking_chunk(&mut self, chunk: String) -> wasmtime::Result<()> {
        self.thinking(chunk).await
    }

    /// The host announces each call itself when it dispatches it; a driver's early
    /// notice has no frame of its own in the seed's protocol, so it is accepted and
    /// ignored.
    async fn tool_call_started(&mut self, _id: String, _name: String) -> wasmtime::Result<()> {
        Ok(())
    }

    /// Accepted and ignored, like `tool_call_started`.
    async fn tool_call_input_bytes(&mut self, _id: String, _bytes: u64) -> wasmtime::Result<()> {
        Ok(())
    }
}

/// The `murmur:` interfaces an upstream tool may import.
pub const TOOL_IMPORTS: [&str; 2] = ["murmur:task/task@0.1.0", "murmur:stream/events@0.1.0"];
/// An upstream hook imports no `murmur:` interface (0.8.0's hooks have no
/// `run-inference`).
pub const HOOK_IMPORTS: [&str; 0] = [];
/// The `murmur:` interfaces an upstream driver may import.
pub const DRIVER_IMPORTS: [&str; 1] = ["murmur:stream/events@0.1.0"];
/// The `murmur:` interfaces an upstream capsule may import: the tool registry, and the
/// tool interface whose types the registry uses (types only: nothing to provide).
pub const CAPSULE_IMPORTS: [&str; 2] = [capsule::REGISTRY, crate::engine::UPSTREAM_RUN];

/// Refuses an upstream component importing a `murmur:` interface its world does not
/// provide (ours included: upstream's worlds and ours do not mix in one component).
pub fn check_imports(
    engine: &crate::engine::Engine,
    component: &wasmtime::component::Component,
    label: &str,
    allowed: &[&str],
) -> Result<(), crate::error::Error> {
    let ty = component.component_type();
    let imports: Vec<String> = ty
        .imports(engine.wasmtime())
        .map(|(name, _)| name.to_string())
        .collect();
    match imports
        .iter()
        .find(|i| i.starts_with("murmur:") && !allowed.contains(&i.as_str()))
    {
        None => Ok(()),
        Some(import) => Err(crate::error::Error::new(
            "E-RUN-031",
            format!(
                "{label} is an upstream Murmur component and imports {import}, which its \
                 world does not provide"
            ),
        )
        .hint(if allowed.is_empty() {
            "it may import only WASI 0.2".to_string()
        } else {
            format!("it may import: {}", allowed.join(", "))
        })),
    }
}
