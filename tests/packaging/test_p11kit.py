#!/usr/bin/python3
"""signetd on a token forwarded by p11-kit: the way a container reaches an
HSM that stays on the host.

On the host, `p11-kit server --provider MODULE "pkcs11:token=LABEL"`
serves one token of a PKCS#11 module over a Unix socket; in the container,
p11-kit's client module (p11-kit-client.so, package p11-kit-modules) is
signetd's hsm-module and P11_KIT_SERVER_ADDRESS=unix:path=SOCKET names the
socket. The test makes a SoftHSM2 token with `signetctl init`, serves it
from a p11-kit server (SOFTHSM2_CONF set for the server only) on a socket
in its temporary folder, and checks:

  * signetd, configured with hsm-module = p11-kit-client.so and the token
    and key URIs init wrote (no softhsm2-conf: that setting only sets
    SOFTHSM2_CONF, which the client never reads), loads the client and not
    SoftHSM2, is ready, issues certificates to concurrent gRPC clients
    (Debian's grpcio) that `openssl verify` accepts against the root, and
    exits 0 on SIGTERM;
  * a token label the server does not forward stops signetd at start;
  * losing the server (the host's p11-kit server and its per-connection
    process gone) turns signetd not ready and its answers UNAVAILABLE, and
    it still stops cleanly; once a server is back on the socket, signetd
    re-initialises the client module (logged), is ready again and signs.

usage: test_p11kit.py SIGNETCTL SIGNETD PROTO_DIR RA_TEST_DIR P11KIT_CLIENT
"""
import concurrent.futures
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import grpc

SIGNETCTL, SIGNETD, PROTO_DIR, RA_DIR, CLIENT = sys.argv[1:6]
del sys.argv[1:6]
sys.path.insert(0, RA_DIR)
import signet_e2e  # noqa: E402
from signet_e2e import make_csr, read, spiffe  # noqa: E402

SOFTHSM = os.environ.get("SIGNET_SOFTHSM_MODULE", "/usr/lib/softhsm/libsofthsm2.so")
LABEL = "signet-ca"


def children(pid):
    """Pids whose parent is pid (p11-kit server forks one process per
    connection)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = read(f"/proc/{d}/stat")
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d))
    return out


class Server:
    """`p11-kit server -f` forwarding one token on a socket."""

    def __init__(self, sock, softhsm_conf, token=LABEL):
        env = dict(os.environ, SOFTHSM2_CONF=softhsm_conf)
        self.sock = sock
        self.proc = subprocess.Popen(["p11-kit", "server", "-f", "-n", sock, "--provider", SOFTHSM,
                                      f"pkcs11:token={token}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env, text=True)
        line = self.proc.stdout.readline()  # P11_KIT_SERVER_ADDRESS=unix:path=...; export ...;
        if not line.startswith("P11_KIT_SERVER_ADDRESS="):
            self.proc.kill()
            raise RuntimeError(f"p11-kit server: {line}{self.proc.stderr.read()}")
        self.address = line.split("=", 1)[1].split(";", 1)[0]

    def stop(self):
        """The server and every per-connection process it forked."""
        if self.proc.poll() is None:
            kids = children(self.proc.pid)
            for pid in kids:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            self.proc.terminate()
            self.proc.wait(30)
            deadline = time.time() + 10
            while time.time() < deadline and any(os.path.exists(f"/proc/{p}") and
                                                  not read(f"/proc/{p}/stat").split(") ")[1].startswith("Z")
                                                  for p in kids):
                time.sleep(0.05)
        self.proc.stdout.close()
        self.proc.stderr.close()
        if os.path.exists(self.sock):
            os.unlink(self.sock)


class P11Kit(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="p11kit.", dir=os.environ.get("SIGNET_TEST_TMP"))
        signet_e2e.compile_proto(PROTO_DIR, cls.tmp)
        import ca_pb2
        import ca_pb2_grpc
        cls.pb, cls.pb_grpc = ca_pb2, ca_pb2_grpc
        cls.dir = os.path.join(cls.tmp, "ca")
        subprocess.run([SIGNETCTL, "init", "--dir", cls.dir, "--token-label", LABEL, "--log-level", "warn"],
                       check=True, stdout=subprocess.DEVNULL)
        cls.softhsm_conf = os.path.join(cls.dir, "softhsm2.conf")
        cls.root = read(os.path.join(cls.dir, "root-cert.pem"), "rb")
        cls.sock = os.path.join(cls.tmp, "p11kit.sock")
        # init's config with the client module instead of SoftHSM2.
        lines = [l for l in read(os.path.join(cls.dir, "signet.conf")).splitlines()
                 if not l.startswith("softhsm2-conf")]
        cls.conf = cls.write_conf("p11kit.conf", lines + [f"hsm-module = {CLIENT}"])
        cls.token = subprocess.run([SIGNETCTL, "token", "--config", os.path.join(cls.dir, "signet.conf"),
                                    "--namespace", "default", "--service-account", "default"], check=True,
                                   capture_output=True, text=True).stdout.strip()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def write_conf(cls, name, lines):
        path = os.path.join(cls.dir, name)
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    def server(self):
        s = Server(self.sock, self.softhsm_conf)
        self.addCleanup(s.stop)
        return s

    def signetd(self, conf, address):
        # The client reads only P11_KIT_SERVER_ADDRESS; SOFTHSM2_CONF is
        # left out so that nothing could reach the token but the socket.
        env = {k: v for k, v in os.environ.items()
               if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "SOFTHSM2_CONF")}
        env["P11_KIT_SERVER_ADDRESS"] = address
        d = signet_e2e.Signetd(SIGNETD, conf, threads=4, env=env)
        self.addCleanup(d.stop)
        return d

    def ready(self, d, want=200, timeout=30):
        url = f"http://127.0.0.1:{d.probe_port}/readyz"
        deadline = time.time() + timeout
        code = None
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    code = r.status
            except urllib.error.HTTPError as e:
                code = e.code
            except OSError:
                code = None
            if code == want:
                return True
            time.sleep(0.1)
        return False

    def stub(self, d):
        creds = grpc.ssl_channel_credentials(root_certificates=self.root)
        ch = grpc.secure_channel(f"127.0.0.1:{d.port}", creds, options=[("grpc.ssl_target_name_override",
                                                                         "localhost")])
        self.addCleanup(ch.close)
        return self.pb_grpc.IstioCertificateServiceStub(ch)

    def issue(self, stub, key="ec"):
        req = self.pb.IstioCertificateRequest(csr=make_csr(spiffe("default", "default"), key))
        md = [("authorization", f"Bearer {self.token}"), ("clusterid", "Kubernetes")]
        return list(stub.CreateCertificate(req, metadata=md, timeout=30).cert_chain)

    def verify(self, chain, name):
        path = os.path.join(self.tmp, f"{name}.pem")
        with open(path, "w") as f:
            f.write("".join(chain))
        v = subprocess.run(["openssl", "verify", "-CAfile", os.path.join(self.dir, "root-cert.pem"), path],
                           capture_output=True, text=True)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)

    def maps(self, d):
        return read(f"/proc/{d.proc.pid}/maps")

    # ---- the tests ------------------------------------------------------

    def test_issues_concurrently_through_the_forwarded_token(self):
        srv = self.server()
        self.assertEqual(srv.address, f"unix:path={self.sock}")
        d = self.signetd(self.conf, srv.address)
        self.assertTrue(self.ready(d), d.text())
        maps = self.maps(d)
        self.assertIn(os.path.basename(CLIENT), maps)
        self.assertNotIn("libsofthsm2", maps)  # the token is reached through the socket only
        stub = self.stub(d)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            chains = list(pool.map(lambda i: self.issue(stub, "rsa" if i % 4 == 0 else "ec"), range(32)))
        for i, chain in enumerate(chains):
            self.assertEqual(chain[-1].encode(), self.root)
            self.verify(chain, f"chain{i}")
        issued = [r for r in d.records() if r.get("msg") == "certificate issued"]
        self.assertEqual(len(issued), 32)
        self.assertEqual(len({r["serial"] for r in issued}), 32)
        self.assertEqual(d.stop(), 0, d.text())
        self.assertIn("stopped", [r.get("msg") for r in d.records()])

    def test_token_not_forwarded_stops_signetd(self):
        srv = self.server()
        lines = [l if not l.startswith("hsm-token") else "hsm-token = pkcs11:token=not-forwarded"
                 for l in read(self.conf).splitlines()]
        conf = self.write_conf("wrong-token.conf", lines)
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
        env["P11_KIT_SERVER_ADDRESS"] = srv.address
        p = subprocess.run([SIGNETD, "--config", conf, "--serving-address", "127.0.0.1:0", "--http-address",
                            "127.0.0.1", "--metrics-port", "0", "--readiness-probe-port", "0"],
                           capture_output=True, text=True, env=env, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("not-forwarded", p.stdout + p.stderr)

    def test_server_gone_turns_signetd_not_ready(self):
        srv = self.server()
        d = self.signetd(self.conf, srv.address)
        self.assertTrue(self.ready(d), d.text())
        stub = self.stub(d)
        self.verify(self.issue(stub), "before")
        srv.stop()
        with self.assertRaises(grpc.RpcError) as cm:
            self.issue(stub)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE, cm.exception.details())
        self.assertTrue(self.ready(d, want=503), "still ready without its HSM:\n" + d.text())
        self.assertEqual(d.stop(), 0, d.text())

    # p11-kit's client loses its connection for good when the server side
    # goes, and answers CKR_DEVICE_ERROR (C_OpenSession too) until it is
    # finalised and initialised again, which reconnects. sg_hsm re-initialises
    # a module it initialised itself once reopened sessions keep failing like
    # that, and retries with backoff (driven by the readiness check) while
    # the server stays away.
    def test_server_back_recovers(self):
        srv = self.server()
        d = self.signetd(self.conf, srv.address)
        self.assertTrue(self.ready(d), d.text())
        stub = self.stub(d)
        srv.stop()
        with self.assertRaises(grpc.RpcError):
            self.issue(stub)
        self.assertTrue(self.ready(d, want=503), d.text())
        self.server()
        self.assertTrue(self.ready(d, timeout=20), "not ready again after the server came back:\n" + d.text())
        self.verify(self.issue(stub), "after")
        # Logged by the thread that re-initialised, after the tokens are
        # usable again: a /readyz answered on another thread can come first.
        deadline = time.time() + 30
        while time.time() < deadline and "PKCS#11 module re-initialised" not in [r.get("msg") for r in d.records()]:
            time.sleep(0.1)
        msgs = [r.get("msg") for r in d.records()]
        self.assertIn("PKCS#11 module re-initialised", msgs, d.text())
        with urllib.request.urlopen(f"http://127.0.0.1:{d.metrics_port}/metrics", timeout=5) as r:
            metrics = r.read().decode()
        reinits = [float(l.split()[-1]) for l in metrics.splitlines() if l.startswith("signet_hsm_reinits_total ")]
        self.assertEqual(len(reinits), 1, metrics)
        self.assertGreaterEqual(reinits[0], 1)
        # Attempts while the server was away failed, each logged with its
        # reason; none says anything about the PIN.
        tries = [r for r in d.records() if str(r.get("msg", "")).startswith("PKCS#11 module re-initialis")]
        self.assertTrue(all(r.get("reason") and r.get("module") == CLIENT for r in tries), tries)
        self.assertNotIn(read(os.path.join(self.dir, "pin")).strip(), d.text())
        self.assertEqual(d.stop(), 0, d.text())


if __name__ == "__main__":
    unittest.main(verbosity=2)
