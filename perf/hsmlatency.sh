#!/usr/bin/env bash
# signetd on a slow token against the same signetd on a fast one, side by
# side in one run (#32): four servers, each on its own fresh P-256 CA and
# with default settings: one on SoftHSM2 directly, three through p11_fault
# (tests/hsm/p11_fault.c) delaying every C_Sign by 0.1 ms (a token on the
# host's bus, or its own thread asleep for a moment), 2 ms and 10 ms. The
# same loadgen settings (default 4 connections x 16 calls = 64 in flight)
# drive them in alternating rounds; prints each run, each server's and
# loadgen's CPU per certificate, the signer threads (signet_signer_threads,
# read right after the run, before the grown threads retire) and the ratio
# of each delayed server's best round to the undelayed one's.
#
# Tokens: by default every request carries its own token, as a mesh's pods
# send them (a pool per server and round from the server's development
# issuer, perf/tokenpool.py jwt, all minted before the first round, as
# perf/ab.sh does, each removed after its run); SIGNET_HL_TOKENS=one reuses
# one token, which signetd's verification cache answers after the first:
# less CPU per certificate, so a sleep is a larger share of it (perf/README.md
# section 13's figures before "A token per request" were taken that way).
#
# The host's ceiling, measured in the same run: every signature on a slow
# token puts a thread to sleep, and what a sleep and its wake-up cost in CPU
# is the host's: its timers and interrupts (25-40 us on the 2-vCPU guest of
# perf/README.md section 13, where they go through the hypervisor).
# After each round perf/wakecost measures that cost at each delay. loadgen
# runs on the same CPUs, so what a certificate costs the host undelayed is
# the server's CPU u and loadgen's l; at the end, with s a sleep's cost
# (medians), (u + l) / (u + l + s) is the best any server sleeping once per
# certificate could reach here; and no server can have more than the
# requests in flight waiting on the token (Little's law: in flight / delay
# per second). The lower of the two is printed beside each delayed
# server's ratio, with what the delayed server and loadgen each spent per
# certificate above the undelayed run, against s.
#
#   perf/hsmlatency.sh [BUILD_DIR]    (default: build; needs signetd,
#                                      signetctl, perf/loadgen, hsm_p11_fault)
#
# A change's effect on slow tokens: SIGNET_HL_BASELINE=path/to/signetd (an
# earlier commit's build, as for perf/ab.sh) starts that signetd too at
# every delay, the two builds' servers taking turns to run first from round
# to round (the second of two back-to-back runs here measured a few per
# cent lower), and prints each delay's best rounds, this build against the
# baseline, as well.
#
# Knobs: SIGNET_HL_CONNECTIONS [4], SIGNET_HL_CONCURRENCY [16],
# SIGNET_HL_REQUESTS [20000], SIGNET_HL_DURATION [15s], SIGNET_HL_WARMUP
# [1000], SIGNET_HL_ROUNDS [3], SIGNET_HL_DELAYS ["0.1 2 10"] (ms; one server
# each), SIGNET_HL_TOKENS [pool|one], SIGNET_HL_FLAGS [""] (more signetd
# flags for every server, e.g. "--hsm-max-sessions 2" for the CPU-sized
# pool of before #32),
# SIGNET_HL_WAKECOST [1] (0: no ceiling). Every run is bounded in count and
# time; every server binds 127.0.0.1 and is stopped by the exit trap.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(realpath "${1:-build}")
C=${SIGNET_HL_CONNECTIONS:-4}
M=${SIGNET_HL_CONCURRENCY:-16}
N=${SIGNET_HL_REQUESTS:-20000}
D=${SIGNET_HL_DURATION:-15s}
W=${SIGNET_HL_WARMUP:-1000}
ROUNDS=${SIGNET_HL_ROUNDS:-3}
read -ra DELAYS <<<"${SIGNET_HL_DELAYS:-0.1 2 10}"
read -ra FLAGS <<<"${SIGNET_HL_FLAGS:-}"
BASELINE=${SIGNET_HL_BASELINE:-}
WAKE=${SIGNET_HL_WAKECOST:-1}
TOKENS=${SIGNET_HL_TOKENS:-pool}
case $TOKENS in pool | one) ;; *) echo "SIGNET_HL_TOKENS: pool or one, not $TOKENS" >&2; exit 2 ;; esac

SIGNETD=$BUILD/daemon/signetd
CTL=$BUILD/ctl/signetctl
LOADGEN=$BUILD/perf/loadgen
# shellcheck source=perf/lib.sh
. perf/lib.sh
FAULT=$BUILD/tests/hsm/hsm_p11_fault.so
WAKECOST=$BUILD/perf/wakecost
[ "$WAKE" = 0 ] && WAKECOST=
for f in "$SIGNETD" "$CTL" "$LOADGEN" "$FAULT" ${BASELINE:+"$BASELINE"} ${WAKECOST:+"$WAKECOST"}; do
  [ -e "$f" ] || { echo "missing $f (build with -DSIGNET_BUILD_PERF=ON)" >&2; exit 2; }
done

tmp=$(perf_tmpdir signet-hl)
pids=()
# shellcheck disable=SC2317  # called by the trap
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== HSM latency $(date -u +%Y-%m-%dT%H:%M:%SZ): nproc=$(nproc)" \
  "cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
echo "   signetd=$SIGNETD ($(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
[ -z "$BASELINE" ] || echo "   baseline=$BASELINE (servers b*)"
echo "   flags: ${FLAGS[*]:-(defaults)}"
echo "   loadgen: $C connections x $M in flight, at most $N requests or $D per run, $ROUNDS rounds;" \
  "$([ "$TOKENS" = pool ] && echo "a token per request" || echo "ONE token reused")"

# start NAME DELAY_MS [SIGNETD]: a CA, signetd (0: SoftHSM2 directly; else
# through p11_fault with that C_Sign delay), a token.
declare -A port mport pid
start() {
  local name=$1 delay=$2 dir=$tmp/$1 bin=${3:-$SIGNETD}
  "$CTL" init --dir "$dir" --key-type ecdsa-p256 --log-level warn >/dev/null
  local extra=()
  if [ "$delay" != 0 ]; then
    printf 'C_Sign delay_ms=%s\n' "$delay" >"$dir/p11fault.control"
    extra=(--hsm-module "$FAULT")
  fi
  : >"$dir/signetd.log" # read below before the server may have opened it
  SIGNET_P11FAULT_CONTROL=$dir/p11fault.control \
    "$bin" --config "$dir/signet.conf" "${extra[@]}" "${FLAGS[@]}" --serving-address 127.0.0.1:0 \
    --http-address 127.0.0.1 --metrics-port 0 --readiness-probe-port 0 --log-format json \
    >"$dir/signetd.log" 2>&1 &
  pid[$name]=$!
  pids+=($!)
  for _ in $(seq 600); do
    port[$name]=$(sed -n 's/.*"msg":"signetd serving".*"port":\([0-9]*\).*/\1/p' "$dir/signetd.log" | head -1)
    mport[$name]=$(sed -n 's/.*"msg":"signetd serving".*"metrics_port":\([0-9]*\).*/\1/p' "$dir/signetd.log" | head -1)
    [ -n "${port[$name]}" ] && break
    kill -0 "${pid[$name]}" 2>/dev/null || { cat "$dir/signetd.log" >&2; exit 1; }
    sleep 0.1
  done
  [ -n "${port[$name]}" ] || { echo "signetd $name did not start" >&2; exit 1; }
  (umask 077 && "$CTL" token --config "$dir/signet.conf" --namespace default --service-account default >"$dir/token")
  if [ "$TOKENS" = pool ]; then perf_token_pools "$dir"; fi
}
names=(d0)
start d0 0
[ -z "$BASELINE" ] || { names+=(b0); start b0 0 "$BASELINE"; }
for d in "${DELAYS[@]}"; do
  names+=("d$d")
  start "d$d" "$d"
  [ -z "$BASELINE" ] || { names+=("b$d"); start "b$d" "$d" "$BASELINE"; }
done

# threads NAME: signet_signer_threads from /metrics ("?" when not found).
threads() {
  local p=${mport[$1]:-}
  [ -n "$p" ] || { echo "?"; return; }
  python3 - "$p" <<'EOF'
import sys, urllib.request
try:
    text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode()
except OSError:
    print("?"); sys.exit()
vals = [l.split()[-1] for l in text.splitlines() if l.startswith("signet_signer_threads ")]
print(int(float(vals[0])) if vals else "?")
EOF
}

declare -A best sleeps server client
for name in "${names[@]}"; do best[$name]=0; done
for r in $(seq "$ROUNDS"); do
  order=("${names[@]}")
  if [ -n "$BASELINE" ] && [ $((r % 2)) = 0 ]; then # the baseline first
    order=()
    for ((i = 0; i < ${#names[@]}; i += 2)); do order+=("${names[i + 1]}" "${names[i]}"); done
  fi
  for name in "${order[@]}"; do
    pool=
    [ "$TOKENS" = pool ] && pool=$tmp/$name/pool.$r
    read -r rate line < <(perf_run "${pid[$name]}" "${port[$name]}" "$tmp/$name" "$pool")
    [ -z "$pool" ] || rm -rf "$pool"
    th=$(threads "$name")
    label="C_Sign +${name#?} ms"
    [ "${name:0:1}" = b ] && label="baseline, $label"
    echo "round $r $label (load $(cut -d' ' -f1 /proc/loadavg)): $line, signer threads $th"
    best[$name]=$(python3 -c "print(max(${best[$name]}, $rate))")
    server[$name]="${server[$name]:-} $(sed -n 's/.*server CPU \([0-9.]*\) ms\/cert.*/\1/p' <<<"$line")"
    client[$name]="${client[$name]:-} $(sed -n 's/.*loadgen CPU \([0-9.]*\) ms\/cert.*/\1/p' <<<"$line")"
  done
  [ -n "$WAKECOST" ] || continue
  for d in "${DELAYS[@]}"; do
    out=$("$WAKECOST" --sleep-us "$(python3 -c "print(max(1, round($d * 1000)))")" --max-threads $((C * M)) \
      --rounds 1 --seconds 2 --json)
    read -r cost threads < <(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print(r['cost_us_per_sleep'], r['threads'])" "$out")
    echo "round $r host (wakecost): a sleep of $d ms costs $cost us of CPU ($threads threads)"
    sleeps[$d]="${sleeps[$d]:-} $cost"
  done
done
for name in "${names[@]}"; do
  case $name in d0 | b0) continue ;; esac
  build=${name:0:1} who=""
  [ "$build" = b ] && who="baseline, "
  python3 -c "print(f'best of $ROUNDS: ${who}+${name#?} ms {${best[$name]}:.1f}/s against undelayed {${best[${build}0]}:.1f}/s = {${best[$name]} / ${best[${build}0]}:.3f}')"
done
[ -z "$WAKECOST" ] || for d in "${DELAYS[@]}"; do
  python3 - "$d" "${best[d$d]}" "${best[d0]}" "${server[d0]}" "${client[d0]}" "${sleeps[$d]}" $((C * M)) \
    "${server[d$d]}" "${client[d$d]}" <<'EOF'
import statistics, sys
d, rate, rate0, inflight = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[7])
med = lambda arg: statistics.median(float(x) for x in arg.split())
u, l, s = med(sys.argv[4]), med(sys.argv[5]), med(sys.argv[6]) / 1000
ud, ld = med(sys.argv[8]), med(sys.argv[9])
# The server and loadgen share the CPUs: a certificate costs the host
# u + l undelayed, and at least s more when the server sleeps once for it.
cpu = (u + l) / (u + l + s)
# Little's law: no more than `inflight` signatures wait d ms at once.
flight = inflight / (float(d) / 1000) / rate0
ceiling = min(cpu, flight)
why = "the CPU a sleep costs" if cpu <= flight else f"{inflight} requests in flight"
print(f"host ceiling, +{d} ms: {ceiling:.3f} ({why}; one sleep per certificate at {u:.3f} ms of server and "
      f"{l:.3f} ms of loadgen CPU per certificate undelayed and {1000 * s:.1f} us per sleep, medians: {cpu:.3f}; "
      f"{inflight} in flight / {d} ms: {flight:.3f}); this build {rate / rate0:.3f}, "
      f"{rate / rate0 / ceiling:.2f} of the ceiling; per certificate above the undelayed run, medians: "
      f"server {1000 * (ud - u):+.1f} us, loadgen {1000 * (ld - l):+.1f} us (a sleep {1000 * s:.1f} us)")
EOF
done
[ -z "$BASELINE" ] || for d in 0 "${DELAYS[@]}"; do
  python3 -c "print(f'best of $ROUNDS: +$d ms, this build against the baseline: {${best[d$d]}:.1f}/s against {${best[b$d]}:.1f}/s = {${best[d$d]} / ${best[b$d]}:.3f}')"
done
