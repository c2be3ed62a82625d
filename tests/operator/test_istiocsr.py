#!/usr/bin/python3
"""signet-operator's IstioCSR reconciler, as a program against a real
kube-apiserver and etcd (tests/kube/apiserver.sh), with the CRDs signet
ships (packaging/kubernetes/operator-crds.yaml).

No kube-controller-manager runs here: the test plays the deployment
controller (it writes the Deployment's status) and the kubelet (it writes
a pod's status), which is all the reconciler reads. What is shown:

- the seed's sample IstioCSR, pointed at a SignetIssuer, gets every object
  with the expected names, labels, ownerReferences, arguments, mounts and
  probes, a finalizer, and status fields; no PIN or path of the HSM Secret
  is ever an argument or an environment value;
- Ready follows the operand: Progressing until the Deployment is current
  and available, True then, Degraded with the container's own failure;
  every condition carries observedGeneration;
- drift on the Deployment (edited or deleted), a Service, a Role and a
  NetworkPolicy is repaired; a quiet cluster gets no write in 30 s; a
  restarted operator writes nothing; an API server restarted right after a
  spec change is ridden out and the change converges;
- what the CRD's CEL rules refuse is refused with Ready=False/InvalidSpec,
  immutable fields included; an ACME issuer is refused;
- a cert-manager issuer (RA mode): the istiod Certificate, the CA copy
  (the issuer's CA), --hsm=false, --root-ca-file and the --issuer-*
  arguments; an IstioCSR as the seed writes it, with a cert-manager
  issuer and no Secret signet-hsm, reaches Ready with no HSM volume;
- a second IstioCSR is refused while the first exists and accepted once it
  is deleted; its missing istio namespace is picked up when created;
- deleting an IstioCSR deletes every object made for it and nothing else;
- RA mode through a Vault-style issuer without istioCACertificate: the
  istiod Certificate first, Progressing (saying what it waits for) until
  istiod-tls holds ca.crt, then the CA copy and signetd;
- a refusal keeps the status fields and is one Warning Event per reason;
- the HSM Secret's hsm-egress (a network HSM's addresses) opens an egress
  NetworkPolicy beside deny-all; a host name is refused; removed, it goes;
- as a ServiceAccount with the operator's own ClusterRoles: a Deployment
  cache made stale (its watch forbidden, the API server restarted) is no
  Ready=True after a spec change, and a read forbidden mid-run (403) shows
  in the conditions at the current generation.

Usage: test_istiocsr.py SIGNET_OPERATOR SOURCE_DIR
"""
import base64
import json
import os
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

import yaml

OPERATOR = sys.argv[1] if len(sys.argv) > 1 else "signet-operator"
SOURCE_DIR = sys.argv[2] if len(sys.argv) > 2 else "."
KUBE_SCRIPTS = os.path.join(SOURCE_DIR, "tests", "kube")
sys.path.insert(0, KUBE_SCRIPTS)
import kube_rest  # noqa: E402

MANIFESTS = os.path.join(SOURCE_DIR, "packaging", "kubernetes")
NS = "istio-csr"
ISTIO = "istio-system"
APP = "cert-manager-istio-csr"
IMAGE = "registry.example/signet/signetd:test"
CR = f"/apis/operator.openshift.io/v1alpha1/namespaces/{NS}/istiocsrs/default"
FINALIZER = "istiocsr.openshift.operator.io/cert-manager-istio-csr-controller"


def wait_for(what, fn, timeout=60):
    return kube_rest.wait_for(what, fn, timeout)


def read(path):
    with open(path) as f:
        return f.read()


def openssl(*args):
    return subprocess.run(["openssl", *args], check=True, capture_output=True)


def b64(s):
    return base64.b64encode(s.encode()).decode()


def cond(obj, ctype):
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return c
    return None


# Minimal cert-manager CRDs: the reconciler reads Issuers and writes a
# Certificate; their schemas are cert-manager's business.
def loose_crd(plural, kind, scope, group="cert-manager.io"):
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": scope,
                     "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": kind + "List"},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {"type": "object",
                                                                  "x-kubernetes-preserve-unknown-fields": True}}}]}}


class Env:
    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="operator-istiocsr.", dir=os.environ.get("SIGNET_TEST_TMP"))
        self.api = kube_rest.ApiServer(self.tmp)
        self.own, self.api_dir, self.env = self.api.own, self.api.dir, self.api.env
        self.kube = kube_rest.Kube(self.env)
        k = self.kube
        k.apply_crds(os.path.join(MANIFESTS, "operator-crds.yaml"))
        k.apply_crds(os.path.join(MANIFESTS, "base", "crds.yaml"))
        for crd in (loose_crd("issuers", "Issuer", "Namespaced"), loose_crd("clusterissuers", "ClusterIssuer", "Cluster"),
                    loose_crd("certificates", "Certificate", "Namespaced")):
            code, out = k.req("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
            assert code in (201, 409), out
        wait_for("certificates served", lambda: k.get("/apis/cert-manager.io/v1/certificates") is not None)
        for ns in (NS, ISTIO, "other-csr"):
            self.namespace(ns)
        # signet's root (the HSM Secret's root.crt) and an issuer's CA.
        d = self.tmp
        for name in ("root", "issuer-ca"):
            openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                    f"{d}/{name}.key", "-out", f"{d}/{name}.pem", "-subj", f"/CN=operator test {name}", "-days", "2",
                    "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                f"{d}/leaf.key", "-out", f"{d}/leaf.pem", "-subj", "/CN=not a CA", "-days", "2",
                "-addext", "basicConstraints=critical,CA:FALSE")
        self.root = read(f"{d}/root.pem")
        self.issuer_ca = read(f"{d}/issuer-ca.pem")
        self.leaf = read(f"{d}/leaf.pem")
        self.hsm_secret(NS)
        self.procs = []

    def namespace(self, name):
        code, doc = self.kube.req("POST", "/api/v1/namespaces",
                                  {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        assert code in (201, 409), f"namespace {name}: {code} {doc.get('message')}"

    def hsm_secret(self, ns):
        # What the operator mounts at /etc/signet/hsm: the settings file
        # and what it names. The PIN is a file, never an argument.
        conf = ("hsm-token = pkcs11:token=signet\npin-file = /etc/signet/hsm/pin\n"
                "ca-cert = /etc/signet/hsm/ca.crt\nroot-cert = /etc/signet/hsm/root.crt\n")
        code, out = self.kube.req("POST", f"/api/v1/namespaces/{ns}/secrets",
                                  {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "signet-hsm"},
                                   "data": {"signetd.conf": b64(conf), "pin": b64("1234"),
                                            "root.crt": b64(self.root), "ca.crt": b64(self.root)}})
        assert code in (201, 409), out

    def run(self, name, *extra, kubeconfig=None):
        path = os.path.join(self.tmp, f"{name}.log")
        args = [OPERATOR, "--kubeconfig", kubeconfig or self.env["KUBECONFIG"], "--signetd-image", IMAGE,
                "--trustmanager=false",
                "--metrics-port=0", "--readiness-probe-port=0", "--log-format=json", "--leader-elect=false",
                "--log-level", os.environ.get("OPERATOR_LOG_LEVEL", "info"), *extra]
        with open(path, "w") as log:
            p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)

        def port():
            for line in read(path).splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("msg") == "metrics endpoint":
                    return rec.get("port")
            return None
        return p, wait_for(f"{name}'s metrics endpoint", port, timeout=60), path

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


def sample(ns=NS, issuer=("mesh", "SignetIssuer", "signet.dev"), istio_ns=ISTIO):
    """The seed's sample IstioCSR (reference §1.5), issuer swapped."""
    return {"apiVersion": "operator.openshift.io/v1alpha1", "kind": "IstioCSR",
            "metadata": {"name": "default", "namespace": ns},
            "spec": {"istioCSRConfig": {
                "certManager": {"issuerRef": {"name": issuer[0], "kind": issuer[1], "group": issuer[2]}},
                "istiodTLSConfig": {"trustDomain": "cluster.local"},
                "istio": {"namespace": istio_ns}}}}


STATUS_FIELDS = ("istioCSRGRPCEndpoint", "istioCSRImage", "serviceAccount", "clusterRole", "clusterRoleBinding")


class Watch:
    """Every version of the objects under a collection path that the API
    server sends from resourceVersion rv on, gathered on a thread for
    `seconds` (the server ends the watch then): a watch, not a poll, so a
    state that held for a moment is seen too. It is not closed early: an
    http.client response read on one thread cannot be closed from another
    without waiting for the read."""

    def __init__(self, kube, path, rv=None, seconds=90):
        if rv is None:  # from now: the list's own version (an object's may predate a restarted server's cache)
            rv = kube.ok("GET", path)["metadata"]["resourceVersion"]
        url = f"{kube.server}{path}?watch=1&resourceVersion={rv}&timeoutSeconds={seconds}"
        r = urllib.request.Request(url, headers={"Authorization": f"Bearer {kube.admin_token}"})
        self.resp = urllib.request.urlopen(r, context=kube.ctx, timeout=seconds + 30)
        self.objects = []
        self.errors = []  # ERROR events (a Status: the watch ended early, e.g. its version expired)
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        try:
            for line in self.resp:
                ev = json.loads(line)
                (self.errors if ev["type"] == "ERROR" else self.objects).append(ev["object"])
        except (OSError, ValueError):
            pass
        self.resp.close()


def ready_of(obj):
    c = cond(obj, "Ready") or {}
    return c.get("status"), c.get("reason"), c.get("observedGeneration")


def warnings(kube, ns, reason, part):
    """The Warning Events about the IstioCSR with reason whose message
    holds part."""
    return [e for e in kube.ok("GET", f"/api/v1/namespaces/{ns}/events")["items"]
            if e["involvedObject"].get("kind") == "IstioCSR" and e["type"] == "Warning" and e["reason"] == reason
            and part in e.get("message", "")]


def args_of(dep):
    return dep["spec"]["template"]["spec"]["containers"][0]["args"]


class CommandLine(unittest.TestCase):
    def test_help_flags_and_errors(self):
        out = subprocess.run([OPERATOR, "--help"], check=True, capture_output=True, text=True).stdout
        for flag in ("--kubeconfig", "--signetd-image", "--signet-trust-image", "--operand-version", "--istiocsr",
                     "--trustmanager", "--hsm-secret", "--trust-manager-namespace", "--default-ca-bundle",
                     "--leader-elect", "--leader-election-namespace", "--metrics-port", "--readiness-probe-port",
                     "--readiness-probe-path", "--workers", "--log-level", "--log-format", "--config"):
            self.assertIn(flag, out)
        r = subprocess.run([OPERATOR, "--no-such-flag"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("no-such-flag", r.stderr)
        r = subprocess.run([OPERATOR, "--log-level=11"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        # Images: the environment (the operator-bundle convention) or flags.
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELATED_IMAGE_")}
        r = subprocess.run([OPERATOR, "--kubeconfig", E.env["KUBECONFIG"], "--trustmanager=false"],
                           capture_output=True, text=True, env=env, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn("RELATED_IMAGE_SIGNETD", r.stderr)
        r = subprocess.run([OPERATOR, "--istiocsr=false", "--trustmanager=false"], capture_output=True, text=True,
                           env=env, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn("nothing to do", r.stderr)
        # The config file takes the flags' names; flags override it.
        conf = os.path.join(E.tmp, "operator.conf")
        with open(conf, "w") as f:
            f.write("hsm-secret = Not_A_Name\nlog-level = 2\n")
        r = subprocess.run([OPERATOR, "--config", conf, "--kubeconfig", E.env["KUBECONFIG"], "--signetd-image", "x",
                            "--trustmanager=false", "--leader-elect=false", "--metrics-port=0",
                            "--readiness-probe-port=0"], capture_output=True, text=True, env=env, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn('hsm-secret "Not_A_Name"', r.stderr)


def remove_cr(k):
    """Deletes IstioCSR default in NS if it is there, and waits for the
    operator to take its finalizer off."""
    if k.get(CR) is not None:
        k.req("DELETE", CR)
        wait_for("the IstioCSR gone", lambda: k.get(CR) is None, timeout=90)


class Operand:
    """What a scenario reads and plays: the IstioCSR, its Deployment, the
    deployment controller's status writes. self.k and self.port are the
    class's client and its operator's metrics port."""

    k = None
    port = None

    def get(self, path):
        return self.k.get(path)

    def cr(self, ns=NS):
        return self.get(f"/apis/operator.openshift.io/v1alpha1/namespaces/{ns}/istiocsrs/default")

    def post_cr(self, body):
        """A step that makes its own IstioCSR: should it fail half way, the
        cleanup takes the IstioCSR away (with the operator, which holds
        the finalizer), so the next step starts from none."""
        self.k.ok("POST", f"/apis/operator.openshift.io/v1alpha1/namespaces/{NS}/istiocsrs", body)
        self.addCleanup(remove_cr, self.k)

    def deployment(self, ns=NS):
        return self.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{APP}")

    def ready(self, status, reason=None, ns=NS, part=None):
        def check():
            o = self.cr(ns)
            c = cond(o, "Ready")
            if not c or c["status"] != status or (reason and c["reason"] != reason):
                return None
            if part and part not in c["message"]:
                return None
            if c.get("observedGeneration") != o["metadata"]["generation"]:
                return None
            return o
        return wait_for(f"{ns} Ready={status} {reason or ''} {part or ''}", check)

    def writes(self):
        return metric(self.port, "signet_operator_istiocsr_writes_total")

    def play_deployment_controller(self, ns=NS, available=1):
        """What kube-controller-manager would write once the pods run."""
        d = self.deployment(ns)
        status = {"observedGeneration": d["metadata"]["generation"], "replicas": 1, "updatedReplicas": 1,
                  "readyReplicas": available, "availableReplicas": available,
                  "conditions": [{"type": "Available", "status": "True" if available else "False",
                                  "reason": "MinimumReplicasAvailable", "message": "test"}]}
        self.k.ok("PATCH", f"/apis/apps/v1/namespaces/{ns}/deployments/{APP}/status", {"status": status},
                  "application/merge-patch+json")

    def quiet(self, seconds):
        # A write is counted after it is made (the caller may have seen it
        # already), and a reconcile in progress is not in the queue: the
        # count is taken once it held still for a look with the queue empty.
        looks = []

        def settled():
            n = self.writes()
            depth = metric(self.port, 'signet_controller_queue_depth{controller="istiocsr"}')
            still = depth == 0 and looks and looks[-1] == n
            looks.append(n if depth == 0 else None)
            return (n,) if still else None
        (before,) = wait_for("the operator's writes counted", settled)
        time.sleep(seconds)  # no write for that long: an absence, so a fixed time
        self.assertEqual(self.writes(), before, "writes on a quiet cluster")


class IstioCSR(Operand, unittest.TestCase):
    """One scenario, in order: each step starts from the last one's state."""

    @classmethod
    def setUpClass(cls):
        cls.k = E.kube
        cls.proc, cls.port, cls.log = E.run("operator")
        code, out = cls.k.req("POST", f"/apis/signet.dev/v1alpha1/namespaces/{ISTIO}/signetissuers",
                              {"apiVersion": "signet.dev/v1alpha1", "kind": "SignetIssuer",
                               "metadata": {"name": "mesh"}, "spec": {}})
        assert code in (201, 409), out

    @classmethod
    def tearDownClass(cls):
        # The next class runs an operator of its own: two would both
        # reconcile every IstioCSR. A step that failed may have left its
        # IstioCSR: this operator, which put the finalizer on, takes it off.
        remove_cr(cls.k)
        cls.proc.send_signal(signal.SIGTERM)
        cls.proc.wait(timeout=30)

    def test_1_sample_reconciles(self):
        k = self.k
        k.ok("POST", f"/apis/operator.openshift.io/v1alpha1/namespaces/{NS}/istiocsrs", sample())
        o = self.ready("False", "Progressing")
        self.assertIn(FINALIZER, o["metadata"]["finalizers"])
        st = o["status"]
        self.assertEqual(st["istioCSRGRPCEndpoint"], f"{APP}.{NS}.svc:443")
        self.assertEqual(st["istioCSRImage"], IMAGE)
        self.assertEqual(st["serviceAccount"], APP)
        self.assertEqual(st["clusterRole"], f"{APP}-{NS}")
        self.assertEqual(st["clusterRoleBinding"], f"{APP}-{NS}")
        self.assertEqual(cond(o, "Progressing")["status"], "True")
        self.assertEqual(cond(o, "Degraded")["status"], "False")
        # Every object, labelled and (in the namespace) owned.
        uid = o["metadata"]["uid"]
        paths = [f"/api/v1/namespaces/{NS}/serviceaccounts/{APP}", f"/api/v1/namespaces/{NS}/services/{APP}",
                 f"/api/v1/namespaces/{NS}/services/{APP}-metrics",
                 f"/apis/apps/v1/namespaces/{NS}/deployments/{APP}"]
        paths += [f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies/{n}" for n in
                  ("istio-csr-deny-all", "istio-csr-allow-egress-to-api-server", "istio-csr-allow-ingress-to-metrics",
                   "istio-csr-allow-ingress-to-grpc")]
        for p in paths:
            obj = wait_for(p, lambda: self.get(p))
            labels = obj["metadata"]["labels"]
            self.assertEqual(labels["app"], APP, p)
            self.assertEqual(labels["app.kubernetes.io/managed-by"], "cert-manager-operator", p)
            self.assertEqual(labels["app.kubernetes.io/part-of"], "cert-manager-operator", p)
            self.assertEqual(labels["app.kubernetes.io/name"], APP, p)
            self.assertEqual(labels["app.kubernetes.io/instance"], APP, p)
            self.assertEqual(labels["operator.signet.dev/owner"], NS, p)
            refs = obj["metadata"]["ownerReferences"]
            self.assertEqual((refs[0]["kind"], refs[0]["uid"], refs[0]["controller"]), ("IstioCSR", uid, True), p)
            mf = [m["manager"] for m in obj["metadata"].get("managedFields", [])]
            self.assertIn("signet-operator", mf, p)
        for p in (f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{APP}-{NS}",
                  f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{APP}-{NS}",
                  f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ISTIO}/roles/{APP}",
                  f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ISTIO}/rolebindings/{APP}"):
            obj = self.get(p)
            self.assertIsNotNone(obj, p)
            self.assertNotIn("ownerReferences", obj["metadata"], p)  # cross-namespace: no owner, a label
            self.assertEqual(obj["metadata"]["labels"]["operator.signet.dev/owner"], NS)
        svc = self.get(f"/api/v1/namespaces/{NS}/services/{APP}")
        self.assertEqual([(p["name"], p["port"], p["targetPort"]) for p in svc["spec"]["ports"]], [("web", 443, 6443)])
        self.assertEqual(svc["spec"]["selector"], {"app": APP})
        role = self.get(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ISTIO}/roles/{APP}")
        resources = sorted(r for rule in role["rules"] for r in rule["resources"])
        self.assertEqual(resources, ["events", "leases", "secrets"])  # signetd issues istiod-tls itself
        # No Certificate: signet signs, signetd issues istiod's certificate.
        self.assertIsNone(self.get(f"/apis/cert-manager.io/v1/namespaces/{ISTIO}/certificates/istiod"))

        d = self.deployment()
        pod = d["spec"]["template"]["spec"]
        c = pod["containers"][0]
        self.assertEqual(c["image"], IMAGE)
        self.assertEqual(args_of(d), [
            "--config=/etc/signet/hsm/signetd.conf", "--log-level=1", "--log-format=text", "--metrics-port=9402",
            "--readiness-probe-port=6060", "--readiness-probe-path=/readyz", "--serving-address=0.0.0.0:6443",
            f"--serving-certificate-dns-names={APP}.{NS}.svc", "--serving-certificate-duration=1h",
            "--trust-domain=cluster.local", "--cluster-id=Kubernetes", "--max-client-certificate-duration=1h",
            f"--leader-election-namespace={ISTIO}", "--enable-client-cert-authenticator=false",
            "--cert-manager-issuer=false", "--kube-csr-signer=false", "--istiod-cert-enabled=true",
            f"--istiod-cert-namespace={ISTIO}", "--istiod-cert-duration=1h", "--istiod-cert-renew-before=30m",
            "--istiod-cert-key-algorithm=RSA", "--istiod-cert-key-size=2048", "--istiod-cert-istio-revisions=default"])
        self.assertNotIn("env", c)  # nothing secret in the environment
        self.assertNotIn("1234", json.dumps(d))
        self.assertEqual(c["readinessProbe"]["httpGet"]["path"], "/readyz")
        self.assertEqual(c["livenessProbe"]["httpGet"]["path"], "/healthz")
        self.assertEqual({m["mountPath"] for m in c["volumeMounts"]}, {"/etc/signet/hsm", "/tmp"})
        vols = {v["name"]: v for v in pod["volumes"]}
        self.assertEqual(vols["hsm"]["secret"]["secretName"], "signet-hsm")
        self.assertTrue(c["securityContext"]["readOnlyRootFilesystem"])
        self.assertEqual(c["securityContext"]["capabilities"]["drop"], ["ALL"])
        self.assertEqual(pod["serviceAccountName"], APP)
        self.assertIn("operator.signet.dev/hsm-secret-version", d["spec"]["template"]["metadata"]["annotations"])

    def test_2_ready_follows_the_operand(self):
        self.play_deployment_controller(available=0)
        self.ready("False", "Progressing")
        self.play_deployment_controller(available=1)
        o = self.ready("True", "Ready")
        self.assertEqual(cond(o, "Degraded")["status"], "False")
        self.assertEqual(cond(o, "Progressing")["status"], "False")
        # A crashing container: Degraded with its own words.
        d = self.deployment()
        labels = d["spec"]["template"]["metadata"]["labels"]
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{APP}-crash", "labels": labels},
               "spec": {"containers": [{"name": "signetd", "image": IMAGE}]}}
        self.k.ok("POST", f"/api/v1/namespaces/{NS}/pods", pod)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now}],
                  "containerStatuses": [{"name": "signetd", "image": IMAGE, "imageID": "", "ready": False,
                                         "restartCount": 3,
                                         "state": {"waiting": {"reason": "CrashLoopBackOff",
                                                               "message": "back-off 40s restarting failed container"}},
                                         "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                                                      "message": "signetd: cannot open the HSM"}}}]}
        self.k.ok("PATCH", f"/api/v1/namespaces/{NS}/pods/{APP}-crash/status", {"status": status},
                  "application/merge-patch+json")
        o = self.ready("False", "OperandFailed", part="cannot open the HSM")
        dg = cond(o, "Degraded")
        self.assertEqual((dg["status"], dg["reason"]), ("True", "OperandFailed"))
        self.assertIn("CrashLoopBackOff", dg["message"])
        self.k.ok("DELETE", f"/api/v1/namespaces/{NS}/pods/{APP}-crash")
        self.ready("True", "Ready")

    def test_3_drift_is_repaired(self):
        k = self.k
        dep = f"/apis/apps/v1/namespaces/{NS}/deployments/{APP}"
        want = args_of(self.deployment())
        k.ok("PATCH", dep, {"spec": {"template": {"spec": {"containers": [
            {"name": "signetd", "args": ["--log-level=debug"]}]}}}}, "application/strategic-merge-patch+json")
        wait_for("the Deployment's args back", lambda: args_of(self.deployment()) == want)
        svc = f"/api/v1/namespaces/{NS}/services/{APP}"
        k.ok("DELETE", svc)
        wait_for("the Service back", lambda: self.get(svc))
        role = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ISTIO}/roles/{APP}"
        rules = self.get(role)["rules"]
        k.ok("PATCH", role, {"rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]},
             "application/merge-patch+json")
        wait_for("the Role's rules back", lambda: self.get(role)["rules"] == rules)
        dep_uid = self.deployment()["metadata"]["uid"]
        k.ok("DELETE", dep)
        wait_for("the Deployment back", lambda: (lambda d: d and d["metadata"]["uid"] != dep_uid)(self.deployment()))
        self.assertEqual(args_of(self.deployment()), want)
        np = f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies/istio-csr-deny-all"
        k.ok("DELETE", np)
        wait_for("the NetworkPolicy back", lambda: self.get(np))
        # A label another tool adds is left alone; ours come back.
        k.ok("PATCH", svc, {"metadata": {"labels": {"team": "mesh", "app.kubernetes.io/managed-by": "someone"}}},
             "application/merge-patch+json")
        wait_for("our label back", lambda: self.get(svc)["metadata"]["labels"]["app.kubernetes.io/managed-by"]
                 == "cert-manager-operator")
        self.assertEqual(self.get(svc)["metadata"]["labels"]["team"], "mesh")
        events = k.ok("GET", f"/api/v1/namespaces/{NS}/events")["items"]
        reasons = {e["reason"] for e in events if e["involvedObject"].get("kind") == "IstioCSR"}
        self.assertTrue({"Created", "Applied"} <= reasons, reasons)
        self.play_deployment_controller()
        self.ready("True", "Ready")

    def test_4_quiet_cluster_and_restart_write_nothing(self):
        self.ready("True", "Ready")
        # The last repairs' echoes (watch events of the operator's own
        # writes) reconciled: nothing left in the controller's queue.
        wait_for("the istiocsr controller's queue empty", lambda: metric(
            self.port, 'signet_controller_queue_depth{controller="istiocsr"}') == 0)
        self.quiet(30)
        # A restarted operator finds everything as it wants it.
        self.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.proc.wait(timeout=30), 0)
        type(self).proc, type(self).port, type(self).log = E.run("operator-2")
        wait_for("the restarted operator's first passes",
                 lambda: (metric(self.port, 'signet_controller_reconciles_total{controller="istiocsr",result="success"}')
                          or 0) >= 1)
        time.sleep(3)  # and nothing after them: an absence, so a fixed quiet time
        self.assertEqual(self.writes(), 0)

    def test_5_invalid_specs(self):
        k = self.k
        tls = "application/merge-patch+json"
        k.ok("PATCH", CR, {"spec": {"istioCSRConfig": {"istiodTLSConfig": {"privateKeyAlgorithm": "ECDSA"}}}}, tls)
        self.ready("False", "InvalidSpec", part="privateKeySize must match with configured privateKeyAlgorithm")
        k.ok("PATCH", CR, {"spec": {"istioCSRConfig": {"istiodTLSConfig": {"privateKeySize": 256}}}}, tls)
        self.ready("False", "InvalidSpec", part="istiodTLSConfig.privateKeyAlgorithm is immutable once set")
        k.ok("PATCH", CR, {"spec": {"istioCSRConfig": {"istiodTLSConfig": {"privateKeyAlgorithm": "RSA",
                                                                           "privateKeySize": 2048}}}}, tls)
        self.ready("True", "Ready")
        k.ok("PATCH", CR, {"spec": {"istioCSRConfig": {"istio": {"namespace": "elsewhere"}}}},
             "application/merge-patch+json")
        self.ready("False", "InvalidSpec", part="istio.namespace is immutable")
        k.ok("PATCH", CR, {"spec": {"istioCSRConfig": {"istio": {"namespace": ISTIO}}}},
             "application/merge-patch+json")
        self.ready("True", "Ready")
        # The design's rules: a port unset at creation may be written once
        # (`oldSelf == 0 || self == oldSelf`), then it is fixed; the
        # revisions may change (a canary is added).
        k.ok("PATCH", CR, {"spec": {"istioCSRConfig": {"server": {"port": 8443},
                                                       "istio": {"revisions": ["default", "canary"]}}}}, tls)
        wait_for("the canary revision", lambda: "--istiod-cert-istio-revisions=default,canary"
                 in args_of(self.deployment()))
        wait_for("port 8443", lambda: [p["port"] for p in
                                       self.get(f"/api/v1/namespaces/{NS}/services/{APP}")["spec"]["ports"]] == [8443])
        self.ready("False", "Progressing")
        self.assertEqual(self.cr()["status"]["istioCSRGRPCEndpoint"], f"{APP}.{NS}.svc:8443")
        k.ok("PATCH", CR, {"spec": {"istioCSRConfig": {"server": {"port": 9443}}}}, tls)
        self.ready("False", "InvalidSpec", part="server.port is immutable once set")
        k.ok("PATCH", CR, {"spec": {"istioCSRConfig": {"server": {"port": 8443}}}}, tls)
        self.ready("False", "Progressing")
        self.play_deployment_controller()
        self.ready("True", "Ready")
        # A spec change that is allowed rolls the Deployment; every field
        # lands where it belongs.
        spec = {"logLevel": 3, "logFormat": "json", "server": {"clusterID": "east"},
                "istioDataPlaneNamespaceSelector": "istio-injection=enabled",
                "istiodTLSConfig": {"certificateDNSNames": ["istiod.example", "istiod.mesh.example"],
                                    "certificateDuration": "2h", "certificateRenewBefore": "40m",
                                    "maxCertificateDuration": "90m"},
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
                "nodeSelector": {"kubernetes.io/os": "linux"},
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "mesh", "effect": "NoSchedule"}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}}
        k.ok("PATCH", CR, {"spec": {"istioCSRConfig": spec, "controllerConfig": {"labels": {"team": "mesh"}}}},
             "application/merge-patch+json")
        d = wait_for("new args", lambda: (lambda d: d if "--log-level=3" in args_of(d) else None)(self.deployment()))
        a = args_of(d)
        for want in ("--cluster-id=east", "--log-format=json", "--configmap-namespace-selector=istio-injection=enabled",
                     "--istiod-cert-additional-dns-names=istiod.example,istiod.mesh.example",
                     "--istiod-cert-duration=2h", "--serving-certificate-duration=2h",
                     "--istiod-cert-renew-before=40m", "--max-client-certificate-duration=90m"):
            self.assertIn(want, a)
        pod = d["spec"]["template"]["spec"]
        self.assertEqual(pod["containers"][0]["resources"], spec["resources"])
        self.assertEqual(pod["nodeSelector"], spec["nodeSelector"])
        self.assertEqual(pod["tolerations"], spec["tolerations"])
        self.assertEqual(pod["affinity"], spec["affinity"])
        self.assertEqual(d["metadata"]["labels"]["team"], "mesh")
        self.assertEqual(self.get(f"/api/v1/namespaces/{NS}/services/{APP}")["metadata"]["labels"]["team"], "mesh")
        self.ready("False", "Progressing")  # generation moved past the status the test wrote
        self.play_deployment_controller()
        self.ready("True", "Ready")

    def test_5b_api_server_restart_mid_reconcile(self):
        if not E.own:
            self.skipTest("a shared API server is not restarted")
        k = self.k
        self.ready("True", "Ready")
        k.ok("PATCH", CR, {"spec": {"istioCSRConfig": {"logLevel": 4}}}, "application/merge-patch+json")
        subprocess.run([os.path.join(KUBE_SCRIPTS, "apiserver.sh"), "restart-apiserver", E.api_dir], check=True,
                       stdout=subprocess.DEVNULL)
        wait_for("the new args after the restart",
                 lambda: (lambda d: d and "--log-level=4" in args_of(d))(self.deployment()), timeout=120)
        self.play_deployment_controller()
        self.ready("True", "Ready")
        self.assertEqual(self.proc.poll(), None, "the operator survived the API server's restart")

    def test_6_second_instance_and_missing_namespace(self):
        k = self.k
        E.hsm_secret("other-csr")
        k.ok("POST", "/apis/operator.openshift.io/v1alpha1/namespaces/other-csr/istiocsrs",
             sample(ns="other-csr", istio_ns="other-istio"))
        o = self.ready("False", "MultipleInstances", ns="other-csr")
        self.assertIn(f"{NS}/default is older", cond(o, "Ready")["message"])
        self.assertIsNone(self.get(f"/apis/apps/v1/namespaces/other-csr/deployments/{APP}"))
        # The first goes: everything made for it goes, and nothing else.
        k.ok("DELETE", CR)
        wait_for("the first IstioCSR gone", lambda: self.cr() is None)
        for p in (f"/apis/apps/v1/namespaces/{NS}/deployments/{APP}", f"/api/v1/namespaces/{NS}/services/{APP}",
                  f"/api/v1/namespaces/{NS}/serviceaccounts/{APP}",
                  f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{APP}-{NS}",
                  f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ISTIO}/roles/{APP}",
                  f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies/istio-csr-deny-all"):
            self.assertIsNone(self.get(p), p)
        self.assertIsNotNone(self.get(f"/api/v1/namespaces/{NS}/secrets/signet-hsm"))
        self.assertIsNotNone(self.get(f"/apis/signet.dev/v1alpha1/namespaces/{ISTIO}/signetissuers/mesh"))
        # The second is accepted now, but its istio namespace is missing...
        self.ready("False", "Failed", ns="other-csr", part='istio namespace "other-istio" does not exist')
        # ...until it appears (namespaces are watched; no spec edit needed).
        E.namespace("other-istio")
        k.ok("POST", "/apis/signet.dev/v1alpha1/namespaces/other-istio/signetissuers",
             {"apiVersion": "signet.dev/v1alpha1", "kind": "SignetIssuer", "metadata": {"name": "mesh"}, "spec": {}})
        self.ready("False", "Progressing", ns="other-csr")
        k.ok("DELETE", "/apis/operator.openshift.io/v1alpha1/namespaces/other-csr/istiocsrs/default")
        wait_for("the second IstioCSR gone",
                 lambda: self.get("/apis/operator.openshift.io/v1alpha1/namespaces/other-csr/istiocsrs/default") is None)

    def test_7_cert_manager_issuer(self):
        k = self.k
        # An ACME issuer is refused.
        k.ok("POST", f"/apis/cert-manager.io/v1/namespaces/{ISTIO}/issuers",
             {"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": "acme"},
              "spec": {"acme": {"server": "https://acme.invalid/directory"}}})
        k.ok("POST", f"/apis/operator.openshift.io/v1alpha1/namespaces/{NS}/istiocsrs",
             sample(issuer=("acme", "Issuer", "cert-manager.io")))
        self.ready("False", "InvalidSpec", part="unsupported ACME issuer")
        k.ok("DELETE", CR)
        wait_for("gone", lambda: self.cr() is None)
        # A CA issuer: its Secret's ca.crt becomes the roots (signetd holds
        # no CA of its own in RA mode: the issuer signs its serving
        # certificate too).
        k.ok("POST", f"/api/v1/namespaces/{ISTIO}/secrets",
             {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "mesh-ca"},
              "data": {"ca.crt": b64(E.issuer_ca), "tls.crt": b64(E.issuer_ca)}})
        k.ok("POST", f"/apis/cert-manager.io/v1/namespaces/{ISTIO}/issuers",
             {"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": "istio-csr-issuer"},
              "spec": {"ca": {"secretName": "mesh-ca"}}})
        body = sample(issuer=("istio-csr-issuer", "Issuer", "cert-manager.io"))
        body["spec"]["istioCSRConfig"]["istiodTLSConfig"]["certificateDNSNames"] = ["istiod.example"]
        body["spec"]["istioCSRConfig"]["istio"]["revisions"] = ["default", "canary"]
        k.ok("POST", f"/apis/operator.openshift.io/v1alpha1/namespaces/{NS}/istiocsrs", body)
        self.ready("False", "Progressing")
        cert = self.get(f"/apis/cert-manager.io/v1/namespaces/{ISTIO}/certificates/istiod")
        self.assertIsNotNone(cert)
        spec = cert["spec"]
        self.assertEqual(spec["secretName"], "istiod-tls")
        self.assertEqual(spec["commonName"], f"istiod.{ISTIO}.svc")
        self.assertEqual(spec["dnsNames"], ["istiod.example", f"istiod.{ISTIO}.svc", f"istiod-canary.{ISTIO}.svc"])
        self.assertEqual(spec["uris"], [f"spiffe://cluster.local/ns/{ISTIO}/sa/istiod-service-account"])
        self.assertEqual(spec["issuerRef"], {"name": "istio-csr-issuer", "kind": "Issuer", "group": "cert-manager.io"})
        self.assertEqual((spec["privateKey"]["algorithm"], spec["privateKey"]["size"]), ("RSA", 2048))
        cm = self.get(f"/api/v1/namespaces/{NS}/configmaps/cert-manager-istio-csr-issuer-ca-copy")
        self.assertEqual(cm["data"]["ca.crt"].strip(), E.issuer_ca.strip())
        a = args_of(self.deployment())
        self.assertEqual(a[0], "--hsm=false")
        self.assertFalse([x for x in a if x.startswith("--config")], a)
        for want in ("--issuer-name=istio-csr-issuer", "--issuer-kind=Issuer", "--issuer-group=cert-manager.io",
                     f"--certificate-namespace={ISTIO}", "--istiod-cert-enabled=false",
                     "--root-ca-file=/var/run/configmaps/istio-csr/ca.crt"):
            self.assertIn(want, a)
        role = self.get(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ISTIO}/roles/{APP}")
        resources = sorted(r for rule in role["rules"] for r in rule["resources"])
        self.assertEqual(resources, ["certificaterequests", "events", "leases"])
        # A user CA ConfigMap whose first certificate is no CA is refused.
        k.ok("POST", f"/api/v1/namespaces/{NS}/configmaps",
             {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "user-ca"}, "data": {"ca.pem": E.leaf}})
        k.ok("PATCH", CR, {"spec": {"istioCSRConfig": {"certManager": {
            "istioCACertificate": {"name": "user-ca", "key": "ca.pem"}}}}}, "application/merge-patch+json")
        self.ready("False", "InvalidSpec", part="not a CA certificate")
        k.ok("PATCH", f"/api/v1/namespaces/{NS}/configmaps/user-ca", {"data": {"ca.pem": E.issuer_ca}},
             "application/merge-patch+json")
        self.ready("False", "Progressing")
        k.ok("DELETE", CR)
        wait_for("gone", lambda: self.cr() is None)
        self.assertIsNone(self.get(f"/apis/cert-manager.io/v1/namespaces/{ISTIO}/certificates/istiod"))
        self.assertIsNone(self.get(f"/api/v1/namespaces/{NS}/configmaps/cert-manager-istio-csr-issuer-ca-copy"))
        self.assertIsNotNone(self.get(f"/api/v1/namespaces/{NS}/configmaps/user-ca"))
        self.assertIsNotNone(self.get(f"/api/v1/namespaces/{ISTIO}/secrets/mesh-ca"))

    def test_8_vault_issuer_ca_from_istiod_tls(self):
        """RA mode through an issuer that is no CA issuer (Vault-style) and
        no istioCACertificate: the CA is istiod-tls's ca.crt, which exists
        only once the istiod Certificate is applied and issued. The
        Certificate comes first, the wait is Progressing and says what it
        waits for, and signetd starts once the CA is known."""
        k = self.k
        k.ok("POST", f"/apis/cert-manager.io/v1/namespaces/{ISTIO}/issuers",
             {"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": "vault"},
              "spec": {"vault": {"server": "https://vault.invalid:8200", "path": "pki_int/sign/istio-ca",
                                 "auth": {"kubernetes": {"role": "istio-csr", "mountPath": "/v1/auth/kubernetes",
                                                         "secretRef": {"name": "vault-token", "key": "token"}}}}}})
        k.ok("POST", f"/apis/operator.openshift.io/v1alpha1/namespaces/{NS}/istiocsrs",
             sample(issuer=("vault", "Issuer", "cert-manager.io")))
        o = self.ready("False", "Progressing", part=f"Secret {ISTIO}/istiod-tls")
        self.assertIn(f"waiting for cert-manager to issue Certificate {ISTIO}/istiod", cond(o, "Ready")["message"])
        self.assertEqual(cond(o, "Progressing")["status"], "True")
        self.assertEqual(cond(o, "Degraded")["status"], "False")
        self.assertEqual(o["status"]["istioCSRGRPCEndpoint"], f"{APP}.{NS}.svc:443")
        cert = self.get(f"/apis/cert-manager.io/v1/namespaces/{ISTIO}/certificates/istiod")
        self.assertIsNotNone(cert, "the istiod Certificate is applied before its Secret is looked for")
        self.assertEqual(cert["spec"]["issuerRef"], {"name": "vault", "kind": "Issuer", "group": "cert-manager.io"})
        self.assertEqual(cert["spec"]["secretName"], "istiod-tls")
        # signetd does not start on a CA it does not know yet.
        self.assertIsNone(self.deployment())
        self.assertIsNone(self.get(f"/api/v1/namespaces/{NS}/configmaps/cert-manager-istio-csr-issuer-ca-copy"))
        # cert-manager issues: the Secret as it writes it, the CA in ca.crt.
        k.ok("POST", f"/api/v1/namespaces/{ISTIO}/secrets",
             {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": {"name": "istiod-tls"},
              "data": {"ca.crt": b64(E.issuer_ca), "tls.crt": b64(E.leaf),
                       "tls.key": b64(read(os.path.join(E.tmp, "leaf.key")))}})
        cm = wait_for("the CA copy", lambda: self.get(
            f"/api/v1/namespaces/{NS}/configmaps/cert-manager-istio-csr-issuer-ca-copy"))
        self.assertEqual(cm["data"]["ca.crt"].strip(), E.issuer_ca.strip())
        d = wait_for("the Deployment", self.deployment)
        for want in ("--issuer-name=vault", "--issuer-kind=Issuer", "--issuer-group=cert-manager.io",
                     "--istiod-cert-enabled=false", "--root-ca-file=/var/run/configmaps/istio-csr/ca.crt"):
            self.assertIn(want, args_of(d))
        self.ready("False", "Progressing", part="generation")
        self.play_deployment_controller()
        self.ready("True", "Ready")

    def test_9b_failures_keep_status_fields_and_warn_once(self):
        """A refused pass keeps the status fields of what is in effect;
        a second refusal of the same reason (another message) is no second
        Warning Event."""
        k = self.k
        merge = "application/merge-patch+json"
        o = self.ready("True", "Ready")
        fields = {f: o["status"][f] for f in STATUS_FIELDS}
        k.ok("PATCH", CR, {"spec": {"istioCSRConfig": {"istiodTLSConfig": {"privateKeySize": 256}}}}, merge)
        o = self.ready("False", "InvalidSpec", part="(RSA 256)")
        self.assertEqual({f: o["status"].get(f) for f in STATUS_FIELDS}, fields)
        wait_for("the Warning Event", lambda: warnings(k, NS, "InvalidSpec", "(RSA 256)"))
        k.ok("PATCH", CR, {"spec": {"istioCSRConfig": {"istiodTLSConfig": {"privateKeySize": 384}}}}, merge)
        o = self.ready("False", "InvalidSpec", part="(RSA 384)")
        self.assertEqual({f: o["status"].get(f) for f in STATUS_FIELDS}, fields)
        # The next pass (one worker: after the last one's Event, if any).
        k.ok("PATCH", CR, {"spec": {"istioCSRConfig": {"istiodTLSConfig": {"privateKeySize": 2048}}}}, merge)
        self.ready("True", "Ready")
        self.assertEqual(warnings(k, NS, "InvalidSpec", "(RSA 384)"), [])
        k.ok("DELETE", CR)
        wait_for("gone", lambda: self.cr() is None)
        self.assertIsNone(self.get(f"/apis/cert-manager.io/v1/namespaces/{ISTIO}/certificates/istiod"))
        k.ok("DELETE", f"/api/v1/namespaces/{ISTIO}/secrets/istiod-tls")  # cert-manager's, not ours

    def test_9c_openshift_operators_deployment_is_taken_over(self):
        """A Deployment OpenShift's cert-manager-operator left (the seed's,
        its own field manager): signetd replaces istio-csr in the pod
        template; no cert-manager-istio-csr container or volume of its
        stays beside signetd."""
        k = self.k
        labels = {"app": APP, "app.kubernetes.io/name": APP, "app.kubernetes.io/instance": APP,
                  "app.kubernetes.io/version": "v0.14.2", "app.kubernetes.io/managed-by": "cert-manager-operator",
                  "app.kubernetes.io/part-of": "cert-manager-operator"}
        k.ok("POST", f"/apis/apps/v1/namespaces/{NS}/deployments?fieldManager=cert-manager-operator",
             {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": APP, "labels": labels},
              "spec": {"replicas": 1, "selector": {"matchLabels": {"app": APP}},
                       "template": {"metadata": {"labels": labels}, "spec": {
                           "serviceAccountName": APP,
                           "containers": [{"name": APP, "image": "quay.io/jetstack/cert-manager-istio-csr:v0.14.2",
                                           "args": ["--log-level=1", "--issuer-name=istio-ca"],
                                           "volumeMounts": [{"name": "root-ca", "mountPath": "/var/run/root"}]}],
                           "volumes": [{"name": "root-ca", "configMap": {"name": "istio-ca-root"}}]}}}})
        self.post_cr(sample())

        # Two writes: the merge patch that replaces the lists, then the
        # apply that takes the fields (our labels with them).
        def taken_over():
            d = self.deployment()
            pod = d["spec"]["template"]["spec"]
            ours = NS == d["metadata"]["labels"].get("operator.signet.dev/owner")
            return d if ours and [c["name"] for c in pod["containers"]] == ["signetd"] else None
        d = wait_for("only signetd in the pod template, applied", taken_over)
        pod = d["spec"]["template"]["spec"]
        self.assertEqual(sorted(v["name"] for v in pod["volumes"]), ["hsm", "tmp"])
        self.play_deployment_controller()
        self.ready("True", "Ready")
        k.ok("DELETE", CR)
        wait_for("gone", lambda: self.cr() is None)
        self.assertIsNone(self.deployment())

    def test_9d_service_monitor_when_its_crd_exists(self):
        """The design's ServiceMonitor for the metrics Service, once the
        Prometheus operator's CRD is served (every step before ran without
        it, and made none); it goes with the IstioCSR."""
        k = self.k
        path = f"/apis/monitoring.coreos.com/v1/namespaces/{NS}/servicemonitors/{APP}"
        code, out = k.req("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                          loose_crd("servicemonitors", "ServiceMonitor", "Namespaced", "monitoring.coreos.com"))
        assert code in (201, 409), out
        wait_for("servicemonitors served",
                 lambda: k.get(f"/apis/monitoring.coreos.com/v1/namespaces/{NS}/servicemonitors") is not None)
        self.post_cr(sample())
        sm = wait_for("the ServiceMonitor", lambda: self.get(path))
        self.assertEqual(sm["spec"]["endpoints"], [{"port": "metrics", "path": "/metrics", "scheme": "http",
                                                    "interval": "30s"}])
        self.assertEqual(sm["spec"]["selector"], {"matchLabels": {"app": APP}})
        self.assertEqual(sm["spec"]["namespaceSelector"], {"matchNames": [NS]})
        self.assertEqual(sm["metadata"]["labels"]["operator.signet.dev/owner"], NS)
        self.assertEqual(sm["metadata"]["ownerReferences"][0]["kind"], "IstioCSR")
        metrics = self.get(f"/api/v1/namespaces/{NS}/services/{APP}-metrics")
        self.assertIn("metrics", [p["name"] for p in metrics["spec"]["ports"]])
        # Drift is put back (read live at every pass; a spec edit brings one).
        k.ok("PATCH", path, {"spec": {"endpoints": [{"port": "other"}]}}, "application/merge-patch+json")
        k.ok("PATCH", CR, {"spec": {"istioCSRConfig": {"logLevel": 2}}}, "application/merge-patch+json")
        wait_for("the ServiceMonitor back", lambda: self.get(path)["spec"]["endpoints"][0]["port"] == "metrics")
        k.ok("DELETE", CR)
        wait_for("gone", lambda: self.cr() is None)
        self.assertIsNone(self.get(path))

    def test_9f_ra_mode_needs_no_hsm_secret(self):
        """An IstioCSR as the seed writes it, pointing at a cert-manager
        issuer, in a namespace without Secret signet-hsm: signetd runs as a
        pure RA (--hsm=false), with no HSM volume, argument or annotation,
        and the IstioCSR reaches Ready; a SignetIssuer (signet signs with
        the HSM) in the same place still says the Secret is missing."""
        k = self.k
        k.ok("DELETE", f"/api/v1/namespaces/{NS}/secrets/signet-hsm")
        self.addCleanup(E.hsm_secret, NS)
        code, out = k.req("POST", f"/api/v1/namespaces/{ISTIO}/secrets",
                          {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "istio-ca"},
                           "data": {"ca.crt": b64(E.issuer_ca), "tls.crt": b64(E.issuer_ca)}})
        assert code in (201, 409), out
        code, out = k.req("POST", f"/apis/cert-manager.io/v1/namespaces/{ISTIO}/issuers",
                          {"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": "istio-ca"},
                           "spec": {"ca": {"secretName": "istio-ca"}}})
        assert code in (201, 409), out
        self.post_cr(sample(issuer=("istio-ca", "Issuer", "cert-manager.io")))
        d = wait_for("the Deployment", self.deployment)
        a = args_of(d)
        self.assertEqual(a[0], "--hsm=false")
        self.assertFalse([x for x in a if "/etc/signet/hsm" in x], a)
        for want in ("--issuer-name=istio-ca", "--issuer-kind=Issuer", "--issuer-group=cert-manager.io",
                     "--root-ca-file=/var/run/configmaps/istio-csr/ca.crt", "--istiod-cert-enabled=false",
                     "--cert-manager-issuer=false", "--kube-csr-signer=false",
                     f"--serving-certificate-dns-names={APP}.{NS}.svc"):
            self.assertIn(want, a)
        pod = d["spec"]["template"]["spec"]
        self.assertEqual(sorted(v["name"] for v in pod["volumes"]), ["root-ca", "tmp"])
        self.assertEqual(sorted(m["mountPath"] for m in pod["containers"][0]["volumeMounts"]),
                         ["/tmp", "/var/run/configmaps/istio-csr"])
        self.assertNotIn("annotations", d["spec"]["template"]["metadata"])
        cm = self.get(f"/api/v1/namespaces/{NS}/configmaps/cert-manager-istio-csr-issuer-ca-copy")
        self.assertEqual(cm["data"]["ca.crt"].strip(), E.issuer_ca.strip())
        self.play_deployment_controller()
        o = self.ready("True", "Ready")
        self.assertNotIn("signet-hsm", json.dumps(o["status"]))
        k.ok("DELETE", CR)
        wait_for("gone", lambda: self.cr() is None)
        # signet mode still needs it, and says so
        self.post_cr(sample())
        self.ready("False", "Failed", part=f"Secret {NS}/signet-hsm")
        self.assertIsNone(self.deployment())
        k.ok("DELETE", CR)
        wait_for("gone", lambda: self.cr() is None)

    def test_9g_egress_to_a_network_hsm(self):
        """The HSM Secret's hsm-egress names a network HSM's addresses: the
        deny-all NetworkPolicy gets a companion letting signetd's pods reach
        them (TCP, each entry its own rule); a value that is no address, or
        holds a NUL byte, is refused saying so; without the key the policy
        goes again."""
        k = self.k
        merge = "application/merge-patch+json"
        secret = f"/api/v1/namespaces/{NS}/secrets/signet-hsm"
        path = f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies/istio-csr-allow-egress-to-hsm"
        self.addCleanup(k.req, "PATCH", secret, {"data": {"hsm-egress": None}}, merge)
        self.post_cr(sample())
        wait_for("the Deployment", self.deployment)
        self.assertIsNone(self.get(path))
        k.ok("PATCH", secret, {"data": {"hsm-egress": b64("10.0.8.20:1792, [fd00::20]:1792,192.168.4.0/24:2223")}},
             merge)
        np = wait_for("the HSM egress policy", lambda: self.get(path))
        self.assertEqual(np["spec"]["podSelector"], {"matchLabels": {"app": APP}})
        self.assertEqual(np["spec"]["policyTypes"], ["Egress"])
        self.assertEqual([(r["to"][0]["ipBlock"]["cidr"], r["ports"][0]["port"], r["ports"][0]["protocol"])
                          for r in np["spec"]["egress"]],
                         [("10.0.8.20/32", 1792, "TCP"), ("fd00::20/128", 1792, "TCP"),
                          ("192.168.4.0/24", 2223, "TCP")])
        self.assertEqual(np["metadata"]["labels"]["operator.signet.dev/owner"], NS)
        self.assertEqual(np["metadata"]["ownerReferences"][0]["kind"], "IstioCSR")
        k.ok("PATCH", secret, {"data": {"hsm-egress": b64("hsm.example.com:1792")}}, merge)
        self.ready("False", "Failed", part='key hsm-egress: "hsm.example.com:1792" is not an address and port')
        # a port with a sign, as strtol would take it
        k.ok("PATCH", secret, {"data": {"hsm-egress": b64("10.0.8.20:+1792")}}, merge)
        self.ready("False", "Failed", part='key hsm-egress: "10.0.8.20:+1792" is not an address and port')
        # the Secret's bytes reach the status printable: no terminal escape
        k.ok("PATCH", secret, {"data": {"hsm-egress": b64("10.0.8.20:1792\x1b[2J\r")}}, merge)
        self.ready("False", "Failed", part='key hsm-egress: "10.0.8.20:1792?[2J?" is not an address and port')
        # bytes that are not UTF-8 still reach the status, as '?'
        k.ok("PATCH", secret, {"data": {"hsm-egress": base64.b64encode(b"10.0.8.20:1792\xff\xc3").decode()}},
             merge)
        self.ready("False", "Failed", part='key hsm-egress: "10.0.8.20:1792??" is not an address and port')
        # a NUL byte: what follows it is not dropped without a word
        k.ok("PATCH", secret, {"data": {"hsm-egress": base64.b64encode(b"10.0.8.20:1792\x00hsm:1").decode()}},
             merge)
        self.ready("False", "Failed", part="key hsm-egress: holds a NUL byte")
        k.ok("PATCH", secret, {"data": {"hsm-egress": None}}, merge)
        wait_for("the HSM egress policy gone", lambda: self.get(path) is None)
        k.ok("DELETE", CR)
        wait_for("gone", lambda: self.cr() is None)

    def test_9e_terminating_pod_is_no_operand_failure(self):
        """A crashing pod that is being deleted (held here by a finalizer,
        as a drained node's or a rollout's old pod lingers) no longer
        makes the operand Degraded."""
        k = self.k
        self.post_cr(sample())
        d = wait_for("the Deployment", self.deployment)
        self.play_deployment_controller()
        self.ready("True", "Ready")
        pod = f"/api/v1/namespaces/{NS}/pods/{APP}-old"
        k.ok("POST", f"/api/v1/namespaces/{NS}/pods",
             {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": f"{APP}-old", "labels": d["spec"]["template"]["metadata"]["labels"],
                           "finalizers": ["test.signet.dev/hold"]},
              "spec": {"containers": [{"name": "signetd", "image": IMAGE}]}})
        k.ok("PATCH", f"{pod}/status", {"status": {"phase": "Running", "containerStatuses": [
            {"name": "signetd", "image": IMAGE, "imageID": "", "ready": False, "restartCount": 2,
             "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}}]}},
             "application/merge-patch+json")
        self.ready("False", "OperandFailed", part="CrashLoopBackOff")
        k.ok("DELETE", pod)
        self.assertIsNotNone(self.get(pod)["metadata"].get("deletionTimestamp"))
        self.ready("True", "Ready")
        k.ok("PATCH", pod, {"metadata": {"finalizers": None}}, "application/merge-patch+json")
        wait_for("the pod gone", lambda: self.get(pod) is None)
        k.ok("DELETE", CR)
        wait_for("gone", lambda: self.cr() is None)


class RestrictedOperator(Operand, unittest.TestCase):
    """signet-operator as a ServiceAccount holding the ClusterRoles of
    packaging/kubernetes/operator.yaml, with its read of SignetIssuers
    bound apart so the test can take it away: an API error (403) on the
    way shows in the conditions at the current generation, not a stale
    Ready=True, and the status fields stay."""

    SA = "restricted-operator"

    @classmethod
    def setUpClass(cls):
        k = cls.k = E.kube
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        code, out = k.req("POST", f"/apis/signet.dev/v1alpha1/namespaces/{ISTIO}/signetissuers",
                          {"apiVersion": "signet.dev/v1alpha1", "kind": "SignetIssuer", "metadata": {"name": "mesh"},
                           "spec": {}})
        assert code in (201, 409), out
        k.ok("POST", f"/api/v1/namespaces/{NS}/serviceaccounts",
             {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": cls.SA}})
        with open(os.path.join(MANIFESTS, "operator.yaml")) as f:
            roles = [d for d in yaml.safe_load_all(f) if d and d.get("kind") == "ClusterRole"]
        rules = [r for role in roles for r in role["rules"] if "signetissuers" not in r.get("resources", [])]
        for r in rules:
            if r["resources"] == ["deployments"]:
                r["verbs"] = [v for v in r["verbs"] if v not in ("list", "watch")]
        issuers = [{"apiGroups": ["signet.dev"], "resources": ["signetissuers", "signetclusterissuers"],
                    "verbs": ["get", "list", "watch"]}]
        watch = [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch"]}]
        cls.bindings = []
        for name, rs in (("istiocsr-test-operator", rules), ("istiocsr-test-issuers", issuers),
                         ("istiocsr-test-deployment-watch", watch)):
            k.ok("POST", f"{rbac}/clusterroles", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                                                  "metadata": {"name": name}, "rules": rs})
            cls.bindings.append(cls.binding(name))
            k.ok("POST", f"{rbac}/clusterrolebindings", cls.bindings[-1])
        token = k.ok("POST", f"/api/v1/namespaces/{NS}/serviceaccounts/{cls.SA}/token",
                     {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                      "spec": {"expirationSeconds": 3600}})["status"]["token"]
        kubeconfig = os.path.join(E.tmp, "restricted.kubeconfig")
        with open(kubeconfig, "w") as f:
            yaml.safe_dump({"apiVersion": "v1", "kind": "Config",
                            "clusters": [{"name": "t", "cluster": {"server": E.env["KUBE_APISERVER"],
                                                                   "certificate-authority": E.env["KUBE_CA_FILE"]}}],
                            "users": [{"name": "t", "user": {"token": token}}],
                            "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
                            "current-context": "t"}, f)
        cls.proc, cls.port, cls.log = E.run("restricted", kubeconfig=kubeconfig)

    @classmethod
    def binding(cls, role):
        return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": role},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": cls.SA, "namespace": NS}]}

    def may(self, group, resource, verb):
        review = self.k.ok("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                           {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                            "spec": {"user": f"system:serviceaccount:{NS}:{self.SA}",
                                     "resourceAttributes": {"group": group, "resource": resource, "verb": verb,
                                                            "namespace": NS}}})
        return review["status"].get("allowed", False)

    def test_1_stale_cache_is_no_ready(self):
        """The pass that rolls the Deployment judges it from a fresh read,
        not from the cache, whose copy is the one before the write (current
        and available for the old generation). Made certain here: the
        operator may no longer watch Deployments, and the API server's
        restart ends the watch it had, so the cache keeps the old
        Deployment for as long as the test wants."""
        if not E.own:
            self.skipTest("a shared API server is not restarted")
        k = self.k
        k.ok("POST", f"/apis/operator.openshift.io/v1alpha1/namespaces/{NS}/istiocsrs", sample())
        wait_for("the Deployment", self.deployment)
        self.play_deployment_controller()
        self.ready("True", "Ready")
        k.ok("DELETE", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/istiocsr-test-deployment-watch")
        wait_for("the operator's account refused watching Deployments",
                 lambda: not self.may("apps", "deployments", "watch"))
        subprocess.run([os.path.join(KUBE_SCRIPTS, "apiserver.sh"), "restart-apiserver", E.api_dir], check=True,
                       stdout=subprocess.DEVNULL)
        wait_for("the API server back", lambda: self.cr(), timeout=120)
        w = Watch(k, f"/apis/operator.openshift.io/v1alpha1/namespaces/{NS}/istiocsrs")
        gen = k.ok("PATCH", CR, {"spec": {"istioCSRConfig": {"logLevel": 3}}},
                   "application/merge-patch+json")["metadata"]["generation"]
        wait_for("the new args", lambda: "--log-level=3" in args_of(self.deployment()))
        self.ready("False", "Progressing", part="not yet observed")
        wait_for("Progressing at the new generation, as watched",
                 lambda: ("False", "Progressing", gen) in [ready_of(x) for x in w.objects] or w.errors)
        self.assertEqual(w.errors, [])
        self.assertNotIn(("True", "Ready", gen), [ready_of(x) for x in w.objects],
                         "Ready=True for a spec the Deployment does not run yet")
        # The watch back: the cache catches up, and the operand with it.
        k.ok("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", self.bindings[2])
        self.play_deployment_controller()
        self.ready("True", "Ready")
        self.assertEqual(self.proc.poll(), None, "the operator survived the API server's restart")

    def test_2_forbidden_read_shows_in_the_conditions(self):
        k = self.k
        merge = "application/merge-patch+json"
        if not self.cr():  # test_1 skipped
            k.ok("POST", f"/apis/operator.openshift.io/v1alpha1/namespaces/{NS}/istiocsrs", sample())
            wait_for("the Deployment", self.deployment)
            self.play_deployment_controller()
        o = self.ready("True", "Ready")
        fields = {f: o["status"][f] for f in STATUS_FIELDS}
        k.ok("DELETE", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/istiocsr-test-issuers")
        wait_for("the operator's account refused SignetIssuers", lambda: not self.may("signet.dev", "signetissuers",
                                                                                   "get"))
        k.ok("PATCH", CR, {"spec": {"istioCSRConfig": {"logLevel": 2}}}, merge)
        o = self.ready("False", "Failed", part="forbidden")
        self.assertIn("reconciliation failed, retrying", cond(o, "Ready")["message"])
        self.assertEqual(cond(o, "Degraded")["status"], "True")
        self.assertEqual({f: o["status"].get(f) for f in STATUS_FIELDS}, fields)
        wait_for("one Warning Event", lambda: warnings(k, NS, "Failed", "forbidden"))
        # The permission back: the retry (backoff) carries the change out.
        k.ok("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", self.bindings[1])
        wait_for("the new args", lambda: "--log-level=2" in args_of(self.deployment()), timeout=90)
        self.ready("False", "Progressing")
        self.play_deployment_controller()
        self.ready("True", "Ready")
        self.assertEqual(len(warnings(k, NS, "Failed", "forbidden")), 1)
        k.ok("DELETE", CR)
        wait_for("gone", lambda: self.cr() is None, timeout=90)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]], verbosity=2)
