# Common tasks. Plain cargo works too: see README.md.

# Run the offline hello capsule.
demo:
    cargo run -- run --manifest examples/hello/murmur.yaml --task "What is in your workdir?"

# The whole test suite (what CI runs).
test:
    cargo test --workspace --locked

# The end-to-end tests of one area (a module of tests/all: run, stream, hooks, ...).
e2e AREA:
    cargo test -p mur --test all {{AREA}}::

# Build the host and every guest component (its build script builds the guests into
# target/guests).
components:
    cargo build -p mur

# Check a component against its world: `mur component check X.wasm` (the mur on
# PATH works the same: mur component check X.wasm).
conformance WASM *ARGS:
    cargo run -q -- component check {{WASM}} {{ARGS}}

# Benchmarks (release build): see BENCHMARKS.md for the method.
bench:
    cargo bench -p mur

lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings
