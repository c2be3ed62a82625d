#!/usr/bin/python3
"""Certificates per second through signetd on every PKCS#11 module of the
portability stage, next to the raw C_Sign rate of the same key, in one run.

    sudo perf/modules.py [--build DIR] [--seconds S] [--modules a,b,...] [--rounds N]

For each module (tests/hsm/modules/<name>.sh: softhsm2, nss, tpm2-abrmd,
tpm2-swtpm, p11-kit, opencryptoki) a fresh token, then for each key type it
can hold of ecdsa-p256 and rsa-2048, a CA made in that token by
`signetctl init --hsm-module` (the key as signet makes it), and, ROUNDS times
each, alternating:
  * raw C_Sign: `signetctl hsm-check --config CA/signet.conf --json` signing
    with the CA key itself (hsm-key), 1 thread then 8 sessions on 8 threads,
    for S seconds each (C_SignInit + C_Sign over a digest or DigestInfo, as
    signetd signs);
  * signetd on the CA (default settings: one signer thread per CPU, session
    copies of the key where the module allows), driven by perf/loadgen closed
    loop (4 connections x 16 calls, TLS + JWT as istio-agent, distinct CSRs,
    300 warm-up requests, then S seconds), every request required to
    succeed; loadgen's --watch-pauses reports the machine's own pauses.
The table has the median of the rounds, and signetd's rate as a fraction
of the raw 8-thread rate. Root: openCryptoki's set-up is machine-wide. Runs
on loopback and the scripts' own daemons only; every run is bounded.
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "ra"))
import signet_e2e  # noqa: E402

MODULES = ["softhsm2", "nss", "tpm2-abrmd", "tpm2-swtpm", "p11-kit", "opencryptoki"]
KEY_TYPES = ["ecdsa-p256", "rsa-2048"]


def show(cmd):
    print("+ " + " ".join(cmd), flush=True)


def run(cmd, env, timeout=600, check=True):
    show(cmd)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited {p.returncode}:\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
    return p


def raw_rates(a, conf, kt, env):
    p = run([a.signetctl, "hsm-check", "--config", conf, "--key-type", kt, "--sign-seconds", str(a.seconds),
             "--json"], env)
    r = json.loads(p.stdout)
    c = r["concurrency"]
    if not (r["works"] and r["key_template"]["existing"] and c["works"]):
        raise RuntimeError(f"hsm-check on the CA key: {p.stdout[-3000:]}")
    return c["single"], c["multi"]


def signetd_rate(a, conf, root, token, env, tmp):
    d = signet_e2e.Signetd(a.signetd, conf, threads=os.cpu_count() or 2, env=env)
    try:
        out = os.path.join(tmp, "loadgen.json")
        cmd = [a.loadgen, "--target", f"grpc://127.0.0.1:{d.port}", "--token-file", token, "--ca-file", root,
               "--server-name", "localhost", "--connections", "4", "--concurrency", "16", "--warmup", "300",
               "--requests", "2000000", "--duration", f"{int(a.seconds)}s", "--timeout", "30s", "--watch-pauses",
               "--json"]
        p = run(cmd, env, timeout=a.seconds * 4 + 300)
        r = json.loads(p.stdout.strip().splitlines()[-1])
        with open(out, "w") as f:
            json.dump(r, f)
        if r.get("failed") or r.get("ok", 0) == 0:
            raise RuntimeError(f"loadgen saw failures: {r}")
        return r
    finally:
        d.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build-perf"), help="a Release build (signetctl, signetd, "
                   "perf/loadgen); default build-perf")
    p.add_argument("--seconds", type=int, default=5, help="length of each timed run (default 5)")
    p.add_argument("--rounds", type=int, default=3, help="rounds per module and key type (default 3)")
    p.add_argument("--modules", default=",".join(MODULES), help="comma-separated (default: all six)")
    a = p.parse_args()
    if not 1 <= a.seconds <= 120 or not 1 <= a.rounds <= 10:
        p.error("--seconds 1..120, --rounds 1..10")
    a.signetctl = os.path.join(a.build, "ctl", "signetctl")
    a.signetd = os.path.join(a.build, "daemon", "signetd")
    a.loadgen = os.path.join(a.build, "perf", "loadgen")
    for b in (a.signetctl, a.signetd, a.loadgen):
        if not os.access(b, os.X_OK):
            p.error(f"{b} missing: build {a.build} with -DSIGNET_BUILD_PERF=ON")
    names = [m for m in a.modules.split(",") if m]
    for m in names:
        if m not in MODULES:
            p.error(f"unknown module {m}")
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(f"# {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}, {os.cpu_count()} CPUs, "
          f"{platform.release()}, load average {load}", flush=True)
    rows = []
    for m in names:
        tmp = tempfile.mkdtemp(prefix=f"modbench-{m}.")
        script = os.path.join(ROOT, "tests", "hsm", "modules", f"{m}.sh")
        hsm = os.path.join(tmp, "hsm")
        try:
            run([script, "up", hsm], os.environ)
            with open(os.path.join(hsm, "module.json")) as f:
                mj = json.load(f)
            env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
            env.update(mj.get("env") or {})
            for kt in KEY_TYPES:
                if kt not in mj["key_types"]:
                    continue
                ca = os.path.join(tmp, f"ca-{kt}")
                flags = ["--hsm-module", mj["module"]]
                if mj.get("init_reserved"):
                    flags += ["--hsm-init-reserved", mj["init_reserved"]]
                run([a.signetctl, "init", "--dir", ca, *flags, "--token-label", mj["token_label"], "--pin-file",
                     os.path.join(hsm, "pin"), "--key-type", kt, "--log-level", "warn"], env)
                conf, root = os.path.join(ca, "signet.conf"), os.path.join(ca, "root-cert.pem")
                token = signet_e2e.mint_token_file(a.signetctl, conf, os.path.join(ca, "token"))
                singles, multis, rates, p50s, p99s, pauses = [], [], [], [], [], []
                for _ in range(a.rounds):
                    s1, s8 = raw_rates(a, conf, kt, env)
                    singles.append(s1["per_second"])
                    multis.append(s8["per_second"])
                    r = signetd_rate(a, conf, root, token, env, tmp)
                    rates.append(r["certs_per_s"])
                    p50s.append(r["p50_ms"])
                    p99s.append(r["p99_ms"])
                    pauses.append(r.get("pauses", {}).get("max_ms", 0))
                row = {"module": m, "key": kt, "raw1": statistics.median(singles),
                       "raw8": statistics.median(multis), "signetd": statistics.median(rates),
                       "p50": statistics.median(p50s), "p99": statistics.median(p99s), "pause": max(pauses),
                       "rounds": {"raw1": singles, "raw8": multis, "signetd": rates}}
                rows.append(row)
                print("result: " + json.dumps(row), flush=True)
        finally:
            subprocess.run([script, "down", hsm], capture_output=True, timeout=120)
            shutil.rmtree(tmp, ignore_errors=True)
    print()
    print("| module | CA key | raw C_Sign/s, 1 thread | raw C_Sign/s, 8 sessions | signetd certificates/s | "
          "signetd ÷ raw (8) | p50 / p99 (ms) | largest machine pause (ms) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['module']} | {r['key']} | {r['raw1']:,.0f} | {r['raw8']:,.0f} | {r['signetd']:,.0f} | "
              f"{r['signetd'] / r['raw8']:.2f} | {r['p50']:.1f} / {r['p99']:.1f} | {r['pause']:.1f} |")


if __name__ == "__main__":
    main()
