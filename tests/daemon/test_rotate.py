#!/usr/bin/python3
"""A CA rotation (signetctl rotate) as a running signetd follows it, and
each step killed and run again.

  * Under load: two signetd replicas on the same files serve
    CreateCertificate to a few gRPC clients (Debian's python3-grpcio)
    that ask without pause; begin, activate and
    finish run meanwhile. No call fails. Every leaf verifies (openssl
    verify) against the root bundle its client held when it asked (the
    bundle of its previous answer; the init root at first), with the
    answer's intermediates. Every leaf the new key signed while the
    rotation was active also verifies against the old root alone, through
    the cross-signed certificate the answer carries. After finish only
    the new root is served. Each step is observed in the answers (the
    bundle grows to two roots, the leaves' issuer changes, the bundle
    shrinks to the new root), not by sleeping.
  * finish before the wait is over is refused with the time left.
  * Crash safety: the rotate command is killed (SIGNET_ROTATE_TEST_KILL,
    a test-only hook) at every point of every step; status names the step
    to run, another step is refused saying which, and running the same
    command again completes it. The CA then loads (signetctl status), the
    old key is gone from the token and the audit log holds each step.
  * The HSM health probes follow the key: with a 1 s probe interval the
    probes move to the new key's handle at activate, and after finish
    (the old key destroyed) the replica stays ready and
    signet_hsm_probes_total{result="ok"} keeps rising, none failed.
  * An intermediate under an external root: begin writes a CSR for the
    next intermediate, import (killed once, run again) installs it signed
    by a new external root and serves old + new roots, activate and
    finish: signetctl issues under the new intermediate, verified against
    the new root alone, which is all the bundle holds.

usage: test_rotate.py SIGNETCTL SIGNETD
"""
import json
import os
import re
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

import datetime

import grpc
from cryptography import x509
from cryptography.x509.oid import NameOID
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from signetd_proc import base_env, read, stop, write

SIGNETCTL, SIGNETD = sys.argv[1:3]
del sys.argv[1:3]
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ra"))
import signet_e2e  # noqa: E402  (tests/ra: the proto compiled for grpcio)

PEM_RE = re.compile(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----\n?", re.S)
CLIENTS = 3
WAIT = 300  # generous deadlines: a loaded 2-core box, ASan and TSan builds


def certs_of(text):
    return [x509.load_pem_x509_certificate(m.encode()) for m in PEM_RE.findall(text)]


def pem(cert):
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def rotate(conf, step, *flags, kill=None):
    env = base_env()
    if kill:
        env["SIGNET_ROTATE_TEST_KILL"] = kill
    return subprocess.run([SIGNETCTL, "rotate", step, "--config", conf, "--log-level", "warn", *flags],
                          capture_output=True, text=True, env=env, timeout=WAIT)


def wait_for(what, pred, timeout=WAIT, log=None):
    deadline = time.time() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}" + (f":\n{read(log)}" if log else ""))
        time.sleep(0.05)


class Signetd:
    """signetd on loopback, ports from its JSON log."""

    def __init__(self, conf, log_path, *extra):
        self.log_path = log_path
        args = [SIGNETD, "--config", conf, "--serving-address", "127.0.0.1:0", "--http-address", "127.0.0.1",
                "--metrics-port", "0", "--readiness-probe-port", "0", "--log-format", "json",
                "--signer-threads", "2", *extra]
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=base_env())
        rec = wait_for("signetd serving", lambda: self.proc.poll() is not None or self.record("signetd serving"),
                       log=log_path)
        if self.proc.poll() is not None:
            raise RuntimeError(f"signetd exited {self.proc.returncode}:\n{read(log_path)}")
        self.port = rec["port"]
        self.metrics_port, self.probe_port = rec["metrics_port"], rec["probe_port"]

    def get(self, port, path):
        """(status, body) of an HTTP GET on loopback."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def probes(self, result):
        """signet_hsm_probes_total of result, summed over the tokens."""
        _, text = self.get(self.metrics_port, "/metrics")
        pat = re.compile(r'^signet_hsm_probes_total\{[^}]*result="%s"[^}]*\} (\S+)$' % result, re.M)
        return sum(float(v) for v in pat.findall(text))

    def records(self, msg):
        out = []
        for line in read(self.log_path).splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("msg") == msg:
                out.append(r)
        return out

    def record(self, msg):
        r = self.records(msg)
        return r[0] if r else None


class Client(threading.Thread):
    """Asks for a certificate again and again on its own channel; keeps
    each answer with the bundle it held when it asked. Its channel trusts
    the bundle it holds (reopened when that changes), as a workload's
    istio-agent trusts the root-cert.pem of its last answer."""

    def __init__(self, test, n, d):
        super().__init__(daemon=True)
        self.t, self.n, self.d = test, n, d
        self.held = test.init_root
        self.answers, self.failures = [], []
        self.stop_flag = threading.Event()
        self.key = ec.generate_private_key(ec.SECP256R1())
        spiffe = f"spiffe://cluster.local/ns/default/sa/client{n}"
        self.csr = (x509.CertificateSigningRequestBuilder().subject_name(x509.Name([]))
                    .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(spiffe)]),
                                   critical=True)
                    .sign(self.key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM).decode())
        self.token = subprocess.run([SIGNETCTL, "token", "--config", test.conf, "--namespace", "default",
                                     "--service-account", f"client{n}", "--ttl", "2h"], check=True,
                                    capture_output=True, text=True).stdout.strip()

    def channel(self):
        creds = grpc.ssl_channel_credentials(root_certificates=self.held.encode())
        return grpc.secure_channel(f"127.0.0.1:{self.d.port}", creds,
                                   options=[("grpc.ssl_target_name_override", "localhost")])

    def run(self):
        pb, pb_grpc = self.t.pb, self.t.pb_grpc
        ch = self.channel()
        stub = pb_grpc.IstioCertificateServiceStub(ch)
        md = [("authorization", f"Bearer {self.token}"), ("clusterid", "Kubernetes")]
        while not self.stop_flag.is_set():
            held = self.held
            try:
                resp = stub.CreateCertificate(pb.IstioCertificateRequest(csr=self.csr, validity_duration=3600),
                                              metadata=md, timeout=60)
            except grpc.RpcError as e:
                self.failures.append(f"{e.code()}: {e.details()}")
                time.sleep(0.1)
                continue
            chain = list(resp.cert_chain)
            self.answers.append((held, chain, time.time()))
            if chain[-1] != self.held:
                self.held = chain[-1]
                ch.close()
                ch = self.channel()
                stub = pb_grpc.IstioCertificateServiceStub(ch)
            time.sleep(0.05)
        ch.close()


class Rotate(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="daemon-rotate.", dir=os.environ.get("SIGNET_TEST_TMP"))
        signet_e2e.compile_proto(os.path.join(HERE, "..", "..", "proto"), cls.tmp)
        import ca_pb2
        import ca_pb2_grpc
        cls.pb, cls.pb_grpc = ca_pb2, ca_pb2_grpc

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def path(self, *names):
        return os.path.join(self.tmp, *names)

    def init(self, name):
        d = self.path(name)
        subprocess.run([SIGNETCTL, "init", "--dir", d, "--log-level", "warn"], check=True, stdout=subprocess.DEVNULL)
        return d, os.path.join(d, "signet.conf")

    def issue(self, conf, name):
        """A leaf for default/default from the CA conf names (signetctl issue): its chain's PEM blocks."""
        leaf = self.path(name)
        key = ec.generate_private_key(ec.SECP256R1())
        csr = (x509.CertificateSigningRequestBuilder().subject_name(x509.Name([]))
               .add_extension(x509.SubjectAlternativeName(
                   [x509.UniformResourceIdentifier("spiffe://cluster.local/ns/default/sa/default")]), critical=True)
               .sign(key, hashes.SHA256()))
        write(leaf + ".csr", csr.public_bytes(serialization.Encoding.PEM))
        p = subprocess.run([SIGNETCTL, "issue", "--config", conf, "--csr", leaf + ".csr", "--out", leaf + ".pem"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        return PEM_RE.findall(read(leaf + ".pem"))

    def verify(self, tag, leaf, intermediates, anchors):
        """openssl verify of leaf (PEM) under anchors (PEM) with the
        intermediates (list of PEM); the failure text or None."""
        base = self.path(tag)
        write(base + ".leaf", leaf)
        write(base + ".ca", anchors)
        args = ["openssl", "verify", "-CAfile", base + ".ca"]
        if intermediates:
            write(base + ".untrusted", "".join(intermediates))
            args += ["-untrusted", base + ".untrusted"]
        p = subprocess.run(args + [base + ".leaf"], capture_output=True, text=True)
        return None if p.returncode == 0 else p.stdout + p.stderr

    def test_rotation_under_load(self):
        d, self.conf = self.init("load")
        self.init_root = read(os.path.join(d, "root-cert.pem"))
        old_root = certs_of(self.init_root)[0]
        # Two replicas reading the same files, as a Deployment's pods do:
        # both must follow every step.
        self.d = Signetd(self.conf, self.path("load.log"))
        self.addCleanup(stop, self.d.proc)
        self.d2 = Signetd(self.conf, self.path("load2.log"))
        self.addCleanup(stop, self.d2.proc)
        clients = [Client(self, i, self.d if i else self.d2) for i in range(CLIENTS)]
        for c in clients:
            c.start()

        def stop_clients():
            for c in clients:
                c.stop_flag.set()
            for c in clients:
                c.join(120)
        self.addCleanup(stop_clients)

        def all_answers():
            return [a for c in clients for a in c.answers]

        def latest_each(pred):
            """Every client's latest answer satisfies pred."""
            return all(c.answers and pred(c.answers[-1][1]) for c in clients)

        wait_for("answers before the rotation", lambda: all(len(c.answers) >= 3 for c in clients),
                 log=self.d.log_path)

        # begin: the bundle becomes old + new; the old key still signs.
        p = rotate(self.conf, "begin")
        self.assertEqual(p.returncode, 0, p.stderr)
        new_root_pem = read(os.path.join(d, "root-cert-g2.pem"))
        new_root = certs_of(new_root_pem)[0]
        wait_for("the bundle old + new in answers", lambda: latest_each(lambda ch: len(certs_of(ch[-1])) == 2),
                 log=self.d.log_path)
        n_begun = len(all_answers())
        for held, chain, _ in all_answers()[n_begun - CLIENTS:]:
            self.assertEqual(certs_of(chain[0])[0].issuer, old_root.subject)

        # activate: the new key signs, the cross-signed certificate rides along.
        p = rotate(self.conf, "activate", "--workload-lifetime", "4s", "--skew", "0s")
        self.assertEqual(p.returncode, 0, p.stderr)
        activated = time.time()
        wait_for("leaves signed by the new key",
                 lambda: latest_each(lambda ch: certs_of(ch[0])[0].issuer == new_root.subject),
                 log=self.d.log_path)

        # finish too early: refused with the time left (unless the box is
        # so slow that the wait has passed already).
        p = rotate(self.conf, "finish")
        if time.time() - activated < 3:
            self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
            self.assertRegex(p.stderr, r"too early: .* \d+ s left")
        wait_for("finish", lambda: rotate(self.conf, "finish").returncode == 0)
        wait_for("only the new root in answers",
                 lambda: latest_each(lambda ch: ch[-1] == new_root_pem), log=self.d.log_path)
        n_done = len(all_answers())
        wait_for("answers after finish", lambda: len(all_answers()) >= n_done + 2 * CLIENTS, log=self.d.log_path)
        stop_clients()

        failures = [f for c in clients for f in c.failures]
        self.assertEqual(failures, [], "failed calls during the rotation")
        answers = all_answers()
        by_new_with_cross = 0
        for i, (held, chain, _) in enumerate(answers):
            leaf, inter = chain[0], chain[1:-1]
            why = self.verify(f"a{i}", leaf, inter, held)
            self.assertIsNone(why, f"answer {i} does not verify against the bundle its client held")
            if certs_of(leaf)[0].issuer == new_root.subject and inter:
                by_new_with_cross += 1
                why = self.verify(f"o{i}", leaf, inter, pem(old_root))
                self.assertIsNone(why, f"answer {i}: a peer knowing only the old root cannot verify it")
        self.assertGreater(by_new_with_cross, 0, "no leaf was issued while the rotation was active")
        # After finish: the new root alone, and the old root is no longer served.
        last = [c.answers[-1][1] for c in clients]
        for chain in last:
            self.assertEqual(chain[-1], new_root_pem)
            self.assertEqual(len(chain), 2, "after finish the chain is the leaf and the new root")
        for d in (self.d, self.d2):
            self.assertGreaterEqual(len(d.records("CA reloaded")), 3, read(d.log_path))
        # SIGHUP re-reads the CA settings at once, whether or not they changed.
        self.d.proc.send_signal(signal.SIGHUP)
        wait_for("the SIGHUP reload", lambda: any("config" in r.get("reread", "").split(",")
                                                  for r in self.d.records("reloaded")), log=self.d.log_path)
        print(f"{len(answers)} answers, {by_new_with_cross} by the new key with the cross-signed certificate",
              file=sys.stderr)
        # A clean stop (the sanitizers' exit status included).
        for d in (self.d, self.d2):
            self.assertEqual(stop(d.proc), 0, read(d.log_path))

    def test_probes_follow_the_key(self):
        _, conf = self.init("probes")
        d = Signetd(conf, self.path("probes.log"), "--hsm-probe-interval", "1s",
                    "--hsm-probe-timeout", "60s")  # slow boxes: late is not the point
        self.addCleanup(stop, d.proc)
        wait_for("probes before the rotation", lambda: d.probes("ok") >= 2, log=d.log_path)
        reloads = 0
        for step, flags in (("begin", ()), ("activate", ("--workload-lifetime", "1s", "--skew", "0s"))):
            p = rotate(conf, step, *flags)
            self.assertEqual(p.returncode, 0, p.stderr)
            reloads += 1
            wait_for(f"the reload of {step}", lambda: len(d.records("CA reloaded")) >= reloads, log=d.log_path)
        # activate opened the new key: its handle is probed from then on.
        wait_for("the probes on the new key", lambda: d.record("HSM health probes follow the new key"),
                 log=d.log_path)
        wait_for("finish", lambda: rotate(conf, "finish").returncode == 0)
        wait_for("the reload of finish", lambda: len(d.records("CA reloaded")) >= 3, log=d.log_path)
        # The old key is gone from the token now. Probes after that answer
        # ok (they run on the new key's handle), and readiness holds.
        ok = d.probes("ok")

        def ready_and_probed():
            self.assertEqual(d.get(d.probe_port, "/readyz")[0], 200, read(d.log_path))
            return d.probes("ok") >= ok + 3

        wait_for("three probes after finish", ready_and_probed, log=d.log_path)
        self.assertEqual(d.get(d.probe_port, "/readyz")[0], 200, read(d.log_path))
        self.assertEqual(d.probes("failed"), 0, read(d.log_path))
        self.assertEqual(d.probes("late"), 0, read(d.log_path))
        failed = [x for x in read(d.log_path).splitlines() if "PKCS#11 token failed its health probe" in x]
        self.assertEqual(failed, [])
        self.assertEqual(stop(d.proc), 0, read(d.log_path))

    def test_killed_at_every_point_then_run_again(self):
        d, conf = self.init("crash")
        # A config file may hold signetd's settings too: rotate reads past them.
        with open(conf, "a") as f:
            f.write("max-client-certificate-duration = 1h\n")
        old_key = [line.split(" = ", 1)[1] for line in read(conf).splitlines() if line.startswith("hsm-key = ")][0]
        steps = [
            ("begin", ["begin-planned", "begin-key", "begin-certs", "begin-config"], []),
            ("activate", ["activate-planned", "activate-config"], ["--workload-lifetime", "1s", "--skew", "0s"]),
            ("finish", ["finish-planned", "finish-config", "finish-key"], []),
        ]
        other = {"begin": "activate", "activate": "finish", "finish": "begin"}
        for step, points, flags in steps:
            if step == "finish":
                time.sleep(1.5)  # the wait activate set
            for point in points:
                p = rotate(conf, step, *flags, kill=point)
                self.assertEqual(p.returncode, -9, f"{step} at {point}: {p.stdout}{p.stderr}")
                s = rotate(conf, "status")
                self.assertEqual(s.returncode, 0, s.stderr)
                self.assertRegex(s.stdout, rf"next\s+signetctl rotate {step}\b", f"{step} at {point}")
                o = rotate(conf, other[step])
                self.assertNotEqual(o.returncode, 0, f"{other[step]} after {step} killed at {point}")
                self.assertIn(f"signetctl rotate {step}", o.stderr, o.stderr)
            p = rotate(conf, step, *flags)
            self.assertEqual(p.returncode, 0, f"{step} run again: {p.stdout}{p.stderr}")
            s = rotate(conf, "status")
            self.assertIn("phase", s.stdout)
            # The CA signet.conf names loads against the key it names.
            st = subprocess.run([SIGNETCTL, "status", "--config", conf], capture_output=True, text=True)
            self.assertEqual(st.returncode, 0, f"after {step}: {st.stdout}{st.stderr}")
        self.assertRegex(rotate(conf, "status").stdout, r"phase\s+finished")
        # The old key is gone from the token.
        st = subprocess.run([SIGNETCTL, "status", "--config", conf, "--hsm-key", old_key, "--ca-cert",
                             os.path.join(d, "root-cert.pem"), "--root-cert", os.path.join(d, "root-cert.pem")],
                            capture_output=True, text=True)
        self.assertNotEqual(st.returncode, 0, st.stdout)
        self.assertIn("no private key", st.stderr)
        # Each step, once completed, is in the audit log.
        log = read(os.path.join(d, "rotation-audit.log"))
        for event in ("begin", "activate", "finish"):
            self.assertRegex(log, rf"event={event} phase=")
        # Issued by the new CA: the chain verifies against the new root.
        chain = self.issue(conf, "crash-leaf")
        self.assertIsNone(self.verify("crash-v", chain[0], chain[1:-1],
                                      read(os.path.join(d, "root-cert-g2.pem"))))

    def test_intermediate_under_an_external_root(self):
        d, conf = self.init("inter")
        now = datetime.datetime.now(datetime.timezone.utc)

        def root(cn):
            key = ec.generate_private_key(ec.SECP256R1())
            name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
            cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                    .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
                    .not_valid_after(now + datetime.timedelta(days=30))
                    .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                    .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), True)
                    .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                    .sign(key, hashes.SHA256()))
            return cert, key

        def sign(csr_path, cert, key, out):
            csr = x509.load_pem_x509_csr(read(csr_path, "rb"))
            c = (x509.CertificateBuilder().subject_name(csr.subject).issuer_name(cert.subject)
                 .public_key(csr.public_key()).serial_number(x509.random_serial_number())
                 .not_valid_before(now - datetime.timedelta(minutes=30))
                 .not_valid_after(now + datetime.timedelta(days=20))
                 .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                 .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), True)
                 .add_extension(x509.SubjectKeyIdentifier.from_public_key(csr.public_key()), critical=False)
                 .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()), critical=False)
                 .sign(key, hashes.SHA256()))
            write(out, pem(c), 0o644)

        r1, k1 = root("external root 1")
        r2, k2 = root("external root 2")
        write(self.path("r1.pem"), pem(r1), 0o644)
        write(self.path("r2.pem"), pem(r2), 0o644)
        # The CA as csr and import make it: an intermediate under root 1.
        subprocess.run([SIGNETCTL, "csr", "--config", conf, "--subject", "O=signet test,CN=issuing CA",
                        "--out", self.path("i1.csr")], check=True)
        sign(self.path("i1.csr"), r1, k1, self.path("i1.pem"))
        subprocess.run([SIGNETCTL, "import", "--config", conf, "--cert", self.path("i1.pem"), "--root",
                        self.path("r1.pem")], check=True, stdout=subprocess.DEVNULL)

        p = rotate(conf, "begin")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--subject", p.stderr)
        p = rotate(conf, "begin", "--subject", "O=signet test,CN=issuing CA 2")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(rotate(conf, "status").stdout, r"phase\s+awaiting-import")
        o = rotate(conf, "activate")
        self.assertIn("signetctl rotate import", o.stderr)
        sign(os.path.join(d, "ca-g2.csr"), r2, k2, self.path("i2.pem"))
        imp = ["--cert", self.path("i2.pem"), "--root", self.path("r2.pem")]
        p = rotate(conf, "import", *imp, kill="import-config")
        self.assertEqual(p.returncode, -9, p.stderr)
        p = rotate(conf, "import", *imp)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(certs_of(read(os.path.join(d, "roots-g2.pem")))), 2)
        p = rotate(conf, "activate", "--workload-lifetime", "1s", "--skew", "0s")
        self.assertEqual(p.returncode, 0, p.stderr)
        st = subprocess.run([SIGNETCTL, "status", "--config", conf], capture_output=True, text=True)
        self.assertEqual(st.returncode, 0, st.stderr)
        self.assertIn("issuing CA 2", st.stdout)
        wait_for("finish", lambda: rotate(conf, "finish").returncode == 0, timeout=60)
        bundle = [l.split(" = ", 1)[1] for l in read(conf).splitlines() if l.startswith("root-cert = ")][0]
        self.assertEqual(certs_of(read(os.path.join(d, bundle))), [r2])
        chain = self.issue(conf, "inter-leaf")
        self.assertIsNone(self.verify("inter-v", chain[0], chain[1:-1], pem(r2)))
        self.assertIsNotNone(self.verify("inter-o", chain[0], chain[1:-1], pem(r1)))


if __name__ == "__main__":
    unittest.main(verbosity=2)
