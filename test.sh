#!/usr/bin/env bash
# Installs what is missing, then builds and runs the whole test suite three
# times: gcc release (with the benchmarks built and smoke-run), clang with
# ASan+UBSan (and the libFuzzer targets), and clang with TSan. Every build
# uses real SoftHSM2 tokens in its own temporary folders. Stops at the first
# failing build; ctest prints each build's summary.
set -euo pipefail
cd "$(dirname "$0")"
packaging/deps.sh test
jobs=$(nproc)

build() {
  local dir=$1; shift
  echo "=== $dir: $*"
  cmake -S . -B "$dir" "$@" >/dev/null
  cmake --build "$dir" -j"$jobs" >/dev/null
  ctest --test-dir "$dir" -j"$jobs" --output-on-failure
}

build build-test-release -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=gcc -DSIGNET_BUILD_PERF=ON \
  -DSIGNET_PACKAGING_TESTS=ON
build build-test-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DSIGNET_SANITIZE=address \
  -DSIGNET_BUILD_FUZZ=ON
build build-test-tsan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DSIGNET_SANITIZE=thread
