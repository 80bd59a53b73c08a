#!/usr/bin/env bash
# Compose the policy executor in front of a tools component's executor import, without
# rebuilding the tools: builds this crate for wasm32-wasip2 and runs `wac compose`.
#
# Usage: examples/policy-executor/compose.sh TOOLS.wasm OUT.wasm
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 TOOLS.wasm OUT.wasm" >&2
  exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
command -v wac >/dev/null || {
  echo "wac is missing: cargo install wac-cli --version 0.12.0 --no-default-features --locked" >&2
  exit 1
}
cargo build --quiet --locked --manifest-path "$root/Cargo.toml" -p policy-executor --release \
  --target wasm32-wasip2 --target-dir "$root/target/guest-wasm"
wac compose "$here/compose.wac" \
  --dep "dsh:tools=$1" \
  --dep "dsh:policy=$root/target/guest-wasm/wasm32-wasip2/release/policy_executor.wasm" \
  -o "$2"
