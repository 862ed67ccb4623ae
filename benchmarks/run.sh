#!/usr/bin/env bash
# Runs every figure of BENCHMARKS.md and rewrites its tables:
#   1-2  criterion, `cargo bench --bench layers` (main crate)
#   7    `cargo bench --bench timer_lateness` (main crate)
#   3-6  the bench binary of this package, against rmcp and tower-mcp (9: ours only)
#   8    the same binary: Streamable HTTP under h2load (Debian's nghttp2-client,
#        installed here with apt-get when missing), against rmcp, tower-mcp
#        and a bare hyper server, with the crate's examples/http_server as a row
#
#   bash benchmarks/run.sh            # everything, rewrites BENCHMARKS.md
#   bash benchmarks/run.sh --smoke    # a few seconds: figures 3-6 (and 8 when h2load is
#                                     # installed), our servers only, prints, writes nothing;
#                                     # needs neither h2load nor the peers
#
# The main crate uses its own target dir (target/), this package its own
# (benchmarks/target/), so building rmcp never touches the crate's build;
# a CARGO_TARGET_DIR, when set, serves both.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
export CARGO_TERM_COLOR=never

bench="${CARGO_TARGET_DIR:-$here/target}/release/bench"
if [[ "${1:-}" == "--smoke" ]]; then
    # Without the `peers` feature: rmcp and tower-mcp are not built (CI runs this).
    echo "== build benchmarks package (release, no peers)"
    cargo build --release --manifest-path "$here/Cargo.toml" --no-default-features
    exec "$bench" --smoke
fi

if ! command -v h2load >/dev/null 2>&1; then
    echo "== figure 8 needs h2load: installing Debian's nghttp2-client"
    sudo=""
    if [[ "$(id -u)" != 0 ]]; then sudo="sudo"; fi
    if ! { $sudo apt-get update -qq && $sudo apt-get install -y -qq nghttp2-client; }; then
        echo "cannot install h2load: run 'apt-get install nghttp2-client' (Debian/Ubuntu) and rerun" >&2
        exit 1
    fi
fi

echo "== build benchmarks package (release)"
cargo build --release --manifest-path "$here/Cargo.toml"
# Figure 8's example-server row: examples/http_server built the way users build it.
echo "== build the crate's examples (release, all features)"
(cd "$root" && cargo build --release --all-features --examples)

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "== figures 1-2: cargo bench --bench layers"
(cd "$root" && cargo bench --bench layers)
echo "== figure 7: cargo bench --bench timer_lateness"
(cd "$root" && cargo bench --bench timer_lateness) | tee "$tmp/lateness.txt"

echo "== figures 3-6 and 8"
criterion_dir="${CARGO_TARGET_DIR:-$root/target}/criterion"
"$bench" --criterion "$criterion_dir" --lateness "$tmp/lateness.txt" --write "$root/BENCHMARKS.md"
