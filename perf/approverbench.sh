#!/usr/bin/env bash
# Runs approverbench (perf/approverbench.c) against a private
# kube-apiserver: signet's CertificateRequest policy approver deciding a
# burst of COUNT CertificateRequests under 10 CertificateRequestPolicies,
# (A) with signet's defaults (4 workers, SubjectAccessReview answers reused
# for 10 s) and (B) as approver-policy runs (one worker, no review cache),
# both on a client without a rate limit (as approver-policy's).
#
#   perf/approverbench.sh [BUILD_DIR] [COUNT]     (defaults: build-perf, 1000)
#
# BUILD_DIR must be a build with -DSIGNET_BUILD_PERF=ON. The API server and
# everything else live in a temporary folder that is removed at the end.
# Extra approverbench flags may follow in APPROVERBENCH_FLAGS (e.g.
# "--rounds 2"). Results: one "approverbench config=..." line per
# configuration and round.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
build=${1:-$top/build-perf}
count=${2:-1000}
[ -x "$build/perf/approverbench" ] || { echo "approverbench.sh: no $build/perf/approverbench (build with -DSIGNET_BUILD_PERF=ON)" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/approverbench.XXXXXX")
cleanup() { "$top/tests/kube/apiserver.sh" stop "$tmp/api" >/dev/null 2>&1 || true; rm -rf "$tmp"; }
trap cleanup EXIT
mkdir "$tmp/api"
"$top/tests/kube/apiserver.sh" start "$tmp/api" >/dev/null 2>&1
set -a
# shellcheck disable=SC1091
. "$tmp/api/env"
set +a

# The CRDs: cert-manager's CertificateRequest and the
# CertificateRequestPolicy signet ships.
apply() {
  /usr/bin/python3 - "$1" <<'PY'
import json, os, ssl, sys, time, urllib.error, urllib.request, yaml
server = os.environ["KUBE_APISERVER"]
token = open(os.environ["KUBE_TOKEN_FILE"]).read().strip()
ctx = ssl.create_default_context(cafile=os.environ["KUBE_CA_FILE"])
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if not doc or doc.get("kind") != "CustomResourceDefinition":
        continue
    r = urllib.request.Request(server + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                               data=json.dumps(doc).encode(), method="POST",
                               headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    try:
        urllib.request.urlopen(r, context=ctx, timeout=30).read()
    except urllib.error.HTTPError as e:
        if e.code != 409:
            raise
    # wait until the new resource is served
    g, v, plural = doc["spec"]["group"], doc["spec"]["versions"][0]["name"], doc["spec"]["names"]["plural"]
    for _ in range(300):
        try:
            urllib.request.urlopen(urllib.request.Request(f"{server}/apis/{g}/{v}/{plural}",
                                   headers={"Authorization": "Bearer " + token}), context=ctx, timeout=30).read()
            break
        except urllib.error.HTTPError:
            time.sleep(0.1)
PY
}
apply "$top/tests/controllers/fixtures/certificaterequests.crd.yaml"
apply "$top/packaging/kubernetes/policy-crds.yaml"

echo "# $(date -u +%FT%TZ) $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), count=$count, load $(cut -d' ' -f1-3 /proc/loadavg)"
# shellcheck disable=SC2086
"$build/perf/approverbench" --kubeconfig "$KUBECONFIG" --count "$count" ${APPROVERBENCH_FLAGS:-}
echo "# done $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
