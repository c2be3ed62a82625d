#!/usr/bin/python3
"""perf/loadgen against a real signetd: the tool's own checks and outputs.

loadgen is how signet's throughput and latency are measured, so what it
reports has to be right: closed and open loop runs complete and report
every request, the latency file holds one line per request, the pause
watcher's report is consistent, a response for the wrong identity counts
as a failure, and bad flags are refused.

usage: test_loadgen.py SIGNETCTL SIGNETD LOADGEN TESTS_RA_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SIGNETCTL, SIGNETD, LOADGEN, RA_DIR = sys.argv[1:5]
del sys.argv[1:5]
sys.path.insert(0, RA_DIR)
import signet_e2e  # noqa: E402


class Loadgen(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="loadgen.", dir=os.environ.get("SIGNET_TEST_TMP"))
        cls.conf, cls.root = signet_e2e.init_ca(SIGNETCTL, os.path.join(cls.tmp, "ca"))
        cls.d = signet_e2e.Signetd(SIGNETD, cls.conf)
        cls.token = signet_e2e.mint_token_file(SIGNETCTL, cls.conf, os.path.join(cls.tmp, "token"))

    @classmethod
    def tearDownClass(cls):
        rc = cls.d.stop()
        assert rc == 0, f"signetd exited {rc}:\n{cls.d.text()}"
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_loadgen(self, *flags):
        return subprocess.run([LOADGEN, "--target", f"grpc://127.0.0.1:{self.d.port}", "--token-file", self.token,
                               "--ca-file", self.root, "--connections", "2", "--concurrency", "4", "--timeout", "30s",
                               *flags], capture_output=True, text=True, timeout=300)

    def read_latencies(self, path):
        began, rows = None, []
        with open(path) as f:
            for line in f:
                if line.startswith("# phase began at CLOCK_MONOTONIC "):
                    began = int(line.split()[-2])
                elif not line.startswith("#"):
                    rows.append([float(x) for x in line.split()])
        return began, rows

    def test_closed_loop_and_latency_file(self):
        path = os.path.join(self.tmp, "closed.lat")
        p = self.run_loadgen("--requests", "300", "--warmup", "20", "--json", "--latency-file", path)
        self.assertEqual(p.returncode, 0, p.stderr)
        r = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertEqual((r["ok"], r["failed"], r["warmup_ok"], r["rate"]), (300, 0, 20, 0))
        self.assertGreater(r["certs_per_s"], 0)
        self.assertLessEqual(r["p50_ms"], r["p99_ms"])
        self.assertLessEqual(r["p99_ms"], r["max_ms"])
        self.assertIsNone(r["pauses"])  # not asked for
        began, rows = self.read_latencies(path)
        self.assertIsNotNone(began)
        self.assertEqual(len(rows), 300)
        for done, lat in rows:  # closed loop: two columns
            self.assertGreater(lat, 0)
            self.assertLessEqual(lat, done + 1e-3)  # sent after the phase began
        self.assertAlmostEqual(max(lat for _, lat in rows), r["max_ms"], places=2)

    def test_open_loop_with_pause_watcher(self):
        path = os.path.join(self.tmp, "open.lat")
        p = self.run_loadgen("--rate", "200", "--requests", "200", "--duration", "10s", "--warmup", "10",
                             "--watch-pauses", "--json", "--latency-file", path)
        self.assertEqual(p.returncode, 0, p.stderr)
        r = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertEqual((r["ok"], r["failed"], r["rate"]), (200, 0, 200))
        self.assertGreaterEqual(r["elapsed_s"], 0.99)  # 200 starts at 200/s take a second
        pz = r["pauses"]
        self.assertIsInstance(pz["realtime"], bool)
        self.assertGreaterEqual(pz["count"], pz["over_5ms"])
        self.assertLessEqual(pz["max_ms"], pz["total_ms"] + 1e-9)
        if pz["count"]:
            self.assertGreaterEqual(pz["max_ms"], 2.0)
        self.assertLessEqual(pz["untouched"], 200)
        self.assertEqual(pz["dropped"], 0)
        if pz["count"] == 0:  # then no request was touched, and the split equals the whole
            self.assertEqual(pz["untouched"], 200)
            self.assertAlmostEqual(pz["untouched_p99_ms"], r["p99_ms"], places=3)
        _, rows = self.read_latencies(path)
        self.assertEqual(len(rows), 200)
        for done, lat, lat_sent in rows:  # open loop: three columns
            self.assertLessEqual(lat_sent, lat + 1e-3)  # sent no earlier than due
        # The text report says the same.
        p = self.run_loadgen("--rate", "100", "--requests", "50", "--warmup", "0", "--watch-pauses")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("machine pauses (>= 2 ms, all CPUs merged", p.stdout)
        self.assertIn("no pause touched: p99", p.stdout)

    def test_wrong_identity_is_a_failure(self):
        # signetd refuses a CSR for another identity; loadgen must count it.
        p = self.run_loadgen("--requests", "10", "--warmup", "0", "--json",
                             "--identity", "spiffe://cluster.local/ns/other/sa/other")
        self.assertEqual(p.returncode, 1)
        r = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertEqual((r["ok"], r["failed"]), (0, 10))
        self.assertEqual(list(r["failures"]), ["UNAUTHENTICATED"])

    def test_watch_idle(self):
        p = subprocess.run([LOADGEN, "--watch-idle", "1s", "--json"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        r = json.loads(p.stdout)
        self.assertGreaterEqual(r["idle_s"], 1.0)
        self.assertGreaterEqual(r["count"], r["over_5ms"])
        self.assertLessEqual(r["max_ms"], r["total_ms"] + 1e-9)
        self.assertLess(r["total_ms"], r["idle_s"] * 1000)
        p = subprocess.run([LOADGEN, "--watch-idle", "1s"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stdout, r"^machine pauses while idle for 1\.\d s \(>= 2 ms")

    def test_bad_flags(self):
        missing = os.path.join(self.tmp, "no-such-dir", "lat")
        p = self.run_loadgen("--requests", "5", "--warmup", "0", "--latency-file", missing)
        self.assertEqual(p.returncode, 1)
        self.assertIn("--latency-file: cannot create", p.stderr)
        p = self.run_loadgen("--watch-pauses=maybe")
        self.assertEqual(p.returncode, 2)
        self.assertIn("watch-pauses", p.stderr)
        p = subprocess.run([LOADGEN, "--help"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0)
        for flag in ("--latency-file", "--watch-pauses", "--rate"):
            self.assertIn(flag, p.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
