#!/usr/bin/env bash
# Smoke test of the test Kubernetes API server (apiserver.sh): starts it in a
# temporary folder and checks, with curl against the real API, everything
# signet's Kubernetes tests rely on: namespaces and service accounts,
# TokenRequest and TokenReview for the istio-ca audience, the OIDC discovery
# document and JWKS (and that the JWKS verifies the issued token), CRDs with
# the status subresource, server-side apply, Leases with optimistic
# concurrency, watches with bookmarks, a watch cut by an apiserver restart,
# and data surviving that restart. Stops everything at the end.
#
# Exit 0 if all checks pass; the last line is "N passed, N failed".
# The folder is removed on success and kept (with the logs) on failure.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
tmp_root=${SIGNET_TEST_TMP:-${TMPDIR:-/tmp}}
mkdir -p "$tmp_root"
dir=$(mktemp -d "$tmp_root/kube-smoke.XXXXXX")
passed=0 failed=0
watch_pids=()

finish() {
  local pid
  for pid in "${watch_pids[@]}"; do kill "$pid" 2>/dev/null; done
  "$here/apiserver.sh" stop "$dir" || true
  if [ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]; then
    rm -rf "$dir"
  else
    echo "kept $dir (apiserver.log, etcd.log)"
  fi
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
}

ok() { passed=$((passed + 1)); echo "ok   - $1"; }
fail() {
  failed=$((failed + 1))
  echo "FAIL - $1"
  [ -s "$dir/out" ] && head -c 1500 "$dir/out" && echo
}
# `CONDITION; verdict NAME`: pass if CONDITION (a command list) succeeded.
verdict() {
  local rc=$?
  if [ $rc -eq 0 ]; then ok "$1"; else fail "$1"; fi
}

if ! "$here/apiserver.sh" start "$dir"; then
  failed=1
  finish
  exit 1
fi
# shellcheck disable=SC1091
. "$dir/env"
admin=$(cat "$KUBE_TOKEN_FILE")
user=$(cat "$KUBE_USER_TOKEN_FILE")

# req METHOD PATH [BODY [CONTENT-TYPE [TOKEN]]]: body to $dir/out, status in $code.
req() {
  local method=$1 path=$2 body=${3:-} ctype=${4:-application/json} tok=${5-$admin}
  local args=(-s --max-time 20 --cacert "$KUBE_CA_FILE" -X "$method" -o "$dir/out" -w '%{http_code}')
  [ -n "$tok" ] && args+=(-H "Authorization: Bearer $tok")
  [ -n "$body" ] && args+=(-H "Content-Type: $ctype" --data-binary "$body")
  code=$(curl "${args[@]}" "$KUBE_APISERVER$path") || code=000
}
# js EXPR: evaluate a Python expression over the JSON in $dir/out (as `o`).
js() {
  /usr/bin/python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$dir/out" "$1" 2>/dev/null
}
is() { [ "$code" = "$1" ]; }
is_js() { [ "$(js "$1")" = "$2" ]; }

ns=smoke sa=workload

# --- readiness and identity ---------------------------------------------------
req GET /version "" "" ""
is 200 && [ -n "$(js 'o["gitVersion"]')" ]; verdict "anonymous /version (RBAC public info)"
echo "     server $(js 'o["gitVersion"]') $(js 'o["goVersion"]')"
req GET /api/v1/namespaces "" "" ""
is 403; verdict "anonymous list of namespaces is forbidden"
req GET /api/v1/namespaces "" "" "$user"
is 403; verdict "unprivileged token authenticates, RBAC forbids"

# --- namespace, service account, TokenRequest -----------------------------------
req POST /api/v1/namespaces '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"'$ns'"}}'
is 201; verdict "create namespace"
req POST /api/v1/namespaces/$ns/serviceaccounts '{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"'$sa'"}}'
is 201; verdict "create service account"
sa_uid=$(js 'o["metadata"]["uid"]')

req POST /api/v1/namespaces/$ns/serviceaccounts/$sa/token \
  '{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"audiences":["istio-ca"],"expirationSeconds":3600}}'
token=$(js 'o["status"]["token"]')
is 201 && [ "${#token}" -gt 100 ]; verdict "TokenRequest (audience istio-ca) returns a token"

claims=$(/usr/bin/python3 - "$token" <<'EOF'
import base64, json, sys
p = sys.argv[1].split(".")[1]
c = json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4)))
print(c["iss"], ",".join(c["aud"]), c["sub"], c["kubernetes.io"]["serviceaccount"]["uid"], c["exp"] - c["iat"])
EOF
) || claims=''
want="$KUBE_SA_ISSUER istio-ca system:serviceaccount:$ns:$sa $sa_uid 3600"
[ "$claims" = "$want" ]; verdict "token claims: iss, aud [istio-ca], sub, SA uid, 1 h"
[ "$claims" = "$want" ] || echo "     claims: $claims"

req POST /api/v1/namespaces/$ns/serviceaccounts/nosuch/token \
  '{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"audiences":["istio-ca"]}}'
is 404; verdict "TokenRequest for a missing service account is 404"

# --- TokenReview ---------------------------------------------------------------
review() { # review TOKEN AUDIENCE [CALLER-TOKEN]
  req POST /apis/authentication.k8s.io/v1/tokenreviews \
    '{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"'"$1"'","audiences":["'"$2"'"]}}' \
    application/json "${3-$admin}"
}
review "$token" istio-ca
is 201 && is_js 'o["status"]["authenticated"]' True &&
  is_js 'o["status"]["user"]["username"]' "system:serviceaccount:$ns:$sa" &&
  is_js 'o["status"]["user"]["uid"]' "$sa_uid" &&
  is_js '{"system:serviceaccounts", "system:serviceaccounts:'$ns'", "system:authenticated"} <= set(o["status"]["user"]["groups"])' True &&
  is_js 'o["status"]["audiences"] == ["istio-ca"]' True
verdict "TokenReview [istio-ca]: the service account, its groups and audience"
review "$token" some-other-audience
is 201 && is_js 'o["status"].get("authenticated", False)' False; verdict "TokenReview with another audience: not authenticated"
review "${token%??????????}AAAAAAAAAA" istio-ca
is 201 && is_js 'o["status"].get("authenticated", False)' False; verdict "TokenReview of a tampered token: not authenticated"
review "$token" istio-ca "$user"
is 403; verdict "TokenReview needs RBAC (unprivileged caller gets 403)"

# --- OIDC discovery and JWKS ----------------------------------------------------
req GET /.well-known/openid-configuration
is 200 && is_js 'o["issuer"]' "$KUBE_SA_ISSUER" && is_js 'o["jwks_uri"]' "$KUBE_APISERVER/openid/v1/jwks"
verdict "/.well-known/openid-configuration (admin)"
req GET /.well-known/openid-configuration "" "" "$token"
is 200; verdict "/.well-known/openid-configuration (service-account token: issuer-discovery role)"
req GET /openid/v1/jwks
cp "$dir/out" "$dir/jwks.json"
is 200 && [ "$(js 'len(o["keys"])')" -ge 1 ]; verdict "/openid/v1/jwks serves the signing key"
if /usr/bin/python3 -c 'import cryptography' 2>/dev/null; then
  /usr/bin/python3 - "$dir/jwks.json" "$token" <<'EOF'
import base64, json, sys
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa, utils
b64 = lambda s: base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
num = lambda s: int.from_bytes(b64(s), "big")
h, p, s = sys.argv[2].split(".")
hdr = json.loads(b64(h))
key = next(k for k in json.load(open(sys.argv[1]))["keys"] if k["kid"] == hdr["kid"])
data, sig = (h + "." + p).encode(), b64(s)
if hdr["alg"] == "RS256":
    rsa.RSAPublicNumbers(num(key["e"]), num(key["n"])).public_key().verify(sig, data, padding.PKCS1v15(), hashes.SHA256())
elif hdr["alg"] == "ES256":
    pub = ec.EllipticCurvePublicNumbers(num(key["x"]), num(key["y"]), ec.SECP256R1()).public_key()
    r, s_ = int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big")
    pub.verify(utils.encode_dss_signature(r, s_), data, ec.ECDSA(hashes.SHA256()))
else:
    sys.exit("unexpected alg " + hdr["alg"])
EOF
  verdict "the JWKS verifies the TokenRequest token's signature"
fi

# --- CRD with the status subresource -------------------------------------------
crd='{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"widgets.smoke.signet.test"},
 "spec":{"group":"smoke.signet.test","scope":"Namespaced",
  "names":{"plural":"widgets","singular":"widget","kind":"Widget"},
  "versions":[{"name":"v1","served":true,"storage":true,"subresources":{"status":{}},
   "schema":{"openAPIV3Schema":{"type":"object","properties":{
    "spec":{"type":"object","properties":{"size":{"type":"integer"}}},
    "status":{"type":"object","properties":{"phase":{"type":"string"}}}}}}}]}}'
req POST /apis/apiextensions.k8s.io/v1/customresourcedefinitions "$crd"
is 201; verdict "create CRD widgets.smoke.signet.test"
established=no
for _ in $(seq 1 600); do # polled for up to a minute: a loaded machine is slower
  req GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.smoke.signet.test
  if is_js 'any(c["type"] == "Established" and c["status"] == "True" for c in (o.get("status") or {}).get("conditions") or [])' True; then
    established=yes
    break
  fi
  sleep 0.1
done
[ $established = yes ]; verdict "CRD becomes Established"
wpath=/apis/smoke.signet.test/v1/namespaces/$ns/widgets
for _ in $(seq 1 600); do # serving the new group can lag Established a little
  req POST $wpath '{"apiVersion":"smoke.signet.test/v1","kind":"Widget","metadata":{"name":"w1"},"spec":{"size":1},"status":{"phase":"Ignored"}}'
  is 404 || break
  sleep 0.1
done
is 201 && is_js 'o.get("status")' None; verdict "create a Widget (status in a create is dropped)"
req PATCH $wpath/w1/status '{"status":{"phase":"Ready"}}' application/merge-patch+json
is 200 && is_js 'o["status"]["phase"]' Ready && is_js 'o["spec"]["size"]' 1; verdict "PATCH .../status sets status"
rv=$(js 'o["metadata"]["resourceVersion"]')
req PUT $wpath/w1 '{"apiVersion":"smoke.signet.test/v1","kind":"Widget","metadata":{"name":"w1","resourceVersion":"'"$rv"'"},"spec":{"size":2},"status":{"phase":"Changed"}}'
is 200 && is_js 'o["status"]["phase"]' Ready && is_js 'o["spec"]["size"]' 2; verdict "PUT on the object changes spec, not status"
req PUT $wpath/w1/status '{"apiVersion":"smoke.signet.test/v1","kind":"Widget","metadata":{"name":"w1","resourceVersion":"'"$rv"'"},"status":{"phase":"Stale"}}'
is 409; verdict "PUT .../status with a stale resourceVersion conflicts (409)"

# --- server-side apply ----------------------------------------------------------
cm=$'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  namespace: '$ns$'\ndata:\n  root-cert.pem: one\n'
apply() { req PATCH "/api/v1/namespaces/$ns/configmaps/ssa?fieldManager=$1" "${cm/one/$2}" application/apply-patch+yaml; }
apply signet-smoke one
is 201 && is_js 'o["data"]["root-cert.pem"]' one &&
  is_js '[(m["manager"], m["operation"]) for m in o["metadata"]["managedFields"]] == [("signet-smoke", "Apply")]' True
verdict "server-side apply creates a ConfigMap (managedFields: signet-smoke, Apply)"
apply signet-smoke two
is 200 && is_js 'o["data"]["root-cert.pem"]' two; verdict "server-side apply updates it"
apply someone-else three
is 409; verdict "apply of the same field by another manager conflicts (409)"
apply "someone-else&force=true" three
is 200 && is_js 'o["data"]["root-cert.pem"]' three; verdict "force apply takes the field over"

# --- Lease ----------------------------------------------------------------------
lpath=/apis/coordination.k8s.io/v1/namespaces/$ns/leases
now() { date -u +%Y-%m-%dT%H:%M:%S.000000Z; }
req POST $lpath '{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"signet-leader"},"spec":{"holderIdentity":"a","leaseDurationSeconds":15,"acquireTime":"'"$(now)"'","renewTime":"'"$(now)"'","leaseTransitions":0}}'
is 201 && is_js 'o["spec"]["holderIdentity"]' a; verdict "create a Lease"
rv=$(js 'o["metadata"]["resourceVersion"]')
lease() { echo '{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"signet-leader","resourceVersion":"'"$1"'"},"spec":{"holderIdentity":"'"$2"'","leaseDurationSeconds":15,"renewTime":"'"$(now)"'","leaseTransitions":'"$3"'}}'; }
req PUT $lpath/signet-leader "$(lease "$rv" b 1)"
is 200 && is_js 'o["spec"]["holderIdentity"]' b && is_js 'o["spec"]["leaseTransitions"]' 1; verdict "update the Lease with its resourceVersion"
req PUT $lpath/signet-leader "$(lease "$rv" c 2)"
is 409; verdict "update with a stale resourceVersion conflicts (409)"

# --- watch ------------------------------------------------------------------------
req GET /api/v1/namespaces/$ns/configmaps
list_rv=$(js 'o["metadata"]["resourceVersion"]')
# From the list's resourceVersion: the watch is sent what follows it however
# late it connects. It ends once the DELETED event is in whole (at most 60 s).
curl -sN --max-time 60 --cacert "$KUBE_CA_FILE" -H "Authorization: Bearer $admin" \
  "$KUBE_APISERVER/api/v1/namespaces/$ns/configmaps?watch=1&allowWatchBookmarks=true&resourceVersion=$list_rv" \
  >"$dir/watch" 2>/dev/null &
watch_pids+=($!)
req POST /api/v1/namespaces/$ns/configmaps '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"watched"},"data":{"k":"v"}}'
created=$code
req DELETE /api/v1/namespaces/$ns/configmaps/watched
while kill -0 "${watch_pids[-1]}" 2>/dev/null; do
  grep -q '"type":"DELETED"' "$dir/watch" 2>/dev/null && [ -z "$(tail -c 1 "$dir/watch")" ] && break
  sleep 0.1
done
kill "${watch_pids[-1]}" 2>/dev/null
wait "${watch_pids[-1]}" 2>/dev/null
events=$(/usr/bin/python3 - "$dir/watch" <<'EOF'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(" ".join(e["type"] + ":" + e["object"]["metadata"].get("name", "") for e in ev if e["type"] != "BOOKMARK"))
EOF
) || events=''
[ "$created" = 201 ] && [ "$events" = "ADDED:watched DELETED:watched" ]; verdict "watch streams ADDED and DELETED events"
[ "$events" = "ADDED:watched DELETED:watched" ] || echo "     events: $events"

# --- restart mid-watch; data persists --------------------------------------------
curl -sN --max-time 120 --cacert "$KUBE_CA_FILE" -H "Authorization: Bearer $admin" \
  "$KUBE_APISERVER/api/v1/namespaces/$ns/configmaps?watch=1&allowWatchBookmarks=true" >"$dir/long-watch" 2>/dev/null &
long_watch=$!
watch_pids+=("$long_watch")
# Open at the server before the restart: it has sent the ADDED event of the
# ConfigMap that exists (ssa).
for _ in $(seq 1 600); do
  [ -s "$dir/long-watch" ] && break
  sleep 0.1
done
[ -s "$dir/long-watch" ]; verdict "a watch is open before the restart"
t0=$SECONDS
"$here/apiserver.sh" restart-apiserver "$dir"; verdict "restart-apiserver: ready again"
echo "     restarted in $((SECONDS - t0)) s"
ended=no
for _ in $(seq 1 300); do
  kill -0 "$long_watch" 2>/dev/null || { ended=yes; break; }
  sleep 0.1
done
[ $ended = yes ]; verdict "a watch open across the restart is ended by the server"
req GET /api/v1/namespaces/$ns/configmaps/ssa
is 200 && is_js 'o["data"]["root-cert.pem"]' three; verdict "data persists across the restart (ConfigMap)"
req GET $wpath/w1
is 200 && is_js 'o["status"]["phase"]' Ready; verdict "data persists across the restart (Widget status)"
req GET $lpath/signet-leader
is 200 && is_js 'o["spec"]["holderIdentity"]' b; verdict "data persists across the restart (Lease)"
review "$token" istio-ca
is 201 && is_js 'o["status"]["authenticated"]' True; verdict "a token issued before the restart still reviews"

# --- stop ---------------------------------------------------------------------------
# shellcheck disable=SC1091
. "$dir/pids"
"$here/apiserver.sh" stop "$dir"
# (by /proc/PID/cmdline: an exited daemon may stay a zombie if PID 1 does not reap)
gone() { [ -z "$(tr -d '\0' <"/proc/$1/cmdline" 2>/dev/null)" ]; }
gone "$ETCD_PID" && gone "$APISERVER_PID"; verdict "stop ends etcd and kube-apiserver"

finish
