//! `mur component check X.wasm`: the conformance run of a component. It reads which
//! of mur's worlds the component targets, links it the way a capsule would (so a
//! type or version mismatch gets the capsule's error), then runs that world's
//! behavioural scenarios, each in a scratch capsule of this same binary on
//! 127.0.0.1 under a wall-clock limit.

pub mod capsule;
pub mod driver;
pub mod hook;
pub mod loops;
pub mod process;
pub mod provider;
pub mod report;
pub mod tool;
pub mod upstream_capsule;
pub mod world;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::cli::CheckArgs;
use crate::error::Error;

use report::{Report, Scenario, fail};
use world::{Decoded, Kind};

/// The component under check, as every world's scenarios receive it.
pub struct Target {
    /// The file as given (shown in messages).
    pub path: PathBuf,
    /// The file, absolute: scratch manifests name it as an artifact's `source`.
    pub absolute: PathBuf,
    pub bytes: Vec<u8>,
    /// A name for it in scratch manifests: the file stem, made a valid artifact name.
    pub name: String,
    pub kind: Kind,
    pub decoded: Decoded,
}

/// Runs the command: prints the report, writes the JUnit file; exit 0 when nothing
/// failed, 1 when a scenario failed.
pub fn check(args: &CheckArgs) -> Result<ExitCode, Error> {
    let report = run(&args.path, args.world.map(Kind::from))?;
    // Scenarios quote what the component said: printed escaped.
    if args.json {
        println!("{}", crate::escape::json(&report.json().to_string()));
    } else {
        print!("{}", crate::escape::text(&report.plain()));
    }
    if let Some(path) = &args.junit {
        report.write_junit(path)?;
    }
    Ok(if report.totals().failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Checks the component at `path` against `world` (default: the one it exports).
pub fn run(path: &Path, world: Option<Kind>) -> Result<Report, Error> {
    let target = target(path, world)?;
    let link_name = format!("links against the {} world", target.kind.name());
    let linked = Scenario::run(&link_name, || {
        world::link(&target.bytes, target.kind, &target.name).map_err(|e| fail(e.to_string()))
    });
    let mut scenarios = Vec::new();
    let passed = linked.outcome == report::Outcome::Pass;
    scenarios.push(linked);
    if passed {
        scenarios.extend(behaviour(&target));
    } else {
        scenarios.push(Scenario::skipped(
            "behaviour",
            "the component does not link, so no scenario can run it",
        ));
    }
    Ok(Report {
        component: target.path.display().to_string(),
        world: target.kind.name().to_string(),
        summary: format!(
            "world: {} ({})",
            target.kind.name(),
            target.decoded.describe()
        ),
        scenarios,
    })
}

/// The behavioural scenarios of the target's world.
fn behaviour(target: &Target) -> Vec<Scenario> {
    match target.kind {
        Kind::Tool => tool::scenarios(target),
        Kind::Driver => driver::scenarios(target),
        Kind::Hook => hook::scenarios(target),
        Kind::Loop => loops::scenarios(target),
        Kind::Capsule => upstream_capsule::scenarios(target),
        Kind::Process => process::scenarios(target),
    }
}

/// Reads and decodes the file, and settles its world.
fn target(path: &Path, world: Option<Kind>) -> Result<Target, Error> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| {
        Error::new("E-CHK-001", format!("could not read {shown}: {e}")).hint(
            "pass the path of a .wasm component, such as target/wasm32-wasip2/release/NAME.wasm",
        )
    })?;
    if !world::is_component(&bytes) {
        let what = if world::is_core_module(&bytes) {
            "a core WebAssembly module, not a component"
        } else {
            "not a WebAssembly component"
        };
        return Err(Error::new("E-CHK-002", format!("{shown} is {what}")).hint(
            "build it for the component target: cargo build --release --target wasm32-wasip2",
        ));
    }
    let decoded = world::decode(&bytes, &shown)?;
    let kind = match world.or_else(|| world::detect(&decoded)) {
        Some(kind) => kind,
        None => {
            return Err(Error::new(
                "E-CHK-004",
                format!(
                    "{shown} targets none of mur's worlds ({})",
                    decoded.describe()
                ),
            )
            .hint(format!(
                "a mur component exports one of {}, or upstream's {}; or name the world with --world tool|driver|hook|loop|process-driver",
                [Kind::Tool, Kind::Driver, Kind::Hook, Kind::Loop, Kind::Process]
                    .iter()
                    .map(|k| format!("{}@{}", k.world().export, crate::engine::VERSION))
                    .collect::<Vec<_>>()
                    .join(", "),
                crate::engine::UPSTREAM_CAPSULE
            )));
        }
    };
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    Ok(Target {
        name: artifact_name(path),
        path: path.to_path_buf(),
        absolute,
        bytes,
        kind,
        decoded,
    })
}

/// The file stem as an artifact name: lowercase letters, digits and `-`.
fn artifact_name(path: &Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let name: String = stem
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let name = name.trim_matches('-').to_string();
    if name.is_empty() {
        "component".into()
    } else {
        name
    }
}
