#!/usr/bin/env bash
# Installs what is missing, then builds and runs the whole test suite three
# times: gcc release (with the benchmarks built and smoke-run), clang with
# ASan+UBSan (and the libFuzzer targets), and clang with TSan. Every build
# uses real SoftHSM2 tokens in its own temporary folders. Stops at the first
# failing build; ctest prints each build's summary. The builds and the
# failure summaries are tests/suite.sh's, shared with the flake hunter
# (tests/stress.sh).
#
# ctest runs two tests per core: most of the suite waits (on servers,
# timers, certificates' half-lives) rather than computes. A test that keeps
# a core busy says so (PROCESSORS 2), one that times itself tightly runs
# alone (RUN_SERIAL), and machine-wide set-ups take turns (RESOURCE_LOCK);
# tests/README.md lists them.
set -euo pipefail
cd "$(dirname "$0")"
packaging/deps.sh test
jobs=$(nproc)
. tests/suite.sh

# While one build's tests run, the next build compiles in the background at
# nice 19: the tests mostly wait, and the compiler gets only the CPU they
# leave. Its output goes to build-test-<name>/build.log, shown if it fails;
# a run that stops early stops that compile too (its own process group).
bg='' bg_log=''
trap '[ -z "$bg" ] || kill -- "-$bg" 2>/dev/null || true' EXIT
for i in "${!suite_builds[@]}"; do
  b=${suite_builds[i]} next=${suite_builds[i + 1]:-}
  dir=$(suite_dir "$b")
  if [ -n "$bg" ]; then
    wait "$bg" || { cat "$bg_log"; echo "=== $dir: the build failed"; bg=''; exit 1; }
    bg=''
    head -n 1 "$bg_log"
  else
    suite_build "$b" "$jobs"
  fi
  if [ -n "$next" ]; then
    mkdir -p "$(suite_dir "$next")"
    bg_log=$(suite_dir "$next")/build.log
    set -m  # the background build gets a process group of its own
    (renice -n 19 -p "$BASHPID" >/dev/null; suite_build "$next" "$jobs") >"$bg_log" 2>&1 &
    bg=$!
    set +m
  fi
  suite_clear_reports "$dir"
  ctest --test-dir "$dir" -j"$((2 * jobs))" --output-on-failure || {
    suite_failed_tails "$dir"; suite_reports "$dir" || true; exit 1; }
  suite_reports "$dir"
done
