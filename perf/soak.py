#!/usr/bin/python3
"""The soak: signetd at a fraction of its maximum rate for a long time, with
its resources sampled, to show that nothing grows.

A leak that costs a few bytes per certificate, a descriptor per reconnect or
a PKCS#11 session per fault never shows in a 20-second benchmark; it shows
when the daemon has issued millions of certificates. This tool:

  1. makes a CA (`signetctl init`: P-256 key in a SoftHSM2 token private to a
     temp folder) and, with `--auth tokenreview`, starts the test API server
     (tests/kube/apiserver.sh: etcd + kube-apiserver 1.20 on loopback) and
     has it mint one istio-ca token for ServiceAccount soak/soak
     (TokenRequest); with `--auth jwt` (the default) the token is
     `signetctl token` from the development issuer;
  2. starts signetd on 127.0.0.1 with ephemeral ports (TLS with its own
     serving certificate, JSON log to a file: every certificate's audit line
     is written, as a CA must);
  3. measures the maximum rate with one short closed-loop loadgen run, then
     drives signetd open loop at `--fraction` (0.5) of it for `--minutes`.
     loadgen makes all its CSRs before its clock starts (one P-256 key
     each), so one run of 30 minutes would first spend minutes and
     gigabytes making CSRs; the soak is therefore consecutive loadgen runs
     of `--segment` (60 s) each, and each segment's requests, failures and
     latency percentiles are reported. Between segments signetd is idle for
     as long as loadgen needs to make the next segment's CSRs (the duty
     cycle is printed), and each segment opens new connections, as agents
     that reconnect do;
  4. samples every `--interval` (10 s), from /proc/PID/status and
     /proc/PID/fd, VmRSS, VmHWM, Threads and the open descriptors, and
     from /metrics signet_hsm_sessions, signet_grpc_connections and the
     issued count;
  5. prints the samples (one row a minute for long runs), the segments, and
     a verdict over the samples after the warm-up (`--warmup`: 2 minutes, or
     the first third of a run shorter than 6 minutes):
       * RSS growth: the least-squares slope over the samples times the
         time they span is within B = max(`--rss-pct` (5) % of the lowest
         sample, `--rss-mib` (4) MiB), and max - min within 2B. signetd
         links jemalloc, whose per-thread caches and 10-second purge of
         dirty pages make RSS follow the load of the moment: in a 30-minute
         run on a shared machine it moved between 32.5 and 39.9 MiB with
         the load average (correlation 0.74) while its slope was -0.55 MiB,
         and in a two-minute run max - min was 3.99 MiB. The slope averages
         that noise out (over 28 minutes of 10-s samples its standard error
         is 0.5-1 MiB, the samples being correlated), and a leak of one
         byte per certificate at 1,700 a second grows by 5.8 MiB an hour
         and shows in it. The range at 2B catches what a slope does not: a
         step or a spike;
       * VmHWM: does not rise after the warm-up by more than the RSS bound;
       * descriptors: those other than accepted gRPC and HTTP connections
         (each connection is one socket, and a segment opens its own),
         counting those open in three listings 50 ms apart (signetd opens
         some for microseconds; see fd_census), constant, and with no
         connection open, the same before the soak and after it;
       * signetd's own threads and HSM sessions: constant, apart from the
         signer pool's grown workers (a thread and a session each). The
         pool adds workers while requests queue behind busy ones and the
         HSM makes signatures wait off CPU (signer/sg_pool.c), which a
         loaded machine can show even with SoftHSM2 (the suite at -j4 grew
         it from 2 to 3 workers 50 s into the two-minute run), and lets them
         go when idle. So the workers above the base
         (signet_signer_threads - signet_signer_threads_base) are taken out
         of both counts, and the pool is only bounded by its own maximum
         (signet_signer_threads_max). gRPC's pools
         (threads named event_engine, grpc_global_tim(er),
         default-executo(r), resolver-execut(or), timer_manager) are
         elastic by design: gRPC starts a thread when all of a pool's are
         busy (a CPU-starved machine: a soak beside a compile went from 5
         to 7) and lets idle ones go. They are counted apart and only
         bounded: at most GRPC_POOL_SLACK_PER_CPU per CPU above their count
         at rest before the soak, which a leak of a thread per connection
         or per request passes within a segment;
       * zero failed requests, every segment's requests all answered, and
         signetd's issued count equal to what the clients got;
     and exits 0 only when all of these hold.

Everything runs on loopback, every loadgen run and every wait is bounded in
time, and what was started (signetd, the API server) is stopped in a
`finally` by pid (TERM, then KILL). `--json-out FILE` writes the samples,
segments and verdict for a test to check (tests/daemon/test_soak.py runs
two minutes of it in the release build's suite).

usage: perf/soak.py [--minutes 30] [--auth jwt|tokenreview] [--signetd PATH]
                    [--signetctl PATH] [--loadgen PATH] ...    (--help: all)
"""
import argparse
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "ra"))
import signet_e2e  # noqa: E402

MIB = 1024 * 1024


def duration(text):
    """'60s', '2m', '1m30s' or a bare number of seconds, as a float."""
    m = re.fullmatch(r"(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?", text.strip())
    if not text.strip() or not m or (m.group(1) is None and m.group(2) is None):
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 60s, 2m, 1m30s)")
    return float(m.group(1) or 0) * 60 + float(m.group(2) or 0)


def positive(kind):
    def parse(text):
        v = kind(text)
        if v <= 0:
            raise argparse.ArgumentTypeError(f"must be positive: {text}")
        return v
    return parse


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="soak.py", description="signetd open loop at a fraction of its maximum rate for a long time, "
        "with RSS, descriptors, threads and HSM sessions sampled; prints a verdict on their flatness.")
    b = os.path.join(REPO, "build-perf")
    p.add_argument("--signetd", default=os.path.join(b, "daemon", "signetd"), help="signetd binary [%(default)s]")
    p.add_argument("--signetctl", default=os.path.join(b, "ctl", "signetctl"), help="signetctl binary [%(default)s]")
    p.add_argument("--loadgen", default=os.path.join(b, "perf", "loadgen"), help="loadgen binary [%(default)s]")
    p.add_argument("--minutes", type=positive(float), default=30.0,
                   help="how long the soak lasts, in minutes of wall time (fractions allowed), the gaps while "
                   "loadgen makes the next segment's CSRs included [%(default)s]")
    p.add_argument("--auth", choices=("jwt", "tokenreview"), default="jwt",
                   help="jwt: the development issuer's token, verified locally; tokenreview: an API server's "
                   "token, reviewed by the test API server (tests/kube/apiserver.sh) [%(default)s]")
    p.add_argument("--fraction", type=positive(float), default=0.5,
                   help="open-loop rate as a fraction of the measured maximum [%(default)s]")
    p.add_argument("--rate", type=int, default=0,
                   help="open-loop rate in requests/s; skips the measurement of the maximum (0: measure) [%(default)s]")
    p.add_argument("--rate-cap", type=int, default=0,
                   help="never drive faster than this many requests/s (0: no cap) [%(default)s]")
    p.add_argument("--max-seconds", type=positive(int), default=10,
                   help="length of the closed-loop run that measures the maximum, seconds [%(default)s]")
    p.add_argument("--segment", type=duration, default=60.0,
                   help="length of each open-loop loadgen run (its CSRs are made before it starts) [60s]")
    p.add_argument("--interval", type=duration, default=10.0, help="sampling interval [10s]")
    p.add_argument("--warmup", type=duration, default=None,
                   help="samples before this are left out of the verdict [2m, or a third of runs under 6 minutes]")
    p.add_argument("--rss-pct", type=float, default=5.0,
                   help="RSS growth bound B after the warm-up, percent of the lowest sample (range: 2B) [%(default)s]")
    p.add_argument("--rss-mib", type=float, default=4.0,
                   help="RSS growth bound B after the warm-up, MiB, when larger than the percentage (range: 2B) "
                   "[%(default)s]")
    p.add_argument("--connections", type=positive(int), default=4, help="loadgen connections [%(default)s]")
    p.add_argument("--concurrency", type=positive(int), default=16,
                   help="loadgen calls outstanding per connection [%(default)s]")
    p.add_argument("--signer-threads", type=int, default=0,
                   help="signetd --signer-threads (0: signetd's default, one per CPU) [%(default)s]")
    p.add_argument("--signetd-arg", action="append", default=[], metavar="ARG",
                   help="one more argument for signetd (repeatable), e.g. --signetd-arg=--grpc-threads=1")
    p.add_argument("--apiserver-script", default=os.path.join(REPO, "tests", "kube", "apiserver.sh"),
                   help="the test API server's script (--auth tokenreview) [%(default)s]")
    p.add_argument("--tmp", default=os.environ.get("SIGNET_TEST_TMP") or None,
                   help="parent of the temp folder [$SIGNET_TEST_TMP, else the system's]")
    p.add_argument("--keep", action="store_true", help="keep the temp folder (CA, logs, loadgen output)")
    p.add_argument("--json-out", metavar="FILE", help="write samples, segments and verdict to FILE as JSON")
    p.add_argument("--table-every", type=duration, default=None,
                   help="print one sample row per this much time [60s; every sample in runs under 6 minutes]")
    a = p.parse_args(argv)
    run_s = a.minutes * 60
    if a.warmup is None:
        a.warmup = 120.0 if run_s >= 360 else run_s / 3
    if a.table_every is None:
        a.table_every = 60.0 if run_s >= 360 else a.interval
    if a.warmup >= run_s:
        p.error("--warmup must be shorter than the run (--minutes)")
    if a.segment < 5:
        p.error("--segment must be at least 5s")
    if a.interval < 1:
        p.error("--interval must be at least 1s")
    for name in ("signetd", "signetctl", "loadgen"):
        if not os.access(getattr(a, name), os.X_OK):
            p.error(f"--{name}: not an executable: {getattr(a, name)}")
    return a


def log(msg):
    print(f"[{time.strftime('%H:%M:%S', time.gmtime())}Z] {msg}", flush=True)


def show(cmd):
    print("+ " + " ".join(cmd), flush=True)


def loadavg():
    with open("/proc/loadavg") as f:
        return tuple(float(x) for x in f.read().split()[:3])


def machine():
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) // 1024
    return {"nproc": os.cpu_count(), "cpu": model, "kernel": os.uname().release, "mem_mib": mem}


# ---- the processes ----------------------------------------------------------

class Signetd:
    """signetd on loopback with ephemeral ports, read from its JSON log
    (with tests/ra/signet_e2e.py's wait_serving). The log goes to a file, as a
    CA's audit trail does: at 1,700 certificates a second that is about 2 GB
    an hour, which the temp folder holds until the end (log_summary reads it
    then)."""

    def __init__(self, binary, conf, flags, env, log_path):
        self.log_path = log_path
        self.log = open(log_path, "w")
        cmd = [binary, "--config", conf, "--serving-address", "127.0.0.1:0", "--http-address", "127.0.0.1",
               "--metrics-port", "0", "--readiness-probe-port", "0", "--log-format", "json", *flags]
        show(cmd)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.pid = self.proc.pid
        self.port = self.metrics_port = None
        rec = signet_e2e.wait_serving(self.proc, self.records)
        if rec is None:
            if self.proc.poll() is not None:
                raise RuntimeError("signetd exited:\n" + self.head())
            raise RuntimeError("signetd did not start within 60 s:\n" + self.head())
        self.port, self.metrics_port = rec["port"], rec["metrics_port"]
        self.probe_port = rec.get("probe_port")

    def records(self):
        """The log's JSON records (read whole: for the start only)."""
        with open(self.log_path) as f:
            return signet_e2e.json_records(f)

    def head(self, n=40):
        with open(self.log_path) as f:
            return "".join(f.readline() for _ in range(n))

    def metrics(self):
        """The unlabelled series of /metrics as {name: value}; labelled ones
        summed under their name."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            name_labels, _, value = line.rpartition(" ")
            name = name_labels.split("{", 1)[0]
            try:
                out[name] = out.get(name, 0.0) + float(value)
            except ValueError:
                pass
        return out

    def stop(self):
        """TERM, then KILL after 60 s; the exit status."""
        code = signet_e2e.stop_process(self.proc)
        self.log.close()
        return code

    def log_summary(self):
        """Counts of the log's records by level, the audit lines, and the
        first few records that are neither info nor an audit line."""
        levels, audit, odd = {}, 0, []
        with open(self.log_path, errors="replace") as f:
            for line in f:
                if '"certificate issued"' in line:
                    audit += 1
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    rec = {"level": "?", "msg": line.strip()[:200]}
                lv = str(rec.get("level", "?"))
                levels[lv] = levels.get(lv, 0) + 1
                if lv not in ("info", "debug") and len(odd) < 20:
                    odd.append(line.strip()[:300])
        return {"levels": levels, "audit_lines": audit, "warnings": odd}


class ApiServer:
    """tests/kube/apiserver.sh in a folder of its own, stopped in `stop`."""

    def __init__(self, script, folder):
        self.script, self.dir = script, folder
        os.mkdir(folder)
        cmd = [script, "start", folder]
        show(cmd)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=300)
        self.env = {}
        with open(os.path.join(folder, "env")) as f:
            for line in f:
                k, sep, v = line.strip().partition("=")
                if sep:
                    self.env[k] = v
        with open(self.env["KUBE_TOKEN_FILE"]) as f:
            self.admin = f.read().strip()
        self.ctx = ssl.create_default_context(cafile=self.env["KUBE_CA_FILE"])

    def call(self, method, path, body):
        req = urllib.request.Request(self.env["KUBE_APISERVER"] + path, method=method, data=json.dumps(body).encode(),
                                     headers={"Authorization": "Bearer " + self.admin,
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, context=self.ctx, timeout=30) as r:
            return json.loads(r.read())

    def token(self, ns, sa, seconds):
        """A TokenRequest for ns/sa, audience istio-ca."""
        self.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        self.call("POST", f"/api/v1/namespaces/{ns}/serviceaccounts",
                  {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}})
        r = self.call("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token",
                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                       "spec": {"audiences": ["istio-ca"], "expirationSeconds": seconds}})
        return r["status"]["token"]

    def stop(self):
        subprocess.run([self.script, "stop", self.dir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=120)


def write_secret(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


# ---- sampling ---------------------------------------------------------------

# gRPC core's thread pools, by the names it gives their threads (Linux
# keeps 15 bytes of a name): elastic by design, so counted apart from
# signetd's own threads (see the verdict above).
GRPC_POOL_THREADS = ("event_engine", "grpc_global_tim", "default-executo", "resolver-execut", "timer_manager")
GRPC_POOL_SLACK_PER_CPU = 4


def thread_census(pid):
    """(signetd's own threads, gRPC's pool threads) of pid, by name."""
    own = pool = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:  # ended meanwhile
            continue
        if name in GRPC_POOL_THREADS:
            pool += 1
        else:
            own += 1
    return own, pool


def proc_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) * 1024
            elif k == "Threads":
                out[k] = int(v)
    return out


def sockets_by_inode():
    """{inode: (local port, TCP state)} for every TCP socket of the host."""
    out = {}
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    p = line.split()
                    out[p[9]] = (int(p[1].rsplit(":", 1)[1], 16), int(p[3], 16))
        except OSError:
            pass
    return out


TCP_LISTEN = 0x0A


def fd_census_once(pid, grpc_port, http_ports):
    """The process's descriptors in three groups: accepted gRPC connections
    (TCP sockets on the serving port, not the listener), accepted HTTP
    connections (on the metrics and probe ports: the sampler's own /metrics
    requests, which libmicrohttpd may not have closed yet), and the rest
    (files, pipes, eventfds, listeners, its own client connections). Only
    the rest has to stay constant: the other two follow the clients."""
    # The TCP tables are read before and after the descriptors: a
    # connection accepted between the first read and the listing is in the
    # second, one closed after the listing in the first. (With one read
    # before, a connection accepted meanwhile counted as "rest": one sample
    # in 181 of a 30-minute run showed 12 instead of 11.)
    socks = sockets_by_inode()
    targets = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            targets.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:  # closed meanwhile
            continue
    socks.update(sockets_by_inode())
    grpc = http = 0
    rest = []
    for target in targets:
        m = re.fullmatch(r"socket:\[(\d+)\]", target)
        port, state = socks.get(m.group(1), (None, None)) if m else (None, None)
        if port == grpc_port and state != TCP_LISTEN:
            grpc += 1
        elif port in http_ports and state != TCP_LISTEN:
            http += 1
        elif m:  # named by what it is, so that a sample that differs says what the extra one was
            rest.append("socket:?" if port is None else f"tcp:{port}:{'listen' if state == TCP_LISTEN else state}")
        else:
            rest.append(re.sub(r"\[\d+\]$", "", target))
    return grpc, http, rest


def fd_census(pid, grpc_port, http_ports, reads=3, gap=0.05, wait=time.sleep):
    """fd_census_once's groups, with the rest split into the resident
    descriptors (in each of `reads` listings `gap` seconds apart) and the
    transient ones (in the first listing but not in all). signetd opens
    some descriptors for microseconds: the signer's sampled reads of
    /proc/thread-self/schedstat (hsm/sg_hsm.c), and an accepted connection
    that its client reset is out of the TCP tables ("socket:?") until the
    server closes it. A listing that caught one of those counted it as
    resident: one sample of a suite run showed 12 instead of 11, and
    listing signetd's descriptors every 5 ms through a soak found both
    kinds. A leaked descriptor
    stays open and is in every listing. The connection counts are the
    first listing's. (`wait` lets a test act between the listings.)"""
    grpc, http, rest = fd_census_once(pid, grpc_port, http_ports)
    resident = Counter(rest)
    for _ in range(reads - 1):
        wait(gap)
        resident &= Counter(fd_census_once(pid, grpc_port, http_ports)[2])
    transient = Counter(rest) - resident
    return grpc, http, sorted(resident.elements()), sorted(transient.elements())


class Sampler(threading.Thread):
    """Every interval, one row: seconds since the soak began, whether a
    loadgen run was going on, the process's RSS, HWM, threads and
    descriptors (in fd_census's groups), and from /metrics the HSM sessions,
    gRPC connections and certificates issued."""

    def __init__(self, d, interval, t0, phase, every=0.0):
        super().__init__(daemon=True)
        self.d, self.interval, self.t0, self.phase, self.every = d, interval, t0, phase, every
        self.rows, self.errors = [], []
        self.stop_ev = threading.Event()

    def sample(self):
        # The signer pool's size is read before and after the process's
        # threads, and the sample taken again when a worker came or went in
        # between: the threads and sessions are then counted with the pool
        # at the size the metric says.
        for _ in range(5):
            m = self.d.metrics()
            grpc, http, rest, transient = fd_census(self.d.pid, self.d.port,
                                                    (self.d.metrics_port, self.d.probe_port))
            st = proc_status(self.d.pid)
            own, pool = thread_census(self.d.pid)
            m2 = self.d.metrics()
            if (m.get("signet_signer_threads") == m2.get("signet_signer_threads")
                    and m.get("signet_hsm_sessions") == m2.get("signet_hsm_sessions")):
                break
        signer = int(m.get("signet_signer_threads", 0))
        signer_base = int(m.get("signet_signer_threads_base", signer))
        return {"t": round(time.time() - self.t0, 1), "phase": self.phase[0], "rss": st["VmRSS"],
                "hwm": st["VmHWM"], "threads": own, "grpc_threads": pool, "fds": grpc + http + len(rest),
                "conns": grpc,
                "http": http, "fds_base": len(rest), "rest_fds": rest,
                "transient_fds": transient,
                "grpc_conns_metric": int(m.get("signet_grpc_connections", -1)),
                "sessions": int(m.get("signet_hsm_sessions", -1)),
                "signer": signer, "signer_base": signer_base,
                "signer_max": int(m.get("signet_signer_threads_max", signer)),
                "issued": int(m.get("citadel_server_success_cert_issuance_count", 0)),
                "hsm_faults": int(m.get("signet_hsm_faults_total", 0)),
                "reviews": int(m.get("signet_tokenreview_requests_total", 0)),
                "load1": loadavg()[0]}

    def run(self):
        nxt = time.time()
        shown = None
        while not self.stop_ev.is_set():
            try:
                r = self.sample()
                self.rows.append(r)
                if self.every and (shown is None or r["t"] - shown >= self.every - 0.5):
                    shown = r["t"]  # a progress line: a long run shows its figures as it goes
                    log(f"sample t={r['t']:.0f}s RSS {r['rss'] / MIB:.1f} MiB HWM {r['hwm'] / MIB:.1f} MiB threads "
                        f"{r['threads']}+{r['grpc_threads']} fds {r['fds']} (grpc {r['conns']}, rest {r['fds_base']}"
                        f"{', passing ' + ' '.join(r['transient_fds']) if r['transient_fds'] else ''}) sessions "
                        f"{r['sessions']} (signer pool {r['signer']}) issued {r['issued']} reviews {r['reviews']} load {r['load1']:.2f}")
            except (OSError, KeyError, ValueError) as e:  # recorded, and fails the verdict
                self.errors.append(f"{time.time() - self.t0:.1f}s: {e}")
            nxt += self.interval
            self.stop_ev.wait(max(0.0, nxt - time.time()))

    def finish(self):
        self.stop_ev.set()
        self.join(30)


# ---- loadgen ----------------------------------------------------------------

def loadgen(a, d, token, root, identity, extra, out_path, timeout):
    cmd = [a.loadgen, "--target", f"grpc://127.0.0.1:{d.port}", "--token-file", token, "--ca-file", root,
           "--server-name", "localhost", "--identity", identity, "--connections", str(a.connections),
           "--concurrency", str(a.concurrency), "--timeout", "10s", "--json", *extra]
    show(cmd)
    with open(out_path, "w") as out, open(out_path + ".err", "w") as err:
        p = subprocess.run(cmd, stdout=out, stderr=err, timeout=timeout)
    with open(out_path) as f:
        lines = f.read().strip().splitlines()
    if not lines:
        with open(out_path + ".err") as f:
            raise RuntimeError(f"loadgen printed nothing (exit {p.returncode}): {f.read()[-2000:]}")
    r = json.loads(lines[-1])
    r["exit"] = p.returncode
    return r


# ---- the verdict --------------------------------------------------------------

def slope(xs, ys):
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0


def verdict(a, rows, segments, idle_before, idle_after, issued_delta, sampler_errors):
    """[(check, ok, detail)] over the samples after the warm-up."""
    after = [r for r in rows if r["t"] >= a.warmup]
    checks = []

    def check(name, ok, detail):
        checks.append({"check": name, "ok": bool(ok), "detail": detail})

    check("samples", len(after) >= 3 and not sampler_errors,
          f"{len(after)} samples after the {a.warmup:.0f} s warm-up, {len(rows)} in all"
          + (f"; sampling errors: {sampler_errors[:3]}" if sampler_errors else ""))
    if len(after) < 3:
        return checks
    rss = [r["rss"] for r in after]
    lo, hi = min(rss), max(rss)
    bound = max(lo * a.rss_pct / 100, a.rss_mib * MIB)
    span_s = after[-1]["t"] - after[0]["t"]
    growth = slope([r["t"] for r in after], rss) * span_s
    check("rss", growth <= bound,
          f"growth (least-squares slope x {span_s / 60:.1f} min) {growth / MIB:+.2f} MiB "
          f"({growth / MIB / span_s * 3600 if span_s else 0:+.2f} MiB/h), bound {bound / MIB:.2f} MiB = "
          f"max({a.rss_pct:g} % of {lo / MIB:.1f} MiB, {a.rss_mib:g} MiB)")
    check("rss_range", hi - lo <= 2 * bound,
          f"{lo / MIB:.1f}..{hi / MIB:.1f} MiB, range {(hi - lo) / MIB:.2f} MiB, bound {2 * bound / MIB:.2f} MiB "
          f"(twice the growth bound)")
    hwm = [r["hwm"] for r in after]
    check("hwm", hwm[-1] - hwm[0] <= bound,
          f"VmHWM {hwm[0] / MIB:.1f} -> {hwm[-1] / MIB:.1f} MiB after the warm-up")
    # The signer pool's grown workers (a thread and a session each) are
    # elastic by design: taken out of the counts, and bounded on their own.
    def grown(r):
        return max(0, r.get("signer", 0) - r.get("signer_base", 0))

    for key, what in (("fds_base", "descriptors other than accepted gRPC and HTTP connections"),
                      ("threads", "signetd's own threads"), ("sessions", "HSM sessions")):
        extra = (lambda r: 0) if key == "fds_base" else grown
        vals = sorted({r[key] - extra(r) for r in after})
        also = ""
        if key != "fds_base" and any(grown(r) for r in after):
            also = f" (less the signer pool's grown workers, {min(map(grown, after))}..{max(map(grown, after))})"
        which = ""
        if key == "fds_base" and len(vals) > 1 and all("rest_fds" in r for r in after):
            # Which descriptors came and went, against the samples' most
            # common set: a leak names itself.
            usual = Counter(Counter(tuple(r["rest_fds"]) for r in after).most_common(1)[0][0])
            diffs = []
            for r in after:
                plus, minus = Counter(r["rest_fds"]) - usual, usual - Counter(r["rest_fds"])
                if plus or minus:
                    diffs.append(f"t={r['t']:.0f}s" + "".join(f" +{d}" for d in sorted(plus.elements()))
                                 + "".join(f" -{d}" for d in sorted(minus.elements())))
            which = " (" + "; ".join(diffs[:5]) + ("; ..." if len(diffs) > 5 else "") + ")"
        check(key, len(vals) == 1 and vals[0] >= 0, f"{what}{also}: {vals if len(vals) > 1 else vals[0]}{which}")
    signer = [r.get("signer", 0) for r in after]
    signer_max = min(r.get("signer_max", r.get("signer", 0)) for r in after)
    signer_base = min(r.get("signer_base", r.get("signer", 0)) for r in after)
    check("signer_threads", max(signer) <= signer_max,
          f"signer pool {min(signer)}..{max(signer)} workers (elastic), base {signer_base}, bound {signer_max} "
          f"(signet_signer_threads_max)")
    pool = [r.get("grpc_threads", 0) for r in after]
    pool_rest = idle_before.get("grpc_threads", 0)
    pool_bound = pool_rest + GRPC_POOL_SLACK_PER_CPU * (os.cpu_count() or 1)
    check("grpc_threads", max(pool) <= pool_bound,
          f"gRPC's pool threads {min(pool)}..{max(pool)} (elastic), {pool_rest} at rest before, bound {pool_bound} "
          f"= that + {GRPC_POOL_SLACK_PER_CPU} per CPU")
    fds_all = sorted({r["fds"] for r in after})
    conns_all = sorted({r["conns"] for r in after})
    check("fds_idle", idle_before["fds_base"] == idle_after["fds_base"] and idle_after["conns"] == 0,
          f"descriptors at rest: {idle_before['fds_base']} before the soak, {idle_after['fds_base']} after, with "
          f"{idle_before['conns']} and {idle_after['conns']} gRPC connections; all descriptors under load "
          f"{fds_all[0]}..{fds_all[-1]} with {conns_all[0]}..{conns_all[-1]} connections")
    sent = sum(s["sent"] for s in segments)
    ok = sum(s["ok"] for s in segments)
    failed = sum(s["failed"] for s in segments)
    short = [s["index"] for s in segments if s["ok"] != s["requests"] or s["exit"] != 0]
    check("requests", failed == 0 and not short and ok > 0,
          f"{ok} ok, {failed} failed of {sent} sent in {len(segments)} segments"
          + (f"; segments short or failed: {short}" if short else ""))
    check("issued", issued_delta == ok, f"signetd counted {issued_delta} certificates issued, the clients got {ok}")
    return checks


# ---- printing ---------------------------------------------------------------

def fmt_rows(rows, every):
    out = ["     t  phase  RSS MiB  HWM MiB  threads  gRPC pool  fds  grpc  http  rest  sessions     issued  reviews  load1"]
    last = None
    for i, r in enumerate(rows):
        if last is not None and r["t"] - last < every - 0.5 and i != len(rows) - 1:
            continue
        last = r["t"]
        out.append(f"{r['t']:6.0f}  {r['phase'][:5]:5} {r['rss'] / MIB:8.1f} {r['hwm'] / MIB:8.1f} {r['threads']:8d} "
                   f"{r.get('grpc_threads', 0):10d} {r['fds']:4d} {r['conns']:5d} {r['http']:5d} {r['fds_base']:5d} {r['sessions']:9d} "
                   f"{r['issued']:10d} {r['reviews']:8d}  {r['load1']:5.2f}")
    return "\n".join(out)


def fmt_segments(segs):
    out = ["  seg  start s  rate/s  requests       ok  failed  late  certs/s   p50 ms   p99 ms p99.9 ms   max ms  load1"]
    for s in segs:
        out.append(f"{s['index']:5d} {s['start']:8.0f} {s['rate']:7d} {s['requests']:9d} {s['ok']:8d} {s['failed']:7d} "
                   f"{s['late_starts']:5d} {s['certs_per_s']:8.1f} {s['p50_ms']:8.2f} {s['p99_ms']:8.2f} "
                   f"{s['p999_ms']:8.2f} {s['max_ms']:8.1f}  {s['load1']:5.2f}")
    return "\n".join(out)


# ---- main ---------------------------------------------------------------------

def main(argv):
    a = parse_args(argv)
    # TERM (a test's timeout, kill PID) unwinds through the finally below,
    # which stops signetd and the API server.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    mach = machine()
    log(f"soak: {a.minutes:g} min, auth {a.auth}, machine nproc={mach['nproc']} cpu={mach['cpu']!r} "
        f"kernel={mach['kernel']} mem={mach['mem_mib']} MiB, load average {loadavg()}")
    tmp = tempfile.mkdtemp(prefix="signet-soak.", dir=a.tmp)
    d = api = sampler = None
    result = {"started": started, "machine": mach, "args": {k: v for k, v in vars(a).items()},
              "load_before": loadavg()}
    rc = 1
    try:
        ca = os.path.join(tmp, "ca")
        cmd = [a.signetctl, "init", "--dir", ca, "--key-type", "ecdsa-p256", "--log-level", "warn"]
        show(cmd)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=120)
        conf, root = os.path.join(ca, "signet.conf"), os.path.join(ca, "root-cert.pem")
        token = os.path.join(tmp, "token")
        # Standalone unless the API server is ours: no cluster of the caller's.
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
        flags = []
        # The token must outlive the run with room to spare (signetd refuses
        # an expired token; the TokenReview cache would not hide it).
        ttl_s = int(a.minutes * 60 + 1800)
        if a.auth == "jwt":
            identity = "spiffe://cluster.local/ns/default/sa/default"
            cmd = [a.signetctl, "token", "--config", conf, "--namespace", "default", "--service-account", "default",
                   "--ttl", f"{max(ttl_s, 3600)}s"]
            show(cmd + [">", token])
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=60).stdout
            write_secret(token, out)
        else:
            identity = "spiffe://cluster.local/ns/soak/sa/soak"
            api = ApiServer(a.apiserver_script, os.path.join(tmp, "api"))
            log(f"API server {api.env['KUBE_APISERVER']}; TokenRequest soak/soak (istio-ca, {ttl_s} s) > {token}")
            write_secret(token, api.token("soak", "soak", max(ttl_s, 3600)) + "\n")
            # The API server's tokens, not init's development issuer: as
            # perf/tokenreview.sh, the jwt- lines are left out.
            kconf = os.path.join(ca, "kube.conf")
            with open(conf) as f, open(kconf, "w") as g:
                g.writelines(line for line in f if not line.startswith("jwt-"))
            conf = kconf
            flags += ["--kubeconfig", api.env["KUBECONFIG"], "--token-authenticator", "tokenreview",
                      "--root-ca-configmap=false"]
        if a.signer_threads:
            flags += ["--signer-threads", str(a.signer_threads)]
        flags += a.signetd_arg
        d = Signetd(a.signetd, conf, flags, env, os.path.join(tmp, "signetd.log"))
        log(f"signetd pid {d.pid} serving on 127.0.0.1:{d.port}, metrics on {d.metrics_port}")
        base_issued = int(d.metrics().get("citadel_server_success_cert_issuance_count", 0))

        # ---- the maximum rate ----
        if a.rate:
            rate = a.rate
            result["max_rate"] = None
            log(f"rate given: {rate}/s")
        else:
            la = loadavg()
            r = loadgen(a, d, token, root, identity,
                        ["--requests", str(max(2000, a.max_seconds * 8000)), "--duration", f"{a.max_seconds}s",
                         "--warmup", "500"], os.path.join(tmp, "max.json"), a.max_seconds * 3 + 300)
            if r["failed"] or r["exit"]:
                raise RuntimeError(f"the closed-loop run failed: {r}")
            rate = max(1, int(r["certs_per_s"] * a.fraction))
            result["max_rate"] = {**{k: r[k] for k in ("ok", "warmup_ok", "failed", "certs_per_s", "p50_ms", "p99_ms",
                                                       "elapsed_s")},
                                  "load_before": la}
            log(f"maximum (closed loop, C={a.connections} x M={a.concurrency}, {r['elapsed_s']:.1f} s, load {la}): "
                f"{r['certs_per_s']:.1f} certs/s, p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms")
        if a.rate_cap and rate > a.rate_cap:
            log(f"rate {rate}/s capped at {a.rate_cap}/s (--rate-cap)")
            rate = a.rate_cap
        result["rate"] = rate
        max_ok = result["max_rate"]["ok"] + result["max_rate"]["warmup_ok"] if result["max_rate"] else 0

        # ---- idle, before ----
        time.sleep(2)  # the measurement's connections close
        phase = ["idle"]
        t0 = time.time()
        sampler = Sampler(d, a.interval, t0, phase, a.table_every)
        idle_before = sampler.sample()
        log(f"idle before: fds {idle_before['fds']}, connections {idle_before['conns']}, threads "
            f"{idle_before['threads']} (+{idle_before['grpc_threads']} in gRPC's pools), sessions {idle_before['sessions']}, RSS {idle_before['rss'] / MIB:.1f} MiB")

        # ---- the soak ----
        log(f"soak: {rate}/s open loop for {a.minutes:g} min in segments of {a.segment:.0f} s, sampled every "
            f"{a.interval:.0f} s, warm-up {a.warmup:.0f} s")
        sampler.start()
        segments, loaded_s = [], 0.0
        end = t0 + a.minutes * 60
        i = 0
        while True:
            left = end - time.time()
            if left < min(5.0, a.segment):
                break
            seg = min(a.segment, left)
            n = max(1, int(rate * seg))
            i += 1
            s_start, la = time.time(), loadavg()[0]
            # loadgen says nothing when its clock starts, so the samples'
            # phase is "load" for the whole run, CSR making included (the
            # grpc column tells which part: no connection yet), and the duty
            # cycle comes from loadgen's own elapsed time.
            phase[0] = "load"
            r = loadgen(a, d, token, root, identity,
                        ["--rate", str(rate), "--requests", str(n), "--duration", f"{int(seg) + 5}s", "--warmup", "0"],
                        os.path.join(tmp, f"seg{i}.json"), seg + 300)
            phase[0] = "idle"
            loaded_s += r.get("elapsed_s", 0.0)
            segments.append({"index": i, "start": round(s_start - t0, 1), "rate": rate, "requests": n,
                             "sent": r["sent"], "ok": r["ok"], "failed": r["failed"], "failures": r.get("failures"),
                             "late_starts": r["late_starts"], "certs_per_s": r["certs_per_s"],
                             "elapsed_s": r["elapsed_s"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"],
                             "p999_ms": r["p999_ms"], "max_ms": r["max_ms"], "exit": r["exit"], "load1": la,
                             "wall_s": round(time.time() - s_start, 1)})
            s = segments[-1]
            log(f"segment {i}: {s['ok']}/{n} ok, {s['failed']} failed, p50 {s['p50_ms']:.2f} p99 {s['p99_ms']:.2f} "
                f"p99.9 {s['p999_ms']:.2f} ms, {s['late_starts']} late, load {la:.2f}, wall {s['wall_s']:.0f} s")
        soak_s = time.time() - t0
        sampler.finish()
        time.sleep(2)  # the last segment's connections close
        idle_after = sampler.sample()
        issued_delta = idle_after["issued"] - base_issued - max_ok
        result.update({"samples": sampler.rows, "segments": segments, "idle_before": idle_before,
                       "idle_after": idle_after, "soak_s": round(soak_s, 1), "loaded_s": round(loaded_s, 1),
                       "load_after": loadavg()})
        checks = verdict(a, sampler.rows, segments, idle_before, idle_after, issued_delta, sampler.errors)
        result["verdict"] = checks

        print()
        print(f"== samples (every {a.table_every:.0f} s of {a.interval:.0f}-s samples; warm-up: first {a.warmup:.0f} s)")
        print(fmt_rows(sampler.rows, a.table_every))
        print()
        print(f"== segments ({len(segments)}; open loop at {rate}/s; duty cycle {loaded_s / soak_s * 100:.0f} %: "
              f"{loaded_s:.0f} s of {soak_s:.0f} s under load, the rest loadgen making CSRs)")
        print(fmt_segments(segments))
        lat = sorted(s["p99_ms"] for s in segments)
        print(f"   per-segment p99: median {lat[len(lat) // 2]:.2f} ms, worst {lat[-1]:.2f} ms")
        print()
        print("== verdict (after the warm-up)")
        for c in checks:
            print(f"  {'ok  ' if c['ok'] else 'FAIL'} {c['check']:9} {c['detail']}")
        rc = 0 if all(c["ok"] for c in checks) else 1
        print(f"== {'FLAT' if rc == 0 else 'NOT FLAT'}: load average {result['load_before']} before, "
              f"{result['load_after']} after")
    except Exception as e:  # reported, and the run fails
        result["error"] = f"{type(e).__name__}: {e}"
        print(f"soak.py: {result['error']}", file=sys.stderr)
        rc = 1
    finally:
        if sampler is not None and sampler.is_alive():
            sampler.finish()
        if d is not None:
            code = d.stop()
            summary = d.log_summary()
            result["signetd_exit"] = code
            result["log"] = summary
            print(f"signetd exited {code}; log: {summary['audit_lines']} audit lines, other records by level "
                  f"{summary['levels']}")
            for w in summary["warnings"]:
                print("  " + w)
            if code != 0:
                rc = 1
        if api is not None:
            api.stop()
        if a.json_out:
            with open(a.json_out, "w") as f:
                json.dump(result, f, indent=1)
        if a.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
