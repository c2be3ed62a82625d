#!/usr/bin/env bash
# Builds the benchmarks (release, jemalloc) and runs them for the two CA key
# types the targets are stated for, then prints the report that goes into
# perf/README.md. Each CA runs in its own process (SoftHSM2 reads its
# configuration once per process); every ceiling is measured in the same
# process as what is compared with it.
#   perf/run.sh [extra Google Benchmark flags, e.g. --benchmark_repetitions=3]
set -euo pipefail
cd "$(dirname "$0")/.."
packaging/deps.sh test
cmake -S . -B build-perf -DCMAKE_BUILD_TYPE=Release -DSIGNET_BUILD_PERF=ON -DSIGNET_BUILD_TESTS=OFF >/dev/null
cmake --build build-perf -j"$(nproc)" --target bench_signet >/dev/null
out=${SIGNET_PERF_OUT:-build-perf/results}
mkdir -p "$out"
for ca in ecdsa-p256 rsa-2048; do
  SIGNET_BENCH_CA=$ca build-perf/perf/bench_signet --benchmark_min_time=2 \
    --benchmark_out="$out/$ca.json" --benchmark_out_format=json "$@" >&2
done
/usr/bin/python3 perf/report.py "$out/ecdsa-p256.json" "$out/rsa-2048.json"
