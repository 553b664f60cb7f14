//! Host bindings of the WIT worlds, one module per world. The packages several worlds
//! share (`murmur:message`, `murmur:text`) are generated once, with the session loop's
//! world, and the other worlds reuse those types.

pub mod session_loop {
    wasmtime::component::bindgen!({
        world: "murmur:session/session-loop",
        path: ["../wit/message", "../wit/text", "../wit/session"],
        imports: { default: async | trappable },
        additional_derives: [PartialEq],
        exports: { default: async },
    });
}

/// `murmur:session@0.3.0`: the 0.2.0 session world and `peers`. Only `peers` is new;
/// the rest is the 0.2.0 bindings, so one loop state serves both versions.
pub mod session_peers {
    wasmtime::component::bindgen!({
        world: "murmur:session/session-loop@0.3.0",
        path: ["../wit/message", "../wit/text", "../wit/session", "../wit/session-0.3.0"],
        imports: { default: async | trappable },
        exports: { default: async },
        with: {
            "murmur:message/types": crate::bindings::message,
            "murmur:text/chunks": crate::bindings::chunks,
            "murmur:session/types@0.2.0": crate::bindings::session_loop::murmur::session::types,
            "murmur:session/host@0.2.0": crate::bindings::session_loop::murmur::session::host,
        },
    });
}

/// The typed conversation every world speaks.
pub use session_loop::murmur::message::types as message;

/// Streamed text, which the driver, the tools and the session loop all write.
pub use session_loop::murmur::text::chunks;

pub mod driver {
    wasmtime::component::bindgen!({
        world: "murmur:driver/driver",
        path: ["../wit/message", "../wit/text", "../wit/driver"],
        imports: { default: async | trappable },
        exports: { default: async },
        // wasi:http is served by wasmtime-wasi-http, not by bindings of our own.
        with: {
            "murmur:message/types": crate::bindings::message,
            "murmur:text/chunks": crate::bindings::chunks,
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
    });
}

/// `murmur:process@0.2.0`: a process driver, which plans a harness CLI's run and reads
/// its output. It imports nothing of ours.
pub mod process {
    wasmtime::component::bindgen!({
        world: "murmur:process/process-driver",
        path: ["../wit/process"],
        exports: { default: async },
    });
}

pub mod tool {
    wasmtime::component::bindgen!({
        world: "murmur:tool/tool",
        path: ["../wit/text", "../wit/task", "../wit/tool"],
        imports: { default: async | trappable },
        exports: { default: async },
        with: { "murmur:text/chunks": crate::bindings::chunks },
    });
}

pub mod hook {
    wasmtime::component::bindgen!({
        world: "murmur:hook/hook",
        path: ["../wit/message", "../wit/hook"],
        exports: { default: async },
        with: { "murmur:message/types": crate::bindings::message },
    });
}

/// Upstream Murmur's tool and driver worlds (murmur-cli 0.8.0, `wit/upstream/`): both
/// export `murmur:tool/run@0.1.0`, linked through the adapters in `crate::upstream`.
pub mod upstream {
    wasmtime::component::bindgen!({
        world: "murmur:tool/tool",
        path: [
            "../wit/upstream/task",
            "../wit/upstream/stream",
            "../wit/upstream/tool",
        ],
        imports: { default: async | trappable },
        exports: { default: async },
    });
}

/// Upstream Murmur's hook world (murmur-cli 0.8.0, `wit/upstream/hook`): nine
/// functions, one per binding, linked through the adapter in `crate::upstream::hook`.
pub mod upstream_hook {
    wasmtime::component::bindgen!({
        world: "murmur:hook/hook",
        path: ["../wit/upstream/hook"],
        exports: { default: async },
    });
}
