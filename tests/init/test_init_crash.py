#!/usr/bin/python3
"""`signetctl init` and signetd --init-dir killed at every step, then rerun.

crash_shim.so (LD_PRELOAD) SIGKILLs the process before its Nth file-system
step (mkdir, open with O_CREAT, write, fsync, rename, unlink, ...). A first
run with the shim only tracing lists the steps; then, for each step chosen,
init is killed there, what it left is checked, and init is run again on the
same folder with the same arguments. What must hold after every kill:

  * a folder holding signet.conf is a whole CA (signet.conf is the commit
    point): it signs, and its SO PIN file exists. Nobody can start signetd
    on a half-made CA, because a half-made CA has no signet.conf;
  * the rerun completes: exit 0, a CA that signs (`signetctl issue`,
    checked by `openssl verify` against the folder's root), the SO PIN file
    written (mode 0400, 32 bytes), no record of the interruption and no
    temporary file left, in the folder or beside it; or, for what no
    interrupted init can have left, refuses with a message that says what
    to do (checked separately at the end);
  * nothing crashes (exit status 0 or 1, never a signal).

The steps inside SoftHSM2's token store (about 220 of some 260, all writes
to one token) are sampled (first, last and evenly between): what init sees
after any of them is the same, a token store without signet.conf. An fsync
is skipped too: a process killed before it leaves what one killed after
it leaves (it matters to a power cut, not to a kill). Every other step is
taken. signetd --init-dir is done the same way over its own steps (the
state folder's record and lock, the SO PIN file, sg_init_ca's record and
commit) up to the end of its first start.

usage: test_init_crash.py SIGNETCTL SIGNETD SHIM
Environment: SIGNET_SANITIZED=1 samples fewer steps (ASan/TSan builds);
SIGNET_CRASH_ALL=1 takes every step, fsyncs and the token store's included
(minutes; for tests/RELIABILITY.md, not the suite).
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SIGNETCTL, SIGNETD, SHIM = sys.argv[1:4]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ra"))
import signet_e2e  # noqa: E402

SANITIZED = os.environ.get("SIGNET_SANITIZED") == "1"
TOKEN_SAMPLES = 2 if SANITIZED else 3
ID = "spiffe://cluster.local/ns/default/sa/default"
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what, flush=True)


def run(args, env_extra=None, timeout=120):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.update(env_extra or {})
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)


def trace_steps(args, tmp, cwd_clean):
    """The steps of one uninterrupted run: [(n, op, path)]."""
    tr = os.path.join(tmp, "trace")
    if os.path.exists(tr):
        os.unlink(tr)
    r = run(args, {"LD_PRELOAD": SHIM, "SG_CRASH_TRACE": tr})
    assert r.returncode == 0, f"traced run failed: {r.returncode} {r.stderr}"
    steps = []
    with open(tr) as f:
        for line in f:
            n, op, path = line.rstrip("\n").split(" ", 2)
            steps.append((int(n), op, path))
    cwd_clean()
    return steps


def choose(steps, last=None):
    """Every step outside the token store, a sample of those inside. The
    sanitizer builds skip the writes and fsyncs of files (the names on
    disk are those of the open before them)."""
    if last is not None:
        steps = [s for s in steps if s[0] <= last]
    if os.environ.get("SIGNET_CRASH_ALL") == "1":
        return [s[0] for s in steps]
    inside = [s[0] for s in steps if "/tokens/" in s[2]]
    picked = {s[0] for s in steps if "/tokens/" not in s[2] and s[1] != "fsync" and not (SANITIZED and s[1] == "write"
                                                                       and not s[2].endswith("/ca"))}
    if inside:
        k = max(1, len(inside) // TOKEN_SAMPLES)
        picked.update(inside[::k])
        picked.add(inside[-1])
    return sorted(picked)


def make_csr(tmp):
    csr = os.path.join(tmp, "leaf.csr")
    subprocess.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", csr + ".key", "-subj", "/", "-addext", f"subjectAltName=critical,URI:{ID}",
                    "-out", csr], check=True, capture_output=True)
    return csr


def signs(conf, csr, tmp):
    """The CA of conf issues a certificate that verifies against its root."""
    out = os.path.join(tmp, "leaf.pem")
    r = run([SIGNETCTL, "issue", "--config", conf, "--csr", csr, "--out", out, "--signer-threads", "1",
             "--log-level", "warn"])
    if r.returncode != 0:
        return f"issue failed ({r.returncode}): {r.stderr.strip()}"
    root = os.path.join(os.path.dirname(conf), "root-cert.pem")
    v = run(["openssl", "verify", "-CAfile", root, out])
    return None if v.returncode == 0 else f"openssl verify: {v.stdout}{v.stderr}"


def listing(d):
    out = []
    for base, dirs, files in os.walk(d):
        for n in dirs + files:
            p = os.path.relpath(os.path.join(base, n), d)
            if not p.startswith("tokens/"):
                out.append(p)
    return sorted(out)


def temporaries(d, parent, stem):
    """Temporaries and records left in the CA folder or beside it."""
    bad = [n for n in listing(d) if n.endswith(".new") or ".tmp." in n or "partial" in n]
    bad += [n for n in os.listdir(parent) if n.startswith(stem) and (n.endswith(".new") or "partial" in n)]
    return bad


def so_pin_ok(path):
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    return (st.st_mode & 0o777) == 0o400 and st.st_size == 32


def ctl_init(tmp, csr):
    """signetctl init killed at each chosen step; a rerun after each."""
    d = os.path.join(tmp, "ca")
    so = d + ".so-pin"
    args = [SIGNETCTL, "init", "--dir", d, "--log-level", "warn"]

    def clean():
        shutil.rmtree(d, ignore_errors=True)
        for n in os.listdir(tmp):
            if n.startswith("ca."):
                os.unlink(os.path.join(tmp, n))

    steps = trace_steps(args, tmp, clean)
    chosen = choose(steps)
    print(f"signetctl init: {len(steps)} steps, {len(chosen)} taken", flush=True)
    outcomes = {}
    for n in chosen:
        what = f"init killed before step {n} ({steps[n - 1][1]} {os.path.basename(steps[n - 1][2])})"
        r = run(args, {"LD_PRELOAD": SHIM, "SG_CRASH_AT": str(n)})
        check(r.returncode == -signal.SIGKILL, f"{what}: not killed ({r.returncode}: {r.stderr.strip()})")
        left = listing(d) if os.path.isdir(d) else None
        conf = os.path.join(d, "signet.conf")
        if os.path.exists(conf):
            # signet.conf is the commit point: what it names is whole.
            check(so_pin_ok(so), f"{what}: signet.conf without the SO PIN file")
            err = signs(conf, csr, tmp)
            check(err is None, f"{what}: signet.conf present but the CA does not sign: {err}")
        again = run(args)
        check(again.returncode in (0, 1), f"{what}: rerun died ({again.returncode})")
        whole = left is not None and "signet.conf" in left and "init.partial" not in left
        if whole:
            # Killed after its last step but one: a whole CA, refused as any
            # whole CA is, with how to use it.
            check(again.returncode == 1 and "already holds a CA" in again.stderr and "--config" in again.stderr,
                  f"{what}: a whole CA: rerun {again.returncode}: {again.stderr.strip()}")
        else:
            check(again.returncode == 0, f"{what}: rerun did not complete: {again.stderr.strip()}")
        if again.returncode == 0:
            err = signs(conf, csr, tmp)
            check(err is None, f"{what}: rerun's CA does not sign: {err}")
            check(so_pin_ok(so), f"{what}: rerun left no SO PIN file (mode 0400, 32 bytes)")
            junk = temporaries(d, tmp, "ca")
            check(not junk, f"{what}: rerun left {junk}")
        said = ("refused: whole" if whole else "finished" if again.stdout.startswith("finished") else
                "removed the remnant, made anew" if again.stdout.startswith("removed") else "made anew")
        outcomes.setdefault((tuple(left) if left is not None else None, said), []).append(n)
        clean()
    for (left, said), ns in sorted(outcomes.items(), key=lambda kv: kv[1][0]):
        print(f"  steps {ns[0]}..{ns[-1]} ({len(ns)}): left {list(left) if left is not None else 'no folder'}; "
              f"rerun: {said}", flush=True)
    return len(steps)


def wait_serving(proc, log_path, deadline_s=60):
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        if proc.poll() is not None:
            return False
        with open(log_path) as f:
            if '"signetd serving"' in f.read():
                return True
        time.sleep(0.02)
    return False


def signetd_init_dir(tmp, csr):
    """signetd --init-dir killed at each step of its first start."""
    state = os.path.join(tmp, "state")
    args = [SIGNETD, "--init-dir", state, "--serving-address", "127.0.0.1:0", "--http-address", "127.0.0.1",
            "--metrics-port", "0", "--readiness-probe-port", "0", "--log-format", "json", "--signer-threads", "1"]

    def start(env_extra):
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        env.update(env_extra)
        log = os.path.join(tmp, "signetd.log")
        with open(log, "w") as f:
            p = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, env=env)
        return p, log

    def stop(p):
        signet_e2e.stop_process(p, timeout=30)

    def reset():
        shutil.rmtree(state, ignore_errors=True)
        os.mkdir(state)

    reset()
    tr = os.path.join(tmp, "trace")
    if os.path.exists(tr):
        os.unlink(tr)
    p, log = start({"LD_PRELOAD": SHIM, "SG_CRASH_TRACE": tr})
    ok = wait_serving(p, log)
    stop(p)
    assert ok, "signetd --init-dir did not start:\n" + open(log).read()
    steps = []
    with open(tr) as f:
        for line in f:
            n, op, path = line.rstrip("\n").split(" ", 2)
            steps.append((int(n), op, path))
    # Up to the first start's last step: the record ca.partial removed.
    end = max(n for n, op, path in steps if op == "unlink" and path.endswith("/ca.partial"))
    # Its own steps (the record, the lock, the SO PIN file, the folder
    # itself) and sg_init_ca's record and commit; the rest of sg_init_ca's
    # steps are signetctl init's, taken above.
    ca = os.path.join(os.path.realpath(state), "ca")
    own = {n for n, op, path in steps if not path.startswith(ca + "/") or
           os.path.basename(path).startswith(("init.partial", "signet.conf"))}
    chosen = [n for n in choose(steps, last=end + 1) if n in own]
    print(f"signetd --init-dir: {end} steps in its first start, {len(chosen)} taken", flush=True)
    conf = os.path.join(state, "ca", "signet.conf")
    for n in chosen:
        reset()
        what = f"signetd --init-dir killed before step {n} ({steps[n - 1][1]} {os.path.basename(steps[n - 1][2])})"
        p, log = start({"LD_PRELOAD": SHIM, "SG_CRASH_AT": str(n)})
        try:
            rc = p.wait(120)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
        check(rc == -signal.SIGKILL, f"{what}: not killed ({rc})")
        p, log = start({})
        ok = wait_serving(p, log)
        stop(p)
        check(ok, f"{what}: the next start did not serve:\n" + open(log).read()[-2000:])
        if ok:
            err = signs(conf, csr, tmp)
            check(err is None, f"{what}: the CA it serves does not sign: {err}")
            check(so_pin_ok(os.path.join(state, "so-pin")), f"{what}: no SO PIN file")
            check(not os.path.exists(os.path.join(state, "ca.partial")) and
                  not os.path.exists(os.path.join(state, "ca", "init.partial")), f"{what}: a record was left")
    shutil.rmtree(state, ignore_errors=True)


def token_objects(ca):
    tokens = os.path.join(ca, "tokens")
    return [os.path.join(tokens, t, "token.object") for t in os.listdir(tokens)]


def killed_at_login(tmp, csr):
    """SoftHSM2 rewrites token.object in place (ftruncate, then write) at
    every C_Login. A process killed between the two left it empty, and the
    CA with it ("no initialised token matches"): signetd --init-dir and
    signetctl now put back the copy init keeps (sg_init_softhsm_repair)."""
    state = os.path.join(tmp, "login")
    os.mkdir(state)
    args = [SIGNETD, "--init-dir", state, "--serving-address", "127.0.0.1:0", "--http-address", "127.0.0.1",
            "--metrics-port", "0", "--readiness-probe-port", "0", "--log-format", "json", "--signer-threads", "1"]
    log = os.path.join(tmp, "login.log")

    def start(env_extra):
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        env.update(env_extra)
        with open(log, "w") as f:
            return subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, env=env)

    def serve_and_stop(env_extra):
        p = start(env_extra)
        ok = wait_serving(p, log)
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            p.wait(30)
        return ok

    check(serve_and_stop({}), "login: the first start did not serve")
    ca = os.path.join(state, "ca")
    tr = os.path.join(tmp, "login.trace")
    check(serve_and_stop({"LD_PRELOAD": SHIM, "SG_CRASH_TRACE": tr}), "login: the traced start did not serve")
    with open(tr) as f:
        steps = [line.split(" ", 2) for line in f.read().splitlines()]
    cut = [n for n, op, path in steps if op == "ftruncate" and path.endswith("/token.object")]
    check(len(cut) > 0, "login: SoftHSM2 no longer truncates token.object at login (update this test)")
    if not cut:
        return
    # signetd killed right after the truncation.
    p = start({"LD_PRELOAD": SHIM, "SG_CRASH_AFTER": cut[0]})
    check(p.wait(60) == -signal.SIGKILL, "login: signetd not killed after the truncation")
    check(any(os.path.getsize(t) == 0 for t in token_objects(ca)), "login: token.object not left empty")
    check(serve_and_stop({}), "login: signetd --init-dir did not serve after a kill at login:\n" + open(log).read())
    check(all(os.path.getsize(t) > 0 for t in token_objects(ca)), "login: token.object not restored")
    conf = os.path.join(ca, "signet.conf")
    err = signs(conf, csr, tmp)
    check(err is None, f"login: the CA does not sign after the repair: {err}")
    # signetctl killed the same way (its first step is the same open).
    out = os.path.join(tmp, "login.pem")
    issue = [SIGNETCTL, "issue", "--config", conf, "--csr", csr, "--out", out, "--signer-threads", "1",
             "--log-level", "warn"]
    r = run(issue, {"LD_PRELOAD": SHIM, "SG_CRASH_TRACE": tr + ".ctl"})
    with open(tr + ".ctl") as f:
        cut = [n for n, op, path in (line.split(" ", 2) for line in f.read().splitlines())
               if op == "ftruncate" and path.endswith("/token.object")]
    if cut:
        r = run(issue, {"LD_PRELOAD": SHIM, "SG_CRASH_AFTER": cut[0]})
        check(r.returncode == -signal.SIGKILL, "login: signetctl not killed after the truncation")
        err = signs(conf, csr, tmp)
        check(err is None, f"login: signetctl issue after a kill at login: {err}")
    print(f"killed at login (after SoftHSM2's ftruncate of token.object): signetd --init-dir and signetctl "
          f"restore it and sign", flush=True)
    shutil.rmtree(state, ignore_errors=True)


def refusals(tmp):
    """What no interrupted init leaves is refused, with what to do."""
    d = os.path.join(tmp, "ca")
    args = [SIGNETCTL, "init", "--dir", d, "--log-level", "warn"]
    # A folder of someone else's.
    os.mkdir(d)
    with open(os.path.join(d, "notes.txt"), "w") as f:
        f.write("mine\n")
    r = run(args)
    check(r.returncode == 1 and "not empty" in r.stderr and "choose another --dir" in r.stderr,
          f"foreign folder: {r.returncode} {r.stderr.strip()}")
    check(os.listdir(d) == ["notes.txt"], "foreign folder: touched")
    # The record of an interrupted init, but a name init never writes.
    with open(os.path.join(d, "init.partial"), "w") as f:
        f.write("")
    r = run(args)
    check(r.returncode == 1 and "notes.txt" in r.stderr and "interrupted" in r.stderr,
          f"remnant with a foreign file: {r.returncode} {r.stderr.strip()}")
    check(sorted(os.listdir(d)) == ["init.partial", "notes.txt"], "remnant with a foreign file: touched")
    shutil.rmtree(d)
    # A whole CA: refused, and told how to use it.
    r = run(args)
    check(r.returncode == 0, f"init: {r.stderr}")
    r = run(args)
    check(r.returncode == 1 and "already holds a CA" in r.stderr and "--config" in r.stderr,
          f"whole CA: {r.returncode} {r.stderr.strip()}")
    shutil.rmtree(d)
    os.unlink(d + ".so-pin")


def main():
    tmp = tempfile.mkdtemp(prefix="initcrash.", dir=os.environ.get("SIGNET_TEST_TMP"))
    t0 = time.monotonic()
    try:
        csr = make_csr(tmp)
        ctl_init(tmp, csr)
        print(f"signetctl init done at {time.monotonic() - t0:.1f} s", flush=True)
        signetd_init_dir(tmp, csr)
        print(f"signetd --init-dir done at {time.monotonic() - t0:.1f} s", flush=True)
        killed_at_login(tmp, csr)
        refusals(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(failures)} failures in {time.monotonic() - t0:.1f} s", flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
