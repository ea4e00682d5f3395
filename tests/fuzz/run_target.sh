#!/usr/bin/env bash
# One fuzz target for a while on a scratch copy of its seeds (docs/fuzzing.md):
#   run_target.sh BINARY SEEDS_DIR SECONDS WORK_DIR
# With FUZZ_RUNS=N the run stops after N executions instead (SECONDS is then only a ceiling).
# With FUZZ_SEED=N the run's random choices start from seed N (the ctest smoke fixes it, so a
# CI run explores what the previous one did; long runs leave it random to find new inputs).
# FUZZ_TIMEOUT: seconds one input may take (default 10; a long run sharing the CPU needs more).
# FUZZ_EXTRA_SEEDS: files added to the seeds (fuzz_go_binary's real Go binary, built by the
# normal build; a missing one is an error); FUZZ_MAX_LEN: libFuzzer's -max_len (default 1 MB).
# WORK_DIR gets corpus/ (the seeds plus what the run found), the log, and any reproducer
# (crash-*, leak-*, oom-*, timeout-*). Prints the target's execs/s and total execs; exits
# non-zero on any crash, leak, OOM or timeout.
set -uo pipefail
bin=$1 seeds=$2 seconds=$3 work=$4
name=$(basename "$bin")
rm -rf "$work/corpus" && mkdir -p "$work/corpus"
if [ -d "$seeds" ]; then cp -r "$seeds"/. "$work/corpus/"; fi
for extra in ${FUZZ_EXTRA_SEEDS:-}; do
  if [ ! -f "$extra" ]; then
    echo "$name: seed $extra missing (the normal build makes it: cmake --build build)" >&2
    exit 1
  fi
  cp "$extra" "$work/corpus/"
done
log="$work/$name.log"
runs=()
if [ -n "${FUZZ_RUNS:-}" ]; then runs=(-runs="$FUZZ_RUNS"); fi
if [ -n "${FUZZ_SEED:-}" ]; then runs+=(-seed="$FUZZ_SEED"); fi
if [ -n "${FUZZ_MAX_LEN:-}" ]; then runs+=(-max_len="$FUZZ_MAX_LEN"); fi
"$bin" -max_total_time="$seconds" "${runs[@]}" -rss_limit_mb=2048 -timeout="${FUZZ_TIMEOUT:-10}" -print_final_stats=1 \
  -artifact_prefix="$work/" "$work/corpus" >"$log" 2>&1
rc=$?
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
artifacts=$(ls "$work" | grep -E '^(crash|leak|oom|timeout)-' || true)
printf '%-32s %12s execs %8s execs/s  %s\n' "$name" "${execs:-?}" "${speed:-?}" \
  "$([ $rc -eq 0 ] && echo ok || echo "FAILED (exit $rc), log $log")"
if [ $rc -ne 0 ] || [ -n "$artifacts" ]; then
  grep -E 'ERROR: |SUMMARY: |runtime error|==[0-9]+==' "$log" | head -20
  for a in $artifacts; do echo "reproducer: $work/$a"; done
  exit 1
fi
