# shellcheck shell=bash
# Shell pieces the side-by-side scripts share (perf/ab.sh,
# perf/hsmlatency.sh), sourced after they set LOADGEN, CTL (signetctl),
# ROUNDS and the loadgen settings C (connections), M (concurrency per
# connection), N (requests), D (duration) and W (warm-up requests);
# perf/compare.sh and perf/tokenreview.sh source it for perf_tmpdir alone.

# perf_tmpdir NAME: makes a private directory (mode 0700) for a run's CA,
# logs and token pools and prints its path: under TMPDIR when that is set,
# else on /dev/shm when it is a writable RAM file system with 2 GiB free,
# else under /tmp. Why not simply /tmp: where /tmp is on disk, the kernel's
# flusher thread writes the tens of thousands of token files a run makes
# back to disk some 30 s later (the default expiry of dirty pages), in the
# middle of a measured run, and takes a vCPU for tens of milliseconds at a
# time: on a 2-vCPU machine each 10 s open-loop run had such a stall, and
# signet's p99 at 5,000/s was 57-868 ms instead of 4.5-13 (perf/README.md,
# section 2). Says so on stderr when it falls back to /tmp.
perf_tmpdir() {
  local base=${TMPDIR:-} free
  if [ -z "$base" ]; then
    base=/tmp
    free=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 }')
    if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] && [ -w /dev/shm ] && [ "${free:-0}" -ge 2097152 ]; then
      base=/dev/shm
    else
      echo "perf: /dev/shm is not a writable tmpfs with 2 GiB free; files under /tmp" \
        "(on disk, its write-back can stall measured runs; set TMPDIR to a RAM file system)" >&2
    fi
  fi
  mktemp -d "$base/$1.XXXXXX"
}

# perf_ticks PID: the process's user + system CPU so far, in clock ticks.
perf_ticks() { local f; read -ra f <"/proc/$1/stat"; echo $((f[13] + f[14])); }

# perf_token_pools DIR: DIR/pool.1 .. DIR/pool.ROUNDS, W + N tokens each
# from the development issuer of DIR/signet.conf (perf/tokenpool.py jwt),
# one pool per round. Each pool's tokens live past the previous one's, so
# no token is sent twice to the server of DIR.
perf_token_pools() {
  local r
  for r in $(seq "$ROUNDS"); do
    /usr/bin/python3 perf/tokenpool.py jwt --signetctl "$CTL" --config "$1/signet.conf" --out "$1/pool.$r" \
      --count $((W + N)) --ttl $((3600 + (r - 1) * (W + N))) >/dev/null
  done
}

# perf_run PID PORT DIR [POOL]: one closed-loop loadgen run against the
# signetd PID listening on PORT, with DIR/root-cert.pem and DIR/token, or a
# token per request from the token pool POOL (loadgen --token-dir). Prints its
# certificates/s, then a line for people: count, rate, p50, p99, the
# server's CPU per certificate and loadgen's (warm-up included: the CPU is
# counted over the whole run; loadgen's from its own report, without the
# CSRs it makes before it sends). loadgen shares the host's CPUs with the
# server, so a change in its CPU per certificate moves the rate too
# (perf/hsmlatency.sh counts it in the host's ceiling). Fails when a
# request failed.
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
      f" p99 {r['p99_ms']:.2f} ms, server CPU {1000 * cpu / max(done, 1):.3f} ms/cert,"
      f" loadgen CPU {1000 * r['cpu_s'] / max(done, 1):.3f} ms/cert")
PY
}
