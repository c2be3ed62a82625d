#!/usr/bin/python3
"""The OCI image and HSM access through p11-kit, measured.

  perf/packagebench.py [BUILD_DIR] [RUNS]
      (defaults: build-perf, 7; BUILD_DIR is a Release build with
       SIGNET_BUILD_PERF=ON: signetd, signetctl, signet-trust,
       signet-operator and perf/loadgen)

Needs root (the image runs unpacked in a mount namespace, as
tests/packaging/test_image.py runs it). Three parts, in one run:

  image     packaging/image.sh builds the image from BUILD_DIR (time, with
            the .deb cache of ~/.cache/signet warm after the first build);
            its size: the compressed layer blobs of the OCI layout, and the
            root file system umoci unpacks (bytes, files).
  start     time from process start to /readyz 200 (polled every 5 ms) for
            signetd on the image's root (read-only, as 65532, through
            unshare + mounts + chroot: what a runtime does, roughly) and
            for the build tree's signetd on the host, each on a SoftHSM2 CA
            of its own made by its own signetctl (ECDSA P-256); RUNS runs
            alternating, median and range.
  p11-kit   certificates/s of the build tree's signetd on one CA reached
            directly (SoftHSM2 in the process) and through `p11-kit server`
            + p11-kit-client.so (a Unix socket), alternating for 3 rounds,
            the same perf/loadgen settings for both (closed loop, C=4
            connections x M=16 calls, at most 20000 requests or 15 s after
            1000 warm-up requests; distinct CSRs); signetd's CPU time per
            certificate, and the p11-kit server's (its per-connection
            processes).

Everything runs on 127.0.0.1 in a temporary folder removed at the end.
Prints each run, then markdown tables for perf/README.md.
"""
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(TOP, "build-perf"))
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 7
ROUNDS = 3
SIGNETD = os.path.join(BUILD, "daemon", "signetd")
SIGNETCTL = os.path.join(BUILD, "ctl", "signetctl")
LOADGEN = os.path.join(BUILD, "perf", "loadgen")
SOFTHSM = "/usr/lib/softhsm/libsofthsm2.so"
CLIENT = os.path.join(subprocess.run(["pkg-config", "--variable=p11_module_path", "p11-kit-1"], check=True,
                                     capture_output=True, text=True).stdout.strip(), "p11-kit-client.so")
UID = 65532
LOAD = ["--connections", "4", "--concurrency", "16", "--requests", "20000", "--duration", "15s", "--warmup", "1000"]
RUN_UNPACKED = os.path.join(TOP, "packaging", "image", "run-unpacked.sh")


def say(*a):
    print(*a, flush=True)


def run(cmd, **kw):
    say("$", " ".join(cmd))
    return subprocess.run(cmd, check=True, **kw)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:  # gone
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid):
    """Pids whose parent is pid: p11-kit server forks one process per
    connection."""
    out = []
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(p))
        except OSError:
            pass
    return out


def du(path):
    size = files = 0
    for top, dirs, names in os.walk(path):
        for n in names:
            st = os.lstat(os.path.join(top, n))
            size += st.st_size
            files += 1
    return size, files


def machine():
    model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    mem = next((int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal")), 0)
    return f"{os.cpu_count()} CPU ({model}), {mem / 1048576:.0f} GiB, kernel {os.uname().release}, " \
           f"load {os.getloadavg()[0]:.2f}"


def time_to_ready(argv, env, probe, log):
    """Seconds from Popen to /readyz 200; then SIGTERM and wait."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        while True:
            if p.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited {p.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{probe}/readyz", timeout=2) as r:
                    if r.status == 200:
                        return time.monotonic() - t0
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() - t0 > 60:
                raise RuntimeError("not ready in 60 s")
            time.sleep(0.005)
    finally:
        stop(p)


def stop(p):
    """SIGTERM, then SIGKILL after 30 s; nothing if it has ended."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def stats(xs):
    return statistics.median(xs), min(xs), max(xs)


def main():
    if os.geteuid() != 0:
        sys.exit("packagebench.py: needs root (mount namespaces, chroot)")
    for f in (SIGNETD, SIGNETCTL, LOADGEN):
        if not os.access(f, os.X_OK):
            sys.exit(f"packagebench.py: {f} missing: cmake -S . -B {BUILD} -DCMAKE_BUILD_TYPE=Release "
                     f"-DSIGNET_BUILD_PERF=ON && cmake --build {BUILD} -j2")
    say("machine:", machine())
    tmp = tempfile.mkdtemp(prefix="packagebench.")
    procs = []
    try:
        results = {}
        # ---- image --------------------------------------------------------
        out = os.path.join(tmp, "out")
        env = dict(os.environ, SIGNET_BUILD_DIR=BUILD)
        times = []
        for i in range(2):  # the second build has a warm .deb cache for sure
            shutil.rmtree(out, ignore_errors=True)
            t0 = time.monotonic()
            run([os.path.join(TOP, "packaging", "image.sh"), out], env=env, stdout=subprocess.DEVNULL)
            times.append(time.monotonic() - t0)
        oci = os.path.join(out, "oci")
        index = json.load(open(os.path.join(oci, "index.json")))
        digest = index["manifests"][0]["digest"].split(":")
        manifest = json.load(open(os.path.join(oci, "blobs", *digest)))
        layers = sum(l["size"] for l in manifest["layers"])
        bundle = os.path.join(tmp, "bundle")
        run(["umoci", "unpack", "--image", f"{oci}:latest", bundle], stdout=subprocess.DEVNULL)
        rootfs = os.path.join(bundle, "rootfs")
        unpacked, nfiles = du(rootfs)
        results["image"] = dict(build_s=times, layers=layers, unpacked=unpacked, files=nfiles)
        say(f"image: image.sh {times[0]:.1f} s, again {times[1]:.1f} s; compressed layers {layers / 1e6:.1f} MB; "
            f"unpacked {unpacked / 1e6:.1f} MB in {nfiles} files")

        # ---- start to ready ----------------------------------------------
        state = os.path.join(tmp, "state")
        os.mkdir(state, 0o700)
        os.chown(state, UID, UID)
        img_env = {"PATH": "/usr/sbin:/usr/bin", "HOME": "/var/lib/signet"}
        enter = ["unshare", "-m", RUN_UNPACKED, rootfs, state]
        run(enter + ["/usr/bin/signetctl", "init", "--dir", "/var/lib/signet/ca", "--so-pin-file",
                     "/var/lib/signet/so-pin", "--log-level", "warn"], env=img_env, stdout=subprocess.DEVNULL)
        host_ca = os.path.join(tmp, "host-ca")
        run([SIGNETCTL, "init", "--dir", host_ca, "--log-level", "warn"], stdout=subprocess.DEVNULL)
        host_env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
        starts = {"image": [], "build tree": []}
        log = open(os.path.join(tmp, "start.log"), "w")
        for i in range(RUNS):
            for kind in ("image", "build tree"):
                probe = free_port()
                flags = ["--serving-address", f"127.0.0.1:{free_port()}", "--http-address", "127.0.0.1",
                         "--metrics-port", str(free_port()), "--readiness-probe-port", str(probe)]
                if kind == "image":
                    argv = enter + ["/usr/sbin/signetd", "--config=/var/lib/signet/ca/signet.conf", *flags]
                    t = time_to_ready(argv, img_env, probe, log)
                else:
                    argv = [SIGNETD, "--config", os.path.join(host_ca, "signet.conf"), *flags]
                    t = time_to_ready(argv, host_env, probe, log)
                if i == 0:
                    say("$", " ".join(argv))
                starts[kind].append(t)
                say(f"start {i + 1} {kind}: {t * 1000:.0f} ms")
        results["start"] = starts

        # ---- p11-kit forwarding against SoftHSM2 in the process ------------
        lines = [l for l in open(os.path.join(host_ca, "signet.conf")).read().splitlines()
                 if not l.startswith("softhsm2-conf")]
        p11conf = os.path.join(host_ca, "p11kit.conf")
        with open(p11conf, "w") as f:
            f.write("\n".join(lines + [f"hsm-module = {CLIENT}"]) + "\n")
        sock = os.path.join(tmp, "p11kit.sock")
        server = subprocess.Popen(["p11-kit", "server", "-f", "-n", sock, "--provider", SOFTHSM,
                                   "pkcs11:token=signet-ca"], stdout=subprocess.PIPE, text=True,
                                  env=dict(os.environ, SOFTHSM2_CONF=os.path.join(host_ca, "softhsm2.conf")))
        procs.append(server)
        address = server.stdout.readline().split("=", 1)[1].split(";", 1)[0]
        say(f"p11-kit server: {address}")
        token = os.path.join(tmp, "token")
        with open(token, "w", opener=lambda p, fl: os.open(p, fl, 0o600)) as f:
            f.write(run([SIGNETCTL, "token", "--config", os.path.join(host_ca, "signet.conf"), "--namespace",
                         "default", "--service-account", "default"], capture_output=True, text=True).stdout)
        rates = {"SoftHSM2 in signetd": [], "p11-kit forwarding": []}
        for rnd in range(ROUNDS):
            for kind, conf in (("SoftHSM2 in signetd", os.path.join(host_ca, "signet.conf")),
                               ("p11-kit forwarding", p11conf)):
                port, probe = free_port(), free_port()
                env = dict(host_env, P11_KIT_SERVER_ADDRESS=address)
                argv = [SIGNETD, "--config", conf, "--serving-address", f"127.0.0.1:{port}", "--http-address",
                        "127.0.0.1", "--metrics-port", str(free_port()), "--readiness-probe-port", str(probe)]
                d = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
                procs.append(d)
                t0 = time.monotonic()
                while True:
                    try:
                        with urllib.request.urlopen(f"http://127.0.0.1:{probe}/readyz", timeout=2) as r:
                            if r.status == 200:
                                break
                    except (urllib.error.URLError, OSError):
                        pass
                    if d.poll() is not None or time.monotonic() - t0 > 60:
                        raise RuntimeError(f"signetd ({kind}) did not get ready")
                    time.sleep(0.05)
                kids = children(server.pid)
                lg = [LOADGEN, "--target", f"grpc://127.0.0.1:{port}", "--token-file", token, "--ca-file",
                      os.path.join(host_ca, "root-cert.pem"), *LOAD, "--json"]
                if rnd == 0:
                    say("$", " ".join(argv))
                    say("$", " ".join(lg))
                cpu0 = cpu_seconds(d.pid)
                srv0 = {k: cpu_seconds(k) for k in kids}
                res = json.loads(subprocess.run(lg, check=True, capture_output=True, text=True).stdout.strip()
                                 .splitlines()[-1])
                cpu = cpu_seconds(d.pid) - cpu0
                kids = children(server.pid)
                srv = sum(max(cpu_seconds(k) - srv0.get(k, 0), 0) for k in kids)
                d.send_signal(signal.SIGTERM)
                rc = d.wait(60)
                ok, rate = res["ok"], res["certs_per_s"]
                if res["failed"] or rc != 0:
                    raise RuntimeError(f"{kind}: {res['failed']} failed requests, signetd exit {rc}")
                say(f"round {rnd + 1} {kind}: {rate:.0f} certificates/s, {ok} ok in {res['elapsed_s']:.1f} s, "
                    f"p50 {res['p50_ms']:.1f} ms, p99 {res['p99_ms']:.1f} ms; "
                    f"signetd CPU {cpu:.2f} s, p11-kit CPU {srv:.2f} s")
                rates[kind].append((rate, ok, res, cpu, srv))
        results["p11kit"] = rates

        # ---- report -------------------------------------------------------
        say("\n| image | value |\n|---|---|")
        say(f"| image.sh (SIGNET_BUILD_DIR set; cold, then warm .deb cache) | {times[0]:.1f} s, {times[1]:.1f} s |")
        say(f"| compressed layers (1 layer, gzip) | {layers / 1e6:.1f} MB |")
        say(f"| unpacked root | {unpacked / 1e6:.1f} MB, {nfiles} files |")
        say(f"\n| signetd start to /readyz 200 ({RUNS} runs) | median | range |\n|---|---|---|")
        for kind, xs in starts.items():
            m, lo, hi = stats(xs)
            say(f"| {kind} | {m * 1000:.0f} ms | {lo * 1000:.0f}–{hi * 1000:.0f} ms |")
        say(f"\n| HSM path | certificates/s ({ROUNDS} rounds) | p50 / p99 ms | signetd CPU ms/cert | p11-kit server "
            "CPU ms/cert |\n|---|---|---|---|---|")
        for kind, rs in rates.items():
            rr = ", ".join(f"{r[0]:.0f}" for r in rs)
            lat = ", ".join(f"{r[2]['p50_ms']:.1f} / {r[2]['p99_ms']:.1f}" for r in rs)
            cpc = ", ".join(f"{1000 * r[3] / max(r[1], 1):.2f}" for r in rs)
            spc = ", ".join(f"{1000 * r[4] / max(r[1], 1):.2f}" for r in rs) if kind.startswith("p11") else "—"
            say(f"| {kind} | {rr} | {lat} | {cpc} | {spc} |")
    finally:
        for p in procs:
            stop(p)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
