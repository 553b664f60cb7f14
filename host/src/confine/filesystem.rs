//! The Landlock ruleset: a command reads and writes its workdir, reads and executes the
//! system directories, reads the parts of `/etc` every user of the machine may read,
//! and reaches nothing else: not the user's home, not the records, not `/tmp`, not
//! other sessions. Landlock denies by default, so the rules list only what is allowed.

use std::collections::BTreeSet;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

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
/// Where a link in `/etc` may lead without its target being allowed: kernel views of
/// the host (`/etc/mtab -> /proc/self/mounts`) and devices.
const NEVER_LINKED: &[&str] = &["/proc", "/sys", "/dev"];

/// How deep the `/etc` walk goes to find a directory wholly readable by everyone; past
/// it, a directory that hides something is left out whole.
const MAX_CONFIG_DEPTH: usize = 4;
/// The walk stops adding rules past this many; a larger `/etc` is left out beyond it.
const MAX_CONFIG_RULES: usize = 4096;

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
    for path in config_rules() {
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

/// The parts of `dir` everyone may read: a wholly readable directory as one entry, and
/// below one that hides something, its readable entries one by one. A symbolic link
/// needs no rule of its own, since Landlock checks the file it leads to: one into the
/// system directories is readable through them, and one to a secret is not. Only a
/// link to a readable file outside every allowed place (`resolv.conf -> /run/...`) adds
/// that file.
/// [`readable_config`] of `/etc`, walked at most once per [`CONFIG_FRESH`]: a server
/// that starts a hundred sessions a second walks it once, and a change to `/etc` reaches
/// the sessions started after that long.
fn config_rules() -> Vec<PathBuf> {
    static WALKED: Mutex<Option<(Instant, Vec<PathBuf>)>> = Mutex::new(None);
    let mut walked = WALKED.lock().unwrap_or_else(PoisonError::into_inner);
    match &*walked {
        Some((at, rules)) if at.elapsed() < CONFIG_FRESH => rules.clone(),
        _ => {
            let rules = readable_config(Path::new(CONFIG_DIR));
            *walked = Some((Instant::now(), rules.clone()));
            rules
        }
    }
}

/// Starts [`config_rules`] on a thread of its own, so that the walk of `/etc` (a
/// thousand entries and more on a desktop) overlaps with loading the components instead
/// of adding to the launch: the ruleset, built once the workdir exists, waits for it at
/// most.
pub fn walk_config_ahead() {
    let _ = std::thread::Builder::new()
        .name("mur-etc-walk".into())
        .spawn(|| drop(config_rules()));
}

/// How long a walk of `/etc` stands for the sessions that start after it.
const CONFIG_FRESH: Duration = Duration::from_secs(30);

pub fn readable_config(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    collect_readable(dir, 0, &mut found);
    let mut outside = BTreeSet::new();
    outside_link_targets(dir, 0, &mut outside);
    found.extend(outside);
    found
}

fn collect_readable(dir: &Path, depth: usize, found: &mut Vec<PathBuf>) {
    if wholly_readable(dir, depth) {
        found.push(dir.to_path_buf());
        return;
    }
    for (path, meta) in sorted_entries(dir) {
        if found.len() >= MAX_CONFIG_RULES {
            return;
        }
        if meta.is_dir() && world_enterable(&meta) && depth < MAX_CONFIG_DEPTH {
            collect_readable(&path, depth + 1, found);
        } else if meta.is_file() && world_readable(&meta) {
            found.push(path);
        }
    }
}

/// `dir`'s entries, sorted, with their own metadata (a link as the link).
fn sorted_entries(dir: &Path) -> Vec<(PathBuf, std::fs::Metadata)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut entries: Vec<(PathBuf, std::fs::Metadata)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let path = e.path();
            std::fs::symlink_metadata(&path).ok().map(|m| (path, m))
        })
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    entries
}

/// A directory whose whole tree everyone may read (links aside, as above).
fn wholly_readable(dir: &Path, depth: usize) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return false;
    };
    if !meta.is_dir() || !world_enterable(&meta) || depth > MAX_CONFIG_DEPTH {
        return false;
    }
    sorted_entries(dir).iter().all(|(path, meta)| {
        if meta.file_type().is_symlink() {
            true
        } else if meta.is_dir() {
            wholly_readable(path, depth + 1)
        } else {
            world_readable(meta)
        }
    })
}

/// Readable files outside the allowed places that links under `dir` lead to.
fn outside_link_targets(dir: &Path, depth: usize, out: &mut BTreeSet<PathBuf>) {
    for (path, meta) in sorted_entries(dir) {
        if out.len() >= MAX_CONFIG_RULES {
            return;
        }
        if meta.file_type().is_symlink() {
            if let Some(target) = outside_target(&path) {
                out.insert(target);
            }
        } else if meta.is_dir() && world_enterable(&meta) && depth < MAX_CONFIG_DEPTH {
            outside_link_targets(&path, depth + 1, out);
        }
    }
}

fn outside_target(link: &Path) -> Option<PathBuf> {
    let target = link.canonicalize().ok()?;
    let allowed = SYSTEM_DIRS
        .iter()
        .chain(&[CONFIG_DIR])
        .chain(NEVER_LINKED)
        .any(|root| target.starts_with(root));
    let meta = std::fs::metadata(&target).ok()?;
    (!allowed && meta.is_file() && world_readable(&meta) && reachable_by_all(&target))
        .then_some(target)
}

/// Every folder on the way lets anyone through.
fn reachable_by_all(path: &Path) -> bool {
    path.ancestors()
        .skip(1)
        .all(|dir| std::fs::metadata(dir).is_ok_and(|m| m.mode() & 0o001 != 0))
}

fn world_readable(meta: &std::fs::Metadata) -> bool {
    meta.permissions().mode() & 0o004 != 0
}

fn world_enterable(meta: &std::fs::Metadata) -> bool {
    meta.mode() & 0o005 == 0o005
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mur-fs-rules-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn mode(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_wholly_readable_tree_is_one_rule() {
        let dir = scratch("whole");
        std::fs::create_dir(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/a"), "a").unwrap();
        mode(&dir.join("sub/a"), 0o644);
        mode(&dir, 0o755);
        assert_eq!(readable_config(&dir), vec![dir.clone()]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_secret_file_is_left_out_and_its_neighbours_kept() {
        let dir = scratch("secret");
        std::fs::write(dir.join("passwd"), "p").unwrap();
        std::fs::write(dir.join("shadow"), "s").unwrap();
        std::fs::create_dir(dir.join("ssh")).unwrap();
        std::fs::write(dir.join("ssh/host_key"), "k").unwrap();
        std::fs::write(dir.join("ssh/host_key.pub"), "k").unwrap();
        std::fs::create_dir(dir.join("private")).unwrap();
        mode(&dir, 0o755);
        mode(&dir.join("passwd"), 0o644);
        mode(&dir.join("shadow"), 0o640);
        mode(&dir.join("ssh"), 0o755);
        mode(&dir.join("ssh/host_key"), 0o600);
        mode(&dir.join("ssh/host_key.pub"), 0o644);
        mode(&dir.join("private"), 0o700);
        assert_eq!(
            readable_config(&dir),
            vec![dir.join("passwd"), dir.join("ssh/host_key.pub")]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_link_to_a_secret_or_the_host_s_proc_adds_nothing() {
        let dir = scratch("links");
        std::fs::write(dir.join("hidden"), "h").unwrap();
        mode(&dir.join("hidden"), 0o600);
        symlink("/proc/self/mounts", dir.join("mtab")).unwrap();
        symlink(dir.join("nowhere"), dir.join("dangling")).unwrap();
        mode(&dir, 0o755);
        // Neither link leads to a readable file anywhere a rule could add.
        assert_eq!(readable_config(&dir), Vec::<PathBuf>::new());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn links_keep_a_tree_whole_and_only_outside_targets_are_added() {
        let dir = scratch("whole-links");
        let outside = scratch("outside-target");
        std::fs::write(outside.join("resolv.conf"), "nameserver 127.0.0.1\n").unwrap();
        mode(&outside.join("resolv.conf"), 0o644);
        mode(&outside, 0o755);
        symlink("/usr/bin/env", dir.join("env")).unwrap();
        symlink(outside.join("resolv.conf"), dir.join("resolv.conf")).unwrap();
        mode(&dir, 0o755);
        let target = outside.join("resolv.conf").canonicalize().unwrap();
        assert_eq!(readable_config(&dir), vec![dir.clone(), target]);
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&outside).unwrap();
    }

    #[test]
    fn only_system_directories_are_executable_path_entries() {
        assert!(executable_dir(Path::new("/usr/bin")));
        assert!(!executable_dir(Path::new("/root/.cargo/bin")));
        assert!(!executable_dir(Path::new("/tmp")));
        assert!(!executable_dir(Path::new("/no/such/dir")));
    }
}
