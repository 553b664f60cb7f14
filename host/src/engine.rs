//! One wasmtime Engine per process, components compiled once and cached on disk, and
//! the check that a component targets a world (and version) this host serves.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use wasmtime::component::Component;

use crate::error::Error;

mod config;
mod precompiled;
mod wasm;

pub use wasm::Wasm;

pub struct Engine {
    engine: wasmtime::Engine,
    /// The largest linear memory an instance may have, when instances come from a pool.
    pooled_memory: Option<u64>,
    cache_dir: Option<PathBuf>,
    /// Components compiled or loaded by this process, by cache key: every capsule
    /// `mur serve` hosts with the same component shares one compiled copy.
    loaded: Mutex<HashMap<String, Component>>,
    /// Components linked against a world (their `InstancePre`), by component and world
    /// type: every capsule with the same component shares one.
    linked: Mutex<HashMap<(usize, TypeId), Box<dyn Any + Send + Sync>>>,
}

impl Engine {
    /// The engine, and a thread that advances its epoch so deadlines can fire while a
    /// guest spins without calling the host. Instances are allocated on demand.
    pub fn new() -> Result<Self, Error> {
        Self::with(None)
    }

    /// An engine whose instances come from a pool sized up front (`mur serve
    /// --pool-slots`): no mmap per instantiation, and a ceiling the server reaches
    /// with a clear error rather than by exhausting the machine.
    pub fn with(pool: Option<Pool>) -> Result<Self, Error> {
        let mut config = config::base();
        if let Some(pool) = pool {
            config.allocation_strategy(pool.config());
            // Each slot reserves only what its largest memory may need, so thousands
            // of slots fit the address space.
            config.memory_reservation(pool.memory_bytes);
            config.memory_guard_size(64 * 1024);
        }
        let engine = wasmtime::Engine::new(&config).map_err(|e| {
            Error::new(
                "E-RUN-001",
                format!("could not start the WebAssembly engine: {e:#}"),
            )
        })?;
        let ticker = engine.weak();
        std::thread::Builder::new()
            .name("mur-epoch".into())
            .spawn(move || {
                // The granularity of component deadlines, and how often a guest
                // yields its thread.
                let period = crate::cpu::tick();
                while let Some(engine) = ticker.upgrade() {
                    engine.increment_epoch();
                    crate::cpu::ticked();
                    drop(engine);
                    std::thread::sleep(period);
                }
            })
            .map_err(|e| {
                Error::new(
                    "E-RUN-001",
                    format!("could not start the epoch thread: {e}"),
                )
            })?;
        Ok(Engine {
            engine,
            pooled_memory: pool.map(|p| p.memory_bytes),
            cache_dir: cache_dir(),
            loaded: Mutex::new(HashMap::new()),
            linked: Mutex::new(HashMap::new()),
        })
    }

    /// Where compiled components are kept between runs, when anywhere.
    pub fn cache_dir(&self) -> Option<&Path> {
        self.cache_dir.as_deref()
    }

    pub fn wasmtime(&self) -> &wasmtime::Engine {
        &self.engine
    }

    /// Refuses a capsule whose memory cap a pool slot cannot hold.
    pub fn check_memory(&self, memory_bytes: u64) -> Result<(), Error> {
        match self.pooled_memory {
            Some(slot) if memory_bytes > slot => Err(Error::new(
                "E-RUN-060",
                format!(
                    "capabilities.limits.memory_bytes ({memory_bytes}) is over what a pool slot holds ({slot})"
                ),
            )
            .hint("lower the capsule's memory_bytes, or start mur serve with a larger --pool-memory-mib")),
            _ => Ok(()),
        }
    }

    /// Compiles `bytes`, or loads the compiled form cached by an earlier run. A cache
    /// that cannot be read or written only costs a compile.
    pub fn load(&self, bytes: &[u8], label: &str) -> Result<Component, Error> {
        self.load_wasm(&Wasm::read(bytes.to_vec()), label)
    }

    /// [`Engine::load`] of a component handed over as [`Wasm`] (a built-in one is
    /// neither copied nor hashed).
    pub fn load_wasm(&self, wasm: &Wasm, label: &str) -> Result<Component, Error> {
        self.load_from(wasm, label).map(|(component, _)| component)
    }

    /// [`Engine::load_wasm`], saying where the compiled form came from.
    fn load_from(&self, wasm: &Wasm, label: &str) -> Result<(Component, Origin), Error> {
        let digest = wasm.digest();
        let key = self.cache_key(&digest);
        if let Some(component) = self.in_memory().get(&key) {
            return Ok((component.clone(), Origin::Memory));
        }
        let (component, origin) = self.load_uncached(wasm.bytes(), &digest, label, &key)?;
        self.in_memory().insert(key, component.clone());
        Ok((component, origin))
    }

    /// `component` linked by `link` (checked against its world, its imports resolved),
    /// done once per component and world for the whole process.
    pub fn linked<P: Clone + Send + Sync + 'static>(
        &self,
        component: &Component,
        link: impl FnOnce() -> Result<P, Error>,
    ) -> Result<P, Error> {
        // A loaded component lives as long as the engine, so where its code sits names it.
        let key = (component.image_range().start as usize, TypeId::of::<P>());
        let cached = self
            .linked_map()
            .get(&key)
            .and_then(|p| p.downcast_ref::<P>().cloned());
        if let Some(pre) = cached {
            return Ok(pre);
        }
        let pre = link()?;
        self.linked_map().insert(key, Box::new(pre.clone()));
        Ok(pre)
    }

    fn linked_map(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<(usize, TypeId), Box<dyn Any + Send + Sync>>> {
        self.linked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn in_memory(&self) -> std::sync::MutexGuard<'_, HashMap<String, Component>> {
        self.loaded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn load_uncached(
        &self,
        bytes: &[u8],
        digest: &str,
        label: &str,
        key: &str,
    ) -> Result<(Component, Origin), Error> {
        let cached = self.cache_dir.as_ref().map(|dir| dir.join(key));
        let built_in = precompiled::find(digest);
        if let Some(component) = cached
            .as_deref()
            .filter(|p| p.exists())
            .and_then(|path| mapped(&self.engine, path))
        {
            let origin = match built_in {
                Some(_) => Origin::Binary,
                None => Origin::Cache,
            };
            return Ok((component, origin));
        }
        if let Some(compiled) = built_in {
            // Copied once into the cache, then mapped from there by every run: a mapped
            // file costs only the pages a run touches, shared with every other capsule,
            // where a copy out of the binary costs all of them, in each process.
            if let Some(component) = cached
                .as_deref()
                .and_then(|path| keep_mapped(&self.engine, compiled, path))
            {
                return Ok((component, Origin::Binary));
            }
            if let Some(component) = precompiled::load(&self.engine, compiled) {
                return Ok((component, Origin::Binary));
            }
        }
        let component = Component::new(&self.engine, bytes).map_err(|e| {
            Error::new(
                "E-RUN-001",
                format!("{label} is not a valid WebAssembly component: {e:#}"),
            )
            .hint("build it for wasm32-wasip2 (a component), not a core module")
        })?;
        COMPILED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(path) = cached {
            store_in_cache(&component, &path);
        }
        Ok((component, Origin::Compiled))
    }

    /// Loads several components at once: at a cold start their compiles overlap.
    /// Results come back in the order given.
    pub fn load_all(&self, sources: &[(Wasm, String)]) -> Vec<Result<Component, Error>> {
        self.each(sources, |wasm, label| self.load_wasm(wasm, label))
    }

    /// [`Engine::load_all`] for `mur warm`: where each compiled form came from and how
    /// long it took.
    pub fn warm(&self, sources: &[(Wasm, String)]) -> Vec<Result<(Origin, Duration), Error>> {
        self.each(sources, |wasm, label| {
            let started = std::time::Instant::now();
            self.load_from(wasm, label)
                .map(|(_, origin)| (origin, started.elapsed()))
        })
    }

    /// `load` applied to every source on a thread of its own, results in order.
    fn each<T: Send>(
        &self,
        sources: &[(Wasm, String)],
        load: impl Fn(&Wasm, &str) -> Result<T, Error> + Sync,
    ) -> Vec<Result<T, Error>> {
        let load = &load;
        std::thread::scope(|scope| {
            let handles: Vec<_> = sources
                .iter()
                .map(|(wasm, label)| scope.spawn(move || load(wasm, label)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(Error::new("E-RUN-001", "the component compiler panicked"))
                    })
                })
                .collect()
        })
    }

    /// The cache file's name: the first half of the sha-256 (hex) and the engine's
    /// compatibility hash.
    fn cache_key(&self, digest: &str) -> String {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.engine
            .precompile_compatibility_hash()
            .hash(&mut hasher);
        format!("{}-{:016x}.cwasm", &digest[..32], hasher.finish())
    }
}

/// Where a loaded component's compiled form came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Already loaded by this process.
    Memory,
    /// Compiled when `mur` was built, carried in the binary (the built-in components).
    Binary,
    /// Compiled by an earlier run, read from the component cache.
    Cache,
    /// Compiled now, and stored in the cache when there is one.
    Compiled,
}

/// The instance pool: how many of everything, and the largest memory one may have.
#[derive(Clone, Copy, Debug)]
pub struct Pool {
    /// Component instances alive at once (a parked loop holds one).
    pub slots: u32,
    pub memory_bytes: u64,
}

impl Pool {
    fn config(&self) -> wasmtime::PoolingAllocationConfig {
        let mut pool = wasmtime::PoolingAllocationConfig::default();
        let per = |n: u32| self.slots.saturating_mul(n);
        // A component built by wit-component holds a few core instances and tables
        // (its shims) besides its one memory.
        pool.total_component_instances(self.slots)
            .total_core_instances(per(8))
            .total_memories(per(2))
            .total_tables(per(8))
            .total_stacks(self.slots)
            .max_memory_size(usize::try_from(self.memory_bytes).unwrap_or(usize::MAX));
        pool
    }
}

/// Components this process compiled from their WebAssembly (not found in memory, in
/// the cache or in the binary): `/metrics` shows it, so an operator sees that tenants
/// naming one component share its compiled form.
static COMPILED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub fn compiled_total() -> u64 {
    COMPILED.load(std::sync::atomic::Ordering::Relaxed)
}

/// `MUR_CACHE_DIR`, else `mur` in the XDG cache dir, else in `~/.cache`: where compiled
/// components and pulled ones are kept.
pub fn cache_root() -> Option<PathBuf> {
    std::env::var_os("MUR_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("mur")))
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("mur")))
}

/// The compiled forms' folder under [`cache_root`], else none (every run compiles).
fn cache_dir() -> Option<PathBuf> {
    let dir = cache_root()?.join("components");
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir)
}

/// Written to a temporary name and renamed, so a concurrent run never reads half a file.
fn store_in_cache(component: &Component, path: &Path) {
    if let Ok(bytes) = component.serialize() {
        store(&bytes, path);
    }
}

fn store(bytes: &[u8], path: &Path) -> bool {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let stored = std::fs::write(&tmp, bytes).is_ok() && std::fs::rename(&tmp, path).is_ok();
    if !stored {
        let _ = std::fs::remove_file(&tmp);
    }
    stored
}

/// The compiled component in the cache file at `path`, mapped rather than read.
fn mapped(engine: &wasmtime::Engine, path: &Path) -> Option<Component> {
    // SAFETY: the file was written by this host (a compile's `Component::serialize`, or
    // a built-in's compiled form copied out of the binary) for an engine with the same
    // compatibility hash (it is in the name), in the user's own cache dir; wasmtime
    // checks its version and settings again before using it.
    unsafe { Component::deserialize_file(engine, path) }.ok()
}

/// A built-in's `compiled` form written to the cache at `path`, then mapped from there.
/// An engine that cannot use it (other settings, another CPU) leaves no file behind, so
/// the compile that follows stores its own.
fn keep_mapped(engine: &wasmtime::Engine, compiled: &[u8], path: &Path) -> Option<Component> {
    if !store(compiled, path) {
        return None;
    }
    let component = mapped(engine, path);
    if component.is_none() {
        let _ = std::fs::remove_file(path);
    }
    component
}

/// A world this host serves: what a component of it must export, and which `murmur:`
/// interfaces it may import.
pub struct World {
    pub name: &'static str,
    pub export: &'static str,
    pub imports: &'static [&'static str],
    /// Interfaces of a later version of the world that a component may also import,
    /// each at the one version served.
    pub later: &'static [(&'static str, &'static str)],
}

pub const VERSION: &str = "0.2.0";

pub const SESSION_LOOP: World = World {
    name: "session-loop",
    export: "murmur:session/loop",
    imports: &[
        "murmur:message/types",
        "murmur:text/chunks",
        "murmur:session/types",
        "murmur:session/host",
    ],
    later: &[("murmur:session/peers", "0.3.0")],
};

pub const DRIVER: World = World {
    name: "driver",
    export: "murmur:driver/inference",
    imports: &["murmur:message/types", "murmur:text/chunks"],
    later: &[],
};

pub const TOOL: World = World {
    name: "tool",
    export: "murmur:tool/run",
    imports: &["murmur:text/chunks", "murmur:task/task"],
    later: &[],
};

pub const HOOK: World = World {
    name: "hook",
    export: "murmur:hook/lifecycle",
    imports: &["murmur:message/types"],
    later: &[],
};

/// A process driver (`inference.transport: process`): pure translation, granted nothing.
pub const PROCESS_DRIVER: World = World {
    name: "process-driver",
    export: "murmur:process/harness",
    imports: &[],
    later: &[],
};

const WORLDS: [&World; 5] = [&SESSION_LOOP, &DRIVER, &TOOL, &HOOK, &PROCESS_DRIVER];

/// Splits `murmur:session/loop@0.1.0` into the interface and its version.
fn split_version(name: &str) -> (&str, &str) {
    name.split_once('@').unwrap_or((name, ""))
}

/// Refuses a component that targets another world, or another version of ours.
pub fn check_world(
    engine: &Engine,
    component: &Component,
    world: &World,
    label: &str,
) -> Result<(), Error> {
    let ty = component.component_type();
    let exports: Vec<String> = ty
        .exports(&engine.engine)
        .map(|(n, _)| n.to_string())
        .collect();
    let imports: Vec<String> = ty
        .imports(&engine.engine)
        .map(|(n, _)| n.to_string())
        .collect();
    let served = format!("{}@{VERSION}", world.export);

    let exported = exports.iter().find(|e| split_version(e).0 == world.export);
    match exported {
        Some(found) if split_version(found).1 != VERSION => {
            return Err(version_error(label, found, &served, world));
        }
        Some(_) => {}
        None => return Err(world_error(label, &exports, world)),
    }
    for import in imports.iter().filter(|i| i.starts_with("murmur:")) {
        let (iface, version) = split_version(import);
        if let Some((_, served)) = world.later.iter().find(|(i, _)| *i == iface) {
            if version != *served {
                return Err(version_error(
                    label,
                    import,
                    &format!("{iface}@{served}"),
                    world,
                ));
            }
            continue;
        }
        if !world.imports.contains(&iface) {
            return Err(Error::new(
                "E-RUN-031",
                format!(
                    "{label} imports {import}, which the {} world does not provide",
                    world.name
                ),
            )
            .hint(format!(
                "a {} component may import: {}",
                world.name,
                served_imports(world)
            )));
        }
        if version != VERSION {
            return Err(version_error(
                label,
                import,
                &format!("{iface}@{VERSION}"),
                world,
            ));
        }
    }
    Ok(())
}

fn served_imports(world: &World) -> String {
    if world.imports.is_empty() {
        return "no murmur: interfaces".into();
    }
    world
        .imports
        .iter()
        .map(|i| format!("{i}@{VERSION}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn version_error(label: &str, found: &str, served: &str, world: &World) -> Error {
    Error::new(
        "E-RUN-030",
        format!("{label} was built against {found}; this mur serves {served}"),
    )
    .hint(format!(
        "rebuild the component against the {} world of murmur:*@{VERSION} (the wit/ folder of this mur)",
        world.name
    ))
}

fn world_error(label: &str, exports: &[String], world: &World) -> Error {
    let found: Vec<&str> = exports
        .iter()
        .map(|s| s.as_str())
        .filter(|e| e.starts_with("murmur:"))
        .collect();
    let other = WORLDS
        .iter()
        .find(|w| found.iter().any(|e| split_version(e).0 == w.export));
    let what = match (other, found.is_empty()) {
        (Some(w), _) => format!(
            "it is a {} component (exports {})",
            w.name,
            found.join(", ")
        ),
        (None, true) => "it exports no murmur: interface".to_string(),
        (None, false) => format!("it exports {}", found.join(", ")),
    };
    Error::new(
        "E-RUN-031",
        format!("{label} does not target the {} world: {what}", world.name),
    )
    .hint(format!(
        "a {} component exports {}@{VERSION}",
        world.name, world.export
    ))
}

/// What a component is, read from what it exports: the one place the host tells the
/// worlds apart, before it checks or links anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Exports the interface of one of this host's worlds (`SESSION_LOOP`, `DRIVER`,
    /// `TOOL`, `HOOK`), at any version: `check_world` then refuses another version, our
    /// retired `murmur:tool/run@0.1.0` (`describe` + `call`) included.
    Ours(&'static str),
    /// Upstream Murmur's `murmur:tool/run@0.1.0` with its `run` function: a tool or a
    /// driver, as the manifest entry's `runtime` says.
    UpstreamRun,
    /// Upstream Murmur's hook, `murmur:hook/lifecycle@0.9.0`.
    UpstreamHook,
    /// Upstream Murmur's whole capsule, `murmur:capsule/run@0.1.0` with its `run`
    /// function: run in place of a session loop (`crate::session::capsule`).
    UpstreamCapsule,
    /// No world this host knows.
    Unknown,
}

/// Upstream's tool and driver export, which our retired tool world also named.
pub const UPSTREAM_RUN: &str = "murmur:tool/run@0.1.0";
/// Upstream's hook export.
pub const UPSTREAM_HOOK: &str = "murmur:hook/lifecycle@0.9.0";
/// Upstream's capsule export.
pub const UPSTREAM_CAPSULE: &str = "murmur:capsule/run@0.1.0";

#[allow(dead_code, reason = "`mur component check` names the world with it")]
impl Kind {
    /// The world's name as errors and `mur component check` print it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Ours(name) => name,
            Kind::UpstreamRun => "upstream tool or driver (murmur:tool/run@0.1.0)",
            Kind::UpstreamHook => "upstream hook (murmur:hook/lifecycle@0.9.0)",
            Kind::UpstreamCapsule => "upstream capsule (murmur:capsule/run@0.1.0)",
            Kind::Unknown => "unknown",
        }
    }
}

/// Which world `component` targets, by its exports alone (imports are checked when it
/// is linked). Upstream's shapes are told from ours by the functions they export, since
/// upstream's tool and our retired tool share a name and version.
pub fn classify(engine: &wasmtime::Engine, component: &Component) -> Kind {
    use wasmtime::component::types::ComponentItem;
    let ty = component.component_type();
    let mut kind = Kind::Unknown;
    for (name, item) in ty.exports(engine) {
        let functions = |f: &str| match &item.ty {
            ComponentItem::ComponentInstance(i) => i.exports(engine).any(|(n, _)| n == f),
            _ => false,
        };
        if name == UPSTREAM_RUN && functions("run") && !functions("describe") {
            return Kind::UpstreamRun;
        }
        if name == UPSTREAM_HOOK {
            return Kind::UpstreamHook;
        }
        if name == UPSTREAM_CAPSULE && functions("run") {
            return Kind::UpstreamCapsule;
        }
        if let Some(world) = WORLDS.iter().find(|w| split_version(name).0 == w.export) {
            kind = Kind::Ours(world.name);
        }
    }
    kind
}

#[cfg(test)]
mod wit_lock;

#[cfg(test)]
mod classify_tests;
