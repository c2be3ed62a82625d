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
/usr/bin/python3 "$top/tests/kube/kube_rest.py" apply-crds "$top/tests/controllers/fixtures/certificaterequests.crd.yaml" "$top/packaging/kubernetes/base/policy-crds.yaml"

echo "# $(date -u +%FT%TZ) $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), count=$count, load $(cut -d' ' -f1-3 /proc/loadavg)"
# shellcheck disable=SC2086
"$build/perf/approverbench" --kubeconfig "$KUBECONFIG" --count "$count" ${APPROVERBENCH_FLAGS:-}
echo "# done $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
