#!/usr/bin/env bash
# Authenticated issuance in TokenReview mode against JWKS mode, side by side,
# in one run on one machine, with tokens a real API server minted.
#
#   perf/tokenreview.sh        (from anywhere; about 2 minutes after the build)
#
# What it does, printing every command line it runs:
#   1. builds release with jemalloc (build-perf: signetd, signetctl, loadgen)
#      and the test API server (tests/kube/build-apiserver.sh, cached);
#   2. starts etcd + kube-apiserver on 127.0.0.1 (tests/kube/apiserver.sh),
#      creates namespace and ServiceAccount "bench", and has the API server
#      mint one istio-ca token (TokenRequest, 1h) into a 0600 file;
#   3. makes a signet CA (P-256 key in SoftHSM2) and starts two signetd on
#      127.0.0.1 with the same CA: one with --token-authenticator
#      tokenreview, one with jwks (keys discovered from the API server, plus
#      the bound-token check); neither writes to the cluster;
#   4. drives them alternately with the same loadgen settings (closed loop,
#      one token repeated -- as an istio-agent does for an hour --, distinct
#      CSRs) and prints each run, the ratio tokenreview/jwks, and how many
#      TokenReviews the API server got for all those certificates.
#
# Bounds: every loadgen run has a maximum count and time; every wait is
# bounded; the exit trap stops what was started (by pid) and the API server.
# Knobs: SIGNET_TR_CONNECTIONS [4], SIGNET_TR_CONCURRENCY [16],
# SIGNET_TR_REQUESTS [20000], SIGNET_TR_DURATION [15s], SIGNET_TR_WARMUP [500],
# SIGNET_TR_ROUNDS [2].
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

C=${SIGNET_TR_CONNECTIONS:-4}
M=${SIGNET_TR_CONCURRENCY:-16}
N=${SIGNET_TR_REQUESTS:-20000}
D=${SIGNET_TR_DURATION:-15s}
W=${SIGNET_TR_WARMUP:-500}
ROUNDS=${SIGNET_TR_ROUNDS:-2}

die() { echo "tokenreview.sh: $*" >&2; exit 1; }
show() { printf '+'; printf ' %q' "$@"; printf '\n'; }
run() { show "$@"; "$@"; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/signet-tokenreview.XXXXXX")
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

echo "== TokenReview vs JWKS: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
machine "before the build"

# ---- 1. build ------------------------------------------------------------
echo "== build"
run cmake -S . -B build-perf -DCMAKE_BUILD_TYPE=Release -DSIGNET_BUILD_PERF=ON -DSIGNET_BUILD_TESTS=OFF >/dev/null
run cmake --build build-perf -j"$(nproc)" --target signetd signetctl loadgen >/dev/null
SIGNETD=$repo/build-perf/daemon/signetd
SIGNETCTL=$repo/build-perf/ctl/signetctl
LOADGEN=$repo/build-perf/perf/loadgen
run tests/kube/build-apiserver.sh >/dev/null

# ---- 2. the API server, an account, a token -------------------------------
echo "== kube-apiserver"
mkdir "$tmp/api"
run tests/kube/apiserver.sh start "$tmp/api" >/dev/null
# shellcheck disable=SC1091
. "$tmp/api/env"
api() { # METHOD PATH [BODY]: the admin token comes from its file, not argv
  curl -sS --fail-with-body --cacert "$KUBE_CA_FILE" -H @<(printf 'Authorization: Bearer %s\n' "$(cat "$KUBE_TOKEN_FILE")") \
    -H 'Content-Type: application/json' -X "$1" "$KUBE_APISERVER$2" ${3:+-d "$3"}
}
api POST /api/v1/namespaces '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"bench"}}' >/dev/null
api POST /api/v1/namespaces/bench/serviceaccounts \
  '{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"bench"}}' >/dev/null
echo "+ TokenRequest bench/bench (audience istio-ca, 1h) > $tmp/token (mode 0600)"
(umask 077 && api POST /api/v1/namespaces/bench/serviceaccounts/bench/token \
  '{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"audiences":["istio-ca"],"expirationSeconds":3600}}' |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["status"]["token"])' >"$tmp/token")

# ---- 3. two signetd ----------------------------------------------------------
echo "== signet CA and two signetd"
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
start_signetd tokenreview
start_signetd jwks

metric() { # MODE NAME
  curl -s "http://127.0.0.1:${metrics[$1]}/metrics" | awk -v n="$2" '$1 == n {print $2}'
}

# ---- 4. closed loop, alternating ------------------------------------------
status=0
loadgen() { # MODE ROUND
  local mode=$1 out=$tmp/$1.$2.json
  echo "== round $2: $mode  (load average $(cut -d' ' -f1 /proc/loadavg))"
  local cmd=("$LOADGEN" --target "grpc://127.0.0.1:${port[$mode]}" --token-file "$tmp/token"
             --ca-file "$tmp/signet/root-cert.pem" --server-name localhost
             --identity spiffe://cluster.local/ns/bench/sa/bench --connections "$C" --concurrency "$M"
             --requests "$N" --duration "$D" --warmup "$W" --json)
  show "${cmd[@]}"
  if ! "${cmd[@]}" >"$out" 2>"$out.err"; then
    status=1
    echo "   loadgen FAILED: $(tail -1 "$out.err")"
  fi
  python3 - "$out" <<'EOF'
import json, sys
text = open(sys.argv[1]).read().strip()
if text:
    r = json.loads(text.splitlines()[-1])
    print(f"   {r['ok']} ok, {r['failed']} failed, {r['elapsed_s']:.2f} s -> {r['certs_per_s']:.1f} certs/s;"
          f" latency ms p50 {r['p50_ms']:.3f} p99 {r['p99_ms']:.3f} p99.9 {r['p999_ms']:.3f}")
EOF
}
for r in $(seq "$ROUNDS"); do
  loadgen tokenreview "$r"
  loadgen jwks "$r"
done

echo "== summary (best of $ROUNDS rounds)"
python3 - "$tmp" "$ROUNDS" <<'EOF'
import json, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
def cps(mode, r):
    try:
        return json.loads(open(f"{tmp}/{mode}.{r}.json").read().strip().splitlines()[-1])["certs_per_s"]
    except (OSError, ValueError, IndexError, KeyError):
        return 0.0
t = [cps("tokenreview", r) for r in range(1, rounds + 1)]
j = [cps("jwks", r) for r in range(1, rounds + 1)]
for r in range(rounds):
    print(f"   round {r + 1}: tokenreview {t[r]:.1f} certs/s, jwks {j[r]:.1f} certs/s, ratio "
          + (f"{t[r] / j[r]:.2f}" if j[r] else "n/a"))
print(f"   best: tokenreview {max(t):.1f} / jwks {max(j):.1f} = " + (f"{max(t) / max(j):.2f}" if max(j) else "n/a"))
EOF
echo "   TokenReviews sent to the API server: $(metric tokenreview signet_tokenreview_requests_total)," \
     "cache hits: $(metric tokenreview signet_tokenreview_cache_hits_total)," \
     "certificates: $(metric tokenreview citadel_server_success_cert_issuance_count)"
machine "after the runs"
exit "$status"
