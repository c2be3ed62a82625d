#!/usr/bin/python3
"""signetd on a faulty HSM: p11_fault.so (tests/hsm/p11_fault.c) wraps
SoftHSM2 and is loaded through hsm-module; its control file is rewritten
while signetd serves real load (several grpcio clients in threads, each call
under a deadline), one fault at a time:

  * error codes on C_Sign (CKR_DEVICE_ERROR always, CKR_SESSION_HANDLE_INVALID
    and CKR_USER_NOT_LOGGED_IN now and then), and on every function
    (CKR_TOKEN_NOT_PRESENT, CKR_DEVICE_REMOVED: the HSM is down);
  * latency: a fixed delay on C_Sign with random spikes beyond the deadline;
  * a crash of SoftHSM2's state (C_Finalize + C_Initialize under signetd);
  * a C_Sign that hangs until released, while the others keep signing, and
    hangs on every signer thread (/readyz 503 once the pool is stuck);
  * C_Sign returning corrupt signatures, with verify-issued on;
  * the health probes: an idle token that hangs or fails, one failing past
    hsm-down-limit, and a busy one whose every call answers after the
    probe's timeout (ready and alive while it signs);
  * SIGTERM with a hung C_Sign outstanding (a bounded stop), SIGTERM with
    calls held in C_Sign and queued until the stop has begun (drained:
    served, exit status 0), and a clean SIGTERM after all the faults.

For every phase it asserts: every certificate returned verifies against the
root (`openssl verify -CAfile`, many files per run; the CA key is the root's
key, so this is also "signed by the CA key"); every failure carries a
retryable code (UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED) and
arrives no later than its deadline plus a margin; /readyz answers 503 while
the HSM is down and 200 again after; calls succeed again without a restart,
and the time that takes is measured. Half of the clients send a grpc-timeout,
half none (istio-agent sends none): those rely on signetd's server-timeout,
so a late answer there is signetd's own lateness, not grpcio's.

Figures per phase are printed, and written as Markdown to
$SIGNET_REL_REPORT when set. Sanitizer builds (SIGNET_SANITIZED=1, or a
sanitizer found in the binary) run fewer clients and longer deadlines.

usage: test_hsm_faults_daemon.py SIGNETCTL SIGNETD PROTO_DIR P11_FAULT_SO
"""
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

import grpc
from cryptography import x509

SIGNETCTL, SIGNETD, PROTO_DIR, FAULT_SO = sys.argv[1:5]
del sys.argv[1:5]

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ra"))
import signet_e2e  # noqa: E402
from signet_e2e import make_csr, read, spiffe  # noqa: E402


SANITIZED = signet_e2e.sanitized(SIGNETD)
CLIENTS = 3 if SANITIZED else 4
DEADLINE = 3.0 if SANITIZED else 1.5  # client grpc-timeout, seconds
SERVER_TIMEOUT = 3 if SANITIZED else 2  # signetd's server-timeout, seconds
MARGIN = 0.75 if SANITIZED else 0.35  # how late an answer may be past its deadline
FAULT_S = 3.0 if SANITIZED else 2.5  # how long each fault stays on
RECOVER_S = 30.0  # longest wait for recovery after a fault is cleared
WAIT_S = 60.0  # longest wait for any other state: it ends as soon as the state holds, so only a loaded
# machine (two cores, TSan, other tests beside it) ever uses much of it
PROBE_SLACK = 3.0 if SANITIZED else 1.5  # scheduling on a loaded machine, on top of a probe's own bound
UNREADY_SLACK = 10.0  # how long past a fault's hold /readyz may take to turn 503 on such a machine
CORRUPT_CALLS = 200  # calls under the corrupt-signature fault (a share of them is asserted)
# Signer threads: one may hang while the others serve. Fixed (hsm-max-sessions
# too): the pool would otherwise grow under the latency phases, and the
# hang phase needs every session of the pool hung.
THREADS = 3
GRACE = 2  # shutdown-grace, seconds
STOP_OVERRUN = 10  # signetd's STOP_OVERRUN_NS: how long a stop may run past the grace
PACE = 0.05 if SANITIZED else 0.02  # each client's pause between calls: every leaf is verified
RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}
METHOD = "/istio.v1.auth.IstioCertificateService/CreateCertificate"


class Call:
    __slots__ = ("t0", "t1", "code", "leaf", "deadline", "own", "details")

    def __init__(self, t0, t1, code, leaf, deadline, own, details):
        self.t0, self.t1, self.code, self.leaf, self.deadline = t0, t1, code, leaf, deadline
        self.own, self.details = own, details  # own: the client sent a grpc-timeout


class Load:
    """CLIENTS threads calling CreateCertificate back to back until stopped;
    even-numbered ones with a grpc-timeout of DEADLINE, odd ones with none
    (signetd's server-timeout applies; grpcio's timeout is only a safety net
    far beyond it)."""

    def __init__(self, t):
        self.t, self.calls, self.lock = t, [], threading.Lock()
        self.stop_ev = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(CLIENTS)]
        for th in self.threads:
            th.start()

    def run(self, i):
        stub = self.t.pb_grpc.IstioCertificateServiceStub(self.t.channel)
        md = [("authorization", f"Bearer {self.t.tok}"), ("clusterid", "Kubernetes")]
        k = 0
        while not self.stop_ev.is_set():
            req = self.t.pb.IstioCertificateRequest(csr=self.t.csrs[(i + k) % len(self.t.csrs)])
            k += 1
            own = i % 2 == 0
            deadline = DEADLINE if own else SERVER_TIMEOUT
            t0 = time.monotonic()
            try:
                resp = stub.CreateCertificate(req, metadata=md, timeout=deadline if own else SERVER_TIMEOUT + 5)
                c = Call(t0, time.monotonic(), grpc.StatusCode.OK, resp.cert_chain[0], deadline, own, "")
            except grpc.RpcError as e:
                c = Call(t0, time.monotonic(), e.code(), None, deadline, own, e.details() or "")
            with self.lock:
                self.calls.append(c)
            time.sleep(PACE)

    def stop(self):
        self.stop_ev.set()
        for th in self.threads:
            th.join(SERVER_TIMEOUT + 10)
            assert not th.is_alive(), "a client call never returned"
        return self.calls

    def count(self, pred):
        with self.lock:
            return sum(1 for c in self.calls if pred(c))


def probe(port, path):
    """The HTTP status of signetd's probe path, or None."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


class Ready:
    """/readyz polled every 50 ms: (time, status) samples."""

    def __init__(self, port):
        self.port, self.samples, self.stop_ev = port, [], threading.Event()
        self.th = threading.Thread(target=self.run, daemon=True)
        self.th.start()

    def status(self):
        return probe(self.port, "/readyz")

    def run(self):
        while not self.stop_ev.is_set():
            self.samples.append((time.monotonic(), self.status()))
            time.sleep(0.05)

    def between(self, a, b):
        return [s for t, s in self.samples if a <= t <= b]

    def close(self):
        self.stop_ev.set()
        self.th.join()


class HsmFaults(unittest.TestCase):
    report = []

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="hsmfaults.", dir=os.environ.get("SIGNET_TEST_TMP"))
        signet_e2e.compile_proto(PROTO_DIR, cls.tmp)
        import ca_pb2
        import ca_pb2_grpc
        cls.pb, cls.pb_grpc = ca_pb2, ca_pb2_grpc
        cls.dir = os.path.join(cls.tmp, "ca")
        cls.conf, cls.root_path = signet_e2e.init_ca(SIGNETCTL, cls.dir)
        cls.root = read(cls.root_path, "rb")
        cls.control = os.path.join(cls.tmp, "faults")
        cls.events = os.path.join(cls.tmp, "fault-events")
        cls.tok = signet_e2e.mint_token(SIGNETCTL, cls.conf)
        cls.csrs = [make_csr(spiffe("default", "default")) for _ in range(8)]
        cls.leaves = 0

    @classmethod
    def tearDownClass(cls):
        out = os.environ.get("SIGNET_REL_REPORT")
        if out and cls.report:
            with open(out, "w") as f:
                f.write("\n".join(cls.report) + "\n")
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # ---- plumbing ----------------------------------------------------------

    def set_faults(self, text):
        tmp = self.control + ".new"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.control)

    def start(self, name, *flags, grace=GRACE, server_timeout=SERVER_TIMEOUT):
        self.set_faults("")
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
        env.update(SIGNET_P11FAULT_CONTROL=self.control, SIGNET_P11FAULT_LOG=self.events)
        self.log_path = os.path.join(self.tmp, f"{name}.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [SIGNETD, "--config", self.conf, "--hsm-module", FAULT_SO, "--serving-address", "127.0.0.1:0",
             "--http-address", "127.0.0.1", "--metrics-port", "0", "--readiness-probe-port", "0",
             "--log-format", "json", "--signer-threads", str(THREADS), "--hsm-max-sessions", str(THREADS),
             "--server-timeout", f"{server_timeout}s",
             "--shutdown-grace", f"{grace}s", *flags],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.addCleanup(self.kill)
        rec = signet_e2e.wait_serving(self.proc, self.records)
        if rec is None:
            self.assertIsNone(self.proc.poll(), self.text())
        self.assertIsNotNone(rec, self.text())
        self.port, self.probe_port = rec["port"], rec["probe_port"]
        creds = grpc.ssl_channel_credentials(root_certificates=self.root)
        self.channel = grpc.secure_channel(f"127.0.0.1:{self.port}", creds,
                                           options=[("grpc.ssl_target_name_override", "localhost")])
        self.addCleanup(self.channel.close)
        self.ready = Ready(self.probe_port)
        self.addCleanup(self.ready.close)
        self.wait_until("signetd ready (/readyz 200)", lambda: self.ready.status() == 200)

    def kill(self):
        self.set_faults("")  # releases any hang, so that a stop can finish
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        self.no_sanitizer_report()

    def no_sanitizer_report(self):
        text = self.text()
        for mark in ("WARNING: ThreadSanitizer", "ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                     "runtime error:"):
            self.assertNotIn(mark, text, text[text.find(mark) - 200:][:4000])

    def stop_clean(self):
        """SIGTERM with nothing hung: a clean stop, exit status 0."""
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(GRACE + STOP_OVERRUN + 10)
        self.assertEqual(rc, 0, self.text()[-3000:])
        self.no_sanitizer_report()

    def sigterm(self):
        """SIGTERM: signetd's exit status (None when it did not end within
        shutdown-grace + the stop's overrun + 10 s) and how long it took."""
        t = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(GRACE + STOP_OVERRUN + 10)
        except subprocess.TimeoutExpired:
            rc = None
        return rc, time.monotonic() - t

    def text(self):
        return read(self.log_path)

    def records(self):
        return signet_e2e.json_records(self.text().splitlines())

    def wait_until(self, what, cond, timeout=WAIT_S):
        """Polls cond until it is true (returned), failing after timeout s."""
        t = time.monotonic()
        while True:
            v = cond()
            if v:
                return v
            if time.monotonic() - t > timeout:
                self.fail(f"{what}: not within {timeout:.0f}s\n" + self.text()[-3000:])
            time.sleep(0.02)

    def flowing(self, load):
        """Waits until the load's calls are answered: every client had one
        certificate, so a fault that follows meets calls in flight."""
        self.wait_until("calls answered before the fault", lambda: load.count(
            lambda c: c.code == grpc.StatusCode.OK) >= CLIENTS)

    def wait_event(self, prefix, since, timeout=WAIT_S):
        def seen():
            return os.path.exists(self.events) and any(
                line.startswith(prefix) for line in read(self.events).splitlines()[since:])
        self.wait_until(f"fault event {prefix!r}", seen, timeout)

    def event_count(self):
        return len(read(self.events).splitlines()) if os.path.exists(self.events) else 0

    def verify(self, leaves):
        """Every leaf verifies against the root: one openssl run per 400."""
        for i in range(0, len(leaves), 400):
            batch = leaves[i:i + 400]
            files = []
            for j, pem in enumerate(batch):
                p = os.path.join(self.tmp, f"leaf.{j}.pem")
                with open(p, "w") as f:
                    f.write(pem)
                files.append(p)
            v = subprocess.run(["openssl", "verify", "-CAfile", self.root_path, *files], capture_output=True,
                               text=True)
            self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
            self.assertEqual(v.stdout.count(": OK\n"), len(files), v.stdout)
        HsmFaults.leaves += len(leaves)

    def check_calls(self, name, calls, retryable=RETRYABLE):
        """Every certificate verifies; every failure is retryable and on time."""
        self.verify([c.leaf for c in calls if c.code == grpc.StatusCode.OK])
        late = []
        for c in calls:
            if c.code == grpc.StatusCode.OK:
                continue
            self.assertIn(c.code, retryable, f"{name}: {c.code} {c.details}")
            if c.t1 - c.t0 > c.deadline + MARGIN:
                late.append((round(c.t1 - c.t0, 3), c.deadline, c.code.name, c.details))
        self.assertFalse(late, f"{name}: failures later than deadline + {MARGIN}s: {late[:5]}")

    def phase(self, name, faults, expect_unready=False, expect_fail=True, hold=FAULT_S, min_during=0):
        """Load until calls are answered, the faults on for hold s (longer
        when expect_unready, until /readyz said 503, and until min_during
        calls started meanwhile were answered), then clean until a call
        succeeds again; asserts and returns the figures."""
        load = Load(self)
        self.flowing(load)
        t_on = time.monotonic()
        self.set_faults(faults)
        # The fault's length is the scenario (an outage of hold s), not a
        # wait for a state, so it is a fixed time; what it must bring about
        # is waited for after it. /readyz turns 503 at a housekeeping tick
        # once the HSM layer has seen the outage: on a loaded machine that
        # can come later than hold, but not UNREADY_SLACK later.
        time.sleep(hold)
        if expect_unready:
            while 503 not in self.ready.between(t_on, time.monotonic()) \
                    and time.monotonic() - t_on < hold + UNREADY_SLACK:
                time.sleep(0.05)
        if min_during:
            self.wait_until(f"{name}: {min_during} calls answered under the fault", lambda: load.count(
                lambda c: c.t0 >= t_on) >= min_during)
        t_off = time.monotonic()
        self.set_faults("")
        # Recovery: the first call started after the fault was cleared that
        # succeeds, and /readyz 200 again.
        rec_call = rec_ready = None
        while time.monotonic() - t_off < RECOVER_S and (rec_call is None or rec_ready is None):
            with load.lock:
                ok = [c.t1 for c in load.calls if c.t0 >= t_off and c.code == grpc.StatusCode.OK]
            if rec_call is None and ok:
                rec_call = min(ok) - t_off
            if rec_ready is None and self.ready.samples and self.ready.samples[-1][1] == 200 \
                    and self.ready.samples[-1][0] > t_off:
                rec_ready = self.ready.samples[-1][0] - t_off
            time.sleep(0.02)
        time.sleep(0.3)  # not a wait for a state: a few more calls after the recovery, checked like the rest
        calls = load.stop()
        self.assertIsNone(self.proc.poll(), f"signetd exited during {name}:\n{self.text()}")
        self.assertIsNotNone(rec_call, f"{name}: no call succeeded within {RECOVER_S}s of clearing the fault")
        self.assertIsNotNone(rec_ready, f"{name}: /readyz not 200 within {RECOVER_S}s of clearing the fault")
        self.check_calls(name, calls)
        during = [c for c in calls if t_on <= c.t0 < t_off]
        statuses = self.ready.between(t_on, t_off + 0.2)
        if expect_unready:
            self.assertIn(503, statuses, f"{name}: /readyz never 503 while the HSM was down (within "
                          f"{hold + UNREADY_SLACK:.0f}s)")
        codes = collections.Counter(c.code.name for c in calls)
        failed = [c for c in calls if c.code != grpc.StatusCode.OK]
        if expect_fail:
            self.assertTrue(failed, f"{name}: the fault caused no failure (not injected?)")
        row = {
            "phase": name, "calls": len(calls), "ok": codes.get("OK", 0),
            "failed": {k: v for k, v in codes.items() if k != "OK"},
            "ok_during_fault": sum(c.code == grpc.StatusCode.OK for c in during),
            "max_fail_latency_own": max((c.t1 - c.t0 for c in failed if c.own), default=None),
            "max_fail_latency_server": max((c.t1 - c.t0 for c in failed if not c.own),
                                           default=None),
            "readyz_503": 503 in statuses, "recovery_call_s": rec_call, "recovery_ready_s": rec_ready,
        }
        self.add_row(row)
        return row, calls, (t_on, t_off)

    def add_row(self, r):
        def f(x):
            return "-" if x is None else f"{x:.2f}"
        fails = ", ".join(f"{k} {v}" for k, v in sorted(r["failed"].items())) or "none"
        line = (f"| {r['phase']} | {r['calls']} | {r['ok']} ({r['ok_during_fault']} during) | {fails} | "
                f"{f(r['max_fail_latency_own'])} / {DEADLINE:.1f} | {f(r['max_fail_latency_server'])} / "
                f"{SERVER_TIMEOUT:.1f} | {'yes' if r['readyz_503'] else 'no'} | {f(r['recovery_call_s'])} | "
                f"{f(r['recovery_ready_s'])} |")
        if not HsmFaults.report:
            HsmFaults.report += [
                f"clients {CLIENTS}, signer threads {THREADS}, fault held {FAULT_S}s, client deadline "
                f"{DEADLINE}s, server-timeout {SERVER_TIMEOUT}s, margin {MARGIN}s, sanitized {SANITIZED}", "",
                "| fault | calls | OK | failed by code | max failed latency, own deadline (s) | "
                "max failed latency, server-timeout (s) | /readyz 503 | recovery: first OK (s) | "
                "recovery: /readyz 200 (s) |",
                "|---|---|---|---|---|---|---|---|---|"]
        HsmFaults.report.append(line)
        print(line, flush=True)

    # ---- the tests ---------------------------------------------------------

    def test_faults(self):
        self.start("faults")
        self.phase("none (baseline)", "", expect_fail=False, hold=1.0)
        # Sessions reopen fine, every signature fails: the token is down.
        self.phase("C_Sign CKR_DEVICE_ERROR always", "C_Sign error=CKR_DEVICE_ERROR\n", expect_unready=True)
        row, _, _ = self.phase("C_Sign CKR_SESSION_HANDLE_INVALID p=0.3",
                               "C_Sign error=CKR_SESSION_HANDLE_INVALID prob=0.3\n", expect_fail=False)
        self.assertGreater(row["ok_during_fault"], 0, "a 30% session fault stopped all signing")
        row, _, _ = self.phase("C_Sign CKR_USER_NOT_LOGGED_IN every 4th",
                               "C_Sign error=CKR_USER_NOT_LOGGED_IN every=4\n", expect_fail=False)
        self.assertGreater(row["ok_during_fault"], 0)
        self.phase("all functions CKR_TOKEN_NOT_PRESENT (HSM down)", "* error=CKR_TOKEN_NOT_PRESENT\n",
                   expect_unready=True)
        self.phase("all functions CKR_DEVICE_REMOVED (HSM down)", "* error=CKR_DEVICE_REMOVED\n",
                   expect_unready=True)
        self.phase("all functions CKR_DEVICE_ERROR (HSM down)", "* error=CKR_DEVICE_ERROR\n", expect_unready=True)
        row, _, _ = self.phase("C_Sign 20 ms + 5% spikes of 4 s",
                               "C_Sign delay_ms=20 spike_ms=4000 spike_prob=0.05\n", expect_fail=False)
        self.assertGreater(row["ok_during_fault"], 0)
        n = self.event_count()
        row, _, _ = self.phase("crash (SoftHSM2 finalised + re-initialised)", "crash 1\n", expect_fail=False)
        self.wait_event("crash", n)
        self.hang_phase()
        # Every signer thread stuck in C_Sign: calls fail on time, and once
        # the pool has completed nothing for server-timeout (+1 s) /readyz
        # says so (before the fix it stayed 200 while every call timed out).
        self.phase(f"C_Sign hangs on all {THREADS} signer threads", f"C_Sign hang={THREADS}\n", expect_unready=True,
                   hold=SERVER_TIMEOUT + 3.0)
        stats = self.metrics()
        self.assertGreater(stats.get("signet_hsm_recoveries_total", 0), 0, stats)
        HsmFaults.report.append("")
        HsmFaults.report.append("HSM counters after all phases: " + ", ".join(
            f"{k} {int(v)}" for k, v in sorted(stats.items()) if k.endswith("_total")))
        self.stop_clean()  # after all of it, the pool drains and the HSM closes

    def metrics(self):
        port = next(r for r in self.records() if r.get("msg") == "signetd serving")["metrics_port"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line.startswith("signet_hsm") and " " in line:
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def hang_phase(self):
        """One C_Sign hangs past its call's deadline: the other signer
        threads keep serving, the stuck call gets DEADLINE_EXCEEDED on time."""
        load = Load(self)
        self.flowing(load)
        n = self.event_count()
        t_on = time.monotonic()
        self.set_faults("C_Sign hang=1\n")
        self.wait_event("hang C_Sign", n)
        t_hung = time.monotonic()
        # Held until what is asserted below has happened: the stuck call
        # answered DEADLINE_EXCEEDED, and more than 10 calls served by the
        # other signer threads meanwhile (how long that takes is the
        # machine's business; a fixed hold could end too soon under load).
        self.wait_until("the hung call's DEADLINE_EXCEEDED and 10 calls served beside it", lambda: load.count(
            lambda c: c.code == grpc.StatusCode.DEADLINE_EXCEEDED) and load.count(
            lambda c: c.t0 >= t_hung + 0.1 and c.code == grpc.StatusCode.OK) > 10)
        t_off = time.monotonic()
        self.set_faults("")
        self.wait_event("release C_Sign", n)
        t_rel = time.monotonic()
        self.wait_until("a call served after the release", lambda: load.count(
            lambda c: c.t0 >= t_rel and c.code == grpc.StatusCode.OK))
        calls = load.stop()
        self.check_calls("hang", calls)
        during = [c for c in calls if c.t0 >= t_hung + 0.1 and c.t1 <= t_off]
        ok = [c for c in during if c.code == grpc.StatusCode.OK]
        stuck = [c for c in calls if c.t0 < t_off and c.code == grpc.StatusCode.DEADLINE_EXCEEDED]
        self.assertGreater(len(ok), 10, "the other signer threads stopped serving while one C_Sign hung")
        self.assertTrue(stuck, "the hung call did not end with DEADLINE_EXCEEDED")
        self.assertIn(200, self.ready.between(t_hung, t_off))
        codes = collections.Counter(c.code.name for c in calls)
        failed = [c for c in calls if c.code != grpc.StatusCode.OK]
        self.add_row({
            "phase": "C_Sign hangs (1 call) until released", "calls": len(calls), "ok": codes.get("OK", 0),
            "failed": {k: v for k, v in codes.items() if k != "OK"}, "ok_during_fault": len(ok),
            "max_fail_latency_own": max((c.t1 - c.t0 for c in failed if c.own), default=None),
            "max_fail_latency_server": max((c.t1 - c.t0 for c in failed if not c.own),
                                           default=None),
            "readyz_503": 503 in self.ready.between(t_on, t_off), "recovery_call_s": None,
            "recovery_ready_s": None})

    def test_corrupt_signature(self):
        """C_Sign answers CKR_OK with one bit of the signature flipped (a
        faulty device; for RSA-CRT the classic key-leaking fault): with
        verify-issued, signetd never returns one: a bad signature is asked
        for again once, and a second bad one fails the call (UNAVAILABLE,
        retryable). Every certificate it returns verifies."""
        self.start("corrupt", "--verify-issued")
        # At least CORRUPT_CALLS calls under the fault, however slow the
        # machine: the share of failures below is a statistic, and fewer
        # calls (a loaded machine under a sanitizer makes fewer in a fixed
        # time) would let chance carry it past the bound.
        row, calls, (t_on, t_off) = self.phase("C_Sign corrupt 50% (verify-issued on)", "C_Sign corrupt=0.5\n",
                                               min_during=CORRUPT_CALLS)
        self.assertGreater(row["ok_during_fault"], 0)
        self.assertEqual(set(row["failed"]), {"UNAVAILABLE"}, row)
        self.assertIn("do not verify, twice", self.text())
        # A call fails only when both signatures are bad (p = 0.25); without
        # the second attempt it failed at p = 0.5. Of 200 calls, 40% or more
        # fail by chance at p = 0.25 once in 400,000 runs, fewer than 40% at
        # p = 0.5 once in 500 (at 60 calls, the first was once in 130).
        during = [c for c in calls if t_on <= c.t0 < t_off]
        failed = sum(c.code != grpc.StatusCode.OK for c in during)
        self.assertGreaterEqual(len(during), CORRUPT_CALLS, row)
        self.assertLess(failed / len(during), 0.4, (failed, len(during), row))
        self.stop_clean()

    def health(self):
        return probe(self.probe_port, "/healthz")

    def test_hsm_down_limit(self):
        """An HSM down for longer than hsm-down-limit fails /healthz (a
        liveness probe then restarts signetd); a shorter outage, or the HSM
        back, keeps it 200. signetd itself keeps running either way."""
        self.start("downlimit", "--hsm-down-limit=2s")
        self.assertEqual(self.health(), 200)
        load = Load(self)  # the HSM layer learns of an outage from failing calls
        self.flowing(load)
        t_on = time.monotonic()
        self.set_faults("* error=CKR_DEVICE_ERROR\n")
        seen, first_503 = [], None
        while time.monotonic() - t_on < WAIT_S and first_503 is None:
            h = self.health()
            seen.append((round(time.monotonic() - t_on, 2), h))
            if h == 503:
                first_503 = time.monotonic() - t_on
            time.sleep(0.1)
        self.assertIsNotNone(first_503, f"/healthz never failed with the HSM down: {seen[-5:]}\n" + self.text()[-2000:])
        # Down is seen after a few failed calls or the health poll (~1 s),
        # then 2 s: never before the limit.
        self.assertGreater(first_503, 2.0, seen)
        self.assertEqual(self.ready.status(), 503)
        self.set_faults("")
        t_off = time.monotonic()
        while self.health() != 200:
            self.assertLess(time.monotonic() - t_off, RECOVER_S, "/healthz still failing after the HSM came back")
            time.sleep(0.1)
        self.check_calls("hsm-down-limit", load.stop())
        self.assertIsNone(self.proc.poll(), "signetd exited: the probe is the orchestrator's to act on")
        self.assertTrue(any(r.get("msg", "").startswith("HSM down beyond hsm-down-limit") for r in self.records()),
                        self.text()[-2000:])
        print(f"hsm-down-limit 2s: /healthz 503 after {first_503:.2f}s down, 200 again "
              f"{time.monotonic() - t_off:.2f}s after the cure", flush=True)
        self.stop_clean()

    def test_stop_with_hung_sign(self):
        """SIGTERM while a C_Sign hangs: signetd answers every call (the hung
        one DEADLINE_EXCEEDED), and its stop, stuck behind the call the HSM
        never returns, is cut at shutdown-grace + STOP_OVERRUN with a record
        naming the stage and exit status 1 (before the fix: never)."""
        self.start("stop")
        load = Load(self)
        self.flowing(load)
        n = self.event_count()
        self.set_faults("C_Sign hang=1\n")
        self.wait_event("hang C_Sign", n)  # a C_Sign is hung from here on
        rc, took = self.sigterm()
        calls = load.stop()
        self.assertIsNotNone(rc, f"signetd did not stop within {GRACE + STOP_OVERRUN + 10}s with a hung C_Sign:\n"
                             + self.text()[-3000:])
        # A stop past its grace period cancels what gRPC has not finished
        # sending (a busy machine can leave an answer unsent then): CANCELLED,
        # which istio-agent retries like UNAVAILABLE.
        self.check_calls("stop", calls, RETRYABLE | {grpc.StatusCode.CANCELLED})
        print(f"stop with a hung C_Sign: exit {rc} after {took:.2f}s", flush=True)
        HsmFaults.report.append("")
        HsmFaults.report.append(f"SIGTERM with one C_Sign hung: exit status {rc} after {took:.2f} s "
                                f"(shutdown-grace {GRACE} s)")
        self.assertLess(took, GRACE + STOP_OVERRUN + 3, "the bounded stop took too long")
        self.assertGreater(took, GRACE + STOP_OVERRUN - 1, "the stop was cut before its bound")
        self.assertEqual(rc, 1)
        cut = [r for r in self.records() if r.get("msg", "").startswith("graceful stop did not finish")]
        self.assertEqual(len(cut), 1, self.text()[-2000:])
        self.assertEqual(cut[0].get("stage"), "draining gRPC calls")
        # The hung call was answered: DEADLINE_EXCEEDED when its deadline
        # came first, UNAVAILABLE ("server shutting down") when the grace did.
        self.assertTrue(any(c.code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE)
                            for c in calls), "the hung call's answer")

    def test_stop_drains_held_calls(self):
        """SIGTERM with calls inside signetd: every signer thread holds one in
        a C_Sign (hung), the others wait in the queue. The hangs are released
        only once signetd has logged "shutting down", so each certificate
        issued after that record is a call signetd had at the signal: there
        must be some, their clients must have got them, every call is
        answered (a chain, or a retryable refusal for one gRPC had not yet
        handed over), and the stop ends with exit status 0.

        The HSM holds the calls, not the scheduler: with an undelayed HSM,
        32 calls are served in a few milliseconds, and a machine that stalls
        the test between the first answer and the signal leaves nothing to
        drain (seen in CI)."""
        # A grace and a server-timeout far beyond the test's own steps: the
        # hang lasts from the calls' arrival to the release after the signal.
        self.start("drain", grace=60, server_timeout=60)
        n = self.event_count()
        self.set_faults(f"C_Sign hang={THREADS}\n")
        stub = self.pb_grpc.IstioCertificateServiceStub(self.channel)
        md = [("authorization", f"Bearer {self.tok}"), ("clusterid", "Kubernetes")]
        futs = [stub.CreateCertificate.future(self.pb.IstioCertificateRequest(csr=c), metadata=md, timeout=90)
                for c in self.csrs * 4]
        self.wait_event("hang C_Sign", n)  # a call is inside signetd from here on
        self.proc.send_signal(signal.SIGTERM)
        self.wait_until('"shutting down" logged', lambda: any(
            r.get("msg") == "shutting down" for r in self.records()))
        self.set_faults("")
        results, served, leaves = [], set(), []
        for f in futs:
            try:
                chain = f.result().cert_chain
                results.append(grpc.StatusCode.OK)
                leaves.append(chain[0])
                served.add(x509.load_pem_x509_certificate(chain[0].encode()).serial_number)
            except grpc.RpcError as e:
                results.append(e.code())
        rc = self.proc.wait(WAIT_S)
        self.assertEqual(rc, 0, self.text()[-3000:])
        self.no_sanitizer_report()
        # Calls that reached the server after the stop began are refused
        # with UNAVAILABLE by signetd, or UNAVAILABLE/CANCELLED by gRPC when
        # it had not handed them over yet: istio-agent retries all three.
        for code in results:
            self.assertIn(code, (grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED))
        self.verify(leaves)
        records = self.records()
        stop = next(i for i, r in enumerate(records) if r.get("msg") == "shutting down")
        after = {int(r["serial"], 16) for r in records[stop + 1:] if r.get("msg") == "certificate issued"}
        self.assertTrue(after, "no call signetd held at SIGTERM was served:\n" + self.text()[-3000:])
        self.assertLessEqual(after, served, "certificates issued during the stop that no client received")
        print(f"stop with {len(futs)} calls held: {len(after)} issued after the signal, "
              f"{results.count(grpc.StatusCode.OK)} answered with a chain, exit {rc}", flush=True)

    # ---- idle tokens: the health probes ----------------------------------------

    def first_status(self, status, since, timeout=WAIT_S):
        """Seconds from since to the first /readyz sample with status."""
        def seen():
            return next((t for t, s in list(self.ready.samples) if t >= since and s == status), None)
        return self.wait_until(f"/readyz {status}", seen, timeout) - since

    def metric_sum(self, name, **labels):
        """The sum of a family's series (signet_hsm_*) whose labels include these."""
        want = [f'{k}="{v}"' for k, v in labels.items()]
        return sum(v for k, v in self.metrics().items()
                   if k.split("{")[0] == name and all(w in k for w in want))

    def calls_ok(self, n):
        """n calls one after another, each answered with a certificate that
        verifies: a ready replica loses none of the requests it accepts."""
        stub = self.pb_grpc.IstioCertificateServiceStub(self.channel)
        md = [("authorization", f"Bearer {self.tok}"), ("clusterid", "Kubernetes")]
        leaves = [stub.CreateCertificate(self.pb.IstioCertificateRequest(csr=self.csrs[i % len(self.csrs)]),
                                         metadata=md, timeout=SERVER_TIMEOUT + 5).cert_chain[0] for i in range(n)]
        self.verify(leaves)

    def test_idle_probe(self):
        """No request is asked for while the token fails (an idle replica):
        the health probes alone make /readyz 503 within probe-interval +
        probe-timeout (+ housekeeping's second) when every call hangs, and
        when every call errors; the hung probe is reported stuck (log,
        metric) while /healthz stays 200 (hsm-down-limit); released, the
        replica is ready again within one probe, and every call made while
        it is ready succeeds. Last, SIGTERM with the probe still hung: the
        stop does not wait for it (before the probes: the replica stayed
        ready through both outages)."""
        interval, timeout = 1, 1
        bound = interval + timeout + 1 + PROBE_SLACK
        self.start("idle", f"--hsm-probe-interval={interval}s", f"--hsm-probe-timeout={timeout}s")
        self.calls_ok(4)
        self.assertEqual(self.metric_sum("signet_hsm_probes_stuck_total"), 0)
        self.wait_until("a probe answered", lambda: self.metric_sum("signet_hsm_probes_total", result="ok") > 0)

        # Every call hangs: the probe's own call is what hangs.
        n = self.event_count()
        t0 = time.monotonic()
        self.set_faults("* hang=64\n")
        unready = self.first_status(503, t0)
        self.wait_event("hang C_GetSessionInfo", n)
        self.wait_until("the stuck probe counted", lambda: self.metric_sum("signet_hsm_probes_stuck_total") >= 1)
        stuck = [r for r in self.records() if r.get("msg", "").startswith("PKCS#11 health probe stuck")]
        self.assertEqual(len(stuck), 1, self.text()[-3000:])
        self.assertEqual(self.health(), 200, "an outage shorter than hsm-down-limit failed /healthz")
        t1 = time.monotonic()
        self.set_faults("")
        back = self.first_status(200, t1)
        print(f"idle hang: /readyz 503 after {unready:.2f}s (bound {bound:.1f}s), 200 {back:.2f}s after the "
              f"release", flush=True)
        self.assertLess(unready, bound, self.text()[-3000:])
        # One probe (the late one returns, the next is made at once) and
        # one housekeeping tick.
        self.assertLess(back, timeout + 1 + PROBE_SLACK, self.text()[-3000:])
        self.calls_ok(4)

        # Every call errors.
        t2 = time.monotonic()
        self.set_faults("* error=CKR_DEVICE_ERROR\n")
        unready_err = self.first_status(503, t2)
        self.wait_until("a failed probe counted",
                        lambda: self.metric_sum("signet_hsm_probes_total", result="failed") > 0)
        t3 = time.monotonic()
        self.set_faults("")
        back_err = self.first_status(200, t3, RECOVER_S)
        print(f"idle errors: /readyz 503 after {unready_err:.2f}s, 200 {back_err:.2f}s after the cure", flush=True)
        self.assertLess(unready_err, bound, self.text()[-3000:])
        self.calls_ok(4)
        HsmFaults.report.append("")
        HsmFaults.report.append(
            f"Idle token, probes every {interval} s with a {timeout} s timeout: every call hung, /readyz 503 "
            f"after {unready:.2f} s, 200 {back:.2f} s after the release; every call CKR_DEVICE_ERROR, 503 after "
            f"{unready_err:.2f} s, 200 {back_err:.2f} s after the cure")

        # SIGTERM while the probe is hung inside the module.
        n = self.event_count()
        t4 = time.monotonic()
        self.set_faults("* hang=64\n")
        self.wait_event("hang C_GetSessionInfo", n)
        self.first_status(503, t4)
        rc, took = self.sigterm()
        print(f"stop with a hung probe: exit {rc} after {took:.2f}s", flush=True)
        self.assertEqual(rc, 0, self.text()[-3000:])
        self.assertLess(took, GRACE + PROBE_SLACK + 2, "the stop waited for the hung probe")
        msgs = [r.get("msg", "") for r in self.records()]
        self.assertTrue(any(m.startswith("PKCS#11 health probe still inside the module at shutdown") for m in msgs),
                        self.text()[-3000:])
        self.assertIn("exiting without library destructors: a PKCS#11 call is still inside the module", msgs)
        self.assertFalse(any(m.startswith("graceful stop did not finish") for m in msgs))
        self.no_sanitizer_report()

    def test_busy_probe_late(self):
        """A busy token whose calls all answer after hsm-probe-timeout (a
        module that queues the probe behind the signatures asked of it, as
        tpm2-pkcs11 behind its resource manager does) while every request is
        answered: the replica stays ready and alive (before, the probe came
        late, the token counted as down, /readyz 503 while serving, and
        /healthz 503 past hsm-down-limit). Once the requests stop, the same
        late probes make it unready within the probe's bound, and cured it is
        ready again."""
        interval, timeout, call = 1, 1, 1.2
        bound = interval + timeout + 1 + PROBE_SLACK
        self.start("busylate", f"--hsm-probe-interval={interval}s", f"--hsm-probe-timeout={timeout}s",
                   "--hsm-down-limit=2s", server_timeout=10)
        stub = self.pb_grpc.IstioCertificateServiceStub(self.channel)
        md = [("authorization", f"Bearer {self.tok}"), ("clusterid", "Kubernetes")]
        stop, leaves, failed, lock = threading.Event(), [], [], threading.Lock()

        def client(i):
            k = 0
            while not stop.is_set():
                req = self.pb.IstioCertificateRequest(csr=self.csrs[(i + k) % len(self.csrs)])
                k += 1
                try:
                    leaf = stub.CreateCertificate(req, metadata=md, timeout=15).cert_chain[0]
                    with lock:
                        leaves.append(leaf)
                except grpc.RpcError as e:
                    with lock:
                        failed.append((e.code().name, e.details()))

        self.set_faults(f"C_Sign delay_ms={int(call * 1000)}\nC_GetTokenInfo delay_ms={int(call * 1000)}\n")
        # Started apart, so that their signatures end spread out (one about
        # every call / THREADS), as a mesh's requests do.
        clients = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(THREADS)]
        for th in clients:
            th.start()
            time.sleep(call / THREADS)
        self.wait_until("calls answered", lambda: len(leaves) >= THREADS)
        t0 = time.monotonic()
        n0 = len(leaves)
        healthz = []
        while time.monotonic() - t0 < 4 * (interval + timeout):
            healthz.append(self.health())
            time.sleep(0.2)
        t1 = time.monotonic()
        during = self.ready.between(t0, t1)
        stop.set()
        for th in clients:
            th.join(20)
            self.assertFalse(th.is_alive(), "a client call never returned")
        t_stop = time.monotonic()
        served = len(leaves) - n0
        print(f"busy and late: {served} calls answered in {t1 - t0:.1f}s, /readyz {collections.Counter(during)}, "
              f"/healthz {collections.Counter(healthz)}", flush=True)
        self.assertEqual(failed, [], self.text()[-3000:])
        self.assertGreaterEqual(served, 2 * THREADS)
        self.assertTrue(during and all(s == 200 for s in during), self.text()[-3000:])
        self.assertTrue(all(s == 200 for s in healthz), self.text()[-3000:])
        self.verify(leaves)

        # Idle now: the probe's late answers count.
        unready = self.first_status(503, t_stop)
        print(f"busy and late, then idle: /readyz 503 after {unready:.2f}s (bound {bound:.1f}s)", flush=True)
        self.assertLess(unready, bound, self.text()[-3000:])
        self.wait_until("a late probe counted", lambda: self.metric_sum("signet_hsm_probes_total", result="late") > 0)
        t2 = time.monotonic()
        self.set_faults("")
        self.first_status(200, t2, RECOVER_S)
        self.calls_ok(2)
        self.stop_clean()

    def test_idle_down_limit(self):
        """An idle replica whose token fails for longer than hsm-down-limit
        fails /healthz too (the probes see the outage; before them an idle
        replica never counted its HSM as down), not before the limit, and
        is alive again once the token answers."""
        self.start("idledown", "--hsm-probe-interval=1s", "--hsm-probe-timeout=1s", "--hsm-down-limit=2s")
        self.assertEqual(self.health(), 200)
        t0 = time.monotonic()
        self.set_faults("* error=CKR_DEVICE_ERROR\n")
        unready = self.first_status(503, t0)

        def unhealthy():
            return self.health() == 503 and time.monotonic()
        first_503 = self.wait_until("/healthz 503", unhealthy) - t0
        print(f"idle token down: /readyz 503 after {unready:.2f}s, /healthz 503 after {first_503:.2f}s "
              f"(hsm-down-limit 2s)", flush=True)
        # The limit counts from the tick that turned /readyz 503. That tick
        # came after the last 200 sample began (a sample's time is taken
        # before its request), however late the sampler then ran; the first
        # 503 sample's time is only an upper bound of it, which a stalled
        # sampler thread pushes later.
        # (t0 itself when no 200 was sampled: the fault was set after it.)
        last_200 = max([t0] + [t for t, st in list(self.ready.samples) if st == 200 and t < t0 + unready]) - t0
        self.assertGreater(first_503, last_200 + 1.7, (last_200, unready))
        self.set_faults("")
        self.wait_until("/healthz 200 after the cure", lambda: self.health() == 200, RECOVER_S)
        self.first_status(200, time.monotonic())
        self.calls_ok(2)
        self.stop_clean()


if __name__ == "__main__":
    unittest.main(verbosity=2)
