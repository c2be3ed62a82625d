#!/usr/bin/python3
"""signet-trust as a program, against a real kube-apiserver and etcd
(tests/kube/apiserver.sh): its command line (--help, GNU flags, errors),
the package subcommand on Debian's ca-certificates, the shipped CRD and
RBAC, a Bundle of the default CAs plus a CA of the test's own synced into
selected namespaces and checked with `openssl verify`, the probes and
metrics, two replicas under one Lease (the standby is ready and writes
nothing; it takes over when the leader stops), and a clean SIGTERM.

The controller's semantics are tested in depth in process
(test_kube_trust.c); this test is about the program around it.

Usage: test_program.py SIGNET_TRUST SOURCE_DIR
"""
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

import yaml

TRUST = sys.argv[1] if len(sys.argv) > 1 else "signet-trust"
SOURCE_DIR = sys.argv[2] if len(sys.argv) > 2 else "."
KUBE_SCRIPTS = os.path.join(SOURCE_DIR, "tests", "kube")
sys.path.insert(0, KUBE_SCRIPTS)
import kube_rest  # noqa: E402


MANIFESTS = os.path.join(SOURCE_DIR, "packaging", "kubernetes")
TRUST_NS = "pt-trust"
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{TRUST_NS}/leases/trust-manager-leader-election"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def wait_for(what, fn, timeout=60):
    """kube_rest's, with room for the sanitizer builds."""
    return kube_rest.wait_for(what, fn, timeout)


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


class Kube(kube_rest.Kube):
    """The shared client, with what this test adds."""

    def namespace(self, name, labels=None):
        code, doc = self.req("POST", "/api/v1/namespaces",
                             {"apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": name, "labels": labels or {}}})
        assert code in (201, 409), f"namespace {name}: {code} {doc.get('message')}"

    def apply_file(self, path):
        """Creates every object of a manifest (AlreadyExists is fine)."""
        for doc in yaml.safe_load_all(read(path)):
            if not doc:
                continue
            kind, meta = doc["kind"], doc["metadata"]
            group_version = doc["apiVersion"]
            plural = {"CustomResourceDefinition": "customresourcedefinitions", "Namespace": "namespaces",
                      "ServiceAccount": "serviceaccounts", "ClusterRole": "clusterroles",
                      "ClusterRoleBinding": "clusterrolebindings", "Role": "roles",
                      "RoleBinding": "rolebindings"}[kind]
            base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
            ns = meta.get("namespace")
            path = f"{base}/namespaces/{ns}/{plural}" if ns else f"{base}/{plural}"
            code, out = self.req("POST", path, doc)
            assert code in (201, 409), f"{kind} {meta['name']}: {code} {out.get('message')}"


def openssl(*args, **kw):
    return subprocess.run(["openssl", *args], check=True, capture_output=True, **kw)


class Env:
    """The API server (shared through SIGNET_KUBE_ENV, or our own), the
    CRD, a CA of our own with a leaf it signed, and a package file."""

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="trust-program.", dir=os.environ.get("SIGNET_TEST_TMP"))
        self.api = kube_rest.ApiServer(self.tmp)
        unittest.addModuleCleanup(self.api.stop)  # also when the set-up below fails
        self.env = self.api.env
        self.kube = Kube(self.env)
        self.kube.apply_file(os.path.join(MANIFESTS, "base", "trust-crds.yaml"))
        wait_for("the Bundle CRD", lambda: self.kube.get("/apis/trust.cert-manager.io/v1alpha1/bundles"))
        self.kube.namespace(TRUST_NS)
        # A CA and a leaf it signed: the leaf must verify against every
        # target once the CA is in the Bundle.
        d = self.tmp
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                f"{d}/ca.key", "-out", f"{d}/ca.pem", "-subj", "/CN=program test CA", "-days", "2",
                "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                f"{d}/leaf.key", "-out", f"{d}/leaf.csr", "-subj", "/CN=leaf.example")
        openssl("x509", "-req", "-in", f"{d}/leaf.csr", "-CA", f"{d}/ca.pem", "-CAkey", f"{d}/ca.key",
                "-CAcreateserial", "-out", f"{d}/leaf.pem", "-days", "1")
        self.ca_pem = read(f"{d}/ca.pem")
        self.leaf = f"{d}/leaf.pem"
        self.package = f"{d}/debian-package.json"
        subprocess.run([TRUST, "package", "--version", "test-1", "--output", self.package], check=True)
        self.procs = []

    def run(self, name, *extra):
        """Starts signet-trust; returns (process, metrics port, probe port)."""
        path = os.path.join(self.tmp, f"{name}.log")
        args = [TRUST, "--kubeconfig", self.env["KUBECONFIG"], "--trust-namespace", TRUST_NS,
                "--default-package-location", self.package, "--metrics-port=0", "--readiness-probe-port", "0",
                "--log-format=json", "--leader-election-lease-duration", "4s",
                "--leader-election-renew-deadline", "3s", "--leader-election-retry-period", "1s", *extra]
        with open(path, "w") as log:
            p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)

        def ports():
            """Both ports 0: one server holds metrics and probes."""
            found = {}
            for line in read(path).splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("msg") in ("metrics endpoint", "probe endpoint", "signet-trust started"):
                    found[rec["msg"]] = rec.get("port")
            return found if "signet-trust started" in found else None
        got = wait_for(f"{name}'s endpoints", ports, timeout=20)
        metrics = got["metrics endpoint"]
        return p, metrics, got.get("probe endpoint", metrics)

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.api.stop()
        if os.environ.get("SIGNET_KEEP_TMP"):
            print(f"kept {self.tmp}", file=sys.stderr)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


E = None


def setUpModule():
    global E
    E = Env()


def tearDownModule():
    E.close()


def http(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metric(port, name):
    _, text = http(port, "/metrics")
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


class CommandLine(unittest.TestCase):
    def test_help_documents_every_flag(self):
        out = subprocess.run([TRUST, "--help"], check=True, capture_output=True, text=True).stdout
        for flag in ("--trust-namespace", "--default-package-location", "--secret-targets-enabled",
                     "--filter-expired-certificates", "--filter-non-ca-certs", "--target-namespaces",
                     "--leader-elect", "--readiness-probe-port", "--metrics-port", "--kubeconfig"):
            self.assertIn(flag, out)
        out = subprocess.run([TRUST, "package", "--help"], check=True, capture_output=True, text=True).stdout
        self.assertIn("--certificates", out)

    def test_bad_flags_are_refused_clearly(self):
        r = subprocess.run([TRUST, "--no-such-flag"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("no-such-flag", r.stderr)
        r = subprocess.run([TRUST, "--kubeconfig", E.env["KUBECONFIG"], "--trust-namespace=Not_A_Namespace",
                            "--metrics-port=0", "--readiness-probe-port=0"], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn("not a namespace name", r.stderr)
        r = subprocess.run([TRUST, "--default-package-location", "/nonexistent.json"], capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(r.returncode, 1)
        # The config file uses the flags' names; flags override it.
        conf = os.path.join(E.tmp, "bad.conf")
        with open(conf, "w") as f:
            f.write("trust-namespace = Not_A_Namespace\n")
        r = subprocess.run([TRUST, "--config", conf, "--kubeconfig", "/nonexistent"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn('trust-namespace "Not_A_Namespace" is not a namespace name', r.stderr)
        r = subprocess.run([TRUST, "--config", conf, "--trust-namespace=fine", "--kubeconfig", "/nonexistent"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn("/nonexistent", r.stderr)
        # Booleans bare and with a value, GNU style.
        r = subprocess.run([TRUST, "--leader-elect=maybe"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)

    def test_package_of_debian_ca_certificates(self):
        doc = json.loads(read(E.package))
        self.assertEqual(doc["name"], "cert-manager-debian")
        self.assertEqual(doc["version"], "test-1")
        n = doc["bundle"].count("-----BEGIN CERTIFICATE-----")
        self.assertGreater(n, 50)
        self.assertEqual(n, len(set(doc["bundle"].split("-----END CERTIFICATE-----"))) - 1)  # no duplicate
        self.assertFalse(doc["bundle"].endswith("\n"))
        # The same input in another order gives the same package.
        certs = [c + "-----END CERTIFICATE-----\n" for c in read(CA_BUNDLE).split("-----END CERTIFICATE-----")
                 if "BEGIN" in c]
        shuffled = os.path.join(E.tmp, "reversed.pem")
        with open(shuffled, "w") as f:
            f.writelines(reversed(certs + certs[:3]))
        out = os.path.join(E.tmp, "reversed.json")
        subprocess.run([TRUST, "package", "--version", "test-1", "--certificates", shuffled, "--output", out],
                       check=True)
        self.assertEqual(json.loads(read(out))["bundle"], doc["bundle"])
        # A private key among the certificates is refused, and nothing is written.
        bad = os.path.join(E.tmp, "with-key.pem")
        with open(bad, "w") as f:
            f.write(E.ca_pem + read(os.path.join(E.tmp, "ca.key")))
        out = os.path.join(E.tmp, "bad.json")
        r = subprocess.run([TRUST, "package", "--version", "1", "--certificates", bad, "--output", out],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn("only CERTIFICATE blocks are permitted but found 'PRIVATE KEY'", r.stderr)
        self.assertFalse(os.path.exists(out))
        r = subprocess.run([TRUST, "package", "--version", "1", "--output", "x.txt"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn(".json", r.stderr)


class Running(unittest.TestCase):
    def test_bundle_leader_standby_and_shutdown(self):
        k = E.kube
        k.ok("POST", f"/api/v1/namespaces/{TRUST_NS}/configmaps",
             {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "program-ca"},
              "data": {"ca.crt": E.ca_pem}})
        k.namespace("pt-a", {"pt-trust": "yes"})
        k.namespace("pt-b", {"pt-trust": "yes"})
        k.namespace("pt-c")
        bundle = {"apiVersion": "trust.cert-manager.io/v1alpha1", "kind": "Bundle",
                  "metadata": {"name": "program-bundle"},
                  "spec": {"sources": [{"useDefaultCAs": True}, {"configMap": {"name": "program-ca", "key": "ca.crt"}}],
                           "target": {"configMap": {"key": "ca-certificates.crt"},
                                      "namespaceSelector": {"matchLabels": {"pt-trust": "yes"}}}}}
        k.ok("POST", "/apis/trust.cert-manager.io/v1alpha1/bundles", bundle)

        one, m1, p1 = E.run("one")
        wait_for("leadership", lambda: k.get(LEASE) and k.get(LEASE)["spec"].get("holderIdentity"))
        two, m2, p2 = E.run("two")

        def target(ns):
            cm = k.get(f"/api/v1/namespaces/{ns}/configmaps/program-bundle")
            return cm and cm["data"].get("ca-certificates.crt")
        for ns in ("pt-a", "pt-b"):
            pem = wait_for(f"the target in {ns}", lambda: target(ns))
            path = os.path.join(E.tmp, f"{ns}.pem")
            with open(path, "w") as f:
                f.write(pem)
            r = subprocess.run(["openssl", "verify", "-CAfile", path, E.leaf], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertGreater(pem.count("BEGIN CERTIFICATE"), 50)  # the default CAs too
        self.assertIsNone(k.get("/api/v1/namespaces/pt-c/configmaps/program-bundle"))
        b = wait_for("Synced", lambda: (lambda o: o if o.get("status", {}).get("conditions") else None)(
            k.get("/apis/trust.cert-manager.io/v1alpha1/bundles/program-bundle")))
        cond = b["status"]["conditions"][0]
        self.assertEqual((cond["type"], cond["status"], cond["reason"]), ("Synced", "True", "Synced"))
        self.assertEqual(b["status"]["defaultCAVersion"].split("-test-1-")[0], "cert-manager-debian")

        # Leader and standby: both ready; only the leader has written.
        holder = k.get(LEASE)["spec"]["holderIdentity"]
        leader, standby = ((one, m1, p1), (two, m2, p2))
        self.assertEqual(http(p1, "/readyz")[0], 200)
        wait_for("the standby ready", lambda: http(p2, "/readyz")[0] == 200)
        self.assertEqual(http(p2, "/healthz")[0], 200)
        self.assertGreaterEqual(metric(m1, "signet_trust_target_writes_total"), 2)
        self.assertEqual(metric(m2, "signet_trust_target_writes_total"), 0)
        self.assertIn('signet_controller_reconciles_total{controller="bundles"', http(m1, "/metrics")[1])

        # The leader stops: the Lease is released and the standby leads,
        # and a namespace created now gets its target from it.
        one.send_signal(signal.SIGTERM)
        self.assertEqual(one.wait(timeout=30), 0)
        wait_for("a new holder", lambda: k.get(LEASE)["spec"].get("holderIdentity") not in ("", holder))
        k.namespace("pt-d", {"pt-trust": "yes"})
        wait_for("the target in pt-d", lambda: target("pt-d"))
        wait_for("writes by the new leader", lambda: metric(m2, "signet_trust_target_writes_total") >= 1)
        two.send_signal(signal.SIGTERM)
        self.assertEqual(two.wait(timeout=30), 0)
        del leader, standby


class ShippedRbac(unittest.TestCase):
    """signet-trust with nothing but what packaging/kubernetes/base/trust-rbac.yaml
    grants its ServiceAccount: a token of that account (TokenRequest), the
    trust namespace cert-manager, Secret sources and Secret targets, the
    Lease, Events and Bundle status all work."""

    def test_runs_on_its_own_rbac(self):
        k = E.kube
        k.apply_file(os.path.join(MANIFESTS, "base", "trust-rbac.yaml"))
        token = k.ok("POST", "/api/v1/namespaces/cert-manager/serviceaccounts/signet-trust/token",
                     {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                      "spec": {"expirationSeconds": 3600}})["status"]["token"]
        cfg = os.path.join(E.tmp, "signet-trust.kubeconfig")
        with open(cfg, "w") as f:
            json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "sa",
                       "clusters": [{"name": "c", "cluster": {"server": E.env["KUBE_APISERVER"],
                                                              "certificate-authority": E.env["KUBE_CA_FILE"]}}],
                       "users": [{"name": "sa", "user": {"token": token}}],
                       "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}]}, f)
        os.chmod(cfg, 0o600)
        k.ok("POST", "/api/v1/namespaces/cert-manager/secrets",
             {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "rbac-ca"},
              "data": {"ca.crt": base64.b64encode(E.ca_pem.encode()).decode()}})
        k.namespace("pt-rbac", {"pt-rbac": "yes"})
        k.ok("POST", "/apis/trust.cert-manager.io/v1alpha1/bundles",
             {"apiVersion": "trust.cert-manager.io/v1alpha1", "kind": "Bundle", "metadata": {"name": "rbac-bundle"},
              "spec": {"sources": [{"secret": {"name": "rbac-ca", "key": "ca.crt"}}],
                       "target": {"configMap": {"key": "ca.crt"}, "secret": {"key": "ca.crt"},
                                  "namespaceSelector": {"matchLabels": {"pt-rbac": "yes"}}}}})
        log = os.path.join(E.tmp, "rbac.log")
        with open(log, "w") as out:
            p = subprocess.Popen([TRUST, "--kubeconfig", cfg, "--secret-targets-enabled", "--metrics-port=0",
                                  "--readiness-probe-port=0", "--leader-election-lease-duration", "4s",
                                  "--leader-election-renew-deadline", "3s", "--leader-election-retry-period", "1s"],
                                 stdout=out, stderr=subprocess.STDOUT)
        E.procs.append(p)
        cm = wait_for("the ConfigMap target", lambda: k.get("/api/v1/namespaces/pt-rbac/configmaps/rbac-bundle"))
        sec = wait_for("the Secret target", lambda: k.get("/api/v1/namespaces/pt-rbac/secrets/rbac-bundle"))
        self.assertEqual(cm["data"]["ca.crt"], E.ca_pem.strip())
        self.assertEqual(base64.b64decode(sec["data"]["ca.crt"]).decode(), E.ca_pem.strip())
        b = wait_for("Synced", lambda: (lambda o: o if o.get("status", {}).get("conditions") else None)(
            k.get("/apis/trust.cert-manager.io/v1alpha1/bundles/rbac-bundle")))
        self.assertEqual(b["status"]["conditions"][0]["status"], "True")
        lease = k.get("/apis/coordination.k8s.io/v1/namespaces/cert-manager/leases/trust-manager-leader-election")
        self.assertTrue(lease and lease["spec"]["holderIdentity"])
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(timeout=30), 0)
        self.assertNotIn('"level":"error"', read(log))
        self.assertNotIn("forbidden", read(log).lower())


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
