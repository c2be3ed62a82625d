#!/usr/bin/env bash
# Runs kubebench (perf/kubebench.c) against a private kube-apiserver: the
# cert-manager issuer (cr), the Kubernetes CSR signer (csr) and RA mode
# (ra), each clearing a burst of COUNT requests, first with signetd's
# default client rate limit (80 QPS, burst 160), then without one.
#
#   perf/kubebench.sh [BUILD_DIR] [COUNT]     (defaults: build-perf, 1000)
#
# BUILD_DIR must be a build with -DSIGNET_BUILD_PERF=ON. The API server,
# the CA (signetctl init) and everything else live in a temporary folder
# that is removed at the end. Results: one "kubebench ..." line per run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
build=${1:-$top/build-perf}
count=${2:-1000}
[ -x "$build/perf/kubebench" ] || { echo "kubebench.sh: no $build/perf/kubebench (build with -DSIGNET_BUILD_PERF=ON)" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kubebench.XXXXXX")
cleanup() { "$top/tests/kube/apiserver.sh" stop "$tmp/api" >/dev/null 2>&1 || true; rm -rf "$tmp"; }
trap cleanup EXIT
mkdir "$tmp/api"
"$top/tests/kube/apiserver.sh" start "$tmp/api" >/dev/null 2>&1
# shellcheck disable=SC1091
set -a; . "$tmp/api/env"; set +a
"$build/ctl/signetctl" init --dir "$tmp/ca" --log-level warn >/dev/null

# The CRDs: signet's issuer kinds and cert-manager's CertificateRequest.
/usr/bin/python3 "$top/tests/kube/kube_rest.py" apply-crds "$top/packaging/kubernetes/base/crds.yaml" "$top/tests/controllers/fixtures/certificaterequests.crd.yaml"

echo "# $(date -u +%FT%TZ) $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), count=$count"
for limit in "--qps 80 --burst 160" "--qps 0"; do
  for mode in cr csr ra; do
    # shellcheck disable=SC2086
    "$build/perf/kubebench" --kubeconfig "$KUBECONFIG" --config "$tmp/ca/signet.conf" --mode "$mode" \
      --count "$count" $limit --log-level error
  done
done
