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

# Why each failed test failed, again after ctest's summary: a CI log is
# often read from its tail, where only the summary would be. First the
# lines that name a failure (unittest's FAIL:/ERROR: headers and exception
# lines, sg_test's "check failed", sanitizer reports), then the last lines.
failed_tails() {
  local dir=$1 log=$1/Testing/Temporary/LastTest.log out
  [ -f "$dir/Testing/Temporary/LastTestsFailed.log" ] || return 0
  while IFS=: read -r _ name; do
    out=$(awk -v t="$name" '$0 ~ "^[0-9]+/[0-9]+ Test: " t "$" {on=1} on && /^<end of output>$/ {exit} on' "$log")
    echo "=== why $name failed"
    grep -E '^(FAIL|ERROR): |^[A-Za-z.]*(Error|Exception)\b|check failed|returned .* want|Sanitizer|runtime error' \
      <<<"$out" | cut -c1-400 | head -n 12 || true
    echo "=== the last lines of $name's output"
    tail -n 15 <<<"$out" | cut -c1-400
  done < "$dir/Testing/Temporary/LastTestsFailed.log"
}

build() {
  local dir=$1; shift
  echo "=== $dir: $*"
  cmake -S . -B "$dir" "$@" >/dev/null
  cmake --build "$dir" -j"$jobs" >/dev/null
  ctest --test-dir "$dir" -j"$jobs" --output-on-failure || { failed_tails "$dir"; return 1; }
}

build build-test-release -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=gcc -DSIGNET_BUILD_PERF=ON \
  -DSIGNET_PACKAGING_TESTS=ON
build build-test-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DSIGNET_SANITIZE=address \
  -DSIGNET_BUILD_FUZZ=ON
build build-test-tsan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DSIGNET_SANITIZE=thread
