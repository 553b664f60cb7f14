//! `classify` on components upstream built (vendored in `tests/fixtures/upstream/`):
//! each is named by its world, read from its exports.

use std::path::Path;

use super::{Engine, Kind, classify};

fn kind_of(file: &str) -> Kind {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/upstream")
        .join(file);
    let engine = Engine::new().expect("an engine");
    let component = engine
        .load(&std::fs::read(&path).expect("the fixture"), file)
        .expect("a component");
    classify(engine.wasmtime(), &component)
}

#[test]
fn upstream_tools_and_drivers_are_named_by_their_run_export() {
    for file in [
        "jsonl-line-count.wasm",
        "request-input-tool.wasm",
        "murmur-driver-openai.wasm",
        "murmur-driver-anthropic.wasm",
    ] {
        assert_eq!(kind_of(file), Kind::UpstreamRun, "{file}");
    }
    assert_eq!(
        Kind::UpstreamRun.name(),
        "upstream tool or driver (murmur:tool/run@0.1.0)"
    );
}

#[test]
fn an_upstream_hook_is_named_by_its_lifecycle_export() {
    assert_eq!(kind_of("records-hook.wasm"), Kind::UpstreamHook);
}

#[test]
fn the_builtin_drivers_are_ours() {
    let engine = Engine::new().expect("an engine");
    let component = engine
        .load(crate::builtin::OPENAI_DRIVER, "openai")
        .expect("a component");
    assert_eq!(
        classify(engine.wasmtime(), &component),
        Kind::Ours("driver")
    );
    assert_eq!(Kind::Ours("driver").name(), "driver");
}
