#!/usr/bin/python3
"""signet's RPM (packaging/rpm.sh, packaging/rpm/) built, linted, unpacked
and run.

packaging/rpm.sh builds the binary and source RPMs from the committed HEAD
of the repository this test is in (git archive; in CI a clean clone),
compiling signet once, Release. Then:

  * rpmlint (with packaging/rpm/rpmlint.toml, the part of Fedora's rpmlint
    configuration that concerns the package) finds no error, and every
    warning it gives is one the spec's comments explain;
  * the file list, modes and owners, the %config(noreplace) file and the
    scriptlets (systemd-sysusers in %pre, preset/disable/try-restart) are
    what the spec promises;
  * the package is installed into a scratch root (rpm --root --nodeps
    --noscripts as root, else rpm2cpio), its units pass
    `systemd-analyze verify` there, and `systemd-analyze security
    --offline` rates signetd.service at most MAX_EXPOSURE (the level is
    printed);
  * the installed programs run as the units would run them, with the
    units' own command lines (paths moved under the scratch root): the
    first-boot unit's `signetctl init` and its ExecStartPost (the PIN files
    made root-only), then signetd with NOTIFY_SOCKET on a datagram socket
    of the test, CREDENTIALS_DIRECTORY holding the PIN as LoadCredential
    would (and the CA folder's PIN file moved away, so only the credential
    can have been used) and WATCHDOG_USEC set: READY=1 arrives with
    /readyz answering 200, STATUS= counts the certificate the installed
    signetctl requests (verified with openssl verify against the installed
    CA's root), WATCHDOG=1 keeps coming, SIGHUP (ExecReload) gives
    RELOADING=1 then READY=1, SIGTERM gives STOPPING=1 and exit status 0.

usage: test_rpm.py SOURCE_DIR
"""
import glob
import json
import os
import platform
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

SRC = os.path.abspath(sys.argv[1])
del sys.argv[1:2]

UNITDIR = "/usr/lib/systemd/system"
MAX_EXPOSURE = 2.0
WATCHDOG_USEC = 1_000_000
PROGRAMS = {"/usr/sbin/signetd", "/usr/bin/signetctl", "/usr/bin/signet-trust", "/usr/bin/signet-operator",
            "/usr/bin/signet-agent"}
# path: (mode, user, group)
FILES = {
    **{p: ("-rwxr-xr-x", "root", "root") for p in PROGRAMS},
    f"{UNITDIR}/signetd.service": ("-rw-r--r--", "root", "root"),
    f"{UNITDIR}/signet-init.service": ("-rw-r--r--", "root", "root"),
    "/usr/lib/sysusers.d/signet.conf": ("-rw-r--r--", "root", "root"),
    "/usr/lib/tmpfiles.d/signet.conf": ("-rw-r--r--", "root", "root"),
    "/etc/signet": ("drwxr-xr-x", "root", "root"),
    "/etc/signet/signetd.conf": ("-rw-r--r--", "root", "root"),
    "/var/lib/signet": ("drwx------", "signet", "signet"),
}


def run(cmd, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    return subprocess.run(cmd, **kw)


def read(path):
    with open(path) as f:
        return f.read()


def unit(path):
    """A unit file as {key: [values]} (sections merged; ours repeat no key
    across sections)."""
    out = {}
    for line in read(path).splitlines():
        line = line.strip()
        if not line or line[0] in "#;[":
            continue
        k, _, v = line.partition("=")
        out.setdefault(k.strip(), []).append(v.strip())
    return out


def env():
    """Standalone: no Kubernetes API; no notification variables but ours."""
    drop = ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID",
            "CREDENTIALS_DIRECTORY")
    return {k: v for k, v in os.environ.items() if k not in drop}


class Rpm(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="rpm.", dir=os.environ.get("SIGNET_TEST_TMP"))
        cls.out = os.path.join(cls.tmp, "out")
        p = run([os.path.join(SRC, "packaging", "rpm.sh"), cls.out], cwd=SRC)
        if p.returncode != 0:
            raise RuntimeError(f"rpm.sh failed ({p.returncode}):\n{p.stdout[-6000:]}\n{p.stderr[-6000:]}")
        arch = run(["rpm", "--eval", "%{_arch}"]).stdout.strip() or platform.machine()
        cls.rpm = os.path.join(cls.out, f"signet-0.1.0-1.{arch}.rpm")
        cls.srpm = os.path.join(cls.out, "signet-0.1.0-1.src.rpm")
        cls.spec = os.path.join(SRC, "packaging", "rpm", "signet.spec")
        cls.root = os.path.join(cls.tmp, "root")
        os.mkdir(cls.root)
        if os.geteuid() == 0:
            p = run(["rpm", "--root", cls.root, "--nodeps", "--noscripts", "-i", cls.rpm])
        else:
            p = run(f"rpm2cpio {shlex.quote(cls.rpm)} | cpio -idm --quiet", shell=True, cwd=cls.root)
        if p.returncode != 0:
            raise RuntimeError(f"install into the scratch root failed:\n{p.stdout}\n{p.stderr}")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def r(self, path):
        """A package path inside the scratch root."""
        return os.path.join(self.root, path.lstrip("/"))

    def qp(self, *args):
        p = run(["rpm", "-qp", *args, self.rpm])
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout

    # ---- the package -----------------------------------------------------

    def test_built_both(self):
        self.assertTrue(os.path.isfile(self.rpm), os.listdir(self.out))
        self.assertTrue(os.path.isfile(self.srpm), os.listdir(self.out))
        srcs = run(["rpm", "-qlp", self.srpm]).stdout.split()
        self.assertIn("signet-0.1.0.tar.gz", srcs)
        self.assertIn("signet.spec", srcs)

    def test_license(self):
        self.assertEqual(self.qp("--qf", "%{LICENSE}"), "Apache-2.0")
        licence = "/usr/share/licenses/signet/LICENSE"
        self.assertIn(licence, self.qp("-l").split())
        self.assertIn("Apache License", read(self.r(licence)).splitlines()[1])
        self.assertEqual(read(self.r(licence)), read(os.path.join(SRC, "LICENSE")))

    def test_rpmlint_errors_none_warnings_explained(self):
        conf = os.path.join(SRC, "packaging", "rpm", "rpmlint.toml")
        p = run(["rpmlint", "-c", conf, self.rpm, self.srpm, self.spec])
        print(p.stdout, file=sys.stderr)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        msgs = re.findall(r"^\S+: ([EW]): (\S+)", p.stdout, re.M)
        self.assertFalse([m for m in msgs if m[0] == "E"], p.stdout)
        comments = "\n".join(l for l in read(self.spec).splitlines() if l.lstrip().startswith("#"))
        unexplained = sorted({w for lvl, w in msgs if lvl == "W" and not re.search(rf"\b{re.escape(w)}\b", comments)})
        self.assertFalse(unexplained, f"warnings the spec does not explain: {unexplained}\n{p.stdout}")

    def test_files_modes_owners(self):
        got = {}
        for line in self.qp("--qf", "[%{FILEMODES:perms} %{FILEUSERNAME} %{FILEGROUPNAME} %{FILENAMES}\n]").splitlines():
            mode, user, group, path = line.split(" ", 3)
            if path.startswith(("/usr/lib/.build-id", "/usr/share/doc/", "/usr/share/licenses/")):
                continue
            got[path] = (mode, user, group)
        self.assertEqual(got, FILES)
        docs = [l for l in self.qp("--docfiles").split() if l.startswith("/usr/share/doc/")]
        self.assertEqual(sorted(docs), ["/usr/share/doc/signet/PACKAGING.md", "/usr/share/doc/signet/README.md"])

    def test_config_noreplace(self):
        self.assertEqual(self.qp("--configfiles").split(), ["/etc/signet/signetd.conf"])
        flags = self.qp("--qf", "[%{FILEFLAGS:fflags} %{FILENAMES}\n]")
        line = next(l for l in flags.splitlines() if l.endswith(" /etc/signet/signetd.conf"))
        self.assertIn("c", line.split()[0])
        self.assertIn("n", line.split()[0])  # noreplace

    def test_scriptlets(self):
        s = self.qp("--scripts")
        parts = dict(re.findall(r"^(\w+) scriptlet[^\n]*:\n(.*?)(?=^\w+ scriptlet|\Z)", s, re.M | re.S))
        self.assertEqual(set(parts), {"preinstall", "postinstall", "preuninstall", "postuninstall"}, s)
        # The user before the files (sysusers.d, Fedora's compat macro).
        self.assertRegex(parts["preinstall"], r"systemd-sysusers|useradd")
        self.assertIn("signet", parts["preinstall"])
        self.assertRegex(parts["postinstall"], r"preset|install-system-units")
        self.assertIn("signetd.service", parts["postinstall"])
        self.assertRegex(parts["preuninstall"], r"disable|remove-system-units")
        self.assertRegex(parts["postuninstall"], r"try-restart|mark-restart-system-units")
        self.assertIn("signetd.service", parts["postuninstall"])
        self.assertRegex(read(self.r("/usr/lib/sysusers.d/signet.conf")), r"(?m)^u signet ")
        self.assertRegex(read(self.r("/usr/lib/tmpfiles.d/signet.conf")),
                         r"(?m)^d /var/lib/signet 0700 signet signet")

    def test_site_config_is_read_after_the_cas(self):
        ex = unit(self.r(f"{UNITDIR}/signetd.service"))["ExecStart"][0].split()
        confs = [a.split("=", 1)[1] for a in ex if a.startswith("--config=")]
        self.assertEqual(confs, ["/var/lib/signet/ca/signet.conf", "/etc/signet/signetd.conf"])

    # ---- the units -------------------------------------------------------

    def test_signetd_unit(self):
        u = unit(self.r(f"{UNITDIR}/signetd.service"))
        one = {k: v[-1] for k, v in u.items()}
        self.assertEqual(one["Type"], "notify")
        self.assertEqual(one["ExecStart"], "/usr/sbin/signetd --config=/var/lib/signet/ca/signet.conf "
                         "--config=/etc/signet/signetd.conf --pin-credential=hsm-pin")
        self.assertRegex(one["ExecReload"], r"^/\S*kill -HUP \$MAINPID$")
        self.assertRegex(one["WatchdogSec"], r"^\d+s?$")
        self.assertEqual(u["LoadCredential"], ["hsm-pin:/var/lib/signet/ca/pin"])
        self.assertFalse([e for e in u.get("Environment", []) if "PIN" in e.upper()])
        self.assertEqual((one["User"], one["Group"]), ("signet", "signet"))
        self.assertIn("signet-init.service", one["After"])
        for k, v in {"ProtectSystem": "strict", "NoNewPrivileges": "yes", "CapabilityBoundingSet": "",
                     "PrivateTmp": "yes", "ProtectHome": "yes", "LockPersonality": "yes",
                     "RestrictRealtime": "yes", "MemoryDenyWriteExecute": "yes"}.items():
            self.assertEqual(one.get(k), v, k)
        self.assertEqual(one["RestrictAddressFamilies"].split(), ["AF_UNIX", "AF_INET", "AF_INET6"])
        self.assertEqual(u["SystemCallFilter"][0], "@system-service")
        # Nothing writable but the token store; no @resources taken away
        # (signetd calls setrlimit and sched_setscheduler(SCHED_BATCH)).
        self.assertEqual(u["ReadWritePaths"], ["-/var/lib/signet/ca/tokens"])
        self.assertFalse([f for f in u["SystemCallFilter"] if f.startswith("~") and "@resources" in f])
        self.assertIn("LimitNOFILE", one)

    def test_init_unit(self):
        u = unit(self.r(f"{UNITDIR}/signet-init.service"))
        one = {k: v[-1] for k, v in u.items()}
        self.assertEqual(one["Type"], "oneshot")
        self.assertEqual(one["ConditionPathExists"], "!/var/lib/signet/ca/signet.conf")
        self.assertIn("signetd.service", one["Before"])
        self.assertEqual((one["User"], one["Group"]), ("signet", "signet"))
        self.assertEqual(one["ExecStart"],
                         "/usr/bin/signetctl init --dir /var/lib/signet/ca --so-pin-file /var/lib/signet/so-pin")
        post = " ; ".join(u["ExecStartPost"])
        self.assertRegex(post, r"\+/\S*chown root:root /var/lib/signet/ca/pin /var/lib/signet/so-pin")
        self.assertRegex(post, r"\+/\S*chmod 0?400 /var/lib/signet/ca/pin /var/lib/signet/so-pin")

    def verify_root(self):
        """The scratch root with what `systemd-analyze verify --root`
        looks up besides our units: the host's unit directory (targets)
        and the helpers the units run."""
        vroot = os.path.join(self.tmp, "verify-root")
        if not os.path.isdir(vroot):
            shutil.copytree(self.root, vroot, symlinks=True)
            shutil.copytree(UNITDIR, vroot + UNITDIR, symlinks=True, dirs_exist_ok=True,
                            ignore=lambda d, names: [n for n in names if n.startswith(("signetd.", "signet-init."))])
            for name in ("signetd.service", "signet-init.service"):
                for k, vals in unit(os.path.join(vroot, UNITDIR.lstrip("/"), name)).items():
                    if k.startswith("Exec"):
                        for v in vals:
                            exe = v.lstrip("+-@!:").split()[0]
                            dest = vroot + exe
                            if not os.path.exists(dest):
                                os.makedirs(os.path.dirname(dest), exist_ok=True)
                                shutil.copy(shutil.which(os.path.basename(exe)) or exe, dest)
        return vroot

    def test_systemd_analyze_verify(self):
        vroot = self.verify_root()
        p = run(["systemd-analyze", "verify", f"--root={vroot}", f"{UNITDIR}/signetd.service",
                 f"{UNITDIR}/signet-init.service"])
        self.assertEqual((p.returncode, p.stdout + p.stderr), (0, ""))

    def test_systemd_analyze_security(self):
        vroot = self.verify_root()
        for name in ("signetd.service", "signet-init.service"):
            p = run(["systemd-analyze", "security", "--offline=true", f"--root={vroot}", f"{UNITDIR}/{name}"])
            m = re.search(r"Overall exposure level for \S+: ([\d.]+) (\w+)", p.stdout)
            self.assertTrue(m, p.stdout + p.stderr)
            print(f"{name}: exposure {m.group(1)} {m.group(2)}", file=sys.stderr)
            self.assertLessEqual(float(m.group(1)), MAX_EXPOSURE, p.stdout)

    # ---- the installed programs, run as the units run them ---------------

    def mapped(self, cmdline):
        """A unit's command line with its absolute paths moved under the
        scratch root ("--config=/etc/..." too)."""
        out = []
        for a in cmdline.split():
            k, eq, v = a.partition("=")
            if eq and v.startswith("/"):
                out.append(f"{k}={self.r(v)}")
            elif a.startswith("/"):
                out.append(self.r(a))
            else:
                out.append(a)
        return out

    def first_boot(self):
        """signet-init.service: ExecStart, then ExecStartPost."""
        u = unit(self.r(f"{UNITDIR}/signet-init.service"))
        self.assertFalse(os.path.exists(self.r(u["ConditionPathExists"][0].lstrip("!"))))
        p = run(self.mapped(u["ExecStart"][0]), env=env())
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertTrue(os.path.exists(self.r(u["ConditionPathExists"][0].lstrip("!"))))
        for post in u["ExecStartPost"]:
            args = self.mapped(post.lstrip("+"))
            if os.path.basename(args[0]) == "chown" and os.geteuid() != 0:
                continue  # the files are the test user's own
            p = run([os.path.basename(args[0]), *args[1:]])
            self.assertEqual(p.returncode, 0, p.stderr)
        for f in ("/var/lib/signet/ca/pin", "/var/lib/signet/so-pin"):
            self.assertEqual(os.stat(self.r(f)).st_mode & 0o777, 0o400, f)

    def test_installed_signetd_as_the_unit_runs_it(self):
        p = run([self.r("/usr/sbin/signetd"), "--help"])
        self.assertTrue("--pin-credential" in p.stdout, "signetd --help has no --pin-credential")
        self.first_boot()
        u = unit(self.r(f"{UNITDIR}/signetd.service"))
        # LoadCredential=NAME:PATH: systemd copies PATH to
        # $CREDENTIALS_DIRECTORY/NAME; the CA's own PIN file is then out of
        # signetd's reach (root's, 0400), here moved away altogether.
        creds = os.path.join(self.tmp, "credentials")
        os.mkdir(creds, 0o700)
        for lc in u["LoadCredential"]:
            name, path = lc.split(":", 1)
            shutil.copy(self.r(path), os.path.join(creds, name))
            os.chmod(os.path.join(creds, name), 0o400)
            os.rename(self.r(path), self.r(path) + ".away")

        sock_path = os.path.join(self.tmp, "notify.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(sock_path)
        self.addCleanup(sock.close)
        e = env()
        e.update(NOTIFY_SOCKET=sock_path, CREDENTIALS_DIRECTORY=creds, WATCHDOG_USEC=str(WATCHDOG_USEC))
        # The unit's command line, then what a test host needs: loopback
        # and ephemeral ports (flags override both config files), JSON log.
        args = self.mapped(u["ExecStart"][0]) + [
            "--serving-address=127.0.0.1:0", "--http-address=127.0.0.1", "--metrics-port=0",
            "--readiness-probe-port=0", "--log-format=json"]
        log_path = os.path.join(self.tmp, "signetd.log")
        with open(log_path, "w") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=e)
        self.addCleanup(lambda: proc.poll() is None and (proc.kill(), proc.wait()))

        msgs = []  # (time, {key: value})

        def wait_for(pred, timeout, what):
            deadline = time.time() + timeout
            seen = len(msgs)
            while time.time() < deadline:
                for t, m in msgs[seen:]:
                    if pred(m):
                        return t, m
                seen = len(msgs)
                sock.settimeout(max(0.01, min(0.2, deadline - time.time())))
                try:
                    data = sock.recv(4096).decode()
                except socket.timeout:
                    if proc.poll() is not None and not msgs[seen:]:
                        break
                    continue
                msgs.append((time.time(), dict(l.split("=", 1) for l in data.splitlines() if "=" in l)))
            self.fail(f"no {what} (exit {proc.poll()}); notifications {[m for _, m in msgs]}\n{read(log_path)}")

        t_ready, ready = wait_for(lambda m: m.get("READY") == "1", 60, "READY=1")
        serving = next(json.loads(l) for l in read(log_path).splitlines()
                       if l.startswith("{") and json.loads(l).get("msg") == "signetd serving")
        with urllib.request.urlopen(f"http://127.0.0.1:{serving['probe_port']}/readyz", timeout=5) as r:
            self.assertEqual(r.status, 200)  # READY=1 means /readyz says so
        self.assertTrue([m for _, m in msgs if "STATUS" in m], msgs)
        # The watchdog: pings well within WATCHDOG_USEC, and again.
        t1, _ = wait_for(lambda m: m.get("WATCHDOG") == "1", 2 * WATCHDOG_USEC / 1e6, "WATCHDOG=1")
        t2, _ = wait_for(lambda m: m.get("WATCHDOG") == "1", 2 * WATCHDOG_USEC / 1e6, "a second WATCHDOG=1")
        self.assertLess(t2 - t1, WATCHDOG_USEC / 1e6 + 0.5)

        # A certificate from the installed signetctl, as in README.md.
        conf = self.r("/var/lib/signet/ca/signet.conf")
        ctl = self.r("/usr/bin/signetctl")
        spiffe = "spiffe://cluster.local/ns/default/sa/default"
        key, csr, tok, chain = (os.path.join(self.tmp, n) for n in ("key.pem", "csr.pem", "token", "chain.pem"))
        p = run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", key, "-subj", "/", "-addext", f"subjectAltName=critical,URI:{spiffe}", "-out", csr])
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(tok, "w") as f:
            p = run([ctl, "token", "--config", conf, "--namespace", "default", "--service-account", "default"],
                    stdout=f, capture_output=False, stderr=subprocess.PIPE, env=env())
        self.assertEqual(p.returncode, 0, p.stderr)
        p = run([ctl, "request", "--config", conf, "--addr", f"127.0.0.1:{serving['port']}", "--token-file", tok,
                 "--csr", csr, "--out", chain], env=env())
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        p = run(["openssl", "verify", "-CAfile", self.r("/var/lib/signet/ca/root-cert.pem"), chain])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        wait_for(lambda m: re.search(r"\bissued 1\b", m.get("STATUS", "")), 15, "STATUS= counting the issuance")

        # ExecReload: RELOADING=1, then READY=1 again.
        proc.send_signal(1)  # SIGHUP
        wait_for(lambda m: m.get("RELOADING") == "1", 15, "RELOADING=1")
        wait_for(lambda m: m.get("READY") == "1", 15, "READY=1 after the reload")

        proc.send_signal(15)  # SIGTERM
        wait_for(lambda m: m.get("STOPPING") == "1", 15, "STOPPING=1")
        self.assertEqual(proc.wait(60), 0, read(log_path))
        self.assertNotIn(read(os.path.join(creds, "hsm-pin")).strip(), read(log_path))


if __name__ == "__main__":
    unittest.main(verbosity=2)
