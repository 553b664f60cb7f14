//! `mur push`, `mur pull`, `mur ls` and `mur install`.

use std::process::ExitCode;
use std::time::Instant;

use bytes::Bytes;

use super::client::Client;
use super::progress::mib;
use super::reference::Reference;
use super::resolve::{self, Mode};
use super::store::{MAX_COMPONENT, Store};
use super::{fetch, layout, lock};
use crate::check::world;
use crate::cli::{InstallArgs, LsArgs, PullArgs, PushArgs};
use crate::engine::Engine;
use crate::error::Error;

/// The registry settings of this machine.
fn insecure() -> Result<Vec<String>, Error> {
    Ok(crate::home_config::load(&crate::workdir::murmur_home())?
        .registry
        .insecure)
}

pub async fn push(args: &PushArgs) -> Result<ExitCode, Error> {
    let reference = Reference::parse(&args.reference)?;
    let Some(tag) = reference.tag.clone().filter(|_| reference.digest.is_none()) else {
        return Err(Error::new(
            "E-REG-001",
            format!("{reference} names a digest: a push gives a version (tag), not a digest"),
        )
        .hint("write host[:port]/namespace/name:version"));
    };
    let wasm = read_component(&args.file)?;
    let kind = world_of(&wasm, &args.file.display().to_string())?;
    let info = layout::interfaces(&wasm).unwrap_or(layout::ComponentInfo {
        exports: Vec::new(),
        imports: Vec::new(),
        target: None,
    });
    let packed = layout::pack(&wasm, info)?;
    let client = Client::new(&reference, &insecure()?);
    let repo = &reference.repository;
    eprintln!(
        "pushing {} ({} component, {}) to {reference}",
        args.file.display(),
        kind,
        mib(wasm.len() as u64)
    );
    if !client.has_blob(repo, &packed.layer.digest).await? {
        client
            .push_blob(repo, &packed.layer.digest, Bytes::from(wasm))
            .await?;
    }
    if !client.has_blob(repo, &packed.config_digest).await? {
        client
            .push_blob(repo, &packed.config_digest, Bytes::from(packed.config))
            .await?;
    }
    let manifest_digest = super::store::digest_of(&packed.manifest);
    client
        .put_manifest(repo, &tag, Bytes::from(packed.manifest))
        .await?;
    println!("pushed {reference}@{manifest_digest}");
    println!("component {}", packed.layer.digest);
    Ok(ExitCode::SUCCESS)
}

/// The file's bytes, if it is a WebAssembly component of a size mur takes.
fn read_component(path: &std::path::Path) -> Result<Vec<u8>, Error> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| {
        Error::new("E-IO-001", format!("cannot read {shown}: {e}"))
            .hint("pass the path of a .wasm component")
    })?;
    if !meta.is_file() || meta.len() > MAX_COMPONENT {
        return Err(Error::new(
            "E-REG-008",
            format!("{shown} is not a component file (a regular file of at most 512 MiB)"),
        )
        .hint("pass the .wasm your build wrote"));
    }
    let bytes = std::fs::read(path)
        .map_err(|e| Error::new("E-IO-003", format!("cannot read {shown}: {e}")))?;
    if world::is_component(&bytes) {
        return Ok(bytes);
    }
    let what = if world::is_core_module(&bytes) {
        "a core WebAssembly module, not a component"
    } else {
        "not WebAssembly at all"
    };
    Err(Error::new("E-REG-008", format!("{shown} is {what}")).hint(
        "build it for wasm32-wasip2 (cargo build --target wasm32-wasip2), which makes a component",
    ))
}

/// The name of the world the component targets, or why it targets none of ours.
fn world_of(wasm: &[u8], shown: &str) -> Result<&'static str, Error> {
    let decoded = world::decode(wasm, shown)?;
    match world::detect(&decoded) {
        Some(kind) => Ok(kind.name()),
        None => Err(Error::new(
            "E-REG-008",
            format!(
                "{shown} targets none of mur's worlds (nor upstream Murmur's): it {}",
                decoded.describe()
            ),
        )
        .hint("`mur wit` prints the worlds mur serves; `mur component check` says more")),
    }
}

pub async fn pull(args: &PullArgs) -> Result<ExitCode, Error> {
    let reference = Reference::parse(&args.reference)?;
    let client = Client::new(&reference, &insecure()?);
    let store = Store::open()?;
    let layer = fetch::look_up(&client, &reference).await?;
    let fetched = fetch::component(&client, &reference, &layer, &store).await?;
    let how = if fetched.cached {
        "already in the cache"
    } else {
        "pulled"
    };
    println!(
        "{how} {reference}: {} ({}) at {}",
        fetched.digest,
        mib(fetched.size),
        fetched.path.display()
    );
    Ok(ExitCode::SUCCESS)
}

pub async fn ls(args: &LsArgs) -> Result<ExitCode, Error> {
    let with_tag = if args
        .reference
        .rsplit('/')
        .next()
        .is_some_and(|l| l.contains(':') || l.contains('@'))
    {
        args.reference.clone()
    } else {
        format!("{}:latest", args.reference)
    };
    let reference = Reference::parse(&with_tag)?;
    let client = Client::new(&reference, &insecure()?);
    let mut tags = client.tags(&reference.repository).await?;
    tags.sort_by(|a, b| newest_first(a, b));
    for tag in tags {
        println!("{}", crate::escape::line(&tag));
    }
    Ok(ExitCode::SUCCESS)
}

/// Versions by their numbers (`1.10.0` after `1.9.0`), a release after its
/// pre-releases, anything that is not a version after every version.
fn newest_first(a: &str, b: &str) -> std::cmp::Ordering {
    version_key(b).cmp(&version_key(a)).then_with(|| b.cmp(a))
}

fn version_key(tag: &str) -> (bool, Vec<u64>, bool) {
    let tag = tag.strip_prefix('v').unwrap_or(tag);
    let (core, pre) = match tag.split_once('-') {
        Some((core, _)) => (core, true),
        None => (tag, false),
    };
    let numbers: Option<Vec<u64>> = core.split('.').map(|p| p.parse().ok()).collect();
    match numbers {
        Some(numbers) => (true, numbers, !pre),
        None => (false, Vec::new(), false),
    }
}

pub async fn install(args: &InstallArgs) -> Result<ExitCode, Error> {
    let loaded = crate::manifest::load(&args.manifest)?;
    for warning in &loaded.warnings {
        eprintln!("{}", warning.text);
    }
    let mut m = loaded.manifest;
    let started = Instant::now();
    let mut each = |r: &resolve::Resolved| {
        let how = if r.cached { "cached" } else { "fetched" };
        println!(
            "{} {}: {} ({}, {how} in {} ms)",
            r.entry.name,
            r.entry.version,
            r.entry.digest,
            mib(r.size),
            r.fetching.as_millis()
        );
    };
    let resolution = resolve::resolve(&mut m, Mode::Install, &mut each).await?;
    let fetched = started.elapsed();
    let sources = crate::capsule::component_sources(&m, None)?;
    let engine = Engine::new()?;
    let compiling = Instant::now();
    for ((_, label), result) in sources.iter().zip(engine.warm(&sources)) {
        let (origin, took) = result?;
        println!("{label}: {}", crate::warm::said(origin, took, &engine));
    }
    let compiled = compiling.elapsed();
    let path = lock::path_beside(&m.path);
    resolve::lock_of(&resolution).write(&path)?;
    println!(
        "wrote {} ({} artifacts; fetch and verify {} ms, compile {} ms)",
        path.display(),
        resolution.resolved.len(),
        fetched.as_millis(),
        compiled.as_millis()
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_listed_newest_first() {
        let mut tags = vec![
            "1.9.0",
            "latest",
            "1.10.0",
            "1.10.0-rc.1",
            "0.2.0",
            "v2.0.0",
        ];
        tags.sort_by(|a, b| newest_first(a, b));
        assert_eq!(
            tags,
            [
                "v2.0.0",
                "1.10.0",
                "1.10.0-rc.1",
                "1.9.0",
                "0.2.0",
                "latest"
            ]
        );
    }
}
