//! Builds the guest components (session loops, drivers, example tools) from source for
//! `wasm32-wasip2`, so one `cargo build` of the host carries its default loop and driver.
//!
//! The guests are members of this workspace, built by a nested cargo into their own
//! target dir (as wasmtime's test-programs do): sharing the host's dir would deadlock on
//! its lock and mix host flags into a wasm build.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "wasm32-wasip2";

/// Every guest package, with the directory it lives in (for change tracking).
const GUESTS: &[(&str, &str)] = &[
    ("mur-session-loop", "guest-session-loop"),
    ("mur-driver-scripted", "guest-drivers/scripted"),
    ("mur-driver-openai", "guest-drivers/openai"),
    ("mur-driver-anthropic", "guest-drivers/anthropic"),
    ("mur-loop-oneshot", "components/loop-oneshot"),
    ("mur-loop-future", "components/loop-future"),
    ("mur-loop-hostile", "components/loop-hostile"),
    ("mur-tool-wordcount", "components/tool-wordcount"),
    ("mur-tool-probe", "components/tool-probe"),
    ("mur-tool-hostile-fs", "components/tool-hostile-fs"),
    ("mur-tool-ask", "components/tool-ask"),
    ("mur-tool-stderr", "components/tool-stderr"),
    ("mur-driver-probe", "components/driver-probe"),
    ("mur-hook-gatekeeper", "components/hook-gatekeeper"),
    ("mur-hook-memory", "components/hook-memory"),
    ("mur-hook-deny-list", "components/hook-deny-list"),
    ("mur-hook-recorder", "components/hook-recorder"),
    ("mur-tool-flood", "components/tool-flood"),
    ("mur-driver-flood", "components/driver-flood"),
    ("mur-loop-flood", "components/loop-flood"),
];

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets this"));
    let root = manifest_dir
        .parent()
        .expect("host/ sits in the workspace")
        .to_path_buf();
    let target_dir = root.join("target").join("guests");

    println!("cargo:rerun-if-changed={}", root.join("wit").display());
    println!(
        "cargo:rerun-if-changed={}",
        root.join("Cargo.lock").display()
    );
    // The guests' release profiles live in the workspace manifest.
    println!(
        "cargo:rerun-if-changed={}",
        root.join("Cargo.toml").display()
    );
    // Shared by the built-in HTTP drivers.
    println!(
        "cargo:rerun-if-changed={}",
        root.join("guest-drivers/kit").display()
    );
    for (_, dir) in GUESTS {
        println!(
            "cargo:rerun-if-changed={}",
            root.join(dir).join("src").display()
        );
        println!(
            "cargo:rerun-if-changed={}",
            root.join(dir).join("Cargo.toml").display()
        );
    }

    ensure_target();
    build_guests(&root, &target_dir);

    let out = target_dir.join(TARGET).join("release");
    println!("cargo:rustc-env=MUR_GUEST_DIR={}", out.display());
}

/// A fresh machine has only the host's standard library; rustup can fetch the wasm one.
fn ensure_target() {
    if target_installed() {
        return;
    }
    println!("cargo:warning=installing the {TARGET} target with rustup (first build only)");
    let status = Command::new("rustup")
        .args(["target", "add", TARGET])
        .status();
    if !matches!(status, Ok(s) if s.success()) || !target_installed() {
        panic!("the {TARGET} target is missing: run `rustup target add {TARGET}` and build again");
    }
}

fn target_installed() -> bool {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let Ok(out) = Command::new(rustc).args(["--print", "sysroot"]).output() else {
        return false;
    };
    let sysroot = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Path::new(&sysroot)
        .join("lib/rustlib")
        .join(TARGET)
        .exists()
}

fn build_guests(root: &Path, target_dir: &Path) {
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(["build", "--release", "--target", TARGET, "--target-dir"])
        .arg(target_dir);
    for (package, _) in GUESTS {
        cmd.args(["-p", package]);
    }
    // The host's flags (coverage, sanitizers, target-cpu) must not leak into wasm code.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("could not run cargo to build the guest components: {e}"));
    if !status.success() {
        panic!("building the guest components for {TARGET} failed (see the output above)");
    }
}
