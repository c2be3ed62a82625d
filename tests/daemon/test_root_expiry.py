#!/usr/bin/python3
"""The roots' expiry as signetd reports it: real signetd, its real /metrics
over HTTP and its JSON log, on a SoftHSM2 CA that `signetctl init` makes
and that is then re-issued under roots this test makes.

  * A rotation's overlap outlived: the CA chains to root B, the bundle
    holds A (expired) and B. signetd starts and signs; the chain it hands
    out verifies against B (openssl verify); citadel_server_root_cert_*
    show B's expiry, not A's; A is still served and reported once as
    expired (not on every tick); `signetctl status` names B as the root
    and A as another, expired one.
  * The CA's own root expiring while signetd runs: one error record,
    not the other-root warning; the metrics say expired and due.
  * A root near its end: B has ten minutes left. With the default lead (a
    third of its validity) the rotation is due at once: the metric says 1
    with the lead, one warning. With --root-rotation-lead set so that the
    crossing comes a few seconds after start: 0 before it, 1 after it, and
    one warning however often /metrics is read.

usage: test_root_expiry.py SIGNETCTL SIGNETD
"""
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from signetd_proc import base_env, read, request_workload_cert, stop, write

SIGNETCTL, SIGNETD = sys.argv[1:3]
del sys.argv[1:3]

EXPIRED_MSG = "a root of the served bundle has expired; still served, remove it from the bundle"
DUE_MSG = "the CA's root expires within root-rotation-lead: rotate the CA"


def now_utc():
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)


def pem(cert):
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def ca_extensions(builder, key, issuer_key):
    return (builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key), critical=False))


def make_root(cn, not_before, not_after):
    """A self-signed P-256 root valid over [not_before, not_after]."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    b = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(not_before).not_valid_after(not_after))
    return ca_extensions(b, key.public_key(), key.public_key()).sign(key, hashes.SHA256()), key


def stamp(cert):
    return int(cert.not_valid_after.replace(tzinfo=datetime.timezone.utc).timestamp())


class Signetd:
    """signetd on loopback with any free ports (read from its JSON log)."""

    def __init__(self, conf, log_path, flags=()):
        self.log_path = log_path
        args = [SIGNETD, "--config", conf, "--serving-address", "127.0.0.1:0", "--http-address", "127.0.0.1",
                "--metrics-port", "0", "--readiness-probe-port", "0", "--log-format", "json",
                "--signer-threads", "1", *flags]
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=base_env())
        self.port = self.metrics_port = None

    def records(self, msg=None):
        out = []
        for line in read(self.log_path).splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if msg is None or r.get("msg") == msg:
                out.append(r)
        return out

    def wait_serving(self, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"signetd exited {self.proc.returncode}:\n{read(self.log_path)}")
            rec = self.records("signetd serving")
            if rec:
                self.port, self.metrics_port = rec[0]["port"], rec[0]["metrics_port"]
                return
            time.sleep(0.02)
        raise RuntimeError("signetd did not start:\n" + read(self.log_path))

    def metrics(self):
        """/metrics as {name: value} (the unlabelled series)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*) (\S+)$", line)
            if m:
                out[m.group(1)] = float(m.group(2))
        return out

    def wait_for(self, what, pred, timeout=60):
        """Polls pred() until it returns a true value (SG_WAIT_FOR's way)."""
        deadline = time.time() + timeout
        while True:
            v = pred()
            if v:
                return v
            if time.time() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"timed out waiting for {what}:\n{read(self.log_path)}")
            time.sleep(0.05)

    def stop(self):
        return stop(self.proc)


class RootExpiry(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="daemon-rootexpiry.", dir=os.environ.get("SIGNET_TEST_TMP"))
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def ca_under(self, root, root_key, bundle):
        """A signetctl init CA whose HSM key is re-certified by root (the
        CA's root), with bundle (PEM) as its root-cert; the config path."""
        d = self.path("ca")
        subprocess.run([SIGNETCTL, "init", "--dir", d, "--log-level", "warn"], check=True, stdout=subprocess.DEVNULL)
        conf = os.path.join(d, "signet.conf")
        subprocess.run([SIGNETCTL, "csr", "--config", conf, "--subject", "O=signet test,CN=issuing CA",
                        "--out", self.path("ca.csr")], check=True)
        csr = x509.load_pem_x509_csr(read(self.path("ca.csr"), "rb"))
        b = (x509.CertificateBuilder().subject_name(csr.subject).issuer_name(root.subject)
             .public_key(csr.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now_utc() - datetime.timedelta(hours=1))
             .not_valid_after(now_utc() + datetime.timedelta(days=20)))
        cert = ca_extensions(b, csr.public_key(), root_key.public_key()).sign(root_key, hashes.SHA256())
        write(self.path("ca.pem"), pem(cert))
        write(self.path("bundle.pem"), bundle)
        subprocess.run([SIGNETCTL, "import", "--config", conf, "--cert", self.path("ca.pem"),
                        "--root", self.path("bundle.pem")], check=True, stdout=subprocess.DEVNULL)
        return conf

    def start(self, conf, name, flags=()):
        d = Signetd(conf, self.path(name + ".log"), flags)
        self.addCleanup(d.stop)
        d.wait_serving()
        return d

    def issue(self, d, conf):
        """A workload certificate through CreateCertificate (gRPC over TLS,
        signetctl request); the chain file's path."""
        p, out = request_workload_cert(SIGNETCTL, conf, d.port, self.path("workload"))
        self.assertEqual(p.returncode, 0, p.stderr + read(d.log_path))
        return out

    def test_overlap_outlived_signs_and_reports_the_live_root(self):
        t = now_utc()
        root_a, _ = make_root("root A", t - datetime.timedelta(days=2), t - datetime.timedelta(days=1))
        root_b, key_b = make_root("root B", t - datetime.timedelta(hours=1), t + datetime.timedelta(days=30))
        conf = self.ca_under(root_b, key_b, pem(root_a) + pem(root_b))
        d = self.start(conf, "overlap")

        # Signing works, and the chain verifies against B alone.
        chain = self.issue(d, conf)
        certs = [x509.load_pem_x509_certificate(b.encode()) for b in
                 re.findall(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----\n", read(chain), re.S)]
        # leaf, the CA certificate (under B), then the bundle as served: A, B
        self.assertEqual(len(certs), 4, read(chain))
        self.assertEqual(certs[1].issuer, root_b.subject)
        write(self.path("leaf.pem"), pem(certs[0]))
        write(self.path("untrusted.pem"), pem(certs[1]))
        write(self.path("b.pem"), pem(root_b))
        v = subprocess.run(["openssl", "verify", "-CAfile", self.path("b.pem"), "-untrusted",
                            self.path("untrusted.pem"), self.path("leaf.pem")], capture_output=True, text=True)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        # A is still handed out: the bundle is served as the file has it.
        self.assertEqual([c.fingerprint(hashes.SHA256()) for c in certs[2:]],
                         [root_a.fingerprint(hashes.SHA256()), root_b.fingerprint(hashes.SHA256())])

        # The root metrics are B's; with B's 30 days left no rotation is due.
        m = d.metrics()
        self.assertEqual(m["citadel_server_root_cert_expiry_timestamp"], stamp(root_b))
        self.assertGreater(m["citadel_server_root_cert_expiry_seconds"], 29 * 86400)
        self.assertGreater(m["citadel_server_cert_chain_expiry_seconds"], 0)
        self.assertEqual(m["signet_ca_root_rotation_due"], 0)
        validity = int((root_b.not_valid_after - root_b.not_valid_before).total_seconds())
        self.assertEqual(m["signet_ca_root_rotation_lead_seconds"], validity // 3)

        # A is reported once as expired, by name; never as the CA's root.
        rec = d.wait_for("the expired root's warning", lambda: d.records(EXPIRED_MSG))
        self.assertEqual(rec[0]["root"], "/CN=root A", rec)
        self.assertEqual(rec[0]["level"], "warn", rec)
        time.sleep(2.2)  # two more housekeeping ticks (an absence: a fixed quiet time)
        self.assertEqual(len(d.records(EXPIRED_MSG)), 1, read(d.log_path))
        self.assertFalse(d.records("the CA's root has expired: the certificates it issues no longer verify"))
        self.assertFalse(d.records(DUE_MSG))

        # signetctl status: B is the root, A another one, expired.
        st = subprocess.run([SIGNETCTL, "status", "--config", conf, "--log-level", "warn"], check=True,
                            capture_output=True, text=True).stdout
        self.assertRegex(st, r"(?m)^root +/CN=root B$")
        want = root_b.not_valid_after.strftime("%Y-%m-%dT%H:%M:%SZ")
        self.assertRegex(st, rf"(?m)^root-not-after +{want}$")
        self.assertRegex(st, r"(?m)^other-root +/CN=root A not-after \S+ \(expired\)$")

    def test_rotation_due_at_the_lead(self):
        t = now_utc()
        # B's validity: an hour behind, ten minutes ahead. A third of it
        # (23 m 20 s) is more than what is left: due with the default.
        root_b, key_b = make_root("root B", t - datetime.timedelta(hours=1), t + datetime.timedelta(minutes=10))
        conf = self.ca_under(root_b, key_b, pem(root_b))
        validity = int((root_b.not_valid_after - root_b.not_valid_before).total_seconds())

        d = self.start(conf, "default-lead")
        m = d.metrics()
        self.assertEqual(m["signet_ca_root_rotation_due"], 1)
        self.assertEqual(m["signet_ca_root_rotation_lead_seconds"], validity // 3)
        rec = d.wait_for("the rotation warning", lambda: d.records(DUE_MSG))
        self.assertEqual(rec[0]["root"], "/CN=root B", rec)
        self.assertEqual(rec[0]["level"], "warn", rec)
        self.assertEqual(rec[0]["lead_seconds"], validity // 3, rec)
        self.assertEqual(d.stop(), 0)

        # A lead that puts the crossing CROSS seconds after signetd is
        # started (which takes a second or two): not due, then due.
        CROSS = 20
        lead = stamp(root_b) - int(time.time()) - CROSS
        crossing = stamp(root_b) - lead
        d = self.start(conf, "set-lead", ["--root-rotation-lead", f"{lead}s"])
        m = d.metrics()
        self.assertLess(time.time(), crossing - 1, "signetd took longer than CROSS to start")
        self.assertEqual(m["signet_ca_root_rotation_due"], 0, m)
        self.assertEqual(m["signet_ca_root_rotation_lead_seconds"], lead)
        self.assertFalse(d.records(DUE_MSG), read(d.log_path))
        d.wait_for("the rotation to fall due", lambda: d.metrics()["signet_ca_root_rotation_due"] == 1,
                   timeout=CROSS + 60)
        self.assertGreaterEqual(time.time(), crossing)
        rec = d.wait_for("the rotation warning", lambda: d.records(DUE_MSG))
        self.assertEqual(rec[0]["lead_seconds"], lead, rec)
        self.assertLessEqual(rec[0]["seconds_left"], lead, rec)
        # Once per crossing, not per scrape or tick: read /metrics a few
        # times over two more housekeeping ticks (an absence: a fixed time).
        end = time.time() + 2.2
        while time.time() < end:
            self.assertEqual(d.metrics()["signet_ca_root_rotation_due"], 1)
            time.sleep(0.2)
        self.assertEqual(len(d.records(DUE_MSG)), 1, read(d.log_path))

    def test_the_cas_own_root_expiring_is_an_error(self):
        # C lives half a minute more: signetd starts under it, then sees
        # it expire.
        t = now_utc()
        root_c, key_c = make_root("root C", t - datetime.timedelta(hours=1), t + datetime.timedelta(seconds=30))
        conf = self.ca_under(root_c, key_c, pem(root_c))
        d = self.start(conf, "own-root")
        self.assertLess(time.time(), stamp(root_c), "signetd took longer than C's life to start")
        rec = d.wait_for("the expired CA root's error",
                         lambda: d.records("the CA's root has expired: the certificates it issues no longer verify"),
                         timeout=120)
        self.assertGreaterEqual(time.time(), stamp(root_c))
        self.assertEqual(rec[0]["level"], "error", rec)
        self.assertEqual(rec[0]["root"], "/CN=root C", rec)
        self.assertFalse(d.records(EXPIRED_MSG), read(d.log_path))  # it is the CA's root, not another one
        m = d.metrics()
        self.assertLessEqual(m["citadel_server_root_cert_expiry_seconds"], 0)
        self.assertEqual(m["signet_ca_root_rotation_due"], 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
