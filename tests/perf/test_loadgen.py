#!/usr/bin/python3
"""perf/loadgen against a real signetd: the tool's own checks and outputs.

loadgen is how signet's throughput and latency are measured, so what it
reports has to be right: closed and open loop runs complete and report
every request, the latency file holds one line per request, the pause
watcher's report is consistent, a response for the wrong identity counts
as a failure, a token pool (--token-dir, made by perf/tokenpool.py) sends
each token once and says so, RSA-2048 CSRs (istio-agent's default key)
with RS256 tokens (an API server's default) are issued and every CSR is
distinct, and bad flags and bad pools are refused.

usage: test_loadgen.py SIGNETCTL SIGNETD LOADGEN TESTS_RA_DIR
"""
import base64
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import unittest

SIGNETCTL, SIGNETD, LOADGEN, RA_DIR = sys.argv[1:5]
del sys.argv[1:5]
sys.path.insert(0, RA_DIR)
import signet_e2e  # noqa: E402

TOKENPOOL = os.path.join(RA_DIR, "..", "..", "perf", "tokenpool.py")


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

    def run_loadgen(self, *flags, token=None):
        token = token or ["--token-file", self.token]
        return subprocess.run([LOADGEN, "--target", f"grpc://127.0.0.1:{self.d.port}", *token,
                               "--ca-file", self.root, "--connections", "2", "--concurrency", "4", "--timeout", "30s",
                               *flags], capture_output=True, text=True, timeout=300)

    def make_pool(self, name, count, accounts):
        out = os.path.join(self.tmp, name)
        subprocess.run([sys.executable, TOKENPOOL, "jwt", "--signetctl", SIGNETCTL, "--config", self.conf,
                        "--out", out, "--count", str(count), "--service-accounts", str(accounts)],
                       check=True, capture_output=True, timeout=300)
        return out

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
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        p = self.run_loadgen("--requests", "300", "--warmup", "20", "--json", "--latency-file", path)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.assertEqual(p.returncode, 0, p.stderr)
        r = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertEqual((r["ok"], r["failed"], r["warmup_ok"], r["rate"]), (300, 0, 20, 0))
        # Its CPU while sending: some, and within the whole process's
        # (which also made the 320 CSRs before the clock started).
        whole = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        self.assertGreater(r["cpu_s"], 0)
        self.assertLess(r["cpu_s"], whole)
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

    def test_token_pool(self):
        # 40 tokens over 2 service accounts: 5 + 30 requests use 35 of them
        # once each, every leaf checked for its own token's identity.
        pool = self.make_pool("pool", 40, 2)
        self.assertEqual(len(os.listdir(pool)), 40)
        for f in os.listdir(pool):
            self.assertEqual(os.stat(os.path.join(pool, f)).st_mode & 0o777, 0o600)
        p = self.run_loadgen("--requests", "30", "--warmup", "5", "--json", token=["--token-dir", pool])
        self.assertEqual(p.returncode, 0, p.stderr)
        r = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertEqual((r["ok"], r["failed"], r["warmup_ok"]), (30, 0, 5))
        self.assertEqual(r["tokens"], {"source": "pool", "pool": 40, "distinct": 35, "max_uses": 1, "wraps": 0})
        # 60 requests: every token used, the pool wrapped once, and said so.
        p = self.run_loadgen("--requests", "60", "--warmup", "0", token=["--token-dir", pool])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("40 tokens in", p.stdout)
        self.assertIn("2 identities from their claims", p.stdout)
        self.assertIn("pool of 40 (--token-dir): 40 distinct used", p.stdout)
        self.assertIn("the pool wrapped 1 times (reused tokens", p.stdout)
        # Another trust domain: identities the tokens do not carry, refused.
        p = self.run_loadgen("--requests", "4", "--warmup", "0", "--json", "--trust-domain", "example.org",
                             token=["--token-dir", pool])
        self.assertEqual(p.returncode, 1)
        self.assertEqual(json.loads(p.stdout.strip().splitlines()[-1])["failures"], {"UNAUTHENTICATED": 4})
        # One token reused is labelled as such.
        p = self.run_loadgen("--requests", "5", "--warmup", "0", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout.strip().splitlines()[-1])["tokens"]["source"], "file")

    def test_rsa_csrs_and_rs256_tokens(self):
        # An RS256 issuer (perf/tokenpool.py rs256) that a second signetd
        # trusts through its JWKS; 32 RSA CSRs over 4 service accounts from
        # 8 keys: each identity's 8 CSRs take the 8 keys, none repeats.
        key, jwks = os.path.join(self.tmp, "rs.key"), os.path.join(self.tmp, "rs.jwks")
        with open(self.conf) as f:
            issuer = next(line.split("=", 1)[1].strip() for line in f if line.startswith("jwt-issuer"))
        pool = os.path.join(self.tmp, "rs256")
        subprocess.run([sys.executable, TOKENPOOL, "rs256", "--key", key, "--issuer", issuer, "--jwks-out", jwks,
                        "--out", pool, "--count", "32", "--service-accounts", "4"],
                       check=True, capture_output=True, timeout=300)
        self.assertEqual(os.stat(key).st_mode & 0o777, 0o600)
        with open(os.path.join(pool, "000000.jwt")) as f:
            part = f.read().split(".")[0]
        header = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
        self.assertEqual(header["alg"], "RS256")
        d = signet_e2e.Signetd(SIGNETD, self.conf, "--jwt-jwks-file", jwks)
        try:
            def run(*flags):
                return subprocess.run([LOADGEN, "--target", f"grpc://127.0.0.1:{d.port}", "--token-dir", pool,
                                       "--ca-file", self.root, "--connections", "2", "--concurrency", "4",
                                       "--timeout", "30s", "--requests", "30", "--warmup", "2", "--csr-key",
                                       "rsa2048", *flags], capture_output=True, text=True, timeout=300)
            p = run("--csr-keys", "8")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("32 distinct RSA-2048 CSRs (8 keys)", p.stdout)
            self.assertIn("requests 30  ok 30  failed 0", p.stdout)
            # 7 keys cannot make 8 distinct CSRs for one identity: refused
            # before anything is sent.
            p = run("--csr-keys", "7")
            self.assertEqual(p.returncode, 1)
            self.assertIn("more than 7 CSRs name spiffe://cluster.local/ns/default/sa/default-", p.stderr)
            self.assertNotIn("requests 30", p.stdout)
        finally:
            rc = d.stop()
            self.assertEqual(rc, 0, d.text())
        # The first signetd trusts only the development issuer (ES256):
        # these tokens are refused there, so the second one verified them.
        p = self.run_loadgen("--requests", "4", "--warmup", "0", "--json", "--csr-key", "rsa2048", "--csr-keys",
                             "1", token=["--token-dir", pool])
        self.assertEqual(p.returncode, 1)
        self.assertEqual(json.loads(p.stdout.strip().splitlines()[-1])["failures"], {"UNAUTHENTICATED": 4})

    def test_identities(self):
        # CSR i names IDENTITY-(i mod N): none is the token's identity, so
        # signetd refuses them all, which shows the names are sent.
        p = self.run_loadgen("--requests", "6", "--warmup", "0", "--json", "--identities", "3")
        self.assertEqual(p.returncode, 1)
        self.assertEqual(json.loads(p.stdout.strip().splitlines()[-1])["failures"], {"UNAUTHENTICATED": 6})
        pool = self.make_pool("ids", 4, 1)
        p = self.run_loadgen("--requests", "2", "--warmup", "0", "--identities", "2", token=["--token-dir", pool])
        self.assertEqual(p.returncode, 1)
        self.assertIn("--identities is for runs without --token-dir", p.stderr)

    def test_bad_pools(self):
        pool = self.make_pool("src", 3, 1)
        names = sorted(os.listdir(pool))
        with open(os.path.join(pool, names[0])) as f:
            secret = f.read().strip()

        def pool_of(name, files):
            d = os.path.join(self.tmp, name)
            os.mkdir(d, 0o700)
            for dst, (src, mode) in files.items():
                shutil.copyfile(os.path.join(pool, src), os.path.join(d, dst))
                os.chmod(os.path.join(d, dst), mode)
            return d

        def refused(d, msg, *flags):
            p = self.run_loadgen("--requests", "3", "--warmup", "0", *flags, token=["--token-dir", d])
            self.assertEqual(p.returncode, 1, p.stdout)
            self.assertIn(msg, p.stderr)
            self.assertNotIn(secret, p.stdout + p.stderr)
            self.assertNotIn(secret[-40:], p.stdout + p.stderr)

        refused(pool_of("dup", {"a": (names[0], 0o600), "b": (names[1], 0o600), "c": (names[0], 0o600)}),
                "a and c hold the same token")
        refused(pool_of("open", {"a": (names[0], 0o600), "b": (names[1], 0o644)}), "chmod 600")
        d = pool_of("notjwt", {"a": (names[0], 0o600)})
        fd = os.open(os.path.join(d, "b"), os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, b"opaque-token\n")
        os.close(fd)
        refused(d, "/b: not a JWT")
        empty = os.path.join(self.tmp, "empty")
        os.mkdir(empty, 0o700)
        refused(empty, "holds no token files")
        refused(pool, "exclude each other", "--token-file", self.token)
        p = subprocess.run([LOADGEN, "--target", f"grpc://127.0.0.1:{self.d.port}", "--token-dir", pool,
                            "--requests", "1"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn("need --ca-file", p.stderr)
        # The hidden entries of a kubelet volume are skipped.
        d = pool_of("hidden", {"a": (names[0], 0o600), "..data": (names[0], 0o600)})
        p = self.run_loadgen("--requests", "1", "--warmup", "0", "--json", token=["--token-dir", d])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout.strip().splitlines()[-1])["tokens"]["pool"], 1)

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
        p = self.run_loadgen("--requests", "1", "--warmup", "0", "--csr-key", "rsa4096")
        self.assertEqual(p.returncode, 1)
        self.assertIn("--csr-key: p256 or rsa2048", p.stderr)
        p = subprocess.run([LOADGEN, "--help"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0)
        for flag in ("--latency-file", "--watch-pauses", "--rate", "--token-dir", "--trust-domain", "--csr-key",
                     "--csr-keys", "--identities"):
            self.assertIn(flag, p.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
