#!/usr/bin/env bash
# fuzz_long.sh — runs each libFuzzer target of tests/fuzz for a while, one after another,
# and prints how many inputs each executed and how many crashes it hit.
#
#   bench/fuzz_long.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 600 s; every target)
#
# BUILD (default build-fuzz) is configured with clang and GRADUS_FUZZ=ON when it has no
# cache yet; the targets are built there. Each target's corpus grows in
# BUILD/fuzz/long/<target> (seeded from tests/fuzz/corpus/<target>, kept between runs),
# and crashing inputs are written to BUILD/fuzz/long/crashes/. A crash does not end a
# target's time: it is counted and the fuzzer starts again for the time left. A crash
# input, once fixed, belongs in tests/fuzz/corpus/<target>/regress-<what>.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-600}
[ $# -gt 0 ] && shift
BUILD=${BUILD:-build-fuzz}
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.c; do
    t=${f##*/fuzz_}
    targets+=("${t%.c}")
  done
fi

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD" -DCMAKE_C_COMPILER=clang -DGRADUS_FUZZ=ON -DGRADUS_CUDA=OFF >/dev/null
fi
cmake --build "$BUILD" --target fuzz -j "${JOBS:-2}" >/dev/null

out="$BUILD/fuzz/long"
mkdir -p "$out/crashes"
results=()
for t in "${targets[@]}"; do
  mkdir -p "$out/$t"
  execs=0 crashes=0 runs=0
  start=$(date +%s)
  while :; do
    left=$((secs - ($(date +%s) - start)))
    [ "$left" -gt 0 ] || break
    runs=$((runs + 1))
    log="$out/$t.run$runs.log"
    rc=0
    dict=()
    [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
    "$BUILD/fuzz_$t" -max_total_time="$left" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "${dict[@]}" \
      -artifact_prefix="$out/crashes/$t-" "$out/$t" "tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
    # The final stats, or the last status line when the run ended in a crash without them.
    n=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
    [ -n "$n" ] || n=$(sed -n 's/^#\([0-9][0-9]*\).*/\1/p' "$log" | tail -n 1)
    execs=$((execs + ${n:-0}))
    if [ "$rc" -ne 0 ]; then
      crashes=$((crashes + 1))
      echo "fuzz_$t: run $runs ended with status $rc; see $log" >&2
      grep -m 3 -E 'ERROR|disagree|runtime error|Test unit written' "$log" >&2 || true
    else
      rm -f "$log"
    fi
    [ "$crashes" -lt 100 ] || break # one bug hit over and over: stop and fix it
  done
  results+=("$(printf '%-8s %12d %8d %8d' "$t" "$execs" "$crashes" "$(($(date +%s) - start))")")
done

printf '%-8s %12s %8s %8s\n' target execs crashes seconds
printf '%s\n' "${results[@]}"
