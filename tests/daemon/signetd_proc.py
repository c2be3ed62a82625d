"""What the tests that run the real signetd as a program share (imported
from beside them: python puts a script's folder first on sys.path).

  * files: read, write (with a mode);
  * the environment signetd runs in: standalone (no Kubernetes API) and
    with no systemd variables of the test's own environment leaking in;
  * stopping it: SIGTERM, a minute to exit, then SIGKILL;
  * a workload certificate through its CreateCertificate, as a mesh
    workload asks for one: `signetctl request` (gRPC over TLS, a real
    client) with a token `signetctl token` makes and a CSR like
    istio-agent's (one URI SAN, empty subject).
"""
import os
import signal
import subprocess

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def write(path, data, mode=0o600):
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
    os.chmod(path, mode)


def base_env(**extra):
    """Standalone (no Kubernetes API), and no systemd variables of our own
    environment leaking in."""
    drop = ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID",
            "CREDENTIALS_DIRECTORY")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(extra)
    return env


def stop(proc, sig=signal.SIGTERM):
    """Signals proc (if it still runs) and waits for it; its exit code."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def request_workload_cert(signetctl, conf, port, base, ca_file=None):
    """Asks signetd on 127.0.0.1:port for a certificate for
    spiffe://cluster.local/ns/default/sa/default; the token, CSR and chain
    are the files base + ".token", ".csr", ".chain.pem". Returns the
    finished `signetctl request` (its returncode, stderr) and the chain's
    path."""
    tok, csr, out = base + ".token", base + ".csr", base + ".chain.pem"
    token = subprocess.run([signetctl, "token", "--config", conf, "--namespace", "default",
                            "--service-account", "default"], check=True, capture_output=True, text=True).stdout
    write(tok, token.strip() + "\n")
    key = ec.generate_private_key(ec.SECP256R1())
    req = (x509.CertificateSigningRequestBuilder().subject_name(x509.Name([]))
           .add_extension(x509.SubjectAlternativeName(
               [x509.UniformResourceIdentifier("spiffe://cluster.local/ns/default/sa/default")]), critical=True)
           .sign(key, hashes.SHA256()))
    write(csr, req.public_bytes(serialization.Encoding.PEM))
    p = subprocess.run([signetctl, "request", "--config", conf, "--addr", f"127.0.0.1:{port}",
                        "--token-file", tok, "--csr", csr, "--out", out, *(["--ca-file", ca_file] if ca_file else [])],
                       capture_output=True, text=True, timeout=60)
    return p, out
