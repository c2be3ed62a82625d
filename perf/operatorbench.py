#!/usr/bin/python3
"""signet-operator from resource to Ready: a private kube-apiserver with
kube-controller-manager (deployment and replicaset controllers), the
operator, and the test suite's simulated kubelet, which marks each operand
pod Ready as soon as the ReplicaSet creates it (no container runs: this
times the operator and the control plane, not signetd's start).

  perf/operatorbench.py [SIGNET_OPERATOR] [ROUNDS]
      (defaults: build-perf/operator/signet-operator, 5)

Each round:
  apply     an IstioCSR (the seed's sample, signed by a SignetIssuer) and
            the TrustManager (the seed's example: default CA package and
            expired-certificate filtering on) at once, until both read
            Ready=True: the time, and the operator's API writes and
            reconciles (its own metrics);
  change    logLevel 2 on both: until both are Ready=True again at the new
            generation (a new ReplicaSet rolls);
  quiet     10 s with nothing changing: writes must stay 0;
  delete    both resources: until every object the operator made is gone.
The output is one line per phase and round, then the medians, for
perf/README.md. Everything runs on 127.0.0.1 in a temporary folder removed
at the end.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
KUBE_SCRIPTS = os.path.join(TOP, "tests", "kube")
sys.path.insert(0, KUBE_SCRIPTS)
import kube_rest  # noqa: E402

OPERATOR = sys.argv[1] if len(sys.argv) > 1 else os.path.join(TOP, "build-perf", "operator", "signet-operator")
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
MANIFESTS = os.path.join(TOP, "packaging", "kubernetes")
CSR_NS, ISTIO, TRUST_OPERAND = "istio-csr", "istio-system", "cert-manager"
CR_CSR = f"/apis/operator.openshift.io/v1alpha1/namespaces/{CSR_NS}/istiocsrs/default"
CR_TM = "/apis/operator.openshift.io/v1alpha1/trustmanagers/cluster"


def metric(port, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


def counts(port):
    w = sum(metric(port, f"signet_operator_{k}_writes_total") for k in ("istiocsr", "trustmanager"))
    r = sum(metric(port, f'signet_controller_reconciles_total{{controller="{k}",result="success"}}')
            for k in ("istiocsr", "trustmanager"))
    return w, r


def ready_at(k, path, generation=None):
    o = k.get(path)
    for c in (o or {}).get("status", {}).get("conditions", []):
        if c["type"] == "Ready" and c["status"] == "True" and c.get("observedGeneration") == \
                o["metadata"]["generation"] and (generation is None or o["metadata"]["generation"] >= generation):
            return True
    return False


class Kubelet(threading.Thread):
    """Marks every operand pod Ready once it exists (the test suite's
    simulated kubelet, kube_rest.Kube.pod_ready)."""

    def __init__(self, k):
        super().__init__(daemon=True)
        self.k, self.stop = k, threading.Event()

    def run(self):
        while not self.stop.is_set():
            for ns in (CSR_NS, TRUST_OPERAND):
                for p in self.k.list_pods(ns):
                    conds = {c["type"]: c["status"] for c in p.get("status", {}).get("conditions", [])}
                    if conds.get("Ready") != "True" and not p["metadata"].get("deletionTimestamp"):
                        try:
                            self.k.pod_ready(ns, p["metadata"]["name"])
                        except AssertionError:
                            pass  # deleted meanwhile
            time.sleep(0.05)


def main():
    tmp = tempfile.mkdtemp(prefix="operatorbench.")
    api = os.path.join(tmp, "api")
    os.mkdir(api)
    subprocess.run([os.path.join(KUBE_SCRIPTS, "build-apiserver.sh")], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([os.path.join(KUBE_SCRIPTS, "apiserver.sh"), "start", api], check=True, stdout=subprocess.DEVNULL,
                   env=dict(os.environ, KUBE_CONTROLLER_MANAGER="1"))
    proc = None
    kubelet = None
    try:
        env = dict(line.split("=", 1) for line in open(os.path.join(api, "env")).read().splitlines() if "=" in line)
        k = kube_rest.Kube(env)
        k.apply_crds(os.path.join(MANIFESTS, "operator-crds.yaml"))
        k.apply_crds(os.path.join(MANIFESTS, "base", "crds.yaml"))
        for ns in (CSR_NS, ISTIO, TRUST_OPERAND):
            k.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        k.ok("POST", f"/apis/signet.dev/v1alpha1/namespaces/{ISTIO}/signetissuers",
             {"apiVersion": "signet.dev/v1alpha1", "kind": "SignetIssuer", "metadata": {"name": "mesh"}, "spec": {}})
        k.ok("POST", f"/api/v1/namespaces/{CSR_NS}/secrets",
             {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "signet-hsm"},
              "data": {"signetd.conf": "aHNtLXRva2VuID0gcGtjczExOnRva2VuPXNpZ25ldAo=", "pin": "MTIzNA=="}})
        log = open(os.path.join(tmp, "operator.log"), "w")
        proc = subprocess.Popen([OPERATOR, "--kubeconfig", env["KUBECONFIG"], "--signetd-image", "signetd:bench",
                                 "--signet-trust-image", "signet-trust:bench", "--leader-elect=false",
                                 "--metrics-port=0", "--readiness-probe-port=0", "--log-format=json",
                                 "--log-level=info"], stdout=log, stderr=subprocess.STDOUT)
        port = None
        deadline = time.time() + 20
        while not port and time.time() < deadline:
            for line in open(os.path.join(tmp, "operator.log")):
                rec = json.loads(line) if line.startswith("{") else {}
                if rec.get("msg") == "metrics endpoint":
                    port = rec["port"]
            time.sleep(0.1)
        assert port, "the operator did not start"
        kubelet = Kubelet(k)
        kubelet.start()
        rows = {"apply": [], "change": [], "delete": []}
        for rnd in range(1, ROUNDS + 1):
            w0, r0 = counts(port)
            t0 = time.monotonic()
            k.ok("POST", f"/apis/operator.openshift.io/v1alpha1/namespaces/{CSR_NS}/istiocsrs",
                 {"apiVersion": "operator.openshift.io/v1alpha1", "kind": "IstioCSR",
                  "metadata": {"name": "default", "namespace": CSR_NS},
                  "spec": {"istioCSRConfig": {
                      "certManager": {"issuerRef": {"name": "mesh", "kind": "SignetIssuer", "group": "signet.dev"}},
                      "istiodTLSConfig": {"trustDomain": "cluster.local"}, "istio": {"namespace": ISTIO}}}})
            k.ok("POST", "/apis/operator.openshift.io/v1alpha1/trustmanagers",
                 {"apiVersion": "operator.openshift.io/v1alpha1", "kind": "TrustManager",
                  "metadata": {"name": "cluster"},
                  "spec": {"trustManagerConfig": {"logLevel": 1, "logFormat": "text",
                                                  "trustNamespace": TRUST_OPERAND,
                                                  "defaultCAPackage": {"policy": "Enabled"},
                                                  "filterExpiredCertificates": "Enabled"}}})
            kube_rest.wait_for("both Ready", lambda: ready_at(k, CR_CSR) and ready_at(k, CR_TM), 120, 0.02)
            t = time.monotonic() - t0
            w1, r1 = counts(port)
            rows["apply"].append((t, w1 - w0, r1 - r0))
            print(f"round {rnd} apply: {t:.2f} s to Ready, {w1 - w0:.0f} writes, {r1 - r0:.0f} reconciles", flush=True)

            t0 = time.monotonic()
            g_csr = k.ok("PATCH", CR_CSR, {"spec": {"istioCSRConfig": {"logLevel": 2}}},
                         "application/merge-patch+json")["metadata"]["generation"]
            g_tm = k.ok("PATCH", CR_TM, {"spec": {"trustManagerConfig": {"logLevel": 2}}},
                        "application/merge-patch+json")["metadata"]["generation"]
            kube_rest.wait_for("both Ready again",
                               lambda: ready_at(k, CR_CSR, g_csr) and ready_at(k, CR_TM, g_tm), 120, 0.02)
            t = time.monotonic() - t0
            w2, r2 = counts(port)
            rows["change"].append((t, w2 - w1, r2 - r1))
            print(f"round {rnd} change: {t:.2f} s to Ready, {w2 - w1:.0f} writes, {r2 - r1:.0f} reconciles",
                  flush=True)

            time.sleep(10)
            w3, r3 = counts(port)
            print(f"round {rnd} quiet: 10 s, {w3 - w2:.0f} writes, {r3 - r2:.0f} reconciles", flush=True)

            t0 = time.monotonic()
            k.ok("DELETE", CR_CSR)
            k.ok("DELETE", CR_TM)
            kube_rest.wait_for("everything gone", lambda: k.get(CR_CSR) is None and k.get(CR_TM) is None and
                               k.get(f"/apis/apps/v1/namespaces/{CSR_NS}/deployments/cert-manager-istio-csr") is None
                               and k.get(f"/apis/apps/v1/namespaces/{TRUST_OPERAND}/deployments/trust-manager")
                               is None, 120, 0.02)
            t = time.monotonic() - t0
            w4, r4 = counts(port)
            rows["delete"].append((t, w4 - w3, r4 - r3))
            print(f"round {rnd} delete: {t:.2f} s, {w4 - w3:.0f} writes", flush=True)
        for phase, vals in rows.items():
            print(f"median {phase}: {statistics.median(v[0] for v in vals):.2f} s, "
                  f"{statistics.median(v[1] for v in vals):.0f} writes, "
                  f"{statistics.median(v[2] for v in vals):.0f} reconciles")
    finally:
        if kubelet:
            kubelet.stop.set()
        if proc:
            proc.terminate()
            proc.wait(timeout=30)
        subprocess.run([os.path.join(KUBE_SCRIPTS, "apiserver.sh"), "stop", api], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
