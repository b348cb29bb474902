#!/usr/bin/env bash
# Runs one fuzzer for a bounded time over its seed corpus (kept in the repository, read only) and a
# working corpus (what it finds, in the build tree). Exits non-zero on a crash, a leak-free
# AddressSanitizer report or an uncaught exception, with the input saved in the working folder.
#   tests/fuzz/run_fuzzer.sh FUZZER SECONDS SEEDS WORK
set -uo pipefail
fuzzer="$1" seconds="$2" seeds="$3" work="$4"
mkdir -p "$work"
# LibTorch is not instrumented: the container-overflow check would misread vectors it resized, and
# its one-time allocations at start-up are not leaks of the parser under test.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:detect_container_overflow=0}"
"$fuzzer" -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=20 -artifact_prefix="$work/" -print_final_stats=1 \
  "$work" "$seeds" 2> "$work/last-run.log"
status=$?
grep -E "^stat::number_of_executed_units|^#[0-9]+ +DONE" "$work/last-run.log"
if [ $status -ne 0 ]; then
  grep -E "ERROR|what\(\)|SUMMARY|Test unit written" "$work/last-run.log" | head -20
fi
exit $status
