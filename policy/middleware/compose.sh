#!/usr/bin/env bash
# Compose the policy middleware in front of a tools component's executor import, without
# rebuilding the tools: builds this crate's core module for wasm32-unknown-unknown (no WASI),
# wraps it into a component with src/bin/componentize.rs and runs `wac compose`. The result
# imports bash-executor, agent and approval, and exports tools, bash-executor and policy-check.
# The middleware component alone is left at target/guest-wasm/policy_middleware.wasm.
#
# Usage: policy/middleware/compose.sh TOOLS.wasm OUT.wasm
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 TOOLS.wasm OUT.wasm" >&2
  exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# WAC names the wac binary to use (the tests install their own); else wac from PATH.
wac="${WAC:-wac}"
command -v "$wac" >/dev/null || {
  echo "wac is missing: cargo install wac-cli --version 0.12.0 --no-default-features --locked" >&2
  exit 1
}
target_dir="$root/target/guest-wasm"
cargo build --quiet --locked --manifest-path "$root/Cargo.toml" -p dsh-policy-middleware --release --lib \
  --target wasm32-unknown-unknown --target-dir "$target_dir"
cargo run --quiet --locked --manifest-path "$root/Cargo.toml" -p dsh-policy-middleware --bin componentize \
  --target-dir "$target_dir" -- \
  "$target_dir/wasm32-unknown-unknown/release/dsh_policy_middleware.wasm" "$target_dir/policy_middleware.wasm"
"$wac" compose "$here/compose.wac" \
  --dep "dsh:tools=$1" \
  --dep "dsh:policy=$target_dir/policy_middleware.wasm" \
  -o "$2"
