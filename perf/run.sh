#!/usr/bin/env bash
# Builds the benchmarks (release, jemalloc) and runs them for the two CA key
# types the targets are stated for, then prints the report that goes into
# perf/README.md. Each CA runs in its own process (SoftHSM2 reads its
# configuration once per process); every ceiling is measured in the same
# process as what is compared with it. The runs are repeated in alternating
# rounds (SIGNET_PERF_ROUNDS, default 3) and the report takes each
# benchmark's best round: on a shared machine, background load only ever
# lowers a rate, so the best round is the least disturbed one.
#   perf/run.sh [extra Google Benchmark flags]
set -euo pipefail
cd "$(dirname "$0")/.."
packaging/deps.sh test
cmake -S . -B build-perf -DCMAKE_BUILD_TYPE=Release -DSIGNET_BUILD_PERF=ON -DSIGNET_BUILD_TESTS=OFF >/dev/null
cmake --build build-perf -j"$(nproc)" --target bench_signet >/dev/null
out=${SIGNET_PERF_OUT:-build-perf/results}
mkdir -p "$out"
rounds=${SIGNET_PERF_ROUNDS:-3}
rm -f "$out"/*.json
for round in $(seq "$rounds"); do
  for ca in ecdsa-p256 rsa-2048; do
    echo "== round $round, CA $ca, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    SIGNET_BENCH_CA=$ca build-perf/perf/bench_signet --benchmark_min_time=1 \
      --benchmark_out="$out/$ca.$round.json" --benchmark_out_format=json "$@" >&2
  done
done
/usr/bin/python3 perf/report.py "$out"/ecdsa-p256.*.json -- "$out"/rsa-2048.*.json
