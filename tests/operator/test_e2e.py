#!/usr/bin/python3
"""signet-operator's Deployment really runs: the IstioCSR reconciler's
operand, started from the Pod the cluster makes, serves istio-agent.

A real kube-apiserver, etcd and kube-controller-manager (tests/kube/
apiserver.sh with KUBE_CONTROLLER_MANAGER=1: the Deployment makes a
ReplicaSet, the ReplicaSet a Pod); a SoftHSM2 CA from `signetctl init`;
signet-operator as a program. The test is the kubelet, for real: it takes
the Pod's spec from the API (not the Deployment's template), maps the
container's image to the signetd just built, and runs it with the Pod's
arguments unchanged, the Pod's environment plus what a kubelet injects
(KUBERNETES_SERVICE_HOST/PORT), and every volume materialised as a kubelet
does, bind-mounted at the Pod's mountPaths in a private mount namespace,
so signetd sees exactly the paths the operator wrote:
  - Secret and ConfigMap volumes through the kubelet's atomic writer: the
    files in a folder ..YYYY_MM_DD_HH_MM_SS.<random> (0755), ..data -> that
    folder, and per key <key> -> ..data/<key> (relative symlinks); each
    file with the volume's defaultMode (0644 unless set) or its item's
    mode; the volume's folder 01777 for a Secret (tmpfs on a node), 0777
    for a ConfigMap;
  - emptyDir: an empty folder, 0777 (01777 for medium Memory);
  - the service-account volume a kubelet adds (projected kube-api-access,
    also through the atomic writer, defaultMode 0644): a TokenRequest token
    for the Pod's service account bound to the Pod (0600 before the
    ownership pass when there is an fsGroup), the API server's CA, the
    namespace;
  - with a pod securityContext.fsGroup (the operator sets 65532), the
    kubelet's SetVolumeOwnership over each volume once written: group
    fsGroup on every entry, owner kept (root); modes OR 0440 for the
    read-only kinds (Secret, ConfigMap, projected) and 0660 for emptyDir,
    directories also OR 02110 (setgid, so the ..data and key symlinks made
    afterwards get the group too). The operator's HSM Secret (defaultMode
    0440) thus gives pin -> ..data/pin, a root:65532 0440 file, and /tmp
    a root:65532 02777 folder;
  - read-only where the Pod says, and always for Secret, ConfigMap,
    downwardAPI and projected volumes, as a kubelet mounts them.
The process's user is the runtime's: fsGroup and supplementalGroups as
its supplementary groups, runAsGroup and runAsUser when the Pod sets them
(it sets neither: uid and gid stay 0). The container's securityContext is
honoured where a host can: a read-only root file system, no new
privileges, every capability dropped; the UTS name is the Pod's. The Pod
is marked Ready only once its own readinessProbe answers 200. Then:

  0. the Pod as written reads its PIN: the volume's layout and modes are
     checked (pin -> ..data/pin, 0440, group 65532) and signetd, 65532 among
     its groups, must become ready (common/sg_secret.c follows a link that
     stays beneath the volume's folder and accepts a group-readable file
     whose group is one of the process's, not root's);
  1. the seed's sample IstioCSR, pointed at a SignetIssuer, makes a Pod
     whose container starts; the IstioCSR goes Ready=True (conditions at
     its generation);
  2. Debian's grpcio, as istio-agent, gets a certificate for a workload's
     service account (a TokenRequest token for istio-ca, checked by
     signetd's TokenReview) from 127.0.0.1:6443 under the Service's DNS
     name, and `openssl verify` accepts the chain against root.crt;
  3. signetd's root distribution writes istio-ca-root-cert in a workload
     namespace and its istiod issuance writes istiod-tls in istio-system,
     through the ClusterRole and Role the operator wrote; signetd's log
     holds no 403;
  4. the process SIGKILLed and reported as a kubelet would (exit 137,
     CrashLoopBackOff) makes the IstioCSR Degraded/OperandFailed,
     Ready=False; the container started again in the same Pod (same
     volumes) and ready makes it Ready=True, and it issues again. The
     termination message is the kubelet's: the container sets
     terminationMessagePolicy FallbackToLogsOnError and signetd writes no
     /dev/termination-log, so on a non-zero exit it is the log's tail (the
     last 80 lines, of which the last 2048 bytes); Degraded must carry it
     (not the back-off message), at least one whole log line of it;
  5. ...down to signetd's last log line: an expected failure, as the
     operator keeps the head of that message in a 1024-byte buffer, which
     cuts the newest lines (an unexpected success fails the run: drop the
     marker then).

Where this host differs from a real node (read before trusting a green
run):
  - The process runs as root (uid and gid 0, capabilities dropped, fsGroup
    as its supplementary group): there is no image, so the image's
    non-root user is not simulated, nor is runAsNonRoot's check of it
    (a kubelet refuses to start a root user), nor seccomp. signetd reads
    the root:65532 0440 PIN as its owner here, where on a node, as 65532,
    it would through its group; sg_secret's group check does run (65532
    is among its groups, the file's group is not root's), but the read
    permission itself is not put to the test.
  - Volumes are folders under the test's tmp on the host's disk, not a
    tmpfs (Secret, projected) in the kubelet's pod folder. They are
    written once: no atomic update when a Secret or ConfigMap changes, no
    token rotation; and the ownership pass is the volume plugin's alone
    (a node's wrapped emptyDir makes one of its own first, with the same
    result on a first write).
  - The network is the host's loopback: signetd binds 0.0.0.0 on the
    container ports, which must be free; no NetworkPolicy is enforced.
  - SoftHSM2's token store is not in the Secret: signetd.conf names this
    host's softhsm2.conf by absolute path, and that file and the token
    folder stay visible (read-write) at their host paths, even where a
    mountPath such as /tmp covers them.
  - The log is the process's stdout and stderr in one file, not the CRI
    log; the termination message is computed from it as the kubelet
    would and reported with the Pod's status by the test.

Needs root (mount namespaces, mount points such as /etc/signet/hsm made
and removed again) and the container ports 6443, 9402 and 6060 free.

Usage: test_e2e.py SIGNET_OPERATOR SIGNETD SIGNETCTL SOURCE_DIR
(test_e2e.py --in-pod PLAN is the container side of the simulated
kubelet, run by the test itself inside the new namespaces.)
"""
import base64
import ctypes
import json
import os
import re
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
import urllib.parse
import urllib.request

MS_RDONLY, MS_REMOUNT, MS_BIND = 1, 32, 4096
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 38, 47, 4


def in_pod(plan_path):
    """The container side: in fresh mount and UTS namespaces (unshare),
    mount the Pod's volumes at its mountPaths, apply the securityContext
    and exec the container's program. Everything the mounts may cover
    (the program, the volumes' folders, the kept host paths) is opened
    first and mounted through /proc/self/fd."""
    with open(plan_path) as f:
        plan = json.load(f)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

    def mount(src, target, flags):
        if libc.mount(src.encode() if src else None, target.encode(), None, flags, None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mount {src} on {target}: {os.strerror(err)}")

    def prctl(*a):
        if libc.prctl(*a, *([0] * (5 - len(a)))) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl{a}: {os.strerror(err)}")

    socket.sethostname(plan["hostname"])
    program = os.open(plan["binary"], os.O_RDONLY)
    volumes = [(os.open(m["source"], os.O_PATH), m) for m in plan["mounts"]]
    kept = [(os.open(p, os.O_PATH), p) for p in plan["keep"]]
    for fd, m in sorted(volumes, key=lambda v: v[1]["target"].rstrip("/").count("/")):  # outer ones first
        os.makedirs(m["target"], exist_ok=True)  # only ever inside a volume: the test made the rest
        mount(f"/proc/self/fd/{fd}", m["target"], MS_BIND)
        if m["readOnly"]:
            mount(None, m["target"], MS_REMOUNT | MS_BIND | MS_RDONLY)
    for fd, p in kept:
        if not os.path.lexists(p):  # covered by a volume: a mount point inside it
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.makedirs(p)
            else:
                os.makedirs(os.path.dirname(p), exist_ok=True)
                open(p, "x").close()
        mount(f"/proc/self/fd/{fd}", p, MS_BIND)
    if plan["readOnlyRootFilesystem"]:
        mount(None, "/", MS_REMOUNT | MS_BIND | MS_RDONLY)
    # The runtime's user: supplementary groups fsGroup + supplementalGroups
    # (with no image, no /etc/group of its own adds any), runAsGroup as the
    # group, runAsUser last (after the bounding set is dropped, which needs
    # CAP_SETPCAP); without them uid and gid stay 0.
    os.setgroups(plan["groups"])
    if plan["runAsGroup"] is not None:
        os.setresgid(plan["runAsGroup"], plan["runAsGroup"], plan["runAsGroup"])
    if plan["noNewPrivs"]:
        prctl(PR_SET_NO_NEW_PRIVS, 1)
    if plan["dropAllCapabilities"]:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
        for cap in range(last + 1):
            prctl(PR_CAPBSET_DROP, cap)
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
        with open("/proc/self/status") as f:
            inh = [ln.split()[1] for ln in f if ln.startswith("CapInh:")][0]
        assert int(inh, 16) == 0, f"inheritable capabilities {inh}: root would keep them across exec"
    if plan["runAsUser"] is not None:
        os.setresuid(plan["runAsUser"], plan["runAsUser"], plan["runAsUser"])
    os.execve(program, [plan["argv0"], *plan["args"]], plan["env"])


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--in-pod":
    in_pod(sys.argv[2])

OPERATOR, SIGNETD, SIGNETCTL, SOURCE_DIR = sys.argv[1:5]
del sys.argv[1:5]

import grpc  # noqa: E402
import yaml  # noqa: E402,F401 (kube_rest.apply_crds)
from cryptography import x509  # noqa: E402
from cryptography.x509.oid import ExtensionOID  # noqa: E402

KUBE_SCRIPTS = os.path.join(SOURCE_DIR, "tests", "kube")
sys.path.insert(0, KUBE_SCRIPTS)
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "ra"))
import kube_rest  # noqa: E402
import signet_e2e  # noqa: E402
from signet_e2e import make_csr, read, spiffe  # noqa: E402

MANIFESTS = os.path.join(SOURCE_DIR, "packaging", "kubernetes")
NS = "istio-csr"
ISTIO = "istio-system"
APP = "cert-manager-istio-csr"
IMAGE = "registry.example/signet/signetd:e2e"
IMAGES = {IMAGE: SIGNETD}  # the node's "image store": image -> the program it runs
CR = f"/apis/operator.openshift.io/v1alpha1/namespaces/{NS}/istiocsrs/default"
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
# The kubelet's SetVolumeOwnership (pkg/volume/volume_linux.go) under a
# pod's fsGroup: what it ORs into each mode, read-only volumes (Secret,
# ConfigMap, projected) and writable ones (emptyDir); directories also get
# setgid and x for owner and group.
RO_MASK, RW_MASK, DIR_MASK = 0o440, 0o660, 0o2110
# Volume kinds the kubelet always mounts read-only, whatever the
# volumeMount says.
API_DATA_VOLUMES = ("secret", "configMap", "downwardAPI", "projected")
# A kubelet's FallbackToLogsOnError: the log's last 80 lines, 2048 bytes.
TERMINATION_LOG_LINES, TERMINATION_LOG_BYTES = 80, 2048
FS_GROUP = 65532  # the operator's pod securityContext.fsGroup
FORBIDDEN = re.compile(r"\b403 Forbidden\b|\bis forbidden\b")
SANITIZER_ENV = ("ASAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS", "UBSAN_OPTIONS")


def wait_for(what, fn, timeout=60, interval=0.2):
    return kube_rest.wait_for(what, fn, timeout, interval)


def cond(obj, ctype):
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return c
    return None


def b64(data):
    return base64.b64encode(data if isinstance(data, bytes) else data.encode()).decode()


def http_status(port, path, timeout=1):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def port_free(port):
    """True when 0.0.0.0:port can be bound (TIME_WAIT leftovers aside)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("0.0.0.0", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def set_volume_ownership(path, fs_group, read_only):
    """SetVolumeOwnership, when the pod has an fsGroup: every entry under
    path, path included, gets group fs_group (lchown: symlinks too, the
    owner kept) and, symlinks excepted, mode |= 0440 (read-only volume) or
    0660 (writable), directories also 02110."""
    if fs_group is None:
        return
    st = os.lstat(path)
    os.lchown(path, -1, fs_group)
    if stat.S_ISLNK(st.st_mode):
        return
    mask = RO_MASK if read_only else RW_MASK
    if stat.S_ISDIR(st.st_mode):
        mask |= DIR_MASK
    os.chmod(path, stat.S_IMODE(st.st_mode) | mask)
    if stat.S_ISDIR(st.st_mode):
        for name in sorted(os.listdir(path)):
            set_volume_ownership(os.path.join(path, name), fs_group, read_only)


def atomic_write(into, payload, fs_group):
    """The kubelet's AtomicWriter (pkg/volume/util/atomic_writer.go), first
    write, for a read-only volume: payload {path: (bytes, mode)} written
    into a fresh timestamped folder ..YYYY_MM_DD_HH_MM_SS.<random> (0755)
    with each file's mode, subfolders 0755; the ownership pass (fs_group)
    over the whole volume; then ..data -> that folder (made as ..data_tmp,
    renamed over) and, per top-level name of the payload, <name> ->
    ..data/<name>, both relative and made after the ownership pass (root's,
    their group fs_group all the same: the volume's folder is setgid by
    then). Returns the timestamped folder's name."""
    ts = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime()) + str(int.from_bytes(os.urandom(4), "little"))
    os.mkdir(os.path.join(into, ts))
    os.chmod(os.path.join(into, ts), 0o755)
    for path, (data, mode) in payload.items():
        parts = path.split("/")
        assert not os.path.isabs(path) and ".." not in parts and not parts[0].startswith(".."), path
        full = os.path.join(into, ts, path)
        for i in range(len(parts) - 1):
            d = os.path.join(into, ts, *parts[:i + 1])
            if not os.path.isdir(d):
                os.mkdir(d)
                os.chmod(d, 0o755)
        with open(full, "xb") as f:
            f.write(data)
        os.chmod(full, mode)
    set_volume_ownership(into, fs_group, read_only=True)
    os.symlink(ts, os.path.join(into, "..data_tmp"))
    os.rename(os.path.join(into, "..data_tmp"), os.path.join(into, "..data"))
    for top in sorted({path.split("/")[0] for path in payload}):
        os.symlink(os.path.join("..data", top), os.path.join(into, top))
    return ts


class Container:
    """One run of a Pod's container: a process in its own mount and UTS
    namespaces, its output in a log file."""

    def __init__(self, kubelet, pod, plan, log_path):
        self.kubelet, self.pod, self.log_path, self.plan = kubelet, pod, log_path, plan
        self.spec = pod["spec"]["containers"][0]
        plan_path = log_path + ".plan.json"
        with open(plan_path, "w") as f:
            json.dump(plan, f, indent=1)
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen(
                ["unshare", "--mount", "--uts", "--propagation", "private", "--", sys.executable,
                 os.path.abspath(__file__), "--in-pod", plan_path],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def text(self):
        return read(self.log_path)

    def tail(self, lines=20):
        return "\n".join(self.text().splitlines()[-lines:])

    def running(self):
        return self.proc.poll() is None

    def port(self, name):
        return next(p["containerPort"] for p in self.spec["ports"] if p["name"] == name)

    def probe(self, which="readinessProbe"):
        """The probe's answer (an HTTP status, None when nothing answers)."""
        get = self.spec[which]["httpGet"]
        assert get.get("scheme", "HTTP") == "HTTP", get
        port = get["port"]
        if isinstance(port, str):
            port = self.port(port)
        return http_status(port, get["path"], self.spec[which].get("timeoutSeconds", 1))

    def wait_ready(self, timeout=90):
        """The kubelet's readiness loop: initialDelaySeconds, then a probe
        every periodSeconds until one answers 200. Fails with the log if
        the process exits first."""
        p = self.spec["readinessProbe"]
        deadline = time.time() + timeout
        time.sleep(p.get("initialDelaySeconds", 0))
        while time.time() < deadline:
            if not self.running():
                raise AssertionError(f"signetd exited {self.proc.returncode} before it was ready:\n{self.tail()}")
            if self.probe() == 200:
                return
            time.sleep(p.get("periodSeconds", 10))
        raise AssertionError(f"the readiness probe never answered 200 in {timeout}s:\n{self.tail()}")

    def kill(self, sig=signal.SIGKILL):
        """Kills the container's process; returns its exit code as a
        container runtime reports it (128 + signal)."""
        if self.running():
            self.proc.send_signal(sig)
        rc = self.proc.wait(30)
        return 128 - rc if rc < 0 else rc

    def termination_message(self):
        """What the kubelet writes as terminated.message of the exited
        container: the terminationMessagePath file, which signetd never
        writes, so empty; then, with FallbackToLogsOnError and a non-zero
        exit, the log's last 80 lines as the runtime reads them back (each
        with its newline), of which a 2048-byte ring buffer keeps the end
        (kuberuntime's readLastStringFromContainerLogs). None when empty."""
        assert not self.running()
        if self.spec.get("terminationMessagePolicy") != "FallbackToLogsOnError" or self.proc.returncode == 0:
            return None
        lines = self.text().split("\n")
        if lines[-1] == "":
            lines.pop()
        tail = "".join(ln + "\n" for ln in lines[-TERMINATION_LOG_LINES:])
        return tail.encode()[-TERMINATION_LOG_BYTES:].decode(errors="replace") or None


class Kubelet:
    """The node: runs a Pod's single container from its spec as read from
    the API, volumes materialised under tmp/pods/<pod>."""

    def __init__(self, env, kube, tmp, keep):
        self.env, self.kube, self.tmp, self.keep = env, kube, tmp, keep
        self.made_dirs = []  # mount points made on this host, outermost first
        self.containers = []
        self.api_port = urllib.parse.urlsplit(env["KUBE_APISERVER"]).port

    def mount_point(self, path):
        """mkdir -p on the host, remembering what was made."""
        missing = []
        p = os.path.abspath(path)
        while not os.path.lexists(p):
            missing.append(p)
            p = os.path.dirname(p)
        for d in reversed(missing):
            os.mkdir(d, 0o755)
            self.made_dirs.append(d)

    def service_account_token(self, pod):
        """What a kubelet projects: a token for the Pod's service account,
        the API server's default audience, bound to the Pod."""
        sa = pod["spec"].get("serviceAccountName") or "default"
        ns = pod["metadata"]["namespace"]
        spec = {"expirationSeconds": 3607,
                "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod["metadata"]["name"],
                                   "uid": pod["metadata"]["uid"]}}
        doc = self.kube.ok("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token",
                           {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
        return doc["status"]["token"]

    def volume(self, pod, vol, into, fs_group):
        """Materialises one volume of the Pod into the folder `into`, as the
        kubelet's volume plugins do: Secret (on tmpfs there: the folder
        01777) and ConfigMap (on disk: 0777) through the atomic writer, with
        defaultMode (0644 unless set) or an item's mode; emptyDir 0777
        (01777 for medium Memory); then, with an fsGroup, SetVolumeOwnership.
        A missing key or object fails the Pod unless optional, as there."""
        ns = pod["metadata"]["namespace"]

        def payload(data, items, mode, optional, what):
            if items is None:
                return {key: (value, mode) for key, value in data.items()}
            out = {}
            for item in items:
                if item["key"] in data:
                    out[item["path"]] = (data[item["key"]], item.get("mode", mode))
                else:
                    assert optional, f"volume {vol['name']}: {what} has no key {item['key']}"
            return out

        os.mkdir(into)
        if "secret" in vol:
            src = vol["secret"]
            os.chmod(into, 0o1777)
            code, obj = self.kube.req("GET", f"/api/v1/namespaces/{ns}/secrets/{src['secretName']}")
            assert code == 200 or src.get("optional"), f"volume {vol['name']}: Secret {src['secretName']}: {code}"
            data = {k: base64.b64decode(v) for k, v in ((obj.get("data") or {}) if code == 200 else {}).items()}
            atomic_write(into, payload(data, src.get("items"), src.get("defaultMode", 0o644), src.get("optional"),
                                       f"Secret {src['secretName']}"), fs_group)
        elif "configMap" in vol:
            src = vol["configMap"]
            os.chmod(into, 0o777)
            code, obj = self.kube.req("GET", f"/api/v1/namespaces/{ns}/configmaps/{src['name']}")
            assert code == 200 or src.get("optional"), f"volume {vol['name']}: ConfigMap {src['name']}: {code}"
            obj = obj if code == 200 else {}
            data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
            data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
            atomic_write(into, payload(data, src.get("items"), src.get("defaultMode", 0o644), src.get("optional"),
                                       f"ConfigMap {src['name']}"), fs_group)
        elif "emptyDir" in vol:
            os.chmod(into, 0o1777 if (vol["emptyDir"] or {}).get("medium") == "Memory" else 0o777)
            set_volume_ownership(into, fs_group, read_only=False)
        else:
            raise AssertionError(f"volume {vol['name']}: a kind this kubelet does not materialise: {sorted(vol)}")

    def start(self, pod, name, volumes=None):
        """Runs the Pod's container. volumes: a previous Container's
        materialised volumes to reuse (a restart in the same Pod keeps
        them); else they are made afresh under `name`."""
        spec = pod["spec"]
        assert len(spec["containers"]) == 1 and not spec.get("initContainers"), "one container, no init containers"
        c = spec["containers"][0]
        assert c["image"] in IMAGES, f"ErrImagePull: no image {c['image']} on this node"
        assert not c.get("command"), "the image's entrypoint is signetd: a command override is not simulated"
        for port in c.get("ports") or []:
            assert port_free(port["containerPort"]), (
                f"port {port['containerPort']} ({port['name']}) is taken on this host (the simulated Pod shares "
                "the host's network)")
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "HOSTNAME": pod["metadata"]["name"]}
        for e in c.get("env") or []:
            assert "valueFrom" not in e, f"env {e['name']}: valueFrom is not simulated"
            env[e["name"]] = e.get("value", "")
        env.update(KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(self.api_port))
        env.update({k: os.environ[k] for k in SANITIZER_ENV if k in os.environ})  # the build's, not a kubelet's
        psc = spec.get("securityContext") or {}
        fs_group = psc.get("fsGroup")
        base = os.path.join(self.tmp, "pods", pod["metadata"]["name"], name)
        if volumes is None:
            os.makedirs(base)
            volumes = {}
            for vol in spec.get("volumes") or []:
                volumes[vol["name"]] = os.path.join(base, "volumes", vol["name"])
                os.makedirs(os.path.dirname(volumes[vol["name"]]), exist_ok=True)
                self.volume(pod, vol, volumes[vol["name"]], fs_group)
            # The projected kube-api-access volume (tmpfs there, defaultMode
            # 0644); with an fsGroup the token is written 0600 and the
            # ownership pass makes it 0640 (pkg/volume/projected).
            sa = os.path.join(base, "volumes", "kube-api-access")
            os.mkdir(sa)
            os.chmod(sa, 0o1777)
            atomic_write(sa, {"token": (self.service_account_token(pod).encode(),
                                        0o644 if fs_group is None else 0o600),
                              "ca.crt": (read(self.env["KUBE_CA_FILE"]).encode(), 0o644),
                              "namespace": (pod["metadata"]["namespace"].encode(), 0o644)}, fs_group)
            volumes["kube-api-access"] = sa
        else:
            os.makedirs(base)
        kinds = {v["name"]: next(k for k in v if k != "name") for v in spec.get("volumes") or []}
        mounts = [{"source": volumes[m["name"]], "target": m["mountPath"],
                   "readOnly": bool(m.get("readOnly")) or kinds[m["name"]] in API_DATA_VOLUMES}
                  for m in c.get("volumeMounts") or []]
        if spec.get("automountServiceAccountToken", True) and not any(m["target"] == SA_MOUNT for m in mounts):
            mounts.append({"source": volumes["kube-api-access"], "target": SA_MOUNT, "readOnly": True})
        targets = [m["target"] for m in mounts]
        for t in targets:  # on the host, unless inside another volume
            if not any(t != o and t.startswith(o.rstrip("/") + "/") for o in targets):
                self.mount_point(t)
        sc = c.get("securityContext") or {}
        groups = ([fs_group] if fs_group is not None else []) + list(psc.get("supplementalGroups") or [])
        plan = {"hostname": pod["metadata"]["name"], "binary": IMAGES[c["image"]], "argv0": "signetd",
                "args": c.get("args") or [], "env": env, "mounts": mounts, "keep": self.keep,
                "groups": groups, "runAsUser": sc.get("runAsUser", psc.get("runAsUser")),
                "runAsGroup": sc.get("runAsGroup", psc.get("runAsGroup")),
                "readOnlyRootFilesystem": bool(sc.get("readOnlyRootFilesystem")),
                "noNewPrivs": sc.get("allowPrivilegeEscalation") is False,
                "dropAllCapabilities": "ALL" in ((sc.get("capabilities") or {}).get("drop") or [])}
        container = Container(self, pod, plan, base + ".log")
        container.volumes = volumes
        self.containers.append(container)
        return container

    def close(self):
        """Kills what runs and removes the mount points made on this host
        (each only if empty); may be called again."""
        for c in self.containers:
            if c.running():
                c.kill()
        while self.made_dirs:
            d = self.made_dirs.pop()
            try:
                os.rmdir(d)
            except OSError as e:
                print(f"left {d}: {e}", file=sys.stderr)


class Env:
    """The API server with the controller manager, the CA, the operator."""

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="operator-e2e.", dir=os.environ.get("SIGNET_TEST_TMP"))
        self.procs = []
        self.kubelet = None
        self.api_dir = os.path.join(self.tmp, "api")
        os.mkdir(self.api_dir)
        script = os.path.join(KUBE_SCRIPTS, "apiserver.sh")
        # Stopped even when the set-up fails (tearDownModule would not run
        # then); after a tearDownModule they find nothing left to do.
        unittest.addModuleCleanup(subprocess.run, [script, "stop", self.api_dir], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        unittest.addModuleCleanup(self.stop)
        subprocess.run([os.path.join(KUBE_SCRIPTS, "build-apiserver.sh"), "--controller-manager"], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([script, "start", self.api_dir], check=True, stdout=subprocess.DEVNULL,
                       env=dict(os.environ, KUBE_CONTROLLER_MANAGER="1"))
        self.env = dict(line.split("=", 1) for line in read(os.path.join(self.api_dir, "env")).splitlines()
                        if "=" in line)
        self.kube = k = kube_rest.Kube(self.env)
        k.apply_crds(os.path.join(MANIFESTS, "operator-crds.yaml"))
        k.apply_crds(os.path.join(MANIFESTS, "base", "crds.yaml"))
        for ns in (NS, ISTIO, "apps"):
            k.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        k.ok("POST", "/api/v1/namespaces/apps/serviceaccounts",
             {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "app1"}})
        k.ok("POST", f"/apis/signet.dev/v1alpha1/namespaces/{ISTIO}/signetissuers",
             {"apiVersion": "signet.dev/v1alpha1", "kind": "SignetIssuer", "metadata": {"name": "mesh"}, "spec": {}})
        # The CA, and the HSM Secret the operator mounts at /etc/signet/hsm.
        self.ca = os.path.join(self.tmp, "ca")
        subprocess.run([SIGNETCTL, "init", "--dir", self.ca, "--log-level", "warn"], check=True,
                       stdout=subprocess.DEVNULL)
        generated = {}
        for line in read(os.path.join(self.ca, "signet.conf")).splitlines():
            if "=" in line and not line.lstrip().startswith("#"):
                key, value = (s.strip() for s in line.split("=", 1))
                generated[key] = value
        softhsm_conf = os.path.join(self.ca, generated["softhsm2-conf"])
        conf = (f"hsm-token = {generated['hsm-token']}\nhsm-key = {generated['hsm-key']}\n"
                "pin-file = pin\nca-cert = ca.crt\nroot-cert = root.crt\n"
                f"softhsm2-conf = {softhsm_conf}\n")
        self.root_file = os.path.join(self.ca, generated["root-cert"])
        self.root = read(self.root_file)
        k.ok("POST", f"/api/v1/namespaces/{NS}/secrets",
             {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "signet-hsm"},
              "data": {"signetd.conf": b64(conf), "pin": b64(read(os.path.join(self.ca, generated["pin-file"]))),
                       "ca.crt": b64(read(os.path.join(self.ca, generated["ca-cert"]))),
                       "root.crt": b64(self.root)}})
        # The token store stays at its host path (it is not in the Secret).
        tokendir = next(line.split("=", 1)[1].strip() for line in read(softhsm_conf).splitlines()
                        if line.startswith("directories.tokendir"))
        # Host paths the container must still see where a volume (the
        # /tmp emptyDir) would cover them: the token store, and for the
        # sanitizer builds the program itself (its symbols, read through
        # /proc/self/exe's path) and the suppression files.
        keep = [softhsm_conf, tokendir, SIGNETD]
        for var in SANITIZER_ENV:
            for part in os.environ.get(var, "").split(":"):
                if part.startswith("suppressions=") and os.path.exists(part.split("=", 1)[1]):
                    keep.append(os.path.abspath(part.split("=", 1)[1]))
        self.kubelet = Kubelet(self.env, k, self.tmp, keep)
        signet_e2e.compile_proto(os.path.join(SOURCE_DIR, "proto"), self.tmp)
        import ca_pb2
        import ca_pb2_grpc
        self.pb, self.pb_grpc = ca_pb2, ca_pb2_grpc
        self.operator_log = os.path.join(self.tmp, "operator.log")
        self.operator = self.run_operator()

    def run_operator(self):
        args = [OPERATOR, "--kubeconfig", self.env["KUBECONFIG"], "--signetd-image", IMAGE, "--trustmanager=false",
                "--metrics-port=0", "--readiness-probe-port=0", "--log-format=json", "--leader-elect=false",
                "--log-level", os.environ.get("OPERATOR_LOG_LEVEL", "info")]
        with open(self.operator_log, "w") as log:
            p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append(p)

        def started():
            assert p.poll() is None, f"signet-operator exited {p.returncode}:\n{read(self.operator_log)}"
            return any('"metrics endpoint"' in line for line in read(self.operator_log).splitlines())
        wait_for("signet-operator's metrics endpoint", started, timeout=20)
        return p

    def stop(self):
        """The containers (and their mount points), then the operator."""
        if self.kubelet:
            self.kubelet.close()
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    def close(self, keep):
        self.stop()
        subprocess.run([os.path.join(KUBE_SCRIPTS, "apiserver.sh"), "stop", self.api_dir],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if keep:
            print(f"kept {self.tmp}", file=sys.stderr)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


E = None
RESULTS = []


def setUpModule():
    global E
    E = Env()


def tearDownModule():
    ok = RESULTS and all(r.wasSuccessful() for r in RESULTS)
    E.close(keep=bool(os.environ.get("SIGNET_KEEP_TMP")) or not ok)


def sample():
    """The seed's sample IstioCSR (reference §1.5), signed by the
    SignetIssuer `mesh`."""
    return {"apiVersion": "operator.openshift.io/v1alpha1", "kind": "IstioCSR",
            "metadata": {"name": "default", "namespace": NS},
            "spec": {"istioCSRConfig": {
                "certManager": {"issuerRef": {"name": "mesh", "kind": "SignetIssuer", "group": "signet.dev"}},
                "istiodTLSConfig": {"trustDomain": "cluster.local"},
                "istio": {"namespace": ISTIO}}}}


class OperandRuns(unittest.TestCase):
    """One scenario, in order: each step starts from the last one's state."""

    pod = None
    container = None
    broken = None  # the step that failed: the later ones are skipped, not timed out
    crash = None  # test_4's termination message and the Degraded message it made

    def run(self, result=None):
        before = len(result.failures) + len(result.errors) if result else 0
        result = super().run(result)
        if result is not None:
            if result not in RESULTS:
                RESULTS.append(result)
            if len(result.failures) + len(result.errors) > before and not type(self).broken:
                type(self).broken = self._testMethodName
        return result

    def setUp(self):
        if self.broken:
            self.skipTest(f"{self.broken} failed")

    @classmethod
    def setUpClass(cls):
        cls.k = E.kube
        cls.k.ok("POST", f"/apis/operator.openshift.io/v1alpha1/namespaces/{NS}/istiocsrs", sample())
        cls.t0 = time.time()
        # The container's ports must be free before anything runs (the
        # kubelet checks again at every start).
        pods = wait_for("the operand's Pod", lambda: cls.k.list_pods(NS, {"app": APP}))
        for port in pods[0]["spec"]["containers"][0].get("ports") or []:
            assert port_free(port["containerPort"]), (
                f"port {port['containerPort']} ({port['name']}) is taken on this host: the simulated Pod shares "
                "the host's network, so nothing else may listen there while this test runs")

    def cr(self):
        return self.k.get(CR)

    def ready(self, status, reason=None, part=None, timeout=60):
        """The IstioCSR once Ready has that status (and reason, and part of
        the message), every condition at the CR's generation."""
        def check():
            o = self.cr()
            c = cond(o, "Ready")
            if not c or c["status"] != status or (reason and c["reason"] != reason):
                return None
            if part and part not in c["message"]:
                return None
            gen = o["metadata"]["generation"]
            if any(x.get("observedGeneration") != gen for x in o["status"]["conditions"]):
                return None
            return o
        return wait_for(f"IstioCSR Ready={status} {reason or ''} {part or ''}", check, timeout)

    def the_pod(self):
        """The Deployment's one Pod, made by the ReplicaSet controller."""
        pods = wait_for("the operand's Pod", lambda: self.k.list_pods(NS, {"app": APP}))
        self.assertEqual(len(pods), 1, [p["metadata"]["name"] for p in pods])
        return pods[0]

    def check_process(self, container):
        """The simulation did what it claims: the process (unshare and the
        launcher exec in place, so the pid is signetd's) runs the Pod's
        arguments unchanged, sees the Pod's mountPaths (read-only where
        asked) on a read-only root, with no capabilities and no new
        privileges, under the Pod's host name."""
        pid = container.proc.pid
        spec = container.spec
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            self.assertEqual(f.read().split(b"\0")[:-1], [b"signetd"] + [a.encode() for a in spec["args"]])
        self.assertEqual(os.path.realpath(f"/proc/{pid}/exe"), os.path.realpath(SIGNETD))
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
        self.assertEqual(environ[b"KUBERNETES_SERVICE_HOST"], b"127.0.0.1")
        self.assertNotIn(b"KUBECONFIG", environ)
        mounts = {}
        with open(f"/proc/{pid}/mountinfo") as f:
            for line in f:
                fields = line.split()
                mounts[fields[4]] = fields[5].split(",")
        self.assertIn("ro", mounts["/"])
        kinds = {v["name"]: next(k for k in v if k != "name") for v in container.pod["spec"]["volumes"]}
        want = {m["mountPath"]: m.get("readOnly", False) or kinds[m["name"]] in API_DATA_VOLUMES
                for m in spec["volumeMounts"]}
        want[SA_MOUNT.replace("/var/run/", "/run/")] = True  # /var/run is /run here
        for path, ro in want.items():
            path = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
            self.assertIn(path, mounts)
            self.assertEqual("ro" in mounts[path], ro, path)
        with open(f"/proc/{pid}/status") as f:
            status = dict(line.split(":", 1) for line in f)
        for capset in ("CapPrm", "CapEff", "CapBnd", "CapAmb"):
            self.assertEqual(int(status[capset], 16), 0, capset)
        self.assertEqual(status["NoNewPrivs"].strip(), "1")
        # The Pod's user: no runAsUser/runAsGroup (the image's user is not
        # simulated), so uid and gid 0, and fsGroup as the supplementary
        # group.
        psc, sc = container.pod["spec"].get("securityContext") or {}, spec.get("securityContext") or {}
        uid, gid = sc.get("runAsUser", psc.get("runAsUser", 0)), sc.get("runAsGroup", psc.get("runAsGroup", 0))
        self.assertEqual(status["Uid"].split(), [str(uid)] * 4)
        self.assertEqual(status["Gid"].split(), [str(gid)] * 4)
        groups = ([psc["fsGroup"]] if "fsGroup" in psc else []) + list(psc.get("supplementalGroups") or [])
        self.assertEqual(sorted(int(g) for g in status["Groups"].split()), sorted(groups))
        uts = subprocess.run(["nsenter", "-t", str(pid), "--uts", "hostname"], capture_output=True, text=True)
        self.assertEqual(uts.stdout.strip(), container.pod["metadata"]["name"], uts.stderr)

    def log_is_clean(self, container):
        """No 403 in signetd's log (sg_kube's errors read "kube: VERB PATH:
        403 Forbidden: <the API server's message>", and that message
        "... is forbidden: ..."), and no sanitizer report."""
        lines = container.text().splitlines()
        bad = [ln for ln in lines if FORBIDDEN.search(ln)]
        self.assertEqual(bad, [], "signetd was refused by the API server (RBAC the operator wrote)")
        self.assertEqual([ln for ln in lines if "Sanitizer" in ln], [], "a sanitizer report in signetd's log")

    def test_0_pod_as_written_reads_its_pin(self):
        """The HSM Secret volume exactly as a kubelet lays it out for this
        Pod: pin -> ..data/pin, ..data -> ..<timestamp>, the file root-owned
        with defaultMode 0440 and the Pod's fsGroup as its group; signetd,
        that group among its own, reads its PIN through the links and
        becomes ready."""
        pod = self.the_pod()
        psc = pod["spec"].get("securityContext") or {}
        self.assertEqual(psc.get("fsGroup"), FS_GROUP)
        hsm = next(v for v in pod["spec"]["volumes"] if v["name"] == "hsm")
        self.assertEqual(hsm["secret"].get("defaultMode"), 0o440)
        self.assertEqual(pod["spec"]["containers"][0].get("terminationMessagePolicy"), "FallbackToLogsOnError")
        c = E.kubelet.start(pod, "as-written")
        try:
            vol = c.volumes["hsm"]
            self.assertEqual(os.readlink(os.path.join(vol, "pin")), "..data/pin")
            self.assertRegex(os.readlink(os.path.join(vol, "..data")), r"^\.\.\d{4}(_\d\d){5}\.\d+$")
            st = os.stat(os.path.join(vol, "pin"))
            self.assertEqual((stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid), (0o440, 0, FS_GROUP))
            c.wait_ready(timeout=30)
            self.check_process(c)
        finally:
            c.kill(signal.SIGTERM)

    def test_1_the_pod_runs_and_the_istiocsr_is_ready(self):
        pod = self.the_pod()
        owner = pod["metadata"]["ownerReferences"][0]
        self.assertEqual((owner["kind"], owner.get("controller")), ("ReplicaSet", True))
        self.assertTrue(owner["name"].startswith(APP + "-"), owner)
        self.ready("False", "Progressing")
        c = pod["spec"]["containers"][0]
        self.assertEqual(c["image"], IMAGE)
        self.assertNotIn("env", c)  # nothing of the HSM's in the environment
        type(self).pod = pod
        t = time.time()
        container = E.kubelet.start(pod, "run-1")
        type(self).container = container
        container.wait_ready()
        self.check_process(container)
        self.assertEqual(container.probe("livenessProbe"), 200)
        self.k.pod_ready(NS, pod["metadata"]["name"])
        o = self.ready("True", "Ready")
        self.assertEqual((cond(o, "Degraded")["status"], cond(o, "Progressing")["status"]), ("False", "False"))
        print(f"\n  signetd ready {time.time() - t:.1f}s after its start, IstioCSR Ready "
              f"{time.time() - self.t0:.1f}s after it was created", file=sys.stderr)
        d = self.k.ok("GET", f"/apis/apps/v1/namespaces/{NS}/deployments/{APP}")
        self.assertEqual(d["status"].get("availableReplicas"), 1)
        self.assertTrue(container.running())

    def issue(self, sa):
        """istio-agent's call for apps/<sa>: a TokenRequest token for
        istio-ca, an agent's CSR, TLS to the container's gRPC port under the
        Service's DNS name; the chain checked with `openssl verify`."""
        tok = self.k.ok("POST", f"/api/v1/namespaces/apps/serviceaccounts/{sa}/token",
                        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                         "spec": {"audiences": ["istio-ca"], "expirationSeconds": 600}})["status"]["token"]
        port = self.container.port("grpc")
        creds = grpc.ssl_channel_credentials(root_certificates=E.root.encode())
        ident = spiffe("apps", sa)
        with grpc.secure_channel(f"127.0.0.1:{port}", creds,
                                 options=[("grpc.ssl_target_name_override", f"{APP}.{NS}.svc")]) as ch:
            stub = E.pb_grpc.IstioCertificateServiceStub(ch)
            req = E.pb.IstioCertificateRequest(csr=make_csr(ident), validity_duration=3600)
            chain = list(stub.CreateCertificate(req, metadata=[("authorization", f"Bearer {tok}")],
                                                timeout=30).cert_chain)
        self.assertGreaterEqual(len(chain), 2)
        self.assertEqual(chain[-1].strip(), E.root.strip())
        path = os.path.join(E.tmp, f"{sa}-chain.{time.time_ns()}.pem")
        with open(path, "w") as f:
            f.write("".join(chain))
        v = subprocess.run(["openssl", "verify", "-CAfile", E.root_file, path], capture_output=True, text=True)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        leaf = x509.load_pem_x509_certificate(chain[0].encode())
        san = leaf.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value
        self.assertEqual(san.get_values_for_type(x509.UniformResourceIdentifier), [ident])

    def test_2_a_workload_gets_a_certificate(self):
        self.issue("app1")

    def test_3_root_configmap_and_istiod_secret(self):
        cm = wait_for("istio-ca-root-cert in apps",
                      lambda: self.k.get("/api/v1/namespaces/apps/configmaps/istio-ca-root-cert"))
        self.assertEqual(cm["data"]["root-cert.pem"].strip(), E.root.strip())
        s = wait_for("istiod-tls in istio-system", lambda: self.k.get(f"/api/v1/namespaces/{ISTIO}/secrets/istiod-tls"))
        crt = base64.b64decode(s["data"]["tls.crt"])
        self.assertTrue(base64.b64decode(s["data"]["tls.key"]))
        path = os.path.join(E.tmp, "istiod.pem")
        with open(path, "wb") as f:
            f.write(crt)
        v = subprocess.run(["openssl", "verify", "-CAfile", E.root_file, path], capture_output=True, text=True)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        leaf = x509.load_pem_x509_certificate(crt)
        san = leaf.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value
        self.assertIn(f"istiod.{ISTIO}.svc", san.get_values_for_type(x509.DNSName))
        self.log_is_clean(self.container)

    def test_4_a_crash_is_degraded_and_a_restart_ready(self):
        name = self.pod["metadata"]["name"]
        exit_code = self.container.kill(signal.SIGKILL)
        self.assertEqual(exit_code, 137)
        self.log_is_clean(self.container)
        # FallbackToLogsOnError and exit 137: the kubelet's message is the
        # log's tail, signetd's own last lines.
        message = self.container.termination_message()
        self.assertTrue(message, "no termination message: terminationMessagePolicy "
                        f"{self.container.spec.get('terminationMessagePolicy')}")
        self.assertTrue(self.container.text().endswith(message), "the message is the log's tail")
        self.k.pod_failed(NS, name, exit_code=exit_code, message=message, crash_loop=True)
        o = self.ready("False", "OperandFailed", part=f"pod {name}: container signetd: CrashLoopBackOff: ")
        dg = cond(o, "Degraded")
        self.assertEqual((dg["status"], dg["reason"]), ("True", "OperandFailed"))
        # Degraded carries the crash's message, not the back-off's: after
        # the operator's prefix, signetd's log as the kubelet gave it, or,
        # when it does not fit, "..." and its end from a line start, at
        # least one whole line of it. (That the end is kept: test_5.)
        prefix = f"pod {name}: container signetd: CrashLoopBackOff: "
        self.assertTrue(dg["message"].startswith(prefix), dg["message"])
        said = dg["message"][len(prefix):]
        if said.startswith("..."):
            said = said[3:]
            self.assertTrue(message.endswith(said) and ("\n" + said) in ("\n" + message),
                            f"Degraded says {said!r}, the kubelet {message!r}")
        else:
            self.assertEqual(said, message)
        self.assertIn("\n", said, "not one whole line of signetd's log in Degraded")
        type(self).crash = (message, prefix, dg["message"])
        # The kubelet restarts the container in the same Pod: same volumes.
        pod = self.k.ok("GET", f"/api/v1/namespaces/{NS}/pods/{name}")
        t = time.time()
        again = E.kubelet.start(pod, "run-2", volumes=self.container.volumes)
        type(self).container = again
        again.wait_ready()
        self.check_process(again)
        pod = self.k.pod_ready(NS, name)
        self.assertEqual(pod["status"]["containerStatuses"][0]["restartCount"], 1)
        o = self.ready("True", "Ready")
        self.assertEqual(cond(o, "Degraded")["status"], "False")
        print(f"\n  restarted signetd ready {time.time() - t:.1f}s after its start", file=sys.stderr)
        self.issue("app1")
        self.log_is_clean(again)

    def test_5_degraded_keeps_signetds_last_line(self):
        """The crash's Degraded message ends with signetd's last log line,
        the one that tells what it did last (for a crash on its own, why):
        the kubelet's log tail (up to 2048 bytes, newest last) is longer
        than the operator's message, and the operator keeps its end."""
        if not self.crash:
            self.skipTest("test_4 recorded no crash")
        message, prefix, degraded = self.crash
        if len((prefix + message).encode()) < 1024:
            self.skipTest("signetd's log was short enough for the operator's buffer: nothing was cut")
        last = message.rstrip("\n").rsplit("\n", 1)[-1]
        self.assertIn(last, degraded, f"signetd's last log line is not in Degraded ({len(message)}-byte message, "
                      f"{len(degraded)}-byte Degraded)")


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]], verbosity=2)
