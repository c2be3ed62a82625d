#!/usr/bin/python3
"""Trust bundles at scale: signet-trust against a private kube-apiserver
with N namespaces (default 500).

  perf/trustbench.py [SIGNET_TRUST] [N] [QPS]
      (defaults: build-perf/trust/signet-trust, 500, 50 = signet-trust's default client limit)

Phases, each timed and counted from signet-trust's own metrics (the API
writes it issued) and from the API server's view:
  converge  a Bundle of Debian's CAs plus one CA of ours, namespaceSelector
            matching all N namespaces: until every target exists and the
            Bundle reads Synced=True;
  quiet     30 s with nothing changing: writes must stay 0;
  change    a new CA added to the source ConfigMap: until every target
            holds it;
  relabel   half the namespaces lose the label: until their targets are
            gone.
Everything runs on 127.0.0.1 in a temporary folder removed at the end.
The output is one line per phase, for perf/README.md.
"""
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
TRUST = sys.argv[1] if len(sys.argv) > 1 else os.path.join(TOP, "build-perf", "trust", "signet-trust")
N = int(sys.argv[2]) if len(sys.argv) > 2 else 500
QPS = int(sys.argv[3]) if len(sys.argv) > 3 else 50
TRUST_NS = "tb-trust"
LABEL = "trustbench"


class Kube:
    def __init__(self, env):
        self.server = env["KUBE_APISERVER"]
        self.token = open(env["KUBE_TOKEN_FILE"]).read().strip()
        self.ctx = ssl.create_default_context(cafile=env["KUBE_CA_FILE"])

    def req(self, method, path, body=None, ctype="application/json"):
        data = json.dumps(body).encode() if body is not None else None
        r = urllib.request.Request(self.server + path, data=data, method=method,
                                   headers={"Authorization": f"Bearer {self.token}", "Content-Type": ctype})
        try:
            with urllib.request.urlopen(r, context=self.ctx, timeout=60) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, {}


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("signet_trust_") and " " in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def writes(m):
    return sum(m.get(k, 0) for k in ("signet_trust_target_writes_total", "signet_trust_target_cleanups_total",
                                     "signet_trust_target_deletes_total", "signet_trust_status_writes_total"))


def ca(tmp, name):
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", f"{tmp}/{name}.key", "-out", f"{tmp}/{name}.pem", "-subj", f"/CN={name}", "-days", "2",
                    "-addext", "basicConstraints=critical,CA:TRUE"], check=True, capture_output=True)
    return open(f"{tmp}/{name}.pem").read()


def main():
    tmp = tempfile.mkdtemp(prefix="trustbench.")
    api = os.path.join(tmp, "api")
    os.mkdir(api)
    proc = None
    try:
        subprocess.run([os.path.join(TOP, "tests/kube/build-apiserver.sh")], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([os.path.join(TOP, "tests/kube/apiserver.sh"), "start", api], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        env = dict(line.split("=", 1) for line in open(os.path.join(api, "env")).read().splitlines() if "=" in line)
        k = Kube(env)
        for doc in yaml.safe_load_all(open(os.path.join(TOP, "packaging/kubernetes/base/trust-crds.yaml"))):
            if doc:
                k.req("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", doc)
        while k.req("GET", "/apis/trust.cert-manager.io/v1alpha1/bundles")[0] != 200:
            time.sleep(0.2)
        k.req("POST", "/api/v1/namespaces", {"metadata": {"name": TRUST_NS}})
        for i in range(N):
            k.req("POST", "/api/v1/namespaces", {"metadata": {"name": f"tb-{i:04d}", "labels": {LABEL: "yes"}}})
        pkg = os.path.join(tmp, "debian.json")
        subprocess.run([TRUST, "package", "--version", "bench", "--output", pkg], check=True)
        ca1 = ca(tmp, "bench-ca-1")
        k.req("POST", f"/api/v1/namespaces/{TRUST_NS}/configmaps",
              {"metadata": {"name": "bench-ca"}, "data": {"ca.crt": ca1}})
        log = open(os.path.join(tmp, "trust.log"), "w")
        port = 19402
        proc = subprocess.Popen([TRUST, "--kubeconfig", env["KUBECONFIG"], "--trust-namespace", TRUST_NS,
                                 "--default-package-location", pkg, "--leader-elect=false",
                                 f"--kube-api-qps={QPS}", f"--kube-api-burst={2 * QPS}",
                                 f"--metrics-port={port}", f"--readiness-probe-port={port}", "--log-level=warn"],
                                stdout=log, stderr=subprocess.STDOUT)
        while True:
            try:
                metrics(port)
                break
            except OSError:
                time.sleep(0.1)

        def targets(contains=None):
            code, doc = k.req("GET", "/api/v1/configmaps?labelSelector=trust.cert-manager.io/bundle%3Dbench")
            items = doc.get("items", []) if code == 200 else []
            if contains:
                items = [i for i in items if contains in i.get("data", {}).get("ca-certificates.crt", "")]
            return len(items)

        def phase(name, start_fn, done_fn, limit=900):
            m0 = metrics(port)
            t0 = time.monotonic()
            start_fn()
            while not done_fn():
                if time.monotonic() - t0 > limit:
                    raise SystemExit(f"trustbench: {name} did not finish in {limit}s")
                time.sleep(0.1)
            dt = time.monotonic() - t0
            m1 = metrics(port)
            print(f"trustbench {name}: N={N} qps={QPS} {dt:.1f} s, writes {writes(m1) - writes(m0):.0f} "
                  f"(targets {m1.get('signet_trust_target_writes_total', 0) - m0.get('signet_trust_target_writes_total', 0):.0f}, "
                  f"status {m1.get('signet_trust_status_writes_total', 0) - m0.get('signet_trust_status_writes_total', 0):.0f}, "
                  f"cleanups {m1.get('signet_trust_target_cleanups_total', 0) - m0.get('signet_trust_target_cleanups_total', 0):.0f}, "
                  f"deletes {m1.get('signet_trust_target_deletes_total', 0) - m0.get('signet_trust_target_deletes_total', 0):.0f})",
                  flush=True)

        bundle = {"apiVersion": "trust.cert-manager.io/v1alpha1", "kind": "Bundle", "metadata": {"name": "bench"},
                  "spec": {"sources": [{"useDefaultCAs": True}, {"configMap": {"name": "bench-ca", "key": "ca.crt"}}],
                           "target": {"configMap": {"key": "ca-certificates.crt"},
                                      "namespaceSelector": {"matchLabels": {LABEL: "yes"}}}}}

        def synced():
            code, b = k.req("GET", "/apis/trust.cert-manager.io/v1alpha1/bundles/bench")
            conds = b.get("status", {}).get("conditions", [])
            return any(c.get("type") == "Synced" and c.get("status") == "True" for c in conds)
        phase("converge", lambda: k.req("POST", "/apis/trust.cert-manager.io/v1alpha1/bundles", bundle),
              lambda: targets() == N and synced())
        quiet_until = [0.0]
        phase("quiet-30s", lambda: quiet_until.__setitem__(0, time.monotonic() + 30),
              lambda: time.monotonic() >= quiet_until[0])
        ca2 = ca(tmp, "bench-ca-2")
        marker = ca2.splitlines()[1]
        phase("change", lambda: k.req("PATCH", f"/api/v1/namespaces/{TRUST_NS}/configmaps/bench-ca",
                                      {"data": {"ca.crt": ca1 + ca2}}, "application/merge-patch+json"),
              lambda: targets(marker) == N)

        def unlabel():
            for i in range(0, N, 2):
                k.req("PATCH", f"/api/v1/namespaces/tb-{i:04d}", {"metadata": {"labels": {LABEL: None}}},
                      "application/merge-patch+json")
        phase("unlabel-half", unlabel, lambda: targets() == N - (N + 1) // 2)
        rss = open(f"/proc/{proc.pid}/status").read().split("VmRSS:")[1].split()[0]
        print(f"trustbench rss: {int(rss) // 1024} MiB after {N} namespaces", flush=True)
    finally:
        if proc:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        subprocess.run([os.path.join(TOP, "tests/kube/apiserver.sh"), "stop", api], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
