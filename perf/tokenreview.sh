#!/usr/bin/env bash
# Authenticated issuance in TokenReview mode, auto mode (the default) and JWKS
# mode, side by side, in one run on one machine, with a distinct token per
# simulated pod that a real API server minted, beside the API server's own
# TokenReview rate from a plain client.
#
#   perf/tokenreview.sh        (from anywhere; a few minutes after the build)
#
# What it does, printing every command line it runs:
#   1. builds release with jemalloc (build-perf: signetd, signetctl, loadgen)
#      and the test API server (tests/kube/build-apiserver.sh, cached);
#   2. starts etcd + kube-apiserver on 127.0.0.1 (tests/kube/apiserver.sh)
#      and has it mint token pools (perf/tokenpool.py tokenrequest, namespace
#      and ServiceAccount "bench"): one pool of WARMUP+REQUESTS distinct
#      tokens per mode and round, and one per round for the plain client --
#      signetd's caches (and the API server's own token cache) outlive a
#      round, so no token is ever sent twice;
#   3. makes a signet CA (P-256 key in SoftHSM2) and starts one signetd per
#      mode on 127.0.0.1 with the same CA: --token-authenticator tokenreview,
#      auto (the default: jwks for the API server's tokens when its OIDC
#      discovery answers) and jwks (keys discovered from the API server, plus
#      the bound-token check); none writes to the cluster;
#   4. each round: the API server's own TokenReview rate, from a plain
#      Python client (16 threads, keep-alive connections, one review per
#      token of its pool), then the modes alternately with the same loadgen
#      settings (closed loop, a token per request through --token-dir, the
#      CSR naming the token's identity); prints each run, signetd's
#      tokenreview rate as a share of the plain client's, and how many
#      TokenReviews the API server got for all those certificates.
#
# Bounds: every loadgen run has a maximum count and time; every wait is
# bounded; the exit trap stops what was started (by pid) and the API server.
# Knobs: SIGNET_TR_CONNECTIONS [4], SIGNET_TR_CONCURRENCY [16],
# SIGNET_TR_REQUESTS [3000], SIGNET_TR_DURATION [15s], SIGNET_TR_WARMUP [200],
# SIGNET_TR_ROUNDS [2], SIGNET_TR_MODES ["tokenreview auto jwks"],
# SIGNET_TR_PLAIN_THREADS [16], SIGNET_TR_SIGNETD [build-perf's] (another
# build's signetd, e.g. an earlier commit's, run the same way: two runs of the
# script then compare builds, though not side by side in one run). A pool
# costs WARMUP+REQUESTS TokenRequests (made before any measurement), so
# REQUESTS is smaller than with one token.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

C=${SIGNET_TR_CONNECTIONS:-4}
M=${SIGNET_TR_CONCURRENCY:-16}
N=${SIGNET_TR_REQUESTS:-3000}
D=${SIGNET_TR_DURATION:-15s}
W=${SIGNET_TR_WARMUP:-200}
ROUNDS=${SIGNET_TR_ROUNDS:-2}
read -r -a MODES <<<"${SIGNET_TR_MODES:-tokenreview auto jwks}"
PLAIN_THREADS=${SIGNET_TR_PLAIN_THREADS:-16}

die() { echo "tokenreview.sh: $*" >&2; exit 1; }
show() { { printf '+'; printf ' %q' "$@"; printf '\n'; } >&2; } # stderr: a command's stdout may be redirected
run() { show "$@"; "$@"; }
for m in "${MODES[@]}"; do
  case $m in tokenreview | auto | jwks) ;; *) die "SIGNET_TR_MODES: unknown mode $m" ;; esac
done

# shellcheck source=perf/lib.sh
. perf/lib.sh
tmp=$(perf_tmpdir signet-tokenreview)
pids=()
# shellcheck disable=SC2317  # called by the trap
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  tests/kube/apiserver.sh stop "$tmp/api" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

machine() {
  echo "machine: nproc=$(nproc)  cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
  echo "         kernel=$(uname -r)  load average=$(cut -d' ' -f1-3 /proc/loadavg)  ($1)"
}

echo "== TokenReview, auto and JWKS, a token per request: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
machine "before the build"

# ---- 1. build ------------------------------------------------------------
echo "== build"
run cmake -S . -B build-perf -DCMAKE_BUILD_TYPE=Release -DSIGNET_BUILD_PERF=ON -DSIGNET_BUILD_TESTS=OFF >/dev/null
run cmake --build build-perf -j"$(nproc)" --target signetd signetctl loadgen >/dev/null
SIGNETD=${SIGNET_TR_SIGNETD:-$repo/build-perf/daemon/signetd}
[ -x "$SIGNETD" ] || { echo "SIGNET_TR_SIGNETD: no program at $SIGNETD" >&2; exit 2; }
echo "   signetd: $SIGNETD"
SIGNETCTL=$repo/build-perf/ctl/signetctl
LOADGEN=$repo/build-perf/perf/loadgen
run tests/kube/build-apiserver.sh >/dev/null

# ---- 2. the API server and the token pools ---------------------------------
echo "== kube-apiserver"
mkdir "$tmp/api"
run tests/kube/apiserver.sh start "$tmp/api" >/dev/null
# shellcheck disable=SC1091
. "$tmp/api/env"
export KUBE_APISERVER KUBE_TOKEN_FILE KUBE_CA_FILE
# One pool per mode and round, and one per round for the plain client. Each
# pool's --ttl starts past the previous pool's last expiry, so no two tokens
# of the whole run share an exp (TokenRequest tokens carry no jti: two made
# in the same second with the same exp would be the same token).
POOL=$((W + N))
echo "== token pools: $POOL TokenRequest tokens each, bench/bench"
k=0
for r in $(seq "$ROUNDS"); do
  for m in plain "${MODES[@]}"; do
    run /usr/bin/python3 perf/tokenpool.py tokenrequest --out "$tmp/pool.$m.$r" --count "$POOL" \
      --namespace bench --service-account bench --ttl $((3600 + k * POOL)) --jobs 2 >/dev/null
    k=$((k + 1))
  done
done

# ---- 3. two signetd ----------------------------------------------------------
echo "== signet CA and a signetd per mode"
run "$SIGNETCTL" init --dir "$tmp/signet" --key-type ecdsa-p256 --log-level warn >/dev/null
# Without init's development token issuer: here the tokens are the API server's.
conf=$tmp/signet/kube.conf
echo "+ grep -v '^jwt-' $tmp/signet/signet.conf > $conf"
grep -v '^jwt-' "$tmp/signet/signet.conf" >"$conf"
declare -A port pid metrics
start_signetd() { # MODE
  local mode=$1 log=$tmp/signetd.$1.log p=
  local cmd=("$SIGNETD" --config "$conf" --serving-address 127.0.0.1:0 --http-address 127.0.0.1
             --metrics-port 0 --readiness-probe-port 0 --log-format json --kubeconfig "$KUBECONFIG"
             --token-authenticator "$mode" --root-ca-configmap=false)
  show "${cmd[@]}"
  "${cmd[@]}" >"$log" 2>&1 &
  pids+=($!)
  pid[$mode]=$!
  for _ in $(seq 600); do
    kill -0 "${pid[$mode]}" 2>/dev/null || { cat "$log" >&2; die "signetd ($mode) exited"; }
    p=$(python3 - "$log" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    try:
        rec = json.loads(line)
    except ValueError:
        continue
    if rec.get("msg") == "signetd serving":
        print(rec["port"], rec["metrics_port"])
        break
EOF
)
    [ -n "$p" ] && break
    sleep 0.1
  done
  [ -n "$p" ] || { cat "$log" >&2; die "signetd ($mode) did not start within 60 s"; }
  port[$mode]=${p% *}
  metrics[$mode]=${p#* }
  echo "signetd ($mode) serving on 127.0.0.1:${port[$mode]} (pid ${pid[$mode]})"
}
for m in "${MODES[@]}"; do start_signetd "$m"; done

metric() { # MODE NAME
  curl -s "http://127.0.0.1:${metrics[$1]}/metrics" | awk -v n="$2" '$1 == n {print $2}'
}

# ---- 4. closed loop, alternating ------------------------------------------
status=0
# The API server's own TokenReview rate: perf/apireviews.py, a plain client
# (PLAIN_THREADS threads, a keep-alive connection each, one review per token
# of the round's own pool, every answer checked).
plain() { # ROUND
  local out=$tmp/plain.$1.json
  echo "== round $1: the API server alone, $PLAIN_THREADS threads  (load average $(cut -d' ' -f1 /proc/loadavg))"
  run /usr/bin/python3 perf/apireviews.py --pool "$tmp/pool.plain.$1" --threads "$PLAIN_THREADS" >"$out" || status=1
  python3 - "$out" <<'EOF'
import json, sys
text = open(sys.argv[1]).read().strip()
if text:
    r = json.loads(text.splitlines()[-1])
    print(f"   {r['ok']} reviews ok, {r['failed']} failed, {r['elapsed_s']:.2f} s -> {r['reviews_per_s']:.1f} reviews/s")
EOF
}
# signetd's CPU time in clock ticks (utime + stime of /proc/PID/stat).
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
loadgen() { # MODE ROUND
  local mode=$1 out=$tmp/$1.$2.json t0 t1
  echo "== round $2: $mode  (load average $(cut -d' ' -f1 /proc/loadavg))"
  local cmd=("$LOADGEN" --target "grpc://127.0.0.1:${port[$mode]}" --token-dir "$tmp/pool.$mode.$2"
             --ca-file "$tmp/signet/root-cert.pem" --server-name localhost
             --connections "$C" --concurrency "$M"
             --requests "$N" --duration "$D" --warmup "$W" --json)
  show "${cmd[@]}"
  t0=$(cpu_ticks "${pid[$mode]}")
  if ! "${cmd[@]}" >"$out" 2>"$out.err"; then
    status=1
    echo "   loadgen FAILED: $(tail -1 "$out.err")"
  fi
  t1=$(cpu_ticks "${pid[$mode]}")
  python3 - "$out" "$((t1 - t0))" "$(getconf CLK_TCK)" <<'EOF'
import json, sys
text = open(sys.argv[1]).read().strip()
if text:
    r = json.loads(text.splitlines()[-1])
    t = r.get("tokens", {})
    n = r["sent"] + r["warmup_ok"]
    cpu = int(sys.argv[2]) / int(sys.argv[3])
    print(f"   {r['ok']} ok, {r['failed']} failed, {r['elapsed_s']:.2f} s -> {r['certs_per_s']:.1f} certs/s;"
          f" latency ms p50 {r['p50_ms']:.3f} p99 {r['p99_ms']:.3f} p99.9 {r['p999_ms']:.3f};"
          f" tokens {t.get('distinct')} distinct, pool wrapped {t.get('wraps')} times;"
          f" signetd CPU {cpu:.2f} s, {1000 * cpu / n:.3f} ms per request (warm-up included)")
EOF
}
for r in $(seq "$ROUNDS"); do
  plain "$r"
  for m in "${MODES[@]}"; do loadgen "$m" "$r"; done
done

echo "== summary (best of $ROUNDS rounds)"
python3 - "$tmp" "$ROUNDS" "${MODES[@]}" <<'EOF'
import json, sys
tmp, rounds, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def rate(name, r, key):
    try:
        return json.loads(open(f"{tmp}/{name}.{r}.json").read().strip().splitlines()[-1])[key]
    except (OSError, ValueError, IndexError, KeyError):
        return 0.0
rs = range(1, rounds + 1)
plain = [rate("plain", r, "reviews_per_s") for r in rs]
got = {m: [rate(m, r, "certs_per_s") for r in rs] for m in modes}
def share(a, b):
    return f"{a / b:.2f}" if b else "n/a"
def line(label, i):
    pick = (lambda xs: max(xs)) if i is None else (lambda xs: xs[i])
    text = f"   {label}: API server alone {pick(plain):.1f} reviews/s"
    for m in modes:
        text += f", {m} {pick(got[m]):.1f} certs/s"
    if "tokenreview" in got:
        text += f"; tokenreview / API server = {share(pick(got['tokenreview']), pick(plain))}"
    print(text)
for i, r in enumerate(rs):
    line(f"round {r}", i)
line("best", None)
EOF
for m in "${MODES[@]}"; do
  echo "   $m: TokenReviews sent to the API server: $(metric "$m" signet_tokenreview_requests_total)," \
       "cache hits: $(metric "$m" signet_tokenreview_cache_hits_total)," \
       "certificates: $(metric "$m" citadel_server_success_cert_issuance_count)"
done
machine "after the runs"
exit "$status"
