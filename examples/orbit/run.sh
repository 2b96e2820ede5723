#!/usr/bin/env bash
# Starts the five Orbit nodes of this folder (HTTP on 127.0.0.1:9281..9285,
# ring on UDP 127.0.0.1:9381..9385). Ctrl-C stops them all.
# Usage: ./run.sh [path/to/drl]   (default: drl on PATH)
set -euo pipefail
cd "$(dirname "$0")"
DRL=${1:-drl}
if [ ! -s cluster.key ]; then
  # The shared HMAC key (at least 16 bytes); every node reads this file.
  head -c 32 /dev/urandom | base64 > cluster.key
  chmod 600 cluster.key
fi
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait
}
trap cleanup EXIT INT TERM
for n in 1 2 3 4 5; do
  "$DRL" serve --config "node$n.yaml" > "node$n.log" 2>&1 &
  pids+=($!)
  echo "node $n: pid $! http://127.0.0.1:928$n (log node$n.log)"
done
wait
