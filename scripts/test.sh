#!/usr/bin/env bash
# The test command (README, .ci/run): set up a fresh Debian bookworm machine, build from
# scratch, run every test. BPF end-to-end tests need root; they fail without it unless the
# run is explicitly local and unprivileged (STORMWATCH_LOCAL_UNPRIVILEGED=1).
# With STORMWATCH_SANITIZE_STAGE=1, then the sanitizer build (docs/fuzzing.md): the unit tests
# under ASan+UBSan and every fuzz target for 30 s (STORMWATCH_FUZZ_SMOKE_SECONDS), as ctest
# labels sanitize and fuzz of build-sanitize/ (SANITIZE_BUILD_DIR). Not on by default yet: it
# adds about 25 minutes (a second, instrumented build on 2 cores) and CI must stay under 60.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD_DIR" -j"$(nproc)"
status=0
(cd "$BUILD_DIR" && ctest --output-on-failure --timeout 900 "$@") || status=$?

if [ "${STORMWATCH_SANITIZE_STAGE:-0}" = 1 ]; then
  SAN_DIR=${SANITIZE_BUILD_DIR:-build-sanitize}
  case "$BUILD_DIR" in /*) abs_build=$BUILD_DIR ;; *) abs_build=$PWD/$BUILD_DIR ;; esac
  san_start=$(date +%s)
  # Its unit tests read the Go test binaries and Debian suites of the normal build.
  cmake -S . -B "$SAN_DIR" -G Ninja -DSTORMWATCH_SANITIZE=ON \
    -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14 \
    -DSTORMWATCH_GO_OUT_DIR="$abs_build/go" -DSTORMWATCH_DEBIAN_DIR="$abs_build/debian" \
    -DSTORMWATCH_FUZZ_SMOKE_SECONDS="${STORMWATCH_FUZZ_SMOKE_SECONDS:-30}"
  cmake --build "$SAN_DIR" -j"$(nproc)"
  (cd "$SAN_DIR" && ctest --output-on-failure --timeout 900 -j"$(nproc)" -L 'sanitize|fuzz') || status=1
  echo "test: sanitizer build, sanitized unit tests and fuzz smoke took $(( $(date +%s) - san_start )) s"
fi
exit $status
