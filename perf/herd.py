#!/usr/bin/python3
"""A mesh restart against a fresh signetd, at one or more sizes.

For each size: makes a CA (signetctl init, SoftHSM2), starts signetd on
127.0.0.1 with enough descriptors and --max-connections for the herd
(prlimit), mints a pool of tokens (perf/tokenpool.py jwt, the CA's
development issuer: one per simulated pod plus one per request of herd's
ceiling run, so no token is sent twice but for a pod's own retries), runs
perf/herd with --token-dir and --server-pid, prints herd's report and the
exact command lines, and stops signetd. Sizes are CONNECTIONSxCALLS (calls
per connection):

  perf/herd.py --build build-perf 1000x1 5000x1 5000x10 10000x1 [--herd-args "..."]
               [--signetd-args "..."] [--json] [--one-token] [--kube MODE]

--kube MODE runs the herd as a cluster would: a real API server is
started for each size (tests/kube/apiserver.sh, etcd and kube-apiserver
on 127.0.0.1; tests/kube/build-apiserver.sh builds them once), the pool
is its TokenRequest tokens (perf/tokenpool.py tokenrequest, audience
istio-ca, ServiceAccount bench/bench), and signetd checks them with
--token-authenticator MODE (tokenreview, auto or jwks) through
--kubeconfig, without the development issuer.

--one-token sends one token from every pod instead (the figures before
issue 33): signetd's JWT cache then answers all but the first, which no
mesh does; label such figures "one token reused". Minting costs about
20 ms a token here, two at once (a 10,000-pod pool takes minutes, before
the clock starts).

Loopback only; every run is bounded by herd's own --duration and timeouts.
"""
import argparse
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "ra"))
import signet_e2e  # noqa: E402


def machine():
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"nproc": os.cpu_count(), "cpu": model, "kernel": os.uname().release, "loadavg": load}


def ceiling_requests(herd_args):
    """herd's --ceiling-requests in herd_args, else its default (2000)."""
    words = shlex.split(herd_args)
    for i, w in enumerate(words):
        if w == "--ceiling-requests" and i + 1 < len(words):
            return int(words[i + 1])
        if w.startswith("--ceiling-requests="):
            return int(w.split("=", 1)[1])
    return 2000


def token_pool(signetctl, conf, out, count):
    """count distinct tokens of the CA's development issuer in out."""
    cmd = [sys.executable, os.path.join(HERE, "tokenpool.py"), "jwt", "--signetctl", signetctl, "--config", conf,
           "--out", out, "--count", str(count), "--jobs", "2"]
    print("# " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=3600)
    print(f"# {count} tokens minted in {time.monotonic() - t0:.1f} s", flush=True)
    return out


KUBE_SCRIPTS = os.path.join(HERE, "..", "tests", "kube")


def api_server(folder):
    """Starts the test API server in folder; its env file as a dict."""
    os.mkdir(folder)
    cmd = [os.path.join(KUBE_SCRIPTS, "build-apiserver.sh")]
    print("# " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=3600)
    cmd = [os.path.join(KUBE_SCRIPTS, "apiserver.sh"), "start", folder]
    print("# " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=300)
    with open(os.path.join(folder, "env")) as f:
        return dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)


def kube_pool(env, out, count):
    """count distinct TokenRequest tokens of bench/bench from the API server in env."""
    cmd = [sys.executable, os.path.join(HERE, "tokenpool.py"), "tokenrequest", "--out", out, "--count", str(count),
           "--namespace", "bench", "--service-account", "bench", "--jobs", "2"]
    print("# " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=3600, env={**os.environ, **env})
    print(f"# {count} tokens minted in {time.monotonic() - t0:.1f} s", flush=True)
    return out


def one(build, conns, calls, herd_args, signetd_args, as_json, auto_cap=False, one_token=False, kube=None):
    tmp = tempfile.mkdtemp(prefix="herd.", dir=os.environ.get("SIGNET_TEST_TMP"))
    signetctl = os.path.join(build, "ctl", "signetctl")
    signetd = os.path.join(build, "daemon", "signetd")
    herd = os.path.join(build, "perf", "herd")
    d = None
    api = os.path.join(tmp, "api") if kube else None
    try:
        conf, root = signet_e2e.init_ca(signetctl, os.path.join(tmp, "ca"))
        cluster = []
        if kube:
            env = api_server(api)
            pool = kube_pool(env, os.path.join(tmp, "pool"), ceiling_requests(herd_args) + conns * calls)
            creds = ["--token-dir", pool]
            # Without init's development issuer: the tokens are the API server's.
            kconf = os.path.join(tmp, "ca", "kube.conf")
            with open(conf) as f, open(kconf, "w") as out:
                out.writelines(ln for ln in f if not ln.startswith("jwt-"))
            conf = kconf
            cluster = ["--kubeconfig", env["KUBECONFIG"], "--token-authenticator", kube, "--root-ca-configmap=false"]
        elif one_token:
            creds = ["--token-file", signet_e2e.mint_token_file(signetctl, conf, os.path.join(tmp, "token"))]
        else:
            pool = token_pool(signetctl, conf, os.path.join(tmp, "pool"), ceiling_requests(herd_args) + conns * calls)
            creds = ["--token-dir", pool]
        # Descriptors: every connection, and the reconnections' overlap.
        # (at most the hard limit: the container may not raise it)
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        nofile = max(4096, 2 * conns + 1024)
        if hard != resource.RLIM_INFINITY:
            nofile = min(nofile, hard)
        wrapper = os.path.join(tmp, "signetd-limited")
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\nexec prlimit --nofile=%d:%d %s \"$@\"\n" % (nofile, nofile, shlex.quote(signetd)))
        os.chmod(wrapper, 0o755)
        flags = ([] if auto_cap else ["--max-connections", str(nofile - 512)]) + cluster + shlex.split(signetd_args)
        d = signet_e2e.Signetd(wrapper, conf, *flags)
        cmd = [herd, "--target", f"grpc://127.0.0.1:{d.port}"] + creds + ["--ca-file", root,
               "--connections", str(conns), "--calls-per-connection", str(calls), "--server-pid",
               str(d.proc.pid)] + shlex.split(herd_args)
        if as_json:
            cmd.append("--json")
        m0 = machine()
        print(f"# signetd {' '.join(flags)} (prlimit --nofile={nofile}); load average {m0['loadavg']}",
              flush=True)
        print("# " + " ".join(shlex.quote(c) for c in cmd), flush=True)
        t0 = time.monotonic()
        p = subprocess.run(["prlimit", f"--nofile={nofile}:{nofile}", "--"] + cmd, capture_output=True,
                           text=True, timeout=3600)
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
        print(f"# herd exit {p.returncode} after {time.monotonic() - t0:.1f} s; load average "
              f"{machine()['loadavg']}", flush=True)
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{d.metrics_port}/metrics", timeout=10).read().decode()
            keep = [ln for ln in text.splitlines() if ln.startswith(("signet_grpc_", "signet_requests_abandoned",
                                                                     "signet_hsm_signatures_total",
                                                                     "signet_tokenreview_", "signet_jwks_"))
                    and not ln.endswith(" 0")]
            print("# signetd metrics: " + "; ".join(keep), flush=True)
        except OSError as e:
            print(f"# signetd metrics unreadable: {e}", flush=True)
        return p.returncode
    finally:
        if d is not None:
            rc = d.stop()
            warns = [r for r in d.records() if r.get("level") in ("warn", "error")]
            print(f"# signetd exit {rc}; {len(warns)} warnings" +
                  (f", first: {json.dumps(warns[0])[:300]}" if warns else ""), flush=True)
        if api:
            subprocess.run([os.path.join(KUBE_SCRIPTS, "apiserver.sh"), "stop", api], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sizes", nargs="+", help="CONNECTIONSxCALLS, e.g. 5000x10")
    ap.add_argument("--build", default="build-perf", help="build folder (ctl/, daemon/, perf/)")
    ap.add_argument("--herd-args", default="", help="more herd options, one shell-quoted string")
    ap.add_argument("--signetd-args", default="", help="more signetd options, one shell-quoted string")
    ap.add_argument("--json", action="store_true", help="herd prints one JSON line")
    ap.add_argument("--auto-max-connections", action="store_true",
                    help="leave signetd's --max-connections to its default (open files, memory limit)")
    ap.add_argument("--one-token", action="store_true",
                    help="one token for every pod (the JWT cache answers all but the first; not a mesh)")
    ap.add_argument("--kube", choices=("tokenreview", "auto", "jwks"),
                    help="a real API server's TokenRequest tokens, checked with --token-authenticator KUBE")
    a = ap.parse_args()
    if a.kube and a.one_token:
        ap.error("--one-token and --kube exclude each other: --kube sends the API server's own tokens, one per pod")
    m = machine()
    print(f"# machine: nproc={m['nproc']} cpu=\"{m['cpu']}\" kernel={m['kernel']} load average {m['loadavg']}")
    worst = 0
    for s in a.sizes:
        conns, _, calls = s.partition("x")
        worst = max(worst, one(a.build, int(conns), int(calls or 1), a.herd_args, a.signetd_args, a.json,
                               a.auto_max_connections, a.one_token, a.kube))
    return worst


if __name__ == "__main__":
    sys.exit(main())
