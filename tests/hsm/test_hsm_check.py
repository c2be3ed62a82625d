#!/usr/bin/python3
"""signetctl hsm-check against real SoftHSM2 tokens.

Each case gets its own token folder (a private softhsm2.conf whose
directories.tokendir is a temporary folder, given both as SOFTHSM2_CONF and
as --softhsm2-conf). Checked: a token with a PIN gets "yes", all five key
types, a sign-only non-extractable sensitive key template, a supported copy
and working concurrency with positive rates, in text and in --json; nothing
is left in the token afterwards (pkcs11-tool lists no object, with the
test's own, non-secret PIN); no PIN is ever printed; a wrong PIN, a missing
module and a token URI matching nothing exit 1 with a clear line (and the
token still takes the right PIN afterwards); usage errors exit 2; --help
lists every flag.

usage: test_hsm_check.py SIGNETCTL   (SIGNET_SOFTHSM_MODULE in the environment)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SIGNETCTL = sys.argv[1]
del sys.argv[1:2]
MODULE = os.environ.get("SIGNET_SOFTHSM_MODULE", "/usr/lib/softhsm/libsofthsm2.so")
KEY_TYPES = ["ecdsa-p256", "ecdsa-p384", "rsa-2048", "rsa-3072", "rsa-4096"]
PIN = "hc-user-4711"  # the test's own token: not a secret
SO_PIN = "hc-so-0815"
LABEL = "check token"  # a space: the URI must percent-encode it


class Token:
    """A SoftHSM2 token folder with one initialised token."""

    def __init__(self, label=LABEL):
        base = os.environ.get("SIGNET_TEST_TMP")
        if base:
            os.makedirs(base, exist_ok=True)
        self.dir = tempfile.mkdtemp(prefix="hsm-check-", dir=base)
        os.mkdir(os.path.join(self.dir, "tokens"))
        self.conf = os.path.join(self.dir, "softhsm2.conf")
        with open(self.conf, "w") as f:
            f.write("directories.tokendir = %s\nobjectstore.backend = file\nlog.level = ERROR\n"
                    % os.path.join(self.dir, "tokens"))
        self.env = dict(os.environ, SOFTHSM2_CONF=self.conf)
        subprocess.run(["softhsm2-util", "--init-token", "--free", "--label", label, "--so-pin", SO_PIN,
                        "--pin", PIN], env=self.env, check=True, stdout=subprocess.DEVNULL)
        self.pin_file = self.write_pin("pin", PIN)

    def write_pin(self, name, pin):
        path = os.path.join(self.dir, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, pin.encode())
        os.close(fd)
        return path

    def run(self, *args, pin_file=None, env=None):
        argv = [SIGNETCTL, "hsm-check", "--hsm-module", MODULE, "--softhsm2-conf", self.conf]
        if pin_file:
            argv += ["--pin-file", pin_file]
        return subprocess.run(argv + list(args), env=env or self.env, capture_output=True, text=True, timeout=300)

    def objects(self):
        """What pkcs11-tool lists as the user (private objects included)."""
        p = subprocess.run(["pkcs11-tool", "--module", MODULE, "--token-label", LABEL, "--login", "--pin", PIN,
                            "--list-objects"], env=self.env, capture_output=True, text=True, timeout=60)
        return p.returncode, [l for l in p.stdout.splitlines() if "Object;" in l]

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class HsmCheck(unittest.TestCase):
    def setUp(self):
        self.tok = Token()

    def tearDown(self):
        self.tok.cleanup()

    def assertNoPin(self, p):
        self.assertNotIn(PIN, p.stdout + p.stderr)

    def test_text_report(self):
        p = self.tok.run("--hsm-token", "pkcs11:token=check%20token", "--sign-seconds", "0.3",
                         pin_file=self.tok.pin_file)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        out = p.stdout
        for section in ["1. module", "2. slots and tokens", "3. mechanisms", "4. login and key template",
                        "5. session copy of the key", "6. concurrent signing", "7. summary"]:
            self.assertIn(section, out)
        self.assertNotIn("FAIL", out)
        self.assertIn("signet will work with this token: yes", out)
        self.assertIn("key types it can use: " + " ".join(KEY_TYPES), out)
        self.assertIn("CKA_SENSITIVE: true", out)
        self.assertIn("CKA_EXTRACTABLE: false", out)
        self.assertIn("CKA_SIGN: true", out)
        self.assertIn("other uses (decrypt, unwrap, derive, sign-recover): none", out)
        self.assertIn("C_CopyObject to a session object: supported", out)
        self.assertIn("all verify", out)
        self.assertIn("hsm-module = " + MODULE, out)
        self.assertIn("hsm-token = pkcs11:token=check%20token", out)
        for line in out.split("7. summary")[0].splitlines():
            if line.startswith("  ") and not line.startswith("    ") and line.strip():
                self.assertRegex(line, r"^  (ok  |warn|FAIL|-   )  ", line)
        self.assertNoPin(p)
        rc, objs = self.tok.objects()
        self.assertEqual(rc, 0)
        self.assertEqual(objs, [], "hsm-check left objects in the token")

    def test_json_rsa(self):
        for key_type in ("ecdsa-p384", "rsa-2048"):
            p = self.tok.run("--hsm-token", "pkcs11:token=check%20token", "--key-type", key_type,
                             "--sign-seconds", "0.2", "--json", pin_file=self.tok.pin_file)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            r = json.loads(p.stdout)
            self.assertTrue(r["works"])
            self.assertTrue(r["module"]["loaded"] and r["module"]["initialized"])
            self.assertEqual(r["module"]["manufacturer"], "SoftHSM")
            self.assertEqual(r["key_types"], KEY_TYPES)
            self.assertEqual(r["token"], LABEL)
            self.assertEqual(r["tokens_selected"], 1)
            sel = [s for s in r["slots"] if s["selected"]]
            self.assertEqual(len(sel), 1)
            self.assertTrue(sel[0]["initialized"] and sel[0]["user_pin_initialized"] and sel[0]["login_required"])
            self.assertTrue(r["mechanisms"]["CKM_ECDSA"]["sign"])
            self.assertTrue(r["mechanisms"]["CKM_RSA_PKCS_KEY_PAIR_GEN"]["generate_key_pair"])
            kt = r["key_template"]
            self.assertEqual(kt["key_type"], key_type)
            self.assertTrue(kt["generated"] and kt["sensitive"] and kt["sign"])
            self.assertFalse(kt["extractable"])
            self.assertEqual(kt["other_uses"], [])
            self.assertTrue(r["logged_in"])
            self.assertTrue(r["copy"]["supported"])
            c = r["concurrency"]
            self.assertTrue(c["works"])
            self.assertEqual(c["sessions"], 8)
            self.assertEqual(c["failed"], 0)
            self.assertGreater(c["verified"], 0)
            for rnd in ("single", "multi"):
                self.assertGreater(c[rnd]["per_second"], 0)
                self.assertGreater(c[rnd]["signatures"], 0)
                self.assertGreater(c[rnd]["p99_us"], 0)
            self.assertEqual(c["multi"]["threads"], 8)
            self.assertEqual(r["settings"]["hsm-token"], "pkcs11:token=check%20token")
            self.assertEqual(r["settings"]["hsm-module"], MODULE)
            self.assertFalse([n for n in r["notes"] if n["level"] == "fail"])
            self.assertNoPin(p)
        self.assertEqual(self.tok.objects(), (0, []))

    def test_no_pin(self):
        """Without a PIN: steps 1-3, a warning for the rest, exit 0; the
        default token choice is explained."""
        p = self.tok.run("--json")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        r = json.loads(p.stdout)
        self.assertTrue(r["works"])
        self.assertFalse(r["pin_given"])
        self.assertFalse(r["key_template"]["generated"])
        self.assertTrue(any("choose one with --hsm-token" in n["text"] for n in r["notes"]))
        self.assertTrue(any(n["step"] == "key" and n["level"] == "warn" for n in r["notes"]))

    def test_wrong_pin(self):
        bad = self.tok.write_pin("bad", "not-the-pin")
        p = self.tok.run("--hsm-token", "pkcs11:token=check%20token", pin_file=bad)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertRegex(p.stdout, r"FAIL  C_Login: CKR_PIN_INCORRECT")
        self.assertIn("signet will work with this token: no", p.stdout)
        self.assertNotIn("not-the-pin", p.stdout + p.stderr)
        # The token did not lock: the right PIN still works.
        p = self.tok.run("--hsm-token", "pkcs11:token=check%20token", "--sign-seconds", "0.2",
                         pin_file=self.tok.pin_file)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_pin_env(self):
        env = dict(self.tok.env, HC_PIN=PIN)
        p = self.tok.run("--hsm-token=pkcs11:token=check%20token", "--pin-env", "HC_PIN", "--sign-seconds=0.2",
                         env=env)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("login to \"check token\"", p.stdout)
        self.assertNoPin(p)

    def test_missing_module(self):
        p = subprocess.run([SIGNETCTL, "hsm-check", "--hsm-module", "/nonexistent/libvendor-pkcs11.so"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("FAIL  cannot load PKCS#11 module /nonexistent/libvendor-pkcs11.so", p.stdout)
        self.assertIn("signet will work with this token: no", p.stdout)

    def test_uri_matches_nothing(self):
        p = self.tok.run("--hsm-token", "pkcs11:token=elsewhere", pin_file=self.tok.pin_file)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn('no initialised token matches pkcs11:token=elsewhere; tokens: "check token"', p.stdout)

    def test_usage_errors(self):
        for args in (["--bogus"], ["--key-type", "rsa-1024"], ["--sign-seconds", "0.1"],
                     ["--sign-seconds", "61"], ["--sign-seconds", "abc"], ["positional"],
                     ["--hsm-token", "pkcs11:token=%zz"], ["--hsm-token", "pkcs11:token=x;pin-value=1234"]):
            p = self.tok.run(*args)
            self.assertEqual(p.returncode, 2, "%s: %s" % (args, p.stdout + p.stderr))
            self.assertIn("signetctl hsm-check:", p.stderr)
            self.assertNotIn("1234", p.stderr)

    def test_help(self):
        p = subprocess.run([SIGNETCTL, "hsm-check", "--help"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0)
        for flag in ("--hsm-module", "--hsm-token", "--pin-file", "--pin-env", "--hsm-init-reserved",
                     "--softhsm2-conf", "--config", "--key-type", "--sign-seconds", "--json"):
            self.assertIn(flag, p.stdout)
        p = subprocess.run([SIGNETCTL, "--help"], capture_output=True, text=True, timeout=60)
        self.assertIn("hsm-check", p.stdout)

    def test_config_file(self):
        """--config signet.conf: the same names as the flags."""
        conf = os.path.join(self.tok.dir, "signet.conf")
        with open(conf, "w") as f:
            f.write("hsm-module = %s\nsoftbsm-unused-check = 1\n" % MODULE)
        # An unknown name is refused (usage error)...
        p = subprocess.run([SIGNETCTL, "hsm-check", "--config", conf], env=self.tok.env, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        # ... and a real one is taken.
        with open(conf, "w") as f:
            f.write("hsm-module = %s\nsofthsm2-conf = %s\nhsm-token = pkcs11:token=check%%20token\n"
                    "pin-file = %s\n" % (MODULE, self.tok.conf, self.tok.pin_file))
        p = subprocess.run([SIGNETCTL, "hsm-check", "--config", conf, "--sign-seconds", "0.2"], env=self.tok.env,
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("signet will work with this token: yes", p.stdout)

    def test_existing_key(self):
        """--config of a CA's signet.conf: signs with the CA key itself
        (hsm-key), reports its attributes, and leaves it as it was."""
        ca = os.path.join(self.tok.dir, "ca")
        subprocess.run([SIGNETCTL, "init", "--dir", ca, "--log-level", "warn"], check=True,
                       stdout=subprocess.DEVNULL, timeout=120)
        conf = os.path.join(ca, "signet.conf")
        env = {k: v for k, v in os.environ.items() if k != "SOFTHSM2_CONF"}
        p = subprocess.run([SIGNETCTL, "hsm-check", "--config", conf, "--sign-seconds", "0.2", "--json"], env=env,
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        r = json.loads(p.stdout)
        kt = r["key_template"]
        self.assertTrue(kt["existing"] and not kt["generated"], kt)
        self.assertTrue(kt["sensitive"] and not kt["extractable"] and kt["sign"] and kt["other_uses"] == [], kt)
        self.assertFalse(r["copy"]["tested"], r["copy"])
        self.assertTrue(r["concurrency"]["works"], r["concurrency"])
        self.assertGreater(r["concurrency"]["single"]["per_second"], 0)
        # The CA still signs: nothing of it was destroyed.
        csr = os.path.join(self.tok.dir, "req.pem")
        subprocess.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                        "-keyout", os.path.join(self.tok.dir, "k.pem"), "-subj", "/O=x", "-addext",
                        "subjectAltName=URI:spiffe://cluster.local/ns/default/sa/default", "-out", csr],
                       check=True, capture_output=True, timeout=60)
        p = subprocess.run([SIGNETCTL, "issue", "--config", conf, "--csr", csr], env=env, capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        # A key URI naming nothing: FAIL (exit 1); the wrong key type: FAIL.
        p = subprocess.run([SIGNETCTL, "hsm-check", "--config", conf, "--hsm-key", "pkcs11:object=nothing-here",
                            "--sign-seconds", "0.2"], env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("nothing-here", p.stdout)
        p = subprocess.run([SIGNETCTL, "hsm-check", "--config", conf, "--key-type", "rsa-2048", "--sign-seconds",
                            "0.2"], env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("give --key-type ecdsa-p256", p.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
