#!/usr/bin/python3
"""signetd under systemd: sd_notify, SIGHUP reload, the PIN as a credential.

The test plays systemd's part itself: it binds an AF_UNIX datagram socket,
starts the real signetd on a SoftHSM2 CA that `signetctl init` makes, with
NOTIFY_SOCKET pointing at it, and reads what signetd sends, as the service
manager would (sd_notify(3)):

  * READY=1 arrives once, and /readyz already answers 200 when it does;
    before it, /readyz answers 503 or not at all;
  * STATUS= says ready, and its issued count goes up after a certificate
    is issued (`signetctl request`, a real gRPC/TLS client);
  * WATCHDOG=1 arrives repeatedly with WATCHDOG_USEC=1000000 and
    WATCHDOG_PID=<signetd's pid> (set by the shell that execs signetd), and
    never without WATCHDOG_USEC;
  * SIGHUP gives RELOADING=1 then READY=1; a serving certificate file
    rewritten with its old mtime (which the once-a-second check cannot
    notice) is served afterwards, and so is a root-ca-file rewritten with
    its old size and mtime (returned to clients after the leaf);
  * SIGTERM gives STOPPING=1 and signetd exits 0;
  * a NOTIFY_SOCKET that points nowhere does not stop signetd (one warning);
  * pin-credential: the PIN from $CREDENTIALS_DIRECTORY/NAME wins over a
    wrong pin-file; without CREDENTIALS_DIRECTORY signetd says where it
    comes from; a name that is not one file name is refused at once.

usage: test_systemd.py SIGNETCTL SIGNETD
"""
import json
import os
import re
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
import datetime

from signetd_proc import base_env, read, request_workload_cert, stop, write

SIGNETCTL, SIGNETD = sys.argv[1:3]
del sys.argv[1:3]


SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; also the SCM_ type of its message


def sanitized(binary):
    """True for a sanitizer build (an ASan or TSan runtime in the binary),
    which runs slower and shares CI's two vCPUs with other tests."""
    with open(binary, "rb") as f:
        data = f.read()
    return b"__asan_init" in data or b"__tsan_init" in data


class Notify:
    """systemd's end of NOTIFY_SOCKET: a datagram socket, every message kept
    with the time it arrived: the kernel's receive timestamp, so that the
    times are signetd's pace and not when this test got round to reading
    (which a loaded machine delays)."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.sock.bind(path)
        self.sock.setblocking(False)
        self.msgs = []  # (time, {var: value})

    def poll(self):
        while True:
            try:
                data, anc, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(16))
            except BlockingIOError:
                return
            t = time.time()
            for level, kind, value in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= 16:
                    sec, nsec = struct.unpack("qq", value[:16])
                    t = sec + nsec / 1e9
            fields = dict(line.split("=", 1) for line in data.decode().split("\n") if "=" in line)
            self.msgs.append((t, fields))

    def wait(self, pred, timeout=30, start=0):
        """The index of the first message from start on that satisfies pred."""
        deadline = time.time() + timeout
        while True:
            self.poll()
            for i in range(start, len(self.msgs)):
                if pred(self.msgs[i][1]):
                    return i
            if time.time() > deadline:
                return None
            time.sleep(0.02)

    def with_var(self, var, value=None):
        return [f for _, f in self.msgs if var in f and (value is None or f[var] == value)]

    def close(self):
        self.sock.close()


class Signetd:
    """signetd started through /bin/sh, which sets WATCHDOG_PID to its own
    pid and then execs signetd (so the pid is signetd's, as systemd sets
    it). Ports are read from its JSON log."""

    def __init__(self, conf, log_path, flags=(), env=None, watchdog_pid=False):
        self.log_path = log_path
        args = [SIGNETD, "--config", conf, "--serving-address", "127.0.0.1:0", "--http-address", "127.0.0.1",
                "--metrics-port", "0", "--readiness-probe-port", "0", "--log-format", "json",
                "--signer-threads", "2", *flags]
        cmd = ["/bin/sh", "-c", ('WATCHDOG_PID=$$; export WATCHDOG_PID; ' if watchdog_pid else '') + 'exec "$@"',
               "sh", *args]
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env or base_env())
        self.port = self.probe_port = None

    def records(self):
        out = []
        for line in read(self.log_path).splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def wait_serving(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"signetd exited {self.proc.returncode}:\n{read(self.log_path)}")
            rec = next((r for r in self.records() if r.get("msg") == "signetd serving"), None)
            if rec:
                self.port, self.probe_port = rec["port"], rec["probe_port"]
                return
            time.sleep(0.02)
        raise RuntimeError("signetd did not start:\n" + read(self.log_path))

    def readyz(self):
        """The /readyz status, or None when nothing answers yet."""
        if not self.probe_port:
            return None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.probe_port}/readyz", timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return None

    def stop(self, sig=signal.SIGTERM):
        return stop(self.proc, sig)


def self_signed(cn):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def same_size_pair(cn_a, cn_b):
    """Two self-signed certificates whose PEM has the same length (ECDSA
    signatures vary by a byte or two), so that a file rewritten from one to
    the other keeps its size."""
    for _ in range(100):
        a, b = self_signed(cn_a), self_signed(cn_b)
        if len(a) == len(b):
            return a, b
    raise RuntimeError("no same-size pair")


class Systemd(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="daemon-systemd.", dir=os.environ.get("SIGNET_TEST_TMP"))
        cls.dir = os.path.join(cls.tmp, "ca")
        subprocess.run([SIGNETCTL, "init", "--dir", cls.dir, "--log-level", "warn"], check=True,
                       stdout=subprocess.DEVNULL)
        cls.conf = os.path.join(cls.dir, "signet.conf")
        cls.root = os.path.join(cls.dir, "root-cert.pem")
        cls.n = 0

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def path(self, name):
        Systemd.n += 1
        return os.path.join(self.tmp, f"{Systemd.n}.{name}")

    def notify_socket(self):
        # AF_UNIX paths are short (108 bytes): a directory of its own in /tmp.
        d = tempfile.mkdtemp(prefix="sdn.")
        self.addCleanup(shutil.rmtree, d, True)
        n = Notify(os.path.join(d, "notify"))
        self.addCleanup(n.close)
        return n

    def start(self, name, flags=(), env=None, watchdog_pid=False, serving=True):
        d = Signetd(self.conf, self.path(name + ".log"), flags, env, watchdog_pid)
        self.addCleanup(d.stop)
        if serving:
            d.wait_serving()
        return d

    def issue(self, d, ca_file=None):
        """A workload certificate through signetd's CreateCertificate
        (signetctl request: gRPC over TLS); the chain as PEM text."""
        p, out = request_workload_cert(SIGNETCTL, self.conf, d.port, self.path("workload"), ca_file)
        self.assertEqual(p.returncode, 0, p.stderr + read(d.log_path))
        return read(out)

    def served_cert(self, d):
        """The certificate signetd presents (ALPN h2, as istio-agent connects)."""
        ctx = ssl.create_default_context(cafile=self.root)
        ctx.set_alpn_protocols(["h2"])
        with socket.create_connection(("127.0.0.1", d.port), timeout=10) as sock:
            with ctx.wrap_socket(sock, server_hostname="localhost") as tls:
                return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))

    def issue_serving(self, name):
        """A serving certificate and key for localhost, signed by the CA."""
        key = ec.generate_private_key(ec.SECP256R1())
        csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=True).sign(key, hashes.SHA256())
        base = self.path(name)
        write(base + ".csr", csr.public_bytes(serialization.Encoding.PEM))
        subprocess.run([SIGNETCTL, "issue", "--config", self.conf, "--profile", "generic", "--csr", base + ".csr",
                        "--ttl", "1h", "--out", base + ".crt"], check=True)
        write(base + ".key", key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        return base + ".crt", base + ".key"

    # ---- the tests ------------------------------------------------------

    def test_ready_status_and_stopping(self):
        n = self.notify_socket()
        d = self.start("ready", env=base_env(NOTIFY_SOCKET=n.path), serving=False)
        # Until READY=1 arrives, /readyz is probed; the moment it arrives,
        # /readyz answers 200 (the flag it reads is set before the send).
        deadline = time.time() + 60
        while time.time() < deadline:
            n.poll()
            if n.with_var("READY", "1"):
                break
            self.assertIsNone(d.proc.poll(), read(d.log_path))
            if d.port is None:
                rec = next((r for r in d.records() if r.get("msg") == "signetd serving"), None)
                if rec:
                    d.port, d.probe_port = rec["port"], rec["probe_port"]
            d.readyz()
        self.assertTrue(n.with_var("READY", "1"), read(d.log_path))
        if d.port is None:  # "signetd serving" is logged before the first housekeeping
            d.wait_serving()
        self.assertEqual(d.readyz(), 200)
        ready = n.with_var("READY", "1")[0]
        self.assertRegex(ready.get("STATUS", ""), r"^ready; issued \d+, refused/failed \d+$")
        issued0 = int(re.search(r"issued (\d+)", ready["STATUS"]).group(1))
        # No watchdog was asked for: no ping. An absence, so a fixed quiet
        # time (three pings' worth) is what is checked.
        time.sleep(1.5)
        n.poll()
        self.assertFalse(n.with_var("WATCHDOG"), n.msgs)

        # The issued count in STATUS follows the service's counter.
        self.issue(d)
        self.issue(d)
        i = n.wait(lambda f: "STATUS" in f and int(re.search(r"issued (\d+)", f["STATUS"]).group(1)) >= issued0 + 2,
                   timeout=60)
        self.assertIsNotNone(i, n.msgs)
        self.assertTrue(n.msgs[i][1]["STATUS"].startswith("ready;"))
        self.assertEqual(len(n.with_var("READY", "1")), 1)  # once, not on every status

        # SIGTERM: STOPPING=1 first, then a clean exit.
        self.assertEqual(d.stop(), 0, read(d.log_path))
        n.poll()
        self.assertTrue(n.with_var("STOPPING", "1"), n.msgs)

    def test_watchdog(self):
        n = self.notify_socket()
        d = self.start("watchdog", env=base_env(NOTIFY_SOCKET=n.path, WATCHDOG_USEC="1000000"), watchdog_pid=True)
        self.assertIsNotNone(n.wait(lambda f: f.get("READY") == "1"), read(d.log_path))
        start = len(n.msgs)

        def pings():
            return [t for t, f in n.msgs[start:] if f.get("WATCHDOG") == "1"]
        # Seven pings, however long a loaded machine takes to send them; the
        # pace is judged by when the kernel received each (Notify).
        deadline = time.time() + 60
        while len(pings()) < 7 and time.time() < deadline:
            time.sleep(0.05)
            n.poll()
        self.assertGreaterEqual(len(pings()), 7, n.msgs)
        gaps = sorted(b - a for a, b in zip(pings(), pings()[1:]))
        # Every half interval (0.5 s), and never near the interval (1 s),
        # past which systemd would kill signetd. (The interval stays 1 s in
        # every build: signetd's loop waits at most 1 s, so a longer one
        # would hide a pace that ignored it.) A sanitizer build, slower and
        # beside other tests, may lose one gap to a stall of the machine:
        # a stall lengthens the gap before the late ping only.
        self.assertLess(gaps[len(gaps) // 2], 0.7, gaps)
        self.assertLess(gaps[-2] if sanitized(SIGNETD) else gaps[-1], 0.9, gaps)
        self.assertEqual(d.stop(), 0)

        # WATCHDOG_PID naming another process: not ours, no pings.
        n2 = self.notify_socket()
        d2 = self.start("watchdog-other-pid", env=base_env(NOTIFY_SOCKET=n2.path, WATCHDOG_USEC="1000000",
                                                          WATCHDOG_PID="1"))
        self.assertIsNotNone(n2.wait(lambda f: f.get("READY") == "1"), read(d2.log_path))
        time.sleep(1.5)  # an absence: a fixed quiet time (three pings' worth) is what is checked
        n2.poll()
        self.assertFalse(n2.with_var("WATCHDOG"), n2.msgs)
        self.assertEqual(d2.stop(), 0)

    def test_sighup_reloads_files(self):
        a_crt, a_key = self.issue_serving("a")
        b_crt, b_key = self.issue_serving("b")
        live_crt, live_key = self.path("live.crt"), self.path("live.key")
        shutil.copy(a_crt, live_crt)
        shutil.copy(a_key, live_key)
        extra_a, extra_b = same_size_pair("extra root A", "extra root B")
        root_bundle = self.path("roots.pem")
        ca_root = read(self.root)
        write(root_bundle, ca_root + extra_a, 0o644)

        n = self.notify_socket()
        d = self.start("reload", ["--serving-certificate-file", live_crt, "--serving-key-file", live_key,
                                  "--root-ca-file", root_bundle], env=base_env(NOTIFY_SOCKET=n.path))
        self.assertIsNotNone(n.wait(lambda f: f.get("READY") == "1"), read(d.log_path))
        want_a = x509.load_pem_x509_certificate(read(a_crt, "rb")).serial_number
        want_b = x509.load_pem_x509_certificate(read(b_crt, "rb")).serial_number
        self.assertEqual(self.served_cert(d).serial_number, want_a)
        chain = self.issue(d)
        self.assertIn(extra_a, chain)

        # Rewrite both files in place and put their old mtimes (and, for
        # the bundle, its old size) back: only SIGHUP's forced re-read can
        # see the change.
        st_crt, st_key, st_root = os.stat(live_crt), os.stat(live_key), os.stat(root_bundle)
        write(live_key, read(b_key, "rb"))
        write(live_crt, read(b_crt, "rb"), 0o644)
        write(root_bundle, ca_root + extra_b, 0o644)
        for p, st in ((live_crt, st_crt), (live_key, st_key), (root_bundle, st_root)):
            os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
        self.assertEqual(os.stat(root_bundle).st_size, st_root.st_size)
        time.sleep(2.2)  # two housekeeping ticks: nothing noticed (an absence: a fixed quiet time)
        self.assertEqual(self.served_cert(d).serial_number, want_a)

        mark = len(n.msgs)
        d.proc.send_signal(signal.SIGHUP)
        r = n.wait(lambda f: f.get("RELOADING") == "1", start=mark)
        self.assertIsNotNone(r, n.msgs)
        self.assertIn("MONOTONIC_USEC", n.msgs[r][1])
        ok = n.wait(lambda f: f.get("READY") == "1", start=r + 1)
        self.assertIsNotNone(ok, n.msgs)
        self.assertTrue(n.msgs[ok][1].get("STATUS", "").startswith("ready;"), n.msgs[ok])
        self.assertEqual(self.served_cert(d).serial_number, want_b)
        chain = self.issue(d)
        self.assertIn(extra_b, chain)
        self.assertNotIn(extra_a, chain)
        rec = [x for x in d.records() if x.get("msg") == "reloaded"]
        self.assertEqual(len(rec), 1, rec)
        self.assertEqual(rec[0]["reread"], "serving-certificate-file,config,root-ca-file,jwt-jwks-file")
        self.assertEqual(rec[0]["failed"], "")

        # A broken file keeps what was loaded, with an error saying why;
        # the reload still ends with READY=1.
        write(live_crt, "not a certificate\n", 0o644)
        mark = len(n.msgs)
        d.proc.send_signal(signal.SIGHUP)
        ok = n.wait(lambda f: f.get("READY") == "1", start=mark)
        self.assertIsNotNone(ok, n.msgs)
        self.assertEqual(self.served_cert(d).serial_number, want_b)
        errs = [x for x in d.records() if x.get("level") == "error" and "serving certificate" in x.get("msg", "")]
        self.assertTrue(errs, d.records())
        self.assertIn(live_crt, errs[-1].get("detail", ""))
        rec = [x for x in d.records() if x.get("msg") == "reloaded"]
        self.assertEqual(rec[-1]["failed"], "serving-certificate-file")
        self.assertEqual(d.stop(), 0, read(d.log_path))

    def test_notify_socket_nowhere(self):
        gone = os.path.join(tempfile.mkdtemp(prefix="sdn."), "none")
        self.addCleanup(shutil.rmtree, os.path.dirname(gone), True)
        d = self.start("nowhere", env=base_env(NOTIFY_SOCKET=gone, WATCHDOG_USEC="1000000"), watchdog_pid=True)
        deadline = time.time() + 60
        while time.time() < deadline and d.readyz() != 200:
            time.sleep(0.1)
        self.assertEqual(d.readyz(), 200)
        self.issue(d)

        def warns():
            return [r for r in d.records() if r.get("msg") == "cannot notify systemd; going on without it"]
        deadline = time.time() + 60
        while time.time() < deadline and not warns():
            time.sleep(0.1)
        # Then many pings that cannot be sent, each of which must not warn
        # again: an absence, so a fixed time (three pings' worth).
        time.sleep(1.5)
        self.assertEqual(len(warns()), 1, d.records())
        self.assertEqual(d.stop(), 0)

    # ---- pin-credential --------------------------------------------------

    def wrong_pin_conf(self):
        """The init config with pin-file pointing at a wrong PIN."""
        wrong = self.path("wrong-pin")
        write(wrong, "0000000000\n")
        conf = os.path.join(self.dir, f"wrong-pin-{Systemd.n}.conf")
        write(conf, re.sub(r"(?m)^pin-file = .*$", f"pin-file = {wrong}", read(self.conf)), 0o644)
        self.addCleanup(os.unlink, conf)
        return conf

    def test_pin_credential_wins_over_pin_file(self):
        conf = self.wrong_pin_conf()
        # The wrong pin-file alone fails: it is what the credential overrides.
        p = subprocess.run([SIGNETD, "--config", conf, "--serving-address", "127.0.0.1:0", "--metrics-port", "0",
                            "--readiness-probe-port", "0", "--http-address", "127.0.0.1"],
                           capture_output=True, text=True, env=base_env(), timeout=60)
        self.assertEqual(p.returncode, 1, p.stderr)
        creds = tempfile.mkdtemp(prefix="creds.", dir=self.tmp)
        os.chmod(creds, 0o700)
        # The longest name there is (255 bytes, a file name's limit) is taken.
        name = "p" * 255
        write(os.path.join(creds, name), read(os.path.join(self.dir, "pin")), 0o400)
        d = Signetd(conf, self.path("cred.log"), ["--pin-credential", name],
                    env=base_env(CREDENTIALS_DIRECTORY=creds))
        self.addCleanup(d.stop)
        d.wait_serving()
        self.assertIn("BEGIN CERTIFICATE", self.issue(d))
        self.assertEqual(d.stop(), 0)

    def test_pin_credential_with_acl(self):
        """The credential as systemd writes it for a unit with User=: 0400,
        owned by root, plus a POSIX ACL entry giving the service's user read
        access, which stat shows as mode 0440. Here the daemon's user is the
        test's own (root), named in the ACL entry as systemd names it."""
        creds = tempfile.mkdtemp(prefix="creds.", dir=self.tmp)
        os.chmod(creds, 0o700)
        cred = os.path.join(creds, "hsm-pin")
        write(cred, read(os.path.join(self.dir, "pin")), 0o400)
        entries = [(0x01, 4, 0xFFFFFFFF), (0x02, 4, os.geteuid()), (0x04, 0, 0xFFFFFFFF), (0x10, 4, 0xFFFFFFFF),
                   (0x20, 0, 0xFFFFFFFF)]
        try:
            os.setxattr(cred, "system.posix_acl_access",
                        struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries))
        except OSError as e:
            self.skipTest(f"no POSIX ACLs here: {e}")
        self.assertEqual(os.stat(cred).st_mode & 0o777, 0o440)
        d = Signetd(self.wrong_pin_conf(), self.path("acl.log"), ["--pin-credential", "hsm-pin"],
                    env=base_env(CREDENTIALS_DIRECTORY=creds))
        self.addCleanup(d.stop)
        d.wait_serving()
        self.assertIn("BEGIN CERTIFICATE", self.issue(d))
        self.assertEqual(d.stop(), 0)

    def test_pin_credential_refused(self):
        base = [SIGNETD, "--config", self.conf, "--serving-address", "127.0.0.1:0", "--metrics-port", "0",
                "--readiness-probe-port", "0", "--http-address", "127.0.0.1"]
        p = subprocess.run(base + ["--pin-credential", "signet-pin"], capture_output=True, text=True,
                           env=base_env(), timeout=60)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("pin-credential signet-pin: CREDENTIALS_DIRECTORY is not set; LoadCredential= in the unit "
                      "provides it", p.stderr)
        creds = tempfile.mkdtemp(prefix="creds.", dir=self.tmp)
        write(os.path.join(self.tmp, "pin"), read(os.path.join(self.dir, "pin")))  # what ../pin would reach
        for name, msg in (("../pin", "is not a credential name"), ("..", "is not a credential name"),
                          (".", "is not a credential name"), ("a/b", "is not a credential name"),
                          ("", "the credential name is empty"), ("x" * 256, "--pin-credential")):
            with self.subTest(name=name[:20]):
                p = subprocess.run(base + [f"--pin-credential={name}"], capture_output=True, text=True,
                                   env=base_env(CREDENTIALS_DIRECTORY=creds), timeout=60)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn(msg, p.stderr)
        # A credential the unit did not load: named, not found.
        p = subprocess.run(base + ["--pin-credential", "absent"], capture_output=True, text=True,
                           env=base_env(CREDENTIALS_DIRECTORY=creds), timeout=60)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("pin-credential absent:", p.stderr)

    def test_help_documents_precedence(self):
        out = subprocess.run([SIGNETD, "--help"], check=True, capture_output=True, text=True).stdout
        self.assertRegex(out, r"--pin-credential .*CREDENTIALS_DIRECTORY.*precedence over pin-file and pin-env")


if __name__ == "__main__":
    unittest.main(verbosity=2)
