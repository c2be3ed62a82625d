#!/usr/bin/python3
"""packaging/kubernetes as kustomize renders it, and as a Kubernetes 1.20
API server takes it (tests/kube/apiserver.sh).

  Rendering: every kustomization (the default install, base/, and the
    HSM overlays) renders with Debian's kubectl 1.20 (tests/kube/kubectl.sh:
    its kustomize v2.0.3 is the dialect the files are written in), never
    with whatever kubectl is on PATH.
  What the default install holds: every object of the manifests it names,
    unchanged, except the two it means to change (signetd's Deployment
    takes overlays/softhsm; signet-trust's Secret-targets binding binds
    nobody), plus signetd's and signet-trust's own objects.
  signetd: 2 replicas, the PodDisruptionBudget, Service 443 -> 6443 and the
    metrics Service selecting the pods, probes on 6060 (/readyz, /healthz),
    the restricted security context field by field (pod and container),
    the image, the HSM Secret read-only at /etc/signet/hsm named by
    --config, no PIN in an argument or the environment.
  The overlays: each changes signetd's Deployment only, and exactly by its
    HSM choice (volumes, mounts, arguments, environment, user, nodes).
  signet-trust: its Deployment, as signetd's checks where they apply.
  The API server: every render accepted by a server-side dry run
    (`kubectl apply --server-side --dry-run=server`), after the CRDs are
    created for real and the namespaces the manifests name exist. The
    PodDisruptionBudget is policy/v1 (what clusters since 1.21 serve, and
    the only version since 1.25); Kubernetes 1.20 serves policy/v1beta1
    only, with the same fields, so the dry run sends it as that.
  RBAC, both ways, with `kubectl auth can-i --as=system:serviceaccount:..`:
    signetd's and signet-trust's ServiceAccounts may do every (verb,
    resource, subresource, namespace) the rendered roles bound to them
    grant, and may not do a list of things they must never do (Secrets
    outside their namespace, Pods, CRDs, escalate and bind, impersonation,
    other signers, ...). The rendered RBAC objects are applied for real,
    but renamed (ClusterRoles and their bindings prefixed kz-test-, the
    namespaces kz-<namespace>), so that a shared server's other tests see
    none of it. kubectl 1.20 cannot ask about a resource the server does
    not serve (it sends it without its group): the virtual `signers`, and
    cert-manager's certificaterequests unless another test made that CRD;
    those questions go as SubjectAccessReviews.

The API server may be shared with other tests (SIGNET_KUBE_ENV). The CRDs
are created only if missing; the namespaces signet-system, istio-system and
cert-manager (needed for the dry run) and the kz-* ones are only ever
created; the kz-test-* cluster objects are deleted at the end.

Usage: test_kustomize.py SOURCE_DIR
"""
import concurrent.futures
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

SOURCE_DIR = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "kube"))
import kube_rest  # noqa: E402

MANIFESTS = os.path.join(SOURCE_DIR, "packaging", "kubernetes")
RENDERS = {
    "default": MANIFESTS,
    "base": os.path.join(MANIFESTS, "base"),
    "softhsm": os.path.join(MANIFESTS, "overlays", "softhsm"),
    "p11-kit": os.path.join(MANIFESTS, "overlays", "p11-kit"),
    "vendor-module": os.path.join(MANIFESTS, "overlays", "vendor-module"),
}
# What the default install names, file by file (kustomization.yaml).
DEFAULT_FILES = ["base/crds.yaml", "base/policy-crds.yaml", "base/trust-crds.yaml", "base/rbac.yaml",
                 "base/trust-rbac.yaml", "base/trust.yaml", "base/signetd.yaml"]
SIGNETD_LABELS = {"app.kubernetes.io/name": "signet", "app.kubernetes.io/component": "signetd"}
SIGNETD_SA = "system:serviceaccount:signet-system:signet"
TRUST_SA = "system:serviceaccount:cert-manager:signet-trust"
P11_KIT_CLIENT = "/usr/lib/x86_64-linux-gnu/pkcs11/p11-kit-client.so"

POD_SECURITY = {"runAsNonRoot": True, "fsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
                      "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}


def kubectl_path():
    out = subprocess.run([os.path.join(SOURCE_DIR, "tests", "kube", "kubectl.sh")], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return out.strip().splitlines()[-1]


KUBECTL = None
TMP = None


def kubectl(*args, stdin=None, kubeconfig=None, check=True):
    """Runs Debian's kubectl 1.20; (returncode, stdout, stderr)."""
    cmd = [KUBECTL, f"--cache-dir={os.path.join(TMP, 'kube-cache')}"]
    if kubeconfig:
        cmd.append(f"--kubeconfig={kubeconfig}")
    p = subprocess.run(cmd + list(args), input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env={k: v for k, v in os.environ.items() if k != "KUBECONFIG"}, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
    return p.returncode, p.stdout, p.stderr


def render(path):
    """The objects `kubectl kustomize PATH` renders."""
    _, out, _ = kubectl("kustomize", path)
    docs = list(yaml.safe_load_all(out))
    for d in docs:
        assert isinstance(d, dict) and d.get("kind") and d.get("apiVersion"), \
            f"{path}: an empty or bare document: {d!r}"
    return docs


def load(name):
    with open(os.path.join(MANIFESTS, name)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def key(doc):
    return (doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"])


def by_key(docs):
    out = {}
    for d in docs:
        assert key(d) not in out, f"{key(d)} twice"
        out[key(d)] = d
    return out


def find(docs, kind, name):
    hits = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(hits) == 1, f"{kind} {name}: {len(hits)} in the render"
    return hits[0]


def container(deploy, name):
    cs = [c for c in deploy["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    assert len(cs) == 1, f"container {name}"
    return cs[0]


R = {}  # render name -> objects


def setUpModule():
    global KUBECTL, TMP
    base = os.environ.get("SIGNET_TEST_TMP")
    if base:
        os.makedirs(base, exist_ok=True)
    TMP = tempfile.mkdtemp(prefix="kustomize.", dir=base)
    KUBECTL = kubectl_path()
    _, out, _ = kubectl("version", "--client", "-o", "json")
    v = json.loads(out)["clientVersion"]
    assert (v["major"], v["minor"]) == ("1", "20"), f"kubectl.sh gave kubectl {v['gitVersion']}, not 1.20"
    for name, path in RENDERS.items():
        R[name] = render(path)


def tearDownModule():
    if SERVER:
        SERVER.close()
    if TMP and not os.environ.get("SIGNET_KEEP_TMP"):
        shutil.rmtree(TMP, ignore_errors=True)


# ---- the renders ----------------------------------------------------------

class DefaultInstall(unittest.TestCase):
    def test_objects(self):
        """Every object of the files the default names, unchanged but for
        the two it changes on purpose."""
        got = by_key(R["default"])
        want = by_key([d for f in DEFAULT_FILES for d in load(f)])
        self.assertEqual(sorted(got), sorted(want))
        changed = {("Deployment", "signet-system", "signet"),
                   ("ClusterRoleBinding", "", "signet-trust-secret-targets")}
        for k in sorted(set(want) - changed):
            with self.subTest(k):
                self.assertEqual(got[k], want[k])
        crb = got[("ClusterRoleBinding", "", "signet-trust-secret-targets")]
        self.assertEqual(crb.get("subjects"), [], "signet-trust runs without --secret-targets-enabled")
        self.assertEqual(crb["roleRef"]["name"], "signet-trust-secret-targets")
        trust = container(got[("Deployment", "cert-manager", "signet-trust")], "signet-trust")
        self.assertFalse([a for a in trust["args"] if a.startswith("--secret-targets-enabled")])

    def test_signetd_is_softhsm(self):
        """The default install's signetd is overlays/softhsm's."""
        self.assertEqual(find(R["default"], "Deployment", "signet"), find(R["softhsm"], "Deployment", "signet"))

    def test_no_operator(self):
        """signet-operator deploys signetd itself: not in the default."""
        names = {d["metadata"]["name"] for d in R["default"]}
        self.assertNotIn("signet-operator", names)


class Signetd(unittest.TestCase):
    """signetd's objects, in every render holding them."""

    def renders(self):
        return [(n, docs) for n, docs in R.items() if any(d["kind"] == "Deployment" and d["metadata"]["name"] ==
                                                           "signet" for d in docs)]

    def test_every_render_has_signetd(self):
        self.assertEqual(sorted(n for n, _ in self.renders()), sorted(RENDERS))

    def test_deployment(self):
        for name, docs in self.renders():
            with self.subTest(name):
                d = find(docs, "Deployment", "signet")
                self.assertEqual(d["metadata"]["namespace"], "signet-system")
                spec = d["spec"]
                self.assertEqual(spec["replicas"], 2)
                self.assertEqual(spec["selector"], {"matchLabels": SIGNETD_LABELS})
                pod = spec["template"]
                self.assertEqual({k: pod["metadata"]["labels"].get(k) for k in SIGNETD_LABELS}, SIGNETD_LABELS)
                ps = pod["spec"]
                self.assertEqual(ps["serviceAccountName"], "signet")
                self.assertEqual(len(ps["containers"]), 1)
                self.assertNotIn("initContainers", ps)
                self.assertNotIn("hostNetwork", ps)
                self.assertNotIn("hostPID", ps)
                c = container(d, "signetd")
                self.assertEqual(c["image"], "signetd:0.1.0")
                self.assertNotIn("command", c, "the image's entry point is signetd")
                self.assertEqual(c["args"][0], "--config=/etc/signet/hsm/signetd.conf")
                for a in ("--serving-address=0.0.0.0:6443", "--metrics-port=9402", "--readiness-probe-port=6060",
                          "--readiness-probe-path=/readyz"):
                    self.assertIn(a, c["args"])
                self.assertTrue([a for a in c["args"] if a.startswith("--serving-certificate-dns-names=") and
                                 "signet.signet-system.svc" in a.split("=", 1)[1].split(",")])
                ports = {p["name"]: (p["containerPort"], p["protocol"]) for p in c["ports"]}
                self.assertEqual(ports, {"grpc": (6443, "TCP"), "metrics": (9402, "TCP"), "probes": (6060, "TCP")})
                self.assertEqual(c["readinessProbe"]["httpGet"], {"path": "/readyz", "port": 6060})
                self.assertEqual(c["livenessProbe"]["httpGet"], {"path": "/healthz", "port": 6060})

    def test_security_context(self):
        """Exactly the restricted fields; the p11-kit overlay adds the
        socket owner's uid and gid."""
        for name, docs in self.renders():
            with self.subTest(name):
                d = find(docs, "Deployment", "signet")
                want = dict(POD_SECURITY)
                if name == "p11-kit":
                    want.update(runAsUser=65532, runAsGroup=65532)
                self.assertEqual(d["spec"]["template"]["spec"]["securityContext"], want)
                self.assertEqual(container(d, "signetd")["securityContext"], CONTAINER_SECURITY)

    def test_hsm_secret(self):
        """The Secret signet-hsm read-only at /etc/signet/hsm (0440, the
        pod's fsGroup reads it); no PIN anywhere else."""
        for name, docs in self.renders():
            with self.subTest(name):
                d = find(docs, "Deployment", "signet")
                vols = {v["name"]: v for v in d["spec"]["template"]["spec"]["volumes"]}
                self.assertEqual(vols["hsm"], {"name": "hsm", "secret": {"secretName": "signet-hsm",
                                                                        "defaultMode": 0o440}})
                self.assertEqual(vols["tmp"], {"name": "tmp", "emptyDir": {}})
                c = container(d, "signetd")
                mounts = {m["name"]: m for m in c["volumeMounts"]}
                self.assertEqual(mounts["hsm"], {"name": "hsm", "mountPath": "/etc/signet/hsm", "readOnly": True})
                self.assertEqual(mounts["tmp"], {"name": "tmp", "mountPath": "/tmp"})
                for m in c["volumeMounts"]:
                    if m["name"] != "tmp":
                        self.assertTrue(m.get("readOnly"), f"{m['name']} is mounted read-only")
                self.assertFalse([a for a in c["args"] if "pin" in a.lower()])
                for e in c.get("env", []):
                    self.assertNotIn("PIN", e["name"].upper())
                    self.assertNotIn("valueFrom", e)
                self.assertNotIn("envFrom", c)

    def test_pdb(self):
        for name, docs in self.renders():
            with self.subTest(name):
                p = find(docs, "PodDisruptionBudget", "signet")
                self.assertEqual(p["apiVersion"], "policy/v1")
                self.assertEqual(p["metadata"]["namespace"], "signet-system")
                self.assertEqual(p["spec"], {"minAvailable": 1, "selector": {"matchLabels": SIGNETD_LABELS}})

    def test_services(self):
        for name, docs in self.renders():
            with self.subTest(name):
                s = find(docs, "Service", "signet")
                self.assertEqual(s["metadata"]["namespace"], "signet-system")
                self.assertEqual(s["spec"]["selector"], SIGNETD_LABELS)
                self.assertEqual(s["spec"]["ports"], [{"name": "grpc", "port": 443, "targetPort": 6443,
                                                       "protocol": "TCP"}])
                m = find(docs, "Service", "signet-metrics")
                self.assertEqual(m["metadata"]["namespace"], "signet-system")
                self.assertEqual(m["spec"]["selector"], SIGNETD_LABELS)
                self.assertEqual(m["spec"]["ports"], [{"name": "metrics", "port": 9402, "targetPort": 9402,
                                                       "protocol": "TCP"}])


class Overlays(unittest.TestCase):
    """Each HSM overlay: base/'s objects (the whole install) with signetd's
    Deployment changed by exactly its HSM choice."""

    def expect(self, add_args=(), env=None, mounts=(), volumes=(), pod_security=None, node_selector=None):
        d = copy.deepcopy(find(R["base"], "Deployment", "signet"))
        ps = d["spec"]["template"]["spec"]
        c = container(d, "signetd")
        c["args"] += list(add_args)
        if env is not None:
            c["env"] = env
        c["volumeMounts"] += list(mounts)
        ps["volumes"] += list(volumes)
        ps["securityContext"].update(pod_security or {})
        ps["nodeSelector"].update(node_selector or {})
        return d

    def check(self, name, want):
        got = by_key(R[name])
        base = by_key(R["base"])
        self.assertEqual(sorted(got), sorted(base))
        for k in base:
            if k[0] != "Deployment":
                self.assertEqual(got[k], base[k], k)
        self.assertEqual(got[("Deployment", "signet-system", "signet")], want)

    def test_softhsm(self):
        """The token folder from Secret signet-softhsm-token as SoftHSM2's
        token directory, read-only; softhsm2.conf from signet-hsm."""
        self.check("softhsm", self.expect(
            add_args=["--softhsm2-conf=/etc/signet/hsm/softhsm2.conf"],
            mounts=[{"name": "softhsm-token", "mountPath": "/etc/signet/softhsm", "readOnly": True}],
            volumes=[{"name": "softhsm-token", "secret": {"secretName": "signet-softhsm-token",
                                                          "defaultMode": 0o440}}]))

    def test_p11_kit(self):
        """p11-kit's client module, the server's socket in the environment
        (not a secret), the host's socket folder read-only, the socket
        owner's uid, and only nodes that run the server."""
        self.check("p11-kit", self.expect(
            add_args=[f"--hsm-module={P11_KIT_CLIENT}"],
            env=[{"name": "P11_KIT_SERVER_ADDRESS", "value": "unix:path=/run/p11-kit/pkcs11.sock"}],
            mounts=[{"name": "p11-kit-socket", "mountPath": "/run/p11-kit", "readOnly": True}],
            volumes=[{"name": "p11-kit-socket", "hostPath": {"path": "/run/signet/p11-kit", "type": "Directory"}}],
            pod_security={"runAsUser": 65532, "runAsGroup": 65532},
            node_selector={"signet.dev/hsm": "true"}))

    def test_vendor_module(self):
        """The vendor's module from the host, read-only, named by
        --hsm-module inside the mount."""
        d = find(R["vendor-module"], "Deployment", "signet")
        module = [a.split("=", 1)[1] for a in container(d, "signetd")["args"] if a.startswith("--hsm-module=")]
        self.assertEqual(len(module), 1)
        self.assertTrue(module[0].startswith("/opt/signet/hsm/"))
        self.check("vendor-module", self.expect(
            add_args=["--hsm-module=/opt/signet/hsm/lib/libpkcs11.so"],
            mounts=[{"name": "hsm-module", "mountPath": "/opt/signet/hsm", "readOnly": True}],
            volumes=[{"name": "hsm-module", "hostPath": {"path": "/opt/signet/hsm", "type": "Directory"}}],
            node_selector={"signet.dev/hsm": "true"}))


class Trust(unittest.TestCase):
    def test_deployment(self):
        d = find(R["default"], "Deployment", "signet-trust")
        self.assertEqual(d["metadata"]["namespace"], "cert-manager")
        ps = d["spec"]["template"]["spec"]
        self.assertEqual(ps["serviceAccountName"], "signet-trust")
        self.assertEqual(d["spec"]["selector"]["matchLabels"], {"app.kubernetes.io/name": "signet-trust"})
        self.assertEqual(ps["securityContext"], POD_SECURITY)
        c = container(d, "signet-trust")
        self.assertEqual(c["image"], "signet-trust:0.1.0")
        self.assertNotIn("command", c)
        self.assertEqual(c["securityContext"], CONTAINER_SECURITY)
        for a in ("--trust-namespace=cert-manager", "--leader-elect=true", "--metrics-port=9402",
                  "--readiness-probe-port=6060", "--readiness-probe-path=/readyz"):
            self.assertIn(a, c["args"])
        self.assertEqual(c["readinessProbe"]["httpGet"], {"path": "/readyz", "port": 6060})
        self.assertEqual(c["livenessProbe"]["httpGet"], {"path": "/healthz", "port": 6060})
        s = find(R["default"], "Service", "signet-trust-metrics")
        self.assertEqual(s["spec"]["selector"], {"app.kubernetes.io/name": "signet-trust"})
        self.assertEqual(s["spec"]["ports"], [{"name": "metrics", "port": 9402, "targetPort": 9402,
                                               "protocol": "TCP"}])


# ---- the API server ---------------------------------------------------------

SERVER = None
PREFIX = "kz-test-"
NS_MAP = {"signet-system": "kz-signet-system", "istio-system": "kz-istio-system", "cert-manager": "kz-cert-manager"}
RBAC_KINDS = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
# Resources that are not namespaced (asked with --all-namespaces).
CLUSTER_SCOPED = {"tokenreviews", "subjectaccessreviews", "namespaces", "signetclusterissuers",
                  "certificatesigningrequests", "certificaterequestpolicies", "clusterroles", "clusterrolebindings",
                  "bundles", "customresourcedefinitions", "nodes"}


class Server:
    """The API server (shared through SIGNET_KUBE_ENV, or our own) with the
    CRDs created and the manifests' namespaces there."""

    def __init__(self):
        self.api = kube_rest.ApiServer(TMP)
        self.env = self.api.env
        self.kube = kube_rest.Kube(self.env)
        self.kubeconfig = self.env["KUBECONFIG"]
        self.cleanup = []
        for ns in list(NS_MAP) + list(NS_MAP.values()):
            code, doc = self.kube.req("POST", "/api/v1/namespaces",
                                      {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            assert code in (201, 409), f"namespace {ns}: {code} {doc.get('message')}"
        for f in ("base/crds.yaml", "base/policy-crds.yaml", "base/trust-crds.yaml"):
            self.kube.apply_crds(os.path.join(MANIFESTS, f), timeout=60)

    def kubectl(self, *args, stdin=None, check=True):
        return kubectl(*args, stdin=stdin, kubeconfig=self.kubeconfig, check=check)

    def close(self):
        for path in reversed(self.cleanup):
            self.kube.req("DELETE", path)
        self.api.stop()


def server():
    global SERVER
    if SERVER is None:
        SERVER = Server()
    return SERVER


def for_1_20(docs):
    """The PodDisruptionBudget as Kubernetes 1.20 serves it (policy/v1beta1,
    the same fields)."""
    out = copy.deepcopy(docs)
    for d in out:
        if d["kind"] == "PodDisruptionBudget":
            assert d["apiVersion"] == "policy/v1"
            d["apiVersion"] = "policy/v1beta1"
    return out


class DryRun(unittest.TestCase):
    def test_accepted(self):
        s = server()
        for name, docs in R.items():
            with self.subTest(name):
                rc, out, err = s.kubectl("apply", "--server-side", "--force-conflicts", "--dry-run=server",
                                         "--field-manager=signet-kustomize-test", "-f", "-",
                                         stdin=yaml.safe_dump_all(for_1_20(docs)), check=False)
                self.assertEqual(rc, 0, err)
                lines = [ln for ln in out.splitlines() if ln.strip()]
                self.assertEqual(len(lines), len(docs), out)
                for ln in lines:
                    self.assertIn("(server dry run)", ln)


def renamed(docs):
    """The RBAC objects of a render under names of this test's own."""
    out = []
    for d in copy.deepcopy(docs):
        if d["kind"] not in RBAC_KINDS:
            continue
        md = d["metadata"]
        if d["kind"] == "Namespace":
            md["name"] = NS_MAP[md["name"]]
        elif md.get("namespace"):
            md["namespace"] = NS_MAP[md["namespace"]]
        else:
            md["name"] = PREFIX + md["name"]
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            if d["roleRef"]["kind"] == "ClusterRole":
                d["roleRef"]["name"] = PREFIX + d["roleRef"]["name"]
            for s in d.get("subjects") or []:
                if s.get("namespace"):
                    s["namespace"] = NS_MAP[s["namespace"]]
        out.append(d)
    return out


def sa_user(user):
    _, _, ns, name = user.split(":")
    return f"system:serviceaccount:{NS_MAP[ns]}:{name}"


def granted(docs, user):
    """Every question the roles bound to `user` (original names) answer
    yes: (verb, group, resource, subresource, namespace or None for
    cluster-wide, resourceName or None)."""
    _, _, sa_ns, sa_name = user.split(":")
    roles = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in docs
             if d["kind"] in ("ClusterRole", "Role")}
    out = []
    for b in docs:
        if b["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if not any(s.get("kind") == "ServiceAccount" and s.get("name") == sa_name and s.get("namespace") == sa_ns
                   for s in b.get("subjects") or []):
            continue
        ns = b["metadata"].get("namespace")
        rk = b["roleRef"]["kind"]
        role = roles[(rk, ns if rk == "Role" else "", b["roleRef"]["name"])]
        for rule in role.get("rules", []):
            for g in rule["apiGroups"]:
                for res in rule["resources"]:
                    r, _, sub = res.partition("/")
                    for v in rule["verbs"]:
                        for rn in rule.get("resourceNames") or [None]:
                            out.append((v, g, r, sub or None, ns, rn))
    return out


def sar(user, verb, group, resource, sub, ns, name):
    """The authorizer's answer for a ServiceAccount user, asked as the API
    server asks it (a SubjectAccessReview with the user's groups)."""
    sa_ns = user.split(":")[2]
    attrs = {"verb": verb, "group": group, "resource": resource}
    for k, v in (("subresource", sub), ("namespace", ns), ("name", name)):
        if v:
            attrs[k] = v
    out = server().kube.ok("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": ["system:serviceaccounts", f"system:serviceaccounts:{sa_ns}",
                                          "system:authenticated"], "resourceAttributes": attrs}})
    return out["status"].get("allowed", False)


def can(user, verb, group, resource, sub, ns, name):
    """kubectl auth can-i as `user` (a mapped ServiceAccount); ns None:
    cluster-wide. kubectl 1.20 sends a resource it cannot find in the
    server's discovery without its group (the virtual `signers`, and
    cert-manager's certificaterequests, whose CRD is cert-manager's and not
    on the test server): those are asked as SubjectAccessReviews."""
    what = resource + (f".{group}" if group else "") + (f"/{name}" if name else "")
    args = ["auth", "can-i", verb, what, f"--as={user}"]
    if sub:
        args.append(f"--subresource={sub}")
    args += ["--all-namespaces"] if ns is None else ["-n", ns]
    rc, out, err = server().kubectl(*args, check=False)
    if "doesn't have a resource type" in err:
        return sar(user, verb, group, resource, sub, ns, name)
    answer = out.strip().splitlines()[0] if out.strip() else ""
    assert answer in ("yes", "no") and rc == (0 if answer == "yes" else 1), f"can-i {args}: {rc} {out} {err}"
    return answer == "yes"


class Rbac(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        s = server()
        docs = renamed(R["default"])
        for d in docs:
            if not d["metadata"].get("namespace") and d["kind"] != "Namespace":
                plural = d["kind"].lower() + "s"
                s.cleanup.append(f"/apis/rbac.authorization.k8s.io/v1/{plural}/{d['metadata']['name']}")
        s.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=signet-kustomize-test", "-f", "-",
                  stdin=yaml.safe_dump_all(docs))
        # A new binding reaches the authorizer through its informer.
        user = sa_user(SIGNETD_SA)
        kube_rest.wait_for("the renamed RBAC in effect",
                           lambda: can(user, "create", "", "tokenreviews", None, None, None))

    def ask(self, user, questions, want):
        """Asks every question as `user` (two at a time: each is a kubectl
        run) and checks each answer is `want`."""
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            answers = list(pool.map(lambda q: can(user, *q), questions))
        for (verb, group, res, sub, ns, name), answer in zip(questions, answers):
            with self.subTest(f"{'' if want else 'not '}{verb} {res}{'/' + sub if sub else ''}.{group} "
                              f"{name or ''} in {ns or '*'}"):
                self.assertEqual(answer, want)

    def check_granted(self, user):
        questions = []
        for verb, group, res, sub, ns, name in granted(R["default"], user):
            if ns is None and res not in CLUSTER_SCOPED:
                spots = [None, "kz-elsewhere"]  # a ClusterRoleBinding: everywhere
            else:
                spots = [NS_MAP[ns] if ns else None]
            questions += [(verb, group, res, sub, where, name) for where in spots]
        self.assertGreater(len(questions), 10)
        self.ask(sa_user(user), questions, True)

    def check_refused(self, user, cases):
        self.ask(sa_user(user), [(v, g, r, sub, NS_MAP.get(ns, ns), n) for v, g, r, sub, ns, n in cases], False)

    def test_signetd_granted(self):
        """Every rule rbac.yaml grants signetd, asked as signetd."""
        self.check_granted(SIGNETD_SA)

    def test_signetd_refused(self):
        self.check_refused(SIGNETD_SA, [
            # Secrets: only in istiod's namespace.
            ("get", "", "secrets", None, "default", None),
            ("get", "", "secrets", None, "kube-system", None),
            ("list", "", "secrets", None, "signet-system", None),
            ("get", "", "secrets", None, "cert-manager", None),
            ("list", "", "secrets", None, None, None),
            ("watch", "", "secrets", None, None, None),
            # Workloads.
            ("create", "", "pods", None, "signet-system", None),
            ("delete", "", "pods", None, "default", None),
            ("create", "", "pods", "exec", "signet-system", None),
            ("create", "apps", "deployments", None, "signet-system", None),
            ("update", "apps", "deployments", None, "signet-system", None),
            ("create", "", "serviceaccounts", "token", "signet-system", None),
            ("delete", "", "namespaces", None, None, None),
            ("create", "", "namespaces", None, None, None),
            # The API itself and RBAC.
            ("create", "apiextensions.k8s.io", "customresourcedefinitions", None, None, None),
            ("delete", "apiextensions.k8s.io", "customresourcedefinitions", None, None, None),
            ("escalate", "rbac.authorization.k8s.io", "clusterroles", None, None, None),
            ("bind", "rbac.authorization.k8s.io", "clusterroles", None, None, None),
            ("escalate", "rbac.authorization.k8s.io", "roles", None, "istio-system", None),
            ("bind", "rbac.authorization.k8s.io", "roles", None, "istio-system", None),
            ("create", "rbac.authorization.k8s.io", "clusterrolebindings", None, None, None),
            ("create", "rbac.authorization.k8s.io", "rolebindings", None, "istio-system", None),
            ("impersonate", "", "serviceaccounts", None, None, None),
            ("impersonate", "", "users", None, None, None),
            # Leases: only in the election namespace.
            ("create", "coordination.k8s.io", "leases", None, "kube-system", None),
            ("update", "coordination.k8s.io", "leases", None, "signet-system", None),
            ("delete", "coordination.k8s.io", "leases", None, "istio-system", None),
            # Its own objects: status only, never the spec.
            ("update", "signet.dev", "signetissuers", None, "default", None),
            ("patch", "signet.dev", "signetclusterissuers", None, None, None),
            ("delete", "signet.dev", "signetclusterissuers", None, None, None),
            ("update", "cert-manager.io", "certificaterequests", None, "default", None),
            ("update", "certificates.k8s.io", "certificatesigningrequests", "approval", None, None),
            ("delete", "certificates.k8s.io", "certificatesigningrequests", None, None, None),
            # Signers: only its own.
            ("sign", "certificates.k8s.io", "signers", None, None, "kubernetes.io/kube-apiserver-client"),
            ("sign", "certificates.k8s.io", "signers", None, None, "kubernetes.io/kubelet-serving"),
            ("approve", "certificates.k8s.io", "signers", None, None, "signetclusterissuers.signet.dev/*"),
            ("approve", "cert-manager.io", "signers", None, None, "vault.example.com/*"),
        ])

    def test_cert_manager_approves(self):
        """signet-cert-manager-approver: cert-manager's ServiceAccount may
        approve for signet's issuers, and for no others through it."""
        user = sa_user("system:serviceaccount:cert-manager:cert-manager")
        for rn in ("signetissuers.signet.dev/*", "signetclusterissuers.signet.dev/*"):
            self.assertTrue(can(user, "approve", "cert-manager.io", "signers", None, None, rn))
        self.assertFalse(can(user, "approve", "cert-manager.io", "signers", None, None,
                                  "issuers.cert-manager.io/*"))

    def test_trust_granted(self):
        """Every rule trust-rbac.yaml grants signet-trust (as bound by the
        default install), asked as signet-trust."""
        self.check_granted(TRUST_SA)

    def test_trust_refused(self):
        self.check_refused(TRUST_SA, [
            # Secrets: read in the trust namespace only (no Secret targets).
            ("get", "", "secrets", None, "default", None),
            ("list", "", "secrets", None, None, None),
            ("create", "", "secrets", None, "cert-manager", None),
            ("update", "", "secrets", None, "cert-manager", None),
            ("delete", "", "secrets", None, "cert-manager", None),
            ("get", "", "secrets", None, "istio-system", None),
            # ConfigMaps by server-side apply: no update.
            ("update", "", "configmaps", None, "default", None),
            # Bundles: status only.
            ("update", "trust.cert-manager.io", "bundles", None, None, None),
            ("delete", "trust.cert-manager.io", "bundles", None, None, None),
            ("create", "trust.cert-manager.io", "bundles", None, None, None),
            # Workloads, the API, RBAC.
            ("create", "", "pods", None, "cert-manager", None),
            ("delete", "apiextensions.k8s.io", "customresourcedefinitions", None, None, None),
            ("escalate", "rbac.authorization.k8s.io", "clusterroles", None, None, None),
            ("bind", "rbac.authorization.k8s.io", "clusterroles", None, None, None),
            ("create", "rbac.authorization.k8s.io", "rolebindings", None, "cert-manager", None),
            ("impersonate", "", "serviceaccounts", None, None, None),
            ("create", "authentication.k8s.io", "tokenreviews", None, None, None),
            # Leases: only in the trust namespace.
            ("create", "coordination.k8s.io", "leases", None, "istio-system", None),
            ("update", "coordination.k8s.io", "leases", None, "default", None),
            # signetd's things.
            ("sign", "certificates.k8s.io", "signers", None, None, "signetclusterissuers.signet.dev/*"),
            ("patch", "signet.dev", "signetissuers", "status", "default", None),
        ])


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
