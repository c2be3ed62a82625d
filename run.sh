#!/usr/bin/env bash
# Installs what is missing, builds signet, and runs the appliance on the
# embedded default: a SoftHSM2 token, a self-signed root and a development
# token issuer created on first run under ./state (SIGNET_STATE to choose
# another folder), the token's SO PIN beside it in ./state.so-pin (signetd
# never reads it); nothing else is touched. signetd then serves the
# Istio CA API on 127.0.0.1:6443 (metrics on :9402, probes on :6060); this
# script shows a certificate being requested the way istio-agent does it,
# and keeps signetd in the foreground until Ctrl-C (graceful shutdown).
# SIGNET_RUN_ONCE=1 stops after the demonstration.
set -euo pipefail
cd "$(dirname "$0")"
packaging/deps.sh run

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSIGNET_BUILD_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
ctl=build/ctl/signetctl
state=${SIGNET_STATE:-state}
conf=$state/signet.conf
if [ ! -f "$conf" ]; then
  "$ctl" init --dir "$state"
fi
"$ctl" status --config "$conf"

# Standalone: a KUBECONFIG in the caller's environment would make signetd
# authenticate through that cluster instead of the development issuer.
env -u KUBECONFIG -u KUBERNETES_SERVICE_HOST \
  build/daemon/signetd --config "$conf" --serving-address 127.0.0.1:6443 --http-address 127.0.0.1 &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null; wait $daemon' EXIT INT TERM
for _ in $(seq 100); do
  curl -fsS http://127.0.0.1:6060/readyz >/dev/null 2>&1 && break
  kill -0 $daemon 2>/dev/null || { echo "signetd did not start" >&2; exit 1; }
  sleep 0.1
done

tmp=$(mktemp -d)
trap 'kill -TERM $daemon 2>/dev/null; wait $daemon; rm -rf "$tmp"' EXIT INT TERM
id=spiffe://cluster.local/ns/default/sa/default
echo "== a workload key and CSR like istio-agent's (empty subject, critical URI SAN $id)"
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$tmp/key.pem" \
  -subj / -addext "subjectAltName=critical,URI:$id" -out "$tmp/csr.pem" 2>/dev/null
echo "== a service-account token from the development issuer"
"$ctl" token --config "$conf" --namespace default --service-account default >"$tmp/token"
echo "== CreateCertificate over TLS"
"$ctl" request --config "$conf" --addr 127.0.0.1:6443 --token-file "$tmp/token" --csr "$tmp/csr.pem" \
  --out "$tmp/chain.pem"
cat "$tmp/chain.pem"
openssl x509 -in "$tmp/chain.pem" -noout -subject -ext subjectAltName -dates
openssl verify -CAfile "$state/root-cert.pem" "$tmp/chain.pem"
echo "== metrics"
curl -fsS http://127.0.0.1:9402/metrics | grep -E '^citadel_server_(csr_count|success_cert_issuance_count) '

[ "${SIGNET_RUN_ONCE:-}" = 1 ] && exit 0
echo "signetd is serving on 127.0.0.1:6443 (config $conf); Ctrl-C stops it."
wait $daemon
