# Common tasks. Plain cargo works too: see README.md.

# Run the offline hello capsule.
demo:
    cargo run -- run --manifest examples/hello/murmur.yaml --task "What is in your workdir?"

# The whole test suite (what CI runs).
test:
    cargo test --workspace --locked

# Only the end-to-end tests of `mur run`.
e2e:
    cargo test --test run

# Build the guest components (the host build does this too).
components:
    cargo build --release --target wasm32-wasip2 --target-dir target/guests -p mur-session-loop -p mur-driver-scripted -p mur-loop-oneshot -p mur-loop-future -p mur-tool-wordcount -p mur-tool-probe -p mur-driver-probe

# Benchmarks (release build): see BENCHMARKS.md for the method.
bench:
    bash bench/startup.sh

lint:
    cargo fmt --all -- --check
    cargo clippy --all-targets -- -D warnings
