//! `mur serve` creating capsules whose artifacts come from a registry: two tenants
//! naming one component by name and version share one compiled form.

use crate::common::registry::Registry;
use crate::common::served::{Create, Served};
use crate::common::*;

fn compiled(served: &Served) -> u64 {
    let metrics = served.metrics();
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("mur_components_compiled_total "))
        .unwrap_or_else(|| panic!("no mur_components_compiled_total in:\n{metrics}"))
        .parse()
        .unwrap()
}

#[test]
fn two_capsules_from_one_reference_run_and_compile_it_once() {
    let Some(registry) = Registry::start("reg-serve", false) else {
        return;
    };
    registry.push(&guest(MUR_LOOP_ONESHOT), "team/my-loop:1.0.0");
    let home = registry.dir.join("home");
    let cache = registry.dir.join("cache");
    let served = Served::start_with(
        "reg-serve-server",
        &[],
        &[
            ("MURMUR_HOME", home.to_str().unwrap()),
            ("MUR_CACHE_DIR", cache.to_str().unwrap()),
        ],
    );
    let script = scratch("reg-serve-script").join("script.yaml");
    std::fs::write(&script, "turns:\n  - text: \"one turn, no tools\"\n").unwrap();
    let manifest = |name: &str| {
        format!(
            "name: {name}\nversion: \"0.1.0\"\nregistry: {}/team\nartifacts:\n  - name: my-loop\n    version: \"1.0.0\"\n    runtime: loop\ninference:\n  driver: scripted\n  script: {}\n  model: m\n",
            registry.host,
            script.display()
        )
    };
    let before = compiled(&served);
    let first = served.create(&Create::yaml(&manifest("tenant-a")).open());
    let after_first = compiled(&served);
    assert_eq!(
        after_first,
        before + 1,
        "the first capsule compiles the loop"
    );
    let second = served.create(&Create::yaml(&manifest("tenant-b")).open());
    assert_eq!(
        compiled(&served),
        after_first,
        "the second shares its compiled form"
    );
    for hosted in [&first, &second] {
        let start = served.wait_for_event(&hosted.id, "session_start", 0);
        let components = start["components"].to_string();
        assert!(
            components.contains("session loop artifact 'my-loop'"),
            "{components}"
        );
    }
}
