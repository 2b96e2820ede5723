#!/usr/bin/env bash
# Starts the three gossip nodes of this folder (HTTP on 127.0.0.1:9181-9183,
# one global limit of 1000 req/s shared by all of them) and stops them on
# Ctrl-C. Set DRL=/path/to/drl to use a given binary.
set -euo pipefail
cd "$(dirname "$0")"
DRL=${DRL:-drl}
if ! command -v "$DRL" >/dev/null 2>&1; then
  echo "building drl (cargo build --release -p drl) ..." >&2
  cargo build --release -p drl >&2
  DRL="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/release/drl"
fi
# The cluster key: 32 random bytes, readable by this user only. Never put it
# on the command line or in the YAML.
if [ ! -s cluster.key ]; then
  (umask 077 && head -c 32 /dev/urandom | base64 > cluster.key)
fi
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait' EXIT INT TERM
for i in 1 2 3; do
  "$DRL" serve --config "node$i.yaml" &
  pids+=($!)
done
echo "three nodes up: try"
echo "  for i in \$(seq 300); do curl -s 127.0.0.1:918\$((i % 3 + 1))/v1/check -d '{\"requests\":[{\"limit\":\"global\",\"key\":\"all\"}]}'; echo; done | grep -o '\"allowed\":[a-z]*' | sort | uniq -c"
wait
