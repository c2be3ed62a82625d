#!/usr/bin/python3
"""A CA rotation (signetctl rotate begin, activate, finish) as the cluster
sees it, against a real kube-apiserver and etcd (tests/kube/apiserver.sh,
or the shared one SIGNET_KUBE_ENV names).

signetd runs in cluster mode on a CA signetctl init made, with
signet-trust and signet-agent beside it. After each step the test waits,
on what the API server and the agent's files hold (never on a sleep), until
every place that carries the roots holds exactly the expected set: the
old root at start, old + new after begin (and still after activate), the
new root alone after finish:

  - istio-ca-root-cert (root-cert.pem) in a mesh namespace, and not in a
    namespace the selector leaves out;
  - signet-ca-roots (ca.crt) in the trust namespace;
  - a trust Bundle's target ConfigMap, signet-trust reading signet-ca-roots
    as its source;
  - istiod-tls's ca.crt (signetd issues istiod's serving certificate,
    --istiod-cert-enabled);
  - the root-cert.pem signet-agent writes for a workload on its node. The
    agent asks for 60-second certificates refreshed every few seconds, so
    each step reaches its files soon; its --root-ca-file is written by the
    test from istio-ca-root-cert after each change, as the kubelet projects
    that ConfigMap into a real agent's pod (after finish signetd's serving
    certificate is under the new root alone).

A set is compared as the certificates it holds (order and PEM layout
aside). signetd, signet-trust and signet-agent must stop cleanly (the
sanitizers' exit status included).

usage: test_rotate_kube.py SIGNETCTL SIGNETD SIGNET_TRUST SIGNET_AGENT SOURCE_DIR
"""
import base64
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

from cryptography import x509
from cryptography.hazmat.primitives import serialization

SIGNETCTL, SIGNETD, TRUST, AGENT, SOURCE_DIR = sys.argv[1:6]
del sys.argv[1:6]
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "kube"))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "ra"))
import kube_rest  # noqa: E402
import signet_e2e  # noqa: E402
from signet_e2e import read  # noqa: E402

# Generous deadlines: a loaded 2-core box, ASan and TSan builds.
WAIT = 240
def secret_data(k, ns, name, key):
    """A Secret's key, decoded; None while the Secret or the key is missing."""
    o = k.get(f"/api/v1/namespaces/{ns}/secrets/{name}")
    v = ((o or {}).get("data") or {}).get(key)
    return base64.b64decode(v).decode() if v else None


PEM_RE = re.compile(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", re.S)
MESH_NS, PLAIN_NS, TRUST_NS = "rk-mesh", "rk-plain", "cert-manager"
AGENT_NS, AGENT_SA, NODE, WORKLOAD_SA = "rk-agent", "signet-agent", "rk-node", "web"
BUNDLE = "rk-roots"


def cert_set(text):
    """The certificates of a PEM text, as a set of DER bytes."""
    return frozenset(x509.load_pem_x509_certificate(m.encode()).public_bytes(serialization.Encoding.DER)
                     for m in PEM_RE.findall(text or ""))


def wait_for(what, fn, timeout=WAIT):
    return kube_rest.wait_for(what, fn, timeout=timeout)


class Kube(kube_rest.Kube):
    def create(self, path, body):
        code, doc = self.req("POST", path, body)
        assert code in (201, 409), f"POST {path}: {code} {doc.get('message')}"
        return doc

    def namespace(self, name, labels=None):
        self.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": name, "labels": labels or {}}})

    def pod(self, ns, name, sa):
        """A Pod on NODE (nothing runs it: there is no kubelet; Pending is
        enough for the agent)."""
        doc = self.create(f"/api/v1/namespaces/{ns}/pods",
                          {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                           "spec": {"serviceAccountName": sa, "nodeName": NODE,
                                    "containers": [{"name": "c", "image": "none"}]}})
        return doc["metadata"]["uid"]

    def data(self, ns, name, key):
        code, doc = self.req("GET", f"/api/v1/namespaces/{ns}/configmaps/{name}")
        return (doc.get("data") or {}).get(key) if code == 200 else None

    def crds(self, manifest):
        """The CRDs of a manifest (its other objects are not needed here)."""
        import yaml
        for doc in yaml.safe_load_all(read(manifest)):
            if doc and doc["kind"] == "CustomResourceDefinition":
                self.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", doc)


class Proc:
    """A program of ours on loopback, its JSON log in a file."""

    def __init__(self, name, args, env):
        self.log_path = os.path.join(T.tmp, f"{name}.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def record(self, msg):
        return next((r for r in signet_e2e.json_records(read(self.log_path).splitlines()) if r.get("msg") == msg),
                    None)

    def started(self, msg):
        wait_for(f"{msg} ({self.log_path})", lambda: self.proc.poll() is not None or self.record(msg), timeout=60)
        assert self.proc.poll() is None, f"exited {self.proc.returncode}:\n{read(self.log_path)}"

    def stop(self):
        rc = signet_e2e.stop_process(self.proc)
        self.log.close()
        return rc


class Env:
    pass


T = Env()


def setUpModule():
    T.tmp = tempfile.mkdtemp(prefix="rotate-kube.", dir=os.environ.get("SIGNET_TEST_TMP"))
    T.api = kube_rest.ApiServer(T.tmp)
    unittest.addModuleCleanup(T.api.stop)  # also when the set-up below fails
    T.kube = Kube(T.api.env)


def tearDownModule():
    T.api.stop()
    if os.environ.get("SIGNET_KEEP_TMP"):
        print(f"kept {T.tmp}", file=sys.stderr)
    else:
        shutil.rmtree(T.tmp, ignore_errors=True)


class RotateInCluster(unittest.TestCase):
    def rotate(self, step, *flags):
        return subprocess.run([SIGNETCTL, "rotate", step, "--config", self.conf, "--log-level", "warn", *flags],
                              capture_output=True, text=True, timeout=WAIT)

    def places(self):
        """Where the roots are, each read now (None: not there yet)."""
        k = T.kube
        wl = os.path.join(self.agent_out, MESH_NS, WORKLOAD_SA, "root-cert.pem")
        return {
            "istio-ca-root-cert": k.data(MESH_NS, "istio-ca-root-cert", "root-cert.pem"),
            "signet-ca-roots": k.data(TRUST_NS, "signet-ca-roots", "ca.crt"),
            "the Bundle's target": k.data(MESH_NS, BUNDLE, "ca.crt"),
            "the agent's root-cert.pem": read(wl) if os.path.exists(wl) else None,
            "istiod-tls ca.crt": secret_data(k, "istio-system", "istiod-tls", "ca.crt"),
        }

    def all_hold(self, want, stage):
        """Waits until every place holds exactly want; meanwhile keeps the
        agent's --root-ca-file as the kubelet would (istio-ca-root-cert's
        content)."""
        def check():
            now = self.places()
            cm = now["istio-ca-root-cert"]
            if cm and read(self.agent_root) != cm:
                with open(self.agent_root + ".tmp", "w") as f:
                    f.write(cm)
                os.replace(self.agent_root + ".tmp", self.agent_root)  # atomic, as the kubelet's swap
            self.last = {k: cert_set(v) for k, v in now.items()}
            return all(v == want for v in self.last.values())
        try:
            wait_for(f"the roots {stage}", check)
        except AssertionError:
            names = {self.old: "old", self.new: "new"} if hasattr(self, "new") else {self.old: "old"}
            got = {k: sorted(names.get(frozenset([c]), "?") for c in v) for k, v in self.last.items()}
            raise AssertionError(f"the roots {stage}: {got}\n" + read(self.signetd.log_path)[-4000:])
        # Only the namespaces the selector takes get istio-ca-root-cert.
        self.assertIsNone(T.kube.data(PLAIN_NS, "istio-ca-root-cert", "root-cert.pem"))

    def test_old_then_old_and_new_then_new(self):
        k = T.kube
        k.crds(os.path.join(SOURCE_DIR, "packaging", "kubernetes", "base", "trust-crds.yaml"))
        wait_for("the Bundle CRD", lambda: k.get("/apis/trust.cert-manager.io/v1alpha1/bundles"))
        for ns, labels in (("istio-system", None), (TRUST_NS, None), (MESH_NS, {"istio-injection": "enabled"}),
                           (PLAIN_NS, None), (AGENT_NS, None)):
            k.namespace(ns, labels)
        for ns, sa in ((AGENT_NS, AGENT_SA), (MESH_NS, WORKLOAD_SA)):
            k.create(f"/api/v1/namespaces/{ns}/serviceaccounts",
                     {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}})
        agent_pod = ("signet-agent-rk", k.pod(AGENT_NS, "signet-agent-rk", AGENT_SA))
        k.pod(MESH_NS, "web-1", WORKLOAD_SA)
        k.create("/apis/trust.cert-manager.io/v1alpha1/bundles",
                 {"apiVersion": "trust.cert-manager.io/v1alpha1", "kind": "Bundle", "metadata": {"name": BUNDLE},
                  "spec": {"sources": [{"configMap": {"name": "signet-ca-roots", "key": "ca.crt"}}],
                           "target": {"configMap": {"key": "ca.crt"},
                                      "namespaceSelector": {"matchLabels": {"istio-injection": "enabled"}}}}})

        # The CA, without init's development token issuer: in a cluster the
        # tokens are the API server's.
        ca = os.path.join(T.tmp, "ca")
        subprocess.run([SIGNETCTL, "init", "--dir", ca, "--log-level", "warn"], check=True, stdout=subprocess.DEVNULL)
        self.conf = os.path.join(ca, "signet.conf")
        with open(self.conf) as f:
            lines = [line for line in f if not line.startswith(("jwt-issuer", "jwt-jwks-file"))]
        with open(self.conf + ".tmp", "w") as f:
            f.writelines(lines)
        os.replace(self.conf + ".tmp", self.conf)
        self.old = cert_set(read(os.path.join(ca, "root-cert.pem")))
        self.assertEqual(len(self.old), 1)

        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
        kubeconfig = T.api.env["KUBECONFIG"]
        self.signetd = signet_e2e.Signetd(
            SIGNETD, self.conf, "--kubeconfig", kubeconfig, "--token-authenticator", "tokenreview",
            "--ca-trusted-node-accounts", f"{AGENT_NS}/{AGENT_SA}",
            "--configmap-namespace-selector", "istio-injection=enabled", "--trust-namespace", TRUST_NS,
            "--istiod-cert-enabled", "--istiod-cert-namespace", "istio-system", env=env)
        self.addCleanup(lambda: self.signetd.proc.poll() is not None or self.signetd.stop())

        trust = Proc("trust", [TRUST, "--kubeconfig", kubeconfig, "--trust-namespace", TRUST_NS,
                               "--metrics-port=0", "--readiness-probe-port", "0", "--log-format=json"], env)
        self.addCleanup(lambda: trust.proc.poll() is not None or trust.stop())
        trust.started("signet-trust started")

        # The agent: its token bound to its pod, 60-second certificates
        # refreshed at 5 % (3 s), its roots from istio-ca-root-cert.
        wait_for("istio-ca-root-cert", lambda: k.data(MESH_NS, "istio-ca-root-cert", "root-cert.pem"))
        self.agent_root = os.path.join(T.tmp, "agent-root-cert.pem")
        with open(self.agent_root, "w") as f:
            f.write(k.data(MESH_NS, "istio-ca-root-cert", "root-cert.pem"))
        token = k.ok("POST", f"/api/v1/namespaces/{AGENT_NS}/serviceaccounts/{AGENT_SA}/token",
                     {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                      "spec": {"audiences": ["istio-ca"], "expirationSeconds": 3600,
                               "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": agent_pod[0],
                                                  "uid": agent_pod[1]}}})["status"]["token"]
        token_file = os.path.join(T.tmp, "agent-token")
        with open(token_file, "w") as f:
            f.write(token + "\n")
        self.agent_out = os.path.join(T.tmp, "agent-out")
        os.mkdir(self.agent_out)
        agent = Proc("agent", [AGENT, "--kubeconfig", kubeconfig, "--node-name", NODE,
                               "--ca-address", f"127.0.0.1:{self.signetd.port}", "--ca-server-name", "localhost",
                               "--root-ca-file", self.agent_root, "--token-file", token_file,
                               "--output-dir", self.agent_out, "--secret-ttl", "60s", "--refresh-percent", "5",
                               "--refresh-jitter-percent", "0", "--refresh-floor", "1s",
                               "--http-address", "127.0.0.1", "--metrics-port", "0", "--readiness-probe-port", "0",
                               "--log-format", "json"], env)
        self.addCleanup(lambda: agent.proc.poll() is not None or agent.stop())
        agent.started("signet-agent started")

        self.all_hold(self.old, "at start (old)")

        p = self.rotate("begin")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.new = cert_set(read(os.path.join(ca, "root-cert-g2.pem")))
        self.assertEqual(len(self.new), 1)
        self.assertNotEqual(self.new, self.old)
        self.all_hold(self.old | self.new, "after begin (old + new)")

        p = self.rotate("activate", "--workload-lifetime", "1s", "--skew", "0s")
        self.assertEqual(p.returncode, 0, p.stderr)
        # signetd has followed activate (its second reload); the roots
        # stay old + new, and the agent keeps being served.
        wait_for("signetd's reload of activate",
                 lambda: len([r for r in self.signetd.records() if r.get("msg") == "CA reloaded"]) >= 2)
        self.all_hold(self.old | self.new, "after activate (old + new)")

        # finish is refused until --workload-lifetime + --skew (1 s) has
        # passed since activate; the last refusal is kept for the message.
        last = {}

        def finished():
            p = self.rotate("finish")
            last["stderr"] = p.stderr
            return p.returncode == 0
        try:
            wait_for("finish", finished)
        except AssertionError:
            raise AssertionError("rotate finish kept failing: " + last.get("stderr", ""))
        self.all_hold(self.new, "after finish (new)")
        # The agent still gets certificates (its folder's chain refreshed
        # under the new root) after the old key is gone.
        chain = os.path.join(self.agent_out, MESH_NS, WORKLOAD_SA, "cert-chain.pem")
        before = read(chain)
        wait_for("a refresh after finish", lambda: read(chain) != before)
        v = subprocess.run(["openssl", "verify", "-CAfile", self.agent_root, "-untrusted", chain, chain],
                           capture_output=True, text=True)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)

        for name, proc in (("signet-agent", agent), ("signet-trust", trust), ("signetd", self.signetd)):
            rc = proc.stop()
            self.assertEqual(rc, 0, f"{name} exited {rc}:\n" + read(proc.log_path)[-4000:])


if __name__ == "__main__":
    unittest.main()
