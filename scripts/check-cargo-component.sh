#!/usr/bin/env bash
# Checks that the crates `mur new` scaffolds also build with `cargo component build
# --release` (for authors who use cargo-component), and that what it builds is a
# component of the right world that `mur` runs.
#
# It installs cargo-component into a local root (never ~/.cargo), adds the wasm32-wasip1
# target cargo-component builds for, scaffolds the four kinds, builds each with
# `cargo component build --release`, and runs each scaffold's sample capsule with the
# component cargo-component made (and `mur component check` on it when this mur has it).
#
#   scripts/check-cargo-component.sh
#
# Measured once (2026-12-05, 2 shared cores, nice 19): installing 0.21.1 from scratch
# took 19 min wall, 648 s user + 60 s system CPU; the four builds and runs then took
# 76 s, 71 s of it the first build compiling wit-bindgen. All four passed.
#
# Environment: CARGO_COMPONENT_VERSION (default below), KIT_CC_WORK (default
# target/cargo-component-check), MUR (default target/debug/mur, built when missing).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
version="${CARGO_COMPONENT_VERSION:-0.21.1}"
work="${KIT_CC_WORK:-$root/target/cargo-component-check}"
mur="${MUR:-$root/target/debug/mur}"
cc_root="$work/cargo-component-$version"
mkdir -p "$work"

now() { date +%s; }
t0=$(now)

# 1. cargo-component, pinned and local. 0.21.1 is the newest release and builds with Rust
#    1.95 from its own lock file.
if [ ! -x "$cc_root/bin/cargo-component" ]; then
    echo "== installing cargo-component $version into $cc_root"
    nice cargo install cargo-component --version "=$version" --locked \
        --root "$cc_root" --target-dir "$work/install-target"
fi
export PATH="$cc_root/bin:$PATH"
cargo component --version
t_install=$(now)

# cargo-component builds for wasm32-wasip1 and wraps the module with the WASI adapter.
if ! rustup target list --installed | grep -qx wasm32-wasip1; then
    rustup target add wasm32-wasip1
fi

if [ ! -x "$mur" ]; then
    (cd "$root" && cargo build -p mur)
fi
has_check=0
if "$mur" component --help >/dev/null 2>&1; then
    has_check=1
fi

# 2. The four kinds, each built and used.
declare -A task=(
    [tool]="Turn a greeting to upper case."
    [driver]="Say hello."
    [hook]="May I clean the build folder?"
    [loop]="Say hello."
)
declare -A expect=(
    [tool]="HELLO FROM CC-TOOL"
    [driver]="echo: Say hello."
    [hook]="Refused by policy hook 'cc-hook'"
    [loop]="hello from the cc-loop loop"
)
failed=0
for kind in tool driver hook loop; do
    name="cc-$kind"
    file="${name//-/_}"
    dir="$work/scaffolds/$name"
    rm -rf "$dir"
    "$mur" new "$kind" "$name" --dir "$dir" >/dev/null
    # The workspace's lock: the same wit-bindgen as the workspace, no registry lookups.
    # (No --offline: cargo-component then wants a lock file of its own.)
    cp "$root/Cargo.lock" "$dir/Cargo.lock"
    echo "== $kind: cargo component build --release"
    start=$(now)
    (cd "$dir" && CARGO_TARGET_DIR="$work/build-target" cargo component build --release)
    echo "   built in $(($(now) - start))s"
    wasm="$work/build-target/wasm32-wasip1/release/$file.wasm"
    # The sample manifest names the wasm32-wasip2 path: put cargo-component's output there.
    mkdir -p "$dir/target/wasm32-wasip2/release"
    cp "$wasm" "$dir/target/wasm32-wasip2/release/$file.wasm"
    out=$(cd "$dir" && "$mur" run --manifest murmur.yaml --port 0 \
        --workdir "$work/run-$name" --task "${task[$kind]}" 2>&1) || true
    if grep -qF "${expect[$kind]}" <<<"$out"; then
        echo "   mur run: ok (${expect[$kind]})"
    else
        echo "   mur run: FAILED"; echo "$out" | sed 's/^/     /'; failed=1
    fi
    if [ "$has_check" = 1 ]; then
        if "$mur" component check "$wasm"; then
            echo "   mur component check: ok"
        else
            echo "   mur component check: FAILED"; failed=1
        fi
    fi
done
t_end=$(now)
echo "== cargo-component $version: install $((t_install - t0))s, builds and runs $((t_end - t_install))s"
if [ "$failed" = 1 ]; then
    echo "FAILED"; exit 1
fi
echo "ok"
