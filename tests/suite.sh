# The test suite's shell, sourced by test.sh (the README's test command) and
# tests/stress.sh (the flake hunter), so that both build the same three
# builds the same way and tell a failure the same way. Nothing here runs
# on its own; the caller is in the checkout's top folder.

# The three builds: a folder name each, and its configuration.
#   release  gcc, with the benchmarks built and smoke-run, and the packaging
#   asan     clang with ASan+UBSan, and the libFuzzer targets
#   tsan     clang with TSan
suite_builds=(release asan tsan)

suite_dir() { echo "build-test-$1"; }

suite_configure_args() {
  case $1 in
    release) echo -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=gcc -DSIGNET_BUILD_PERF=ON -DSIGNET_PACKAGING_TESTS=ON ;;
    asan) echo -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DSIGNET_SANITIZE=address -DSIGNET_BUILD_FUZZ=ON ;;
    tsan) echo -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DSIGNET_SANITIZE=thread ;;
    *) echo "unknown build '$1' (release, asan, tsan)" >&2; return 2 ;;
  esac
}

# suite_build NAME JOBS: configures and builds build-test-NAME, quietly
# (a compiler error still shows: the build's stderr is kept).
suite_build() {
  local dir args
  dir=$(suite_dir "$1")
  args=$(suite_configure_args "$1") || return
  echo "=== $dir: $args"
  # shellcheck disable=SC2086  # the arguments are words without spaces
  cmake -S . -B "$dir" $args >/dev/null
  cmake --build "$dir" -j"$2" >/dev/null
}

# Why each failed test failed, again after ctest's summary: a CI log is
# often read from its tail, where only the summary would be. First the
# lines that name a failure (unittest's FAIL:/ERROR: headers and exception
# lines, sg_test's "check failed", sanitizer reports), then the last lines.
suite_failed_tails() {
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

# Sanitizer reports are never lost: a sanitizer build gives each test a
# log_path under DIR/sanitizer-reports/<test>/ (CMakeLists.txt,
# signet_tests_finish), so a report is a file even where a harness
# shows only the end of a program's output or does not look at its exit
# status. suite_clear_reports before a run; suite_reports after it prints
# every report whole and fails (1) if there is any, whether the test that
# wrote it passed or not.
suite_clear_reports() {
  [ ! -d "$1/sanitizer-reports" ] || find "$1/sanitizer-reports" -type f -delete
}

suite_reports() {
  local dir=$1/sanitizer-reports f n=0
  [ -d "$dir" ] || return 0
  while IFS= read -r f; do
    n=$((n + 1))
    echo "=== sanitizer report of test ${f#"$dir"/}"
    cat "$f"
  done < <(find "$dir" -type f | sort)
  [ "$n" -eq 0 ] || { echo "=== $n sanitizer report(s) in $1" >&2; return 1; }
}
