#!/usr/bin/python3
"""signetd killed with SIGKILL under load and during start-up, then restarted
on the same CA folder.

One CA is made with `signetctl init`; its root is kept aside. Then, a few
times, signetd is started on the folder, several grpcio clients call
CreateCertificate over TLS as fast as they can, and signetd is killed
(SIGKILL) at a random moment; a few more times it is killed at a random
moment of its start-up. After each kill it is started again. What must
hold:

  * every start comes back ready (/readyz 200; the time from the start of
    the process to ready is printed for tests/RELIABILITY.md);
  * every certificate any client received, before any kill, verifies with
    `openssl verify` against the root kept aside (same CA key, same root),
    and root-cert.pem is byte for byte the one init wrote;
  * the audit log (signetd's stderr, one JSON record per line; here a file
    every run appends to, O_APPEND as a log collector opens it) holds only
    whole lines, each a JSON object, and one "certificate issued" line for
    every certificate a client received (matched by serial number).

usage: test_crash_restart.py SIGNETCTL SIGNETD PROTO_DIR
Environment: SIGNET_SANITIZED=1 for fewer kills and longer waits.
"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import grpc
from cryptography import x509

SIGNETCTL, SIGNETD, PROTO_DIR = sys.argv[1:4]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ra"))
import signet_e2e  # noqa: E402
from signet_e2e import make_csr, spiffe  # noqa: E402

SANITIZED = os.environ.get("SIGNET_SANITIZED") == "1"
LOAD_KILLS = 3 if SANITIZED else 6
START_KILLS = 3 if SANITIZED else 5
CLIENTS = 4
READY_TIMEOUT_S = 120 if SANITIZED else 30
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what, flush=True)


class Daemon:
    """signetd on the folder's signet.conf, its stderr appended to the audit
    log, its ports read from its own records (after offset)."""

    def __init__(self, conf, log_path):
        self.log_path = log_path
        self.offset = os.path.getsize(log_path) if os.path.exists(log_path) else 0
        # O_APPEND: every record lands at the end whoever else has the file
        # open (the previous signetd's lines are all written by then).
        with open(log_path, "ab") as log:
            self.t0 = time.monotonic()
            self.proc = subprocess.Popen(
                [SIGNETD, "--config", conf, "--serving-address", "127.0.0.1:0", "--http-address", "127.0.0.1",
                 "--metrics-port", "0", "--readiness-probe-port", "0", "--log-format", "json",
                 "--signer-threads", "2"],
                stdout=log, stderr=subprocess.STDOUT)
        self.port = self.probe_port = None

    def records(self):
        with open(self.log_path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        return signet_e2e.json_records(data.split(b"\n"))

    def wait_ready(self):
        """Seconds from the process's start to /readyz 200, or None."""
        deadline = self.t0 + READY_TIMEOUT_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            if self.probe_port is None:
                rec = signet_e2e.serving_record(self.records())
                if rec is not None:
                    self.port, self.probe_port = rec["port"], rec["probe_port"]
            if self.probe_port is not None:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{self.probe_port}/readyz", timeout=2) as r:
                        if r.status == 200:
                            return time.monotonic() - self.t0
                except (urllib.error.URLError, ConnectionError, OSError):
                    pass
            time.sleep(0.005)
        return None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self):
        return signet_e2e.stop_process(self.proc)


class Clients:
    """CLIENTS threads, each on its own channel, calling until stopped; what
    they received is kept (serial -> chain)."""

    def __init__(self, pb, pb_grpc, port, root, token, csr):
        self.received = {}
        self.errors = 0
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(pb, pb_grpc, port, root, token, csr))
                        for _ in range(CLIENTS)]
        for t in self.threads:
            t.start()

    def run(self, pb, pb_grpc, port, root, token, csr):
        creds = grpc.ssl_channel_credentials(root_certificates=root)
        ch = grpc.secure_channel(f"127.0.0.1:{port}", creds, options=[("grpc.ssl_target_name_override", "localhost")])
        stub = pb_grpc.IstioCertificateServiceStub(ch)
        md = [("authorization", f"Bearer {token}"), ("clusterid", "Kubernetes")]
        try:
            while not self.stopping.is_set():
                try:
                    resp = stub.CreateCertificate(pb.IstioCertificateRequest(csr=csr), metadata=md, timeout=5)
                except grpc.RpcError:
                    with self.lock:
                        self.errors += 1
                    time.sleep(0.01)
                    continue
                chain = list(resp.cert_chain)
                serial = x509.load_pem_x509_certificate(chain[0].encode()).serial_number
                with self.lock:
                    self.received[serial] = chain
        finally:
            ch.close()

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(30)


def verify(chain, root_path, tmp):
    path = os.path.join(tmp, "chain.pem")
    with open(path, "w") as f:
        f.write("".join(chain))
    v = subprocess.run(["openssl", "verify", "-CAfile", root_path, path], capture_output=True, text=True)
    return v.returncode == 0


def main():
    tmp = tempfile.mkdtemp(prefix="crash.", dir=os.environ.get("SIGNET_TEST_TMP"))
    signet_e2e.compile_proto(PROTO_DIR, tmp)
    import ca_pb2
    import ca_pb2_grpc
    rng = random.Random(int(os.environ.get("SIGNET_CRASH_SEED", time.time_ns())))
    d = None
    try:
        conf, root_path = signet_e2e.init_ca(SIGNETCTL, os.path.join(tmp, "ca"))
        kept = os.path.join(tmp, "root-kept.pem")
        shutil.copyfile(root_path, kept)
        with open(kept, "rb") as f:
            root = f.read()
        token = signet_e2e.mint_token(SIGNETCTL, conf)
        csr = make_csr(spiffe("default", "default"))
        audit = os.path.join(tmp, "audit.log")
        received = {}
        under_load, start_up = [], []

        for i in range(LOAD_KILLS):
            d = Daemon(conf, audit)
            t = d.wait_ready()
            check(t is not None, f"load round {i}: not ready")
            if t is None:
                break
            if i > 0:
                under_load.append(t)  # a restart after the kill under load before
            c = Clients(ca_pb2, ca_pb2_grpc, d.port, root, token, csr)
            # Under load: certificates are flowing (however long a loaded
            # machine takes to get the first one), then the kill comes at a
            # random moment: the time is the test's dice, not a wait.
            deadline = time.monotonic() + 60
            while not c.received and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(rng.uniform(0.3, 1.0) * (3 if SANITIZED else 1))
            d.kill()
            c.stop()
            check(len(c.received) > 0, f"load round {i}: no certificate received ({c.errors} errors)")
            # One chain of each round through openssl verify (all are
            # checked against the audit log below).
            if c.received:
                chain = next(iter(c.received.values()))
                check(verify(chain, kept, tmp), f"load round {i}: a received chain does not verify")
            received.update(c.received)
            print(f"load round {i}: ready {t * 1000:.0f} ms after start, {len(c.received)} certificates, "
                  f"{c.errors} failed calls, then SIGKILL", flush=True)

        for i in range(START_KILLS):
            # Early start-up to around ready time (release: ~250 ms).
            d = Daemon(conf, audit)
            after = rng.uniform(0.0, 0.6 if SANITIZED else 0.3)
            time.sleep(after)  # a random moment of the start-up: the time is the test's dice
            d.kill()
            d = Daemon(conf, audit)
            t = d.wait_ready()
            if t is None and "no initialised token" in open(audit, errors="replace").read()[-4000:]:
                # SoftHSM2 rewrites token.object in place at C_Login; a kill
                # between its ftruncate and write empties it (the CA is lost
                # unless init's copy is put back: sg_init_softhsm_repair,
                # which signetd --config must call before opening the HSM).
                check(False, f"start-up kill {i}: the kill emptied SoftHSM2's token.object and signetd "
                      "did not restore it")
            check(t is not None, f"start-up kill {i}: the next start was not ready")
            if t is not None:
                start_up.append(t)
                print(f"start-up kill {i}: SIGKILL {after * 1000:.0f} ms after start; the next start ready in "
                      f"{t * 1000:.0f} ms", flush=True)
            d.kill()

        # The last start: serves, with the same CA, and stops cleanly.
        d = Daemon(conf, audit)
        t = d.wait_ready()
        check(t is not None, "final start: not ready")
        if t is not None:
            c = Clients(ca_pb2, ca_pb2_grpc, d.port, root, token, csr)
            deadline = time.monotonic() + 60
            while not c.received and time.monotonic() < deadline:
                time.sleep(0.05)
            c.stop()
            check(len(c.received) > 0, "final start: no certificate")
            for chain in list(c.received.values())[:1]:
                check(verify(chain, kept, tmp), "final start: the chain does not verify against the kept root")
                check(chain[-1].encode() == root, "final start: another root is served")
            received.update(c.received)
        rc = d.stop()
        check(rc == 0, f"final stop: exit {rc}")
        d = None
        with open(root_path, "rb") as f:
            check(f.read() == root, "root-cert.pem changed")

        # The audit log: whole lines, each a JSON object, one per certificate.
        with open(audit, "rb") as f:
            data = f.read()
        check(data.endswith(b"\n"), "the audit log does not end with a whole line")
        issued, bad = set(), []
        for line in data.split(b"\n")[:-1]:
            try:
                rec = json.loads(line)
                if not isinstance(rec, dict):
                    raise ValueError
            except ValueError:
                bad.append(line[:200])
                continue
            if rec.get("msg") == "certificate issued":
                issued.add(int(rec["serial"], 16))
        check(not bad, f"audit log: {len(bad)} lines that are no JSON object, e.g. {bad[:3]}")
        missing = [hex(s) for s in received if s not in issued]
        check(not missing, f"audit log: {len(missing)} certificates received without their line: {missing[:5]}")
        lines = data.count(b"\n")
        print(f"{LOAD_KILLS} kills under load, {START_KILLS} during start-up; {len(received)} certificates "
              f"received, {len(issued)} audit lines of issuance, {lines} lines in all", flush=True)
        if under_load:
            print(f"ready after a kill under load: {min(under_load) * 1000:.0f}..{max(under_load) * 1000:.0f} ms",
                  flush=True)
        if start_up:
            print(f"ready after a kill during start-up: {min(start_up) * 1000:.0f}..{max(start_up) * 1000:.0f} ms",
                  flush=True)
    finally:
        if d is not None:
            d.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(failures)} failures", flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
