//! Opening a capsule's harness at launch: the bridge first (the session's proxy must
//! know its port), then, once the sandbox is armed, the driver's description, the
//! program and what it is made of, its home, and its version, read by running it
//! confined.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::component::ProcessDriver;
use super::process::{self, Line};
use super::{Harness, Settings, bridge};
use crate::confine::{Installation, Jail};
use crate::error::Error;
use crate::manifest::Manifest;

/// How long the harness has to print its version.
const VERSION_WITHIN: Duration = Duration::from_secs(20);

/// The bridge to the capsule's tools, listening.
///
/// # Errors
///
/// `E-RUN-072`: no loopback port could be had.
pub async fn bridge(tools: &crate::tools::Tools) -> Result<bridge::Bridge, Error> {
    let offered = offered(tools);
    let token = crate::ids::token();
    crate::secret::set(&token);
    bridge::Bridge::start(token, offered).await.map_err(|e| {
        Error::new(
            "E-RUN-072",
            format!("the bridge to the capsule's tools could not listen on 127.0.0.1: {e}"),
        )
    })
}

/// The capsule's tools as the bridge offers them.
pub fn offered(tools: &crate::tools::Tools) -> Vec<bridge::Offered> {
    tools
        .typed_specs()
        .iter()
        .map(|spec| bridge::Offered {
            name: spec.name.clone(),
            description: spec.description.clone(),
            input_schema: spec.input_schema.clone(),
        })
        .collect()
}

/// What `open` needs of the session.
pub struct Place<'a> {
    pub jail: Arc<Jail>,
    pub base_env: Vec<(String, String)>,
    pub logs_dir: PathBuf,
    pub conversations_dir: PathBuf,
    pub records: Arc<crate::records::Budget>,
    /// The host's records of every session: the default home is named after them.
    pub records_root: &'a Path,
}

/// # Errors
///
/// The driver cannot describe itself (`E-RUN-073`), the program is not found
/// (`E-RUN-071`), or the home cannot be made (`E-RUN-070`).
pub async fn open(
    m: &Manifest,
    driver: ProcessDriver,
    bridge: bridge::Bridge,
    place: Place<'_>,
) -> Result<Harness, Error> {
    let description = driver.describe().await.map_err(|why| {
        Error::new(
            "E-RUN-073",
            format!("{} cannot describe itself: {why}", driver.label),
        )
        .hint("a process driver's describe must return without trapping")
    })?;
    if !description.key_env.is_empty() && super::reserved_env(&description.key_env) {
        return Err(Error::new(
            "E-RUN-073",
            format!(
                "{} names '{}' as the variable of the model key, which the host sets itself",
                driver.label,
                crate::escape::cut(&description.key_env, 64)
            ),
        )
        .hint("a process driver's key-env must be a variable of its harness's own"));
    }
    let host_path = place
        .base_env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map_or("/usr/local/bin:/usr/bin:/bin", |(_, v)| v.as_str());
    let (program, installation) = super::program(
        &place.jail,
        m.inference.command.as_deref(),
        &description.binary,
        host_path,
        &driver.label,
    )?;
    let home = super::home(
        m.inference.home.as_deref(),
        &default_home(m, place.records_root),
    )?;
    if let Some(key) = &m.inference.api_key {
        crate::secret::set(key);
    }
    let version = version(
        &place.jail,
        &program,
        &description.version_args,
        (&installation, &home),
        &place,
    )
    .await;
    let sessions = super::sessions::Sessions::new(
        place.conversations_dir.join("harness"),
        &description.harness,
        place.records.clone(),
    );
    Ok(Harness {
        settings: Settings {
            model: m.inference.model.clone(),
            endpoint: m.inference.endpoint.clone(),
            system_prompt: m.inference.system_prompt.clone(),
            config: driver_config(m),
            api_key: m.inference.api_key.clone(),
            max_turns: m.inference.max_turns,
            max_tokens: m.inference.max_tokens,
        },
        driver,
        description,
        program,
        installation,
        home,
        version,
        bridge,
        sessions,
        jail: place.jail,
        base_env: place.base_env,
        logs_dir: place.logs_dir,
        warned: std::sync::atomic::AtomicBool::new(false),
    })
}

/// `$MURMUR_HOME/harness/<capsule>-<hash of its records>`: the capsule's own, kept
/// across its sessions (where the harness keeps the sessions threaded contexts resume),
/// out of the workdir and of the records the sandbox never lets a program reach.
fn default_home(m: &Manifest, records_root: &Path) -> PathBuf {
    let digest = Sha256::digest(records_root.to_string_lossy().as_bytes());
    let hash: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    let name = crate::guest_log::file_part(&m.name);
    crate::workdir::murmur_home()
        .join("harness")
        .join(format!("{name}-{hash}"))
}

fn driver_config(m: &Manifest) -> String {
    match &m.inference.driver {
        crate::manifest::DriverRef::Artifact { config, .. } => config.to_string(),
        crate::manifest::DriverRef::Builtin { .. } => "{}".into(),
    }
}

/// The first line the harness prints for its version arguments, confined as it runs;
/// `None` when it prints none in time.
async fn version(
    jail: &Arc<Jail>,
    program: &Path,
    args: &[String],
    (installation, home): (&Installation, &Path),
    place: &Place<'_>,
) -> Option<String> {
    let mut installation = installation.clone();
    installation.state = Some(home.to_path_buf());
    let mut env = jail.server_environment(&place.base_env, home, &installation);
    env.retain(|(k, _)| k != "HOME");
    env.push(("HOME".into(), home.to_string_lossy().into_owned()));
    let program = program.to_string_lossy();
    let start = process::Start {
        program: &program,
        args,
        env: &env,
        cwd: home,
        installation: &installation,
        stdin: None,
        keep_stdin_open: false,
        log: crate::guest_log::Target {
            label: "harness".into(),
            path: place.logs_dir.join("harness.log"),
        },
    };
    let mut running = process::start(jail, start).await.ok()?;
    let first = tokio::time::timeout(VERSION_WITHIN, async {
        while let Some(line) = running.lines.recv().await {
            if let Line::Text(text) = line
                && !text.trim().is_empty()
            {
                return Some(text);
            }
        }
        None
    })
    .await
    .ok()
    .flatten();
    let _ = running.exit(Duration::from_secs(2)).await;
    first.map(|text| crate::escape::cut(text.trim(), 200).into_owned())
}
