//! What an MCP server costs a capsule (`cargo bench -p mur --bench mcp`): one tool call
//! to a stdio server against a WASM tool doing the same trivial work, and the start of a
//! server in the sandbox against the same server started unconfined.
//!
//! - **A call**: one `mur run` session of `CALLS` scripted turns, each calling one tool
//!   (`lifecycle.parallel_tools: 1`), per kind of tool: the WASM component `tool-probe`
//!   (`compute`, one round: parse the input, answer a line), the hostile server of
//!   `tests/mcp/hostile_server.py` in mode `well` (python3) and the official
//!   `server-everything` (node), each MCP server confined (`scoped`) and unconfined
//!   (`advisory`). The trace's stamps are whole milliseconds, so every figure is a mean
//!   over a session's turns: *the call*, from a turn's `inference` line (the model has
//!   answered) to its `tool_call` line (the result is back), over `CALLS` turns; *a
//!   turn*, from the first `tool_call` line to the last over the `CALLS - 1` turns
//!   between. The servers' start and the session's are outside both. Each is set
//!   against the same capsule (the same tools told to the model every turn) calling a
//!   tool it does not have: the turn and the refusal, no tool run. The servers are
//!   given by absolute path (see `system_program`).
//! - **Start to tools listed**: `mur mcp ls --manifest M --json` (the servers started as
//!   a session starts them, listed, ended) on `server-everything` and on the Python
//!   server, under `containment: advisory`, `scoped` and `sealed` in turn, timed from
//!   the spawn to its stderr line saying the sandbox is ready, to the listing's line on
//!   stdout and to its exit; and `mur mcp ls` on a manifest without servers (the process
//!   and the manifest alone).
//!
//! `MUR_BENCH_MCP_PARTS=calls` or `=starts` runs one part only.
//!
//! `server-everything` is installed as the tests install it (`tests/mcp/npm` into
//! `target/mcp/npm`, shared with them); without node and npm, or python3, the figures
//! that need them are skipped with the reason printed. Results are plain lines on stdout.

use std::io::{BufRead, BufReader, Read};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Tool-call turns in one session.
const CALLS: usize = 200;
/// Sessions of each kind of tool.
const SESSIONS: usize = 11;
/// Timed `mur mcp ls` runs of each class.
const LISTINGS: usize = 21;
/// How long `npm install` may take before the figures that need it are skipped.
const INSTALL_LIMIT: Duration = Duration::from_secs(300);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn root() -> PathBuf {
    repo().join("target").join("bench").join("mcp")
}

fn cache() -> PathBuf {
    repo().join("target").join("bench").join("mcp-cache")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn min_max(v: &[f64]) -> (f64, f64) {
    (
        v.iter().copied().fold(f64::MAX, f64::min),
        v.iter().copied().fold(0.0, f64::max),
    )
}

// ---------------------------------------------------------------------------------
// The servers

/// `server-everything`, installed like the tests install it.
struct Everything {
    node: PathBuf,
    node_modules: PathBuf,
    entry: PathBuf,
}

/// Where the system keeps `name`: the first of the system's folders holding it. Both
/// classes are given this absolute path, so that they run the same program: a confined
/// server's PATH keeps only what the sandbox can execute (here python3 on the PATH of
/// the user is pyenv's shim under `/root`, a slower program that it leaves out), an
/// unconfined one's is the user's.
fn system_program(name: &str) -> Result<PathBuf, String> {
    ["/usr/local/bin", "/usr/bin", "/bin"]
        .iter()
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("no {name} in /usr/local/bin, /usr/bin or /bin"))
}

/// `server-everything`, installed on first use into the tests' folder (the same lock
/// and marker); `Err` is the reason to skip.
fn everything() -> Result<Everything, String> {
    let node = system_program("node")?;
    bounded(Command::new(&node).arg("--version"), "node --version")?;
    let home = repo().join("target").join("mcp");
    std::fs::create_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
    let _lock = Lock::take(&home.join("npm.lock"))?;
    let npm = home.join("npm");
    let sources = repo().join("tests/mcp/npm/package.json");
    let manifest =
        std::fs::read_to_string(&sources).map_err(|e| format!("{}: {e}", sources.display()))?;
    let marker = npm.join(".mur-installed");
    if std::fs::read_to_string(&marker).ok().as_deref() != Some(manifest.as_str()) {
        std::fs::create_dir_all(&npm).map_err(|e| format!("{}: {e}", npm.display()))?;
        std::fs::write(npm.join("package.json"), &manifest).map_err(|e| e.to_string())?;
        println!(
            "installing server-everything with npm into {}",
            npm.display()
        );
        bounded(
            Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(&npm),
            "npm install",
        )?;
        std::fs::write(&marker, &manifest).map_err(|e| e.to_string())?;
    }
    let node_modules = npm.join("node_modules");
    let entry = node_modules.join("@modelcontextprotocol/server-everything/dist/index.js");
    if !entry.exists() {
        return Err(format!("{} is missing after npm install", entry.display()));
    }
    Ok(Everything {
        node,
        node_modules,
        entry,
    })
}

/// The hostile server's lines under `mcp_servers:`, or why it cannot run.
fn hostile_server() -> Result<String, String> {
    let python = system_program("python3")?;
    bounded(Command::new(&python).arg("--version"), "python3 --version")?;
    let dir = repo().join("tests/mcp");
    Ok(format!(
        "  hostile:\n    command: {}\n    args: [{}, well]\n    install: [{}]\n",
        Value::from(python.display().to_string()),
        Value::from(dir.join("hostile_server.py").display().to_string()),
        Value::from(dir.display().to_string()),
    ))
}

fn everything_server(e: &Everything) -> String {
    format!(
        "  everything:\n    command: {}\n    args: [{}, stdio]\n    install: [{}]\n",
        Value::from(e.node.display().to_string()),
        Value::from(e.entry.display().to_string()),
        Value::from(e.node_modules.display().to_string()),
    )
}

/// Runs `cmd` to its exit within `INSTALL_LIMIT`; `Err` when it cannot start, fails or
/// hangs.
fn bounded(cmd: &mut Command, what: &str) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("{what}: cannot start: {e}"))?;
    let mut stderr = child.stderr.take().unwrap();
    let said = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + INSTALL_LIMIT;
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            let said = said.join().unwrap_or_default();
            return match status.success() {
                true => Ok(()),
                false => Err(format!("{what} exited {status}: {}", said.trim())),
            };
        }
        if Instant::now() > deadline {
            // SAFETY: kill takes a process group this function started.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            return Err(format!("{what} did not end within {INSTALL_LIMIT:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An exclusive `flock`, as the tests take it before installing; released when dropped.
struct Lock(std::fs::File);

impl Lock {
    fn take(path: &Path) -> Result<Lock, String> {
        let file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        // SAFETY: flock takes a descriptor this function owns, open until the drop.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(format!(
                "{}: {}",
                path.display(),
                std::io::Error::last_os_error()
            ));
        }
        Ok(Lock(file))
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        // SAFETY: as in `take`; the descriptor is still open.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

// ---------------------------------------------------------------------------------
// A call

/// One kind of tool call: the capsule's containment, its extra manifest lines and the
/// call each turn makes.
struct Kind {
    label: String,
    class: &'static str,
    manifest: String,
    tool: &'static str,
    input: &'static str,
    /// The status every `tool_call` line must have.
    status: &'static str,
}

fn capsule(name: &str, kind: &Kind) -> PathBuf {
    let dir = root().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = format!(
        "name: mcp-bench\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  \
         script: ./script.yaml\n  model: bench\n  max_turns: {}\ncapabilities:\n  \
         containment: {}\n  limits:\n    max_tool_calls_per_task: {}\nlifecycle:\n  \
         task_acceptance: none\n  parallel_tools: 1\n{}",
        CALLS + 1,
        kind.class,
        CALLS + 1,
        kind.manifest
    );
    let mut script = String::from("turns:\n");
    for i in 0..CALLS {
        script.push_str(&format!(
            "  - tool_calls: [{{id: c{i}, name: {}, input: {}}}]\n",
            kind.tool, kind.input
        ));
    }
    script.push_str("  - text: done\n");
    std::fs::write(dir.join("murmur.yaml"), manifest).unwrap();
    std::fs::write(dir.join("script.yaml"), script).unwrap();
    dir
}

/// What one session gave, in ms: the mean time a turn took (first to last `tool_call`
/// line, over the `CALLS - 1` turns between) and the mean time from a turn's
/// `inference` line (the model has answered) to its `tool_call` line (the result is
/// back): the call itself. Each stamp is whole ms; the mean of `CALLS` differences of
/// them is not.
#[derive(Clone, Copy)]
struct Sample {
    turn: f64,
    call: f64,
}

/// One session of the capsule in `dir`, after checking that every call had the status
/// `expect`.
fn session(dir: &Path, expect: &str) -> Sample {
    let records = dir.join("records");
    let _ = std::fs::remove_dir_all(&records);
    let _ = std::fs::remove_dir_all(dir.join("workdir"));
    let out = Command::new(env!("CARGO_BIN_EXE_mur"))
        .env("MUR_CACHE_DIR", cache())
        .args(["run", "--port", "0", "--task", "bench", "--records"])
        .arg(&records)
        .arg("--manifest")
        .arg(dir.join("murmur.yaml"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let session = std::fs::read_dir(&records)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("trace.jsonl").exists())
        .unwrap();
    let (mut answered, mut results, mut spent) = (None, Vec::new(), 0);
    for line in std::fs::read_to_string(session.join("trace.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        let at = line["timestamp"].as_u64().unwrap();
        match line["event_type"].as_str() {
            Some("inference") => answered = Some(at),
            Some("tool_call") => {
                assert_eq!(line["status"], expect, "{}: {line}", dir.display());
                spent += at - answered.take().expect("an inference line before each call");
                results.push(at);
            }
            _ => {}
        }
    }
    assert_eq!(results.len(), CALLS, "{}", dir.display());
    Sample {
        turn: (results[CALLS - 1] - results[0]) as f64 / (CALLS - 1) as f64,
        call: spent as f64 / CALLS as f64,
    }
}

fn kinds(everything: Option<&Everything>, hostile: Option<&str>) -> Vec<Kind> {
    let probe = Path::new(env!("MUR_GUEST_DIR")).join("mur_tool_probe.wasm");
    assert!(probe.is_file(), "{} is missing", probe.display());
    let mut kinds = vec![Kind {
        label: "WASM tool-probe (compute, 1 round)".into(),
        class: "scoped",
        manifest: format!(
            "artifacts:\n  - name: probe\n    runtime: tool\n    source: {}\n",
            Value::from(probe.display().to_string())
        ),
        tool: "probe",
        input: "{probe: compute, rounds: 1}",
        status: "ok",
    }];
    for class in ["scoped", "advisory"] {
        if let Some(server) = hostile {
            kinds.push(Kind {
                label: format!("MCP hostile_server.py echo (python3, {class})"),
                class,
                manifest: format!("mcp_servers:\n{server}"),
                tool: "mcp__hostile__echo",
                input: "{message: hello}",
                status: "ok",
            });
        }
        if let Some(e) = everything {
            kinds.push(Kind {
                label: format!("MCP server-everything echo (node, {class})"),
                class,
                manifest: format!("mcp_servers:\n{}", everything_server(e)),
                tool: "mcp__everything__echo",
                input: "{message: hello}",
                status: "ok",
            });
        }
    }
    kinds
}

/// The same capsule calling a tool it does not have: the turn, the refusal, no tool run
/// (the baseline of `kind`, with the same tools declared to the model every turn).
fn refused(kind: &Kind) -> Kind {
    Kind {
        label: String::new(),
        class: kind.class,
        manifest: kind.manifest.clone(),
        tool: "nothing",
        input: "{}",
        status: "error",
    }
}

fn calls(everything: Option<&Everything>, hostile: Option<&str>) {
    let kinds = kinds(everything, hostile);
    let pairs: Vec<[(PathBuf, &'static str); 2]> = kinds
        .iter()
        .enumerate()
        .map(|(i, kind)| {
            let base = refused(kind);
            [
                (capsule(&format!("call-{i}"), kind), kind.status),
                (capsule(&format!("refused-{i}"), &base), base.status),
            ]
        })
        .collect();
    // A warm-up session of each (the component cache, the page cache).
    for (dir, status) in pairs.iter().flatten() {
        session(dir, status);
    }
    let mut samples: Vec<[Vec<Sample>; 2]> = vec![[Vec::new(), Vec::new()]; kinds.len()];
    for _ in 0..SESSIONS {
        for (i, pair) in pairs.iter().enumerate() {
            for (j, (dir, status)) in pair.iter().enumerate() {
                samples[i][j].push(session(dir, status));
            }
        }
    }
    println!(
        "a tool call: {CALLS} calls a session, one a turn, median of {SESSIONS} sessions \
         [min - max] of each session's mean; 'no tool run': the same capsule calling a tool \
         it does not have"
    );
    println!(
        "  (the call: from a turn's inference line to its tool_call line; a turn: first to \
         last tool_call line over {} turns)",
        CALLS - 1
    );
    let mut wasm: Option<(f64, f64)> = None;
    for (kind, [with, without]) in kinds.iter().zip(&samples) {
        let of = |v: &[Sample], f: fn(&Sample) -> f64| v.iter().map(f).collect::<Vec<f64>>();
        let calls = of(with, |s| s.call);
        let (lo, hi) = min_max(&calls);
        let (raw, none) = (median(calls), median(of(without, |s| s.call)));
        let call = raw - none;
        let (turn, bare) = (
            median(of(with, |s| s.turn)),
            median(of(without, |s| s.turn)),
        );
        print!(
            "  {:47} the call {raw:.3} ms [{lo:.3} - {hi:.3}] less {none:.3} = {call:.3} ms; \
             a turn {turn:.3} ms less {bare:.3} = {:.3} ms",
            kind.label,
            turn - bare
        );
        match wasm {
            None => wasm = Some((call, turn - bare)),
            Some((c, t)) => print!(
                "; {:.2}x the WASM call, {:.2}x its added turn",
                call / c,
                (turn - bare) / t
            ),
        }
        println!();
    }
}

// ---------------------------------------------------------------------------------
// Start to tools listed

/// A manifest for `mur mcp ls`: `servers` under `mcp_servers:` (none when empty), in
/// containment `class`.
fn listed(name: &str, class: &str, servers: &str) -> PathBuf {
    let dir = root().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let servers = match servers {
        "" => String::new(),
        s => format!("mcp_servers:\n{s}"),
    };
    std::fs::write(dir.join("script.yaml"), "turns:\n  - text: unused\n").unwrap();
    let manifest = format!(
        "name: mcp-ls-bench\nversion: \"0.1.0\"\ninference:\n  driver: scripted\n  \
         script: ./script.yaml\n  model: bench\ncapabilities:\n  containment: {class}\n{servers}"
    );
    std::fs::write(dir.join("murmur.yaml"), manifest).unwrap();
    dir.join("murmur.yaml")
}

/// What one `mur mcp ls --json` took, in ms from the spawn.
#[derive(Clone, Copy, Default)]
struct Listing {
    /// To its line on stderr saying the servers' sandbox is ready (`mcp servers: ...`),
    /// printed before they start.
    armed: f64,
    /// To its first line on stdout: the first server listed (for a manifest without
    /// servers, the line saying so).
    listed: f64,
    /// To its exit, the servers ended.
    exited: f64,
}

fn ls(manifest: &Path, servers: usize) -> Listing {
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_mur"))
        .env("MUR_CACHE_DIR", cache())
        .args(["mcp", "ls", "--json", "--manifest"])
        .arg(manifest)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let said = std::thread::spawn(move || {
        let (mut text, mut armed) = (String::new(), None);
        for line in stderr.lines().map_while(Result::ok) {
            if armed.is_none() && line.starts_with("mcp servers:") {
                armed = Some(started.elapsed());
            }
            text.push_str(&line);
            text.push('\n');
        }
        (text, armed)
    });
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let listed = started.elapsed();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    let exited = started.elapsed();
    let (said, armed) = said.join().unwrap();
    assert!(status.success(), "{}: {said}", manifest.display());
    if servers > 0 {
        let lines: Vec<Value> = std::iter::once(line.as_str())
            .chain(rest.lines())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        assert_eq!(lines.len(), servers, "{line}{rest}");
        let tools = lines[0]["tools"].as_array().map_or(0, Vec::len);
        assert!(tools > 0, "no tools listed: {line}");
        assert!(armed.is_some(), "no sandbox line on stderr: {said}");
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    Listing {
        armed: armed.map_or(0.0, ms),
        listed: ms(listed),
        exited: ms(exited),
    }
}

fn starts(server: &str, tag: &str, what: &str) {
    let empty = listed("ls-none", "scoped", "");
    let classes = ["advisory", "scoped", "sealed"];
    let manifests: Vec<PathBuf> = classes
        .iter()
        .map(|class| listed(&format!("ls-{tag}-{class}"), class, server))
        .collect();
    // Warm-up: the page cache, the first run's sandbox set-up.
    ls(&empty, 0);
    for m in &manifests {
        ls(m, 1);
    }
    let mut none = Vec::new();
    let mut runs = vec![Vec::new(); classes.len()];
    for _ in 0..LISTINGS {
        none.push(ls(&empty, 0).exited);
        for (i, m) in manifests.iter().enumerate() {
            runs[i].push(ls(m, 1));
        }
    }
    let none = median(none);
    println!(
        "start of {what} to its tools listed: `mur mcp ls --json`, median of {LISTINGS} runs \
         of each class [min - max], ms from the spawn; `mur mcp ls` without servers exits at {none:.1} ms"
    );
    println!(
        "  (armed: its stderr line saying the sandbox is ready, before the server starts; \
         listed: the server's line on stdout; exited: the server ended)"
    );
    let of = |runs: &[Listing], f: fn(&Listing) -> f64| runs.iter().map(f).collect::<Vec<f64>>();
    let unconfined = median(of(&runs[0], |r| r.listed));
    for (class, runs) in classes.iter().zip(&runs) {
        let listed = of(runs, |r| r.listed);
        let (lo, hi) = min_max(&listed);
        let listed = median(listed);
        let armed = median(of(runs, |r| r.armed));
        let start = median(of(runs, |r| r.listed - r.armed));
        let exited = median(of(runs, |r| r.exited));
        print!(
            "  {class:9} armed {armed:5.1}, listed {listed:6.1} [{lo:.1} - {hi:.1}], exited \
             {exited:6.1}; armed to listed {start:6.1}"
        );
        if *class != "advisory" {
            print!(
                "; listed at {:.2}x advisory's ({:.2}x less the run without servers)",
                listed / unconfined,
                (listed - none) / (unconfined - none)
            );
        }
        println!();
    }
}

fn main() {
    let started = Instant::now();
    let everything = everything()
        .inspect_err(|why| println!("skipped: server-everything is not installed: {why}"))
        .ok();
    let hostile = hostile_server()
        .inspect_err(|why| println!("skipped: the Python server cannot run: {why}"))
        .ok();
    let parts = std::env::var("MUR_BENCH_MCP_PARTS").unwrap_or_else(|_| "calls,starts".into());
    if parts.contains("calls") {
        calls(everything.as_ref(), hostile.as_deref());
    }
    if parts.contains("starts") {
        if let Some(e) = &everything {
            starts(
                &everything_server(e),
                "everything",
                "server-everything (node)",
            );
        }
        if let Some(server) = &hostile {
            starts(server, "hostile", "hostile_server.py (python3)");
        }
    }
    println!("(took {:.0} s)", started.elapsed().as_secs_f64());
}
