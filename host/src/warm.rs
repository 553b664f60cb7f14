//! `mur warm`: compile every component a capsule would load, ahead of its first run,
//! into the component cache that `mur run` and `mur serve` read.
//!
//! The built-in loop and drivers need no warming (the binary carries them compiled);
//! a capsule's own tool, hook, driver and loop components are compiled here once, so
//! its first `mur run` starts as fast as later ones.

use std::process::ExitCode;
use std::time::Duration;

use crate::capsule;
use crate::cli::WarmArgs;
use crate::engine::{Engine, Origin};
use crate::error::Error;
use crate::manifest;

pub fn run(args: &WarmArgs) -> Result<ExitCode, Error> {
    let loaded = manifest::load(&args.manifest)?;
    for warning in &loaded.warnings {
        eprintln!("{}", warning.text);
    }
    let mut m = loaded.manifest;
    crate::registry::resolve::resolve_here(&mut m, &mut |line| eprintln!("{line}"))?;
    let sources = capsule::component_sources(&m, args.loop_path.as_deref())?;
    let engine = Engine::new()?;
    let mut failed = None;
    for ((_, label), result) in sources.iter().zip(engine.warm(&sources)) {
        match result {
            Ok((origin, took)) => println!("{label}: {}", said(origin, took, &engine)),
            Err(e) => {
                println!("{label}: not compiled");
                failed.get_or_insert(e);
            }
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(ExitCode::SUCCESS),
    }
}

pub(crate) fn said(origin: Origin, took: Duration, engine: &Engine) -> String {
    let ms = took.as_secs_f64() * 1000.0;
    match (origin, engine.cache_dir()) {
        (Origin::Binary, _) => "compiled into mur itself".to_string(),
        (Origin::Cache | Origin::Memory, _) => format!("already in the cache ({ms:.0} ms to load)"),
        (Origin::Compiled, Some(dir)) => {
            format!("compiled in {ms:.0} ms, cached in {}", dir.display())
        }
        (Origin::Compiled, None) => format!(
            "compiled in {ms:.0} ms, but not kept: there is no cache dir (set MUR_CACHE_DIR or HOME)"
        ),
    }
}
