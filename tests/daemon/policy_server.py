"""A signet.policy.v1.PolicyServer written with Debian's python3-grpcio, for
tests/daemon/test_policyserver.c: an implementation of proto/policy.proto
that signet did not write (Python's protobuf parses what our encoder sent).

    /usr/bin/python3 policy_server.py PROTO_DIR WORK_DIR

compiles policy.proto for Python into WORK_DIR, writes a test CA, another
CA and a server certificate (DNS policy.test, IP 127.0.0.1) there, starts
three servers on 127.0.0.1 with ephemeral ports and prints one JSON line:
    {"a": port, "b": port, "tls": port, "ca": path, "other_ca": path}
"a" and "tls" answer as server "A", "b" as server "B". It exits, removing
WORK_DIR, when its standard input closes (the test program holding the
other end has ended).

What a server answers is chosen by the CertificateRequest's name
(metadata.name), by prefix:
    approve-*  APPROVED                 deny-*   DENIED "<server> says no to <name>"
    error-*    ERROR "backend down"     hang-*   nothing until the client gives up
    check-*    APPROVED when every field equals EXPECTED below (and the call
               carries a deadline of about 5 s), else DENIED listing the
               fields that differ
    ctrl-*     DENIED with control characters in the reason
    unset-*    a reason but no verdict, as a handler that forgot to set it
               would answer (proto3 leaves RESULT_UNSPECIFIED, 0, off the
               wire: the response holds the reason alone)
    design-approve-*, design-deny-*, design-error-*
               that answer as a server built to the design's numbering
               would send it (design_policy.proto: APPROVED = 0 in field 1)
    status-*   the call fails PERMISSION_DENIED
    raw-<hex>  the response bytes are <hex>, whatever they mean
    a-deny-*   DENIED by server A, APPROVED by the others
    b-deny-*   DENIED by server B, APPROVED by the others
Every call is counted per server and name prefix; "count-*" answers DENIED
with the counts as the reason (so the C side can see who was called).
"""
import collections
import datetime
import ipaddress
import json
import os
import shutil
import sys
import threading
import time
from concurrent import futures


def compile_proto(proto_dir, name, out):
    """Compiles proto_dir/name with python3-grpc-tools into out (then
    importable), as tests/ra/signet_e2e.py does for ca.proto."""
    import grpc_tools
    from grpc_tools import protoc
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    rc = protoc.main(["protoc", f"-I{proto_dir}", f"-I{include}", f"--python_out={out}",
                      os.path.join(proto_dir, name)])
    assert rc == 0, f"protoc failed on {name}"
    if out not in sys.path:
        sys.path.insert(0, out)


def make_pki(work):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def name(cn):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def ca(cn):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(name(cn))
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                               critical=True)
                .sign(key, hashes.SHA256()))
        return key, cert

    ca_key, ca_cert = ca("policy test CA")
    _, other_cert = ca("some other CA")
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (x509.CertificateBuilder().subject_name(name("policy.test")).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("policy.test"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    paths = {"ca": os.path.join(work, "roots.pem"), "other_ca": os.path.join(work, "other.pem")}
    with open(paths["ca"], "wb") as f:
        f.write(ca_cert.public_bytes(pem))
    with open(paths["other_ca"], "wb") as f:
        f.write(other_cert.public_bytes(pem))
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return paths, key_pem, leaf.public_bytes(pem)


# What test_policyserver.c's t_fields sends (keep the two in sync).
CSR_TEXT = b"-----BEGIN CERTIFICATE REQUEST-----\nMIIBAzCBqwIBADAAMFkw\n-----END CERTIFICATE REQUEST-----\n"
EXPECTED = {
    "metadata.name": "check-fields",
    "metadata.namespace": "shop",
    "metadata.uid": "3f1c9a52-8f7e-4c55-9c55-1d2e3f4a5b6c",
    "metadata.labels": {"app": "shop", "tier": "web"},
    "metadata.annotations": {"note": "h\u00e9llo \u2713"},
    "request": CSR_TEXT,
    "issuer_ref": ("mesh-ca", "ClusterIssuer", "cert-manager.io"),
    "is_ca": True,
    "duration": "2160h0m0s",
    "usages": ["digital signature", "server auth"],
    "user_info.username": "system:serviceaccount:shop:web",
    "user_info.uid": "u-42",
    "user_info.groups": ["system:authenticated", "system:serviceaccounts"],
    "user_info.extra": {"scopes": ["read", "write"], "empty": []},
    "policy_name": "shop-policy",
    "plugin_values": {"servers": "a", "team": "payments"},
}


def fields_of(req):
    md, ui = req.metadata, req.user_info
    return {
        "metadata.name": md.name,
        "metadata.namespace": md.namespace,
        "metadata.uid": md.uid,
        "metadata.labels": dict(md.labels),
        "metadata.annotations": dict(md.annotations),
        "request": req.request,
        "issuer_ref": (req.issuer_ref.name, req.issuer_ref.kind, req.issuer_ref.group),
        "is_ca": req.is_ca,
        "duration": req.duration,
        "usages": list(req.usages),
        "user_info.username": ui.username,
        "user_info.uid": ui.uid,
        "user_info.groups": list(ui.groups),
        "user_info.extra": {k: list(v.values) for k, v in ui.extra.items()},
        "policy_name": req.policy_name,
        "plugin_values": dict(req.plugin_values),
    }


def main():
    proto_dir, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    compile_proto(proto_dir, "policy.proto", work)
    compile_proto(os.path.dirname(os.path.abspath(__file__)), "design_policy.proto", work)
    import grpc
    import policy_pb2 as pb
    import design_policy_pb2 as design

    R = pb.PolicyResponse
    # policy.proto's numbering (zero is "unset", never an answer); a stale
    # generated module would answer with the old numbers.
    assert (R.RESULT_UNSPECIFIED, R.APPROVED, R.DENIED, R.ERROR) == (0, 1, 2, 3), "stale policy_pb2"
    counts = collections.Counter()
    lock = threading.Lock()

    def answer(server, req, context):
        n = req.metadata.name
        prefix = n.split("-", 1)[0]
        with lock:
            counts[f"{server}:{prefix}"] += 1
            snapshot = dict(counts)

        def resp(verdict, reason=""):
            return R(verdict=verdict, reason=reason).SerializeToString()

        D = design.PolicyResponse

        if n.startswith("approve-"):
            return resp(R.APPROVED)
        if n.startswith("deny-"):
            return resp(R.DENIED, f"{server} says no to {n}")
        if n.startswith("error-"):
            return resp(R.ERROR, "backend down")
        if n.startswith("hang-"):
            while context.is_active():
                time.sleep(0.05)
            return resp(R.ERROR, "too late")
        if n.startswith("check-"):
            got = fields_of(req)
            bad = [k for k in EXPECTED if got[k] != EXPECTED[k]]
            left = context.time_remaining()
            if left is None or left > 5.5:  # 5 s, as grpc-timeout rounds it
                bad.append(f"deadline ({left})")
            if bad:
                return resp(R.DENIED, "differ: " + ", ".join(f"{k}={got.get(k)!r}" for k in bad)[:1000])
            return resp(R.APPROVED)
        if n.startswith("ctrl-"):
            return resp(R.DENIED, "line one\nline two\x1b[31m red")
        if n.startswith("unset-"):
            return R(reason=f"{server} forgot the verdict").SerializeToString()
        for word, result in (("approve", D.APPROVED), ("deny", D.DENIED), ("error", D.ERROR)):
            if n.startswith(f"design-{word}-"):
                return D(result=result, reason=f"{server} in the design's numbering").SerializeToString()
        if n.startswith("status-"):
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "not for you")
        if n.startswith("raw-"):
            return bytes.fromhex(n[4:])
        if n.startswith("a-deny-"):
            return resp(R.DENIED if server == "A" else R.APPROVED, f"{server} denies")
        if n.startswith("b-deny-"):
            return resp(R.DENIED if server == "B" else R.APPROVED, f"{server} denies")
        if n.startswith("count-"):
            return resp(R.DENIED, json.dumps(snapshot, sort_keys=True))
        return resp(R.ERROR, f"no behaviour for {n!r}")

    def make(server):
        handler = grpc.method_handlers_generic_handler("signet.policy.v1.PolicyServer", {
            "Evaluate": grpc.unary_unary_rpc_method_handler(
                lambda req, ctx: answer(server, req, ctx),
                request_deserializer=pb.PolicyRequest.FromString,
                response_serializer=lambda b: b),  # bytes as the handler made them
        })
        s = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
        s.add_generic_rpc_handlers((handler,))
        return s

    paths, key_pem, cert_pem = make_pki(work)
    a, b, t = make("A"), make("B"), make("A")
    ports = {
        "a": a.add_insecure_port("127.0.0.1:0"),
        "b": b.add_insecure_port("127.0.0.1:0"),
        "tls": t.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(key_pem, cert_pem)])),
    }
    for s in (a, b, t):
        s.start()
    print(json.dumps({**ports, **paths}), flush=True)
    sys.stdin.read()  # until the test program closes it (or dies)
    for s in (a, b, t):
        s.stop(0)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
