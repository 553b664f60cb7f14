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

/// Upstream's capsule components, whatever else they import (WASI, wasi:http, none).
#[test]
fn upstream_capsules_are_named_by_their_capsule_export() {
    for file in [
        "graduation-capsule.wasm",
        "capsule-network-attempt.wasm",
        "capsule-spin-loop.wasm",
    ] {
        assert_eq!(kind_of(file), Kind::UpstreamCapsule, "{file}");
    }
    assert_eq!(kind_of("echo-tool.wasm"), Kind::UpstreamRun);
}

/// The vendored WIT of upstream's capsule world names what the adapter serves: the
/// export `classify` looks for and the imports `upstream::check_imports` allows.
#[test]
fn the_vendored_capsule_world_is_the_one_served() {
    let wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit/upstream");
    let mut resolve = wit_parser::Resolve::new();
    for dir in ["task", "stream", "tool", "tool-registry", "capsule"] {
        resolve
            .push_dir(wit.join(dir))
            .expect("the vendored WIT parses");
    }
    let (_, world) = resolve
        .worlds
        .iter()
        .find(|(_, w)| w.name == "capsule")
        .expect("world capsule");
    let names = |keys: Vec<&wit_parser::WorldKey>| -> Vec<String> {
        let mut names: Vec<String> = keys
            .into_iter()
            .filter_map(|k| match k {
                wit_parser::WorldKey::Interface(id) => resolve.id_of(*id),
                wit_parser::WorldKey::Name(_) => None,
            })
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        names(world.exports.keys().collect()),
        [super::UPSTREAM_CAPSULE]
    );
    let mut served = crate::upstream::CAPSULE_IMPORTS.to_vec();
    served.sort();
    assert_eq!(names(world.imports.keys().collect()), served);
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
