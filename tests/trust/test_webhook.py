#!/usr/bin/python3
"""signet-trust's Bundle admission webhook and trust-manager's arguments,
without a Kubernetes API server.

openshift/cert-manager-operator's TrustManager controller writes
trust-manager's container arguments (pkg/controller/trustmanager); signet's
image must run with that Deployment unchanged, and serve the webhook its
ValidatingWebhookConfiguration points at (path
/validate-trust-cert-manager-io-v1alpha1-bundle, failurePolicy Fail). This
test runs signet-trust with that argument list (adapted to a host only in
addresses, ports and file locations) against a kubeconfig whose server
does not answer: the controller retries in the background while the
webhook, which needs no API server, is checked over real TLS with
Python's ssl (a client signet did not write):

  * --help documents every argument of the list; numeric --log-level;
  * AdmissionReviews (v1 and v1beta1) for valid and invalid Bundles:
    allowed, or denied 403 Forbidden with the controller's message; every
    operation; the answer always carries the request's uid;
  * hostile requests: wrong or missing Content-Type, empty, not JSON, not
    an AdmissionReview, no or an oversized uid, another kind, duplicate
    keys, deep nesting, a flood of values, bodies over the limit (declared
    and chunked), other methods and paths, plain HTTP to the TLS port;
  * the certificate: the webhook waits for tls.crt and tls.key, starts when
    they appear, takes a new pair (a connection opened before the change
    still gets its answer), keeps the old one when the new pair is broken;
  * the signet_trust_webhook_reviews_total metric;
  * trust-manager's --tls-min-version and --tls-cipher-suites (Kubernetes'
    component-base names): documented, bad values refused at start-up with
    its words, and served exactly (a client outside them gets no
    handshake).

Usage: test_webhook.py SIGNET_TRUST
"""
import base64
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request
import warnings

TRUST = sys.argv[1] if len(sys.argv) > 1 else "signet-trust"
del sys.argv[1:2]

PATH = "/validate-trust-cert-manager-io-v1alpha1-bundle"
HOST = "trust-manager.cert-manager.svc"

# The TrustManager controller's Deployment arguments (always, then the
# conditional ones), with the CR's defaults.
ANCHOR = [
    ("log-format", "text"),
    ("log-level", "1"),
    ("metrics-port", "9402"),
    ("readiness-probe-port", "6060"),
    ("readiness-probe-path", "/readyz"),
    ("leader-elect", "true"),
    ("leader-election-lease-duration", "15s"),
    ("leader-election-renew-deadline", "10s"),
    ("trust-namespace", "cert-manager"),
    ("webhook-host", "0.0.0.0"),
    ("webhook-port", "6443"),
    ("webhook-certificate-dir", "/tls"),
    ("secret-targets-enabled", "true"),
    ("filter-expired-certificates", "true"),
    ("default-package-location", "/packages/cert-manager-package-openshift.json"),
]


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def wait_for(what, fn, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        v = fn()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def bundle(name="b", sources=None, target=None):
    return {"apiVersion": "trust.cert-manager.io/v1alpha1", "kind": "Bundle", "metadata": {"name": name},
            "spec": {"sources": [{"inLine": "x"}] if sources is None else sources,
                     "target": target or {"configMap": {"key": "ca.crt"}}}}


def review(obj=None, op="CREATE", uid="0f1e2d3c", old=None, api="admission.k8s.io/v1", kind=None):
    req = {"uid": uid, "kind": kind or {"group": "trust.cert-manager.io", "version": "v1alpha1", "kind": "Bundle"},
           "resource": {"group": "trust.cert-manager.io", "version": "v1alpha1", "resource": "bundles"},
           "name": "b", "operation": op, "userInfo": {"username": "admin"}}
    if obj is not None:
        req["object"] = obj
    if old is not None:
        req["oldObject"] = old
    return {"apiVersion": api, "kind": "AdmissionReview", "request": req}


class Certs:
    """A CA and server pairs it signs for HOST, as cert-manager would put
    them in the webhook's Secret."""

    def __init__(self, d):
        self.d = d
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                f"{d}/ca.key", "-out", f"{d}/ca.crt", "-subj", "/CN=webhook test CA", "-days", "2",
                "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
        self.n = 0

    def pair(self, key="ec"):
        """(cert PEM, key PEM) of a new server certificate."""
        self.n += 1
        d, n = self.d, self.n
        newkey = ["-newkey", "rsa:2048"] if key == "rsa" else ["-newkey", "ec", "-pkeyopt",
                                                                "ec_paramgen_curve:P-256"]
        openssl("req", *newkey, "-nodes", "-keyout", f"{d}/s{n}.key", "-out", f"{d}/s{n}.csr",
                "-subj", f"/CN=server {n}")
        with open(f"{d}/s{n}.ext", "w") as f:
            f.write(f"subjectAltName=DNS:{HOST}\nextendedKeyUsage=serverAuth\n")
        openssl("x509", "-req", "-in", f"{d}/s{n}.csr", "-CA", f"{d}/ca.crt", "-CAkey", f"{d}/ca.key",
                "-CAcreateserial", "-out", f"{d}/s{n}.crt", "-days", "1", "-extfile", f"{d}/s{n}.ext")
        return read(f"{d}/s{n}.crt"), read(f"{d}/s{n}.key")


def install(folder, crt, key):
    """As the kubelet updates a Secret volume: both files replaced at once."""
    for name, data in (("tls.crt", crt), ("tls.key", key)):
        tmp = os.path.join(folder, f".{name}.tmp")
        with open(tmp, "w") as f:
            f.write(data)
        os.replace(tmp, os.path.join(folder, name))


class Trust:
    def __init__(self, args, log_path):
        self.log_path = log_path
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen([TRUST, *args], stdout=log, stderr=subprocess.STDOUT)

    def records(self):
        out = []
        for line in read(self.log_path).splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                parts = line.split(" ", 2)
                if len(parts) == 3:
                    rec = {"level": parts[1], "msg": parts[2]}
                    for kv in parts[2].split(" "):
                        if "=" in kv:
                            k, v = kv.split("=", 1)
                            rec[k] = int(v) if v.isdigit() else v
                    out.append(rec)
        return out

    def find(self, msg_prefix):
        return [r for r in self.records() if str(r.get("msg", "")).startswith(msg_prefix)]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


class Webhook(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="trust-webhook.", dir=os.environ.get("SIGNET_TEST_TMP"))
        cls.certs = Certs(cls.tmp)
        # An API server that never answers: the controller keeps retrying.
        ca = base64.b64encode(read(os.path.join(cls.tmp, "ca.crt"), "rb")).decode()
        cls.kubeconfig = os.path.join(cls.tmp, "kubeconfig")
        with open(cls.kubeconfig, "w") as f:
            f.write("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n"
                    f"    server: https://127.0.0.1:1\n    certificate-authority-data: {ca}\n"
                    "contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"
                    "users:\n- name: u\n  user: {token: t}\n")
        cls.package = os.path.join(cls.tmp, "package.json")
        subprocess.run([TRUST, "package", "--version", "1", "--output", cls.package], check=True)

        cls.tls = os.path.join(cls.tmp, "tls")
        os.mkdir(cls.tls)
        install(cls.tls, *cls.certs.pair())
        cls.t = cls.start(cls.tls, "main")
        cls.port = cls.webhook_port(cls.t)

    @classmethod
    def tearDownClass(cls):
        rc = cls.t.stop()
        log = read(cls.t.log_path)
        shutil.rmtree(cls.tmp, ignore_errors=True)
        # A clean SIGTERM, and (in the sanitizer builds) no report.
        assert rc == 0 and "Sanitizer" not in log, f"signet-trust exited {rc}:\n{log[-4000:]}"

    @classmethod
    def start(cls, tls_dir, name, **values):
        host = {"metrics-port": "0", "readiness-probe-port": "0", "webhook-host": "127.0.0.1",
                "webhook-port": "0", "webhook-certificate-dir": tls_dir,
                "default-package-location": cls.package}
        host.update({k.replace("_", "-"): v for k, v in values.items()})
        args = [f"--{k}={host.get(k, v)}" for k, v in ANCHOR] + ["--kubeconfig", cls.kubeconfig]
        args += [f"--{k}={v}" for k, v in host.items() if k not in dict(ANCHOR) and not k.startswith("webhook-")
                 and k not in ("metrics-port", "readiness-probe-port", "default-package-location")]
        return Trust(args, os.path.join(cls.tmp, f"{name}.log"))

    @staticmethod
    def webhook_port(t):
        rec = wait_for("the webhook", lambda: t.find("webhook serving"))
        return rec[0]["port"]

    def ctx(self):
        c = ssl.create_default_context(cafile=os.path.join(self.tmp, "ca.crt"))
        return c

    def conn(self, port=None):
        c = http.client.HTTPSConnection("127.0.0.1", port or self.port, context=self.ctx(), timeout=10)
        c.sock = self.ctx().wrap_socket(socket.create_connection(("127.0.0.1", port or self.port), timeout=10),
                                        server_hostname=HOST)
        return c

    def post(self, body, ctype="application/json", path=PATH, method="POST", port=None):
        """(HTTP status, parsed JSON answer or raw text)."""
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        if isinstance(data, str):
            data = data.encode()
        c = self.conn(port)
        headers = {"Content-Type": ctype} if ctype else {}
        c.request(method, path, body=data if method == "POST" else None, headers=headers)
        r = c.getresponse()
        raw = r.read()
        c.close()
        try:
            return r.status, json.loads(raw)
        except ValueError:
            return r.status, raw.decode(errors="replace")

    def answer(self, body, **kw):
        status, doc = self.post(body, **kw)
        self.assertEqual(status, 200, doc)
        self.assertEqual(doc["kind"], "AdmissionReview")
        return doc

    # ---- arguments --------------------------------------------------------

    def test_help_documents_every_anchor_argument(self):
        out = subprocess.run([TRUST, "--help"], check=True, capture_output=True, text=True).stdout
        for flag, _ in ANCHOR:
            self.assertRegex(out, rf"(?m)^  --{flag}[ \[]", flag)
        self.assertIn("--log-level debug|info|warn|error|0..10", out)
        self.assertIn(PATH, out)

    def test_anchor_arguments_refused_values(self):
        for extra, msg, code in (
                (["--log-level=11"], "is not a log level", 2),
                (["--log-level=-1"], "is not a log level", 2),
                (["--log-level=0x1"], "is not a log level", 2),
                (["--log-level", "1.5"], "is not a log level", 2),
                (["--webhook-port=65536"], "--webhook-port", 2),
                (["--leader-election-lease-duration=15"], "--leader-election-lease-duration", 2),
                (["--webhook-host=localhost", "--kubeconfig", self.kubeconfig], "not a numeric", 1)):
            with self.subTest(extra=extra):
                r = subprocess.run([TRUST, *extra], capture_output=True, text=True, timeout=30)
                self.assertEqual(r.returncode, code, r.stderr)
                self.assertIn(msg, r.stderr)

    def test_started_with_the_anchor_arguments(self):
        recs = self.t.records()
        started = [r for r in recs if str(r.get("msg", "")).startswith("signet-trust started")]
        self.assertTrue(started, recs)
        self.assertEqual(started[0].get("secret_targets"), "enabled")  # --secret-targets-enabled=true
        self.assertTrue(self.t.find("default CA package"))
        # --log-level=1 (the CR's default) is info: no debug record.
        self.assertFalse([r for r in recs if r.get("level") == "debug"])

    # ---- trust-manager's TLS flags ------------------------------------------

    def test_help_documents_the_tls_flags(self):
        out = subprocess.run([TRUST, "--help"], check=True, capture_output=True, text=True).stdout
        for flag in ("--tls-min-version", "--tls-cipher-suites"):
            self.assertRegex(out, rf"(?m)^  {flag}[ \[]", flag)
        for value in ("VersionTLS10", "VersionTLS13", "Preferred values: TLS_AES_128_GCM_SHA256",
                      "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "Insecure values:", "TLS_RSA_WITH_RC4_128_SHA"):
            self.assertIn(value, out)

    def test_tls_flags_refused_values(self):
        for extra, msg in (
                (["--tls-min-version=VersionTLS14"], 'tls-min-version: unknown tls version "VersionTLS14"'),
                (["--tls-min-version=1.2"], 'tls-min-version: unknown tls version "1.2"'),
                (["--tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_BOGUS"],
                 "tls-cipher-suites: Cipher suite TLS_BOGUS not supported or doesn't exist"),
                # GnuTLS would add the two suites their parts make.
                (["--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_RSA_WITH_AES_256_CBC_SHA"],
                 "would also enable TLS_"),
        ):
            with self.subTest(extra=extra):
                r = subprocess.run([TRUST, *extra, "--kubeconfig", self.kubeconfig, "--webhook-certificate-dir",
                                    self.tls], capture_output=True, text=True, timeout=30)
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertIn(msg, r.stderr)

    def handshake(self, port, version=None, ciphers=None):
        """The TLS version and suite a client gets, or None when refused."""
        c = self.ctx()
        if version:
            c.minimum_version = c.maximum_version = version
        if ciphers:
            c.set_ciphers(ciphers)
        try:
            with c.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                               server_hostname=HOST) as s:
                return s.version(), s.cipher()[0]
        except (ssl.SSLError, ConnectionError):
            return None

    def test_tls_min_version_and_cipher_suites(self):
        """The webhook serves exactly what the flags say: TLS 1.3 only, or
        TLS 1.2 with the listed suites (and TLS 1.3 with their ciphers)."""
        t13 = self.start(self.tls, "tls13", tls_min_version="VersionTLS13")
        suites = self.start(self.tls, "suites", tls_cipher_suites=(
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"))
        try:
            p13, ps = self.webhook_port(t13), self.webhook_port(suites)
            self.assertIsNone(self.handshake(p13, ssl.TLSVersion.TLSv1_2))
            self.assertEqual(self.handshake(p13, ssl.TLSVersion.TLSv1_3)[0], "TLSv1.3")
            self.assertIs(self.answer(review(bundle()), port=p13)["response"]["allowed"], True)
            self.assertEqual(self.handshake(ps, ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-AES128-GCM-SHA256"),
                             ("TLSv1.2", "ECDHE-ECDSA-AES128-GCM-SHA256"))
            self.assertEqual(self.handshake(ps, ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-AES256-GCM-SHA384"),
                             ("TLSv1.2", "ECDHE-ECDSA-AES256-GCM-SHA384"))
            for other in ("ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-ECDSA-AES128-SHA"):
                self.assertIsNone(self.handshake(ps, ssl.TLSVersion.TLSv1_2, other), other)
            self.assertEqual(self.handshake(ps, ssl.TLSVersion.TLSv1_3)[0], "TLSv1.3")
        finally:
            self.assertEqual(t13.stop(), 0)
            self.assertEqual(suites.stop(), 0)

    # ---- answers ----------------------------------------------------------

    def test_valid_bundle_is_allowed(self):
        doc = self.answer(review(bundle()))
        self.assertEqual(doc["apiVersion"], "admission.k8s.io/v1")
        resp = doc["response"]
        self.assertEqual(resp["uid"], "0f1e2d3c")
        self.assertIs(resp["allowed"], True)
        self.assertEqual(resp["status"]["code"], 200)

    def test_invalid_bundles_are_denied_with_the_reason(self):
        cases = [
            bundle(sources=[]),
            bundle(sources=[{"inLine": "x", "useDefaultCAs": True}]),
            bundle(sources=[{"configMap": {"name": "a"}}]),  # no key
            bundle(target={"configMap": {"key": "ca.crt"}, "secret": {"key": "ca.crt"},
                           "additionalFormats": {"jks": {"key": "ca.crt"}}}),
            bundle(name="Not_A_Name"),
        ]
        for b in cases:
            with self.subTest(spec=b["spec"], name=b["metadata"]["name"]):
                resp = self.answer(review(b, uid="u-deny"))["response"]
                self.assertIs(resp["allowed"], False)
                self.assertEqual(resp["uid"], "u-deny")
                self.assertEqual(resp["status"]["code"], 403)
                self.assertEqual(resp["status"]["reason"], "Forbidden")
                self.assertTrue(resp["status"]["message"])

    def test_operations(self):
        good, bad = bundle(), bundle(sources=[])
        self.assertTrue(self.answer(review(good, op="UPDATE", old=bad))["response"]["allowed"])
        self.assertFalse(self.answer(review(bad, op="UPDATE", old=good))["response"]["allowed"])
        self.assertEqual(self.answer(review(good, op="UPDATE"))["response"]["status"]["code"], 400)  # no old
        self.assertTrue(self.answer(review(op="DELETE", old=bad))["response"]["allowed"])
        self.assertEqual(self.answer(review(op="DELETE"))["response"]["status"]["code"], 400)
        self.assertTrue(self.answer(review(op="CONNECT"))["response"]["allowed"])
        resp = self.answer(review(good, op="PATCH"))["response"]
        self.assertEqual((resp["allowed"], resp["status"]["code"]), (False, 400))

    def test_v1beta1_is_answered_in_kind(self):
        doc = self.answer(review(bundle(), api="admission.k8s.io/v1beta1"))
        self.assertEqual(doc["apiVersion"], "admission.k8s.io/v1beta1")
        self.assertTrue(doc["response"]["allowed"])

    # ---- hostile requests ---------------------------------------------------

    def errored(self, body, code=400, **kw):
        resp = self.answer(body, **kw)["response"]
        self.assertIs(resp["allowed"], False)
        self.assertEqual(resp["status"]["code"], code, resp)
        self.assertNotIn("reason", resp["status"])
        return resp

    def test_malformed_reviews_are_errored(self):
        good = review(bundle())
        self.errored(good, ctype="text/plain")
        self.errored(good, ctype="application/json; charset=utf-8")  # exactly, as controller-runtime
        self.errored(good, ctype=None)
        self.errored(b"")
        self.errored(b"{not json")
        self.errored(b"\xff\xfe\x00garbage")
        self.errored([good])
        self.errored({"apiVersion": "admission.k8s.io/v2", "kind": "AdmissionReview", "request": good["request"]})
        self.errored({"apiVersion": "admission.k8s.io/v1", "kind": "Review", "request": good["request"]})
        self.errored({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"})
        self.errored(review(bundle(), uid=""))
        self.errored(review(bundle(), uid="u" * 129))
        self.errored(review(bundle(), uid="a\u0001b"))
        r = self.errored(review(bundle(), uid=None))
        self.assertEqual(r["uid"], "")
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}
        self.errored(review(cm, kind={"group": "", "version": "v1", "kind": "ConfigMap"}))
        self.errored(review(cm))  # says Bundle, carries something else
        self.errored(review("not an object"))
        # Duplicate keys (which one would the API server have meant?).
        self.errored('{"apiVersion":"admission.k8s.io/v1","apiVersion":"admission.k8s.io/v1",'
                     '"kind":"AdmissionReview","request":{}}')
        # Nesting and value counts are bounded before parsing.
        self.errored("[" * 65 + "]" * 65)
        self.errored("[" + "0," * 250000 + "0]")
        deep = review(bundle())
        deep["request"]["object"]["metadata"]["annotations"] = {"x": json.loads("[" * 40 + "]" * 40)}
        self.assertTrue(self.answer(deep)["response"]["allowed"])  # deep enough, within the bound
        # Nothing of the request but the uid comes back.
        resp = self.errored(b'{"apiVersion":"SECRETMARKER"', ctype="application/json")
        self.assertNotIn("SECRETMARKER", json.dumps(resp))

    def test_sizes_methods_and_paths(self):
        # A body just under the limit is read and answered.
        near = review(bundle(sources=[{"inLine": "x" * ((7 << 20) - 4096)}]))
        self.assertIn("allowed", self.answer(near)["response"])
        # One byte over, or a huge declared length: refused (413) before
        # any of the body is read; the server closes after answering.
        for length in ((7 << 20) + 1, 99999999999):
            with self.ctx().wrap_socket(socket.create_connection(("127.0.0.1", self.port), timeout=10),
                                        server_hostname=HOST) as s:
                s.sendall(f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {length}\r\n\r\n".encode())
                self.assertIn(b" 413 ", s.recv(4096))
        # Chunked past the limit: the connection is closed, no answer.
        s = self.ctx().wrap_socket(socket.create_connection(("127.0.0.1", self.port), timeout=10),
                                   server_hostname=HOST)
        s.sendall(f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  "Transfer-Encoding: chunked\r\n\r\n".encode())
        chunk = b"%x\r\n%s\r\n" % (1 << 20, b" " * (1 << 20))
        got = b""
        try:
            for _ in range(9):
                s.sendall(chunk)
            s.sendall(b"0\r\n\r\n")
            got = s.recv(4096)
        except (ConnectionError, ssl.SSLError, OSError):
            pass
        self.assertNotIn(b"HTTP/1.1 200", got)
        s.close()
        status, _ = self.post(None, method="GET")
        self.assertEqual(status, 405)
        status, _ = self.post(review(bundle()), path="/validate-other")
        self.assertIn(status, (404, 405))
        status, _ = self.post(review(bundle()), path="/metrics")
        self.assertIn(status, (404, 405))

    def test_plain_http_gets_no_answer(self):
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
            s.sendall(f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{{}}".encode())
            try:
                data = s.recv(4096)
            except (ConnectionError, OSError):
                data = b""
            self.assertNotIn(b"HTTP/1.1 200", data)
        # TLS older than 1.2 is refused.
        c = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        c.load_verify_locations(os.path.join(self.tmp, "ca.crt"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                c.maximum_version = ssl.TLSVersion.TLSv1_1
                c.minimum_version = ssl.TLSVersion.TLSv1_1
            except (ValueError, ssl.SSLError):
                return
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as raw:
            with self.assertRaises((ssl.SSLError, ConnectionError, OSError)):
                c.wrap_socket(raw, server_hostname=HOST).do_handshake()

    def test_metrics_count_answers(self):
        self.answer(review(bundle()))
        self.answer(review(bundle(sources=[])))
        self.answer(b"", ctype="application/json")
        port = [r for r in self.t.records() if r.get("msg", "").startswith("metrics endpoint")][0]["port"]
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        for result in ("allowed", "denied", "errored"):
            line = [l for l in text.splitlines()
                    if l.startswith(f'signet_trust_webhook_reviews_total{{result="{result}"}} ')]
            self.assertTrue(line and float(line[0].split()[1]) >= 1, (result, text))

    # ---- the certificate ----------------------------------------------------

    def served_serial(self, port):
        with self.ctx().wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                    server_hostname=HOST) as s:
            return s.getpeercert()["serialNumber"]

    def test_waits_for_the_certificate_then_reloads_it(self):
        d = os.path.join(self.tmp, "tls-later")
        os.mkdir(d)
        t = self.start(d, "later", log_level="2", log_format="json")
        self.addCleanup(t.stop)
        wait_for("the waiting warning", lambda: t.find("webhook: waiting for its certificate"))
        self.assertFalse(t.find("webhook serving"))
        crt1, key1 = self.certs.pair()
        install(d, crt1, key1)
        port = self.webhook_port(t)
        first = self.served_serial(port)
        status, doc = self.post(review(bundle()), port=port)
        self.assertTrue(doc["response"]["allowed"])
        self.assertTrue([r for r in t.records() if r.get("level") == "debug" and r.get("msg") == "admission review"])

        # A connection made before a change is answered after it.
        early = self.conn(port)
        crt2, key2 = self.certs.pair(key="rsa")
        install(d, crt2, key2)
        wait_for("the reload", lambda: t.find("webhook certificate reloaded"))
        second = self.served_serial(port)
        self.assertNotEqual(first, second)
        early.request("POST", PATH, body=json.dumps(review(bundle())), headers={"Content-Type": "application/json"})
        r = early.getresponse()
        self.assertEqual(r.status, 200)
        self.assertTrue(json.loads(r.read())["response"]["allowed"])
        early.close()

        # A key that does not belong to the certificate: the old pair stays.
        crt3, _ = self.certs.pair()
        install(d, crt3, key2)
        wait_for("the refusal", lambda: t.find("webhook: the new certificate cannot be used"))
        self.assertEqual(self.served_serial(port), second)
        # Not PEM at all: the same. What is checked is an absence (nothing
        # changes), over a fixed time: this refusal leaves no record to wait
        # for (an error is logged only when it differs from the last one,
        # and here it does not).
        install(d, "garbage\n", "garbage\n")
        time.sleep(1.5)
        self.assertEqual(self.served_serial(port), second)
        # Fixed: taken.
        crt4, key4 = self.certs.pair()
        install(d, crt4, key4)
        wait_for("the new pair", lambda: self.served_serial(port) not in (second,))
        self.assertTrue(self.answer(review(bundle()), port=port)["response"]["allowed"])
        self.assertEqual(t.stop(), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
