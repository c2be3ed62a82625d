#!/usr/bin/python3
"""Makes a token pool for loadgen --token-dir: N distinct service-account
tokens, one per file (mode 0600, named 000000.jwt, 000001.jwt, ... so that
name order is minting order), as a mesh's pods would present them.

  perf/tokenpool.py jwt --signetctl build/ctl/signetctl --config CA/signet.conf \\
      --out DIR --count 5000 [--namespace default] [--service-accounts 1]
  perf/tokenpool.py rs256 --key KEY --issuer ISSUER [--jwks-out JWKS] --out DIR \\
      --count 5000 [--namespace default] [--service-accounts 1]
  perf/tokenpool.py tokenrequest --out DIR --count 3000 [--namespace bench] \\
      [--service-account bench] [--service-accounts 1]   (apiserver.sh env in the environment)

jwt: the tokens are minted by `signetctl token --count` (one process per
account and job, not per token) from the development issuer that
`signetctl init` writes into signet.conf (jwt-signing-key, jwt-issuer; the
signetd started with that config trusts it through jwt-jwks-file), the
issuer perf/ab.sh and perf/compare.sh mint with. Tokens are made distinct
by their expiry: an account's n-th token lives --ttl plus n seconds, so no
two of an account share an `exp` (sg_jwt_mint writes no `jti`; the ES256
signature differs anyway, but distinct claims keep them distinct under any
signer).

rs256: the tokens are signed here with an RSA-2048 key (RS256), the
algorithm of a Kubernetes API server's service-account tokens with its
default key (an RSA `sa.key`), where the jwt mode's development issuer signs
ES256; a signetd verifies them through --jwt-jwks-file JWKS (written with
--jwks-out) and --jwt-issuer ISSUER. --key is the issuer's private key,
made (mode 0600) when the file does not exist, so that several pools share
one issuer; the claims are those `signetctl token` writes (iss, sub, aud,
exp, iat, nbf, kubernetes.io namespace and service account), exp distinct
as in jwt mode.

tokenrequest: each token is a TokenRequest to the real API server
(POST .../serviceaccounts/SA/token, audience istio-ca) with
expirationSeconds --ttl plus i, so again no two share an `exp`; the
namespace and service accounts are created when missing. The API server is
the one of tests/kube/apiserver.sh: KUBE_APISERVER, KUBE_TOKEN_FILE and
KUBE_CA_FILE from its env file (`. DIR/env`), as tests/kube/kube_rest.py
reads them; only a loopback API server is accepted.

--service-accounts K spreads the tokens over K accounts (SA-0 .. SA-K-1,
token i to SA-(i mod K)); loadgen takes each token's identity from its own
claims, so its CSRs follow. Tokens never pass through argv or a log; they go
from the minting process's stdout (or the API server's answer) straight
into their 0600 files. DIR must not exist yet, or be empty.
"""
import argparse
import base64
import concurrent.futures
import hashlib
import json
import os
import time
import subprocess
import sys
import urllib.parse

MAX_COUNT = 100000  # loadgen's LG_TOKENS_MAX


def account(args, i):
    return args.service_account if args.service_accounts == 1 else f"{args.service_account}-{i % args.service_accounts}"


def write_token(out, i, token):
    """token (bytes, no newline) to out/NNNNNN.jwt, a new file of mode 0600."""
    fd = os.open(os.path.join(out, f"{i:06d}.jwt"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(token + b"\n")


def mint_jwt(args, acct, first, count):
    """Tokens of account acct from one `signetctl token --count`: its n-th
    lives --ttl plus first plus n seconds and goes to file acct + n * K
    (K accounts, token i to account i mod K)."""
    p = subprocess.run([args.signetctl, "token", "--config", args.config, "--namespace", args.namespace,
                        "--service-account", account(args, acct), "--audience", args.audience,
                        "--ttl", f"{args.ttl + first}s", "--count", str(count)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        raise RuntimeError(f"signetctl token failed: {p.stderr.decode(errors='replace').strip()}")
    tokens = p.stdout.split()
    if len(tokens) != count:
        raise RuntimeError(f"signetctl token --count {count} printed {len(tokens)} tokens")
    k = args.service_accounts
    for n, token in enumerate(tokens):
        write_token(args.out, acct + (first + n) * k, token)


def jwt_runs(args):
    """(account, first, count) for each signetctl run: each account's tokens
    in --jobs runs or fewer."""
    k = args.service_accounts
    runs = []
    for acct in range(k):
        mine = len(range(acct, args.count, k))
        step = max(1, -(-mine // args.jobs)) if k < args.jobs else mine
        runs += [(acct, a, min(step, mine - a)) for a in range(0, mine, step)]
    return runs


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=")


def rs256_issuer(args):
    """The RSA key of --key (made, mode 0600, when missing), its kid and,
    with --jwks-out, its JWKS written there."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    if os.path.exists(args.key):
        with open(args.key, "rb") as f:
            key = serialization.load_pem_private_key(f.read(), password=None)
        if not isinstance(key, rsa.RSAPrivateKey) or key.key_size != 2048:
            sys.exit(f"tokenpool.py: {args.key} is not an RSA-2048 private key")
    else:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
        fd = os.open(args.key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
    pub = key.public_key()
    der = pub.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    kid = b64url(hashlib.sha256(der).digest()).decode()
    if args.jwks_out:
        nums = pub.public_numbers()
        jwk = {"use": "sig", "kty": "RSA", "kid": kid, "alg": "RS256",
               "n": b64url(nums.n.to_bytes(256, "big")).decode(),
               "e": b64url(nums.e.to_bytes((nums.e.bit_length() + 7) // 8, "big")).decode()}
        with open(args.jwks_out, "w") as f:
            json.dump({"keys": [jwk]}, f, indent=2)
            f.write("\n")
    return key, kid


def mint_rs256(args, key, kid, i):
    """Token i: account i mod K, living --ttl plus i seconds."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding
    now = int(time.time())
    sa = account(args, i)
    header = {"alg": "RS256", "kid": kid}
    claims = {"iss": args.issuer, "sub": f"system:serviceaccount:{args.namespace}:{sa}", "aud": [args.audience],
              "exp": now + args.ttl + i, "iat": now, "nbf": now,
              "kubernetes.io": {"namespace": args.namespace, "serviceaccount": {"name": sa}}}
    signing = b64url(json.dumps(header, separators=(",", ":")).encode()) + b"." + \
        b64url(json.dumps(claims, separators=(",", ":")).encode())
    sig = key.sign(signing, padding.PKCS1v15(), hashes.SHA256())
    write_token(args.out, i, signing + b"." + b64url(sig))


def kube(args):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "kube"))
    import kube_rest  # noqa: E402  (the tests' REST client: admin token from its file, CA checked)
    env = {k: os.environ.get(k) for k in ("KUBE_APISERVER", "KUBE_TOKEN_FILE", "KUBE_CA_FILE")}
    if not all(env.values()):
        sys.exit("tokenpool.py: KUBE_APISERVER, KUBE_TOKEN_FILE and KUBE_CA_FILE must be set (. APIDIR/env)")
    host = urllib.parse.urlsplit(env["KUBE_APISERVER"]).hostname
    if host not in ("127.0.0.1", "::1", "localhost"):
        sys.exit(f"tokenpool.py: the API server {host} is not on loopback")
    return kube_rest.Kube(env)


def ensure(k, path, body):
    code, doc = k.req("POST", path, body)
    if code not in (201, 409):
        raise RuntimeError(f"POST {path}: {code} {doc.get('message')}")


def prepare_tokenrequest(args):
    k = kube(args)
    ensure(k, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": args.namespace}})
    for j in range(args.service_accounts):
        ensure(k, f"/api/v1/namespaces/{args.namespace}/serviceaccounts",
               {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account(args, j)}})
    return k


def mint_tokenrequest(args, k, i):
    doc = k.ok("POST", f"/api/v1/namespaces/{args.namespace}/serviceaccounts/{account(args, i)}/token",
               {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"audiences": [args.audience], "expirationSeconds": args.ttl + i}})
    write_token(args.out, i, doc["status"]["token"].encode())


def main():
    ap = argparse.ArgumentParser(description="Make a pool of distinct service-account tokens for loadgen --token-dir.")
    ap.add_argument("mode", choices=("jwt", "rs256", "tokenrequest"),
                    help="jwt: signetctl's development issuer (ES256); rs256: signed here with an RSA-2048 key, "
                         "as an API server's default key signs; tokenrequest: the test API server's TokenRequest")
    ap.add_argument("--out", required=True, help="directory to create (or an empty one)")
    ap.add_argument("--count", type=int, required=True, help=f"tokens to make (1 to {MAX_COUNT})")
    ap.add_argument("--namespace", default=None, help="namespace of the accounts (jwt: default; tokenrequest: bench)")
    ap.add_argument("--service-account", default=None,
                    help="account name, or prefix with --service-accounts > 1 (jwt: default; tokenrequest: bench)")
    ap.add_argument("--service-accounts", type=int, default=1, help="spread the tokens over this many accounts")
    ap.add_argument("--audience", default="istio-ca", help="token audience")
    ap.add_argument("--ttl", type=int, default=3600,
                    help="lifetime of token 0 in seconds; token i lives this plus i (distinct exp)")
    ap.add_argument("--jobs", type=int, default=2, help="tokens minted at once")
    ap.add_argument("--signetctl", help="jwt: the signetctl binary")
    ap.add_argument("--config", help="jwt: the signet.conf of `signetctl init` (its development issuer)")
    ap.add_argument("--key", help="rs256: the issuer's RSA-2048 private key (PEM; made, mode 0600, when missing)")
    ap.add_argument("--issuer", help="rs256: the tokens' iss (signetd's jwt-issuer)")
    ap.add_argument("--jwks-out", help="rs256: write the issuer's JWKS (public key) here, for --jwt-jwks-file")
    args = ap.parse_args()
    if not 1 <= args.count <= MAX_COUNT:
        ap.error(f"--count must be 1 to {MAX_COUNT}")
    if not 1 <= args.service_accounts <= min(args.count, 4096):
        ap.error("--service-accounts must be 1 to min(--count, 4096)")
    if args.mode == "tokenrequest" and args.ttl < 600:
        ap.error("tokenrequest: --ttl must be at least 600 (the API server's minimum)")
    if not 1 <= args.jobs <= 64:
        ap.error("--jobs must be 1 to 64")
    if args.mode == "jwt" and not (args.signetctl and args.config):
        ap.error("jwt needs --signetctl and --config")
    if args.mode == "rs256" and not (args.key and args.issuer):
        ap.error("rs256 needs --key and --issuer")
    if args.mode == "jwt" and not (60 <= args.ttl and args.ttl + args.count - 1 <= 48 * 3600):
        ap.error("jwt: --ttl + --count must stay within signetctl token's 60 s .. 48 h")
    default = "bench" if args.mode == "tokenrequest" else "default"
    args.namespace = args.namespace or default
    args.service_account = args.service_account or default
    os.makedirs(args.out, mode=0o700, exist_ok=True)
    if os.listdir(args.out):
        sys.exit(f"tokenpool.py: {args.out} is not empty")
    if args.mode == "jwt":
        items, work = jwt_runs(args), lambda r: mint_jwt(args, *r)  # noqa: E731
    elif args.mode == "rs256":
        key, kid = rs256_issuer(args)
        items, work = range(args.count), lambda i: mint_rs256(args, key, kid, i)  # noqa: E731
    else:
        k = prepare_tokenrequest(args)
        items, work = range(args.count), lambda i: mint_tokenrequest(args, k, i)  # noqa: E731
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as ex:
        for _ in ex.map(work, items):
            pass
    print(json.dumps({"out": args.out, "mode": args.mode, "count": args.count, "namespace": args.namespace,
                      "service_accounts": args.service_accounts}))


if __name__ == "__main__":
    main()
