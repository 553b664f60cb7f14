//! Host bindings of the WIT worlds, one module per world.

pub mod session_loop {
    wasmtime::component::bindgen!({
        world: "session-loop",
        path: ["../wit/session"],
        imports: { default: async | trappable },
        exports: { default: async },
    });
}

pub mod driver {
    wasmtime::component::bindgen!({
        world: "murmur:driver/driver",
        path: ["../wit/text", "../wit/driver"],
        imports: { default: async | trappable },
        exports: { default: async },
    });
}

pub mod tool {
    wasmtime::component::bindgen!({
        world: "murmur:tool/tool",
        path: ["../wit/text", "../wit/task", "../wit/tool"],
        imports: { default: async | trappable },
        exports: { default: async },
        with: { "murmur:text/chunks": crate::bindings::driver::murmur::text::chunks },
    });
}
