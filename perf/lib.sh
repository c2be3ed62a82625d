# shellcheck shell=bash
# Shell pieces the side-by-side scripts share (perf/ab.sh,
# perf/hsmlatency.sh), sourced after they set LOADGEN and the loadgen
# settings C (connections), M (concurrency per connection), N (requests),
# D (duration) and W (warm-up requests).

# perf_ticks PID: the process's user + system CPU so far, in clock ticks.
perf_ticks() { local f; read -ra f <"/proc/$1/stat"; echo $((f[13] + f[14])); }

# perf_run PID PORT DIR [POOL]: one closed-loop loadgen run against the
# signetd PID listening on PORT, with DIR/root-cert.pem and DIR/token, or a
# token per request from the token pool POOL (loadgen --token-dir). Prints its
# certificates/s, then a line for people: count, rate, p50, p99 and the
# server's CPU per certificate (warm-up included: the CPU is counted over
# the whole run). Fails when a request failed.
perf_run() {
  local pid=$1 port=$2 dir=$3 c0 c1 out tokens=(--token-file "$3/token")
  [ -n "${4:-}" ] && tokens=(--token-dir "$4")
  c0=$(perf_ticks "$pid")
  out=$("$LOADGEN" --target "grpc://127.0.0.1:$port" "${tokens[@]}" --ca-file "$dir/root-cert.pem" \
    --connections "$C" --concurrency "$M" --requests "$N" --duration "$D" --warmup "$W" --json | tail -1)
  c1=$(perf_ticks "$pid")
  python3 - "$out" "$((c1 - c0))" "$(getconf CLK_TCK)" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
cpu = int(sys.argv[2]) / float(sys.argv[3])
done = r["ok"] + r["warmup_ok"]
if r["failed"]:
    sys.exit(f"{r['failed']} requests failed")
print(f"{r['certs_per_s']:.1f} {r['ok']} ok, {r['certs_per_s']:.1f} certs/s, p50 {r['p50_ms']:.2f} ms,"
      f" p99 {r['p99_ms']:.2f} ms, server CPU {1000 * cpu / max(done, 1):.3f} ms/cert")
PY
}
