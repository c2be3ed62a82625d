#!/usr/bin/env bash
# Installs what is missing, then builds and runs the whole test suite three
# times: gcc release (with the benchmarks built and smoke-run), clang with
# ASan+UBSan (and the libFuzzer targets), and clang with TSan. Every build
# uses real SoftHSM2 tokens in its own temporary folders. Stops at the first
# failing build; ctest prints each build's summary. The builds and the
# failure summaries are tests/suite.sh's, shared with the flake hunter
# (tests/stress.sh).
set -euo pipefail
cd "$(dirname "$0")"
packaging/deps.sh test
jobs=$(nproc)
. tests/suite.sh

for b in "${suite_builds[@]}"; do
  dir=$(suite_dir "$b")
  suite_build "$b" "$jobs"
  suite_clear_reports "$dir"
  ctest --test-dir "$dir" -j"$jobs" --output-on-failure || {
    suite_failed_tails "$dir"; suite_reports "$dir" || true; exit 1; }
  suite_reports "$dir"
done
