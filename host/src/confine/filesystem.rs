//! The Landlock ruleset: a command reads and writes its workdir, reads and executes the
//! system directories, reads the parts of `/etc` every user of the machine may read,
//! and reaches nothing else: not the user's home, not the records, not `/tmp`, not
//! other sessions. Landlock denies by default, so the rules list only what is allowed.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath,
    PathFd, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope,
};

use crate::error::Error;

use super::Kernel;

/// Directories a command reads and executes from.
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];
/// Devices a command may read and write.
pub const DEVICES_RW: &[&str] = &["/dev/null", "/dev/zero", "/dev/full"];
/// Devices a command may only read.
pub const DEVICES_RO: &[&str] = &["/dev/urandom", "/dev/random"];
/// Read, but entry by entry: a secret there (`shadow`, `sudoers`, host keys) is left out.
pub const CONFIG_DIR: &str = "/etc";

/// What the ruleset allows besides the fixed system parts.
pub struct Rules<'a> {
    pub workdir: &'a Path,
    pub workdir_exec: bool,
    /// Under `network: proxy`, the one TCP port a command may connect to.
    pub proxy_port: Option<u16>,
}

/// One place a server is made of, checked (see `server`): canonical, existing, and
/// clear of the workdir and the records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub path: PathBuf,
    /// A folder (everything beneath it), or one file.
    pub dir: bool,
    /// A folder the server keeps its own state in (a harness's home): read and write,
    /// never execute.
    pub writable: bool,
}

/// Builds the ruleset once; each command's child restricts itself with it. The fixed
/// part (the workdir, the system directories, the devices, the proxy's port) is built
/// now, so a ruleset the kernel refuses stops the launch. The readable parts of `/etc`
/// wait for the walk, and no command needs them before the first one starts: they are
/// added on a thread of their own while the session opens, and [`Pending`] says when
/// they are in.
pub fn ruleset(kernel: &Kernel, rules: &Rules<'_>) -> Result<(OwnedFd, Pending), Error> {
    let abi = ABI::from(kernel.landlock_abi);
    let refused = |e: String| {
        Error::new(
            "E-CAP-014",
            format!("the Landlock ruleset for shell commands could not be built: {e}"),
        )
        .hint("check that the workdir and /usr exist and are readable")
    };
    let created = build(abi, rules).map_err(refused)?;
    // The same ruleset, through a second descriptor: the thread adds to it.
    let rest = created.try_clone().map_err(|e| refused(e.to_string()))?;
    let fd = Option::<OwnedFd>::from(created).ok_or_else(|| {
        Error::new(
            "E-CAP-010",
            "Landlock refused the ruleset for shell commands (no ruleset was created)",
        )
        .hint("declare 'capabilities.containment: advisory' to run shell commands unconfined")
    })?;
    let (done, pending) = tokio::sync::watch::channel(None);
    std::thread::Builder::new()
        .name("mur-etc-rules".into())
        .spawn(move || {
            let _ = done.send(Some(add_config(rest).map(drop)));
        })
        .map_err(|e| refused(format!("its thread could not be started: {e}")))?;
    Ok((fd, Pending(pending)))
}

/// Whether the readable parts of `/etc` are in the ruleset yet.
#[derive(Clone)]
pub struct Pending(tokio::sync::watch::Receiver<Option<Result<(), String>>>);

impl Pending {
    /// Waits until they are in.
    ///
    /// # Errors
    ///
    /// They could not be added: no command may start on a ruleset left half built.
    pub async fn ready(&self) -> Result<(), String> {
        let mut added = self.0.clone();
        match added.wait_for(Option::is_some).await {
            Ok(state) => state.clone().unwrap_or(Ok(())),
            Err(_) => Err("the thread adding them ended without a word".into()),
        }
    }
}

/// A server's ruleset: the session's, and read and execute beneath each of its
/// installation's places, never write. Built whole for each server, since a ruleset
/// cannot grow once a process has restricted itself with it and the session's
/// descriptor is shared by every command. Blocks while `/etc` is walked, when the last
/// walk is stale.
pub fn server_ruleset(
    kernel: &Kernel,
    rules: &Rules<'_>,
    installed: &[Installed],
) -> Result<OwnedFd, String> {
    let abi = ABI::from(kernel.landlock_abi);
    let mut ruleset = build(abi, rules)?;
    let exec = AccessFs::ReadFile | AccessFs::ReadDir | AccessFs::Execute;
    let state = workdir_access(abi, false);
    for place in installed {
        // A right meant for folders on a file is refused by the kernel.
        let access = if place.writable {
            state
        } else if place.dir {
            exec
        } else {
            exec & AccessFs::from_file(abi)
        };
        ruleset = ruleset
            .add_rule(beneath(&place.path, access)?)
            .map_err(|e| e.to_string())?;
    }
    let ruleset = add_config(ruleset)?;
    Option::<OwnedFd>::from(ruleset)
        .ok_or_else(|| "Landlock refused the ruleset (no ruleset was created)".to_string())
}

/// Adds what everyone may read in `/etc`. A path that cannot be opened any more (gone
/// since the walk) is left out: leaving a rule out only narrows.
fn add_config(mut ruleset: RulesetCreated) -> Result<RulesetCreated, String> {
    let read = AccessFs::ReadFile | AccessFs::ReadDir;
    for rule in super::etc::config_rules().iter() {
        let access = if rule.dir {
            read
        } else {
            BitFlags::from(AccessFs::ReadFile)
        };
        let Ok(fd) = PathFd::new(&rule.path) else {
            continue;
        };
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| e.to_string())?;
    }
    Ok(ruleset)
}

fn build(abi: ABI, rules: &Rules<'_>) -> Result<RulesetCreated, String> {
    let read = AccessFs::ReadFile | AccessFs::ReadDir;
    let exec = read | AccessFs::Execute;
    let mut ruleset = Ruleset::default()
        // Nothing may be quietly weaker than asked: an unsupported right is an error.
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .and_then(|r| r.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp))
        .and_then(|r| r.scope(Scope::AbstractUnixSocket | Scope::Signal))
        .and_then(Ruleset::create)
        .map_err(|e| e.to_string())?;
    ruleset = ruleset
        .add_rule(beneath(
            rules.workdir,
            workdir_access(abi, rules.workdir_exec),
        )?)
        .map_err(|e| e.to_string())?;
    for dir in SYSTEM_DIRS.iter().map(Path::new).filter(|d| d.exists()) {
        ruleset = ruleset
            .add_rule(beneath(dir, exec)?)
            .map_err(|e| e.to_string())?;
    }
    let devices = DEVICES_RW
        .iter()
        .map(|d| (d, read | AccessFs::WriteFile))
        .chain(
            DEVICES_RO
                .iter()
                .map(|d| (d, BitFlags::from(AccessFs::ReadFile))),
        );
    for (device, access) in devices.filter(|(d, _)| Path::new(d).exists()) {
        ruleset = ruleset
            .add_rule(beneath(
                Path::new(device),
                access & AccessFs::from_file(abi),
            )?)
            .map_err(|e| e.to_string())?;
    }
    if let Some(port) = rules.proxy_port {
        ruleset = ruleset
            .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
            .map_err(|e| e.to_string())?;
    }
    Ok(ruleset)
}

/// Everything in the workdir but device nodes, and execution only when asked.
fn workdir_access(abi: ABI, exec: bool) -> BitFlags<AccessFs> {
    let mut access = AccessFs::from_all(abi) & !(AccessFs::MakeChar | AccessFs::MakeBlock);
    if !exec {
        access &= !AccessFs::Execute;
    }
    access
}

fn beneath(path: &Path, access: BitFlags<AccessFs>) -> Result<PathBeneath<PathFd>, String> {
    let fd = PathFd::new(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(PathBeneath::new(fd, access))
}

/// Whether a command can execute programs found in `dir` (a PATH entry).
pub fn executable_dir(dir: &Path) -> bool {
    // Asked for each PATH entry of every command: the system directories are resolved
    // once per process.
    static ROOTS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    let roots = ROOTS.get_or_init(|| {
        SYSTEM_DIRS
            .iter()
            .filter_map(|root| Path::new(root).canonicalize().ok())
            .collect()
    });
    dir.canonicalize()
        .is_ok_and(|dir| roots.iter().any(|root| dir.starts_with(root)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_command_waits_for_the_rules_of_etc_and_is_refused_without_them() {
        let (done, added) = tokio::sync::watch::channel(None);
        let pending = Pending(added);
        let waiting = tokio::spawn({
            let pending = pending.clone();
            async move { pending.ready().await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(
            !waiting.is_finished(),
            "it waits while they are being added"
        );
        done.send(Some(Ok(()))).unwrap();
        assert_eq!(waiting.await.unwrap(), Ok(()));
        assert_eq!(pending.ready().await, Ok(()), "and again without waiting");

        let (done, added) = tokio::sync::watch::channel(None);
        done.send(Some(Err("EINVAL".into()))).unwrap();
        assert_eq!(Pending(added).ready().await, Err("EINVAL".into()));
        let (done, added) = tokio::sync::watch::channel(None);
        drop(done);
        assert!(
            Pending(added).ready().await.is_err(),
            "a thread gone without a word"
        );
    }

    #[test]
    fn only_system_directories_are_executable_path_entries() {
        assert!(executable_dir(Path::new("/usr/bin")));
        assert!(!executable_dir(Path::new("/root/.cargo/bin")));
        assert!(!executable_dir(Path::new("/tmp")));
        assert!(!executable_dir(Path::new("/no/such/dir")));
    }
}
