#!/usr/bin/env bash
# The test command (README, .ci/run): set up a fresh Debian bookworm machine, build from
# scratch, run every test. BPF end-to-end tests need root; they fail without it unless the
# run is explicitly local and unprivileged (STORMWATCH_LOCAL_UNPRIVILEGED=1).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD_DIR" -j"$(nproc)"
cd "$BUILD_DIR"
ctest --output-on-failure --timeout 900 "$@"
