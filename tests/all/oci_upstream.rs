//! Upstream Murmur's quickstart manifest, unchanged but for the provider's address: its
//! versioned, scoped `murmur/driver-anthropic` (upstream's own driver, vendored) comes
//! from a local registry through `registry_scopes`, its `gateway:` names the loopback
//! model mock, and its `${ANTHROPIC_API_KEY}` comes from a `.env` beside it.

use crate::common::mock_model::{MockModel, Reply, anthropic};
use crate::common::registry::Registry;
use crate::common::*;

const KEY: &str = "sk-ant-from-dot-env";

fn quickstart(endpoint: &str) -> String {
    format!(
        r#"name: my-capsule
version: "1.0.0"

artifacts:
  - name: murmur/driver-anthropic
    version: "0.8.0"
    runtime: driver
    gateway:
      endpoint: {endpoint}
      api_key: ${{ANTHROPIC_API_KEY}}

inference:
  transport: http
  model: claude-haiku-4-5
  driver:
    artifact: murmur/driver-anthropic
"#
    )
}

#[test]
fn upstreams_quickstart_runs_with_its_driver_from_a_local_registry() {
    let Some(registry) = Registry::start("reg-quickstart", false) else {
        return;
    };
    let driver = repo().join("tests/fixtures/upstream/murmur-driver-anthropic.wasm");
    registry.push(&driver, "upstream/driver-anthropic:0.8.0");
    registry.config(&format!(
        "registry_scopes:\n  murmur: {}/upstream\n",
        registry.host
    ));
    let mock = MockModel::with(vec![Reply::json(
        200,
        anthropic::message(vec![anthropic::text("Pong!")], "end_turn", (12, 3)),
    )]);
    let capsule = Capsule::new("reg-quickstart-capsule", &quickstart(&mock.origin()), "");
    capsule.file(".env", &format!("ANTHROPIC_API_KEY={KEY}\n"));

    let installed = finish(
        registry
            .mur()
            .args(["install", "--manifest"])
            .arg(capsule.manifest()),
    );
    assert_eq!(installed.status, 0, "{}", installed.stderr);
    assert!(
        installed
            .stdout
            .starts_with("murmur/driver-anthropic 0.8.0: sha256:"),
        "{}",
        installed.stdout
    );
    let lock = std::fs::read_to_string(capsule.dir.join("murmur.lock")).unwrap();
    assert!(
        lock.contains(&format!(
            "  - name: \"murmur/driver-anthropic\"\n    resolved_version: \"0.8.0\"\n    sha256:\n      any: 969af54a314e19d7afde2758a1529e7ccc5768696f084ba29cb1c3814fbca2a7\n    origin: operator\n    registry: \"{}/upstream\"\n",
            registry.host
        )),
        "{lock}"
    );

    let run = finish(
        registry
            .mur()
            .args(["run", "--json", "--port", "0", "--manifest"])
            .arg(capsule.manifest())
            .args(["--task", "When I say Ping you say?"])
            .env_remove("ANTHROPIC_API_KEY"),
    );
    run.assert_ok();
    assert_eq!(run.session().read("out/result.txt"), "Pong!");
    let sent = mock.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].path, "/v1/messages");
    assert_eq!(sent[0].header("x-api-key"), Some(KEY));
    assert_eq!(sent[0].json()["model"], "claude-haiku-4-5");
    // No allow-list entry was needed: the gateway is the driver's to reach.
    assert!(!run.stderr.contains("W-CAP-001"), "{}", run.stderr);
}

#[test]
fn a_gateway_with_no_key_and_an_unset_variable_are_refused_as_upstream_refuses_them_and_no_env_file_reads_none()
 {
    let Some(registry) = Registry::start("reg-quickstart-bad", false) else {
        return;
    };
    let no_key = quickstart("https://api.anthropic.com")
        .replace("      api_key: ${ANTHROPIC_API_KEY}\n", "");
    let capsule = Capsule::new("reg-quickstart-nokey", &no_key, "");
    let run = finish(
        registry
            .mur()
            .args(["run", "--manifest"])
            .arg(capsule.manifest())
            .args(["--task", "hi"]),
    );
    assert_eq!(run.status, 1);
    assert_eq!(
        run.stderr,
        "error[E-MAN-001]: murmur.yaml:8: missing required field 'artifacts[0].gateway.api_key'\n  hint: bind the provider's key, e.g. 'api_key: ${ANTHROPIC_API_KEY}', or write 'keyless: true' for a provider that takes none\n"
    );
    // The `.env` beside it is not read under --no-env-file.
    let capsule = Capsule::new(
        "reg-quickstart-unset",
        &quickstart("https://api.anthropic.com"),
        "",
    );
    capsule.file(".env", &format!("ANTHROPIC_API_KEY={KEY}\n"));
    let run = finish(
        registry
            .mur()
            .args(["run", "--no-env-file", "--manifest"])
            .arg(capsule.manifest())
            .args(["--task", "hi"])
            .env_remove("ANTHROPIC_API_KEY"),
    );
    assert_eq!(run.status, 1);
    assert!(
        run.stderr.starts_with(
            "error[E-MAN-003]: murmur.yaml:10: invalid artifacts config for 'artifacts[0].gateway.api_key': environment variable ANTHROPIC_API_KEY is not set\n"
        ),
        "{}",
        run.stderr
    );
}
