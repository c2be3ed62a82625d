#!/usr/bin/env bash
# Installs what is missing, builds signet, and runs it on the embedded
# default: a SoftHSM2 token and a self-signed root created on first run under
# ./state (SIGNET_STATE to choose another folder); nothing outside it is
# touched. Then it issues an Istio workload certificate for a fresh CSR made
# the way istio-agent makes them, prints the chain and verifies it.
set -euo pipefail
cd "$(dirname "$0")"
packaging/deps.sh run

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
ctl=build/ctl/signetctl

state=${SIGNET_STATE:-state}
if [ ! -f "$state/signet.conf" ]; then
  "$ctl" init --dir "$state"
fi
"$ctl" status --config "$state/signet.conf"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
id=spiffe://cluster.local/ns/default/sa/default
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$tmp/key.pem" \
  -subj / -addext "subjectAltName=critical,URI:$id" -out "$tmp/csr.pem" 2>/dev/null
"$ctl" issue --config "$state/signet.conf" --csr "$tmp/csr.pem" --ttl 1h --out "$tmp/chain.pem"
cat "$tmp/chain.pem"
openssl x509 -in "$tmp/chain.pem" -noout -subject -ext subjectAltName -dates
openssl verify -CAfile "$state/root-cert.pem" "$tmp/chain.pem"
