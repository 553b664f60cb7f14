//! Which of mur's worlds a component targets, read from the component itself with
//! `wit-component`, and whether it links the way a capsule links it.

use wit_parser::WorldKey;

use crate::cli::WorldArg;
use crate::engine::{self, Engine};
use crate::error::Error;

/// One of the worlds `mur component check` has scenarios for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Tool,
    Driver,
    Hook,
    Loop,
    /// Upstream Murmur's capsule world (`murmur:capsule/run@0.1.0`), run in place of a
    /// session loop. It has no `--world` name: its export alone says what it is.
    Capsule,
    /// A process driver (`murmur:process/process-driver`).
    Process,
}

/// Upstream's capsule world, as the check names it: served through an adapter at
/// upstream's version, so not one of `engine`'s worlds.
const CAPSULE: engine::World = engine::World {
    name: "capsule",
    export: "murmur:capsule/run",
    imports: &["murmur:tool-registry/invoke", "murmur:tool/run"],
    later: &[],
};

impl Kind {
    /// The name users type (`--world`) and read (`world: tool`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Tool => "tool",
            Kind::Driver => "driver",
            Kind::Hook => "hook",
            Kind::Loop => "loop",
            Kind::Capsule => "capsule",
            Kind::Process => "process-driver",
        }
    }

    /// The host's own description of the world: what a component of it must export.
    pub fn world(self) -> &'static engine::World {
        match self {
            Kind::Tool => &engine::TOOL,
            Kind::Driver => &engine::DRIVER,
            Kind::Hook => &engine::HOOK,
            Kind::Loop => &engine::SESSION_LOOP,
            Kind::Capsule => &CAPSULE,
            Kind::Process => &engine::PROCESS_DRIVER,
        }
    }
}

impl From<WorldArg> for Kind {
    fn from(w: WorldArg) -> Self {
        match w {
            WorldArg::Tool => Kind::Tool,
            WorldArg::Driver => Kind::Driver,
            WorldArg::Hook => Kind::Hook,
            WorldArg::Loop => Kind::Loop,
            WorldArg::ProcessDriver => Kind::Process,
        }
    }
}

/// A component's `murmur:` imports and exports, as `murmur:tool/run@0.2.0`.
#[derive(Debug, Clone, Default)]
pub struct Decoded {
    pub imports: Vec<String>,
    pub exports: Vec<String>,
    /// It imports `wasi:http`: of upstream's `murmur:tool/run@0.1.0` components, the
    /// drivers do and the tools do not.
    pub http: bool,
}

impl Decoded {
    /// `exports murmur:tool/run@0.2.0; imports murmur:text/chunks@0.2.0, ...`
    pub fn describe(&self) -> String {
        let list = |v: &[String]| {
            if v.is_empty() {
                "no murmur: interface".to_string()
            } else {
                v.join(", ")
            }
        };
        format!(
            "exports {}; imports {}",
            list(&self.exports),
            list(&self.imports)
        )
    }
}

/// Decodes the component's world. `bytes` must be a component (see
/// [`is_component`]).
pub fn decode(bytes: &[u8], shown: &str) -> Result<Decoded, Error> {
    let decoded = wit_component::decode(bytes).map_err(|e| {
        Error::new(
            "E-CHK-003",
            format!("{shown} is a component whose types cannot be decoded: {e:#}"),
        )
        .hint("rebuild it with a current toolchain (cargo build --target wasm32-wasip2)")
    })?;
    let wit_component::DecodedWasm::Component(resolve, world) = decoded else {
        return Err(Error::new(
            "E-CHK-002",
            format!("{shown} is a WIT package, not a component"),
        )
        .hint("check the .wasm your build wrote, not the WIT it was built against"));
    };
    let world = &resolve.worlds[world];
    let names = |items: &mut dyn Iterator<Item = &WorldKey>| -> Vec<String> {
        items
            .filter_map(|key| match key {
                WorldKey::Interface(id) => resolve.id_of(*id),
                WorldKey::Name(_) => None,
            })
            .filter(|name| name.starts_with("murmur:"))
            .collect()
    };
    let http = world
        .imports
        .keys()
        .filter_map(|key| match key {
            WorldKey::Interface(id) => resolve.id_of(*id),
            WorldKey::Name(_) => None,
        })
        .any(|name| name.starts_with("wasi:http/"));
    Ok(Decoded {
        imports: names(&mut world.imports.keys()),
        exports: names(&mut world.exports.keys()),
        http,
    })
}

/// Whether `bytes` start as a WebAssembly component (not a core module).
pub fn is_component(bytes: &[u8]) -> bool {
    // `\0asm`, then a 16-bit version and a 16-bit layer: layer 1 is a component.
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[6..8] == [1, 0]
}

/// Whether `bytes` start as a core WebAssembly module.
pub fn is_core_module(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[6..8] == [0, 0]
}

/// The world a component targets, from the interface it exports, whatever its
/// version (a version mur does not serve is then the link check's failure, with the
/// capsule's error). The one place that knows how a world is recognised: a world the
/// host learns to serve is added here.
pub fn detect(decoded: &Decoded) -> Option<Kind> {
    let upstream_run = decoded.exports.iter().any(|e| e == engine::UPSTREAM_RUN);
    if upstream_run && decoded.http {
        return Some(Kind::Driver);
    }
    if decoded
        .exports
        .iter()
        .any(|e| e == engine::UPSTREAM_CAPSULE)
    {
        return Some(Kind::Capsule);
    }
    const KINDS: [Kind; 5] = [
        Kind::Tool,
        Kind::Driver,
        Kind::Hook,
        Kind::Loop,
        Kind::Process,
    ];
    KINDS.into_iter().find(|kind| {
        decoded
            .exports
            .iter()
            .any(|e| e.split('@').next() == Some(kind.world().export))
    })
}

/// Compiles the component and links it as a capsule would link `kind`'s artifact:
/// the host's own world check and instantiate-pre, so the error is the capsule's
/// (`error[E-RUN-030]`, `error[E-RUN-031]`, ...).
pub fn link(bytes: &[u8], kind: Kind, name: &str) -> Result<(), Error> {
    let engine = Engine::new()?;
    let label = match kind {
        Kind::Tool => format!("tool artifact '{name}'"),
        Kind::Driver => format!("driver artifact '{name}'"),
        Kind::Hook => format!("hook artifact '{name}'"),
        Kind::Loop => format!("session loop artifact '{name}'"),
        Kind::Capsule => format!("capsule component '{name}'"),
        Kind::Process => format!("process driver artifact '{name}'"),
    };
    let component = engine.load(bytes, &label)?;
    let upstream = engine::classify(engine.wasmtime(), &component) == engine::Kind::UpstreamRun;
    match kind {
        Kind::Tool if upstream => {
            crate::tools::link_upstream(&engine, &component, &label).map(drop)
        }
        Kind::Tool => crate::tools::link(&engine, &component, &label).map(drop),
        Kind::Driver if upstream => {
            crate::driver::link_upstream(&engine, &component, &label).map(drop)
        }
        Kind::Driver => crate::driver::link(&engine, &component, &label).map(drop),
        Kind::Hook => crate::hooks::link(&engine, &component, &label).map(drop),
        Kind::Loop => crate::session::LoopComponent::new(&engine, &component, label).map(drop),
        Kind::Process => crate::harness::component::link(&engine, &component, &label).map(drop),
        // Linked as a capsule links it: in place of its session loop.
        Kind::Capsule => {
            match crate::session::LoopComponent::new(&engine, &component, label.clone())? {
                linked if linked.is_capsule() => Ok(()),
                _ => Err(Error::new(
                    "E-RUN-031",
                    format!(
                        "{label} does not export run: func() in {}",
                        engine::UPSTREAM_CAPSULE
                    ),
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_loop_decodes_to_the_loop_world() {
        let decoded = decode(crate::builtin::SESSION_LOOP, "built-in").unwrap();
        assert_eq!(decoded.exports, ["murmur:session/loop@0.2.0"]);
        assert!(
            decoded
                .imports
                .contains(&"murmur:session/host@0.2.0".to_string())
        );
        assert_eq!(detect(&decoded), Some(Kind::Loop));
        assert!(link(crate::builtin::SESSION_LOOP, Kind::Loop, "built-in").is_ok());
    }

    #[test]
    fn a_world_is_read_off_its_export_whatever_the_version() {
        let of = |export: &str| {
            detect(&Decoded {
                imports: vec![],
                exports: vec![export.to_string()],
                http: false,
            })
        };
        assert_eq!(of("murmur:tool/run@0.1.0"), Some(Kind::Tool));
        assert_eq!(of("murmur:hook/lifecycle@0.9.0"), Some(Kind::Hook));
        assert_eq!(of("murmur:driver/inference@0.2.0"), Some(Kind::Driver));
        assert_eq!(of("murmur:capsule/run@0.1.0"), Some(Kind::Capsule));
        assert_eq!(of("murmur:capsule/other@0.1.0"), None);
    }

    #[test]
    fn an_upstream_run_component_that_reaches_http_is_a_driver() {
        let upstream = |http| Decoded {
            imports: vec!["murmur:stream/events@0.1.0".into()],
            exports: vec!["murmur:tool/run@0.1.0".into()],
            http,
        };
        assert_eq!(detect(&upstream(true)), Some(Kind::Driver));
        assert_eq!(detect(&upstream(false)), Some(Kind::Tool));
    }

    #[test]
    fn only_a_component_header_is_a_component() {
        assert!(is_component(b"\0asm\x0d\0\x01\0"));
        assert!(!is_component(b"\0asm\x01\0\0\0"));
        assert!(is_core_module(b"\0asm\x01\0\0\0"));
        assert!(!is_component(b"\0asm"));
    }
}
