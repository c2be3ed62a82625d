#!/usr/bin/env bash
# Fuzzing at scale: every libFuzzer target (or the ones named) run for a
# fixed number of executions, each on its checked-in corpus, then the inputs
# that reached new coverage merged back into tests/fuzz/corpus/<name>/ so the
# suite's fuzz_replay_<name> tests replay them. Not part of CI (hours of CPU);
# run it by hand and record its table in tests/RELIABILITY.md.
#
#   tests/fuzz/scale.sh [--runs N] [--jobs J] [--build DIR] [--report FILE] [--no-merge] [name...]
#
# --runs      executions per target (default 10000000)
# --jobs      libFuzzer processes per target at once (default 1), runs/J
#             executions each, each with its own seed and log, sharing the
#             new-inputs folder; the row sums their executions and gives job
#             0's coverage. A process slows as it ages (side by side, a fresh
#             certset process ran 1.45 times as fast as one 2.7 million
#             executions old), so use one job per free core
# --build     the clang fuzz build folder (default build-fuzz; configured and
#             built here with ASan+UBSan, the suite's fuzz flags, at -O1 as
#             OSS-Fuzz builds: 2-2.5x the executions per second of -O0, with
#             assertions kept)
# --report    appends one Markdown table row per target (default: stdout only)
# --no-merge  leave the checked-in corpus alone
#
# A target that crashes, leaks or times out stops there: its reproducer is in
# BUILD/fuzz-scale/artifacts/, the row says so, the others still run, and the
# exit status is 1. Each run is bounded in time too (-max_total_time, 12 h).
set -euo pipefail
cd "$(dirname "$0")/../.."

runs=10000000
jobs=1
build=build-fuzz
report=
merge=1
names=()
while [ $# -gt 0 ]; do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --runs=*) runs=${1#*=}; shift ;;
    --jobs) jobs=$2; shift 2 ;;
    --jobs=*) jobs=${1#*=}; shift ;;
    --build) build=$2; shift 2 ;;
    --build=*) build=${1#*=}; shift ;;
    --report) report=$2; shift 2 ;;
    --report=*) report=${1#*=}; shift ;;
    --no-merge) merge=0; shift ;;
    --help|-h) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "scale.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) names+=("$1"); shift ;;
  esac
done
case $runs in ''|*[!0-9]*|0) echo "scale.sh: --runs needs a positive number" >&2; exit 2 ;; esac
case $jobs in ''|*[!0-9]*|0) echo "scale.sh: --jobs needs a positive number" >&2; exit 2 ;; esac
[ "$jobs" -le "$runs" ] || { echo "scale.sh: --jobs is more than --runs" >&2; exit 2; }

if [ ${#names[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.c; do n=${f##*/fuzz_}; names+=("${n%.c}"); done
fi
for n in "${names[@]}"; do
  [ -f "tests/fuzz/fuzz_$n.c" ] || { echo "scale.sh: no target fuzz_$n" >&2; exit 2; }
done

if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_C_FLAGS_DEBUG=-g -O1" -DCMAKE_C_COMPILER=clang \
    -DSIGNET_SANITIZE=address -DSIGNET_BUILD_FUZZ=ON >/dev/null
fi
cmake --build "$build" -j"$(nproc)" --target "${names[@]/#/fuzz_}" >/dev/null

work=$build/fuzz-scale
mkdir -p "$work/artifacts"
status=0
# Job j's log: $n.log for job 0 (the only one by default), $n.j.log after.
job_log() {
  if [ "$2" = 0 ]; then echo "$work/$1.log"; else echo "$work/$1.$2.log"; fi
}
row() {
  echo "$1"
  if [ -n "$report" ]; then echo "$1" >>"$report"; fi
}
row "| target | executions | seconds | exec/s | coverage (cov/ft) | corpus before → after | result |"
row "|---|---|---|---|---|---|---|"
for n in "${names[@]}"; do
  corpus=tests/fuzz/corpus/$n
  scratch=$work/$n
  rm -rf "$scratch"
  mkdir -p "$scratch"
  before=$(find "$corpus" -maxdepth 1 -type f | wc -l)
  start=$(date +%s)
  result=ok
  # New inputs go to the scratch folder (the first corpus argument); the
  # checked-in corpus is only read during the run. Job j writes its
  # reproducers as $n-j-*; the last job also takes the remainder of runs/J.
  pids=()
  for ((j = 0; j < jobs; j++)); do
    share=$((runs / jobs))
    if [ $j = $((jobs - 1)) ]; then share=$((runs - share * (jobs - 1))); fi
    "$build/tests/fuzz/fuzz_$n" -runs="$share" -max_total_time=43200 -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$work/artifacts/$n-$j-" "$scratch" "$corpus" >"$(job_log "$n" $j)" 2>&1 &
    pids+=($!)
  done
  for j in "${!pids[@]}"; do
    if ! wait "${pids[$j]}"; then
      result="FAILED (see $(job_log "$n" "$j"))"
      status=1
    fi
  done
  secs=$(( $(date +%s) - start ))
  execs=0
  for ((j = 0; j < jobs; j++)); do
    e=$(sed -n 's/^stat::number_of_executed_units: *//p' "$(job_log "$n" $j)" | tail -1)
    if [ -z "$e" ]; then execs=; break; fi
    execs=$((execs + e))
  done
  rate=?
  if [ -n "$execs" ] && [ $secs -gt 0 ]; then rate=$(( execs / secs )); fi
  cov=$(grep -E '^#[0-9]+.*(DONE|pulse|NEW|REDUCE)' "$(job_log "$n" 0)" | tail -1 | sed -n 's/.*cov: \([0-9]*\) ft: \([0-9]*\).*/\1\/\2/p')
  after=$before
  if [ $merge = 1 ] && [ "$result" = ok ]; then
    "$build/tests/fuzz/fuzz_$n" -merge=1 -timeout=10 -rss_limit_mb=2048 "$corpus" "$scratch" >"$work/$n.merge.log" 2>&1 ||
      { result="merge FAILED (see $work/$n.merge.log)"; status=1; }
    after=$(find "$corpus" -maxdepth 1 -type f | wc -l)
  fi
  what=$n
  [ "$jobs" = 1 ] || what="$n ($jobs jobs)"
  row "| $what | ${execs:-?} | $secs | $rate | ${cov:-?} | $before → $after | $result |"
done
exit $status
