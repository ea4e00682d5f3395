#!/usr/bin/env bash
# The demo (README, first command): set up a fresh Debian bookworm machine, build, then run a
# local control plane (real etcd + the test API server), the agent, a person using kubectl and
# a runaway operator, and show the agent catching the storm: the alert line and the metrics.
# Needs root (BPF).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
STORMWATCH_BUILD_DIR="$PWD/$BUILD_DIR" STORMWATCH_GO_OUT="$PWD/$BUILD_DIR/go" \
  exec /usr/bin/python3 scripts/demo.py "$@"
