#!/usr/bin/python3
"""signetd takes istio-csr's arguments as the anchor operator writes them.

openshift/cert-manager-operator's IstioCSR controller writes istio-csr's
container arguments (pkg/controller/istiocsr/deployments.go,
updateArgList); signet's image must run with that Deployment unchanged.
This test checks, against a SoftHSM2 CA that `signetctl init` makes:

  * `signetd --help` documents every argument of that list;
  * signetd starts with the whole list, adapted to a test host only where
    a host differs from a pod (loopback and ephemeral ports, the CA's own
    root for --root-ca-file, --issuer-name empty because there is no API
    server to forward to; a --config for the HSM, which the list lacks),
    is ready, and serves TLS with the key the list asks for
    (--serving-signature-algorithm, --serving-certificate-key-size) under
    the DNS name it asks for;
  * --log-level takes klog's numbers (1: info, 2 and above: debug);
  * Go's duration strings (1h0m0s, 30m0s) and the config file's same names;
  * --init-dir (the container's command line): the first start makes the
    embedded default in the state folder, a restart uses it unchanged, a
    --config beside it overrides its settings, a missing folder is exit 1;
  * values signetd has no meaning for are refused at once, exit status 2,
    naming the flag: --issuer-enabled=false, a key size that does not fit
    the algorithm, log levels outside 0..10 or not plain decimal.

usage: test_args.py SIGNETCTL SIGNETD
"""
import json
import os
import resource
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from signetd_proc import base_env, read, stop

SIGNETCTL, SIGNETD = sys.argv[1:3]
del sys.argv[1:3]

ISTIO_NS = "istio-system"
CSR_NS = "istio-csr"
DNS = f"cert-manager-istio-csr.{CSR_NS}.svc"

# updateArgList, in its order, with the CR's defaults (logLevel 1, text,
# certificateDuration 1h -> "60m", RSA 2048, revisions [default]) and a
# data-plane namespace selector set.
ANCHOR = [
    ("log-level", "1"),
    ("log-format", "text"),
    ("metrics-port", "9402"),
    ("readiness-probe-port", "6060"),
    ("readiness-probe-path", "/readyz"),
    ("certificate-namespace", ISTIO_NS),
    ("issuer-enabled", "true"),
    ("preserve-certificate-requests", "false"),
    ("issuer-name", "istio-csr-issuer"),
    ("issuer-kind", "Issuer"),
    ("issuer-group", "cert-manager.io"),
    ("root-ca-file", "/var/run/configmaps/istio-csr/ca.crt"),
    ("serving-certificate-dns-names", DNS),
    ("serving-certificate-duration", "60m"),
    ("trust-domain", "cluster.local"),
    ("cluster-id", "Kubernetes"),
    ("max-client-certificate-duration", "60m"),
    ("serving-address", "0.0.0.0:6443"),
    ("serving-certificate-key-size", "2048"),
    ("serving-signature-algorithm", "RSA"),
    ("enable-client-cert-authenticator", "false"),
    ("leader-election-namespace", ISTIO_NS),
    ("disable-kubernetes-client-rate-limiter", "false"),
    ("istiod-cert-enabled", "false"),
    ("istiod-cert-namespace", ISTIO_NS),
    ("istiod-cert-duration", "60m"),
    ("istiod-cert-renew-before", "30m"),
    ("istiod-cert-key-algorithm", "RSA"),
    ("istiod-cert-key-size", "2048"),
    ("istiod-cert-additional-dns-names", ""),
    ("istiod-cert-istio-revisions", "default"),
    ("configmap-namespace-selector", "istio.io/rev=default"),
]


def lower_fd_limit():
    """A soft open-files limit below the hard one, so that signetd raises
    it at start and says so in a debug record."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > 1024:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))


class Signetd:
    """signetd with an argument list as given (nothing appended), its
    ports found in its log ("signetd serving")."""

    def __init__(self, args, log_path):
        self.log_path = log_path
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen([SIGNETD, *args], stdout=log, stderr=subprocess.STDOUT, env=base_env(),
                                         preexec_fn=lower_fd_limit)
        self.serving = None
        deadline = time.time() + 60
        while time.time() < deadline and self.serving is None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"signetd exited {self.proc.returncode}:\n{read(log_path)}")
            self.serving = next((r for r in self.records() if r.get("msg") == "signetd serving"), None)
            time.sleep(0.05)
        if self.serving is None:
            self.stop()
            raise RuntimeError("signetd did not start:\n" + read(log_path))

    def records(self):
        """The log's records, text or JSON: (level, msg) at least."""
        out = []
        for line in read(self.log_path).splitlines():
            try:
                out.append(json.loads(line))
                continue
            except ValueError:
                pass
            parts = line.split(" ", 2)  # "<ts> <level> <msg> key=value..."
            if len(parts) == 3 and parts[0][:4].isdigit():
                rec = {"level": parts[1], "msg": parts[2].split("=")[0].rsplit(" ", 1)[0]}
                for kv in parts[2].split(" "):
                    if "=" in kv:
                        k, v = kv.split("=", 1)
                        rec[k] = int(v) if v.isdigit() else v
                out.append(rec)
        return out

    def stop(self):
        return stop(self.proc)


class Args(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="daemon-args.", dir=os.environ.get("SIGNET_TEST_TMP"))
        cls.dir = os.path.join(cls.tmp, "ca")
        subprocess.run([SIGNETCTL, "init", "--dir", cls.dir, "--log-level", "warn"], check=True,
                       stdout=subprocess.DEVNULL)
        cls.conf = os.path.join(cls.dir, "signet.conf")
        cls.root = os.path.join(cls.dir, "root-cert.pem")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def adapted(self, **values):
        """The anchor's list with the host adaptations, then values
        (flag name with '_' for '-') replacing the anchor's own."""
        host = {"metrics-port": "0", "readiness-probe-port": "0", "serving-address": "127.0.0.1:0",
                "root-ca-file": self.root, "issuer-name": "", "log-format": "json"}
        host.update({k.replace("_", "-"): v for k, v in values.items()})
        args = [f"--{k}={host.get(k, v)}" for k, v in ANCHOR]
        return ["--config", self.conf, "--http-address", "127.0.0.1", *args]

    def start(self, args, name):
        d = Signetd(args, os.path.join(self.tmp, f"{name}.log"))
        self.addCleanup(d.stop)
        return d

    def served_key(self, d, server_name=DNS, root=None):
        """The serving certificate, verified against the mesh root (root,
        default the class's CA) under server_name, as istio-agent connects
        (ALPN h2)."""
        ctx = ssl.create_default_context(cafile=root or self.root)
        ctx.set_alpn_protocols(["h2"])
        with socket.create_connection(("127.0.0.1", d.serving["port"]), timeout=10) as sock:
            with ctx.wrap_socket(sock, server_hostname=server_name) as tls:
                return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))

    def ready(self, d):
        url = f"http://127.0.0.1:{d.serving['probe_port']}/readyz"
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    if r.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.1)
        return False

    def refused(self, args):
        p = subprocess.run([SIGNETD, *args], capture_output=True, text=True, env=base_env(), timeout=60)
        return p.returncode, p.stderr

    # ---- the tests ------------------------------------------------------

    def test_help_documents_every_anchor_argument(self):
        out = subprocess.run([SIGNETD, "--help"], check=True, capture_output=True, text=True).stdout
        for flag, _ in ANCHOR:
            self.assertRegex(out, rf"(?m)^  --{flag}[ \[]", flag)
        self.assertIn("--log-level debug|info|warn|error|0..10", out)
        self.assertIn("--serving-signature-algorithm RSA|ECDSA", out)
        self.assertIn("runtime issuance ConfigMap", out)  # why --issuer-enabled=false is refused

    def test_anchor_arguments_start_and_serve_their_key(self):
        d = self.start(self.adapted(), "anchor")
        self.assertTrue(self.ready(d), "not ready")
        cert = self.served_key(d)
        key = cert.public_key()
        self.assertIsInstance(key, rsa.RSAPublicKey)
        self.assertEqual(key.key_size, 2048)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        self.assertEqual(sans.get_values_for_type(x509.DNSName), [DNS])
        life = (cert.not_valid_after - cert.not_valid_before).total_seconds()
        self.assertLessEqual(life, 3600 + 300)  # --serving-certificate-duration=60m
        recs = d.records()
        # --log-level=1 is info: the start-up debug record is not written.
        self.assertFalse([r for r in recs if r.get("level") == "debug"], recs)
        self.assertEqual(d.stop(), 0)

    def test_ecdsa_384_and_numeric_debug_level(self):
        d = self.start(self.adapted(serving_signature_algorithm="ECDSA", serving_certificate_key_size="384",
                                    log_level="2", serving_certificate_duration="1h0m0s",
                                    max_client_certificate_duration="30m0s"), "ecdsa")
        key = self.served_key(d).public_key()
        self.assertIsInstance(key, ec.EllipticCurvePublicKey)
        self.assertEqual(key.curve.name, "secp384r1")
        recs = d.records()
        self.assertTrue([r for r in recs if r.get("level") == "debug" and r.get("msg") == "open-files limit raised"],
                        recs)
        self.assertEqual(d.stop(), 0)

    def test_config_file_takes_the_same_names(self):
        conf = os.path.join(self.dir, "anchor.conf")
        with open(conf, "w") as f:
            f.write(read(self.conf))
            f.write("log-level = 5\nlog-format = json\nserving-signature-algorithm = RSA\n"
                    "serving-certificate-key-size = 3072\nissuer-enabled = true\n"
                    "max-client-certificate-duration = 1h0m0s\nserving-certificate-duration = 90m\n"
                    f"serving-certificate-dns-names = {DNS}\n")
        d = self.start(["--config", conf, "--http-address", "127.0.0.1", "--serving-address", "127.0.0.1:0",
                        "--metrics-port", "0", "--readiness-probe-port", "0"], "conf")
        key = self.served_key(d).public_key()
        self.assertIsInstance(key, rsa.RSAPublicKey)
        self.assertEqual(key.key_size, 3072)
        self.assertTrue([r for r in d.records() if r.get("level") == "debug"])
        self.assertEqual(d.stop(), 0)

    def test_init_dir_makes_the_embedded_default_once(self):
        # The container's command line: no --config, a state folder. The
        # first start makes the CA there; a restart uses it unchanged; a
        # --config file given beside it overrides the CA's own settings.
        state = os.path.join(self.tmp, "state")
        os.mkdir(state)
        common = ["--init-dir", state, "--http-address", "127.0.0.1", "--serving-address", "127.0.0.1:0",
                  "--metrics-port", "0", "--readiness-probe-port", "0", "--log-format", "json"]
        d = self.start(common, "init1")
        self.assertTrue(self.ready(d))
        root = os.path.join(state, "ca", "root-cert.pem")
        first_root = read(root)
        self.served_key(d, server_name="localhost", root=root)  # served from the new CA
        self.assertTrue([r for r in d.records() if r.get("msg") == "embedded default CA created"])
        self.assertTrue(os.path.exists(os.path.join(state, "so-pin")))
        self.assertFalse(os.path.exists(os.path.join(state, "ca", "so-pin")))
        self.assertEqual(d.stop(), 0)

        site = os.path.join(self.tmp, "site.conf")
        with open(site, "w") as f:
            f.write("serving-certificate-dns-names = site.example\n")
        d = self.start([*common, "--config", site], "init2")
        self.assertTrue(self.ready(d))
        self.assertEqual(read(root), first_root)
        self.assertFalse([r for r in d.records() if r.get("msg") == "embedded default CA created"])
        self.served_key(d, server_name="site.example", root=root)  # the site file's name, verified
        self.assertEqual(d.stop(), 0)

        code, err = self.refused(["--init-dir", os.path.join(self.tmp, "nonexistent")])
        self.assertEqual(code, 1)
        self.assertIn("cannot use the state folder", err)

    def test_ecdsa_default_size_and_signet_default(self):
        # ECDSA without a size is P-256 (istio-csr would refuse its own
        # default size, 2048, with ECDSA); no flags at all: P-256 too.
        args = self.adapted(serving_signature_algorithm="ECDSA", serving_certificate_key_size="0")
        d = self.start(args, "ecdsa256")
        self.assertEqual(self.served_key(d).public_key().curve.name, "secp256r1")
        self.assertEqual(d.stop(), 0)

    def test_refused_at_once(self):
        base = ["--config", self.conf]
        cases = [
            (["--issuer-enabled=false"], "--issuer-enabled=false is not supported"),
            # A bare boolean takes no separate value (GNU, and pflag):
            (["--issuer-enabled", "false"], "unexpected argument \"false\""),
            (["--serving-signature-algorithm=ECDSA", "--serving-certificate-key-size=2048"],
             "an ECDSA key is 256 (P-256) or 384 (P-384), not 2048"),
            (["--serving-signature-algorithm=RSA", "--serving-certificate-key-size=1024"],
             "an RSA key has 2048..8192 bits, not 1024"),
            (["--serving-certificate-key-size=16384"], "--serving-certificate-key-size"),
            (["--serving-signature-algorithm=DSA"], "--serving-signature-algorithm"),
            (["--serving-signature-algorithm=rsa"], "--serving-signature-algorithm"),
            (["--log-level=-1"], "--log-level: \"-1\" is not a log level"),
            (["--log-level=11"], "--log-level: \"11\" is not a log level"),
            (["--log-level=1.5"], "is not a log level"),
            (["--log-level="], "is not a log level"),
            (["--log-level", " 1"], "is not a log level"),
            (["--log-level=0x1"], "is not a log level"),
            (["--log-level=" + "9" * 5000], "is not a log level"),
            (["--serving-certificate-duration=1.5h"], "--serving-certificate-duration"),
            (["--max-client-certificate-duration=60"], "--max-client-certificate-duration"),
            # threads and connections are made for each: bounded
            (["--token-review-max-inflight=0"], "--token-review-max-inflight"),
            (["--token-review-max-inflight=257"], "--token-review-max-inflight"),
            (["--log-level=1", "--log-level=2"], "--log-level given more than once"),
            # istio-csr's map flag (pflag StringToString, apimachinery's
            # annotation keys)
            (["--certificate-request-additional-annotations=team"], "\"team\" must be formatted as key=value"),
            (["--certificate-request-additional-annotations=a=b,c,d=e"], "\"c\" must be formatted as key=value"),
            (["--certificate-request-additional-annotations=Bad Key=v"], "key \"Bad Key\" is not a qualified name"),
            (["--certificate-request-additional-annotations==v,a=b"], "key \"\" is not a qualified name"),
            (["--certificate-request-additional-annotations=a=b,\"c=d"], "a quoted field is not closed"),
            (["--certificate-request-additional-annotations=a=b,c\"d=e"], "bare \" in a field"),
            # (256 KiB in all, apimachinery's limit, is beyond an argument's
            # 128 KiB and a config line's 4 KiB: checked, not reachable here)
            (["--certificate-request-additional-annotations=a=b",
              "--certificate-request-additional-annotations=c=d"], "given more than once"),
            (["--certificate-request-additional-annotations=a=b\nc=d"], "control character"),
        ]
        for extra, msg in cases:
            with self.subTest(extra=[a[:40] for a in extra]):
                rc, err = self.refused(base + extra)
                self.assertEqual(rc, 2, err)
                self.assertIn(msg, err)
                self.assertLess(len(err), 2048)  # a hostile value is not echoed whole


if __name__ == "__main__":
    unittest.main(verbosity=2)
