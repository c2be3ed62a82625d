#!/usr/bin/python3
"""signetd in a Kubernetes cluster: a real kube-apiserver and etcd
(tests/kube/apiserver.sh), tokens minted by the API server (TokenRequest),
Python's grpcio as the client and `openssl verify` on every chain.

  - both token modes (tokenreview, jwks with keys discovered from the API
    server): a pod-bound istio-ca token gets a certificate; another
    audience, a deleted (or re-created) service account and an expired
    token are refused;
  - node authorization: a trusted node agent impersonates only identities
    of pods on its own node;
  - TokenReviews are not held back by the controllers' client limit
    (--kube-api-qps 1): distinct tokens, each reviewed once, faster than
    that limit could let them through; and a flood of them does not starve
    the controllers (a new namespace gets its root ConfigMap meanwhile);
  - istio-ca-root-cert ConfigMaps: in selected namespaces only, repaired
    after deletion or edits, following a root change, no write loop;
  - signet-ca-roots in the trust namespace (created after signetd), for
    trust bundles, following a root change;
  - istiod's certificate Secret;
  - Secret external-ca-cert in istiod's namespace (--istiod-ra-root-secret),
    the roots istiod's RA reads: made, repaired after edits, following a
    root change;
  - two replicas: one leader writes; killing it hands over within 20 s;
  - the API server restarted under a running signetd: it recovers;
  - RA mode without an HSM (--hsm=false, from a config file): the serving
    certificate comes from the issuer, clients trusting only the issuer's
    CA connect and get workload certificates; no CA, HSM or pool metrics;
    settings that would need signet's CA are refused by name;
  - RA mode: a test issuer (a small controller here, signing cert-manager
    CertificateRequests of its own issuer group with Python's
    cryptography) answers; chains come back to the gRPC client and verify
    with `openssl verify`; requests are deleted afterwards; a denied
    request is INTERNAL; an issuer that never answers gives the client its
    deadline error and leaves no request behind;
  - the Kubernetes CSR signer with two aliases in istiod's per-signer form
    (CERT_SIGNER_DOMAIN/ISTIO_META_CERT_SIGNER), each served by its
    SignetClusterIssuer and CA: CSRs shaped as istiod's RA creates them
    are signed, and the default CA's chain verifies against the root in
    external-ca-cert, as istiod checks it.

usage: test_kube_e2e.py SIGNETCTL SIGNETD PROTO_DIR KUBE_SCRIPTS
"""
import base64
import concurrent.futures
import datetime
import json
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

import threading

import grpc
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding
from cryptography.x509.oid import ExtensionOID, NameOID

SIGNETCTL, SIGNETD, PROTO_DIR, KUBE_SCRIPTS = sys.argv[1:5]
del sys.argv[1:5]

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, KUBE_SCRIPTS)
import kube_rest  # noqa: E402
import signet_e2e  # noqa: E402
from signet_e2e import make_csr, read, spiffe  # noqa: E402

UNAUTH = grpc.StatusCode.UNAUTHENTICATED
ROOT_CM = "istio-ca-root-cert"
ROOTS_CM = "signet-ca-roots"  # --roots-configmap's default, in --trust-namespace (cert-manager)
RA_SECRET = "external-ca-cert"  # --istiod-ra-root-secret-name's default, in --istiod-cert-namespace
LEASE = "/apis/coordination.k8s.io/v1/namespaces/istio-system/leases/signet"


wait_for = kube_rest.wait_for


class Kube(kube_rest.Kube):
    """The shared client (tests/kube/kube_rest.py), with what this test adds."""

    def namespace(self, name, labels=None):
        self.ok("POST", "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}})

    def label_namespace(self, name, labels):
        self.ok("PATCH", f"/api/v1/namespaces/{name}", {"metadata": {"labels": labels}},
                "application/merge-patch+json")

    def service_account(self, ns, name):
        return self.ok("POST", f"/api/v1/namespaces/{ns}/serviceaccounts",
                       {"apiVersion": "v1", "kind": "ServiceAccount",
                        "metadata": {"name": name}})["metadata"]["uid"]

    def pod(self, ns, name, sa, node):
        """A Pod bound to node (nothing runs it: there is no kubelet)."""
        return self.ok("POST", f"/api/v1/namespaces/{ns}/pods",
                       {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                        "spec": {"serviceAccountName": sa, "nodeName": node,
                                 "containers": [{"name": "c", "image": "none"}]}})["metadata"]["uid"]

    def token(self, ns, sa, audience="istio-ca", pod=None, seconds=600):
        spec = {"audiences": [audience], "expirationSeconds": seconds}
        if pod:
            spec["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1", "name": pod[0], "uid": pod[1]}
        doc = self.ok("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token",
                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
        return doc["status"]["token"]

    def authenticates(self, token, audience="istio-ca"):
        """The API server's own TokenReview verdict on token."""
        doc = self.ok("POST", "/apis/authentication.k8s.io/v1/tokenreviews",
                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                       "spec": {"token": token, "audiences": [audience]}})
        return bool(doc.get("status", {}).get("authenticated"))

    def configmap(self, ns, name=ROOT_CM):
        code, doc = self.req("GET", f"/api/v1/namespaces/{ns}/configmaps/{name}")
        return doc if code == 200 else None

    def delete(self, path):
        code, doc = self.req("DELETE", path)
        assert code in (200, 202, 404), f"DELETE {path}: {code} {doc.get('message')}"

    def lease_holder(self):
        code, doc = self.req("GET", LEASE)
        return doc.get("spec", {}).get("holderIdentity", "") if code == 200 else ""


class Cluster:
    """The API server, a CA made by `signetctl init`, and the objects the
    tests share."""

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="kube-e2e.", dir=os.environ.get("SIGNET_TEST_TMP"))
        self.api_dir = os.path.join(self.tmp, "api")
        os.mkdir(self.api_dir)
        subprocess.run([os.path.join(KUBE_SCRIPTS, "build-apiserver.sh")], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([os.path.join(KUBE_SCRIPTS, "apiserver.sh"), "start", self.api_dir], check=True,
                       stdout=subprocess.DEVNULL)
        # Stopped even when the rest of the set-up fails (tearDownModule
        # would not run then).
        unittest.addModuleCleanup(subprocess.run, [os.path.join(KUBE_SCRIPTS, "apiserver.sh"), "stop", self.api_dir],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.env = {}
        for line in read(os.path.join(self.api_dir, "env")).splitlines():
            if "=" in line:
                k, v = line.split("=", 1)
                self.env[k] = v
        self.kube = Kube(self.env)
        signet_e2e.compile_proto(PROTO_DIR, self.tmp)
        import ca_pb2
        import ca_pb2_grpc
        self.pb, self.pb_grpc = ca_pb2, ca_pb2_grpc
        self.dir = os.path.join(self.tmp, "ca")
        subprocess.run([SIGNETCTL, "init", "--dir", self.dir, "--log-level", "warn"], check=True,
                       stdout=subprocess.DEVNULL)
        # The config signetctl init wrote, without its development token
        # issuer: in a cluster the tokens are the API server's.
        self.conf = os.path.join(self.dir, "kube.conf")
        with open(os.path.join(self.dir, "signet.conf")) as src, open(self.conf, "w") as f:
            f.writelines(line for line in src if not line.startswith(("jwt-issuer", "jwt-jwks-file")))
        self.root_file = os.path.join(self.dir, "root-cert.pem")
        self.root = read(self.root_file, "rb")
        k = self.kube
        k.namespace("istio-system")
        k.namespace("apps", {"istio-injection": "enabled"})
        k.namespace("plain")
        k.service_account("istio-system", "ztunnel")
        k.service_account("apps", "app1")
        k.service_account("apps", "app2")
        self.ztunnel_pod = ("ztunnel-n1", k.pod("istio-system", "ztunnel-n1", "ztunnel", "n1"))
        self.app1_pod = ("app1-n1", k.pod("apps", "app1-n1", "app1", "n1"))
        k.pod("apps", "app2-n2", "app2", "n2")

    def close(self, keep):
        # Stopped here, before its folder may go (the module cleanup above
        # only covers a failed set-up: it finds nothing to stop after this).
        subprocess.run([os.path.join(KUBE_SCRIPTS, "apiserver.sh"), "stop", self.api_dir],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not keep:
            shutil.rmtree(self.tmp, ignore_errors=True)
        else:
            print(f"kept {self.tmp}", file=sys.stderr)

    def signetd(self, *flags, env_extra=None, ca_trusted="istio-system/ztunnel"):
        env = dict(os.environ)
        env.pop("KUBERNETES_SERVICE_HOST", None)
        env.update(env_extra or {})
        return signet_e2e.Signetd(SIGNETD, self.conf, "--kubeconfig", self.env["KUBECONFIG"],
                                  "--ca-trusted-node-accounts", ca_trusted, *flags, env=env)

    def channel(self, port):
        creds = grpc.ssl_channel_credentials(root_certificates=self.root)
        return grpc.secure_channel(f"127.0.0.1:{port}", creds,
                                   options=[("grpc.ssl_target_name_override", "localhost")])

    def metric(self, d, name):
        with urllib.request.urlopen(f"http://127.0.0.1:{d.metrics_port}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " ") or line.startswith(name + "{"):
                    return float(line.rsplit(" ", 1)[1])
        return None


C = None


def setUpModule():
    global C
    C = Cluster()


def tearDownModule():
    ok = RESULTS and all(not r.failures and not r.errors for r in RESULTS)
    C.close(keep=not ok)


RESULTS = []


class Base(unittest.TestCase):
    def run(self, result=None):
        result = super().run(result)
        if result is not None:
            RESULTS.append(result)
        return result

    def call(self, stub, token, identity, impersonate=None):
        req = C.pb.IstioCertificateRequest(csr=make_csr(identity), validity_duration=3600)
        if impersonate:
            req.metadata.update({"ImpersonatedIdentity": impersonate})
        md = [("authorization", f"Bearer {token}")] if token else []
        return list(stub.CreateCertificate(req, metadata=md, timeout=30).cert_chain)

    def refused(self, stub, token, identity, impersonate=None, code=UNAUTH):
        with self.assertRaises(grpc.RpcError) as cm:
            self.call(stub, token, identity, impersonate)
        self.assertEqual(cm.exception.code(), code, cm.exception.details())
        return cm.exception.details()

    def verified(self, chain, identity, root=None):
        self.assertGreaterEqual(len(chain), 2)
        self.assertEqual(chain[-1].encode(), root or C.root)
        path = os.path.join(C.tmp, f"chain.{time.time_ns()}.pem")
        with open(path, "w") as f:
            f.write("".join(chain))
        v = subprocess.run(["openssl", "verify", "-CAfile", C.root_file, path], capture_output=True, text=True)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        leaf = x509.load_pem_x509_certificate(chain[0].encode())
        san = leaf.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value
        self.assertEqual(san.get_values_for_type(x509.UniformResourceIdentifier), [identity])


class OneSignetd(Base):
    """One signetd for the class (started with FLAGS), a channel and a
    stub to it; it must exit cleanly at the end."""

    FLAGS = ()

    @classmethod
    def setUpClass(cls):
        cls.d = C.signetd(*cls.FLAGS)
        cls.ch = C.channel(cls.d.port)
        cls.stub = C.pb_grpc.IstioCertificateServiceStub(cls.ch)

    @classmethod
    def tearDownClass(cls):
        cls.ch.close()
        rc = cls.d.stop()
        assert rc == 0, f"signetd exited {rc}:\n{cls.d.text()}"


def api_server_refuses(tok):
    """Where signet's verdict is the API server's (TokenReview mode, and
    auto's legacy and Secret-bound tokens), its answer is cached for
    token-cache-ttl, and the API server checks the account, pod or Secret
    in its own informer caches, which on a loaded machine may not have seen
    a deletion yet: a "yes" given then would stand for minutes. So a test
    of a revoked token calls signet once the API server itself says no
    (the revocation is then as fresh as signet can make it)."""
    wait_for("the API server to refuse the token", lambda: not C.kube.authenticates(tok) or None, timeout=60)


class TokenModes:
    """The same checks in both token modes (mixed into two classes)."""

    MODE = None

    def test_mode_in_use(self):
        logged = [r for r in self.d.records() if r.get("msg") == "token authentication"]
        self.assertTrue(logged and logged[0]["method"].startswith(self.MODE), logged)

    def test_pod_bound_token_gets_a_certificate(self):
        tok = C.kube.token("apps", "app1", pod=C.app1_pod)
        ident = spiffe("apps", "app1")
        self.verified(self.call(self.stub, tok, ident), ident)
        hits = C.metric(self.d, "signet_tokenreview_cache_hits_total")
        self.verified(self.call(self.stub, tok, ident), ident)
        if self.MODE == "tokenreview":  # the second time from the cache
            self.assertEqual(C.metric(self.d, "signet_tokenreview_cache_hits_total"), hits + 1)

    def test_plain_token_gets_a_certificate(self):
        tok = C.kube.token("apps", "app2")
        self.verified(self.call(self.stub, tok, spiffe("apps", "app2")), spiffe("apps", "app2"))

    def test_other_audience_is_refused(self):
        tok = C.kube.token("apps", "app1", audience="https://kubernetes.default.svc.cluster.local")
        self.refused(self.stub, tok, spiffe("apps", "app1"))

    def test_identity_must_match_the_token(self):
        tok = C.kube.token("apps", "app1")
        self.refused(self.stub, tok, spiffe("apps", "app2"))

    def api_server_refuses(self, tok):
        if self.MODE == "tokenreview":
            api_server_refuses(tok)

    def test_deleted_bound_pod_is_refused(self):
        name = f"doomed-{type(self).__name__.lower()}"
        pod = (name, C.kube.pod("apps", name, "app1", "n1"))
        tok = C.kube.token("apps", "app1", pod=pod)
        ident = spiffe("apps", "app1")
        # Accepted first where the answer is not cached for token-cache-ttl
        # (a TokenReview answer is: its revocation is as fresh as that TTL),
        # so that the refusal below is a revocation, not a first refusal.
        if self.MODE != "tokenreview":
            self.verified(self.call(self.stub, tok, ident), ident)
        # At once (grace period 0): no kubelet runs here to end a graceful
        # deletion, which would leave the pod with a deletionTimestamp, and
        # both the API server and signet refuse only 60 s after that.
        C.kube.delete(f"/api/v1/namespaces/apps/pods/{name}?gracePeriodSeconds=0")
        self.api_server_refuses(tok)

        def refused():
            try:
                self.call(self.stub, tok, ident)
                return None
            except grpc.RpcError as e:
                return e.details() if e.code() == UNAUTH else None
        msg = wait_for("the deleted pod's token to be refused", refused, timeout=60)
        self.assertTrue(any(w in msg for w in ("no longer exists", "not found", "invalidated")), msg)
        # A token bound to a pod that still exists is fine.
        live = C.kube.token("apps", "app1", pod=C.app1_pod)
        self.verified(self.call(self.stub, live, ident), ident)

    def test_deleted_service_account_is_refused(self):
        sa = f"gone-{type(self).__name__.lower()}"
        C.kube.service_account("apps", sa)
        tok = C.kube.token("apps", sa)
        C.kube.delete(f"/api/v1/namespaces/apps/serviceaccounts/{sa}")
        self.api_server_refuses(tok)

        def refused():
            try:
                self.call(self.stub, tok, spiffe("apps", sa))
                return None
            except grpc.RpcError as e:
                return e.details() if e.code() == UNAUTH else None
        # The API server refuses at once; the local check may take the
        # watch event's few milliseconds to see the deletion.
        msg = wait_for("the deleted account's token to be refused", refused, timeout=60)
        self.assertTrue(any(w in msg for w in ("no longer exists", "not found", "invalidated")), msg)
        # The same kind of token of an account that still exists is fine.
        self.verified(self.call(self.stub, C.kube.token("apps", "app2"), spiffe("apps", "app2")),
                      spiffe("apps", "app2"))

    def test_recreated_service_account_does_not_revive_old_tokens(self):
        sa = f"again-{type(self).__name__.lower()}"
        C.kube.service_account("apps", sa)
        tok = C.kube.token("apps", sa)
        C.kube.delete(f"/api/v1/namespaces/apps/serviceaccounts/{sa}")
        C.kube.service_account("apps", sa)  # same name, new uid

        def refused():
            try:
                self.call(self.stub, tok, spiffe("apps", sa))
                return False
            except grpc.RpcError as e:
                return e.code() == UNAUTH
        wait_for("the old token to be refused", refused, timeout=60)
        fresh = C.kube.token("apps", sa)
        self.verified(self.call(self.stub, fresh, spiffe("apps", sa)), spiffe("apps", sa))

    def test_garbage_and_missing_tokens_are_refused(self):
        self.refused(self.stub, "not-a-token", spiffe("apps", "app1"))
        self.refused(self.stub, None, spiffe("apps", "app1"))

    def test_node_agent_impersonates_pods_on_its_node_only(self):
        tok = C.kube.token("istio-system", "ztunnel", pod=C.ztunnel_pod)
        app1, app2 = spiffe("apps", "app1"), spiffe("apps", "app2")
        self.verified(self.call(self.stub, tok, app1, impersonate=app1), app1)
        msg = self.refused(self.stub, tok, app2, impersonate=app2)
        self.assertIn("node", msg)
        # Without a pod claim there is no node to check against.
        plain = C.kube.token("istio-system", "ztunnel")
        self.refused(self.stub, plain, app1, impersonate=app1)
        # An untrusted caller cannot impersonate at all.
        app_tok = C.kube.token("apps", "app2")
        self.refused(self.stub, app_tok, app1, impersonate=app1)

    def test_expired_token_is_refused(self):
        """A token the cluster's own key signed, as the API server makes
        them, whose exp has passed (TokenRequest cannot make one shorter
        than 10 minutes)."""
        tok = expired(C.kube.token("apps", "app1"))
        msg = self.refused(self.stub, tok, spiffe("apps", "app1"))
        self.assertIn("expired", msg)


def b64url_json(part):
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def expired(token):
    """token with exp two minutes ago, re-signed with the API server's
    service-account key (RS256), everything else unchanged."""
    head, body, _ = token.split(".")
    claims = b64url_json(body)
    now = int(time.time())
    claims.update({"exp": now - 120, "iat": now - 720, "nbf": now - 720})
    key = serialization.load_pem_private_key(read(os.path.join(C.api_dir, "sa.key"), "rb"), None)
    signing_input = head + "." + signet_e2e.b64url(json.dumps(claims).encode())
    sig = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return signing_input + "." + signet_e2e.b64url(sig)


class TokenReviewMode(TokenModes, OneSignetd):
    MODE = "tokenreview"
    FLAGS = ("--token-authenticator", MODE, "--root-ca-configmap=false")


class ReviewBudget(OneSignetd):
    """TokenReviews have their own budget: the controllers' client limit
    (here 1 request a second, a burst of 1) neither delays them nor is
    eaten by them."""

    N = 40
    FLAGS = ("--token-authenticator", "tokenreview", "--kube-api-qps", "1", "--kube-api-burst", "1",
             "--configmap-namespace-selector", "signet-budget=on")

    def test_reviews_are_not_held_by_the_controllers_limit(self):
        C.kube.service_account("apps", "mesh")
        # A token per pod: one account, each token with its own expiration.
        toks = [C.kube.token("apps", "mesh", seconds=600 + i) for i in range(self.N)]
        self.assertEqual(len(set(toks)), self.N)
        ident = spiffe("apps", "mesh")
        before = C.metric(self.d, "signet_tokenreview_requests_total")
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            chains = list(ex.map(lambda t: self.call(self.stub, t, ident), toks))
        elapsed = time.monotonic() - t0
        for chain in chains:
            self.verified(chain, ident)
        reviews = C.metric(self.d, "signet_tokenreview_requests_total") - before
        self.assertEqual(reviews, self.N)  # each token reviewed once
        # A limiter of 1 a second with a burst of 1 lets at most 1 + elapsed
        # requests through in the time these took: more reviews than that
        # went through, so none of them waited on it (whatever the load
        # on this machine made elapsed).
        self.assertGreater(reviews, 1 + elapsed, f"{reviews} reviews in {elapsed:.1f} s")
        self.assertEqual(C.metric(self.d, "signet_tokenreview_throttled_total"), 0)
        self.assertEqual(C.metric(self.d, "signet_tokenreview_in_flight"), 0)
        budget = C.metric(self.d, "signet_tokenreview_budget")
        self.assertTrue(1 <= budget <= 64, budget)  # --token-review-max-inflight's default

    def test_review_flood_does_not_starve_the_controllers(self):
        C.kube.service_account("apps", "flood")
        ident = spiffe("apps", "flood")
        stop = threading.Event()
        answered, errors = [], []

        def flood(base):
            i = 0
            while not stop.is_set():
                try:
                    self.call(self.stub, C.kube.token("apps", "flood", seconds=base + i), ident)
                    answered.append(1)
                except Exception as e:  # noqa: BLE001 (reported below)
                    errors.append(repr(e))
                i += 1

        threads = [threading.Thread(target=flood, args=(700 + 1000 * n,)) for n in range(4)]
        for t in threads:
            t.start()
        try:
            wait_for("the flood to be under way", lambda: len(answered) >= 8, timeout=60)
            C.kube.namespace("budget-ns", {"signet-budget": "on"})
            wait_for("the root ConfigMap in a new namespace during the flood",
                     lambda: C.kube.configmap("budget-ns"), timeout=60)
            during = len(answered)
        finally:
            stop.set()
            for t in threads:
                t.join()
        self.assertEqual(errors, [])
        self.assertGreater(during, 8)  # reviews went on while the controller wrote


class JwksMode(TokenModes, OneSignetd):
    MODE = "jwks"
    FLAGS = ("--token-authenticator", MODE, "--root-ca-configmap=false")


def legacy_token(ns, sa, secret):
    """A legacy Secret-based token as the token controller makes them (no
    controller runs here): iss kubernetes/serviceaccount, no exp, no aud,
    signed with the API server's service-account key, and the Secret that
    holds it (the API server compares the token with the Secret's)."""
    uid = C.kube.get(f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}")["metadata"]["uid"]
    head = C.kube.token(ns, sa).split(".")[0]  # the same alg and kid
    claims = {"iss": "kubernetes/serviceaccount",
              "kubernetes.io/serviceaccount/namespace": ns,
              "kubernetes.io/serviceaccount/secret.name": secret,
              "kubernetes.io/serviceaccount/service-account.name": sa,
              "kubernetes.io/serviceaccount/service-account.uid": uid,
              "sub": f"system:serviceaccount:{ns}:{sa}"}
    key = serialization.load_pem_private_key(read(os.path.join(C.api_dir, "sa.key"), "rb"), None)
    signing_input = head + "." + signet_e2e.b64url(json.dumps(claims).encode())
    sig = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    tok = signing_input + "." + signet_e2e.b64url(sig)
    C.kube.ok("POST", f"/api/v1/namespaces/{ns}/secrets",
              {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
               "metadata": {"name": secret, "annotations": {"kubernetes.io/service-account.name": sa,
                                                            "kubernetes.io/service-account.uid": uid}},
               "data": {"token": base64.b64encode(tok.encode()).decode()}})
    return tok


class AutoMode(TokenModes, OneSignetd):
    """The default: where the API server's OIDC discovery answers, its own
    tokens are verified locally (and their bound objects checked against
    the informer), and any other token goes to a TokenReview."""

    MODE = "jwks"  # what auto chose: the method's log line starts with it
    FLAGS = ("--root-ca-configmap=false",)  # no --token-authenticator: auto

    def test_auto_chose_jwks_and_says_why(self):
        logged = [r for r in self.d.records() if r.get("msg", "").startswith("token-authenticator auto:")]
        self.assertEqual(len(logged), 1, logged)
        self.assertIn("jwks for the API server's tokens", logged[0]["msg"])
        self.assertEqual(logged[0].get("issuer"), C.env["KUBE_SA_ISSUER"])
        self.assertEqual(C.metric(self.d, "signet_token_authenticator_jwks"), 1)

    def test_bound_tokens_are_verified_locally(self):
        reviews = C.metric(self.d, "signet_tokenreview_requests_total")
        local = C.metric(self.d, "signet_token_auto_local_total")
        ident = spiffe("apps", "app2")
        for i in range(3):  # distinct tokens: none is a cache hit
            self.verified(self.call(self.stub, C.kube.token("apps", "app2", seconds=700 + i), ident), ident)
        self.assertEqual(C.metric(self.d, "signet_tokenreview_requests_total"), reviews)
        self.assertEqual(C.metric(self.d, "signet_token_auto_local_total"), local + 3)

    def test_legacy_token_goes_to_tokenreview(self):
        tok = legacy_token("apps", "app2", "app2-legacy")
        reviews = C.metric(self.d, "signet_tokenreview_requests_total")
        routed = C.metric(self.d, "signet_token_auto_review_total")
        ident = spiffe("apps", "app2")
        self.verified(self.call(self.stub, tok, ident), ident)
        self.assertEqual(C.metric(self.d, "signet_tokenreview_requests_total"), reviews + 1)
        self.assertEqual(C.metric(self.d, "signet_token_auto_review_total"), routed + 1)
        # A forged legacy token (another key) is asked of the API server too,
        # which refuses it: routing by the unverified issuer trusts nothing.
        head, body, _ = tok.split(".")
        forged = head + "." + body + "." + signet_e2e.b64url(b"\0" * 256)
        self.refused(self.stub, forged, ident)
        self.assertEqual(C.metric(self.d, "signet_token_auto_review_total"), routed + 2)

    def test_secret_bound_token_goes_to_tokenreview(self):
        """signet's informer holds no Secrets: a token bound to one is the
        API server's to judge, so that a deleted Secret is refused."""
        def secret_token(name):
            uid = C.kube.ok("POST", "/api/v1/namespaces/apps/secrets",
                            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}})["metadata"]["uid"]
            doc = C.kube.ok("POST", "/api/v1/namespaces/apps/serviceaccounts/app2/token",
                            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                             "spec": {"audiences": ["istio-ca"], "expirationSeconds": 600,
                                      "boundObjectRef": {"kind": "Secret", "apiVersion": "v1", "name": name,
                                                         "uid": uid}}})
            return doc["status"]["token"]
        ident = spiffe("apps", "app2")
        routed = C.metric(self.d, "signet_token_auto_review_total")
        self.verified(self.call(self.stub, secret_token("bound-live"), ident), ident)
        self.assertEqual(C.metric(self.d, "signet_token_auto_review_total"), routed + 1)
        tok = secret_token("bound-gone")
        C.kube.delete("/api/v1/namespaces/apps/secrets/bound-gone")
        api_server_refuses(tok)
        self.refused(self.stub, tok, ident)
        self.assertEqual(C.metric(self.d, "signet_token_auto_review_total"), routed + 2)

    def test_legacy_token_of_a_deleted_secret_is_refused(self):
        tok = legacy_token("apps", "app2", "app2-legacy-gone")
        C.kube.delete("/api/v1/namespaces/apps/secrets/app2-legacy-gone")
        api_server_refuses(tok)
        self.refused(self.stub, tok, spiffe("apps", "app2"))


class AutoWithoutDiscovery(OneSignetd):
    """auto where the API server's OIDC discovery does not answer (here: a
    user RBAC does not let read it, 403): every token goes to a TokenReview,
    and the log line and the metric say so."""

    FLAGS = ("--root-ca-configmap=false",)

    @classmethod
    def setUpClass(cls):
        k = C.kube
        k.ok("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles",
             {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
              "metadata": {"name": "signet-nodisc"},
              "rules": [{"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"],
                         "verbs": ["create"]},
                        {"apiGroups": [""], "resources": ["pods", "serviceaccounts", "configmaps", "namespaces"],
                         "verbs": ["get", "list", "watch"]},
                        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                         "verbs": ["get", "list", "watch", "create", "update"]}]})
        k.ok("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
             {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
              "metadata": {"name": "signet-nodisc"},
              "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "signet-nodisc"},
              "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "signet-user"}]})
        # The admin kubeconfig with the unprivileged user's token.
        cfg = yaml.safe_load(read(C.env["KUBECONFIG"]))
        cfg["users"][0]["user"]["token"] = read(C.env["KUBE_USER_TOKEN_FILE"]).strip()
        path = os.path.join(C.tmp, "nodisc.kubeconfig")
        with open(path, "w") as f:
            yaml.safe_dump(cfg, f)
        os.chmod(path, 0o600)
        env = dict(os.environ)
        env.pop("KUBERNETES_SERVICE_HOST", None)
        cls.d = signet_e2e.Signetd(SIGNETD, C.conf, "--kubeconfig", path, "--ca-trusted-node-accounts",
                                   "istio-system/ztunnel", *cls.FLAGS, env=env)
        cls.ch = C.channel(cls.d.port)
        cls.stub = C.pb_grpc.IstioCertificateServiceStub(cls.ch)

    def test_falls_back_to_tokenreview(self):
        logged = [r for r in self.d.records() if r.get("msg", "").startswith("token-authenticator auto:")]
        self.assertEqual(len(logged), 1, logged)
        self.assertIn("tokenreview for every token", logged[0]["msg"])
        self.assertIn("reason", logged[0])
        self.assertEqual(C.metric(self.d, "signet_token_authenticator_jwks"), 0)
        reviews = C.metric(self.d, "signet_tokenreview_requests_total")
        ident = spiffe("apps", "app2")
        self.verified(self.call(self.stub, C.kube.token("apps", "app2"), ident), ident)
        self.assertEqual(C.metric(self.d, "signet_tokenreview_requests_total"), reviews + 1)


def other_root():
    """A self-signed certificate to add to the root bundle."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "next root")])
    now = datetime.datetime.utcnow()
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


class Writers(Base):
    """One signetd that leads alone: ConfigMaps, istiod's Secret, restart."""

    @classmethod
    def setUpClass(cls):
        cls.root_file = os.path.join(C.tmp, "bundle.pem")
        shutil.copy(C.root_file, cls.root_file)
        cls.d = C.signetd("--configmap-namespace-selector", "istio-injection=enabled",
                          "--root-ca-file", cls.root_file, "--istiod-cert-enabled",
                          "--istiod-cert-key-algorithm", "ECDSA", "--istiod-cert-key-size", "256",
                          "--istiod-cert-istio-revisions", "default,canary", "--istiod-ra-root-secret")
        cls.ch = C.channel(cls.d.port)
        cls.stub = C.pb_grpc.IstioCertificateServiceStub(cls.ch)

    @classmethod
    def tearDownClass(cls):
        cls.ch.close()
        rc = cls.d.stop()
        assert rc == 0, f"signetd exited {rc}:\n{cls.d.text()}"
        # On SIGTERM the leader released the Lease.
        assert C.kube.lease_holder() == "", C.kube.lease_holder()

    def bundle(self):
        return read(self.root_file)

    def cm_ok(self, ns):
        cm = C.kube.configmap(ns)
        return cm if (cm and cm.get("data") == {"root-cert.pem": self.bundle()}
                      and cm["metadata"].get("labels", {}).get("istio.io/config") == "true") else None

    def test_a_configmaps_in_selected_namespaces_only(self):
        wait_for("istio-ca-root-cert in apps", lambda: self.cm_ok("apps"))
        time.sleep(1)  # and none elsewhere: an absence, so a fixed quiet time
        self.assertIsNone(C.kube.configmap("plain"))
        self.assertIsNone(C.kube.configmap("istio-system"))
        C.kube.namespace("late")
        C.kube.label_namespace("late", {"istio-injection": "enabled"})
        wait_for("istio-ca-root-cert in a namespace labelled later", lambda: self.cm_ok("late"))

    def test_b_repaired_after_deletion_and_edits(self):
        wait_for("istio-ca-root-cert in apps", lambda: self.cm_ok("apps"))
        C.kube.delete(f"/api/v1/namespaces/apps/configmaps/{ROOT_CM}")
        wait_for("the deleted ConfigMap to come back", lambda: self.cm_ok("apps"))
        C.kube.ok("PATCH", f"/api/v1/namespaces/apps/configmaps/{ROOT_CM}",
                  {"metadata": {"labels": {"istio.io/config": None, "team": "a"}},
                   "data": {"root-cert.pem": "tampered", "extra": "x"}}, "application/merge-patch+json")
        cm = wait_for("the edited ConfigMap to be repaired", lambda: self.cm_ok("apps"))
        self.assertEqual(cm["metadata"]["labels"].get("team"), "a")  # what users add is kept

    def test_c_no_write_loop(self):
        cm = wait_for("istio-ca-root-cert in apps", lambda: self.cm_ok("apps"))
        # The echoes of its own writes reconciled: nothing left queued. A
        # reconcile counts its write after the write, which the waits above
        # may have seen, and one in progress is not queued: the count is
        # taken once it held still for a look with the queue empty.
        looks = []

        def writes_settled():
            n = C.metric(self.d, "signet_root_configmap_writes_total")
            depth = C.metric(self.d, 'signet_controller_queue_depth{controller="rootdist"}')
            still = depth == 0 and looks and looks[-1] == n
            looks.append(n if depth == 0 else None)
            return (n,) if still else None
        (writes,) = wait_for("the rootdist controller's queue empty and its writes counted", writes_settled,
                             interval=0.5)
        rv = C.kube.configmap("apps")["metadata"]["resourceVersion"]
        time.sleep(3)  # no write: an absence, so a fixed quiet time
        self.assertEqual(C.kube.configmap("apps")["metadata"]["resourceVersion"], rv)
        self.assertEqual(C.metric(self.d, "signet_root_configmap_writes_total"), writes)
        self.assertIsNotNone(cm)

    def roots_published(self, bundle):
        cm = C.kube.configmap("cert-manager", ROOTS_CM)
        return cm if (cm and cm.get("data") == {"ca.crt": bundle}
                      and cm["metadata"].get("labels", {}).get("signet.dev/ca-roots") == "true") else None

    def test_d_follows_a_root_change(self):
        wait_for("istio-ca-root-cert in apps", lambda: self.cm_ok("apps"))
        # The trust namespace comes after signetd: the roots are published there.
        C.kube.namespace("cert-manager")
        wait_for(f"{ROOTS_CM} in the trust namespace", lambda: self.roots_published(self.bundle()))
        new = C.root + other_root()
        with open(self.root_file + ".tmp", "wb") as f:
            f.write(new)
        os.replace(self.root_file + ".tmp", self.root_file)
        wait_for("the ConfigMap to carry the new bundle",
                 lambda: (C.kube.configmap("apps") or {}).get("data", {}).get("root-cert.pem") == new.decode())
        wait_for(f"{ROOTS_CM} to carry both roots", lambda: self.roots_published(new.decode()))
        wait_for(f"{RA_SECRET} to carry both roots", lambda: ra_roots(new))
        tok = C.kube.token("apps", "app1")
        chain = self.call(self.stub, tok, spiffe("apps", "app1"))
        self.assertEqual(chain[-1].encode(), new)  # clients get the new bundle, as one element

    def test_e_istiod_certificate(self):
        def secret():
            code, doc = C.kube.req("GET", "/api/v1/namespaces/istio-system/secrets/istiod-tls")
            return doc if code == 200 else None
        s = wait_for("Secret istiod-tls", secret)
        self.assertEqual(s["type"], "kubernetes.io/tls")
        data = {k: base64.b64decode(v) for k, v in s["data"].items()}
        path = os.path.join(C.tmp, "istiod.pem")
        with open(path, "wb") as f:
            f.write(data["tls.crt"])
        v = subprocess.run(["openssl", "verify", "-CAfile", C.root_file, path], capture_output=True, text=True)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        leaf = x509.load_pem_x509_certificate(data["tls.crt"])
        san = leaf.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value
        self.assertEqual(set(san.get_values_for_type(x509.DNSName)),
                         {"istiod.istio-system.svc", "istiod-canary.istio-system.svc"})
        self.assertEqual(san.get_values_for_type(x509.UniformResourceIdentifier),
                         [spiffe("istio-system", "istiod-service-account")])
        key = serialization.load_pem_private_key(data["tls.key"], None)
        self.assertEqual(key.public_key().public_numbers(), leaf.public_key().public_numbers())
        self.assertIn(b"-----BEGIN CERTIFICATE-----", data["ca.crt"])
        C.kube.delete("/api/v1/namespaces/istio-system/secrets/istiod-tls")
        wait_for("Secret istiod-tls to come back", secret)

    def test_e_istiod_ra_roots(self):
        s = wait_for(f"Secret {RA_SECRET}", lambda: ra_roots(read(self.root_file, "rb")))
        self.assertEqual(s["type"], "Opaque")
        self.assertEqual(s["metadata"]["labels"].get("signet.dev/ca-roots"), "true")
        C.kube.ok("PATCH", f"/api/v1/namespaces/istio-system/secrets/{RA_SECRET}",
                  {"metadata": {"labels": {"team": "mesh"}},
                   "data": {"root-cert.pem": base64.b64encode(b"tampered").decode(), "extra": "eA=="}},
                  "application/merge-patch+json")
        s = wait_for(f"the edited {RA_SECRET} to be repaired", lambda: ra_roots(read(self.root_file, "rb")))
        self.assertEqual(s["metadata"]["labels"].get("team"), "mesh")
        C.kube.delete(f"/api/v1/namespaces/istio-system/secrets/{RA_SECRET}")
        wait_for(f"Secret {RA_SECRET} to come back", lambda: ra_roots(read(self.root_file, "rb")))
        # A write is counted once its answer is back, which may be after
        # the test has seen the object: create, repair, re-create.
        wait_for("the three writes counted",
                 lambda: C.metric(self.d, "signet_istiod_ra_roots_writes_total") >= 3)

    def test_f_api_server_restart(self):
        wait_for("istio-ca-root-cert in apps", lambda: self.cm_ok("apps"))
        subprocess.run([os.path.join(KUBE_SCRIPTS, "apiserver.sh"), "restart-apiserver", C.api_dir], check=True,
                       stdout=subprocess.DEVNULL)
        # TokenReview works again (new token: not in the cache) ...
        def issued():
            try:
                return self.call(self.stub, C.kube.token("apps", "app2"), spiffe("apps", "app2"))
            except grpc.RpcError:
                return None
        wait_for("a certificate after the restart", issued, timeout=60)
        # ... and the watches resumed: edits are repaired, new namespaces served.
        C.kube.delete(f"/api/v1/namespaces/apps/configmaps/{ROOT_CM}")
        wait_for("repair after the restart", lambda: self.cm_ok("apps"), timeout=60)
        C.kube.namespace("after-restart", {"istio-injection": "enabled"})
        wait_for("a new namespace served after the restart", lambda: self.cm_ok("after-restart"), timeout=60)


def ra_roots(bundle):
    """Secret external-ca-cert when it holds exactly bundle (bytes) under
    root-cert.pem, else None."""
    code, doc = C.kube.req("GET", f"/api/v1/namespaces/istio-system/secrets/{RA_SECRET}")
    if code != 200 or doc.get("data") != {"root-cert.pem": base64.b64encode(bundle).decode()}:
        return None
    return doc


class Replicas(Base):
    def test_one_leader_and_handover(self):
        """Both replicas serve; exactly one writes; a killed leader (no
        release) is replaced once its Lease expires. A candidate counts the
        lease duration from when it last saw the record change and looks
        every retry period (x1.2 jitter), so the handover takes up to
        lease + 2 x 1.2 x retry: 15 + 4.8 s with client-go's defaults, 10 +
        2.4 s with the timings used here."""
        timings = ("--leader-election-lease-duration", "10s", "--leader-election-renew-deadline", "7s",
                   "--leader-election-retry-period", "1s")
        a = C.signetd("--configmap-namespace-selector", "istio-injection=enabled", *timings)
        self.addCleanup(a.stop)
        b = C.signetd("--configmap-namespace-selector", "istio-injection=enabled", *timings)
        self.addCleanup(b.stop)
        for d in (a, b):
            ch = C.channel(d.port)
            stub = C.pb_grpc.IstioCertificateServiceStub(ch)
            self.verified(self.call(stub, C.kube.token("apps", "app1"), spiffe("apps", "app1")),
                          spiffe("apps", "app1"))
            ch.close()

        def one_leader():
            la, lb = C.metric(a, "signet_leader"), C.metric(b, "signet_leader")
            self.assertFalse(la == 1 and lb == 1, "two leaders")
            return (a, b) if la == 1 else (b, a) if lb == 1 else None
        leader, follower = wait_for("a leader", one_leader, timeout=30)
        C.kube.delete(f"/api/v1/namespaces/apps/configmaps/{ROOT_CM}")
        wait_for("the leader's repair", lambda: C.kube.configmap("apps"))
        for _ in range(10):  # never two leaders
            one_leader()
            time.sleep(0.1)
        self.assertEqual(C.metric(follower, "signet_root_configmap_writes_total"), 0)
        # Kill the leader (no release): the follower takes over when the
        # Lease expires (see the docstring for the bound).
        holder = C.kube.lease_holder()
        t0 = time.time()
        leader.proc.send_signal(signal.SIGKILL)
        leader.proc.wait()
        wait_for("the follower to lead", lambda: C.metric(follower, "signet_leader") == 1, timeout=25,
                 interval=0.1)
        took = time.time() - t0
        self.assertLess(took, 20, f"handover took {took:.1f}s")
        self.assertNotEqual(C.kube.lease_holder(), holder)
        C.kube.delete(f"/api/v1/namespaces/apps/configmaps/{ROOT_CM}")
        wait_for("the new leader's repair", lambda: C.kube.configmap("apps"))
        print(f"handover in {took:.1f}s", file=sys.stderr)


TEST_GROUP = "test-issuer.example.com"
RA_NS = "ra-mode"
CR_PATH = f"/apis/cert-manager.io/v1/namespaces/{RA_NS}/certificaterequests"


class TestIssuer:
    """An issuer for RA mode: signs CertificateRequests whose issuerRef
    group is TEST_GROUP with a CA of its own, as fast as it can (a LIST
    every 20 ms: the test's issuer may poll; signet may not). Modes:
    "sign", "deny" (Denied=True, as an approver would), "silent"."""

    def __init__(self):
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test issuer root")])
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(minutes=5))
                     .not_valid_after(now + datetime.timedelta(days=30))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.pem = self.cert.public_bytes(serialization.Encoding.PEM)
        self.mode = "sign"
        self.intermediates = 0  # CAs between the root and the leaf
        self.chains = {}
        self.annotations = {}  # each request's, by name
        self.lifetimes = {}  # seconds to issue for, by identity annotation, whatever the request asks
        self.seen = set()
        self.signed = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def chain(self, n):
        """n intermediate CAs under the root: the last one's key and
        certificate, and the PEM of all n, nearest to the leaf first."""
        if n not in self.chains:
            key, cert, pems = self.key, self.cert, []
            now = datetime.datetime.now(datetime.timezone.utc)
            for i in range(n):
                k = ec.generate_private_key(ec.SECP256R1())
                name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"test intermediate {i + 1}")])
                cert = (x509.CertificateBuilder().subject_name(name).issuer_name(cert.subject)
                        .public_key(k.public_key()).serial_number(x509.random_serial_number())
                        .not_valid_before(now - datetime.timedelta(minutes=5))
                        .not_valid_after(now + datetime.timedelta(days=30))
                        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                        .sign(key, hashes.SHA256()))
                key = k
                pems.insert(0, cert.public_bytes(serialization.Encoding.PEM))
            self.chains[n] = (key, cert, b"".join(pems))
        return self.chains[n]

    def sign(self, csr_pem, seconds):
        csr = x509.load_pem_x509_csr(csr_pem)
        now = datetime.datetime.now(datetime.timezone.utc)
        san = csr.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME)
        key, cert, intermediates = self.chain(self.intermediates)
        leaf = (x509.CertificateBuilder().subject_name(x509.Name([])).issuer_name(cert.subject)
                .public_key(csr.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now).not_valid_after(now + datetime.timedelta(seconds=seconds))
                .add_extension(san.value, critical=True)
                .sign(key, hashes.SHA256()))
        return leaf.public_bytes(serialization.Encoding.PEM) + intermediates

    def run(self):
        while not self.stop.is_set():
            code, doc = C.kube.req("GET", CR_PATH)
            for cr in doc.get("items", []) if code == 200 else []:
                name = cr["metadata"]["name"]
                if name in self.seen or cr["spec"]["issuerRef"].get("group") != TEST_GROUP:
                    continue
                if self.mode == "silent":
                    continue
                self.seen.add(name)
                self.annotations[name] = cr["metadata"].get("annotations", {})
                if self.mode == "deny":
                    cond = {"type": "Denied", "status": "True", "reason": "test", "message": "the test says no",
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}
                    C.kube.req("PATCH", f"{CR_PATH}/{name}/status", {"status": {"conditions": [cond]}},
                               "application/merge-patch+json")
                    continue
                seconds = int(cr["spec"]["duration"].rstrip("s"))
                seconds = self.lifetimes.get(self.annotations[name].get("istio.cert-manager.io/identities"), seconds)
                leaf = self.sign(base64.b64decode(cr["spec"]["request"]), seconds)
                self.signed += 1  # before the answer can reach anyone
                cond = {"type": "Ready", "status": "True", "reason": "Issued", "message": "signed by the test",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}
                C.kube.req("PATCH", f"{CR_PATH}/{name}/status",
                           {"status": {"certificate": base64.b64encode(leaf).decode(), "conditions": [cond]}},
                           "application/merge-patch+json")
            self.stop.wait(0.02)


RA_READY = []


def ra_cluster():
    """The CertificateRequest API and RA_NS, once for the RA classes."""
    if RA_READY:
        return
    with open(os.path.join(os.path.dirname(KUBE_SCRIPTS), "controllers", "fixtures",
                           "certificaterequests.crd.yaml")) as f:
        crd = yaml.safe_load(f)
    code, doc = C.kube.req("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    assert code in (201, 409), f"CRD: {code} {doc.get('message')}"
    wait_for("the CertificateRequest API", lambda: C.kube.req("GET", CR_PATH.replace(RA_NS, "default"))[0] == 200)
    C.kube.namespace(RA_NS)
    RA_READY.append(True)


class RAMode(Base):
    """signetd forwarding to a cert-manager issuer (istio-csr's mode)."""

    @classmethod
    def setUpClass(cls):
        ra_cluster()
        cls.issuer = TestIssuer()
        # The mesh roots: the issuer's root (workload certificates) and
        # signet's own (its serving certificate).
        cls.roots = os.path.join(C.tmp, "ra-roots.pem")
        with open(cls.roots, "wb") as f:
            f.write(C.root + cls.issuer.pem)
        cls.d = C.signetd("--issuer-name", "test", "--issuer-kind", "TestIssuer", "--issuer-group", TEST_GROUP,
                          "--certificate-namespace", RA_NS, "--root-ca-file", cls.roots,
                          "--server-timeout", "3s", "--root-ca-configmap=false",
                          # istio-csr's form: with several '=', one CSV record
                          "--certificate-request-additional-annotations",
                          'custom.cert-manager.io/policy-name=istio-csr,"example.com/teams=mesh,edge"')
        cls.ch = C.channel(cls.d.port)
        cls.stub = C.pb_grpc.IstioCertificateServiceStub(cls.ch)

    @classmethod
    def tearDownClass(cls):
        cls.issuer.stop.set()
        cls.issuer.thread.join()
        cls.ch.close()
        rc = cls.d.stop()
        assert rc == 0, f"signetd exited {rc}:\n{cls.d.text()}"

    def ours(self):
        code, doc = C.kube.req("GET", CR_PATH)
        return [i for i in doc.get("items", []) if i["metadata"]["name"].startswith("signet-")]

    def test_answered_and_cleaned_up(self):
        self.issuer.mode = "sign"
        before = self.issuer.signed
        identity = spiffe("apps", "app1")
        chain = self.call(self.stub, C.kube.token("apps", "app1"), identity)
        self.assertEqual(self.issuer.signed, before + 1)
        self.assertEqual(len(chain), 2)  # the issuer's leaf, then the root bundle
        self.assertEqual(chain[-1].encode(), C.root + self.issuer.pem)
        path = os.path.join(C.tmp, f"ra-chain.{time.time_ns()}.pem")
        with open(path, "w") as f:
            f.write(chain[0])
        issuer_root = os.path.join(C.tmp, "ra-issuer-root.pem")
        with open(issuer_root, "wb") as f:
            f.write(self.issuer.pem)
        v = subprocess.run(["openssl", "verify", "-CAfile", issuer_root, path], capture_output=True, text=True)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        leaf = x509.load_pem_x509_certificate(chain[0].encode())
        san = leaf.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value
        self.assertEqual(san.get_values_for_type(x509.UniformResourceIdentifier), [identity])
        # the workload asked 3600 s: that is the request's duration
        lifetime = leaf.not_valid_after - leaf.not_valid_before
        self.assertEqual(int(lifetime.total_seconds()), 3600)
        wait_for("the request's deletion", lambda: not self.ours())
        self.assertEqual(C.metric(self.d, "signet_forward_in_flight"), 0)
        self.assertGreaterEqual(C.metric(self.d, "signet_forward_issued_total"), 1)

    def test_additional_annotations(self):
        """istio-csr's --certificate-request-additional-annotations: on
        every request, beside the identity annotation."""
        self.issuer.mode = "sign"
        before = set(self.issuer.annotations)
        identity = spiffe("apps", "app1")
        self.call(self.stub, C.kube.token("apps", "app1"), identity)
        names = set(self.issuer.annotations) - before
        self.assertEqual(len(names), 1)
        self.assertEqual(self.issuer.annotations[names.pop()],
                         {"istio.cert-manager.io/identities": identity,
                          "custom.cert-manager.io/policy-name": "istio-csr",
                          "example.com/teams": "mesh,edge"})

    def test_chain_at_and_over_the_limit(self):
        """An issuer's chain the answer cannot carry whole is an error the
        caller sees (INTERNAL, as any bad answer), never a chain cut
        short; one at the limit is carried whole."""
        self.addCleanup(setattr, self.issuer, "intermediates", 0)
        self.issuer.mode = "sign"
        token, identity = C.kube.token("apps", "app1"), spiffe("apps", "app1")
        self.issuer.intermediates = 11  # leaf + 11 = SG_SERVICE_CHAIN_MAX, then the root bundle
        chain = self.call(self.stub, token, identity)
        self.assertEqual(len(chain), 13)
        want = [b"-----BEGIN" + p for p in self.issuer.chain(11)[2].split(b"-----BEGIN")[1:]]
        self.assertEqual([x509.load_pem_x509_certificate(c.encode()) for c in chain[1:12]],
                         [x509.load_pem_x509_certificate(p) for p in want])
        self.issuer.intermediates = 12
        details = self.refused(self.stub, token, identity, code=grpc.StatusCode.INTERNAL)
        self.assertIn("failed to sign certificate request", details)
        self.assertIn("the issuer returned 13 certificates", details)
        wait_for("the request's deletion", lambda: not self.ours())

    def test_denied(self):
        self.issuer.mode = "deny"
        self.addCleanup(setattr, self.issuer, "mode", "sign")
        details = self.refused(self.stub, C.kube.token("apps", "app1"), spiffe("apps", "app1"),
                               code=grpc.StatusCode.INTERNAL)
        self.assertIn("failed to sign certificate request", details)
        self.assertIn("the test says no", details)
        wait_for("the request's deletion", lambda: not self.ours())

    def test_policy_still_applies(self):
        """A CSR for another identity is refused before anything is created."""
        n = C.metric(self.d, "signet_forward_api_calls_total")
        self.refused(self.stub, C.kube.token("apps", "app1"), spiffe("apps", "app2"))
        self.assertEqual(C.metric(self.d, "signet_forward_api_calls_total"), n)

    def test_silent_issuer(self):
        self.issuer.mode = "silent"
        self.addCleanup(setattr, self.issuer, "mode", "sign")
        req = C.pb.IstioCertificateRequest(csr=make_csr(spiffe("apps", "app1")), validity_duration=3600)
        md = [("authorization", f"Bearer {C.kube.token('apps', 'app1')}")]
        t0 = time.time()
        with self.assertRaises(grpc.RpcError) as cm:
            self.stub.CreateCertificate(req, metadata=md, timeout=1.5)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertLess(time.time() - t0, 5)
        # nothing leaks: the request goes, nothing waits
        wait_for("the request's deletion", lambda: not self.ours(), timeout=60)
        wait_for("nothing in flight", lambda: C.metric(self.d, "signet_forward_in_flight") == 0)
        self.assertGreaterEqual(C.metric(self.d, "signet_forward_timeouts_total"), 1)
        # without a client deadline: the server's (--server-timeout, 3 s here)
        t0 = time.time()
        with self.assertRaises(grpc.RpcError) as cm:
            self.stub.CreateCertificate(req, metadata=md)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED, cm.exception.details())
        self.assertLess(time.time() - t0, 8)
        wait_for("the request's deletion", lambda: not self.ours(), timeout=60)


class RANoHSM(Base):
    """signetd --hsm=false: a pure RA with no HSM and no CA of its own, as
    the operator runs it for an IstioCSR that names a cert-manager issuer.
    Its settings come from a config file that names no HSM (hsm = false
    and the issuer there, flags beside them); its serving certificate is
    the issuer's (a CertificateRequest whose identity annotation is the
    DNS names), so a client that trusts only the issuer's CA connects;
    workload certificates come back with the issuer's CA as the root
    bundle; nothing of a CA, HSM or signer pool shows in the metrics; what
    would need signet's own CA is refused by name at start."""

    @classmethod
    def setUpClass(cls):
        ra_cluster()
        cls.issuer = TestIssuer()
        # Its serving certificate lives 30 s, whatever signetd asks (at
        # least 5 minutes): renewed at 20 s, within the class.
        cls.issuer.lifetimes["localhost"] = 30
        cls.roots = os.path.join(C.tmp, "no-hsm-roots.pem")
        with open(cls.roots, "wb") as f:
            f.write(cls.issuer.pem)
        cls.conf = os.path.join(C.tmp, "no-hsm.conf")
        with open(cls.conf, "w") as f:
            f.write(f"hsm = false\nissuer-name = test\nissuer-kind = TestIssuer\nissuer-group = {TEST_GROUP}\n"
                    f"certificate-namespace = {RA_NS}\nroot-ca-file = {cls.roots}\n"
                    "cert-manager-issuer = false\nkube-csr-signer = false\n")
        env = dict(os.environ)
        env.pop("KUBERNETES_SERVICE_HOST", None)
        cls.d = signet_e2e.Signetd(SIGNETD, cls.conf, "--kubeconfig", C.env["KUBECONFIG"],
                                   "--serving-certificate-dns-names", "localhost", "--root-ca-configmap=false",
                                   "--server-timeout", "5s", env=env)
        creds = grpc.ssl_channel_credentials(root_certificates=cls.issuer.pem)  # the issuer's CA, nothing else
        cls.ch = grpc.secure_channel(f"127.0.0.1:{cls.d.port}", creds,
                                     options=[("grpc.ssl_target_name_override", "localhost")])
        cls.stub = C.pb_grpc.IstioCertificateServiceStub(cls.ch)

    @classmethod
    def tearDownClass(cls):
        cls.issuer.stop.set()
        cls.issuer.thread.join()
        cls.ch.close()
        rc = cls.d.stop()
        assert rc == 0, f"signetd exited {rc}:\n{cls.d.text()}"

    def ours(self):
        code, doc = C.kube.req("GET", CR_PATH)
        return [i for i in doc.get("items", []) if i["metadata"]["name"].startswith("signet-")]

    def test_serving_certificate_from_the_issuer(self):
        recs = [r for r in self.d.records() if r.get("msg") == "serving certificate issued"]
        self.assertGreaterEqual(len(recs), 1, self.d.text())
        self.assertEqual((recs[0].get("by"), recs[0].get("dns")), ("cert-manager issuer", "localhost"))
        self.assertTrue(any(r.get("msg", "").startswith("no HSM (hsm=false)") for r in self.d.records()))
        self.assertIn("localhost", [a.get("istio.cert-manager.io/identities")
                                    for a in self.issuer.annotations.values()])
        wait_for("the serving certificate's request deleted", lambda: not self.ours())

    def test_workload_certificate(self):
        identity = spiffe("apps", "app1")
        chain = self.call(self.stub, C.kube.token("apps", "app1"), identity)
        self.assertEqual(len(chain), 2)  # the issuer's leaf, then the root bundle: the issuer's CA
        self.assertEqual(chain[-1].encode(), self.issuer.pem)
        path = os.path.join(C.tmp, f"no-hsm-chain.{time.time_ns()}.pem")
        with open(path, "w") as f:
            f.write(chain[0])
        v = subprocess.run(["openssl", "verify", "-CAfile", self.roots, path], capture_output=True, text=True)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        leaf = x509.load_pem_x509_certificate(chain[0].encode())
        san = leaf.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value
        self.assertEqual(san.get_values_for_type(x509.UniformResourceIdentifier), [identity])
        wait_for("the request's deletion", lambda: not self.ours())
        # another identity than the token's: refused before anything is sent
        self.refused(self.stub, C.kube.token("apps", "app1"), spiffe("apps", "app2"))

    def test_metrics_and_readiness_without_an_hsm(self):
        # Ready from the first housekeeping tick, which may come a moment
        # after the "signetd serving" record setUpClass waited for (2 ms
        # later in a CI run where this case came first and read 0).
        wait_for("signetd ready without an HSM", lambda: C.metric(self.d, "signet_ready") == 1 or None, timeout=30)
        for name in ("signet_hsm_up", "signet_hsm_state", "signet_hsm_signatures_total",
                     "citadel_server_root_cert_expiry_timestamp", "signet_signer_service_seconds"):
            self.assertIsNone(C.metric(self.d, name), name)
        self.assertGreater(C.metric(self.d, "signet_serving_cert_expiry_timestamp"), time.time())
        with urllib.request.urlopen(f"http://127.0.0.1:{self.d.probe_port}/healthz", timeout=10) as r:
            self.assertEqual(r.status, 200)

    def test_serving_certificate_renewed_through_the_issuer(self):
        """At two thirds of its life the serving certificate is asked of the
        issuer again; the new one serves new connections, and signetd
        stays ready throughout."""
        def renewed():
            recs = [r for r in self.d.records() if r.get("msg") == "serving certificate issued"]
            return recs if len(recs) >= 2 else None
        recs = wait_for("a renewed serving certificate", renewed, timeout=90)
        self.assertNotEqual(recs[0]["serial"], recs[1]["serial"])
        self.assertGreater(recs[1]["not_after"], recs[0]["not_after"])
        self.assertEqual(C.metric(self.d, "signet_ready"), 1)
        served = C.metric(self.d, "signet_serving_cert_expiry_timestamp")  # a later renewal may have come
        self.assertIn(served, [r["not_after"] for r in self.d.records() if r.get("msg") == "serving certificate issued"])
        creds = grpc.ssl_channel_credentials(root_certificates=self.issuer.pem)
        with grpc.secure_channel(f"127.0.0.1:{self.d.port}", creds,
                                 options=[("grpc.ssl_target_name_override", "localhost")]) as ch:
            stub = C.pb_grpc.IstioCertificateServiceStub(ch)
            identity = spiffe("apps", "app1")
            chain = self.call(stub, C.kube.token("apps", "app1"), identity)
            self.assertEqual(chain[-1].encode(), self.issuer.pem)
        self.assertFalse([r for r in self.d.records() if r.get("msg", "").startswith("the issuer did not issue")])

    def test_what_needs_a_ca_is_refused(self):
        base = [SIGNETD, "--config", self.conf, "--kubeconfig", C.env["KUBECONFIG"], "--serving-address",
                "127.0.0.1:0", "--metrics-port", "0", "--readiness-probe-port", "0"]
        for extra, why in ((["--istiod-cert-enabled"], "istiod-cert-enabled signs with signet's CA"),
                           (["--kube-csr-signer=true"], "set --kube-csr-signer=false"),
                           (["--issuer-cas", f"second={C.conf}"], "issuer-cas names CAs in an HSM"),
                           (["--issuer-name="], "--hsm=false needs issuer-name"),
                           (["--init-dir", os.path.join(C.tmp, "no-init")], "init-dir makes a CA in an HSM")):
            p = subprocess.run(base + extra, capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(why, p.stderr)
        conf = os.path.join(C.tmp, "no-hsm-no-roots.conf")
        with open(conf, "w") as f:
            f.write("hsm = false\nissuer-name = test\ncert-manager-issuer = false\nkube-csr-signer = false\n")
        p = subprocess.run([SIGNETD, "--config", conf], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--hsm=false needs root-ca-file", p.stderr)
        # flags override the file: --hsm=true reads the HSM settings again (none here)
        p = subprocess.run(base + ["--hsm=true", "--cert-manager-issuer=false"], capture_output=True, text=True,
                           timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertNotIn("no HSM (hsm=false)", p.stdout + p.stderr)


def apply_crds(path):
    with open(path) as f:
        for doc in yaml.safe_load_all(f):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            code, body = C.kube.req("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", doc)
            assert code in (201, 409), f"CRD {doc['metadata']['name']}: {code} {body.get('message')}"
            g, v = doc["spec"]["group"], doc["spec"]["versions"][0]["name"]
            plural = doc["spec"]["names"]["plural"]
            wait_for(f"{plural} served", lambda: C.kube.req("GET", f"/apis/{g}/{v}/{plural}")[0] == 200)


ISTIO_SIGNER = "clusterissuers.cert-manager.io/istio-system"
SECOND_SIGNER = "clusterissuers.cert-manager.io/second-mesh"


class IssuerCAs(Base):
    """signetd as a cert-manager issuer with two CAs: its own ("default")
    and a second key in the same token (signetctl init --hsm-module
    --key-label), named by --issuer-cas; a SignetIssuer picks one with
    spec.caName, and an approved CertificateRequest is signed by it."""

    NS = "issuer-cas"

    @classmethod
    def setUpClass(cls):
        top = os.path.dirname(os.path.dirname(KUBE_SCRIPTS))
        apply_crds(os.path.join(top, "packaging", "kubernetes", "base", "crds.yaml"))
        apply_crds(os.path.join(top, "tests", "controllers", "fixtures", "certificaterequests.crd.yaml"))
        C.kube.namespace(cls.NS)
        cls.second = os.path.join(C.tmp, "second-ca")
        env = dict(os.environ, SOFTHSM2_CONF=os.path.join(C.dir, "softhsm2.conf"))
        subprocess.run([SIGNETCTL, "init", "--dir", cls.second, "--hsm-module", os.environ["SIGNET_SOFTHSM_MODULE"],
                        "--pin-file", os.path.join(C.dir, "pin"), "--key-label", "second-key",
                        "--ca-name", "second CA", "--log-level", "warn"], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        cls.d = C.signetd("--issuer-cas", f"second={cls.second}/signet.conf", "--root-ca-configmap=false",
                          "--issuer-check-interval", "2s", "--istiod-ra-root-secret",
                          f"--kube-csr-signer-alias={ISTIO_SIGNER}=mesh-default, {SECOND_SIGNER}=mesh-second")

    @classmethod
    def tearDownClass(cls):
        rc = cls.d.stop()
        assert rc == 0, f"signetd exited {rc}:\n{cls.d.text()}"

    def issuer(self, name, ca):
        C.kube.ok("POST", f"/apis/signet.dev/v1alpha1/namespaces/{self.NS}/signetissuers",
                  {"apiVersion": "signet.dev/v1alpha1", "kind": "SignetIssuer", "metadata": {"name": name},
                   "spec": {"caName": ca}})

        def ready():
            code, doc = C.kube.req("GET", f"/apis/signet.dev/v1alpha1/namespaces/{self.NS}/signetissuers/{name}")
            conds = [c for c in (doc.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"]
            return conds and conds[0]
        return wait_for(f"issuer {name}'s Ready condition", ready)

    def test_each_ca_signs_for_its_issuers(self):
        self.assertIn("second", [r.get("name") for r in self.d.records() if r.get("msg") == "issuer CA ready"])
        self.assertEqual(self.issuer("unknown", "third")["reason"], "CANotFound")
        for issuer, ca, root in (("by-default", "default", C.root_file),
                                 ("by-second", "second", os.path.join(self.second, "root-cert.pem"))):
            cond = self.issuer(issuer, ca)
            self.assertEqual((cond["status"], cond["reason"]), ("True", "Checked"), cond)
            key = ec.generate_private_key(ec.SECP256R1())
            csr = (x509.CertificateSigningRequestBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "web.example.com")]))
                   .add_extension(x509.SubjectAlternativeName([x509.DNSName("web.example.com")]), critical=False)
                   .sign(key, hashes.SHA256()))
            pem = csr.public_bytes(serialization.Encoding.PEM)
            path = f"/apis/cert-manager.io/v1/namespaces/{self.NS}/certificaterequests"
            C.kube.ok("POST", path, {"apiVersion": "cert-manager.io/v1", "kind": "CertificateRequest",
                                     "metadata": {"name": issuer},
                                     "spec": {"request": base64.b64encode(pem).decode(), "duration": "24h",
                                              "issuerRef": {"name": issuer, "kind": "SignetIssuer",
                                                            "group": "signet.dev"}}})
            approved = {"type": "Approved", "status": "True", "reason": "test", "message": "approved by the test",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}
            C.kube.ok("PATCH", f"{path}/{issuer}/status", {"status": {"conditions": [approved]}},
                      "application/merge-patch+json")

            def issued():
                code, doc = C.kube.req("GET", f"{path}/{issuer}")
                return doc.get("status", {}).get("certificate")
            chain = base64.b64decode(wait_for(f"{issuer}'s certificate", issued))
            leaf_path = os.path.join(C.tmp, f"{issuer}.pem")
            with open(leaf_path, "wb") as f:
                f.write(chain)
            v = subprocess.run(["openssl", "verify", "-CAfile", root, leaf_path], capture_output=True, text=True)
            self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
            leaf = x509.load_pem_x509_certificate(chain)
            self.assertEqual(leaf.public_key().public_numbers(), key.public_key().public_numbers())

    def cluster_issuer(self, name, ca):
        C.kube.ok("POST", "/apis/signet.dev/v1alpha1/signetclusterissuers",
                  {"apiVersion": "signet.dev/v1alpha1", "kind": "SignetClusterIssuer", "metadata": {"name": name},
                   "spec": {"caName": ca, "defaultDuration": "1h"}})

        def ready():
            code, doc = C.kube.req("GET", f"/apis/signet.dev/v1alpha1/signetclusterissuers/{name}")
            conds = [c for c in (doc.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"]
            return conds and conds[0]["status"] == "True" and conds[0]
        return wait_for(f"cluster issuer {name} Ready", ready)

    def test_istiod_ra_csrs_per_signer(self):
        """Issue 30, items 5 to 7 through signetd's flags: istiod's RA
        (EXTERNAL_CA=ISTIOD_RA_KUBERNETES_API, CERT_SIGNER_DOMAIN
        clusterissuers.cert-manager.io, proxies with ISTIO_META_CERT_SIGNER
        istio-system or second-mesh) creates CSRs as chiron's SignCSRK8s
        does, approves them itself, reads the certificate, checks it against
        /etc/external-ca-cert/root-cert.pem and deletes the CSR."""
        self.cluster_issuer("mesh-default", "default")
        self.cluster_issuer("mesh-second", "second")
        secret = wait_for(f"Secret {RA_SECRET}", lambda: ra_roots(C.root))
        ra_root = os.path.join(C.tmp, "external-ca-cert.pem")
        with open(ra_root, "wb") as f:
            f.write(base64.b64decode(secret["data"]["root-cert.pem"]))
        path = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
        for signer, root, key in ((ISTIO_SIGNER, ra_root, "rsa"),
                                  (SECOND_SIGNER, os.path.join(self.second, "root-cert.pem"), "ec")):
            identity = spiffe("apps", "app1")
            made = C.kube.ok("POST", path, {
                "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
                "metadata": {"generateName": "csr-workload-"},
                "spec": {"request": base64.b64encode(make_csr(identity, key=key).encode()).decode(),
                         "signerName": signer, "expirationSeconds": 3600,
                         "usages": ["digital signature", "key encipherment", "server auth", "client auth"]}})
            name = made["metadata"]["name"]
            made["status"] = {"conditions": [{"type": "Approved", "status": "True", "reason": "approved",
                                              "message": f"CSR ({name}) for the certificate () is approved"}]}
            C.kube.ok("PUT", f"{path}/{name}/approval", made)

            def issued():
                code, doc = C.kube.req("GET", f"{path}/{name}")
                return (doc.get("status") or {}).get("certificate")
            chain = base64.b64decode(wait_for(f"{signer}'s certificate", issued))
            chain_path = os.path.join(C.tmp, f"{name}.pem")
            with open(chain_path, "wb") as f:
                f.write(chain)
            v = subprocess.run(["openssl", "verify", "-CAfile", root, chain_path], capture_output=True, text=True)
            self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
            leaf = x509.load_pem_x509_certificate(chain)
            san = leaf.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value
            self.assertEqual(san.get_values_for_type(x509.UniformResourceIdentifier), [identity])
            ku = leaf.extensions.get_extension_for_oid(ExtensionOID.KEY_USAGE).value
            self.assertTrue(ku.digital_signature and ku.key_encipherment)
            eku = leaf.extensions.get_extension_for_oid(ExtensionOID.EXTENDED_KEY_USAGE).value
            self.assertEqual(set(eku), {x509.oid.ExtendedKeyUsageOID.SERVER_AUTH,
                                        x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH})
            C.kube.delete(f"{path}/{name}")

    def test_bad_issuer_cas_refused(self):
        for value, why in (("default=" + C.conf, "own CA"), ("x", "name=config-file"),
                           ("Bad_Name=" + C.conf, "DNS label")):
            p = subprocess.run([SIGNETD, "--config", C.conf, "--kubeconfig", C.env["KUBECONFIG"],
                                "--serving-address", "127.0.0.1:0", "--metrics-port", "0",
                                "--readiness-probe-port", "0", "--issuer-cas", value],
                               capture_output=True, text=True, timeout=60)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn(why, p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
