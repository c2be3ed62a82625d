#!/usr/bin/python3
"""signet-agent against a real kube-apiserver (tests/kube/apiserver.sh, or
the shared one SIGNET_KUBE_ENV names) and a real signetd with node
authorization (--ca-trusted-node-accounts), the agent's token minted by the
API server (TokenRequest, bound to the agent's pod), every certificate
checked with `openssl verify` and its key with openssl.

Each agent serves a node of its own, so the scenarios run side by side on
one API server, in namespaces of this run:
  - node A (the main agent, 2-minute certificates): pods on A get their
    service account's certificate and pods on another node do not; two
    pods of one account share one certificate (one request); deleting one
    keeps it, deleting both removes it and its folder; a pod updated 100
    times and deleted leaves nothing behind; a stale folder from an
    earlier run is swept at start; the certificates are refreshed at
    half-life (new serial, new key, the chain verifies); a pod that
    finishes (Succeeded, Failed) releases its certificate;
  - node C: its CA (a second signetd on a fixed port) is down when a pod
    arrives: requests are retried with growing delays, and the
    certificate arrives soon after the CA is back;
  - node D: a certificate shorter than --refresh-floor is not refreshed
    in a loop;
  - node E: an agent whose token names a pod on node A asks for the
    accounts of node E's pods: signetd refuses them (no pod of that account
    on the caller's node), nothing is written;
  - node F: one writer per folder, with tests/agent/fshim.c (LD_PRELOAD)
    holding one file call for seconds so that the other writer comes in
    the middle: a folder written while the start-up sweep lists cannot be
    swept, and a drop during a retried write leaves no files behind;
  - node G: enrolment by namespace label, Kmesh's way (a pod's own label,
    or its namespace's; a namespace labelled and unlabelled later), from
    a CA of the test's own (FakeCA) that records what each request
    carries: the bearer token, clusterid and ImpersonatedIdentity;
  - node H: FakeCA answers as CAs do in a root rotation and in istiod's
    per-signer mode: a bundle of two roots as the last element (both are
    written to root-cert.pem, and the leaf verifies with it although it
    is under the root the agent was not configured with); the signer's
    intermediate as the root (written alone, chains to the configured
    root); an intermediate under another root (refused, nothing written);
  - the manifests: packaging/kubernetes/agent.yaml passes the API server's
    validation (server-side dry run) and its ServiceAccount may list and
    watch pods.

usage: test_agent.py SIGNET_AGENT SIGNETCTL SIGNETD SOURCE_DIR
"""
import datetime
import os
import random
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request
import uuid

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

AGENT, SIGNETCTL, SIGNETD, SOURCE_DIR = sys.argv[1:5]
del sys.argv[1:5]

sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "kube"))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "ra"))
import kube_rest  # noqa: E402
import signet_e2e  # noqa: E402

wait_for = kube_rest.wait_for
SANITIZED = signet_e2e.sanitized(SIGNETD)
RUN = uuid.uuid4().hex[:6]
NS = f"agent-{RUN}"    # the workloads' namespace
NS2 = f"agent2-{RUN}"  # a second one
AGENT_NS = "signet-system"
AGENT_SA = "signet-agent"
TTL = 120  # the main agent's certificates: 2 minutes
NS_SWEEP = f"agentsw-{RUN}"  # node F's sweep
NS_RACE = f"agentrm-{RUN}"   # node F's drop during a retried write
NS_KM = f"agentkm-{RUN}"     # node G: labelled for enrolment from the start
NS_PLAIN = f"agentpl-{RUN}"  # node G: labelled later, then not
ENROL = "istio.io/dataplane-mode"  # Kmesh's label (value kmesh)
FSHIM = os.environ.get("SIGNET_FSHIM")  # tests/agent/fshim.c, built
HOLD_MS = 6000  # how long fshim holds a call


def node(n):
    return f"{n}-{RUN}"


def free_port():
    """A loopback port free now, below the kernel's ephemeral range: the CA
    binds it later and binds it again after a stop, and a port in the range
    can be taken meanwhile by any outgoing connection on the machine (as
    tests/kube/apiserver.sh's free_ports explains)."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    first = max(1024, low - 16384)
    for _ in range(1000):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", random.randrange(first, low) if low - first >= 1024 else 0))
            return s.getsockname()[1]
        except OSError:
            pass
        finally:
            s.close()
    raise RuntimeError("no free loopback port below the ephemeral range")


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


class Kube(kube_rest.Kube):
    def ensure(self, path, body):
        code, doc = self.req("POST", path, body)
        assert code in (201, 409), f"POST {path}: {code} {doc.get('message')}"

    def namespace(self, name):
        self.ensure("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def service_account(self, ns, name):
        self.ensure(f"/api/v1/namespaces/{ns}/serviceaccounts",
                    {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}})

    def pod(self, ns, name, sa, node_name, labels=None):
        doc = self.ok("POST", f"/api/v1/namespaces/{ns}/pods",
                      {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
                       "spec": {"serviceAccountName": sa, "nodeName": node_name,
                                "containers": [{"name": "c", "image": "none"}]}})
        return doc["metadata"]["uid"]

    def delete_pod(self, ns, name):
        code, doc = self.req("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}?gracePeriodSeconds=0")
        assert code in (200, 202, 404), f"DELETE pod {ns}/{name}: {code} {doc.get('message')}"

    def label_pod(self, ns, name, i):
        self.ok("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}", {"metadata": {"labels": {"rev": str(i)}}},
                "application/merge-patch+json")

    def token(self, ns, sa, pod, seconds=3600):
        spec = {"audiences": ["istio-ca"], "expirationSeconds": seconds,
                "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod[0], "uid": pod[1]}}
        doc = self.ok("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token",
                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
        return doc["status"]["token"]


class Signetd:
    """signetd with the cluster, on a port of our choosing (so that it can
    be stopped and started again where the agent looks for it)."""

    def __init__(self, port=0):
        self.port = port
        self.proc = None
        self.log = None

    def start(self):
        env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
        self.log_path = os.path.join(C.tmp, f"signetd.{time.time_ns()}.log")
        self.log = open(self.log_path, "w+")
        self.proc = subprocess.Popen(
            [SIGNETD, "--config", C.conf, "--serving-address", f"127.0.0.1:{self.port}",
             "--http-address", "127.0.0.1", "--metrics-port", "0", "--readiness-probe-port", "0",
             "--log-format", "json", "--signer-threads", "2", "--kubeconfig", C.api.env["KUBECONFIG"],
             "--token-authenticator", "tokenreview", "--root-ca-configmap=false",
             "--ca-trusted-node-accounts", f"{AGENT_NS}/{AGENT_SA}",
             "--max-client-certificate-duration", "24h"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        rec = signet_e2e.wait_serving(self.proc, self.records)
        assert rec is not None, "signetd did not start:\n" + read(self.log_path)
        self.port = rec["port"]
        self.metrics_port = rec.get("metrics_port")

    def records(self):
        return signet_e2e.json_records(read(self.log_path).splitlines())

    def issued(self):
        """Certificates issued, from signetd's audit lines in its log."""
        return [r for r in self.records() if r.get("msg") == "certificate issued"]

    def stop(self):
        if self.proc:
            signet_e2e.stop_process(self.proc)
            self.log.close()
            self.proc = None


class Agent:
    """signet-agent for one node, with its own output folder and token."""

    def __init__(self, name, node_name, ca_port, token_pod, *flags, root_file=None, env=None):
        self.name = name
        self.env = env or {}
        self.dir = os.path.join(C.tmp, name)
        self.out = os.path.join(self.dir, "out")
        os.makedirs(self.out)
        self.token_file = os.path.join(self.dir, "token")
        with open(self.token_file, "w") as f:
            f.write(C.kube.token(AGENT_NS, AGENT_SA, token_pod) + "\n")
        self.log_path = os.path.join(self.dir, "agent.log")
        self.args = [AGENT, "--kubeconfig", C.api.env["KUBECONFIG"], "--node-name", node_name,
                     "--ca-address", f"127.0.0.1:{ca_port}", "--ca-server-name", "localhost",
                     "--root-ca-file", root_file or C.root_file, "--token-file", self.token_file,
                     "--output-dir", self.out,
                     "--http-address", "127.0.0.1", "--metrics-port", "0", "--readiness-probe-port", "0",
                     "--log-format", "json", *flags]
        self.proc = None

    def start(self):
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
        env.update(self.env)
        self.log = open(self.log_path, "a")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        # Both ports 0: one server answers both (one "metrics endpoint" line).
        wait_for(f"{self.name}'s start", lambda: self.proc.poll() is not None or self.record("signet-agent started"),
                 timeout=30)
        assert self.proc.poll() is None, f"{self.name} exited:\n" + self.text()
        self.metrics_port = self.record("metrics endpoint")["port"]
        probe = self.record("probe endpoint")
        self.probe_port = probe["port"] if probe else self.metrics_port

    def text(self):
        return read(self.log_path)

    def records(self):
        return signet_e2e.json_records(self.text().splitlines())

    def record(self, msg):
        return next((r for r in self.records() if r.get("msg") == msg), None)

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as r:
            out = {}
            for line in r.read().decode().splitlines():
                if line.startswith("signet_agent_"):
                    k, v = line.rsplit(" ", 1)
                    out[k] = float(v)
            return out

    def ready(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.probe_port}/readyz", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    def folder(self, ns, sa):
        return os.path.join(self.out, ns, sa)

    def stop(self):
        if self.proc:
            rc = signet_e2e.stop_process(self.proc)
            self.log.close()
            self.proc = None
            return rc
        return 0


class Cluster:
    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="agent.", dir=os.environ.get("SIGNET_TEST_TMP"))
        self.api = kube_rest.ApiServer(self.tmp)
        # Stopped even when the rest of the set-up fails (tearDownModule
        # does not run then; stopping twice is harmless).
        unittest.addModuleCleanup(self.api.stop)
        self.kube = Kube(self.api.env)
        ca = os.path.join(self.tmp, "ca")
        subprocess.run([SIGNETCTL, "init", "--dir", ca, "--log-level", "warn"], check=True,
                       stdout=subprocess.DEVNULL)
        # Without the development token issuer: in a cluster the tokens are
        # the API server's.
        self.conf = os.path.join(ca, "kube.conf")
        with open(os.path.join(ca, "signet.conf")) as src, open(self.conf, "w") as f:
            f.writelines(line for line in src if not line.startswith(("jwt-issuer", "jwt-jwks-file")))
        self.root_file = os.path.join(ca, "root-cert.pem")
        k = self.kube
        for ns in (AGENT_NS, NS, NS2, NS_SWEEP, NS_RACE, NS_PLAIN):
            k.namespace(ns)
        k.ensure("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                        "metadata": {"name": NS_KM, "labels": {ENROL: "kmesh"}}})
        k.service_account(AGENT_NS, AGENT_SA)
        for sa in ("web", "db", "batch", "churn", "other", "late", "short", "foreign", "job", "overlap", "signer",
                   "stranger"):
            k.service_account(NS, sa)
        k.service_account(NS2, "web")
        k.service_account(NS_SWEEP, "fresh")
        k.service_account(NS_RACE, "gone")
        k.service_account(NS_KM, "a1")
        for sa in ("b1", "b2"):
            k.service_account(NS_PLAIN, sa)
        # The agents' own pods, one per node (their tokens are bound to them).
        self.agent_pods = {}
        for n in ("a", "c", "d", "f", "g", "h"):
            name = f"signet-agent-{node(n)}"
            self.agent_pods[n] = (name, k.pod(AGENT_NS, name, AGENT_SA, node(n)))
        self.signetd = Signetd()

    def close(self, keep):
        self.signetd.stop()
        self.api.stop()
        if keep:
            print(f"kept {self.tmp}", file=sys.stderr)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


C = None
RESULTS = []


def setUpModule():
    global C
    C = Cluster()
    unittest.addModuleCleanup(C.signetd.stop)
    C.signetd.start()


def tearDownModule():
    ok = RESULTS and all(not r.failures and not r.errors for r in RESULTS)
    C.close(keep=not ok)


def openssl(*args):
    return subprocess.run(["openssl", *args], capture_output=True, text=True)


class Base(unittest.TestCase):
    def run(self, result=None):
        result = super().run(result)
        if result is not None:
            RESULTS.append(result)
        return result

    def snapshot(self, d, into):
        """Copies one version's three files into the folder into and
        returns key.pem's mode. "..data" is resolved once, as the agent's
        layout asks of a reader that needs the files to match
        (agent/sg_certdir.c): the name links may move to the next version
        between two opens. A version removed while it is read (replaced)
        is read again from the new "..data"."""
        for _ in range(20):
            try:
                version = os.path.join(d, os.readlink(os.path.join(d, "..data")))
                mode = stat.S_IMODE(os.stat(os.path.join(version, "key.pem")).st_mode)
                for f in ("cert-chain.pem", "key.pem", "root-cert.pem"):
                    shutil.copyfile(os.path.join(version, f), os.path.join(into, f))
                return mode
            except FileNotFoundError:
                continue
        self.fail(f"{d}: no version could be read whole in 20 tries")

    def check_folder(self, agent, ns, sa):
        """The three files of one version: the chain verifies to the root,
        the leaf names the account and holds key.pem's key, key.pem is
        0600. Returns (serial, key text)."""
        with tempfile.TemporaryDirectory(dir=C.tmp) as into:
            self.assertEqual(self.snapshot(agent.folder(ns, sa), into), 0o600)
            chain, key, root = (os.path.join(into, f) for f in ("cert-chain.pem", "key.pem", "root-cert.pem"))
            v = openssl("verify", "-CAfile", root, "-untrusted", chain, chain)
            self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
            self.assertEqual(read(root).strip(), read(C.root_file).strip())
            text = openssl("x509", "-in", chain, "-noout", "-text", "-serial").stdout
            self.assertIn(f"URI:spiffe://cluster.local/ns/{ns}/sa/{sa}", text)
            cert_pub = openssl("x509", "-in", chain, "-noout", "-pubkey").stdout
            key_pub = openssl("pkey", "-in", key, "-pubout").stdout
            self.assertTrue(cert_pub and cert_pub == key_pub, "key.pem does not hold the leaf's key")
            serial = re.search(r"serial=([0-9A-F]+)", text).group(1)
            return serial, read(key)


class NodeA(Base):
    """The main agent: node A, 2-minute certificates."""

    @classmethod
    def setUpClass(cls):
        k = C.kube
        cls.pods = {}
        cls.agent = Agent("agent-a", node("a"), C.signetd.port, C.agent_pods["a"], "--secret-ttl", f"{TTL}s")
        # A folder an earlier run left behind, for an account with no pod
        # here: swept at start.
        stale = cls.agent.folder(NS, "gone")
        os.makedirs(stale)
        os.symlink("..old", os.path.join(stale, "..data"))
        os.mkdir(os.path.join(stale, "..old"))
        cls.stale = stale
        cls.pods["web-1"] = k.pod(NS, "web-1", "web", node("a"))
        cls.pods["db-b"] = k.pod(NS, "db-b", "db", node("b"))  # another node
        cls.t_start = time.monotonic()
        cls.agent.start()

    @classmethod
    def tearDownClass(cls):
        rc = cls.agent.stop()
        assert rc == 0, f"signet-agent exited {rc}:\n{cls.agent.text()[-3000:]}"

    def wait_files(self, ns, sa, timeout=60):
        return wait_for(f"{ns}/{sa}'s files", lambda: os.path.exists(
            os.path.join(self.agent.folder(ns, sa), "cert-chain.pem")), timeout=timeout)

    def wait_gone(self, ns, sa, timeout=30):
        return wait_for(f"{ns}/{sa}'s folder removed", lambda: not os.path.exists(self.agent.folder(ns, sa)),
                        timeout=timeout)

    def requests_for(self, ns, sa):
        ident = f"spiffe://cluster.local/ns/{ns}/sa/{sa}"
        return [r for r in C.signetd.issued() if r.get("identity") == ident]

    def test_a_pods_on_the_node_only(self):
        self.wait_files(NS, "web")
        self.check_folder(self.agent, NS, "web")
        wait_for("ready", self.agent.ready, timeout=60)
        self.assertFalse(os.path.exists(self.agent.folder(NS, "db")), "a pod of another node got a certificate")
        # The sweep runs once, two ticks after the first list.
        wait_for("the stale folder of an earlier run swept", lambda: not os.path.exists(self.stale), timeout=60)

    def pods_counted(self):
        return self.agent.metrics()["signet_agent_pods"]

    def test_b_two_pods_share_one_certificate(self):
        k = C.kube
        pods = self.pods_counted()
        k.pod(NS, "batch-1", "batch", node("a"))
        k.pod(NS, "batch-2", "batch", node("a"))
        self.wait_files(NS, "batch")
        serial, _ = self.check_folder(self.agent, NS, "batch")
        # The agent has seen both pods; then no second request may follow
        # (an absence: a fixed quiet time).
        wait_for("both batch pods counted", lambda: self.pods_counted() >= pods + 2, timeout=60)
        time.sleep(1.0)
        self.assertEqual(len(self.requests_for(NS, "batch")), 1, "two pods of one account made two requests")
        k.delete_pod(NS, "batch-1")
        # The agent has seen the deletion; then the folder must stay (an
        # absence of its removal: a fixed quiet time).
        wait_for("batch-1's deletion counted", lambda: self.pods_counted() == pods + 1, timeout=60)
        time.sleep(2.0)
        self.assertTrue(os.path.exists(self.agent.folder(NS, "batch")), "deleting one of two pods dropped it")
        self.assertEqual(self.check_folder(self.agent, NS, "batch")[0], serial)
        k.delete_pod(NS, "batch-2")
        self.wait_gone(NS, "batch")
        self.assertTrue(os.path.isdir(os.path.join(self.agent.out, NS)), "the namespace folder went too early")

    def test_c_pod_updated_100_times_leaves_nothing(self):
        k = C.kube
        k.pod(NS, "churn-1", "churn", node("a"))
        self.wait_files(NS, "churn")
        for i in range(100):
            k.label_pod(NS, "churn-1", i)
        k.delete_pod(NS, "churn-1")
        self.wait_gone(NS, "churn")
        ident = f"spiffe://cluster.local/ns/{NS}/sa/churn"

        def settled():
            m = self.agent.metrics()
            dropped = [r for r in self.agent.records() if r.get("msg", "").startswith("certificate dropped")
                       and r.get("service_account") == "churn"]
            return dropped and m
        m = wait_for("the drop", settled, timeout=60)
        self.assertEqual(len(self.requests_for(NS, "churn")), 1, ident)
        # Only web (and whatever a running test holds) remains counted.
        self.assertLessEqual(m["signet_agent_identities"], 3, m)

    def test_d_other_namespace_and_late_pod(self):
        k = C.kube
        k.pod(NS2, "web-1", "web", node("a"))
        self.wait_files(NS2, "web")
        self.check_folder(self.agent, NS2, "web")
        k.delete_pod(NS2, "web-1")
        self.wait_gone(NS2, "web")
        # sg_certdir_remove takes the account's folder, then the namespace's
        # now empty one: two calls, and the test may look in between
        # (seen once under ASan). So the namespace folder is waited for too.
        wait_for("the empty namespace folder removed", lambda: not os.path.exists(os.path.join(self.agent.out, NS2)),
                 timeout=10)

    def test_e_finished_pods_release_their_certificate(self):
        """A pod that ends (Succeeded, Failed: a Job's) lets its
        certificate go as a deleted one does, while it still exists."""
        k = C.kube
        for phase in ("Succeeded", "Failed"):
            name = f"job-{phase.lower()}"
            k.pod(NS, name, "job", node("a"))
            self.wait_files(NS, "job")
            k.ok("PATCH", f"/api/v1/namespaces/{NS}/pods/{name}/status", {"status": {"phase": phase}},
                 "application/merge-patch+json")
            self.wait_gone(NS, "job")
            self.assertIsNotNone(k.req("GET", f"/api/v1/namespaces/{NS}/pods/{name}")[1].get("metadata"))
            k.delete_pod(NS, name)

    def test_z_refreshed_at_half_life(self):
        """Last (it waits past half of the 2-minute lifetime): web's
        certificate is replaced, with a new key, and still verifies."""
        self.wait_files(NS, "web")
        serial0, key0 = self.check_folder(self.agent, NS, "web")
        issued = next(r for r in self.agent.records() if r.get("msg") == "certificate issued"
                      and r.get("service_account") == "web" and r.get("namespace") == NS)
        due = issued["refresh_at"] - issued["not_after"] + TTL  # seconds after not_before
        self.assertTrue(TTL * 0.4 <= due <= TTL * 0.6 + 1, issued)

        def refreshed():
            s, key = self.check_folder(self.agent, NS, "web")
            return (s, key) if s != serial0 else None
        serial1, key1 = wait_for("web's refresh", refreshed, timeout=TTL * 0.6 + 30, interval=1.0)
        self.assertNotEqual(key1, key0, "the key was not rotated")
        m = self.agent.metrics()
        self.assertGreaterEqual(m["signet_agent_refreshes_total"], 1, m)
        self.assertGreater(m["signet_agent_certificate_expiry_seconds"], 0, m)
        self.assertLessEqual(m["signet_agent_certificate_expiry_seconds"], TTL, m)
        # The old version's folder is gone; ..data names the new one.
        d = self.agent.folder(NS, "web")
        versions = [n for n in os.listdir(d) if n.startswith("..") and n != "..data"]
        self.assertEqual(len(versions), 1, versions)
        self.assertEqual(os.readlink(os.path.join(d, "..data")), versions[0])


class CaDown(Base):
    """Node C's CA is down when its pod arrives: retried with growing
    delays, caught up once the CA is back."""

    def test_retried_and_caught_up(self):
        port = free_port()
        ca = Signetd(port)
        ca.start()
        agent = Agent("agent-c", node("c"), port, C.agent_pods["c"], "--retry-initial", "1s", "--retry-max", "8s")
        agent.start()
        try:
            ca.stop()
            t_down = time.monotonic()
            C.kube.pod(NS, "late-1", "late", node("c"))
            # late's own records only: the agent's own pod fails too when
            # its certificate had not arrived before the CA stopped, and
            # its back-off runs on its own clock, interleaved with late's
            # (issue 34: [816, 1191, 2385, 1666] under TSan).
            def late_fails():
                fails = [r for r in agent.records() if r.get("msg") == "certificate request failed"
                         and r.get("namespace") == NS and r.get("service_account") == "late"]
                return fails[:4] if len(fails) >= 4 else None
            fails = wait_for("four failed requests for late", late_fails, timeout=60)
            delays = [r["retry_ms"] for r in fails]
            # 1 s doubling (+-20 %): each delay longer than the one before.
            self.assertTrue(all(b > a for a, b in zip(delays, delays[1:])), delays)
            self.assertLessEqual(max(delays), 8000 * 1.2 + 1, delays)
            self.assertFalse(agent.ready(), "ready while an account waits for its certificate")
            self.assertFalse(os.path.exists(agent.folder(NS, "late")))
            ca.start()  # the same port
            t_up = time.monotonic()
            wait_for("late's files after the CA came back", lambda: os.path.exists(
                os.path.join(agent.folder(NS, "late"), "cert-chain.pem")), timeout=8 * 1.2 + 60)
            caught = time.monotonic() - t_up
            self.check_folder(agent, NS, "late")
            wait_for("ready", agent.ready, timeout=60)
            print(f"CA down {t_up - t_down:.1f}s: retry delays {delays} ms; certificate {caught:.1f}s after "
                  f"the CA came back", flush=True)
        finally:
            rc = agent.stop()
            ca.stop()
        self.assertEqual(rc, 0, agent.text()[-3000:])


class Floor(Base):
    """Node D: 1-minute certificates and a 2-minute refresh floor: one
    request, not a loop."""

    def test_short_certificate_does_not_loop(self):
        agent = Agent("agent-d", node("d"), C.signetd.port, C.agent_pods["d"], "--secret-ttl", "60s",
                      "--refresh-floor", "120s")
        agent.start()
        try:
            C.kube.pod(NS, "short-1", "short", node("d"))
            wait_for("short's files", lambda: os.path.exists(
                os.path.join(agent.folder(NS, "short"), "cert-chain.pem")), timeout=60)
            time.sleep(10)  # no refresh loop: an absence, so a fixed time is what is checked
            # One request for short (the agent's own pod on node D has its
            # account's certificate too), and no refresh at all.
            issued = [r for r in agent.records() if r.get("msg") == "certificate issued"
                      and r.get("service_account") == "short"]
            self.assertEqual(len(issued), 1, agent.text()[-2000:])
            self.assertEqual(agent.metrics()["signet_agent_refreshes_total"], 0)
            self.assertEqual(len([r for r in C.signetd.issued()
                                  if r.get("identity") == f"spiffe://cluster.local/ns/{NS}/sa/short"]), 1)
            issued = issued[0]
            self.assertGreaterEqual(issued["refresh_at"], issued["not_after"], issued)
            self.assertTrue(any(r.get("msg", "").startswith("refresh-floor is past the certificate's expiry")
                                for r in agent.records()), agent.text()[-2000:])
        finally:
            rc = agent.stop()
        self.assertEqual(rc, 0, agent.text()[-3000:])


class NodeAuthorization(Base):
    """An agent on node E holding node A's token: signetd refuses every
    account of node E's pods, since none has a pod on node A."""

    def test_foreign_node_refused(self):
        C.kube.pod(NS, "foreign-1", "foreign", node("e"))
        agent = Agent("agent-e", node("e"), C.signetd.port, C.agent_pods["a"], "--retry-initial", "1s",
                      "--retry-max", "2s")
        agent.start()
        try:
            fail = wait_for("a refusal", lambda: next((r for r in agent.records()
                                                      if r.get("msg") == "certificate request failed"), None),
                            timeout=30)
            self.assertIn("node", fail["error"], fail)
            self.assertIn("UNAUTHENTICATED", fail["error"], fail)
            self.assertFalse(os.path.exists(agent.folder(NS, "foreign")))
            self.assertFalse(agent.ready())
            self.assertGreaterEqual(agent.metrics()["signet_agent_ca_failures_total"], 1)
        finally:
            rc = agent.stop()
        self.assertEqual(rc, 0, agent.text()[-3000:])


class Writers(Base):
    """Node F: one writer per service-account folder. The agent's tick
    (retried writes, the start-up sweep) and its event thread (writes and
    removals) both change files; fshim holds one call of one of them for
    HOLD_MS, so that the other comes in the middle, where it would
    otherwise come by chance."""

    def arm(self, line):
        for sfx in (".entered", ".done"):
            try:
                os.unlink(self.ctl + sfx)
            except FileNotFoundError:
                pass
        with open(self.ctl + ".tmp", "w") as f:
            f.write(line + "\n")
        os.replace(self.ctl + ".tmp", self.ctl)

    @unittest.skipUnless(FSHIM, "SIGNET_FSHIM is not set")
    def test_writers_never_overlap(self):
        self.ctl = os.path.join(C.tmp, "fshim-f.ctl")
        agent = Agent("agent-f", node("f"), C.signetd.port, C.agent_pods["f"], "--retry-initial", "1s",
                      "--retry-max", "2s", env={"LD_PRELOAD": FSHIM, "SIGNET_FSHIM_CTL": self.ctl})
        # 1. The start-up sweep is held while it lists (opening NS_SWEEP's
        # folder, where an earlier run left an account with no pod), and a
        # new account of that namespace is written meanwhile: the sweep
        # decided from its list of accounts, which did not hold it.
        stale = agent.folder(NS_SWEEP, "stale")
        os.makedirs(stale)
        os.symlink("..old", os.path.join(stale, "..data"))
        os.mkdir(os.path.join(stale, "..old"))
        self.arm(f"openat {NS_SWEEP} delay:{HOLD_MS}")
        agent.start()
        try:
            wait_for("the sweep held", lambda: os.path.exists(self.ctl + ".entered"), timeout=60)
            C.kube.pod(NS_SWEEP, "fresh-1", "fresh", node("f"))
            wait_for("the sweep released", lambda: os.path.exists(self.ctl + ".done"), timeout=60)
            wait_for("the stale folder swept", lambda: not os.path.exists(stale), timeout=30)
            wait_for("fresh's files", lambda: os.path.exists(
                os.path.join(agent.folder(NS_SWEEP, "fresh"), "cert-chain.pem")), timeout=30)
            self.check_folder(agent, NS_SWEEP, "fresh")

            # 2. A write of NS_RACE fails (retried every second by the
            # tick); one retry is held, and the account's last pod goes
            # meanwhile: its removal must not come before the held write
            # and leave that write's files (a key) for an account with no
            # pods.
            self.arm(f"mkdirat {NS_RACE} fail")
            errors = agent.metrics().get("signet_agent_file_errors_total", 0)
            C.kube.pod(NS_RACE, "gone-1", "gone", node("f"))
            wait_for("a failed write", lambda: agent.metrics()["signet_agent_file_errors_total"] > errors,
                     timeout=60)
            written = agent.metrics()["signet_agent_files_written_total"]
            self.arm(f"mkdirat {NS_RACE} delay:{HOLD_MS}")
            wait_for("a retried write held", lambda: os.path.exists(self.ctl + ".entered"), timeout=30)
            C.kube.delete_pod(NS_RACE, "gone-1")
            wait_for("the drop", lambda: any(r.get("msg", "").startswith("certificate dropped")
                                             and r.get("namespace") == NS_RACE for r in agent.records()),
                     timeout=60)
            wait_for("the held write done",
                     lambda: agent.metrics()["signet_agent_files_written_total"] > written, timeout=60)
            self.assertFalse(os.path.exists(agent.folder(NS_RACE, "gone")),
                             "a retried write brought back the files of an account with no pods")
        finally:
            self.arm("none")
            rc = agent.stop()
        self.assertEqual(rc, 0, agent.text()[-3000:])


def pem(*certs):
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


class FakeCA:
    """An Istio certificate service of the test's own, over TLS: records
    what each call carries (its metadata and the request's metadata
    Struct) and signs any CSR with a root of its own. mode picks the
    answer: "root" [leaf, root]; "overlap" [leaf under a new root, old +
    new root]; "signer" [leaf, the signer's intermediate under the root]
    (istiod's per-signer mode); "stranger" as signer, under another
    root."""

    def __init__(self):
        import grpc
        from concurrent import futures
        signet_e2e.compile_proto(os.path.join(SOURCE_DIR, "proto"), C.tmp)
        import ca_pb2
        import ca_pb2_grpc
        self.key, self.root = self.ca_cert("fake CA root")
        self.new_key, self.new_root = self.ca_cert("fake CA new root")
        self.signer_key, self.signer = self.ca_cert("fake CA signer", self.root, self.key)
        stranger_root_key, stranger_root = self.ca_cert("fake CA stranger root")
        self.stranger_key, self.stranger = self.ca_cert("fake CA stranger", stranger_root, stranger_root_key)
        self.mode = "root"
        self.root_pem = self.root.public_bytes(serialization.Encoding.PEM)
        self.root_file = os.path.join(C.tmp, "fake-ca-root.pem")
        with open(self.root_file, "wb") as f:
            f.write(self.root_pem)
        skey = ec.generate_private_key(ec.SECP256R1())
        serving = self.leaf(skey.public_key(), x509.SubjectAlternativeName([x509.DNSName("localhost")]), 86400)
        self.calls = []
        outer = self

        class Servicer(ca_pb2_grpc.IstioCertificateServiceServicer):
            def CreateCertificate(self, request, context):
                md = dict(context.invocation_metadata())
                fields = request.metadata.fields
                imp = fields["ImpersonatedIdentity"] if "ImpersonatedIdentity" in fields else None
                csr = x509.load_pem_x509_csr(request.csr.encode())
                san = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
                outer.calls.append({"authorization": md.get("authorization"), "clusterid": md.get("clusterid"),
                                    "impersonated": imp.string_value if imp else None,
                                    "uris": san.get_values_for_type(x509.UniformResourceIdentifier)})
                issuer, key, last = {
                    "root": (outer.root, outer.key, [outer.root]),
                    "overlap": (outer.new_root, outer.new_key, [outer.root, outer.new_root]),
                    "signer": (outer.signer, outer.signer_key, [outer.signer]),
                    "stranger": (outer.stranger, outer.stranger_key, [outer.stranger])}[outer.mode]
                cert = outer.leaf(csr.public_key(), san, request.validity_duration or 3600, issuer, key)
                return ca_pb2.IstioCertificateResponse(cert_chain=[pem(cert), pem(*last)])

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        ca_pb2_grpc.add_IstioCertificateServiceServicer_to_server(Servicer(), self.server)
        creds = grpc.ssl_server_credentials([(
            skey.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                               serialization.NoEncryption()),
            serving.public_bytes(serialization.Encoding.PEM))])
        self.port = self.server.add_secure_port("127.0.0.1:0", creds)
        self.server.start()

    @staticmethod
    def ca_cert(cn, issuer=None, issuer_key=None):
        """A CA key and certificate: a root, or issued by issuer."""
        now = datetime.datetime.now(datetime.timezone.utc)
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
        cert = (x509.CertificateBuilder().subject_name(name)
                .issuer_name(issuer.subject if issuer else name)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                               critical=True)
                .sign(issuer_key or key, hashes.SHA256()))
        return key, cert

    def leaf(self, public_key, san, seconds, issuer=None, issuer_key=None):
        now = datetime.datetime.now(datetime.timezone.utc)
        issuer, issuer_key = (issuer, issuer_key) if issuer else (self.root, self.key)
        return (x509.CertificateBuilder().subject_name(x509.Name([])).issuer_name(issuer.subject)
                .public_key(public_key).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(seconds=30))
                .not_valid_after(now + datetime.timedelta(seconds=seconds))
                .add_extension(san, critical=True)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .sign(issuer_key, hashes.SHA256()))

    def stop(self):
        self.server.stop(0)


class Enrolment(Base):
    """Node G: pods enrolled Kmesh's way, by their own label or their
    namespace's (--pod-label-selector and --namespace-label-selector), from
    FakeCA, which shows what each request carried."""

    def test_namespace_label_and_request_metadata(self):
        ca = FakeCA()
        self.addCleanup(ca.stop)
        k = C.kube
        agent = Agent("agent-g", node("g"), ca.port, C.agent_pods["g"], "--cluster-id", "cluster-g",
                      "--pod-label-selector", f"{ENROL}=kmesh", "--namespace-label-selector", f"{ENROL}=kmesh",
                      root_file=ca.root_file)
        k.pod(NS_KM, "a1-1", "a1", node("g"))  # its namespace is labelled
        k.pod(NS_PLAIN, "b1-1", "b1", node("g"))  # neither is
        k.pod(NS_PLAIN, "b2-1", "b2", node("g"), labels={ENROL: "kmesh"})  # the pod is
        agent.start()
        try:
            def files(ns, sa):
                return os.path.exists(os.path.join(agent.folder(ns, sa), "cert-chain.pem"))
            wait_for("a1's and b2's files", lambda: files(NS_KM, "a1") and files(NS_PLAIN, "b2"), timeout=60)
            wait_for("ready", agent.ready, timeout=60)
            self.assertFalse(os.path.exists(agent.folder(NS_PLAIN, "b1")), "a pod not enrolled was served")
            self.assertFalse(os.path.exists(agent.folder(AGENT_NS, AGENT_SA)), "a pod not enrolled was served")
            # What each request carried: the agent's token, its cluster ID
            # and the workload it asks for.
            token = read(agent.token_file).strip()
            want = f"spiffe://cluster.local/ns/{NS_KM}/sa/a1"
            call = next(c for c in ca.calls if c["uris"] == [want])
            self.assertEqual(call, {"authorization": f"Bearer {token}", "clusterid": "cluster-g",
                                    "impersonated": want, "uris": [want]})
            # The namespace labelled later: its pods join; unlabelled: they
            # leave, and a pod enrolled by its own label stays.
            k.ok("PATCH", f"/api/v1/namespaces/{NS_PLAIN}", {"metadata": {"labels": {ENROL: "kmesh"}}},
                 "application/merge-patch+json")
            wait_for("b1's files", lambda: files(NS_PLAIN, "b1"), timeout=60)
            k.ok("PATCH", f"/api/v1/namespaces/{NS_PLAIN}", {"metadata": {"labels": {ENROL: None}}},
                 "application/merge-patch+json")
            wait_for("b1's folder removed", lambda: not os.path.exists(agent.folder(NS_PLAIN, "b1")), timeout=60)
            self.assertTrue(files(NS_PLAIN, "b2"), "a pod enrolled by its own label left with its namespace")
            self.assertTrue(files(NS_KM, "a1"))
        finally:
            rc = agent.stop()
        self.assertEqual(rc, 0, agent.text()[-3000:])


class Overlap(Base):
    """Node H: the answers of a root rotation and of istiod's per-signer
    mode, from FakeCA, with the agent configured with the (old) root."""

    def test_root_bundle_and_signer_roots(self):
        ca = FakeCA()
        self.addCleanup(ca.stop)
        k = C.kube
        agent = Agent("agent-h", node("h"), ca.port, C.agent_pods["h"], root_file=ca.root_file)

        def paths(sa):
            d = agent.folder(NS, sa)
            return os.path.join(d, "cert-chain.pem"), os.path.join(d, "root-cert.pem")

        agent.start()
        try:
            # Overlap: both roots written; the leaf is under the new one,
            # which the configured root file does not hold.
            ca.mode = "overlap"
            k.pod(NS, "overlap-1", "overlap", node("h"))
            chain, root = paths("overlap")
            wait_for("overlap's files", lambda: os.path.exists(chain), timeout=60)
            self.assertEqual(read(root), pem(ca.root, ca.new_root))
            v = openssl("verify", "-CAfile", root, chain)
            self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
            self.assertNotEqual(openssl("verify", "-CAfile", ca.root_file, chain).returncode, 0)

            # The signer's intermediate as the root: written alone, a
            # partial-chain anchor, and it chains to the configured root.
            ca.mode = "signer"
            k.pod(NS, "signer-1", "signer", node("h"))
            chain, root = paths("signer")
            wait_for("signer's files", lambda: os.path.exists(chain), timeout=60)
            self.assertEqual(read(root), pem(ca.signer))
            v = openssl("verify", "-partial_chain", "-CAfile", root, chain)
            self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
            v = openssl("verify", "-CAfile", ca.root_file, "-untrusted", root, chain)
            self.assertEqual(v.returncode, 0, v.stdout + v.stderr)

            # An intermediate under a root the agent does not trust.
            ca.mode = "stranger"
            k.pod(NS, "stranger-1", "stranger", node("h"))
            failed = wait_for("stranger's answer refused", lambda: next(
                (r for r in agent.records() if r.get("msg") == "certificate request failed"
                 and r.get("service_account") == "stranger"), None), timeout=60)
            self.assertIn("does not chain to the configured roots", failed["error"])
            self.assertFalse(os.path.exists(agent.folder(NS, "stranger")), "a refused answer was written")
        finally:
            rc = agent.stop()
        self.assertEqual(rc, 0, agent.text()[-3000:])


class Program(Base):
    def test_flags(self):
        h = subprocess.run([AGENT, "--help"], capture_output=True, text=True)
        self.assertEqual(h.returncode, 0)
        for flag in ("--node-name", "--output-dir", "--ca-address", "--cluster-id", "--secret-ttl",
                     "--root-ca-file", "--token-file", "--metrics-port", "--readiness-probe-port",
                     "--refresh-floor", "--key-type", "--pkcs8-key", "--pod-label-selector",
                     "--namespace-label-selector"):
            self.assertIn(flag, h.stdout)
        r = subprocess.run([AGENT, "--kubeconfig", C.api.env["KUBECONFIG"]], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("node-name is required", r.stderr)
        r = subprocess.run([AGENT, "--node-name", "n", "--refresh-percent", "99"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2, r.stderr)
        r = subprocess.run([AGENT, "--node-name", "n", "--root-ca-file", "/nonexistent/root.pem",
                            "--kubeconfig", C.api.env["KUBECONFIG"]], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("/nonexistent/root.pem", r.stderr)
        for flag in ("--pod-label-selector", "--namespace-label-selector"):
            r = subprocess.run([AGENT, "--node-name", "n", flag, "a in (b", "--kubeconfig", C.api.env["KUBECONFIG"]],
                               capture_output=True, text=True, timeout=30)
            self.assertNotEqual(r.returncode, 0, r.stderr)
            self.assertIn(flag[2:], r.stderr)

    def test_manifests(self):
        docs = [d for d in yaml.safe_load_all(read(os.path.join(SOURCE_DIR, "packaging", "kubernetes",
                                                                "agent.yaml"))) if d]
        kinds = {d["kind"] for d in docs}
        self.assertEqual(kinds, {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet"})
        paths = {"Namespace": "/api/v1/namespaces",
                 "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
                 "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
                 "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                 "DaemonSet": "/apis/apps/v1/namespaces/{ns}/daemonsets"}
        for d in docs:
            path = paths[d["kind"]].format(ns=d["metadata"].get("namespace", "")) + "?dryRun=All"
            code, doc = C.kube.req("POST", path, d)
            self.assertIn(code, (201, 409), f"{d['kind']}: {code} {doc.get('message')}")
        ds = next(d for d in docs if d["kind"] == "DaemonSet")
        args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
        h = subprocess.run([AGENT, "--help"], capture_output=True, text=True).stdout
        for a in args:
            self.assertIn(a.split("=", 1)[0], h, f"the DaemonSet passes {a}, which signet-agent lacks")
        # The rules, applied for real (idempotent), then asked of the API
        # server for the agent's account.
        for d in docs:
            if d["kind"] in ("ClusterRole", "ClusterRoleBinding"):
                code, doc = C.kube.req("POST", paths[d["kind"]], d)
                self.assertIn(code, (201, 409), doc.get("message"))
        user = f"system:serviceaccount:{AGENT_NS}:{AGENT_SA}"
        for verb, res in [(v, r) for v in ("list", "watch", "get") for r in ("pods", "namespaces")]:
            sar = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                   "spec": {"user": user, "groups": ["system:serviceaccounts"],
                            "resourceAttributes": {"verb": verb, "resource": res,
                                                   "namespace": NS if res == "pods" else ""}}}
            doc = wait_for(f"{verb} {res} allowed", lambda: (lambda r: r if r["status"].get("allowed") else None)(
                C.kube.ok("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", sar)), timeout=60)
            self.assertTrue(doc["status"]["allowed"])
        sar["spec"]["resourceAttributes"] = {"verb": "delete", "resource": "pods", "namespace": NS}
        doc = C.kube.ok("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", sar)
        self.assertFalse(doc["status"].get("allowed"), "the agent may delete pods")


if __name__ == "__main__":
    unittest.main(verbosity=2)
