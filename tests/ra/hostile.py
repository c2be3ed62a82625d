#!/usr/bin/python3
"""Hostile clients of signetd, and what they measure.

Each attack_* function drives one kind of abuse at a running signetd (class
Daemon) and returns its figures as a dict: what the client saw (resets,
GOAWAY, end of stream, answers), what signetd spent (peak memory, file
descriptors, HSM signatures, log lines) and whether a well-behaved client
(Debian's grpcio) is still served afterwards. test_hostile.py asserts the
figures; run as a program, this file sets up a CA in a temporary directory,
starts signetd, runs one scenario and prints the figures as JSON:

  hostile.py SCENARIO --signetd PATH --signetctl PATH --proto-dir DIR
             [--new-flags] [--signetd-args "..."] [--nofile N] [--as-limit BYTES]
             [scenario options]

  SCENARIO: big-message, fds, idle, slowloris, cancel, rapid-reset, no-read

--new-flags adds the scenario's short settings of the options signetd gained
to resist these attacks (max-connection-idle, server-timeout,
grpc-memory-limit, ...); without it only options every signetd knows are
passed, so the same scenario measures an older binary too.

The raw HTTP/2 clients use python3-h2 over Python's ssl module (ALPN h2).
Every attack is bounded in count and in time, and talks to loopback only:
signetd listens on 127.0.0.1, and the slowloris connections come from
127.0.0.2 so that the prober on 127.0.0.1 is a different client.
"""
import argparse
import collections
import errno
import http.client
import json
import os
import resource
import select
import shlex
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import signet_e2e  # noqa: E402

METHOD = "/istio.v1.auth.IstioCertificateService/CreateCertificate"
LOOPBACK = "127.0.0.1"
MIB = 1024 * 1024

# The short settings of the options that bound each attack, used by
# test_hostile.py and by --new-flags (an older signetd refuses them).
NEW_FLAGS = {
    "big-message": ["--grpc-memory-limit", "64", "--server-timeout", "3s"],
    "fds": [],  # the default max-connections: automatic, below the open-files limit
    "idle": ["--max-connection-idle", "2s", "--server-timeout", "2s", "--handshake-timeout", "2s"],
    "slowloris": [],
    "cancel": [],
    "rapid-reset": [],
    "no-read": ["--server-timeout", "2s"],
}


def raise_nofile(want=8192):
    """Lets this process hold the connections the attacks open."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def known_options(signetd):
    """The --options a signetd binary lists in its --help."""
    out = subprocess.run([signetd, "--help"], capture_output=True, text=True, timeout=30)
    return {w.split("[")[0].split("=")[0] for w in (out.stdout + out.stderr).split() if w.startswith("--")}


def drop_unknown(flags, known):
    """flags without the options (and their values) a binary does not know:
    (kept, dropped). A value is the next word unless it starts with --."""
    kept, dropped = [], []
    i = 0
    while i < len(flags):
        name = flags[i].split("=")[0]
        has_value = "=" not in flags[i] and i + 1 < len(flags) and not flags[i + 1].startswith("--")
        group = flags[i:i + (2 if has_value else 1)]
        (kept if name in known else dropped).extend(group)
        i += len(group)
    return kept, dropped


# ---- what signetd spends ------------------------------------------------------

def proc_status(pid):
    """VmRSS, VmHWM, VmSize and Threads of a process (kB, count), or {}."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM", "VmSize", "Threads"):
                    out[key] = int(rest.split()[0])
    except OSError:
        pass
    return out


def fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


class Sampler:
    """Samples a process's VmRSS and fd count in a thread until stopped."""

    def __init__(self, pid, interval=0.1):
        self.pid, self.interval = pid, interval
        self.max_rss_kb = 0
        self.max_fds = 0
        self.samples = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.is_set():
            st = proc_status(self.pid)
            self.max_rss_kb = max(self.max_rss_kb, st.get("VmRSS", 0))
            self.max_fds = max(self.max_fds, fd_count(self.pid) or 0)
            self.samples += 1
            self._stop.wait(self.interval)

    def stop(self):
        self._stop.set()
        self._t.join(5)
        return self


def parse_metrics(text):
    """Prometheus text to {series: value}; the series keeps its labels."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            pass
    return out


def family(metrics, name):
    """The sum of a metric family's series, or None when it is absent."""
    vals = [v for k, v in metrics.items() if k == name or k.startswith(name + "{")]
    return sum(vals) if vals else None


def delta(after, before, name):
    a, b = family(after, name), family(before, name)
    return None if a is None or b is None else a - b


# ---- a CA and a signetd to attack ------------------------------------------------

class CA:
    """A CA made by `signetctl init` in a temporary directory, the proto
    compiled for grpcio, tokens and a valid request body."""

    def __init__(self, signetctl, proto_dir, tmp=None, key_type=None):
        self.signetctl = signetctl
        self.tmp = tmp or tempfile.mkdtemp(prefix="hostile.", dir=os.environ.get("SIGNET_TEST_TMP"))
        self._own_tmp = tmp is None
        signet_e2e.compile_proto(proto_dir, self.tmp)
        import ca_pb2
        import ca_pb2_grpc
        self.pb, self.pb_grpc = ca_pb2, ca_pb2_grpc
        self.dir = os.path.join(self.tmp, "ca")
        subprocess.run([signetctl, "init", "--dir", self.dir, "--log-level", "warn"] +
                       (["--key-type", key_type] if key_type else []), check=True, stdout=subprocess.DEVNULL)
        self.conf = os.path.join(self.dir, "signet.conf")
        self.root_path = os.path.join(self.dir, "root-cert.pem")
        self.root = signet_e2e.read(self.root_path, "rb")
        self._token = None
        self._csr = None

    def token(self, ns="default", sa="default"):
        if ns == "default" and sa == "default" and self._token:
            return self._token
        tok = subprocess.run([self.signetctl, "token", "--config", self.conf, "--namespace", ns,
                              "--service-account", sa], check=True, capture_output=True, text=True).stdout.strip()
        if ns == "default" and sa == "default":
            self._token = tok
        return tok

    def csr(self):
        if self._csr is None:
            self._csr = signet_e2e.make_csr(signet_e2e.spiffe("default", "default"))
        return self._csr

    def request(self, csr=None):
        """A valid IstioCertificateRequest, serialized."""
        return self.pb.IstioCertificateRequest(csr=csr or self.csr(), validity_duration=3600).SerializeToString()

    def close(self):
        if self._own_tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)


class Daemon:
    """signetd on loopback (signet_e2e.Signetd), optionally under resource
    limits (prlimit), with what the attacks read from it."""

    def __init__(self, ca, signetd, flags=(), nofile=None, as_limit=None, threads=2):
        self.ca = ca
        self.flags = list(flags)
        binary = signetd
        if nofile or as_limit:
            # prlimit execs signetd, so the pid stays signetd's own.
            limits = []
            if nofile:
                limits.append(f"--nofile={nofile}:{nofile}")
            if as_limit:
                limits.append(f"--as={as_limit}:{as_limit}")
            binary = os.path.join(ca.tmp, f"signetd-limited.{time.time_ns()}")
            with open(binary, "w") as f:
                f.write("#!/bin/sh\nexec prlimit %s %s \"$@\"\n" % (" ".join(limits), shlex.quote(signetd)))
            os.chmod(binary, 0o755)
        self.s = signet_e2e.Signetd(binary, ca.conf, *self.flags, threads=threads)
        self.pid = self.s.proc.pid
        self.port, self.metrics_port, self.probe_port = self.s.port, self.s.metrics_port, self.s.probe_port

    def alive(self):
        return self.s.proc.poll() is None

    def status(self):
        return proc_status(self.pid)

    def fds(self):
        return fd_count(self.pid)

    def metrics(self, timeout=5):
        try:
            text = urllib.request.urlopen(f"http://{LOOPBACK}:{self.metrics_port}/metrics", timeout=timeout).read()
            return parse_metrics(text.decode())
        except OSError:
            return {}

    def probe(self, path="/readyz", timeout=2.0):
        """The status of one GET on the probe port, or the error's name."""
        hc = http.client.HTTPConnection(LOOPBACK, self.probe_port, timeout=timeout)
        try:
            hc.request("GET", path)
            r = hc.getresponse()
            r.read()
            return r.status
        except (OSError, http.client.HTTPException) as e:
            return type(e).__name__
        finally:
            hc.close()

    def log_lines(self):
        return self.s.text().splitlines()

    def log_counts(self):
        """Lines of signetd's log so far, by kind."""
        c = collections.Counter()
        for line in self.log_lines():
            try:
                rec = json.loads(line)
            except ValueError:
                c["other"] += 1  # gRPC core's own lines (stderr)
                if "Too many open files" in line:
                    c["emfile"] += 1
                continue
            c["records"] += 1
            if rec.get("level") in ("warn", "error"):
                c["warn"] += 1
                c["warn:" + str(rec.get("msg"))] += 1
            if rec.get("msg") == "certificate issued":
                c["issued"] += 1
                if rec.get("delivered") in (0, False):
                    c["issued_undelivered"] += 1
        return c

    def grpc_call(self, timeout=5.0):
        """One CreateCertificate on a fresh grpcio channel: None when a chain
        came back, else the error."""
        import grpc
        creds = grpc.ssl_channel_credentials(root_certificates=self.ca.root)
        ch = grpc.secure_channel(f"{LOOPBACK}:{self.port}", creds,
                                 options=[("grpc.ssl_target_name_override", "localhost")])
        try:
            stub = self.ca.pb_grpc.IstioCertificateServiceStub(ch)
            req = self.ca.pb.IstioCertificateRequest(csr=self.ca.csr(), validity_duration=3600)
            resp = stub.CreateCertificate(req, metadata=[("authorization", f"Bearer {self.ca.token()}")],
                                          timeout=timeout)
            return None if len(resp.cert_chain) >= 2 else f"chain of {len(resp.cert_chain)}"
        except grpc.RpcError as e:
            return f"{e.code().name}: {e.details()}"
        finally:
            ch.close()

    def wait_grpc_ok(self, within=5.0, attempt=2.0):
        """Seconds until a grpcio call succeeds (None if not within), the
        attempts made and the last error."""
        t0 = time.monotonic()
        attempts, err = 0, None
        while attempts == 0 or time.monotonic() - t0 < within:
            attempts += 1
            left = within - (time.monotonic() - t0)
            err = self.grpc_call(max(0.5, min(attempt, left)))
            if err is None:
                return {"ok_after_s": round(time.monotonic() - t0, 3), "attempts": attempts}
            time.sleep(0.2)
        return {"ok_after_s": None, "attempts": attempts, "last_error": err}

    def stop(self):
        return self.s.stop()


# ---- raw HTTP/2 ---------------------------------------------------------------------

def grpc_frame(msg, announce=None):
    """A gRPC length-prefixed message (uncompressed): flag 0, length, bytes.
    announce overrides the length (a lie, for the oversized announcement)."""
    return struct.pack(">BI", 0, len(msg) if announce is None else announce) + msg


def grpc_headers(token=None, path=METHOD, authority="localhost"):
    h = [(":method", "POST"), (":scheme", "https"), (":path", path), (":authority", authority),
         ("content-type", "application/grpc"), ("te", "trailers")]
    if token:
        h.append(("authorization", f"Bearer {token}"))
    return h


def tls_context(root_path):
    ctx = ssl.create_default_context(cafile=root_path)
    ctx.set_alpn_protocols(["h2"])
    return ctx


class H2:
    """One HTTP/2 client connection over TLS, driven by hand: the caller
    sends what it likes and pumps the server's frames, which are recorded
    (h2 answers PINGs and SETTINGS by itself)."""

    def __init__(self, port, ctx, source=None, timeout=10.0, preface=True):
        self.t0 = time.monotonic()
        raw = socket.create_connection((LOOPBACK, port), timeout, source_address=(source, 0) if source else None)
        self.sock = ctx.wrap_socket(raw, server_hostname="localhost")
        self.sock.settimeout(timeout)
        self.alpn = self.sock.selected_alpn_protocol()
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        # HPACK without Huffman coding: hpack's pure-Python Huffman coder
        # would be most of a flood's cost (h2 never indexes authorization,
        # so the token is coded again on every stream).
        encode = self.conn.encoder.encode
        self.conn.encoder.encode = lambda headers, huffman=True: encode(headers, huffman=False)
        self.goaway = None         # (seconds, error code, last stream id)
        self.eof = None            # seconds until the server closed the socket
        self.resets = {}           # stream id -> (seconds, error code)
        self.headers = {}          # stream id -> (seconds, headers)
        self.trailers = {}         # stream id -> (seconds, trailers)
        self.pings = 0
        self.window_updates = 0
        self.data_bytes = 0
        self.error = None
        if preface:
            self.conn.initiate_connection()
            self.flush()

    def elapsed(self):
        return time.monotonic() - self.t0

    @property
    def closed(self):
        return self.eof is not None or self.error is not None

    def flush(self):
        data = self.conn.data_to_send()
        if data and not self.closed:
            try:
                self.sock.sendall(data)
            except (OSError, ssl.SSLError) as e:
                self._lost(e)
        return not self.closed

    def _lost(self, e):
        if self.eof is None:
            self.eof = self.elapsed()
        if self.error is None and not isinstance(e, (ConnectionResetError, BrokenPipeError, ssl.SSLEOFError,
                                                     ssl.SSLZeroReturnError)):
            self.error = f"{type(e).__name__}: {e}"

    def readable(self, timeout):
        if self.sock.pending():
            return True
        p = select.poll()
        p.register(self.sock.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
        return bool(p.poll(max(0, int(timeout * 1000))))

    def pump(self, timeout=0.0, max_reads=64):
        """Reads and handles what the server sent, waiting up to timeout for
        the first bytes; returns the h2 events."""
        events = []
        reads = 0
        while not self.closed and reads < max_reads and self.readable(timeout if reads == 0 else 0):
            reads += 1
            try:
                data = self.sock.recv(1 << 16)
            except (socket.timeout, ssl.SSLWantReadError):
                break
            except (OSError, ssl.SSLError) as e:
                self._lost(e)
                break
            if not data:
                self._lost(ConnectionResetError())
                break
            try:
                new = self.conn.receive_data(data)
            except h2.exceptions.ProtocolError as e:
                self.error = f"protocol: {e}"
                break
            self._note(new)
            events += new
            self.flush()
        return events

    def _note(self, events):
        now = self.elapsed()
        for ev in events:
            if isinstance(ev, h2.events.ConnectionTerminated):
                if self.goaway is None:
                    self.goaway = (now, int(ev.error_code), ev.last_stream_id)
            elif isinstance(ev, h2.events.StreamReset):
                self.resets.setdefault(ev.stream_id, (now, int(ev.error_code)))
            elif isinstance(ev, h2.events.ResponseReceived):
                self.headers.setdefault(ev.stream_id, (now, dict(ev.headers)))
            elif isinstance(ev, h2.events.TrailersReceived):
                self.trailers.setdefault(ev.stream_id, (now, dict(ev.headers)))
            elif isinstance(ev, h2.events.PingReceived):
                self.pings += 1
            elif isinstance(ev, h2.events.WindowUpdated):
                self.window_updates += 1
            elif isinstance(ev, h2.events.DataReceived):
                self.data_bytes += len(ev.data)
                if ev.flow_controlled_length:
                    try:
                        self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                    except h2.exceptions.ProtocolError:
                        pass

    def grpc_status(self, sid):
        """The grpc-status the server ended stream sid with, if any (from the
        trailers, or from a trailers-only response)."""
        for d in (self.trailers, self.headers):
            if sid in d and "grpc-status" in d[sid][1]:
                return int(d[sid][1]["grpc-status"]), d[sid][1].get("grpc-message", "")
        return None

    def ended(self, sid):
        """Seconds until the server ended stream sid (reset or status), else None."""
        times = []
        if sid in self.resets:
            times.append(self.resets[sid][0])
        if self.grpc_status(sid) is not None:
            times.append(self.trailers.get(sid, self.headers.get(sid))[0])
        return min(times) if times else None

    def wait_window(self, n, timeout=5.0):
        """Waits (pumping) until the connection's send window holds n bytes;
        False if the connection closed or the window stayed short."""
        t0 = time.monotonic()
        while self.conn.outbound_flow_control_window < n:
            if self.closed or self.goaway or time.monotonic() - t0 >= timeout:
                return False
            self.pump(0.05)
        return True

    def open_stream(self, token=None, body=None, end=False, path=METHOD):
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, grpc_headers(token, path), end_stream=end and body is None)
        if body is not None:
            self.conn.send_data(sid, body, end_stream=end)
        return sid

    def data_block(self, sid, total, frame):
        """DATA frames (no flags) on sid carrying about `total` zero bytes in
        frames of `frame` bytes, serialized once for send_block: (the
        frames, the payload bytes they carry)."""
        one = struct.pack(">I", frame)[1:] + b"\x00\x00" + struct.pack(">I", sid) + bytes(frame)
        n = max(1, total // frame)
        return one * n, n * frame

    def send_block(self, sid, block, payload):
        """Writes a data_block carrying `payload` bytes, bypassing h2's frame
        serialization (too slow for a flood) but keeping its flow-control
        windows as if h2 had sent it. The caller checked the window."""
        self.flush()
        try:
            self.sock.sendall(block)
        except (OSError, ssl.SSLError) as e:
            self._lost(e)
            return False
        self.conn.outbound_flow_control_window -= payload
        self.conn.streams[sid].outbound_flow_control_window -= payload
        return True

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def summary(self):
        return {"goaway": self.goaway and {"after_s": round(self.goaway[0], 3), "error_code": self.goaway[1],
                                           "last_stream_id": self.goaway[2]},
                "eof_after_s": None if self.eof is None else round(self.eof, 3),
                "error": self.error}


def r3(x):
    return None if x is None else round(x, 3)


# ---- 1: one stream announcing a 4 GiB message ----------------------------------------

def _flood_stream(c, sid, deadline, max_bytes, stall):
    """Sends DATA on sid as fast as the window allows until the server ends
    the stream or the connection, the deadline passes, max_bytes are sent
    or the window stays shut for `stall` seconds: (bytes sent, outcome,
    times the window was empty)."""
    chunk = memoryview(bytes(64 << 10))
    block = None  # (frame size, serialized frames, their payload)
    sent, window_waits = 0, 0
    last_progress = time.monotonic()
    while True:
        now = time.monotonic()
        if now >= deadline:
            return sent, "time limit", window_waits
        if sent >= max_bytes:
            return sent, "byte limit", window_waits
        c.pump(0)
        if c.closed or c.goaway or sid in c.resets or c.grpc_status(sid) is not None:
            break
        try:
            window = min(c.conn.local_flow_control_window(sid), max_bytes - sent)
        except h2.exceptions.StreamClosedError:
            break
        if window <= 0:
            window_waits += 1
            if now - last_progress >= stall:
                return sent, "window closed", window_waits
            c.pump(0.2)
            continue
        frame = min(c.conn.max_outbound_frame_size, len(chunk))
        if block is None or block[0] != frame:
            block = (frame, *c.data_block(sid, 1 << 20, frame))
        if window >= block[2]:
            if not c.send_block(sid, block[1], block[2]):
                break
            sent += block[2]
        else:
            while window > 0:
                n = min(frame, window)
                c.conn.send_data(sid, chunk[:n])
                window -= n
                sent += n
            if not c.flush():
                break
        last_progress = time.monotonic()
    outcome = ("reset" if sid in c.resets else "status" if c.grpc_status(sid) is not None
               else "goaway" if c.goaway else "closed")
    return sent, outcome, window_waits


def attack_big_message(d, seconds=15.0, max_bytes=2 << 30, announce=0xFFFFFFF0, token=True, stall=5.0, streams=1,
                       probe_calls=True):
    """Announces a message of `announce` bytes on one stream and sends DATA
    as fast as the flow-control window allows, for at most `seconds` or
    `max_bytes` in all; with streams > 1, starts again on a new connection
    each time the server ends one, up to `streams` times. Measures signetd's
    peak RSS (sampled VmRSS and VmHWM), what the client saw, RSS once the
    connection is closed and, with probe_calls, how grpcio calls made
    meanwhile fared."""
    before = d.status()
    fds_before = d.fds()
    sampler = Sampler(d.pid)
    calls = []  # (ok, seconds, error) of the grpcio calls made during the attack
    stop = threading.Event()

    def caller():
        while not stop.is_set():
            t = time.monotonic()
            err = d.grpc_call(2.0)
            calls.append((err is None, time.monotonic() - t, err))
            stop.wait(0.2)

    th = threading.Thread(target=caller, daemon=True)
    if probe_calls:
        th.start()
    t0 = time.monotonic()
    deadline = t0 + seconds
    sent, rounds, first = 0, [], None
    ctx = tls_context(d.ca.root_path)
    while len(rounds) < streams and time.monotonic() < deadline and sent < max_bytes:
        c = H2(d.port, ctx)
        sid = c.open_stream(d.ca.token() if token else None, grpc_frame(b"", announce=announce))
        c.flush()
        n, outcome, waits = _flood_stream(c, sid, deadline, max_bytes - sent, stall)
        sent += n
        # What the server says after the flood stops (a reset may be on its way).
        t_end = time.monotonic()
        while time.monotonic() - t_end < 2 and not c.closed and sid not in c.resets and c.grpc_status(sid) is None:
            c.pump(0.2)
        rounds.append({"sent_mib": round(n / MIB, 1), "outcome": outcome, "window_waits": waits,
                       "ended_after_s": r3(c.ended(sid))})
        if first is None:
            first = c.summary()
            first.update({"stream_reset": sid in c.resets and {"after_s": r3(c.resets[sid][0]),
                                                                "error_code": c.resets[sid][1]},
                          "grpc_status": c.grpc_status(sid), "window_updates": c.window_updates})
        c.close()
        if outcome in ("time limit", "byte limit", "window closed"):
            break
    elapsed = time.monotonic() - t0
    stop.set()
    if probe_calls:
        th.join(10)
    during = d.status()
    time.sleep(2)  # memory sampled a while after the attack too: a measuring window, not a wait
    sampler.stop()
    after = d.status()
    hwm = after.get("VmHWM", 0)
    peak_kb = hwm if hwm > before.get("VmHWM", 0) else sampler.max_rss_kb
    peak_kb = max(peak_kb, sampler.max_rss_kb)
    ok = [x for x in calls if x[0]]
    return {
        "announced_bytes": announce, "sent_bytes": sent, "sent_mib": round(sent / MIB, 1),
        "seconds": r3(elapsed), "mib_per_s": round(sent / MIB / max(elapsed, 1e-3), 1),
        "outcome": rounds[0]["outcome"] if rounds else None, "rounds": len(rounds),
        "round_details": rounds[:20], "client": first,
        "rss_before_mib": round(before.get("VmRSS", 0) / 1024, 1),
        "hwm_before_mib": round(before.get("VmHWM", 0) / 1024, 1),
        "rss_sampled_max_mib": round(sampler.max_rss_kb / 1024, 1),
        "hwm_after_mib": round(hwm / 1024, 1),
        "peak_growth_mib": round((peak_kb - before.get("VmRSS", 0)) / 1024, 1),
        "rss_at_attack_end_mib": round(during.get("VmRSS", 0) / 1024, 1),
        "rss_after_mib": round(after.get("VmRSS", 0) / 1024, 1),
        "fds_before": fds_before, "fds_after": d.fds(),
        "grpc_calls_during": {"calls": len(calls), "ok": len(ok),
                              "worst_ok_s": r3(max((x[1] for x in ok), default=None)),
                              "errors": dict(collections.Counter(x[2].split(":")[0] for x in calls if not x[0]))},
        "signetd_alive": d.alive(),
    }


# ---- 2: more idle connections than file descriptors ----------------------------------

def attack_fds(d, count=1100, hold=5.0, prompt=2.0, observe=20.0, connect_timeout=1.0):
    """Opens `count` idle TCP connections to the gRPC port and holds them
    for `hold` seconds: a connection the server closes (EOF or reset) within
    `prompt` seconds of connecting counts as refused at once. Meanwhile
    reads signetd's fds, metrics and /readyz and tries a grpcio call. Then
    closes them all and measures how long until a grpcio call succeeds
    (waiting at most `observe` seconds)."""
    raise_nofile(count + 512)
    m0 = d.metrics()
    logs0 = d.log_counts()
    fds_before = d.fds()
    sel = select.epoll()
    socks, opened_at, closed_at = {}, {}, {}
    connect_failed = collections.Counter()
    t0 = time.monotonic()
    for i in range(count):
        if time.monotonic() - t0 > hold + 60:  # bounded even if connects crawl
            break
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(connect_timeout)
        try:
            s.connect((LOOPBACK, d.port))
        except OSError as e:
            connect_failed[errno.errorcode.get(e.errno, type(e).__name__)] += 1
            s.close()
            continue
        s.setblocking(False)
        socks[s.fileno()] = s
        opened_at[s.fileno()] = time.monotonic()
        sel.register(s.fileno(), select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLERR | select.EPOLLHUP)

        if i % 64 == 0:
            _drain_closed(sel, socks, closed_at)
    connected = time.monotonic()
    mid = None
    fds_max = d.fds()
    grpc_during = probe_during = None
    while time.monotonic() - connected < hold:
        _drain_closed(sel, socks, closed_at, 0.1)
        fds_max = max(fds_max, d.fds() or 0)
        if mid is None and time.monotonic() - connected >= min(1.0, hold / 2):
            mid = d.metrics()
            probe_during = d.probe(timeout=2.0)
            grpc_during = d.grpc_call(2.0)
    refused_at_once = sum(1 for fd, t in closed_at.items() if t - opened_at[fd] <= prompt)
    refused_later = len(closed_at) - refused_at_once
    m1 = d.metrics()
    logs1 = d.log_counts()
    fds_held = d.fds()
    for s in socks.values():
        s.close()
    sel.close()
    t_close = time.monotonic()
    rec = d.wait_grpc_ok(observe)
    time.sleep(0.5)  # figure only (not asserted): the connection gauge after the close
    m2 = d.metrics()
    return {
        "connections": count, "connected": len(socks), "connect_failed": dict(connect_failed),
        "connect_s": r3(connected - t0),
        "closed_by_server_at_once": refused_at_once, "closed_by_server_later": refused_later,
        "held_open": len(socks) - len(closed_at),
        "signetd_fds_before": fds_before, "signetd_fds_max": fds_max, "signetd_fds_at_end_of_hold": fds_held,
        "signetd_accepted_estimate": (fds_max - fds_before) if fds_before is not None else None,
        "signet_grpc_connections_during": family(mid or {}, "signet_grpc_connections"),
        "signet_grpc_max_connections": family(m1, "signet_grpc_max_connections"),
        "refused_total_delta": delta(m1, m0, "signet_grpc_connections_refused_total"),
        "refused_limit_delta": _label_delta(m1, m0, "signet_grpc_connections_refused_total", 'reason="limit"'),
        "refused_fds_delta": _label_delta(m1, m0, "signet_grpc_connections_refused_total", 'reason="fds"'),
        "grpc_call_while_held": grpc_during or "ok", "readyz_while_held": probe_during,
        "metrics_readable_while_held": bool(mid),
        "emfile_log_lines": logs1["emfile"] - logs0["emfile"],
        "other_log_lines": logs1["other"] - logs0["other"],
        "after_close": rec, "observed_after_close_s": r3(time.monotonic() - t_close),
        "signetd_fds_after": d.fds(),
        "signet_grpc_connections_after": family(m2, "signet_grpc_connections"),
        "signetd_alive": d.alive(),
    }


def _label_delta(after, before, name, label):
    a = [v for k, v in after.items() if k.startswith(name + "{") and label in k]
    b = [v for k, v in before.items() if k.startswith(name + "{") and label in k]
    return (sum(a) - sum(b)) if a else None


def _drain_closed(sel, socks, closed_at, timeout=0):
    for fd, _ in sel.poll(timeout):
        s = socks.get(fd)
        if s is None or fd in closed_at:
            continue
        try:
            data = s.recv(4096)
        except BlockingIOError:
            continue
        except OSError:
            data = b""
        if not data:
            closed_at[fd] = time.monotonic()
            sel.unregister(fd)


# ---- 3: idle connections and message-less streams ---------------------------------------

def attack_idle(d, observe=30.0, idle_conns=1, stream_conns=1, streams_per_conn=1, silent_tcp=1, tls_silent=1):
    """Holds, for at most `observe` seconds: idle HTTP/2 connections
    (preface and SETTINGS, PINGs answered), connections with message-less
    streams (valid gRPC request headers, no DATA), half of them with a valid
    authorization header, TCP connections that never start TLS and TLS
    connections that never send the HTTP/2 preface. Measures when the server
    closes each (GOAWAY, EOF) and resets each stream (a connection whose
    streams were reset is idle from then on, and observed until closed too),
    and signetd's fds and RSS before, while held, and once everything was
    reclaimed or the observation ended."""
    ctx = tls_context(d.ca.root_path)
    fds0, st0 = d.fds(), d.status()
    tok = d.ca.token()
    idle = [H2(d.port, ctx) for _ in range(idle_conns)]
    streamers = []
    for i in range(stream_conns * 2):
        auth = i % 2 == 1
        c = H2(d.port, ctx)
        sids = [c.open_stream(tok if auth else None) for _ in range(streams_per_conn)]
        c.flush()
        streamers.append((c, auth, sids))
    raw = []
    for _ in range(silent_tcp):
        s = socket.create_connection((LOOPBACK, d.port), 5)
        s.setblocking(False)
        raw.append(("tcp", s, time.monotonic(), [None]))
    for _ in range(tls_silent):
        s = ctx.wrap_socket(socket.create_connection((LOOPBACK, d.port), 5), server_hostname="localhost")
        s.setblocking(False)
        raw.append(("tls", s, time.monotonic(), [None]))
    time.sleep(0.3)  # figures only (not asserted): signetd's fds and RSS with all of it held
    fds_held, st_held = d.fds(), d.status()
    t0 = time.monotonic()
    h2s = idle + [c for c, _, _ in streamers]

    def done():  # every stream ended and every connection closed by the server
        return all(c.closed for c in h2s) and all(r[3][0] is not None for r in raw)

    while time.monotonic() - t0 < observe and not done():
        p = select.poll()
        fdmap = {}
        for c in h2s:
            if not c.closed:
                if c.sock.pending():
                    c.pump(0)
                p.register(c.sock.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
                fdmap[c.sock.fileno()] = c
        for kind, s, t, res in raw:
            if res[0] is None:
                p.register(s.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
                fdmap[s.fileno()] = (s, t, res)
        for fd, _ in p.poll(200):
            obj = fdmap.get(fd)
            if isinstance(obj, H2):
                obj.pump(0)
            elif obj is not None:
                s, t, res = obj
                try:
                    data = s.recv(4096)
                except (BlockingIOError, ssl.SSLWantReadError):
                    continue
                except (OSError, ssl.SSLError):
                    data = b""
                if not data:
                    res[0] = time.monotonic() - t
    observed = time.monotonic() - t0
    reclaimed = done()
    # What the server closed, it has given back (its descriptors down to
    # where they were): waited for, not assumed after a fixed pause.
    t_end = time.monotonic()
    while fds0 is not None and (d.fds() or 0) > fds0 and time.monotonic() - t_end < 30:
        time.sleep(0.05)
    fds_end, st_end = d.fds(), d.status()

    def conn_fig(c):
        out = c.summary()
        out["pings_answered"] = c.pings
        return out

    def stream_fig(c, auth, sids):
        ends = [c.ended(s) for s in sids]
        first = sids[0]
        return {"authorization": auth, "streams": len(sids),
                "ended": sum(e is not None for e in ends),
                "max_end_s": r3(max(ends)) if all(e is not None for e in ends) else None,
                "first": {"reset": c.resets.get(first) and {"after_s": r3(c.resets[first][0]),
                                                            "error_code": c.resets[first][1]},
                          "grpc_status": c.grpc_status(first)},
                "connection": conn_fig(c)}

    fig = {
        "observe_s": observe, "observed_s": r3(observed), "all_reclaimed": reclaimed,
        "idle_connections": [conn_fig(c) for c in idle],
        "stream_connections": [stream_fig(*x) for x in streamers],
        "silent_tcp_closed_after_s": [r3(r[3][0]) for r in raw if r[0] == "tcp"],
        "tls_without_preface_closed_after_s": [r3(r[3][0]) for r in raw if r[0] == "tls"],
        "signetd_fds_before": fds0, "signetd_fds_held": fds_held, "signetd_fds_at_end": fds_end,
        "rss_before_mib": round(st0.get("VmRSS", 0) / 1024, 1),
        "rss_held_mib": round(st_held.get("VmRSS", 0) / 1024, 1),
        "rss_at_end_mib": round(st_end.get("VmRSS", 0) / 1024, 1),
    }
    for c in h2s:
        c.close()
    for _, s, _, _ in raw:
        s.close()
    time.sleep(0.5)  # figure only (not asserted)
    fig["signetd_fds_after_client_close"] = d.fds()
    fig["signetd_alive"] = d.alive()
    return fig


# ---- 4: slowloris on the probe port -----------------------------------------------------------

def attack_slowloris(d, conns=1000, source="127.0.0.2", seconds=20.0, after=5.0, trickle=2.0,
                     probe_interval=0.3, probe_timeout=2.0, path="/readyz", reconnect_budget=None,
                     port=None, sources=1):
    """Holds `conns` connections from `source` (or, with sources > 1, from
    that many consecutive loopback addresses starting there, taken in
    turn) to the probe port, each
    sending an unfinished request a header line every `trickle` seconds
    (reconnecting when the server drops one: at most `conns` reconnects
    per `trickle` interval and `reconnect_budget` in all),
    for `seconds`; a prober on 127.0.0.1 GETs `path` every `probe_interval`
    during the attack and for `after` seconds once it stopped."""
    raise_nofile(conns + 512)
    port = port or d.probe_port
    base = [int(x) for x in source.split(".")]
    if base[0] != 127 or base[3] + sources - 1 > 254:
        raise ValueError("slowloris sources must be loopback addresses (127.x.y.z, z <= 254)")
    addrs = [f"127.{base[1]}.{base[2]}.{base[3] + i}" for i in range(sources)]
    turn = [0]
    budget = reconnect_budget if reconnect_budget is not None else int(conns * max(1.0, seconds / trickle))
    phase = ["during"]
    probes = []
    stop = threading.Event()

    def prober():
        nxt = time.monotonic()
        while not stop.is_set():
            now = time.monotonic()
            if now < nxt:
                stop.wait(nxt - now)
                continue
            nxt = now + probe_interval
            ph = phase[0]
            t = time.monotonic()
            status, err = None, None
            hc = http.client.HTTPConnection(LOOPBACK, port, timeout=probe_timeout, source_address=(LOOPBACK, 0))
            try:
                hc.request("GET", path)
                r = hc.getresponse()
                r.read()
                status = r.status
            except (OSError, http.client.HTTPException) as e:
                err = type(e).__name__
            finally:
                hc.close()
            probes.append((ph, status, time.monotonic() - t, err, t))

    th = threading.Thread(target=prober, daemon=True)
    th.start()
    ep = select.epoll()
    live = {}  # fd -> [socket, opened, lines sent]
    stats = collections.Counter()
    lifetimes = []

    def open_one():
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        turn[0] += 1
        try:
            s.bind((addrs[turn[0] % len(addrs)], 0))
            s.settimeout(1.0)
            s.connect((LOOPBACK, port))
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: {LOOPBACK}\r\n".encode())
        except OSError as e:
            stats["connect_failed:" + errno.errorcode.get(e.errno or 0, type(e).__name__)] += 1
            s.close()
            return False
        s.setblocking(False)
        live[s.fileno()] = [s, time.monotonic(), 0]
        ep.register(s.fileno(), select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLERR | select.EPOLLHUP)
        stats["opened"] += 1
        return True

    def drop(fd, why):
        s, opened, _ = live.pop(fd)
        ep.unregister(fd)
        s.close()
        stats[why] += 1
        lifetimes.append(time.monotonic() - opened)

    t0 = time.monotonic()
    for _ in range(conns):
        if time.monotonic() - t0 > seconds:
            break
        open_one()
    stats["open_after_ramp"] = len(live)
    stats["ramp_s"] = round(time.monotonic() - t0, 3)
    next_trickle = time.monotonic() + trickle
    max_open = len(live)
    allowance, last_refill = 0.0, time.monotonic()  # reconnects, refilled at conns per trickle
    while time.monotonic() - t0 < seconds:
        for fd, _ in ep.poll(0.1):
            if fd not in live:
                continue
            try:
                data = live[fd][0].recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            drop(fd, "answered_by_server" if data else "closed_by_server")
        if time.monotonic() >= next_trickle:
            next_trickle += trickle
            for fd in list(live):
                s, _, n = live[fd]
                try:
                    s.send(f"X-Pad-{n}: {'a' * 8}\r\n".encode())
                    live[fd][2] = n + 1
                except BlockingIOError:
                    pass
                except OSError:
                    drop(fd, "closed_by_server")
        now = time.monotonic()
        allowance = min(conns, allowance + (now - last_refill) * conns / trickle)
        last_refill = now
        while len(live) < conns and budget > 0 and allowance >= 1 and time.monotonic() - t0 < seconds:
            budget -= 1
            allowance -= 1
            stats["reconnects"] += 1
            if not open_one():
                break
        max_open = max(max_open, len(live))
    stats["open_at_end"] = len(live)
    phase[0] = "after"
    t_stop = time.monotonic()
    for fd in list(live):
        s, _, _ = live.pop(fd)
        s.close()
    ep.close()
    time.sleep(after)  # the probes go on for `after` s once the attack ended: a measuring window
    stop.set()
    th.join(probe_timeout + 5)

    def phase_fig(name):
        ps = [p for p in probes if p[0] == name]
        ok = [p for p in ps if p[1] == 200]
        return {"probes": len(ps), "ok_200": len(ok),
                "ok_within_1s": sum(1 for p in ok if p[2] <= 1.0),
                "share_ok": round(len(ok) / len(ps), 3) if ps else None,
                "worst_latency_s": r3(max((p[2] for p in ps), default=None)),
                "worst_ok_latency_s": r3(max((p[2] for p in ok), default=None)),
                "errors": dict(collections.Counter(p[3] or f"HTTP {p[1]}" for p in ps if p[1] != 200))}

    lifetimes.sort()
    return {
        "connections": conns, "sources": f"{addrs[0]}..{addrs[-1]}" if sources > 1 else source,
        "seconds": seconds, "trickle_s": trickle,
        "attack": dict(stats), "max_open": max_open,
        "median_lifetime_of_dropped_s": r3(lifetimes[len(lifetimes) // 2]) if lifetimes else None,
        "during": phase_fig("during"), "after": phase_fig("after"),
        "first_ok_after_stop_s": r3(min((p[4] + p[2] - t_stop for p in probes if p[0] == "after" and p[1] == 200),
                                        default=None)),
        "signetd_alive": d.alive(),
    }


# ---- 5: cancelled calls, rapid reset --------------------------------------------------------------

def _settle_signatures(d, base, settle):
    """Waits (at most settle seconds) until signet_hsm_signatures_total
    stops moving for a second; returns the last metrics read."""
    last, stable_since = None, time.monotonic()
    t0 = time.monotonic()
    m = d.metrics()
    while time.monotonic() - t0 < settle:
        m = d.metrics()
        v = family(m, "signet_hsm_signatures_total")
        if v != last:
            last, stable_since = v, time.monotonic()
        elif time.monotonic() - stable_since >= 1.0:
            break
        time.sleep(0.2)
    return m


def cancel(c, sid):
    """RST_STREAM(CANCEL) on sid unless the server has already ended it."""
    try:
        c.conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
        return True
    except h2.exceptions.StreamClosedError:
        return False


def attack_cancel(d, count=10000, per_conn=100, seconds=120.0, settle=30.0, token=True, mode="burst",
                  batch=8, gap=0.001, burst_conns=20):
    """Sends `count` complete, valid CreateCertificate requests and resets
    each with RST_STREAM(CANCEL), `per_conn` to a connection (a new one when
    the server closes one); measures the HSM signatures spent, the audit and
    warning lines logged and the answers that came back anyway (an answer
    that arrives before the reset is a call the server legitimately won).

    mode (when the reset is written): "same-write": with its request;
    "next-write": in a write of its own right after the request's;
    "delay": `gap` seconds after its request (requests keep flowing
    meanwhile), the client that gives up on a call it has just made;
    "batch": `batch` requests in one write, their resets `gap` seconds
    later; "burst": `burst_conns` connections each write `per_conn`
    requests at once, and `gap` seconds later every one of them is reset
    (far more than the signer can finish in `gap`: a server that looks
    before it signs skips nearly all of them)."""
    ctx = tls_context(d.ca.root_path)
    body = grpc_frame(d.ca.request())
    tok = d.ca.token() if token else None
    m0, logs0 = d.metrics(), d.log_counts()
    st = collections.Counter()  # sent, connections, closed_by_server, unprocessed, answered, late
    goaways = collections.Counter()
    n_write = batch if mode == "batch" else 1
    wait = gap if mode in ("delay", "batch", "burst") else 0.0
    t0 = time.monotonic()

    def hang_up(c, mine):
        """Reads what the server says about these streams, then closes."""
        t_end = time.monotonic()
        while time.monotonic() - t_end < 0.05 and not c.closed:
            c.pump(0.01)
        st["answered"] += sum(1 for s in mine if c.grpc_status(s) is not None and c.grpc_status(s)[0] == 0)
        if c.goaway:
            goaways[c.goaway[1]] += 1
            st["unprocessed"] += sum(1 for s in mine if s > c.goaway[2])
        if c.closed or c.goaway:
            st["closed_by_server"] += 1
        c.close()

    def one_connection():
        c = H2(d.port, ctx)
        st["connections"] += 1
        mine = []
        pending = collections.deque()  # (due, stream id) not yet reset

        def reset_due(now):
            while pending and pending[0][0] <= now:
                st["late"] += not cancel(c, pending.popleft()[1])

        try:
            while len(mine) < per_conn and st["sent"] < count and not (c.closed or c.goaway):
                n = min(n_write, per_conn - len(mine), count - st["sent"])
                if not c.wait_window(n * len(body)):
                    break
                sids = [c.open_stream(tok, body, end=True) for _ in range(n)]
                if mode == "same-write":
                    for sid in sids:
                        st["late"] += not cancel(c, sid)
                elif not c.flush():
                    break
                else:
                    due = time.monotonic() + wait
                    pending.extend((due, sid) for sid in sids)
                    reset_due(time.monotonic())
                if not c.flush():
                    break
                mine += sids
                st["sent"] += n
                c.pump(0)
                if wait and len(pending) >= 64:  # keep the streams in flight bounded
                    time.sleep(max(0.0, pending[0][0] - time.monotonic()))
                    reset_due(time.monotonic())
            while pending and not c.closed and time.monotonic() - t0 < seconds + 5:
                time.sleep(max(0.0, pending[0][0] - time.monotonic()))
                reset_due(time.monotonic())
            c.flush()
        except h2.exceptions.ProtocolError:
            pass
        hang_up(c, mine)

    def one_burst():
        # Connect first, and serialize every request before writing any, so
        # that the burst reaches the server within a few milliseconds.
        cs = []
        for _ in range(burst_conns):
            if st["sent"] + len(cs) * per_conn >= count:
                break
            c = H2(d.port, ctx)
            st["connections"] += 1
            c.pump(0.05)  # the server's SETTINGS and window
            cs.append(c)
        burst = []
        for c in cs:
            n = min(per_conn, count - st["sent"])
            sids = []
            try:
                for _ in range(n):
                    sids.append(c.open_stream(tok, body, end=True))
            except h2.exceptions.ProtocolError:  # the server allows fewer streams, or less window
                pass
            st["sent"] += len(sids)
            burst.append((c, sids))
        t_w = time.monotonic()
        for c, _ in burst:
            c.flush()
        st["burst_write_ms"] = max(st["burst_write_ms"], int((time.monotonic() - t_w) * 1000))
        time.sleep(wait)  # the attack's own timing: the resets go `gap` s after the burst
        for c, sids in burst:
            for sid in sids:
                st["late"] += not cancel(c, sid)
        for c, _ in burst:
            c.flush()
        for c, sids in burst:
            hang_up(c, sids)

    while st["sent"] < count and time.monotonic() - t0 < seconds:
        one_burst() if mode == "burst" else one_connection()
    elapsed = time.monotonic() - t0
    m1 = _settle_signatures(d, m0, settle)
    logs1 = d.log_counts()
    sigs = delta(m1, m0, "signet_hsm_signatures_total")
    warn_kinds = {k[5:]: logs1[k] - logs0[k] for k in logs1 if k.startswith("warn:") and logs1[k] > logs0[k]}
    sent, answered = st["sent"], st["answered"]
    return {
        "requests_cancelled": sent, "mode": mode, "gap_s": wait, "seconds": r3(elapsed),
        "connections": st["connections"], "connections_closed_by_server": st["closed_by_server"],
        "goaway_codes": dict(goaways), "streams_above_goaway_last_id": st["unprocessed"],
        "answered_ok_before_reset": answered, "ended_by_server_before_reset": st["late"],
        "longest_burst_write_ms": st["burst_write_ms"] if mode == "burst" else None,
        "hsm_signatures": sigs,
        "signatures_per_10000": round(sigs * 10000 / sent, 1) if sigs is not None and sent else None,
        "signatures_for_cancelled_calls": None if sigs is None else sigs - answered,
        "issued_log_lines": logs1["issued"] - logs0["issued"],
        "issued_undelivered_log_lines": logs1["issued_undelivered"] - logs0["issued_undelivered"],
        "info_log_lines": logs1["records"] - logs0["records"],
        "warn_log_lines": logs1["warn"] - logs0["warn"], "warn_kinds": warn_kinds,
        "calls_cancelled_delta": delta(m1, m0, "signet_grpc_calls_cancelled_total"),
        "requests_abandoned_delta": delta(m1, m0, "signet_requests_abandoned_total"),
        "rapid_reset_closed_delta": delta(m1, m0, "signet_grpc_rapid_reset_closed_total"),
        "signetd_alive": d.alive(),
    }


def attack_rapid_reset(d, max_streams=20000, seconds=20.0, token=True, body=True, settle=10.0):
    """One connection that opens and resets streams in a tight loop
    (HEADERS, DATA, RST_STREAM(CANCEL), as a valid request unless body or
    token is False) until the server closes it or the bounds are reached;
    how many resets got through before GOAWAY or EOF."""
    c = H2(d.port, tls_context(d.ca.root_path))
    data = grpc_frame(d.ca.request()) if body else None
    tok = d.ca.token() if token else None
    m0, logs0 = d.metrics(), d.log_counts()
    sent = 0
    t0 = time.monotonic()
    stopped_by = "time limit"
    while time.monotonic() - t0 < seconds:
        if sent >= max_streams:
            stopped_by = "stream limit"
            break
        if c.closed or c.goaway:
            stopped_by = "goaway" if c.goaway else "eof"
            break
        if data and not c.wait_window(len(data)):
            stopped_by = ("goaway" if c.goaway else "eof" if c.closed else "window closed")
            break
        try:
            sid = c.open_stream(tok, data, end=data is not None)
            c.conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
        except h2.exceptions.ProtocolError as e:
            stopped_by = f"h2: {e}"
            break
        if not c.flush():
            stopped_by = "goaway" if c.goaway else "eof"
            break
        sent += 1
        if sent % 16 == 0:
            c.pump(0)
    elapsed = time.monotonic() - t0
    t_end = time.monotonic()
    while time.monotonic() - t_end < 2 and not c.closed:
        c.pump(0.1)
    fig = c.summary()
    c.close()
    m1 = _settle_signatures(d, m0, settle)
    logs1 = d.log_counts()
    goaway = c.goaway
    fig.update({
        "resets_sent": sent, "seconds": r3(elapsed),
        "closed_by_server": bool(goaway or c.eof is not None), "stopped_by": stopped_by,
        "resets_before_goaway": goaway[2] // 2 + 1 if goaway else None,
        "hsm_signatures": delta(m1, m0, "signet_hsm_signatures_total"),
        "issued_log_lines": logs1["issued"] - logs0["issued"],
        "warn_log_lines": logs1["warn"] - logs0["warn"],
        "rapid_reset_closed_delta": delta(m1, m0, "signet_grpc_rapid_reset_closed_total"),
        "signetd_alive": d.alive(),
    })
    return fig


# ---- 7: clients that never read their answers ---------------------------------------------

def _normal_calls(d, seconds, rate, stop=None):
    """A well-behaved client beside the attack: grpcio calls on one channel,
    due every 1/rate s for `seconds` (or until stop), each the same valid
    request; latency measured from when the call was due (a call that starts late because the previous one was slow pays
    for the wait). Returns {calls, ok, errors, p50_ms, p99_ms, max_ms}."""
    import grpc
    creds = grpc.ssl_channel_credentials(root_certificates=d.ca.root)
    ch = grpc.secure_channel(f"{LOOPBACK}:{d.port}", creds, options=[("grpc.ssl_target_name_override", "localhost")])
    stub = d.ca.pb_grpc.IstioCertificateServiceStub(ch)
    req = d.ca.pb.IstioCertificateRequest(csr=d.ca.csr(), validity_duration=3600)
    md = [("authorization", f"Bearer {d.ca.token()}")]
    lat, errors = [], collections.Counter()
    t0 = time.monotonic()
    i = 0
    try:
        for attempt in range(20):  # connected before the clock starts (the queue may be full)
            try:
                stub.CreateCertificate(req, metadata=md, timeout=10)
                break
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE or attempt == 19:
                    raise
                time.sleep(0.1)
        while time.monotonic() - t0 < seconds and not (stop and stop.is_set()):
            due = t0 + i / rate
            i += 1
            time.sleep(max(0.0, due - time.monotonic()))
            try:
                resp = stub.CreateCertificate(req, metadata=md, timeout=5)
                if len(resp.cert_chain) >= 2:
                    lat.append((time.monotonic() - due) * 1000)
                else:
                    errors["short chain"] += 1
            except grpc.RpcError as e:
                errors[e.code().name] += 1
    finally:
        ch.close()
    lat.sort()

    def pct(p):
        return round(lat[min(len(lat) - 1, int(p * len(lat)))], 2) if lat else None
    return {"calls": len(lat) + sum(errors.values()), "ok": len(lat), "errors": dict(errors),
            "p50_ms": pct(0.5), "p99_ms": pct(0.99), "max_ms": round(lat[-1], 2) if lat else None}


def attack_no_read(d, conns=20, streams=100, seconds=10.0, read=True, rate=20.0, baseline=5.0, settle=3.0):
    """`conns` connections that announce SETTINGS_INITIAL_WINDOW_SIZE 0 and
    never send a WINDOW_UPDATE (the server may send headers, never a byte
    of a message), each with up to `streams` valid, authenticated
    CreateCertificate requests (every one of them signable). With read
    False the client does not even read the socket until the end (TCP's
    window closes too); with read True it reads frames, to see when the
    server ends each stream. Held for `seconds`, while a well-behaved grpcio
    client calls at `rate` per second; the same client alone for `baseline`
    seconds first gives its undisturbed latency. Measures signetd's memory
    growth, how each stream ended (reset, status, nothing) and when, and
    the normal client's p50/p99 with and without the attack."""
    base = _normal_calls(d, baseline, rate) if baseline else None
    before = d.status()
    m0 = d.metrics()
    sampler = Sampler(d.pid, 0.05)
    ctx = tls_context(d.ca.root_path)
    body = grpc_frame(d.ca.request())
    tok = d.ca.token()
    cs, opened = [], {}
    t0 = time.monotonic()
    for _ in range(conns):
        c = H2(d.port, ctx, preface=False)
        c.conn.local_settings = h2.settings.Settings(client=True, initial_values={
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0, h2.settings.SettingCodes.ENABLE_PUSH: 0})
        c.conn.initiate_connection()
        c.flush()
        c.pump(0.2)  # the server's SETTINGS: its stream limit and windows
        sids = []
        try:
            limit = c.conn.remote_settings.max_concurrent_streams
            for _ in range(min(streams, limit)):
                if not c.wait_window(len(body), timeout=2.0):
                    break
                sids.append(c.open_stream(tok, body, end=True))
                c.flush()
        except h2.exceptions.ProtocolError:
            pass
        cs.append(c)
        opened[c] = sids
    t_sent = time.monotonic() - t0
    # The normal client runs while the attack holds.
    normal = {}
    stop = threading.Event()

    def run_normal():
        try:
            normal.update(_normal_calls(d, seconds, rate, stop))
        except Exception as e:  # reported, and the test fails on the missing figures
            normal["error"] = f"{type(e).__name__}: {e}"
    th = threading.Thread(target=run_normal, daemon=True)
    th.start()
    t_hold = time.monotonic()
    while time.monotonic() - t_hold < seconds:  # the attack's length is the scenario: a fixed time
        if read:
            for c in cs:
                c.pump(0)
        time.sleep(0.02)
    stop.set()
    th.join(30)
    during = d.status()
    m1 = d.metrics()
    # Now read what the server said about every stream (still no window):
    # for settle seconds, and on while a stream has no end yet (a loaded
    # machine delivers them later), up to 30 s more.
    def unended():
        return any(not (c.closed or c.goaway) and any(c.ended(sid) is None for sid in opened[c]) for c in cs)
    t_end = time.monotonic()
    while time.monotonic() - t_end < settle or (unended() and time.monotonic() - t_end < settle + 30):
        for c in cs:
            c.pump(0)
        time.sleep(0.05)
    outcome = collections.Counter()
    ended_after = []
    statuses = collections.Counter()
    data_bytes = 0
    for c in cs:
        data_bytes += c.data_bytes
        for sid in opened[c]:
            st = c.grpc_status(sid)
            if sid in c.resets:
                outcome["reset:" + h2.errors.ErrorCodes(c.resets[sid][1]).name] += 1
            elif st is not None:
                outcome["status"] += 1
            elif c.closed or c.goaway:
                outcome["connection ended"] += 1
            else:
                outcome["open"] += 1
            if st is not None:
                statuses[st[0]] += 1
            t = c.ended(sid)
            if t is not None:
                ended_after.append(t)  # since the connection (and its requests) began
    for c in cs:
        c.close()
    time.sleep(2)  # memory sampled a while after the attack too: a measuring window, not a wait
    sampler.stop()
    after = d.status()
    n_streams = sum(len(v) for v in opened.values())
    peak_kb = max(sampler.max_rss_kb, during.get("VmRSS", 0))
    return {
        "connections": conns, "streams": n_streams, "read_frames": read, "seconds": seconds,
        "send_s": r3(t_sent),
        "stream_outcomes": dict(outcome), "grpc_statuses": {str(k): v for k, v in statuses.items()},
        "ended_after_s_max": r3(max(ended_after)) if ended_after else None,
        "ended_after_s_min": r3(min(ended_after)) if ended_after else None,
        "data_bytes_received": data_bytes,
        "hsm_signatures": delta(m1, m0, "signet_hsm_signatures_total"),
        "rss_before_mib": round(before.get("VmRSS", 0) / 1024, 1),
        "peak_growth_mib": round((peak_kb - before.get("VmRSS", 0)) / 1024, 1),
        "rss_at_attack_end_mib": round(during.get("VmRSS", 0) / 1024, 1),
        "rss_after_mib": round(after.get("VmRSS", 0) / 1024, 1),
        "normal_alone": base, "normal_during": normal,
        "signetd_alive": d.alive(),
    }


SCENARIOS = {
    "big-message": attack_big_message,
    "fds": attack_fds,
    "idle": attack_idle,
    "slowloris": attack_slowloris,
    "cancel": attack_cancel,
    "rapid-reset": attack_rapid_reset,
    "no-read": attack_no_read,
}


# ---- command line ----------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario", choices=sorted(SCENARIOS))
    ap.add_argument("--signetd", required=True)
    ap.add_argument("--signetctl", required=True)
    ap.add_argument("--proto-dir", required=True)
    ap.add_argument("--new-flags", action="store_true",
                    help="add the scenario's short settings of the newer options (%s)" %
                    "; ".join(f"{k}: {' '.join(v) or '-'}" for k, v in NEW_FLAGS.items()))
    ap.add_argument("--signetd-args", default="", help="more signetd options, one shell-quoted string")
    ap.add_argument("--nofile", type=int, help="signetd's open-files limit (prlimit); fds defaults to 1024")
    ap.add_argument("--as-limit", help="signetd's address-space limit (prlimit --as), e.g. 8G")
    ap.add_argument("--threads", type=int, default=2, help="signer threads")
    ap.add_argument("--key-type", help="CA key type (signetctl init --key-type), e.g. rsa-3072")
    ap.add_argument("--seconds", type=float, help="attack duration bound")
    ap.add_argument("--count", type=int, help="connections or streams (scenario's unit)")
    ap.add_argument("--max-mib", type=int, help="big-message: bytes to send at most, MiB")
    ap.add_argument("--streams", type=int, help="big-message: streams one after another (default 1)")
    ap.add_argument("--observe", type=float, help="fds, idle: how long to wait for the server")
    ap.add_argument("--after", type=float, help="slowloris: seconds of probing once the attack stopped")
    ap.add_argument("--sources", type=int, help="slowloris: client addresses from 127.0.0.2 on (default 1)")
    ap.add_argument("--settle", type=float, help="cancel, rapid-reset: wait at most this long for signing to stop")
    ap.add_argument("--per-conn", type=int, help="cancel: streams per connection")
    ap.add_argument("--streams-per-conn", type=int, help="idle: message-less streams per connection")
    ap.add_argument("--mode", choices=("same-write", "next-write", "batch", "delay", "burst"),
                    help="cancel: when the reset is written (default burst)")
    ap.add_argument("--gap-ms", type=float, help="cancel --mode delay, batch, burst: request to reset, ms (default 1)")
    ap.add_argument("--batch", type=int, help="cancel --mode batch: requests per write (default 8)")
    ap.add_argument("--no-token", action="store_true", help="send no authorization header")
    ap.add_argument("--silent", action="store_true", help="no-read: do not even read the socket until the end")
    ap.add_argument("--rate", type=float, help="no-read: the normal client's calls per second (default 20)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (and signetd's log)")
    a = ap.parse_args(argv)

    kw = {}
    sc = a.scenario
    if a.seconds is not None:
        kw["seconds" if sc not in ("idle", "fds") else ("observe" if sc == "idle" else "hold")] = a.seconds
    if a.count is not None:
        kw[{"big-message": "max_bytes", "fds": "count", "idle": "idle_conns", "slowloris": "conns",
            "cancel": "count", "rapid-reset": "max_streams", "no-read": "conns"}[sc]] = a.count
    if a.max_mib is not None:
        kw["max_bytes"] = a.max_mib * MIB
    if a.streams is not None:
        kw["streams"] = a.streams
    if a.observe is not None:
        kw["observe"] = a.observe
    if a.after is not None:
        kw["after"] = a.after
    if a.sources is not None:
        kw["sources"] = a.sources
    if a.per_conn is not None:
        kw["per_conn"] = a.per_conn
    if a.settle is not None:
        kw["settle"] = a.settle
    if a.streams_per_conn is not None:
        kw["streams_per_conn"] = a.streams_per_conn
    if a.mode:
        kw["mode"] = a.mode
    if a.batch is not None:
        kw["batch"] = a.batch
    if a.gap_ms is not None:
        kw["gap"] = a.gap_ms / 1000
    if a.no_token:
        kw["token"] = False
    if a.silent:
        kw["read"] = False
    if a.rate is not None:
        kw["rate"] = a.rate

    flags = (NEW_FLAGS[sc] if a.new_flags else []) + shlex.split(a.signetd_args)
    nofile = a.nofile if a.nofile is not None else (1024 if sc == "fds" else None)
    if sc in ("fds", "slowloris"):
        raise_nofile(8192)

    # SIGTERM and SIGINT unwind through the finally below: signetd is
    # stopped and the temporary directory removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ca = CA(a.signetctl, a.proto_dir, key_type=a.key_type)
    d = None
    out = {"scenario": sc, "signetd": a.signetd, "flags": flags, "nofile": nofile, "as_limit": a.as_limit,
           "signer_threads": a.threads, "key_type": a.key_type or "ecdsa-p256", "options": kw}
    rc = 0
    try:
        d = Daemon(ca, a.signetd, flags, nofile=nofile, as_limit=a.as_limit, threads=a.threads)
        out["before"] = {"grpc_call": d.grpc_call(10) or "ok", "rss_mib": round(d.status().get("VmRSS", 0) / 1024, 1),
                         "fds": d.fds()}
        out["figures"] = SCENARIOS[sc](d, **kw)
        out["after"] = {"signetd_alive": d.alive(), "grpc": d.wait_grpc_ok(5) if d.alive() else None}
    except Exception as e:  # the figures so far, and why they stop
        out["error"] = f"{type(e).__name__}: {e}"
        rc = 1
    finally:
        if d is not None:
            out["exit_code"] = d.stop()
            out["log_counts"] = {k: v for k, v in d.log_counts().items() if not k.startswith("warn:")}
            if a.keep:
                out["log"] = d.s.log_path
        if a.keep:
            out["tmp"] = ca.tmp
        else:
            ca.close()
    json.dump(out, sys.stdout, indent=1)
    print()
    return rc


if __name__ == "__main__":
    sys.exit(main())
