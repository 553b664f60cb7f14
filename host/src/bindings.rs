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
        // wasi:http is served by wasmtime-wasi-http, not by bindings of our own.
        with: {
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
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

pub mod hook {
    wasmtime::component::bindgen!({
        world: "murmur:hook/hook",
        path: ["../wit/hook"],
        exports: { default: async },
    });
}
