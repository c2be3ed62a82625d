#!/usr/bin/python3
"""signet's OCI image (packaging/image.sh), built and run without a
container runtime.

The test builds the image from the suite's own Release build
(SIGNET_BUILD_DIR), unpacks it with umoci and checks:

  * the image: no shell or other program but signet's four (signetd in
    /usr/sbin; signetctl, signet-trust, signet-operator, signet-agent in /usr/bin), no
    apt, no dpkg database; user 65532 ("signet" in /etc/passwd), never
    root; Entrypoint ["/usr/sbin/signetd"], Cmd with --init-dir, the
    serving and HTTP addresses; ports 6443, 9402, 6060; the volume
    /var/lib/signet owned by 65532; StopSignal SIGTERM; OCI labels; its
    compressed size (the layer blobs) within 80 MB;
  * the image runs as a container would run it: its root bind-mounted
    read-only in a mount namespace of its own, a scratch folder owned by
    65532 at /var/lib/signet, /proc and /dev/{null,zero,random,urandom};
    chroot to it as 65532:65532 with the image's Env, the host's network.
    signetd runs the image's Cmd (with --init-dir when this signetd has the
    flag; otherwise `signetctl init` from the image first, then the Cmd
    with --config instead), gets ready on /readyz (port 6060), serves a
    certificate to the image's own `signetctl request` that `openssl
    verify` accepts against the CA's root, sees "/" read-only and runs as
    65532, and exits 0 on SIGTERM. A write to "/" fails, as the image's
    user and as root.

Needs root (mount namespaces, chroot) and the ports 6443, 9402 and 6060
free on the host (ctest's RESOURCE_LOCK host_ports keeps the other test
that serves on them, operator_e2e, from running at the same time).

usage: test_image.py SOURCE_DIR BUILD_DIR
"""
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

SOURCE, BUILD = sys.argv[1:3]
del sys.argv[1:3]
sys.path.insert(0, os.path.join(SOURCE, "tests", "ra"))
from signet_e2e import make_csr, spiffe  # noqa: E402

UID = 65532
MAX_COMPRESSED = 80 * 1000 * 1000
PORTS = (6443, 9402, 6060)
CMD = ["--init-dir=/var/lib/signet", "--serving-address=0.0.0.0:6443", "--http-address=0.0.0.0"]
SHELLS = {"sh", "bash", "dash", "ash", "zsh", "ksh", "mksh", "csh", "tcsh", "fish", "busybox", "toybox"}
PROGRAMS = {"usr/sbin/signetd", "usr/bin/signetctl", "usr/bin/signet-trust", "usr/bin/signet-operator",
            "usr/bin/signet-agent"}

# The container side (packaging/image/run-unpacked.sh, in a mount
# namespace of its own): the root read-only, the state folder at
# /var/lib/signet, /proc and a minimal /dev, chroot as the image's user.
RUN_UNPACKED = os.path.join(SOURCE, "packaging", "image", "run-unpacked.sh")


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def blob(oci, digest):
    algo, hexd = digest.split(":", 1)
    data = read(os.path.join(oci, "blobs", algo, hexd), "rb")
    assert hashlib.new(algo, data).hexdigest() == hexd, digest
    return data


def port_free(port):
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
            return True
        except OSError:
            return False


class Image(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="image.", dir=os.environ.get("SIGNET_TEST_TMP"))
        out = os.path.join(cls.tmp, "out")
        env = dict(os.environ, SIGNET_BUILD_DIR=BUILD)
        t0 = time.time()
        p = subprocess.run([os.path.join(SOURCE, "packaging", "image.sh"), out], env=env, capture_output=True,
                           text=True)
        if p.returncode != 0:
            raise RuntimeError(f"image.sh failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        print(f"image.sh: {time.time() - t0:.0f} s; {p.stderr.strip().splitlines()[-1]}", file=sys.stderr)
        cls.oci = os.path.join(out, "oci")
        index = json.loads(read(os.path.join(cls.oci, "index.json")))
        desc = [m for m in index["manifests"]
                if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == "latest"]
        assert len(desc) == 1, index
        cls.manifest = json.loads(blob(cls.oci, desc[0]["digest"]))
        cls.image_config = json.loads(blob(cls.oci, cls.manifest["config"]["digest"]))
        cls.config = cls.image_config["config"]
        cls.bundle = os.path.join(cls.tmp, "bundle")
        subprocess.run(["umoci", "unpack", "--image", f"{cls.oci}:latest", cls.bundle], check=True,
                       capture_output=True)
        cls.rootfs = os.path.join(cls.bundle, "rootfs")
        help_text = cls.in_image(["/usr/sbin/signetd", "--help"], state=None).stdout
        cls.has_init_dir = "--init-dir" in help_text

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # ---- running programs of the image -----------------------------------

    @classmethod
    def scratch(cls):
        """A fresh state folder for /var/lib/signet, owned by the image's
        user, as an empty volume would be."""
        path = tempfile.mkdtemp(prefix="state.", dir=cls.tmp)
        os.chown(path, UID, UID)
        os.chmod(path, 0o700)
        return path

    @classmethod
    def container_env(cls):
        return dict(e.split("=", 1) for e in cls.config.get("Env", []))

    @classmethod
    def argv(cls, args, state):
        return ["unshare", "-m", RUN_UNPACKED, cls.rootfs, state or cls.scratch(), *args]

    @classmethod
    def in_image(cls, args, state, check=True):
        p = subprocess.run(cls.argv(args, state), env=cls.container_env(), capture_output=True, text=True,
                           timeout=120)
        if check and p.returncode != 0:
            raise RuntimeError(f"{args} in the image exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
        return p

    def start(self, args, state):
        log = open(os.path.join(self.tmp, f"signetd.{time.time_ns()}.log"), "w+")
        self.addCleanup(log.close)
        proc = subprocess.Popen(self.argv(args, state), env=self.container_env(), stdout=log,
                                stderr=subprocess.STDOUT)

        def stop():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.addCleanup(stop)
        return proc, log

    def wait_ready(self, proc, log):
        deadline = time.time() + 90
        while time.time() < deadline:
            if proc.poll() is not None:
                log.seek(0)
                self.fail(f"signetd exited {proc.returncode}:\n{log.read()}")
            try:
                with urllib.request.urlopen("http://127.0.0.1:6060/readyz", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        log.seek(0)
        self.fail("signetd not ready in 90 s:\n" + log.read())

    # ---- the image -------------------------------------------------------

    def test_config(self):
        c = self.config
        self.assertEqual(c["User"], f"{UID}:{UID}")
        self.assertEqual(c["Entrypoint"], ["/usr/sbin/signetd"])
        self.assertEqual(c["Cmd"], CMD)
        self.assertEqual(set(c["ExposedPorts"]), {f"{p}/tcp" for p in PORTS})
        self.assertEqual(set(c["Volumes"]), {"/var/lib/signet"})
        self.assertEqual(c["StopSignal"], "SIGTERM")
        self.assertEqual(c["WorkingDir"], "/var/lib/signet")
        labels = c["Labels"]
        self.assertEqual(labels["org.opencontainers.image.title"], "signetd")
        self.assertRegex(labels["org.opencontainers.image.version"], r"^\d+\.\d+\.\d+$")
        self.assertIn("org.opencontainers.image.revision", labels)
        self.assertEqual(labels["org.opencontainers.image.licenses"], "Apache-2.0")
        self.assertEqual(self.image_config["os"], "linux")
        # The runtime config umoci derives from it: not root, no new privileges.
        rt = json.loads(read(os.path.join(self.bundle, "config.json")))["process"]
        self.assertEqual((rt["user"]["uid"], rt["user"]["gid"]), (UID, UID))
        self.assertEqual(rt["args"], ["/usr/sbin/signetd", *CMD])

    def test_program_tags(self):
        """The manifests' image names: signetd, signet-trust,
        signet-operator and signet-agent are the same layers as latest, each with its own
        program as the entry point; only signetd has default arguments."""
        index = json.loads(read(os.path.join(self.oci, "index.json")))
        by_tag = {m["annotations"]["org.opencontainers.image.ref.name"]: m for m in index["manifests"]
                  if "org.opencontainers.image.ref.name" in m.get("annotations", {})}
        self.assertEqual(set(by_tag), {"latest", "signetd", "signet-trust", "signet-operator", "signet-agent"})
        for tag, entry in (("signetd", "/usr/sbin/signetd"), ("signet-trust", "/usr/bin/signet-trust"),
                           ("signet-operator", "/usr/bin/signet-operator"),
                           ("signet-agent", "/usr/bin/signet-agent")):
            with self.subTest(tag):
                man = json.loads(blob(self.oci, by_tag[tag]["digest"]))
                self.assertEqual(man["layers"], self.manifest["layers"])
                cfg = json.loads(blob(self.oci, man["config"]["digest"]))["config"]
                self.assertEqual(cfg["Entrypoint"], [entry])
                self.assertEqual(cfg.get("Cmd"), CMD if tag == "signetd" else None)
                self.assertEqual(cfg["User"], f"{UID}:{UID}")
                self.assertEqual(cfg["Labels"]["org.opencontainers.image.title"], tag)

    def test_size(self):
        layers = sum(l["size"] for l in self.manifest["layers"])
        print(f"compressed layers: {layers / 1e6:.1f} MB in {len(self.manifest['layers'])} layer(s)",
              file=sys.stderr)
        self.assertLessEqual(layers, MAX_COMPRESSED)

    def test_no_shell_no_package_manager(self):
        programs = set()
        for top, dirs, files in os.walk(self.rootfs):
            for name in files + dirs:
                rel = os.path.relpath(os.path.join(top, name), self.rootfs)
                self.assertNotIn(name, SHELLS, rel)
                self.assertFalse(name.startswith(("apt", "dpkg")), rel)
            for name in files:
                path = os.path.join(top, name)
                st = os.lstat(path)
                if stat.S_ISREG(st.st_mode) and st.st_mode & 0o111 and ".so" not in name:
                    programs.add(os.path.relpath(path, self.rootfs))
        # Executable files other than shared objects: ld.so (run by the
        # kernel for every program) and signet's four, nothing else.
        self.assertEqual(programs - {"lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"}, PROGRAMS)
        for gone in ("bin/sh", "usr/bin/sh", "var/lib/dpkg", "etc/apt", "var/lib/apt", "usr/share/man"):
            self.assertFalse(os.path.lexists(os.path.join(self.rootfs, gone)), gone)
        p = self.in_image(["/bin/sh", "-c", "true"], state=None, check=False)
        self.assertNotEqual(p.returncode, 0)

    def test_user_and_volume(self):
        passwd = read(os.path.join(self.rootfs, "etc/passwd"))
        self.assertIn(f"signet:x:{UID}:{UID}:", passwd)
        self.assertIn(f"signet:x:{UID}:", read(os.path.join(self.rootfs, "etc/group")))
        st = os.stat(os.path.join(self.rootfs, "var/lib/signet"))
        self.assertEqual((st.st_uid, st.st_gid), (UID, UID))
        # Nothing else in the image belongs to the user.
        for top, dirs, files in os.walk(self.rootfs):
            for name in files + dirs:
                path = os.path.join(top, name)
                if path != os.path.join(self.rootfs, "var/lib/signet"):
                    self.assertNotEqual(os.lstat(path).st_uid, UID, path)

    def test_programs_run(self):
        for prog in sorted(PROGRAMS):
            p = self.in_image([f"/{prog}", "--help"], state=None)
            self.assertIn("sage: ", p.stdout + p.stderr, prog)

    # ---- the image at work -----------------------------------------------

    def test_serves_certificates_on_a_read_only_root(self):
        deadline = time.time() + 60  # another program's test may hold one for a moment
        while (busy := [p for p in PORTS if not port_free(p)]) and time.time() < deadline:
            time.sleep(0.5)
        self.assertFalse(busy, f"ports {busy} are taken: the image serves on its container ports")
        state = self.scratch()
        conf = "/var/lib/signet/ca/signet.conf"
        cmd = list(CMD)
        if not self.has_init_dir:
            # Until signetd has --init-dir: what it will do on first
            # start, done by the image's signetctl, and the Cmd with --config.
            self.in_image(["/usr/bin/signetctl", "init", "--dir", "/var/lib/signet/ca", "--so-pin-file",
                           "/var/lib/signet/so-pin", "--log-level", "warn"], state)
            cmd[0] = f"--config={conf}"
        proc, log = self.start(["/usr/sbin/signetd", *cmd], state)
        self.wait_ready(proc, log)
        self.assertTrue(os.path.isfile(os.path.join(state, "ca", "signet.conf")))
        # First start with --init-dir made the CA; the SO PIN is beside it.
        self.assertTrue(os.path.isfile(os.path.join(state, "so-pin")))
        print(f"signetd ran {' '.join(cmd)}", file=sys.stderr)

        # signetd's own view: "/" read-only, running as the image's user.
        mounts = [l.split() for l in read(f"/proc/{proc.pid}/mountinfo").splitlines()]
        root = [m for m in mounts if m[4] == "/"]
        self.assertTrue(root and "ro" in root[-1][5].split(","), root)
        uids = [l for l in read(f"/proc/{proc.pid}/status").splitlines() if l.startswith(("Uid:", "Gid:"))]
        for line in uids:
            self.assertEqual(set(line.split()[1:]), {str(UID)}, line)

        # A certificate for an istio-agent CSR, with the image's signetctl.
        token = self.in_image(["/usr/bin/signetctl", "token", "--config", conf, "--namespace", "default",
                               "--service-account", "default"], state).stdout.strip()
        for name, data, mode in (("token", token, 0o600), ("csr.pem", make_csr(spiffe("default", "default")),
                                                             0o644)):
            path = os.path.join(state, name)
            with open(path, "w") as f:
                f.write(data)
            os.chown(path, UID, UID)
            os.chmod(path, mode)
        chain = self.in_image(["/usr/bin/signetctl", "request", "--config", conf, "--addr", "127.0.0.1:6443",
                               "--token-file", "/var/lib/signet/token", "--csr", "/var/lib/signet/csr.pem"],
                              state).stdout
        self.assertGreaterEqual(chain.count("BEGIN CERTIFICATE"), 2)
        chain_path = os.path.join(self.tmp, "chain.pem")
        with open(chain_path, "w") as f:
            f.write(chain)
        v = subprocess.run(["openssl", "verify", "-CAfile", os.path.join(state, "ca", "root-cert.pem"),
                            chain_path], capture_output=True, text=True)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)

        # A write to "/" fails for the image's user (signetctl init wants
        # to create the folder) while /var/lib/signet takes it.
        p = self.in_image(["/usr/bin/signetctl", "init", "--dir", "/probe", "--so-pin-file",
                           "/var/lib/signet/probe.so-pin"], state, check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertFalse(os.path.lexists(os.path.join(self.rootfs, "probe")))

        proc.send_signal(signal.SIGTERM)
        self.assertEqual(proc.wait(60), 0)
        log.seek(0)
        self.assertIn("stopped", log.read())


if __name__ == "__main__":
    unittest.main(verbosity=2)
