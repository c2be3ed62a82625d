#!/usr/bin/python3
"""Two minutes of the soak (perf/soak.py) in the suite: signetd under open-loop
load for two minutes, its resources sampled every 10 s, nothing growing.

The benchmark itself runs 30 minutes (perf/soak.py --minutes 30; figures in
tests/RELIABILITY.md); this is the short version that every release build
runs, so that a leak of a descriptor per connection, a thread per segment, a
PKCS#11 session or a few hundred bytes per certificate fails a test rather
than waiting for someone to soak by hand. It checks two things:

  * the verdict's arithmetic, on made-up samples: a flat series passes, and
    each kind of growth (RSS by a trend or a spike, VmHWM, a descriptor, a
    thread, a session, a failed request, an uncounted certificate) fails
    exactly its own check. Without this a verdict that could not fail would
    pass for ever;
  * the real thing: signetd (release build, JWT authentication, the
    development issuer) at half of its measured maximum, capped at 1,500/s
    so that the suite's other tests running beside it keep their CPU
    (`--rate-cap`), for two minutes in 30-second loadgen segments; after the
    first 40 s (a third) RSS grows by at most 6 MiB (least-squares slope
    times the time) and moves by at most 12 MiB, descriptors other than
    connections, signetd's own threads and HSM sessions are constant (the
    signer pool's grown workers and gRPC's elastic pools only bounded, as
    perf/soak.py says), at least 10 samples
    were taken, no request failed, and every certificate the clients got is
    one signetd counted and logged. The bound is perf/soak.py's 4 MiB
    raised to 6: with only eight samples after the warm-up, jemalloc's
    2-4 MiB swing between loaded and idle samples can put the slope of a
    flat process near 4 MiB (the slope's error is about 1.5 MiB here), while
    about 100,000 certificates in the measured part still make a leak of 60
    bytes each fail. The 30-minute run is the sensitive one.

The TokenReview variant (perf/soak.py --auth tokenreview) is not run here:
the test API server costs 30-60 s to start on top of the two minutes.

usage: test_soak.py SIGNETCTL SIGNETD LOADGEN SOAK_PY
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

SIGNETCTL, SIGNETD, LOADGEN, SOAK_PY = sys.argv[1:5]
del sys.argv[1:5]

spec = importlib.util.spec_from_file_location("soak", SOAK_PY)
soak = importlib.util.module_from_spec(spec)
spec.loader.exec_module(soak)

MIB = 1024 * 1024
MINUTES = 2.0


def flat_rows(n=12, interval=10.0):
    """n samples of a process that does not grow."""
    return [{"t": i * interval, "phase": "load", "rss": 30 * MIB + (i % 3) * 256 * 1024, "hwm": 40 * MIB,
             "threads": 11, "grpc_threads": 6, "fds": 15, "conns": 4, "http": 0, "fds_base": 11, "sessions": 2,
             "signer": 2, "signer_base": 2, "signer_max": 8, "issued": 1000 * i, "load1": 1.0} for i in range(n)]


def segments(n=4, per=1000):
    return [{"index": i + 1, "requests": per, "sent": per, "ok": per, "failed": 0, "exit": 0} for i in range(n)]


class Verdict(unittest.TestCase):
    """soak.verdict on made-up samples: flat passes, each growth fails its check."""

    def setUp(self):
        self.a = soak.parse_args(["--signetd", SIGNETD, "--signetctl", SIGNETCTL, "--loadgen", LOADGEN,
                                  "--minutes", "2"])
        self.idle = {"fds": 11, "fds_base": 11, "conns": 0, "grpc_threads": 5}

    def failing(self, rows, segs=None, idle_after=None, issued=None, errors=()):
        segs = segments() if segs is None else segs
        ok = sum(s["ok"] for s in segs)
        checks = soak.verdict(self.a, rows, segs, self.idle, idle_after or self.idle,
                              ok if issued is None else issued, list(errors))
        self.assertEqual(len(checks), 12, checks)  # every check was made
        return sorted(c["check"] for c in checks if not c["ok"])

    def test_flat_passes(self):
        self.assertEqual(self.a.warmup, 40.0)  # a third of two minutes
        self.assertEqual(self.failing(flat_rows()), [])

    def test_rss_growth_fails(self):
        rows = flat_rows()
        for r in rows:  # 0.7 MiB per sample after the warm-up: 4.9 MiB, within the range bound
            r["rss"] += int(max(0.0, r["t"] - 40) / 10 * 0.7 * MIB)
        self.assertEqual(self.failing(rows), ["rss"])
        for r in rows:  # twice as fast: both
            r["rss"] += int(max(0.0, r["t"] - 40) / 10 * 0.7 * MIB)
        self.assertEqual(self.failing(rows), ["rss", "rss_range"])

    def test_rss_range_fails(self):
        rows = flat_rows()
        rows[6]["rss"] += 5 * MIB  # a spike within the range bound (2 x 4 MiB): jemalloc does that
        self.assertEqual(self.failing(rows), [])
        rows[6]["rss"] += 4 * MIB  # 9 MiB: above it, though no trend
        self.assertEqual(self.failing(rows), ["rss_range"])

    def test_rss_bound_is_a_percentage_of_a_large_process(self):
        rows = flat_rows()
        for r in rows:
            r["rss"] += 200 * MIB
        rows[6]["rss"] += 15 * MIB  # within 2 x 5 % of 230 MiB (23 MiB), above 2 x 4 MiB
        self.assertEqual(self.failing(rows), [])

    def test_hwm_fails(self):
        rows = flat_rows()
        for r in rows[8:]:
            r["hwm"] += 6 * MIB
        self.assertEqual(self.failing(rows), ["hwm"])

    def test_counts_fail(self):
        for key in ("fds_base", "threads", "sessions"):
            rows = flat_rows()
            rows[-1][key] += 1
            self.assertEqual(self.failing(rows), [key], key)

    def test_grpc_pools_are_elastic_but_bounded(self):
        # gRPC starts pool threads when its threads are all busy (a starved
        # machine) and lets them go later: that passes, within the bound...
        bound = 5 + soak.GRPC_POOL_SLACK_PER_CPU * (os.cpu_count() or 1)
        rows = flat_rows()
        rows[-2]["grpc_threads"] += 1
        rows[-1]["grpc_threads"] = bound
        self.assertEqual(self.failing(rows), [])
        # ...past it, it is a leak; and signetd's own threads stay strict.
        rows[-1]["grpc_threads"] = bound + 1
        self.assertEqual(self.failing(rows), ["grpc_threads"])
        rows = flat_rows()
        rows[-1]["threads"] += 1
        rows[-1]["grpc_threads"] -= 1  # the same total: still a failure
        self.assertEqual(self.failing(rows), ["threads"])

    @staticmethod
    def grow(rows, workers, threads=0, sessions=0):
        """The signer pool `workers` above its base in rows, and `threads`
        and `sessions` more than those workers account for."""
        for r in rows:
            r["signer"] += workers
            r["threads"] += workers + threads
            r["sessions"] += workers + sessions

    def test_signer_pool_is_elastic_but_bounded(self):
        # The signer pool grows a worker (a thread and an HSM session) while
        # requests queue and signatures wait off CPU: the suite at -j4 grew
        # it from 2 to 3 at 50 s of the two-minute run (issue 34's stress
        # runs). That passes, growing and shrinking, up to the pool's maximum...
        rows = flat_rows()
        self.grow(rows[5:9], 1)
        self.grow(rows[9:], 6)
        self.assertEqual(self.failing(rows), [])
        # ...past it, it fails on its own;
        self.grow(rows[9:], 1)
        self.assertEqual(self.failing(rows), ["signer_threads"])
        # and a thread or a session more than the pool accounts for is
        # still a leak.
        rows = flat_rows()
        self.grow(rows[6:], 1, threads=1)
        self.assertEqual(self.failing(rows), ["threads"])
        rows = flat_rows()
        self.grow(rows[6:], 1, sessions=1)
        self.assertEqual(self.failing(rows), ["sessions"])

    def test_warmup_is_left_out(self):
        rows = flat_rows()
        rows[0]["threads"] += 3  # before 40 s
        rows[1]["rss"] += 20 * MIB
        self.assertEqual(self.failing(rows), [])

    def test_descriptors_at_rest(self):
        self.assertEqual(self.failing(flat_rows(), idle_after={"fds": 12, "fds_base": 12, "conns": 0}),
                         ["fds_idle"])

    def test_a_descriptor_that_differs_is_named(self):
        rows = flat_rows()
        base = ["/dev/null", "anon_inode:[eventfd]", "tcp:4000:listen"]
        for r in rows:
            r["rest_fds"], r["fds_base"] = list(base), len(base)
        rows[7]["rest_fds"].append("/var/lib/signet/leaked")
        rows[7]["fds_base"] += 1
        checks = {c["check"]: c for c in soak.verdict(self.a, rows, segments(), self.idle, self.idle,
                                                         sum(s["ok"] for s in segments()), [])}
        self.assertFalse(checks["fds_base"]["ok"])
        self.assertIn("t=70s +/var/lib/signet/leaked", checks["fds_base"]["detail"])

    def test_requests(self):
        segs = segments()
        segs[2] = dict(segs[2], ok=999, failed=1, exit=1)
        self.assertEqual(self.failing(flat_rows(), segs=segs), ["requests"])
        segs = segments()
        segs[1] = dict(segs[1], ok=900, sent=900)  # fewer answered than asked, without a failure
        self.assertEqual(self.failing(flat_rows(), segs=segs), ["requests"])
        self.assertEqual(self.failing(flat_rows(), issued=3999), ["issued"])

    def test_too_few_samples(self):
        checks = soak.verdict(self.a, flat_rows(5), segments(), self.idle, self.idle, 4000, [])
        self.assertEqual([(c["check"], c["ok"]) for c in checks], [("samples", False)])
        self.assertEqual(self.failing(flat_rows(), errors=["20.0s: gone"]), ["samples"])


class Census(unittest.TestCase):
    """soak.fd_census on this process: a descriptor closed between the
    listings is transient, one open throughout is resident."""

    def test_transient_and_resident(self):
        with tempfile.TemporaryDirectory(dir=os.environ.get("SIGNET_TEST_TMP")) as t:
            kept, passing = os.path.join(t, "kept"), os.path.join(t, "passing")
            fk, fp = open(kept, "w"), open(passing, "w")
            waits = []

            def wait(gap):
                waits.append(gap)
                if not fp.closed:
                    fp.close()

            try:
                grpc, http, rest, transient = soak.fd_census(os.getpid(), -1, (), reads=3, gap=0.01, wait=wait)
            finally:
                fk.close()
                fp.close()
        self.assertEqual(waits, [0.01, 0.01])
        self.assertIn(kept, rest)
        self.assertNotIn(passing, rest)
        self.assertEqual(transient, [passing])
        self.assertEqual((grpc, http), (0, 0))


class Soak(unittest.TestCase):
    """Two minutes of signetd at half its maximum: flat."""

    def test_two_minutes(self):
        tmp = os.environ.get("SIGNET_TEST_TMP")
        with tempfile.TemporaryDirectory(prefix="soak-test.", dir=tmp) as t:
            out = os.path.join(t, "soak.json")
            cmd = [sys.executable, SOAK_PY, "--signetd", SIGNETD, "--signetctl", SIGNETCTL, "--loadgen", LOADGEN,
                   "--minutes", str(MINUTES), "--segment", "30s", "--max-seconds", "5", "--rate-cap", "1500",
                   "--rss-mib", "6", "--json-out", out]
            if tmp:
                cmd += ["--tmp", tmp]
            began = time.time()
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=480)
            took = time.time() - began
            print(p.stdout[-6000:], file=sys.stderr)
            with open(out) as f:
                r = json.load(f)
        self.assertNotIn("error", r, p.stderr[-3000:])
        failed = [c for c in r["verdict"] if not c["ok"]]
        self.assertEqual(failed, [], "not flat")
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertEqual(r["signetd_exit"], 0)
        # The run was what it says: two minutes of load, sampled throughout.
        self.assertGreaterEqual(r["soak_s"], MINUTES * 60 - 5)
        self.assertLess(took, 420)
        self.assertGreaterEqual(len(r["samples"]), 10)
        self.assertGreater(r["rate"], 0)
        self.assertLessEqual(r["rate"], 1500)
        if r["max_rate"]:
            self.assertLessEqual(r["rate"], r["max_rate"]["certs_per_s"] / 2 + 1)
        ok = sum(s["ok"] for s in r["segments"])
        self.assertGreaterEqual(len(r["segments"]), 3)
        # Open loop at the rate for the segments' length (the gaps are loadgen
        # making the next CSRs: 22 % of the time on a machine at load 20):
        # at least half of the soak was under load.
        self.assertGreaterEqual(ok, r["rate"] * r["soak_s"] * 0.5)
        self.assertEqual(sum(s["failed"] for s in r["segments"]), 0)
        # Every certificate has its audit line (the closed-loop run's too).
        self.assertGreaterEqual(r["log"]["audit_lines"], ok)
        self.assertEqual(r["log"]["warnings"], [])
        # The sampler saw the load: connections open in some samples, and
        # the issued count rising through the run.
        self.assertTrue(any(s["conns"] > 0 for s in r["samples"]))
        issued = [s["issued"] for s in r["samples"]]
        self.assertEqual(issued, sorted(issued))
        self.assertGreater(issued[-1], issued[0])
        self.assertGreater(r["samples"][-1]["sessions"], 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
