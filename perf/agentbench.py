#!/usr/bin/python3
"""The node agent at scale: 1,000 pods across 100 service accounts on one
node, appearing at once, against a private kube-apiserver and a real
signetd with node authorization.

  perf/agentbench.py [BUILD] [PODS] [ACCOUNTS] [ROUNDS]
      (defaults: build-perf, 1000, 100, 3)

The pods are created first (no agent is watching), then signet-agent
starts: its first list holds all of them at once. Measured per run, from
the agent's start: the time until every account's three files are on disk
(cert-chain.pem, key.pem, root-cert.pem; polled every 10 ms), the requests
signetd answered (its audit lines; exactly one per account is the goal),
the agent's CPU time (utime + stime from /proc) and its peak RSS (VmHWM).
Runs alternate --max-concurrent-requests 1, 8 (the default) and 32, side
by side in each round, so the concurrency's effect is a ratio within one
run. After the last run of a round the pods are deleted and the time
until every folder is gone is measured too.

Everything runs on 127.0.0.1 in a temporary folder removed at the end.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(TOP, "tests", "kube"))
sys.path.insert(0, os.path.join(TOP, "tests", "ra"))
import kube_rest  # noqa: E402
import signet_e2e  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(TOP, "build-perf")
PODS = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
ACCOUNTS = int(sys.argv[3]) if len(sys.argv) > 3 else 100
ROUNDS = int(sys.argv[4]) if len(sys.argv) > 4 else 3
CONCURRENCY = (1, 8, 32)
NODE = "bench-node"
NS = "agentbench"
TICK = os.sysconf("SC_CLK_TCK")


def loadavg():
    return open("/proc/loadavg").read().split()[0]


def proc_cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


def proc_hwm(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main():
    tmp = tempfile.mkdtemp(prefix="agentbench.")
    api = kube_rest.ApiServer(tmp)
    kube = kube_rest.Kube(api.env)
    procs = []
    try:
        ca = os.path.join(tmp, "ca")
        subprocess.run([os.path.join(BUILD, "ctl", "signetctl"), "init", "--dir", ca, "--log-level", "warn"],
                       check=True, stdout=subprocess.DEVNULL)
        conf = os.path.join(ca, "kube.conf")
        with open(os.path.join(ca, "signet.conf")) as src, open(conf, "w") as f:
            f.writelines(line for line in src if not line.startswith(("jwt-issuer", "jwt-jwks-file")))
        for ns in ("signet-system", NS):
            kube.req("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": ns}})
        kube.req("POST", "/api/v1/namespaces/signet-system/serviceaccounts",
                 {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "signet-agent"}})
        for i in range(ACCOUNTS):
            kube.req("POST", f"/api/v1/namespaces/{NS}/serviceaccounts",
                     {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": f"sa-{i}"}})
        agent_pod = kube.ok("POST", "/api/v1/namespaces/signet-system/pods",
                            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "signet-agent-bench"},
                             "spec": {"serviceAccountName": "signet-agent", "nodeName": NODE,
                                      "containers": [{"name": "c", "image": "none"}]}})
        tok = kube.ok("POST", "/api/v1/namespaces/signet-system/serviceaccounts/signet-agent/token",
                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                       "spec": {"audiences": ["istio-ca"], "expirationSeconds": 3600,
                                "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "signet-agent-bench",
                                                   "uid": agent_pod["metadata"]["uid"]}}})["status"]["token"]
        token_file = os.path.join(tmp, "token")
        with open(token_file, "w") as f:
            f.write(tok)
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
        d = signet_e2e.Signetd(os.path.join(BUILD, "daemon", "signetd"), conf, "--kubeconfig", api.env["KUBECONFIG"],
                               "--token-authenticator", "tokenreview", "--root-ca-configmap=false",
                               "--ca-trusted-node-accounts", "signet-system/signet-agent", threads=2, env=env)
        procs.append(d)
        print(f"# {PODS} pods, {ACCOUNTS} service accounts, node {NODE}; load {loadavg()}", flush=True)
        print("| round | max-concurrent-requests | all files on disk (s) | CA requests | agent CPU (s) | "
              "agent peak RSS (MiB) | all folders removed after delete (s) |")
        print("|---|---|---|---|---|---|---|")
        for rnd in range(1, ROUNDS + 1):
            t = time.monotonic()
            for i in range(PODS):
                kube.ok("POST", f"/api/v1/namespaces/{NS}/pods",
                        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"pod-{i}"},
                         "spec": {"serviceAccountName": f"sa-{i % ACCOUNTS}", "nodeName": NODE,
                                  "containers": [{"name": "c", "image": "none"}]}})
            print(f"# round {rnd}: {PODS} pods created in {time.monotonic() - t:.1f} s (before any agent)", flush=True)
            for conc in CONCURRENCY:
                out = os.path.join(tmp, f"out-{rnd}-{conc}")
                issued0 = sum(1 for r in d.records() if r.get("msg") == "certificate issued")
                log = open(os.path.join(tmp, f"agent-{rnd}-{conc}.log"), "w")
                t0 = time.monotonic()
                a = subprocess.Popen([os.path.join(BUILD, "agent", "signet-agent"), "--kubeconfig",
                                      api.env["KUBECONFIG"], "--node-name", NODE, "--ca-address",
                                      f"127.0.0.1:{d.port}", "--ca-server-name", "localhost", "--root-ca-file",
                                      os.path.join(ca, "root-cert.pem"), "--token-file", token_file,
                                      "--output-dir", out, "--metrics-port", "0", "--readiness-probe-port", "0",
                                      "--http-address", "127.0.0.1", "--log-level", "warn",
                                      "--max-concurrent-requests", str(conc)],
                                     stdout=log, stderr=subprocess.STDOUT, env=env)
                want = [os.path.join(out, NS, f"sa-{i}", "root-cert.pem") for i in range(ACCOUNTS)]
                done = 0
                while done < len(want):
                    if a.poll() is not None:
                        raise RuntimeError(f"signet-agent exited {a.returncode}")
                    while done < len(want) and os.path.exists(want[done]):
                        done += 1
                    time.sleep(0.01)
                took = time.monotonic() - t0
                time.sleep(1.0)  # any duplicate request would show by now
                issued = sum(1 for r in d.records() if r.get("msg") == "certificate issued") - issued0
                cpu, hwm = proc_cpu(a.pid), proc_hwm(a.pid)
                removed = "-"
                if conc == CONCURRENCY[-1]:
                    t1 = time.monotonic()
                    kube.req("DELETE", f"/api/v1/namespaces/{NS}/pods?gracePeriodSeconds=0")
                    while any(os.path.exists(os.path.join(out, NS, f"sa-{i}")) for i in range(ACCOUNTS)):
                        time.sleep(0.05)
                    removed = f"{time.monotonic() - t1:.2f}"
                signet_e2e.stop_process(a)
                log.close()
                print(f"| {rnd} | {conc} | {took:.2f} | {issued} | {cpu:.2f} | {hwm:.1f} | {removed} |", flush=True)
            # The next round's pods: the old ones must be gone first.
            kube_rest.wait_for("pods deleted", lambda: not kube.ok("GET", f"/api/v1/namespaces/{NS}/pods")["items"],
                               timeout=120)
        print(f"# load {loadavg()}")
    finally:
        for p in procs:
            p.stop()
        api.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
