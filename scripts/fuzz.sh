#!/usr/bin/env bash
# Runs the libFuzzer targets (docs/fuzzing.md):
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
# Configures and builds the sanitizer build (FUZZ_BUILD_DIR, default build-sanitize/, clang 14)
# if needed, then runs each target (default: all of tests/fuzz/fuzz_*.cc) for SECONDS (default
# 60) on a scratch copy of tests/fuzz/corpus/<target>/, two at a time (FUZZ_JOBS), with
# -rss_limit_mb=2048 -timeout=10. Prints execs and execs/s per target; exits non-zero if any
# target crashed, leaked, ran out of memory or timed out, keeping the reproducer in
# FUZZ_WORK_DIR/<target>/ (default <build dir>/fuzz-work).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift $(( $# > 0 ? 1 : 0 ))
BUILD_DIR=${FUZZ_BUILD_DIR:-build-sanitize}
JOBS=${FUZZ_JOBS:-2}
if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for f in tests/fuzz/fuzz_*.cc; do targets+=("$(basename "$f" .cc)"); done
fi
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DSTORMWATCH_SANITIZE=ON \
    -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14 >/dev/null
fi
cmake --build "$BUILD_DIR" -j"$JOBS" --target "${targets[@]}"
WORK=${FUZZ_WORK_DIR:-$BUILD_DIR/fuzz-work}
mkdir -p "$WORK"
echo "fuzzing ${#targets[@]} targets for ${seconds}s each, $JOBS at a time (work: $WORK)"
status=0
# fuzz_go_binary also starts from a real stripped Go binary (the normal build's, FUZZ_GO_SEED).
go_seed=${FUZZ_GO_SEED:-build/go/fuzz-go-seed}
printf '%s\n' "${targets[@]}" |
  xargs -P "$JOBS" -I{} bash -c '
    if [ "$1" = fuzz_go_binary ]; then export FUZZ_EXTRA_SEEDS="$2" FUZZ_MAX_LEN=4194304; fi
    exec bash tests/fuzz/run_target.sh "$3/tests/fuzz/$1" "tests/fuzz/corpus/$1" "$4" "$5/$1"' \
    _ {} "$go_seed" "$BUILD_DIR" "$seconds" "$WORK" || status=1
if [ $status -ne 0 ]; then
  echo "fuzz: FAILED (reproducers above; replay one with: $BUILD_DIR/tests/fuzz/<target> <file>)" >&2
fi
exit $status
