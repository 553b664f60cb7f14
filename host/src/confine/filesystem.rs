//! The Landlock ruleset: a command reads and writes its workdir, reads and executes the
//! system directories, reads the parts of `/etc` every user of the machine may read,
//! and reaches nothing else: not the user's home, not the records, not `/tmp`, not
//! other sessions. Landlock denies by default, so the rules list only what is allowed.

use std::os::fd::OwnedFd;
use std::path::Path;

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

/// Builds the ruleset once; each command's child restricts itself with it.
pub fn ruleset(kernel: &Kernel, rules: &Rules<'_>) -> Result<OwnedFd, Error> {
    let abi = ABI::from(kernel.landlock_abi);
    let created = build(abi, rules).map_err(|e| {
        Error::new(
            "E-CAP-014",
            format!("the Landlock ruleset for shell commands could not be built: {e}"),
        )
        .hint("check that the workdir and /usr exist and are readable")
    })?;
    Option::<OwnedFd>::from(created).ok_or_else(|| {
        Error::new(
            "E-CAP-010",
            "Landlock refused the ruleset for shell commands (no ruleset was created)",
        )
        .hint("declare 'capabilities.containment: advisory' to run shell commands unconfined")
    })
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
    for path in super::etc::config_rules() {
        let access = if path.is_dir() {
            read
        } else {
            BitFlags::from(AccessFs::ReadFile)
        };
        ruleset = ruleset
            .add_rule(beneath(&path, access)?)
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
    let Ok(dir) = dir.canonicalize() else {
        return false;
    };
    SYSTEM_DIRS.iter().any(|root| {
        Path::new(root)
            .canonicalize()
            .is_ok_and(|root| dir.starts_with(root))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_system_directories_are_executable_path_entries() {
        assert!(executable_dir(Path::new("/usr/bin")));
        assert!(!executable_dir(Path::new("/root/.cargo/bin")));
        assert!(!executable_dir(Path::new("/tmp")));
        assert!(!executable_dir(Path::new("/no/such/dir")));
    }
}
