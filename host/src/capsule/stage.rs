//! Staging: everything `mur run` compiles and checks before the workdir exists (the
//! session loop, the driver, tools, skills and hooks), so a capsule that cannot start
//! leaves nothing behind.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::chosen_loop::{self, LoopIdentity};
use crate::bindings::driver::exports::murmur::driver::inference::Settings;
use crate::builtin;
use crate::driver::{DriverComponent, DriverLimits};
use crate::engine::{Engine, Wasm};
use crate::error::Error;
use crate::hooks::{self, Hooks};
use crate::manifest::{self, DriverRef, Manifest, Runtime};
use crate::memory::Cap;
use crate::murmur_md;
use crate::outbound;
use crate::session::LoopComponent;
use crate::tools::{ToolEntry, ToolGrants, Tools};
use crate::wire::Wire;
use crate::workdir::Workdir;

/// Everything compiled and checked before the session exists, besides the loop's
/// component (only its identity is here).
pub(super) struct Staged {
    pub session_loop: LoopIdentity,
    pub driver: DriverComponent,
    pub driver_label: String,
    /// Under `inference.transport: process`, the process driver; `driver` is then a
    /// placeholder no task calls.
    pub process_driver: Option<crate::harness::component::ProcessDriver>,
    pub tools: Tools,
    pub hooks: Hooks,
    /// Every instance's memory cap, and the capsule's shared budget.
    pub memory: Cap,
    /// What every instance's CPU time is charged to, under `mur serve`.
    pub cpu: Option<crate::cpu::Account>,
    /// Every component that runs, by how errors name it, with its sha-256: what the
    /// trace's `session_start` records, so a run names exactly what ran.
    pub components: serde_json::Value,
}

pub(super) async fn stage(
    engine: &Engine,
    m: &Manifest,
    loop_path: Option<&Path>,
    workdir: &Workdir,
    wire: &Arc<Wire>,
    (shared_memory, cpu): (
        Option<Arc<crate::memory::Budget>>,
        Option<crate::cpu::Account>,
    ),
    desk: &Arc<crate::peer::desk::Desk>,
) -> Result<(LoopComponent, Staged), Error> {
    let session_id = desk.me().session.as_str();
    let memory = Cap {
        each: m.capabilities.memory_bytes,
        shared: shared_memory,
        hostcall_bytes: m.capabilities.limits.hostcall_bytes(),
    };
    let Sources {
        list,
        session_loop,
        driver_label,
        driver_config,
    } = sources(m, loop_path)?;
    // A capsule component's run calls no driver: the placeholder staged for it is not
    // one of the components that run.
    let components = list
        .iter()
        .enumerate()
        .filter(|(i, _)| !(*i == 1 && m.capsule.is_some()))
        .map(|(_, (wasm, label))| json!({"component": label, "sha256": wasm.digest()}))
        .collect();
    let tool_artifacts = artifacts(m, Runtime::Tool);
    let hook_artifacts = artifacts(m, Runtime::Hook);
    let driver_limits = DriverLimits {
        env: granted_env(m),
        memory: memory.clone(),
        cpu: cpu.clone(),
        deadline: Duration::from_secs(m.capabilities.deadline_seconds),
        max_reply_bytes: m.capabilities.limits.max_driver_reply_bytes,
        network: outbound::NetPolicy {
            allow: driver_allow(m),
            retry: m.inference.retry,
            timeouts: m.inference.timeouts,
        },
        logs_dir: workdir.logs_dir(),
        identity: crate::upstream::driver::identity(&m.name, &m.version, session_id),
    };
    let [(loop_wasm, _), (driver_wasm, _), others @ ..] = list.as_slice() else {
        return Err(Error::new("E-RUN-001", "a capsule has a loop and a driver"));
    };
    // The loop and the driver are each loaded and linked on a thread of their own; the
    // other components compile meanwhile.
    let (loop_component, driver, mut compiled) = std::thread::scope(|scope| {
        let driver = scope.spawn(|| {
            let component = engine.load_wasm(driver_wasm, &driver_label)?;
            if m.inference.transport == manifest::Transport::Process {
                return process_driver(engine, &component, &driver_label, driver_limits);
            }
            let settings = driver_settings(m, &driver_config);
            let driver = DriverComponent::new(
                engine,
                &component,
                driver_label.clone(),
                settings,
                driver_limits,
            )?;
            Ok((driver, None))
        });
        let others = (!others.is_empty()).then(|| scope.spawn(|| engine.load_all(others)));
        let loop_component = engine
            .load_wasm(loop_wasm, &session_loop.label)
            .and_then(|c| LoopComponent::new(engine, &c, session_loop.label.clone()));
        (
            loop_component,
            joined(driver.join()),
            others
                .map_or_else(Vec::new, |o| o.join().unwrap_or_default())
                .into_iter(),
        )
    });
    let (loop_component, (driver, process_driver)) = (loop_component?, driver?);
    let mut next = || {
        compiled
            .next()
            .unwrap_or_else(|| Err(Error::new("E-RUN-001", "a component was not compiled")))
    };
    let mut tools = Tools::new(ToolGrants {
        workdir: workdir.root.clone(),
        home: workdir.capsule_home(),
        logs_dir: workdir.logs_dir(),
        shell_logs_dir: workdir.shell_logs_dir(),
        env: granted_env(m),
        shell_env: shell_env(m),
        memory: memory.clone(),
        cpu: cpu.clone(),
        deadline: Duration::from_secs(m.capabilities.deadline_seconds),
        shell_grace: Duration::from_secs(m.lifecycle.shell_grace_secs),
        max_result_bytes: m.capabilities.limits.max_tool_result_bytes,
        shell_slots: Arc::new(tokio::sync::Semaphore::new(
            usize::try_from(m.capabilities.limits.shell_concurrency)
                .unwrap_or(usize::MAX)
                .min(tokio::sync::Semaphore::MAX_PERMITS),
        )),
    });
    for binary in &m.capabilities.shell_allow {
        tools.add_shell(binary);
    }
    for artifact in &tool_artifacts {
        let entry = ToolEntry {
            name: &artifact.name,
            version: artifact.version.clone(),
            description: artifact.description.as_deref(),
            source: &artifact.source,
        };
        tools.add_component(engine, &next()?, &entry, wire).await?;
    }
    tools.add_peers(desk.clone());
    for skill in m.artifacts.iter().filter(|a| a.runtime == Runtime::Skill) {
        let text = PathBuf::from(format!("tools/{}/skill.md", skill.name));
        tools.add_skill(&skill.name, text, skill_description(&skill.source));
    }
    let mut staged_hooks = Vec::new();
    for artifact in &hook_artifacts {
        let Some(contract) = artifact.hook.clone() else {
            continue;
        };
        staged_hooks.push(hooks::StagedHook {
            name: artifact.name.clone(),
            contract,
            on_overflow: artifact.on_overflow,
            component: next()?,
        });
    }
    let hooks = Hooks::link(
        engine,
        staged_hooks,
        &hooks::Places {
            hooks_dir: workdir.hooks_dir(),
            logs_dir: workdir.logs_dir(),
            memory: memory.clone(),
            cpu: cpu.clone(),
        },
    )?;
    let staged = Staged {
        session_loop,
        driver,
        driver_label,
        process_driver,
        tools,
        hooks,
        memory,
        cpu,
        components,
    };
    Ok((loop_component, staged))
}

/// A process driver, checked and linked, with the placeholder HTTP driver the session
/// holds but never calls under the process transport.
fn process_driver(
    engine: &Engine,
    component: &wasmtime::component::Component,
    label: &str,
    limits: DriverLimits,
) -> Result<
    (
        DriverComponent,
        Option<crate::harness::component::ProcessDriver>,
    ),
    Error,
> {
    let process = crate::harness::component::ProcessDriver::new(
        engine,
        component,
        label.to_string(),
        crate::harness::component::Limits {
            memory: limits.memory.clone(),
            cpu: limits.cpu.clone(),
            deadline: limits.deadline,
            output: crate::guest_log::Target::driver(&limits.logs_dir),
        },
    )?;
    let placeholder = engine.load_wasm(&builtin::scripted_driver(), "built-in scripted driver")?;
    let settings = Settings {
        model: String::new(),
        endpoint: String::new(),
        api_key: None,
        config: json!({"turns": []}).to_string(),
    };
    let driver = DriverComponent::new(
        engine,
        &placeholder,
        "the process transport's unused HTTP driver".into(),
        settings,
        limits,
    )?;
    Ok((driver, Some(process)))
}

/// Where the driver may send requests: the capsule's allow-list, and its gateway's
/// origin when its artifact names one (upstream's rule: the operator who wrote the
/// gateway chose where the driver's key goes; nothing else widens).
fn driver_allow(m: &Manifest) -> Vec<mur_authority::NetRule> {
    let mut allow = m.capabilities.network_allow.clone();
    let gateway = match &m.inference.driver {
        DriverRef::Artifact { name, .. } => m
            .artifacts
            .iter()
            .find(|a| &a.name == name)
            .and_then(|a| a.gateway.as_ref()),
        DriverRef::Builtin { .. } => None,
    };
    let rule = gateway
        .and_then(|g| outbound::origin_of(&g.endpoint))
        .and_then(|origin| mur_authority::NetRule::parse(&origin).ok());
    allow.extend(rule);
    allow
}

/// What a loading thread returned; a panic there is an error here.
fn joined<T>(joined: std::thread::Result<Result<T, Error>>) -> Result<T, Error> {
    joined.unwrap_or_else(|_| Err(Error::new("E-RUN-001", "the component loader panicked")))
}

/// Every component a capsule compiles, in the order staging takes them: its loop, its
/// driver, its tool artifacts, then its hook artifacts.
pub(super) struct Sources {
    /// Each component's bytes, with how errors name it.
    pub list: Vec<(Wasm, String)>,
    pub session_loop: LoopIdentity,
    pub driver_label: String,
    pub driver_config: serde_json::Value,
}

pub(super) fn sources(m: &Manifest, loop_path: Option<&Path>) -> Result<Sources, Error> {
    let (loop_bytes, session_loop) = chosen_loop::choose(m, loop_path)?;
    let (driver_bytes, driver_label, driver_config) = driver_source(m)?;
    let mut list = vec![
        (loop_bytes, session_loop.label.clone()),
        (driver_bytes, driver_label.clone()),
    ];
    for (runtime, kind) in [(Runtime::Tool, "tool"), (Runtime::Hook, "hook")] {
        for artifact in artifacts(m, runtime) {
            let label = format!("{kind} artifact '{}'", artifact.name);
            list.push((artifact_wasm(artifact, &label)?, label));
        }
    }
    Ok(Sources {
        list,
        session_loop,
        driver_label,
        driver_config,
    })
}

fn artifacts(m: &Manifest, runtime: Runtime) -> Vec<&manifest::Artifact> {
    m.artifacts
        .iter()
        .filter(|a| a.runtime == runtime)
        .collect()
}

fn driver_source(m: &Manifest) -> Result<(Wasm, String, serde_json::Value), Error> {
    match &m.inference.driver {
        DriverRef::Builtin { name, script } if name == "scripted" => {
            let script = script.as_deref().ok_or_else(|| {
                Error::new("E-MAN-001", "murmur.yaml: missing required field 'inference.script'")
                    .hint("the scripted driver answers from a script file: set inference.script: ./script.yaml")
            })?;
            let config = read_script(script)?;
            Ok((
                builtin::scripted_driver(),
                "built-in scripted driver".to_string(),
                config,
            ))
        }
        DriverRef::Builtin { name, .. } => {
            let wasm = builtin::driver(name).ok_or_else(|| {
                Error::new(
                    "E-RUN-006",
                    format!("driver '{name}' is not built into this mur"),
                )
                .hint("use inference.driver: openai, anthropic, claude-code, codex or scripted, or name a driver component: {artifact: NAME}")
            })?;
            if manifest::PROCESS_DRIVERS.contains(&name.as_str()) {
                let label = format!("built-in {name} process driver");
                return Ok((wasm, label, process_config(m)));
            }
            Ok((wasm, format!("built-in {name} driver"), builtin_config(m)))
        }
        DriverRef::Artifact { name, config } => {
            let artifact = m.artifacts.iter().find(|a| &a.name == name).ok_or_else(|| {
                Error::new(
                    "E-RUN-005",
                    format!("inference.driver names artifact '{name}', which artifacts[] does not declare"),
                )
            })?;
            let label = format!("driver artifact '{name}'");
            Ok((artifact_wasm(artifact, &label)?, label, config.clone()))
        }
    }
}

fn driver_settings(m: &Manifest, config: &serde_json::Value) -> Settings {
    Settings {
        model: m.inference.model.clone(),
        endpoint: m.inference.endpoint.clone().unwrap_or_default(),
        api_key: m.inference.api_key.clone(),
        config: config.to_string(),
    }
}

/// What the built-in HTTP drivers are told besides model, endpoint and key: the
/// sampling settings of `inference` and whether to stream.
fn builtin_config(m: &Manifest) -> serde_json::Value {
    let mut config = json!({"stream": m.inference.stream});
    if let Some(t) = m.inference.temperature {
        config["temperature"] = t.into();
    }
    if let Some(p) = m.inference.top_p {
        config["top_p"] = p.into();
    }
    config
}

/// A built-in process driver's configuration: `inference.driver` names it by a bare
/// name, so it has none of its own.
fn process_config(_m: &Manifest) -> serde_json::Value {
    json!({})
}

/// The scripted driver has no filesystem, so the host reads its script for it.
fn read_script(path: &Path) -> Result<serde_json::Value, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::new(
            "E-IO-001",
            format!("driver script not found at {}: {e}", path.display()),
        )
        .hint("inference.script names the scripted driver's turns, relative to murmur.yaml")
    })?;
    manifest::yaml_to_json(&text).map_err(|e| {
        Error::new("E-MAN-002", format!("{}: {e}", path.display()))
            .hint("the script is YAML or JSON: {turns: [...]}")
    })
}

/// An artifact's component, checked against the digest its lock pins.
pub(super) fn artifact_wasm(artifact: &manifest::Artifact, label: &str) -> Result<Wasm, Error> {
    let wasm = Wasm::read(read_component(&artifact.source, label)?);
    if let Some(pinned) = &artifact.pinned {
        let found = format!("sha256:{}", wasm.digest());
        if &found != pinned {
            let what = format!(
                "artifact '{}' {}",
                artifact.full_name,
                artifact.version.as_deref().unwrap_or_default()
            );
            return Err(crate::registry::cached_mismatch(
                &what,
                pinned,
                &found,
                &artifact.source,
            ));
        }
    }
    Ok(wasm)
}

pub(super) fn read_component(path: &Path, label: &str) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| {
        Error::new(
            "E-IO-001",
            format!("{label} not found at {}: {e}", path.display()),
        )
        .hint("build the component for wasm32-wasip2 and check the path")
    })
}

/// The first non-heading line of a skill's text: what the model is told it is for.
fn skill_description(dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join("skill.md")).unwrap_or_default();
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .unwrap_or("A skill: call it by name, with no input, to get its guidance.");
    murmur_md::sanitize(line)
}

/// Host environment variables a component may see: only those the manifest grants.
pub(super) fn granted_env(m: &Manifest) -> Vec<(String, String)> {
    m.capabilities
        .env_allow
        .iter()
        .filter_map(|name| std::env::var(name).ok().map(|v| (name.clone(), v)))
        .collect()
}

/// Shell commands need a PATH to find programs; everything else must be granted.
pub(super) fn shell_env(m: &Manifest) -> Vec<(String, String)> {
    let mut env = vec![(
        "PATH".to_string(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
    )];
    env.extend(granted_env(m).into_iter().filter(|(k, _)| k != "PATH"));
    env
}
