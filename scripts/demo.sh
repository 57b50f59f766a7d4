#!/usr/bin/env bash
# Several `leasehold run` on one key at once, on the embedded local backend (no server needed): watch
# them take turns, each with a higher fence. Needs only Rust.
#   bash scripts/demo.sh [WORKERS]
set -euo pipefail
cd "$(dirname "$0")/.."

workers="${1:-4}"
cargo build --release -p leasehold-cli
leasehold="$PWD/target/release/leasehold"

# A lock directory of its own, so the demo never meets other locks and leaves nothing behind.
dir="$(mktemp -d "${TMPDIR:-/tmp}/leasehold-demo.XXXXXX")"
trap 'rm -rf "$dir"' EXIT
export LEASEHOLD_URL="file://$dir"

echo "$workers workers, one key, started at once; each holds the lock for 0.5 s:"
pids=()
for i in $(seq 1 "$workers"); do
  "$leasehold" run --wait 30s demo-key -- \
    sh -c 'echo "$(date +%T.%N | cut -c1-12)  worker $0 has the lock, fence $LEASEHOLD_FENCE"; sleep 0.5' "$i" &
  pids+=("$!")
done
status=0
for pid in "${pids[@]}"; do
  wait "$pid" || status=$?
done

echo
"$leasehold" status demo-key
exit "$status"
