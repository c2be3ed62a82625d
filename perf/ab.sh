#!/usr/bin/env bash
# Two signetd builds side by side, in one run on one machine: A (a
# baseline) and B (a change), each on its own fresh CA, driven by the same
# loadgen settings in alternating rounds (A, B, A, B, ...). Prints each
# run, each server's CPU per certificate, and the ratio B/A of the best
# rounds: a change's cost, measured as a ratio, which a shared machine's
# background load disturbs far less than absolute numbers.
#
#   perf/ab.sh SIGNETD_A SIGNETD_B     (signetctl and loadgen from build-perf)
#
# A baseline is any earlier commit's build, e.g.
#   git worktree add /tmp/base <commit> && cmake -S /tmp/base -B /tmp/base/build \
#     -DCMAKE_BUILD_TYPE=Release -DSIGNET_BUILD_TESTS=OFF && cmake --build /tmp/base/build --target signetd
#
# Tokens: by default every request carries its own token, as a mesh's pods
# send them (a pool per server and round from the server's development
# issuer, perf/tokenpool.py jwt, so no token is sent twice);
# SIGNET_AB_TOKENS=one reuses one token, which signetd's verification
# cache answers after the first request.
#
# Knobs: SIGNET_AB_CONNECTIONS [4], SIGNET_AB_CONCURRENCY [16],
# SIGNET_AB_REQUESTS [20000], SIGNET_AB_DURATION [20s], SIGNET_AB_WARMUP
# [1000], SIGNET_AB_ROUNDS [3], SIGNET_AB_TOKENS [pool|one]. Every run is
# bounded in count and time; both servers bind 127.0.0.1 and are stopped by
# the exit trap.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: perf/ab.sh SIGNETD_A SIGNETD_B" >&2; exit 2; }
A=$(realpath "$1")
B=$(realpath "$2")
cd "$(dirname "$0")/.."
C=${SIGNET_AB_CONNECTIONS:-4}
M=${SIGNET_AB_CONCURRENCY:-16}
N=${SIGNET_AB_REQUESTS:-20000}
D=${SIGNET_AB_DURATION:-20s}
W=${SIGNET_AB_WARMUP:-1000}
ROUNDS=${SIGNET_AB_ROUNDS:-3}
TOKENS=${SIGNET_AB_TOKENS:-pool}
case $TOKENS in pool | one) ;; *) echo "SIGNET_AB_TOKENS: pool or one, not $TOKENS" >&2; exit 2 ;; esac

cmake -S . -B build-perf -DCMAKE_BUILD_TYPE=Release -DSIGNET_BUILD_PERF=ON -DSIGNET_BUILD_TESTS=OFF >/dev/null
cmake --build build-perf -j"$(nproc)" --target signetctl loadgen >/dev/null
CTL=build-perf/ctl/signetctl
LOADGEN=build-perf/perf/loadgen
# shellcheck source=perf/lib.sh
. perf/lib.sh

tmp=$(perf_tmpdir signet-ab)
pids=()
# shellcheck disable=SC2317  # called by the trap
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== A/B $(date -u +%Y-%m-%dT%H:%M:%SZ): nproc=$(nproc) cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
echo "   A=$A"
echo "   B=$B"
echo "   tokens: $([ "$TOKENS" = pool ] && echo "a token per request" || echo "ONE token reused")"

# start NAME BINARY: a CA, signetd on an ephemeral port, a token (0600 file).
declare -A port pid
start() {
  local name=$1 bin=$2 dir=$tmp/$1
  "$CTL" init --dir "$dir" --key-type ecdsa-p256 --log-level warn >/dev/null
  "$bin" --config "$dir/signet.conf" --serving-address 127.0.0.1:0 --http-address 127.0.0.1 \
    --metrics-port 0 --readiness-probe-port 0 --log-format json >"$dir/signetd.log" 2>&1 &
  pid[$name]=$!
  pids+=($!)
  for _ in $(seq 600); do
    port[$name]=$(sed -n 's/.*"msg":"signetd serving".*"port":\([0-9]*\).*/\1/p' "$dir/signetd.log" | head -1)
    [ -n "${port[$name]}" ] && break
    kill -0 "${pid[$name]}" 2>/dev/null || { cat "$dir/signetd.log" >&2; exit 1; }
    sleep 0.1
  done
  [ -n "${port[$name]}" ] || { echo "signetd $name did not start" >&2; exit 1; }
  (umask 077 && "$CTL" token --config "$dir/signet.conf" --namespace default --service-account default >"$dir/token")
  if [ "$TOKENS" = pool ]; then perf_token_pools "$dir"; fi
}
start A "$A"
start B "$B"

best_A=0
best_B=0
for r in $(seq "$ROUNDS"); do
  for name in A B; do
    pool=
    [ "$TOKENS" = pool ] && pool=$tmp/$name/pool.$r
    read -r rate line < <(perf_run "${pid[$name]}" "${port[$name]}" "$tmp/$name" "$pool")
    echo "round $r $name (load $(cut -d' ' -f1 /proc/loadavg)): $line"
    if [ "$name" = A ]; then
      best_A=$(python3 -c "print(max($best_A, $rate))")
    else
      best_B=$(python3 -c "print(max($best_B, $rate))")
    fi
  done
done
python3 -c "print(f'best of {$ROUNDS}: A {$best_A:.1f}/s, B {$best_B:.1f}/s, B/A = {$best_B / $best_A:.3f}')"
