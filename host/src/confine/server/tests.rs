//! Servers in the sandbox: their pipes, what they may read, run and write, and that they
//! end with everything they started. Where this kernel cannot back a class, the tests
//! that need it print why and return.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::super::{Class, Jail, Limits, Network, ShellPolicy, spawn};
use super::Installation;

/// A test's folders, removed when it ends: the workdir, an installation, a folder
/// outside both, and the sealed root's scratch.
struct Dirs {
    root: PathBuf,
    workdir: PathBuf,
    install: PathBuf,
    outside: PathBuf,
    scratch: PathBuf,
}

impl Drop for Dirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn dirs() -> Dirs {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let root = std::env::temp_dir().join(format!("mur-server-test-{}-{seq}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for sub in ["work", "install", "outside", "scratch"] {
        std::fs::create_dir_all(root.join(sub)).unwrap();
    }
    let root = root.canonicalize().unwrap();
    Dirs {
        workdir: root.join("work"),
        install: root.join("install"),
        outside: root.join("outside"),
        scratch: root.join("scratch"),
        root,
    }
}

fn limits() -> Limits {
    Limits {
        memory_bytes: 4 << 30,
        cpu_seconds: 60,
        file_bytes: 1 << 30,
        open_files: 1024,
        processes: 64,
        commands: 8,
        nice: 0,
    }
}

/// The sandbox of `class`, armed; `None` (and why, printed) where this kernel cannot
/// back it.
fn armed(class: Class, dirs: &Dirs) -> Option<Arc<Jail>> {
    let policy = ShellPolicy {
        declared: class,
        raised: None,
        network: Network::None,
        workdir_exec: false,
        limits: limits(),
    };
    match Jail::plan(&policy, &dirs.workdir).and_then(|jail| jail.arm(&dirs.scratch, None)) {
        Ok(jail) => Some(Arc::new(jail)),
        Err(e) => {
            eprintln!("skipped: this kernel cannot confine shell commands:\n{e}");
            None
        }
    }
}

fn host_path() -> String {
    std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_string())
}

fn installation(dirs: &Dirs) -> Installation {
    Installation {
        paths: vec![dirs.install.clone()],
        state: None,
        own_proc: false,
    }
}

/// Starts `program args` as a server of `jail`, in the workdir.
async fn serve(
    jail: &Arc<Jail>,
    dirs: &Dirs,
    program: &str,
    args: &[String],
    installation: &Installation,
) -> (spawn::Served, super::Confined) {
    let base = [("PATH".to_string(), host_path())];
    let env = jail.server_environment(&base, &dirs.workdir.join("home"), installation);
    let req = spawn::Request {
        program,
        args,
        env: &env,
        cwd: &dirs.workdir,
    };
    match jail.spawn_server(&req, installation).await {
        Ok(served) => served,
        Err(e) => panic!("the server did not start: {e}"),
    }
}

/// Runs `script` under `/bin/sh` as a server with nothing on its stdin; what it wrote to
/// stdout and stderr.
async fn script(
    jail: &Arc<Jail>,
    dirs: &Dirs,
    script: &str,
    installation: &Installation,
) -> (String, String) {
    let args = ["-c".to_string(), script.to_string()];
    let (served, _confined) = serve(jail, dirs, "/bin/sh", &args, installation).await;
    let spawn::Served {
        mut process,
        stdin,
        mut stdout,
        mut stderr,
    } = served;
    drop(stdin);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let read = async {
        let (o, e) = tokio::join!(stdout.read_to_end(&mut out), stderr.read_to_end(&mut err));
        o.and(e)
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("the script ended in time")
        .unwrap();
    process.wait().await.unwrap();
    (
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    )
}

fn executable_file(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Sends each line to a `cat` server and reads it back, then closes its stdin.
async fn round_trip(jail: &Arc<Jail>, dirs: &Dirs) {
    let cat = jail
        .resolve_command("cat", &host_path(), &Installation::default())
        .unwrap();
    let cat = cat.to_string_lossy().into_owned();
    let (served, _confined) = serve(jail, dirs, &cat, &[], &Installation::default()).await;
    let spawn::Served {
        mut process,
        mut stdin,
        stdout,
        stderr: _,
    } = served;
    let mut lines = BufReader::new(stdout).lines();
    for line in [r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, "two"] {
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        let echoed = tokio::time::timeout(Duration::from_secs(10), lines.next_line()).await;
        assert_eq!(echoed.unwrap().unwrap().as_deref(), Some(line));
    }
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(10), process.wait()).await;
    assert!(
        status.unwrap().unwrap().success(),
        "cat ends with its input"
    );
}

#[tokio::test]
async fn a_confined_server_answers_line_by_line_through_its_pipes() {
    let dirs = dirs();
    let Some(jail) = armed(Class::Scoped, &dirs) else {
        return;
    };
    round_trip(&jail, &dirs).await;
}

#[tokio::test]
async fn an_advisory_server_answers_through_its_pipes_too() {
    let dirs = dirs();
    let jail = Arc::new(Jail::advisory(&dirs.workdir));
    round_trip(&jail, &dirs).await;
}

/// A file outside the workdir and the installation is refused; the installation is
/// read and run, never written; and without it, not run either.
async fn reach(class: Class, refused: &str) {
    let dirs = dirs();
    let Some(jail) = armed(class, &dirs) else {
        return;
    };
    std::fs::write(dirs.outside.join("secret.txt"), "the user's secret\n").unwrap();
    std::fs::write(dirs.install.join("data.txt"), "installed data\n").unwrap();
    executable_file(
        &dirs.install.join("tool.sh"),
        "#!/bin/sh\necho ran from install\n",
    );
    let (install, outside) = (dirs.install.display(), dirs.outside.display());
    let text = format!(
        "cat {outside}/secret.txt; {install}/tool.sh; cat {install}/data.txt; \
         echo planted > {install}/planted.txt; echo \"write=$?\""
    );
    let (out, err) = script(&jail, &dirs, &text, &installation(&dirs)).await;
    assert!(!out.contains("the user's secret"), "{out}");
    assert!(
        err.contains(&format!("{outside}/secret.txt: {refused}")),
        "{err}"
    );
    assert!(
        out.contains("ran from install\ninstalled data\n"),
        "{out}\n{err}"
    );
    assert!(!out.contains("write=0"), "{out}");
    assert!(!dirs.install.join("planted.txt").exists());

    let (out, err) = script(
        &jail,
        &dirs,
        &format!("{install}/tool.sh"),
        &Installation::default(),
    )
    .await;
    assert!(!out.contains("ran from install"), "{out}");
    assert!(err.contains("tool.sh"), "{err}");
}

#[tokio::test]
async fn a_scoped_server_reads_and_runs_its_installation_and_nothing_else() {
    reach(Class::Scoped, "Permission denied").await;
}

#[tokio::test]
async fn a_sealed_server_has_its_installation_in_its_root_and_nothing_else() {
    reach(Class::Sealed, "No such file or directory").await;
}

/// Whether no live process has `marker` in its command line (a zombie runs nothing).
fn none_running(marker: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    !entries.flatten().any(|entry| {
        let path = entry.path();
        let runs = std::fs::read(path.join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker));
        let zombie = std::fs::read_to_string(path.join("stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        });
        runs && !zombie
    })
}

async fn ends_with_its_children(jail: &Arc<Jail>, dirs: &Dirs) {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    // A sleep no other test starts: its length names it.
    let marker = format!(
        "{}.{}",
        300 + SEQ.fetch_add(1, Ordering::Relaxed),
        std::process::id()
    );
    let text = format!("sleep {marker} & sleep {marker} & echo started; wait");
    let args = ["-c".to_string(), text];
    let (served, confined) = serve(jail, dirs, "/bin/sh", &args, &Installation::default()).await;
    let mut lines = BufReader::new(served.stdout).lines();
    let first = tokio::time::timeout(Duration::from_secs(10), lines.next_line()).await;
    assert_eq!(first.unwrap().unwrap().as_deref(), Some("started"));
    assert!(!none_running(&marker), "the children run");
    drop(served.process);
    drop(confined);
    for _ in 0..50 {
        if none_running(&marker) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the server's children outlived it");
}

#[tokio::test]
async fn dropping_a_confined_server_ends_what_it_started() {
    let dirs = dirs();
    let Some(jail) = armed(Class::Scoped, &dirs) else {
        return;
    };
    ends_with_its_children(&jail, &dirs).await;
}

#[tokio::test]
async fn dropping_an_advisory_server_ends_its_group() {
    let dirs = dirs();
    let jail = Arc::new(Jail::advisory(&dirs.workdir));
    ends_with_its_children(&jail, &dirs).await;
}

#[test]
fn unusable_installation_paths_are_refused_by_name() {
    let dirs = dirs();
    let records = dirs.root.join("records");
    std::fs::create_dir_all(records.join("s1")).unwrap();
    std::fs::create_dir_all(dirs.workdir.join("bin")).unwrap();
    let jail = Jail::advisory(&dirs.workdir).keep_out(&records);
    let refusal = |path: &Path| {
        let installation = Installation {
            paths: vec![path.to_path_buf()],
            state: None,
            own_proc: false,
        };
        match jail.installed(&installation) {
            Ok(installed) => panic!("{} was taken: {installed:?}", path.display()),
            Err(e) => e,
        }
    };
    let (work, shown) = (&dirs.workdir, dirs.workdir.display());
    let cases: Vec<(PathBuf, String)> = vec![
        ("node_modules".into(), "is not absolute".into()),
        (
            dirs.root.join("gone"),
            "cannot be used: No such file or directory (os error 2)".into(),
        ),
        (
            "/".into(),
            "is the root directory, which would let the server read everything".into(),
        ),
        (
            work.clone(),
            format!(
                "is or holds the workdir ({shown}), which a server reaches as its workdir only"
            ),
        ),
        (
            dirs.root.clone(),
            format!(
                "is or holds the workdir ({shown}), which a server reaches as its workdir only"
            ),
        ),
        (
            work.join("bin"),
            format!(
                "lies inside the workdir ({shown}), where the capsule writes: what it wrote \
                 must not become executable"
            ),
        ),
        (
            records.join("s1"),
            format!(
                "reaches the host's records ({}), which no guest may read",
                records.display()
            ),
        ),
        (
            "/proc/self/environ".into(),
            "lies in /proc, a kernel view of the host".into(),
        ),
    ];
    for (path, why) in cases {
        assert_eq!(
            refusal(&path),
            format!("the server's installation path {} {why}", path.display())
        );
    }
    let taken = jail.installed(&installation(&dirs)).unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(
        (taken[0].path.as_path(), taken[0].dir),
        (dirs.install.as_path(), true)
    );
}

#[test]
fn a_command_is_found_on_the_servers_path_or_in_its_installation() {
    let dirs = dirs();
    let jail = Jail::advisory(&dirs.workdir);
    let none = Installation::default();
    let sh = jail.resolve_command("sh", "/usr/bin:/bin", &none).unwrap();
    assert!(sh.is_absolute() && sh.ends_with("sh"), "{}", sh.display());

    executable_file(&dirs.install.join("mcp-tool"), "#!/bin/sh\n");
    let found = jail
        .resolve_command("mcp-tool", "/usr/bin:/bin", &installation(&dirs))
        .unwrap();
    assert_eq!(found, dirs.install.join("mcp-tool"));
    // Found through a link, it is named by its real path: what the sandbox grants.
    std::os::unix::fs::symlink(dirs.install.join("mcp-tool"), dirs.outside.join("linked")).unwrap();
    let linked = dirs.outside.join("linked");
    let found = jail.resolve_command(&linked.to_string_lossy(), "", &none);
    assert_eq!(found.unwrap(), dirs.install.join("mcp-tool"));

    let e = jail
        .resolve_command("mcp-tool", "/usr/bin:/bin", &none)
        .unwrap_err();
    assert_eq!(
        e,
        "the server's command 'mcp-tool' was not found on the PATH it gets (/usr/bin:/bin) nor \
         in its installation's folders; name it by its absolute path, or list its folder under \
         install"
    );
    let e = jail
        .resolve_command("bin/tool", "/usr/bin", &none)
        .unwrap_err();
    assert!(e.contains("'bin/tool' is a relative path"), "{e}");
    std::fs::write(dirs.install.join("plain.txt"), "").unwrap();
    let plain = dirs.install.join("plain.txt");
    let e = jail
        .resolve_command(&plain.to_string_lossy(), "", &none)
        .unwrap_err();
    assert_eq!(
        e,
        format!("the server's command {} is not executable", plain.display())
    );
    let e = jail
        .resolve_command("/no/such/server", "", &none)
        .unwrap_err();
    assert_eq!(e, "the server's command /no/such/server does not exist");
    assert_eq!(
        jail.resolve_command("", "", &none).unwrap_err(),
        "the server's command is empty"
    );
}

#[test]
fn a_confined_servers_path_ends_with_its_installation() {
    let dirs = dirs();
    let Some(jail) = armed(Class::Scoped, &dirs) else {
        return;
    };
    let base = [("PATH".to_string(), "/usr/bin:/bin".to_string())];
    let env = jail.server_environment(&base, &dirs.workdir, &installation(&dirs));
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str());
    assert_eq!(
        path,
        Some(format!("{}:{}", jail.path("/usr/bin:/bin"), dirs.install.display()).as_str())
    );
}
