#!/usr/bin/python3
"""The API server's own TokenReview rate, from a plain client: the yardstick
perf/tokenreview.sh prints signetd's TokenReview-mode rate against (issue 33:
signetd should reach most of what the API server offers).

  perf/apireviews.py --pool DIR [--threads 16] [--audience istio-ca]
                     (apiserver.sh env in the environment: `. APIDIR/env`)

Each of --threads threads keeps one HTTPS connection to the API server
(keep-alive, as signetd's client does) and posts TokenReviews (audience
--audience) of the pool's tokens (perf/tokenpool.py's directory, one token
per file, 0600), each token once, until the pool is used up. Every answer
is checked (201 and authenticated true). Prints one JSON line: ok, failed,
elapsed_s, reviews_per_s (ok per second of wall time). Exit status 0 only
when every review was accepted.

Distinct tokens on purpose: the API server caches successful token
authentications for a few seconds, so a repeated token would measure its
cache. Like tokenpool.py, it takes KUBE_APISERVER, KUBE_TOKEN_FILE (the
admin token, read from its file, never argv) and KUBE_CA_FILE from the
environment and refuses an API server that is not on loopback. Bounded:
one request per token, each with a 30 s timeout.
"""
import argparse
import http.client
import ipaddress
import json
import os
import ssl
import sys
import threading
import time
import urllib.parse


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pool", required=True, help="token pool directory (perf/tokenpool.py)")
    ap.add_argument("--threads", type=int, default=16, help="client threads, a connection each (1 to 256)")
    ap.add_argument("--audience", default="istio-ca", help="the audience each review asks for")
    args = ap.parse_args()
    if not 1 <= args.threads <= 256:
        sys.exit("apireviews.py: --threads must be 1 to 256")
    url = urllib.parse.urlsplit(os.environ["KUBE_APISERVER"])
    host = url.hostname or ""
    if host != "localhost" and not ipaddress.ip_address(host).is_loopback:
        sys.exit(f"apireviews.py: {host} is not loopback")
    toks = []
    for name in sorted(os.listdir(args.pool)):
        if not name.startswith("."):
            with open(os.path.join(args.pool, name)) as f:
                toks.append(f.read().strip())
    with open(os.environ["KUBE_TOKEN_FILE"]) as f:
        admin = f.read().strip()
    ctx = ssl.create_default_context(cafile=os.environ["KUBE_CA_FILE"])
    lock = threading.Lock()
    state = {"next": 0, "ok": 0, "failed": 0}

    def work():
        c = http.client.HTTPSConnection(host, url.port, context=ctx, timeout=30)
        try:
            while True:
                with lock:
                    i = state["next"]
                    state["next"] += 1
                if i >= len(toks):
                    return
                body = json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                   "spec": {"token": toks[i], "audiences": [args.audience]}})
                good = False
                try:
                    c.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", body,
                              {"Authorization": "Bearer " + admin, "Content-Type": "application/json"})
                    r = c.getresponse()
                    doc = json.loads(r.read() or b"{}")
                    good = r.status == 201 and doc.get("status", {}).get("authenticated") is True
                except (OSError, http.client.HTTPException, ValueError):
                    c.close()  # reconnects on the next request
                with lock:
                    state["ok" if good else "failed"] += 1
        finally:
            c.close()

    t0 = time.monotonic()
    ts = [threading.Thread(target=work) for _ in range(args.threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    el = time.monotonic() - t0
    print(json.dumps({"ok": state["ok"], "failed": state["failed"], "elapsed_s": el,
                      "reviews_per_s": state["ok"] / el if el > 0 else 0.0}))
    return 1 if state["failed"] or not toks else 0


if __name__ == "__main__":
    sys.exit(main())
