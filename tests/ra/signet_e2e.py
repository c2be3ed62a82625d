"""What the end-to-end tests of signetd share: istio-agent-shaped CSRs,
signetd started on loopback with ephemeral ports (found in its JSON log),
and the proto compiled for Python's grpcio."""
import base64
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

TD = "cluster.local"


def spiffe(ns, sa):
    return f"spiffe://{TD}/ns/{ns}/sa/{sa}"


def compile_proto(proto_dir, out):
    """Compiles ca.proto with python3-grpc-tools into out (then importable)."""
    import grpc_tools
    from grpc_tools import protoc
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    rc = protoc.main(["protoc", f"-I{proto_dir}", f"-I{include}", f"--python_out={out}",
                      f"--grpc_python_out={out}", os.path.join(proto_dir, "ca.proto")])
    assert rc == 0, "protoc failed"
    sys.path.insert(0, out)


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def make_csr(identity=None, key="ec", dns=None, cn=None, ca=False, extra_uri=None):
    """A CSR like istio-agent's GenCSR: empty O=, one critical URI SAN."""
    k = rsa.generate_private_key(65537, 2048) if key == "rsa" else ec.generate_private_key(ec.SECP256R1())
    name = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "")]
    if cn:
        name.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    b = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(name))
    sans = []
    if identity:
        sans.append(x509.UniformResourceIdentifier(identity))
    if extra_uri:
        sans.append(x509.UniformResourceIdentifier(extra_uri))
    if dns:
        sans.append(x509.DNSName(dns))
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=True)
    if ca:
        b = b.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    return b.sign(k, hashes.SHA256()).public_bytes(serialization.Encoding.PEM).decode()


def sanitized(binary):
    """True for a sanitizer build: SIGNET_SANITIZED when set (anything but
    0, false or no), else an ASan or TSan runtime found in the binary."""
    env = os.environ.get("SIGNET_SANITIZED")
    if env:
        return env not in ("0", "false", "no")
    with open(binary, "rb") as f:
        data = f.read()
    return b"__asan_init" in data or b"__tsan_init" in data


def init_ca(signetctl, ca):
    """`signetctl init --dir ca`: the paths of its signet.conf and root-cert.pem."""
    subprocess.run([signetctl, "init", "--dir", ca, "--log-level", "warn"], check=True, stdout=subprocess.DEVNULL)
    return os.path.join(ca, "signet.conf"), os.path.join(ca, "root-cert.pem")


def mint_token(signetctl, conf, ns="default", sa="default"):
    """`signetctl token` for ns/sa: the token's text."""
    return subprocess.run([signetctl, "token", "--config", conf, "--namespace", ns, "--service-account", sa],
                          check=True, capture_output=True, text=True).stdout.strip()


def mint_token_file(signetctl, conf, path, ns="default", sa="default"):
    """`signetctl token` for ns/sa written to path, a new file of mode 0600; path."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        subprocess.run([signetctl, "token", "--config", conf, "--namespace", ns, "--service-account", sa],
                       check=True, stdout=f)
    return path


def json_records(lines):
    """The lines (str or bytes) that are JSON, parsed; the others skipped."""
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def serving_record(records):
    """signetd's "signetd serving" record (its ports), or None."""
    return next((r for r in records if r.get("msg") == "signetd serving"), None)


def wait_serving(proc, records, timeout=60, interval=0.05):
    """Polls records() until it holds the "signetd serving" record and
    returns that; None when proc exits first (proc.poll() is then set) or
    timeout seconds pass."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            return None
        rec = serving_record(records())
        if rec is not None:
            return rec
        time.sleep(interval)
    return None


def sanitizer_reports(pid):
    """Every sanitizer report program pid wrote, whole, as one string ("" when
    none). In a sanitizer build ctest gives each test log_path=DIR/report
    with log_exe_name (CMakeLists.txt, signet_tests_finish), so a
    report is the file DIR/report.<program>.<pid>, not lines of a log."""
    bases = {opt[len("log_path="):] for var in SANITIZER_VARS
             for opt in os.environ.get(var, "").split(":") if opt.startswith("log_path=")}
    return _reports_whole(p for base in bases for p in glob.glob(glob.escape(base) + ".*") if p.endswith(f".{pid}"))


def _reports_whole(paths):
    """The report files, each whole under a header naming it, as one string."""
    return "\n".join(f"=== sanitizer report {p}\n{read(p)}" for p in sorted(paths))


SANITIZER_VARS = ("ASAN_OPTIONS", "TSAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS")


def sanitizer_env_in(folder, env):
    """env for a program that runs as another user from folder (a folder
    that user can reach): each sanitizer's suppressions file copied into
    folder and its log_path moved there (folder/report.<program>.<pid>), as
    the checkout and the build folder may be ones only root can enter.
    Read the reports with reports_in(folder)."""
    env = dict(env)
    for var in SANITIZER_VARS:
        if not env.get(var):
            continue
        opts = []
        for opt in env[var].split(":"):
            key, _, value = opt.partition("=")
            if key == "suppressions" and value:
                copy = os.path.join(folder, f"{var.lower()}.supp")
                shutil.copy(value, copy)
                os.chmod(copy, 0o644)
                opt = f"suppressions={copy}"
            elif key == "log_path":
                opt = f"log_path={os.path.join(folder, 'report')}"
            opts.append(opt)
        env[var] = ":".join(opts)
    return env


def reports_in(folder):
    """The sanitizer reports written under folder by sanitizer_env_in, whole; "" when none."""
    return _reports_whole(glob.glob(os.path.join(glob.escape(folder), "report.*")))


def stop_process(proc, sig=signal.SIGTERM, timeout=60):
    """sig unless proc has ended, then SIGKILL after timeout seconds; the exit
    status. A sanitizer report the program wrote is printed whole to stderr
    (the test's output): a failing test then shows why, not only an exit
    status and the tail of a log."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    report = sanitizer_reports(proc.pid)
    if report:
        print(report, file=sys.stderr, flush=True)
    return proc.returncode


class Signetd:
    """signetd on loopback with ephemeral ports, read from its JSON log."""

    def __init__(self, signetd, conf, *flags, threads=2, env=None):
        if env is None:  # standalone unless the test passes a cluster in
            env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
        self.log_path = conf + f".{time.time_ns()}.log"
        self.log = open(self.log_path, "w+")
        self.proc = subprocess.Popen(
            [signetd, "--config", conf, "--serving-address", "127.0.0.1:0", "--http-address", "127.0.0.1",
             "--metrics-port", "0", "--readiness-probe-port", "0", "--log-format", "json",
             "--signer-threads", str(threads), *flags],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.port = self.metrics_port = self.probe_port = None
        rec = wait_serving(self.proc, self.records)
        if rec is None:
            if self.proc.poll() is not None:
                raise RuntimeError("signetd exited:\n" + self.text() + sanitizer_reports(self.proc.pid))
            raise RuntimeError("signetd did not start:\n" + self.text())
        self.port = rec["port"]
        self.metrics_port = rec.get("metrics_port")
        self.probe_port = rec.get("probe_port")

    def text(self):
        return read(self.log_path)

    def records(self):
        return json_records(self.text().splitlines())

    def stop(self, sig=signal.SIGTERM):
        stop_process(self.proc, sig)
        self.log.close()
        return self.proc.returncode
