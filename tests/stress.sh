#!/usr/bin/env bash
# The flake hunter: runs the suite, or the tests you name, over and over in
# each build at more parallelism than CI gives it (CI: ctest -j<cores> on
# an otherwise idle machine; here -j4 by default) while busy loops load the
# CPUs, and lists what failed. A test that waits on a fixed sleep, races a
# thread of the program it tests, or needs a deadline an idle machine keeps
# fails here long before it fails in CI. Run it before resolving an issue
# that touches threads, timers or the controllers (tests/README.md).
#
#   tests/stress.sh [--builds release,asan,tsan] [--repeat N] [--jobs J]
#                   [--hogs H] [--no-build] [-R REGEX] [-E REGEX] [-L LABEL]
#
#   --builds     which builds, comma-separated (default: all three)
#   --repeat N   run each test until it fails, at most N times (default 5)
#   --jobs J     ctest -j J (default 4)
#   --hogs H     busy loops beside the tests, at normal priority
#                (default: one per CPU; 0: none)
#   --no-build   use the build folders as they are (test.sh's)
#   -R, -E, -L   ctest's: run only the tests matching / not matching a
#                regex, or carrying a label
#
# Each build's whole ctest output goes to build-test-<build>/stress.log. The
# last lines are one per failed test (build, test, why: the same summary as
# test.sh's), then a line per build: "stress: tsan: 3 failed of 100". Exit
# status 0 when nothing failed and no sanitizer wrote a report, 1 otherwise,
# 2 for a usage error. The busy loops end with the script, however it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/suite.sh

usage() { sed -n '10,21p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
builds=$(IFS=,; echo "${suite_builds[*]}") repeat=5 jobs=4 hogs=$(nproc) build=1 filter=()
while [ $# -gt 0 ]; do
  case $1 in
    --builds|--repeat|--jobs|--hogs|-R|-E|-L) [ $# -ge 2 ] || usage; opt=$1 val=$2; shift 2 ;;
    --builds=*|--repeat=*|--jobs=*|--hogs=*) opt=${1%%=*} val=${1#*=}; shift ;;
    --no-build) build=0; shift; continue ;;
    -h|--help) usage ;;
    *) echo "stress: unknown argument '$1'" >&2; usage ;;
  esac
  case $opt in
    --builds) builds=$val ;;
    --repeat|--jobs|--hogs)
      [[ $val =~ ^[0-9]+$ ]] || { echo "stress: $opt takes a number, not '$val'" >&2; exit 2; }
      case $opt in --repeat) repeat=$val ;; --jobs) jobs=$val ;; --hogs) hogs=$val ;; esac ;;
    *) filter+=("$opt" "$val") ;;
  esac
done
[ "$repeat" -ge 1 ] && [ "$jobs" -ge 1 ] || { echo "stress: --repeat and --jobs are at least 1" >&2; exit 2; }
IFS=, read -r -a chosen <<<"$builds"
for b in "${chosen[@]}"; do suite_configure_args "$b" >/dev/null || exit 2; done

hog_pids=()
stop_hogs() { [ ${#hog_pids[@]} -eq 0 ] || kill "${hog_pids[@]}" 2>/dev/null || true; }
trap stop_hogs EXIT
if [ "$build" -eq 1 ]; then
  packaging/deps.sh test
  for b in "${chosen[@]}"; do suite_build "$b" "$(nproc)"; done
fi
for _ in $(seq 1 "$hogs"); do
  (while :; do :; done) &
  hog_pids+=($!)
done

status=0 lines=()
for b in "${chosen[@]}"; do
  dir=$(suite_dir "$b")
  [ -f "$dir/CTestTestfile.cmake" ] || { echo "stress: $dir is not built (drop --no-build)" >&2; exit 2; }
  suite_clear_reports "$dir"
  echo "=== stress: $b: ctest -j$jobs --repeat until-fail:$repeat ${filter[*]} (${hogs} busy loops); log: $dir/stress.log"
  start=$SECONDS
  rc=0
  ctest --test-dir "$dir" -j"$jobs" --repeat until-fail:"$repeat" --output-on-failure --no-tests=error "${filter[@]}" \
    >"$dir/stress.log" 2>&1 || rc=$?
  total=$(grep -oE 'tests failed out of [0-9]+' "$dir/stress.log" | grep -oE '[0-9]+$' || echo "?")
  failed=0
  if [ "$rc" -ne 0 ]; then
    status=1
    if [ -f "$dir/Testing/Temporary/LastTestsFailed.log" ]; then
      failed=$(wc -l <"$dir/Testing/Temporary/LastTestsFailed.log")
      while IFS=: read -r _ name; do echo "stress: $b: FAILED $name"; done \
        <"$dir/Testing/Temporary/LastTestsFailed.log"
      suite_failed_tails "$dir"
    else
      tail -n 20 "$dir/stress.log"
    fi
  fi
  suite_reports "$dir" || status=1
  lines+=("stress: $b: $failed failed of $total, each run up to $repeat times, in $((SECONDS - start)) s")
done
printf '%s\n' "${lines[@]}"
exit "$status"
