#!/usr/bin/python3
"""End-to-end tests of signetd with clients signet did not write.

Python's grpcio (Debian's python3-grpcio) calls
istio.v1.auth.IstioCertificateService/CreateCertificate over TLS with CSRs
made the way istio-agent makes them; the chains are checked with
`openssl verify` and Python's cryptography. Tokens are minted by
`signetctl token` (the development issuer that `signetctl init` sets up) or,
for the hostile cases, built here by hand with the issuer's key.

usage: test_e2e.py SIGNETCTL SIGNETD PROTO_DIR
"""
import concurrent.futures
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

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, utils
from cryptography.x509.oid import ExtendedKeyUsageOID, ExtensionOID

SIGNETCTL, SIGNETD, PROTO_DIR = sys.argv[1:4]
del sys.argv[1:4]

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import signet_e2e  # noqa: E402
from signet_e2e import TD, b64url, make_csr, read, spiffe  # noqa: E402,F401

METHOD = "/istio.v1.auth.IstioCertificateService/CreateCertificate"


def compile_proto(out):
    signet_e2e.compile_proto(PROTO_DIR, out)


class Signetd(signet_e2e.Signetd):
    def __init__(self, conf, *flags, threads=2):
        super().__init__(SIGNETD, conf, *flags, threads=threads)



class E2E(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="e2e.", dir=os.environ.get("SIGNET_TEST_TMP"))
        compile_proto(cls.tmp)
        import ca_pb2
        import ca_pb2_grpc
        cls.pb, cls.pb_grpc = ca_pb2, ca_pb2_grpc
        cls.dir = os.path.join(cls.tmp, "ca")
        subprocess.run([SIGNETCTL, "init", "--dir", cls.dir, "--log-level", "warn"], check=True,
                       stdout=subprocess.DEVNULL)
        cls.conf = os.path.join(cls.dir, "signet.conf")
        cls.root = read(os.path.join(cls.dir, "root-cert.pem"), "rb")
        cls.d = Signetd(cls.conf, "--ca-trusted-node-accounts", "istio-system/ztunnel")
        cls.channel = cls.open_channel(cls.d.port)
        cls.stub = cls.pb_grpc.IstioCertificateServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        rc = cls.d.stop()
        assert rc == 0, f"signetd exited {rc}:\n{cls.d.text()}"
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def open_channel(cls, port, client_cert=None):
        creds = grpc.ssl_channel_credentials(root_certificates=cls.root,
                                             private_key=client_cert and client_cert[1],
                                             certificate_chain=client_cert and client_cert[0])
        # istio-agent keeps pinging every 30 s; a server must accept that.
        opts = [("grpc.ssl_target_name_override", "localhost"), ("grpc.keepalive_time_ms", 30000)]
        return grpc.secure_channel(f"127.0.0.1:{port}", creds, options=opts)

    @classmethod
    def token(cls, ns="default", sa="default", audience="istio-ca"):
        return subprocess.run([SIGNETCTL, "token", "--config", cls.conf, "--namespace", ns, "--service-account", sa,
                               "--audience", audience], check=True, capture_output=True,
                              text=True).stdout.strip()

    @classmethod
    def forge(cls, claims=None, header=None, key=None, raw_sig=None):
        """A token signed with the development issuer's key (or another)."""
        if key is None:
            key = serialization.load_pem_private_key(read(os.path.join(cls.dir, "jwt-signing-key.pem"), "rb"), None)
        now = int(time.time())
        body = {"iss": "https://signet.invalid/dev-issuer", "sub": "system:serviceaccount:default:default",
                "aud": ["istio-ca"], "exp": now + 600, "iat": now, "nbf": now - 5,
                "kubernetes.io": {"namespace": "default", "serviceaccount": {"name": "default", "uid": "u1"}}}
        body.update(claims or {})
        jwks = json.loads(read(os.path.join(cls.dir, "jwks.json")))
        head = {"alg": "ES256", "kid": jwks["keys"][0]["kid"], "typ": "JWT"}
        head.update(header or {})
        signing_input = f"{b64url(json.dumps(head).encode())}.{b64url(json.dumps(body).encode())}"
        if raw_sig is not None:
            return f"{signing_input}.{raw_sig}"
        der = key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        r, s = utils.decode_dss_signature(der)
        return f"{signing_input}.{b64url(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"

    def call(self, csr, token=None, ttl=0, metadata=None, cluster_id="Kubernetes", stub=None):
        req = self.pb.IstioCertificateRequest(csr=csr, validity_duration=ttl)
        if metadata:
            req.metadata.update(metadata)
        md = []
        if token:
            md.append(("authorization", f"Bearer {token}"))
        if cluster_id is not None:
            md.append(("clusterid", cluster_id))
        return (stub or self.stub).CreateCertificate(req, metadata=md, timeout=30)

    def expect_code(self, code, fn, *args, **kw):
        with self.assertRaises(grpc.RpcError) as cm:
            fn(*args, **kw)
        self.assertEqual(cm.exception.code(), code, cm.exception.details())
        return cm.exception.details()

    def check_chain(self, chain, identity, max_ttl=3600):
        self.assertGreaterEqual(len(chain), 2)
        for pem in chain:
            self.assertTrue(pem.endswith("\n"))
            self.assertIn("-----BEGIN CERTIFICATE-----", pem)
        self.assertEqual(chain[-1].encode(), self.root)  # root bundle last, unsplit
        path = os.path.join(self.tmp, f"chain.{time.time_ns()}.pem")
        with open(path, "w") as f:
            f.write("".join(chain))
        v = subprocess.run(["openssl", "verify", "-CAfile", os.path.join(self.dir, "root-cert.pem"), path],
                           capture_output=True, text=True)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        leaf = x509.load_pem_x509_certificate(chain[0].encode())
        self.assertEqual(len(leaf.subject), 0)
        san = leaf.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME)
        self.assertTrue(san.critical)
        self.assertEqual(san.value.get_values_for_type(x509.UniformResourceIdentifier), [identity])
        self.assertEqual(len(list(san.value)), 1)
        eku = leaf.extensions.get_extension_for_oid(ExtensionOID.EXTENDED_KEY_USAGE).value
        self.assertEqual(set(eku), {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH})
        life = (leaf.not_valid_after - leaf.not_valid_before).total_seconds()
        self.assertLessEqual(life, max_ttl + 120 + 5)
        return leaf

    # ---- the good paths ------------------------------------------------------

    def test_istio_agent_csrs(self):
        tok = self.token()
        for key in ("rsa", "ec"):
            chain = list(self.call(make_csr(spiffe("default", "default"), key), tok, ttl=86400).cert_chain)
            self.check_chain(chain, spiffe("default", "default"))

    def test_ttl_is_clamped_to_the_max(self):
        chain = self.call(make_csr(spiffe("default", "default")), self.token(), ttl=10 * 86400).cert_chain
        leaf = self.check_chain(list(chain), spiffe("default", "default"))
        life = (leaf.not_valid_after - leaf.not_valid_before).total_seconds()
        self.assertAlmostEqual(life, 3600 + 120, delta=5)
        chain = self.call(make_csr(spiffe("default", "default")), self.token(), ttl=600).cert_chain
        leaf = x509.load_pem_x509_certificate(chain[0].encode())
        self.assertAlmostEqual((leaf.not_valid_after - leaf.not_valid_before).total_seconds(), 720, delta=5)

    def test_trusted_node_agent_impersonates(self):
        target = spiffe("default", "app")
        chain = self.call(make_csr(target), self.token("istio-system", "ztunnel"),
                          metadata={"ImpersonatedIdentity": target}).cert_chain
        self.check_chain(list(chain), target)

    def test_concurrent_clients(self):
        tok = self.token()
        csrs = [make_csr(spiffe("default", "default")) for _ in range(64)]

        def one(i):
            return len(self.call(csrs[i % len(csrs)], tok).cert_chain)

        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            sizes = list(ex.map(one, range(400)))
        self.assertEqual(sizes, [2] * 400)

    def test_metrics_and_probes(self):
        self.call(make_csr(spiffe("default", "default")), self.token())
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{self.d.metrics_port}/metrics", timeout=10).read().decode()
        for name in ("citadel_server_csr_count", "citadel_server_authentication_failure_count",
                     "citadel_server_csr_parsing_err_count", "citadel_server_success_cert_issuance_count",
                     'citadel_server_csr_sign_err_count{error="CSR_ERROR"}', "citadel_server_root_cert_expiry_timestamp",
                     "citadel_server_cert_chain_expiry_timestamp", "signet_request_duration_seconds_bucket",
                     "signet_hsm_up 1"):
            self.assertIn(name, metrics)
        issued = float(re.search(r"^citadel_server_success_cert_issuance_count (\S+)$", metrics, re.M).group(1))
        self.assertGreaterEqual(issued, 1)
        ready = urllib.request.urlopen(f"http://127.0.0.1:{self.d.probe_port}/readyz", timeout=10)
        self.assertEqual(ready.status, 200)
        health = urllib.request.urlopen(f"http://127.0.0.1:{self.d.probe_port}/healthz", timeout=10)
        self.assertEqual(health.status, 200)

    def test_audit_line_has_no_secrets(self):
        tok = self.token()
        self.call(make_csr(spiffe("default", "default")), tok)
        text = self.d.text()
        self.assertNotIn(tok.split(".")[2], text)
        self.assertNotIn(read(os.path.join(self.dir, "pin")).strip(), text)
        issued = [r for r in self.d.records() if r.get("msg") == "certificate issued"]
        self.assertTrue(issued)
        for key in ("serial", "identity", "not_after", "key", "latency_us"):
            self.assertIn(key, issued[-1])

    # ---- every rejection path, with its status code ---------------------------

    def test_rejections(self):
        ok_csr = make_csr(spiffe("default", "default"))
        U, I = grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.INVALID_ARGUMENT
        self.expect_code(U, self.call, ok_csr, None)                                       # no token
        self.expect_code(U, self.call, ok_csr, self.forge({"exp": int(time.time()) - 600}))  # expired
        self.expect_code(U, self.call, ok_csr, self.forge({"nbf": int(time.time()) + 600}))  # not yet valid
        self.expect_code(U, self.call, ok_csr, self.token(audience="other"))               # wrong audience
        self.expect_code(U, self.call, ok_csr, self.forge({"iss": "https://evil.example"}))  # wrong issuer
        other = ec.generate_private_key(ec.SECP256R1())
        self.expect_code(U, self.call, ok_csr, self.forge(key=other))                      # bad signature
        self.expect_code(U, self.call, ok_csr, self.forge(header={"alg": "none"}, raw_sig=""))  # alg none
        self.expect_code(U, self.call, ok_csr, self.forge(header={"alg": "HS256"}, raw_sig="c2lnbmF0dXJl"))
        tok = self.token()
        self.expect_code(U, self.call, make_csr(spiffe("default", "other")), tok)           # SAN != identity
        self.expect_code(U, self.call, make_csr(spiffe("default", "default"), dns="evil.example"), tok)  # DNS
        self.expect_code(U, self.call, make_csr(spiffe("default", "default"), ca=True), tok)  # CA request
        self.expect_code(U, self.call, make_csr(spiffe("default", "default"), cn="x"), tok)   # CN
        self.expect_code(U, self.call, make_csr(spiffe("default", "app")), tok,
                         metadata={"ImpersonatedIdentity": spiffe("default", "app")})      # untrusted impersonation
        self.expect_code(U, self.call, ok_csr, tok, cluster_id="elsewhere")                # foreign cluster
        self.expect_code(I, self.call, "garbage", tok)                                     # garbage CSR
        details = self.expect_code(I, self.call, ok_csr[:200], tok)                         # truncated CSR
        self.assertNotIn(tok, details)
        with self.assertRaises(grpc.RpcError) as cm:                                        # oversized message
            self.call("A" * (200 * 1024), tok)
        self.assertIn(cm.exception.code(), (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INVALID_ARGUMENT))
        # The server is still fine.
        self.assertEqual(len(self.call(ok_csr, tok).cert_chain), 2)

    # ---- other modes -------------------------------------------------------------

    def test_istiod_policy_and_mtls(self):
        """istiod mode stamps the identity and refuses TTLs above the max;
        the client-certificate authenticator takes the identity from a
        verified peer certificate."""
        d = Signetd(self.conf, "--policy", "istiod", "--enable-client-cert-authenticator")
        try:
            ch = self.open_channel(d.port)
            stub = self.pb_grpc.IstioCertificateServiceStub(ch)
            tok = self.token()
            chain = self.call(make_csr(spiffe("default", "whatever"), dns="ignored.example"), tok, stub=stub).cert_chain
            self.check_chain(list(chain), spiffe("default", "default"))
            self.expect_code(grpc.StatusCode.INVALID_ARGUMENT, self.call, make_csr(spiffe("default", "default")),
                             tok, ttl=7200, stub=stub)
            ch.close()
            # A client certificate issued by signet itself.
            key = ec.generate_private_key(ec.SECP256R1())
            ident = spiffe("vm", "workload")
            csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).add_extension(
                x509.SubjectAlternativeName([x509.UniformResourceIdentifier(ident)]), critical=True).sign(
                key, hashes.SHA256())
            csr_path = os.path.join(self.tmp, "vm.csr")
            with open(csr_path, "wb") as f:
                f.write(csr.public_bytes(serialization.Encoding.PEM))
            cert = subprocess.run([SIGNETCTL, "issue", "--config", self.conf, "--csr", csr_path, "--ttl", "1h"],
                                  check=True, capture_output=True).stdout
            kpem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption())
            ch = self.open_channel(d.port, (cert, kpem))
            stub = self.pb_grpc.IstioCertificateServiceStub(ch)
            chain = self.call(make_csr(ident), None, stub=stub).cert_chain
            self.check_chain(list(chain), ident)
            ch.close()
        finally:
            self.assertEqual(d.stop(), 0, d.text())

    def serving_serial(self, port):
        """The serial of the certificate signetd presents (TLS 1.3, ALPN h2)."""
        for _ in range(3):  # s_client can lose a race with its own stdin EOF; it is not what is tested
            out = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername", "localhost",
                                  "-alpn", "h2", "-CAfile", os.path.join(self.dir, "root-cert.pem"),
                                  "-verify_return_error"], input=b"", capture_output=True, timeout=30)
            if out.returncode == 0 and b"-----BEGIN CERTIFICATE-----" in out.stdout:
                break
            time.sleep(0.2)
        self.assertEqual(out.returncode, 0, (out.stdout + out.stderr).decode(errors="replace"))
        self.assertIn(b"ALPN protocol: h2", out.stdout)
        pem = out.stdout[out.stdout.index(b"-----BEGIN CERTIFICATE-----"):]
        return x509.load_pem_x509_certificate(pem).serial_number

    def issue_serving(self, name):
        key = ec.generate_private_key(ec.SECP256R1())
        csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=True).sign(key, hashes.SHA256())
        base = os.path.join(self.tmp, name)
        with open(base + ".csr", "wb") as f:
            f.write(csr.public_bytes(serialization.Encoding.PEM))
        subprocess.run([SIGNETCTL, "issue", "--config", self.conf, "--profile", "generic", "--csr", base + ".csr",
                        "--ttl", "1h", "--out", base + ".crt"], check=True)
        with open(base + ".key", "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
        return base + ".crt", base + ".key"

    def test_serving_certificate_files_reload(self):
        """A serving certificate from files is picked up again when the files
        change, without a restart; TLS 1.2 and 1.3 both negotiate h2."""
        a_crt, a_key = self.issue_serving("a")
        b_crt, b_key = self.issue_serving("b")
        live_crt, live_key = os.path.join(self.tmp, "live.crt"), os.path.join(self.tmp, "live.key")
        shutil.copy(a_crt, live_crt)
        shutil.copy(a_key, live_key)
        d = Signetd(self.conf, "--serving-certificate-file", live_crt, "--serving-key-file", live_key)
        try:
            first = self.serving_serial(d.port)
            self.assertEqual(first, x509.load_pem_x509_certificate(read(a_crt, "rb")).serial_number)
            for proto in ("-tls1_2", "-tls1_3"):
                out = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{d.port}", proto, "-alpn", "h2",
                                      "-servername", "localhost"], input=b"", capture_output=True, timeout=30)
                self.assertIn(b"ALPN protocol: h2", out.stdout, proto)
            # A different mtime, even where a file system keeps whole
            # seconds: time passing is what is needed, not a state.
            time.sleep(1.1)
            shutil.copy(b_key, live_key)
            shutil.copy(b_crt, live_crt)
            want = x509.load_pem_x509_certificate(read(b_crt, "rb")).serial_number
            deadline = time.time() + 60  # picked up at a housekeeping tick (1 s), slower on a loaded machine
            while time.time() < deadline and self.serving_serial(d.port) != want:
                time.sleep(0.3)
            self.assertEqual(self.serving_serial(d.port), want)
            # Still serving requests on the new certificate.
            stub = self.pb_grpc.IstioCertificateServiceStub(self.open_channel(d.port))
            self.assertEqual(len(self.call(make_csr(spiffe("default", "default")), self.token(), stub=stub).cert_chain), 2)
        finally:
            self.assertEqual(d.stop(), 0, d.text())

    # ---- the PIN in memory -------------------------------------------------------

    def test_pin_out_of_reach_of_same_user_and_dumps(self):
        """signetd runs as an unprivileged user: another process of that user
        can neither ptrace it (gcore fails) nor read its memory files, and a
        core dump made anyway (by root) does not contain the PIN."""
        sanitized = any(m in read(SIGNETD, "rb") for m in (b"__asan_init", b"__tsan_init"))
        # A world-traversable folder owned by nobody, with its own CA and a
        # copy of signetd: in the system's temporary folder, since the
        # checkout (and the build in it) may be one only root can enter.
        base = tempfile.mkdtemp(prefix="signet-dump.")
        os.chmod(base, 0o755)
        ca = os.path.join(base, "ca")
        subprocess.run([SIGNETCTL, "init", "--dir", ca, "--log-level", "warn"], check=True, stdout=subprocess.DEVNULL)
        signetd = os.path.join(base, "signetd")
        shutil.copy(SIGNETD, signetd)
        subprocess.run(["chown", "-R", "nobody:nogroup", base], check=True)
        pin = read(os.path.join(ca, "pin"), "rb").strip()
        nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]
        reach = subprocess.run(nobody + ["test", "-x", signetd])
        self.assertEqual(reach.returncode, 0, f"user nobody cannot reach {signetd}: set TMPDIR to a folder "
                                              "every user can traverse")
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
        env = signet_e2e.sanitizer_env_in(base, env)
        log = open(os.path.join(base, "signetd.log"), "w+")
        proc = subprocess.Popen(nobody + [signetd, "--config", os.path.join(ca, "signet.conf"), "--serving-address",
                                          "127.0.0.1:0", "--metrics-port", "0", "--readiness-probe-port", "0",
                                          "--log-format", "json"], stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.time() + 60
            while time.time() < deadline and "signetd serving" not in read(log.name):
                self.assertIsNone(proc.poll(), read(log.name))
                time.sleep(0.05)
            self.assertIn("signetd serving", read(log.name))
            # Not dumpable: the kernel gives its /proc files to root.
            self.assertEqual(os.stat(f"/proc/{proc.pid}/mem").st_uid, 0)
            self.assertEqual(os.stat(f"/proc/{proc.pid}/status").st_uid, 0)
            # The same user cannot attach to it.
            core = os.path.join(base, "same-user-core")
            r = subprocess.run(nobody + ["gcore", "-o", core, str(proc.pid)], capture_output=True, timeout=120)
            self.assertFalse([f for f in os.listdir(base) if f.startswith("same-user-core")], r.stdout)
            # A sanitizer's shadow memory makes a root core dump terabytes.
            if not sanitized:
                # Root can dump it; the PIN's pages are left out.
                core = os.path.join(base, "root-core")
                subprocess.run(["gcore", "-o", core, str(proc.pid)], capture_output=True, timeout=120, check=True)
                dumped = [os.path.join(base, f) for f in os.listdir(base) if f.startswith("root-core")]
                self.assertEqual(len(dumped), 1)
                data = read(dumped[0], "rb")
                # The dump does show ordinary memory: the root, which signetd
                # keeps on its heap to answer every call.
                root_line = read(os.path.join(ca, "root-cert.pem")).splitlines()[1].encode()
                self.assertIn(root_line, data)
                self.assertNotIn(pin, data)
        finally:
            proc.terminate()
            proc.wait(60)
            log.close()
            reports = signet_e2e.reports_in(base)
            shutil.rmtree(base, ignore_errors=True)
        self.assertEqual(reports, "")


if __name__ == "__main__":
    unittest.main(verbosity=2)
