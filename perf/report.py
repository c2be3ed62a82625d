#!/usr/bin/python3
"""Turns bench_signet JSON into the tables and target ratios of
perf/README.md.

usage: report.py P256_ROUND.json... -- RSA_ROUND.json...

Rates are items per second. Each benchmark's best round is used (background
load on a shared machine only ever lowers a rate); within a file, with
--benchmark_repetitions, the median."""
import json
import sys


def rates(paths):
    out, ctx = {}, None
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        ctx = ctx or data["context"]
        for b in data["benchmarks"]:
            if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
                continue
            name = b.get("run_name", b["name"])
            if "items_per_second" in b:
                out[name] = max(out.get(name, 0.0), b["items_per_second"])
    return out, ctx


def find(r, prefix):
    for k, v in r.items():
        if k.startswith(prefix):
            return v
    raise SystemExit(f"report: no benchmark {prefix!r}")


def main():
    args = sys.argv[1:]
    split = args.index("--")
    p256, ctx = rates(args[:split])
    rsa, _ = rates(args[split + 1:])
    print(f"rounds: {split} per CA key type; best round per benchmark")
    print(f"machine: {ctx.get('num_cpus')} CPUs at {ctx.get('mhz_per_cpu')} MHz, "
          f"load average {ctx.get('load_avg')}, date {ctx.get('date')}\n")
    print("| benchmark | items/s |\n|---|---|")
    for r in (p256, rsa):
        for k, v in r.items():
            print(f"| {k} | {v:,.0f} |")

    # RSA-2048 CA key: pool at 2 threads vs raw C_Sign at 2 threads.
    raw2 = find(rsa, "raw_csign/rsa-2048/real_time/threads:2")
    print("\n| target | measured | ratio | goal |\n|---|---|---|---|")
    for csr in ("rsa2048", "p256"):
        pool = find(rsa, f"pool/ca:rsa-2048/csr:{csr}/threads:2/real_time")
        print(f"| RSA-2048 CA, {csr} CSRs: pool (2 threads) / raw C_Sign (2 threads) "
              f"| {pool:,.0f} / {raw2:,.0f} | {pool / raw2:.2f} | >= 0.90 |")

    # P-256 CA key, P-256 CSRs, 2 threads: vs the rate the raw per-operation
    # costs allow on 2 threads: 2 / (t_verify + t_sign).
    t_verify = 1 / find(p256, "openssl_verify/p256/")
    t_sign = 1 / find(p256, "raw_csign/ecdsa-p256/real_time/threads:1")
    implied = 2 / (t_verify + t_sign)
    pool = find(p256, "pool/ca:ecdsa-p256/csr:p256/threads:2/real_time")
    print(f"| P-256 CA, P-256 CSRs: pool (2 threads) / (2 / (t_verify {t_verify * 1e6:.1f} us "
          f"+ t_C_Sign {t_sign * 1e6:.1f} us)) | {pool:,.0f} / {implied:,.0f} | {pool / implied:.2f} | >= 0.75 |")
    # For reading the one above: SoftHSM2 serialises signing per token, so
    # its C_Sign does not scale to 2 threads; the rate the measured 2-thread
    # ceilings allow (verify on both cores, signatures at the 2-thread C_Sign
    # rate) is the fairer denominator.
    raw2 = find(p256, "raw_csign/ecdsa-p256/real_time/threads:2")
    ceiling2 = 1 / (t_verify / 2 + 1 / raw2)
    print(f"| (information) P-256: pool (2 threads) / (1 / (t_verify/2 + 1/C_Sign@2 threads {raw2:,.0f}/s)) "
          f"| {pool:,.0f} / {ceiling2:,.0f} | {pool / ceiling2:.2f} | — |")


main()
