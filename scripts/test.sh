#!/usr/bin/env bash
# The test command (README, .ci/run): set up a fresh Debian bookworm machine, build from
# scratch, run every test. BPF end-to-end tests need root; they fail without it unless the
# run is explicitly local and unprivileged (STORMWATCH_LOCAL_UNPRIVILEGED=1).
# Then the sanitizer stage (docs/fuzzing.md): a second build with clang's ASan+UBSan, its unit
# tests and every fuzz target for 30 s (STORMWATCH_FUZZ_SMOKE_SECONDS), ctest labels sanitize
# and fuzz of build-sanitize/ (SANITIZE_BUILD_DIR). The instrumented build runs while the normal
# tests do, at idle priority (SCHED_IDLE), and its tests as soon as it is built, at nice 19:
# they take little more than the CPU the tests leave (the end-to-end tests mostly wait on
# sustain windows), so the tests' timings are theirs. Its output is printed after the normal
# tests'. STORMWATCH_SANITIZE_STAGE=0 leaves the stage
# out (a quick local run).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD_DIR" -j"$(nproc)"
status=0

sanitize=${STORMWATCH_SANITIZE_STAGE:-1}
SAN_DIR=${SANITIZE_BUILD_DIR:-build-sanitize}
san_pid=
if [ "$sanitize" = 1 ]; then
  case "$BUILD_DIR" in /*) abs_build=$BUILD_DIR ;; *) abs_build=$PWD/$BUILD_DIR ;; esac
  mkdir -p "$SAN_DIR"
  san_log=$SAN_DIR/build.log
  san_tests_log=$SAN_DIR/ctest-output.log
  : >"$san_tests_log"
  # Its unit tests read the Go test binaries and Debian suites of the normal build.
  # Exit status: 2 the build failed, 1 a test failed.
  chrt --idle 0 nice -n 19 bash -c '
    start=$(date +%s)
    cmake -S . -B "$1" -G Ninja -DSTORMWATCH_SANITIZE=ON \
      -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14 \
      -DSTORMWATCH_GO_OUT_DIR="$2/go" -DSTORMWATCH_DEBIAN_DIR="$2/debian" \
      -DSTORMWATCH_FUZZ_SMOKE_SECONDS="$3" >"$4" 2>&1 &&
      cmake --build "$1" -j"$(nproc)" >>"$4" 2>&1 || exit 2
    built=$(date +%s)
    echo "test: sanitizer build took $((built - start)) s (idle priority)"
    # The tests at nice 19 but not SCHED_IDLE, which a busy machine can starve for over 10 s
    # (docs/fuzzing.md): each fuzz input must finish within FUZZ_TIMEOUT of wall time, here 60 s
    # (inputs take milliseconds).
    other=(); if chrt --other 0 true 2>/dev/null; then other=(chrt --other 0); fi
    (cd "$1" && FUZZ_TIMEOUT=${FUZZ_TIMEOUT:-60} "${other[@]}" \
      ctest --output-on-failure --timeout 900 -j"$(nproc)" -L "sanitize|fuzz")
    rc=$?
    echo "test: sanitized unit tests and fuzz smoke took $(( $(date +%s) - built )) s (nice 19)"
    [ $rc = 0 ] || exit 1' \
    _ "$SAN_DIR" "$abs_build" "${STORMWATCH_FUZZ_SMOKE_SECONDS:-30}" "$san_log" >"$san_tests_log" 2>&1 &
  san_pid=$!
fi

# Kept for the summary at the end: a CI log is often read from its tail, which the sanitizer
# stage fills.
tests_log=$BUILD_DIR/ctest-output.log
set +e
(cd "$BUILD_DIR" && ctest --output-on-failure --timeout 900 "$@") 2>&1 | tee "$tests_log"
tests_status=${PIPESTATUS[0]}
status=$tests_status
set -e

if [ -n "$san_pid" ]; then
  tests_end=$(date +%s)
  san_status=0
  wait "$san_pid" || san_status=$?
  echo "test: the sanitizer stage ended $(( $(date +%s) - tests_end )) s after the normal tests; its output:"
  cat "$san_tests_log"
  if [ "$san_status" = 2 ]; then
    echo "test: the sanitizer build failed; its log ($san_log) ends:" >&2
    tail -40 "$san_log" >&2
    status=1
  elif [ "$san_status" != 0 ]; then
    status=1
  fi
fi
if [ "$tests_status" != 0 ]; then
  # Each failed test's result line and the last 80 lines it printed (ctest prints a failed
  # test's output right after its result line, up to the next test's start).
  echo "test: the normal tests failed (ctest: $tests_status); each failure, with the end of its output:" >&2
  awk 'function flush(  i) { for (i = (n > 81 ? n - 81 : 0); i < n; i++) print buf[i % 81]; n = 0 }
       /^ *[0-9]+\/[0-9]+ Test +#[0-9]+: / { flush(); keep = /\*\*\*/ && !/\(Disabled\)/ }
       /^ *Start +[0-9]+: / { flush(); keep = 0; next }
       keep { buf[n++ % 81] = $0 }
       END { flush() }' "$tests_log" >&2
  grep -A30 '^The following tests FAILED' "$tests_log" >&2 || true
fi
exit $status
