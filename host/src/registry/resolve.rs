//! Turning a manifest's artifacts without `source:` into components in the store.
//!
//! - `mur run` with a `murmur.lock`: each locked digest, from the store, offline; a
//!   digest not in the store is fetched from the registry only if the registry still
//!   holds exactly it.
//! - `mur run` without one: each name and version resolved at the registry, and what
//!   it resolved to said on stderr.
//! - `mur install`: each resolved at the registry, refused when a lock pins another
//!   digest for the same name and version, and the lock written.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use super::client::Client;
use super::config::Registries;
use super::fetch;
use super::lock::{self, Entry, Lock};
use super::reference::Reference;
use super::store::Store;
use crate::error::Error;
use crate::manifest::{Artifact, Manifest, Runtime};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Run,
    Install,
}

/// One artifact resolved.
pub struct Resolved {
    pub entry: Entry,
    pub path: PathBuf,
    /// Pinned by the lock.
    pub locked: bool,
    pub cached: bool,
    pub size: u64,
    pub fetching: Duration,
}

/// Everything resolved.
pub struct Resolution {
    pub resolved: Vec<Resolved>,
}

/// Resolves every artifact of `m` fetched by name, setting its `source` to the
/// component in the store, and telling `each` of every one as it is resolved. A
/// manifest with none asks nothing of anyone.
pub async fn resolve(
    m: &mut Manifest,
    mode: Mode,
    each: &mut dyn FnMut(&Resolved),
) -> Result<Resolution, Error> {
    if !m.artifacts.iter().any(|a| a.from_registry) {
        return Ok(Resolution {
            resolved: Vec::new(),
        });
    }
    let registries = crate::home_config::load(&crate::workdir::murmur_home())?.registry;
    let lock = Lock::read(&lock::path_beside(&m.path))?;
    let store = Store::open()?;
    let mut resolved = Vec::new();
    let at = Where {
        registry: m.registry.as_deref(),
        registries: &registries,
        lock: lock.as_ref(),
        store: &store,
    };
    // One client per registry, so a challenge is answered once for all its artifacts.
    let mut clients = HashMap::new();
    for artifact in m.artifacts.iter_mut().filter(|a| a.from_registry) {
        let one = resolve_one(artifact, &at, mode, &mut clients).await?;
        artifact.source = one.path.clone();
        artifact.pinned = Some(one.entry.digest.clone());
        each(&one);
        resolved.push(one);
    }
    Ok(Resolution { resolved })
}

/// Where an artifact is looked for.
struct Where<'a> {
    /// The manifest's own `registry:`.
    registry: Option<&'a str>,
    registries: &'a Registries,
    lock: Option<&'a Lock>,
    store: &'a Store,
}

async fn resolve_one(
    artifact: &Artifact,
    at: &Where<'_>,
    mode: Mode,
    clients: &mut HashMap<String, Client>,
) -> Result<Resolved, Error> {
    let Where {
        registry,
        registries,
        lock,
        store,
    } = *at;
    let name = artifact.full_name.as_str();
    let version = artifact.version.as_deref().unwrap_or_default();
    if artifact.runtime == Runtime::Skill {
        return Err(Error::new(
            "E-REG-009",
            format!("skill '{name}' has no 'source': a skill is a folder, and only components come from a registry"),
        )
        .hint("set 'source' to the skill's folder (holding skill.md)"));
    }
    let reference = registries
        .reference(registry, name, version)
        .map_err(|why| {
            Error::new(
            "E-REG-009",
            format!("artifact '{name}' has no 'source' and cannot be found by name: {why}"),
        )
        .hint(
            "name a registry: a top-level 'registry: host[:port]/namespace' in the manifest, or \
             'registry:' in $MURMUR_HOME/config.yaml; or set the artifact's 'source'",
        )
        })?;
    let prefix = reference_prefix(&reference, name);
    let pinned = lock.and_then(|l| l.find(name, version));
    let what = format!("artifact '{name}' {version}");
    if mode == Mode::Run
        && let Some(pin) = pinned
        && let Some(path) = store.kept(&pin.digest)
    {
        return Ok(Resolved {
            entry: pin.clone(),
            size: std::fs::metadata(&path).map_or(0, |m| m.len()),
            path,
            locked: true,
            cached: true,
            fetching: Duration::ZERO,
        });
    }
    let client = clients
        .entry(reference.registry.clone())
        .or_insert_with(|| Client::new(&reference, &registries.insecure));
    let layer = fetch::look_up(client, &reference).await?;
    if let Some(pin) = pinned
        && pin.digest != layer.digest
    {
        return Err(Error::new(
            "E-REG-006",
            format!(
                "{what}: murmur.lock pins {}, but {reference} is now {}",
                pin.digest, layer.digest
            ),
        )
        .hint(
            "the registry's version changed since the lock was written; if the new one is \
             wanted, delete its entry from murmur.lock and run `mur install`",
        ));
    }
    let fetched = fetch::component(client, &reference, &layer, store).await?;
    Ok(Resolved {
        entry: Entry {
            name: name.to_string(),
            version: version.to_string(),
            digest: fetched.digest,
            registry: prefix,
            reference: reference.to_string(),
        },
        path: fetched.path,
        locked: pinned.is_some(),
        cached: fetched.cached,
        size: fetched.size,
        fetching: fetched.fetching,
    })
}

/// `host[:port]/namespace` the name was found under.
fn reference_prefix(reference: &Reference, name: &str) -> String {
    let full = format!("{}/{}", reference.registry, reference.repository);
    let bare = name.rsplit('/').next().unwrap_or(name);
    [name, bare]
        .iter()
        .find_map(|n| full.strip_suffix(&format!("/{n}")))
        .unwrap_or(&full)
        .to_string()
}

/// The lock for `resolution`: one entry per artifact, in manifest order.
pub fn lock_of(resolution: &Resolution) -> Lock {
    Lock {
        entries: resolution
            .resolved
            .iter()
            .map(|r| r.entry.clone())
            .collect(),
    }
}

/// `mur run`'s line for each artifact it resolved without a lock.
pub fn said(resolved: &Resolved) -> String {
    let e = &resolved.entry;
    format!(
        "resolved {} {} = {}@{}{}",
        e.name,
        e.version,
        e.reference,
        e.digest,
        if resolved.cached { " (cached)" } else { "" }
    )
}

/// [`resolve`] for the commands that load a manifest outside async code (`mur run`,
/// `mur warm`, `mur serve`'s capsules, a formation's members), on the runtime they run
/// on. `mur run` says what it resolved without a lock; a locked run says nothing.
pub fn resolve_here(m: &mut Manifest, say: &mut dyn FnMut(&str)) -> Result<(), Error> {
    if !m.artifacts.iter().any(|a| a.from_registry) {
        return Ok(());
    }
    let handle = tokio::runtime::Handle::try_current().map_err(|_| {
        Error::new(
            "E-RUN-001",
            "artifacts were to be fetched outside the async runtime",
        )
    })?;
    let mut each = |r: &Resolved| {
        if !r.locked {
            say(&said(r));
        }
    };
    tokio::task::block_in_place(|| handle.block_on(resolve(m, Mode::Run, &mut each)))?;
    Ok(())
}
