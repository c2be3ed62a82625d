#!/usr/bin/env bash
# p11-kit remoting (Debian package p11-kit; SoftHSM2 from softhsm2 as the
# real token): the client loads p11-kit-client.so, which forwards every
# PKCS#11 call over a unix socket to `p11-kit server`, which runs the real
# module (here SoftHSM2) through a per-connection `p11-kit-remote` child.
# The same set-up reaches a token on another host or in another container.
#
# Quirks: one RPC round trip per call (slower); slot ids and object handles
# are remapped by the client; the server exports only the tokens matching
# its pkcs11: URI. If the server (or its p11-kit-remote child) dies, every
# open session breaks and p11-kit-client reconnects only in C_Initialize:
# the client must C_Finalize + C_Initialize to recover.
#
# signet configuration for a user with a p11-kit server:
#   hsm-module = /usr/lib/<multiarch>/pkcs11/p11-kit-client.so
#   environment: P11_KIT_SERVER_ADDRESS=unix:path=<socket of p11-kit server>
#   (the server side needs whatever its module needs, e.g. SOFTHSM2_CONF)
#
# This script: `up DIR` makes a SoftHSM2 token with softhsm2.sh in
# DIR/softhsm (label "signet-p11kit" by default, user PIN 123456, SO PIN
# 12345678), then runs
#   p11-kit server -f -n DIR/p11kit.sock --provider <libsofthsm2.so> pkcs11:token=<label>
# in the background (SOFTHSM2_CONF set for it only). `restart-backend DIR`
# kills the server and its p11-kit-remote children and starts it again on
# the same socket.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$HERE/common.sh"

client_module() { printf '/usr/lib/%s/pkcs11/p11-kit-client.so\n' "$(hsm_multiarch)"; }

start_server() {
	local sock=$HSM_DIR/p11kit.sock provider uri conf
	provider=$(cat "$HSM_DIR/provider")
	uri=$(cat "$HSM_DIR/uri")
	conf=$HSM_DIR/softhsm/softhsm2.conf
	rm -f "$sock"
	hsm_start p11kit-server env SOFTHSM2_CONF="$conf" \
		p11-kit server -f -n "$sock" --provider "$provider" "$uri"
	HSM_WAIT_PIDNAME=p11kit-server hsm_wait_until "p11-kit server socket $sock" test -S "$sock"
	# one real round trip: the token must be listed through the client
	HSM_WAIT_PIDNAME=p11kit-server hsm_wait_until "token '$(cat "$HSM_DIR/label")' through p11-kit-client" \
		check_client
	hsm_record_comm p11kit-server
}

check_client() {
	P11_KIT_SERVER_ADDRESS=unix:path=$HSM_DIR/p11kit.sock timeout 10 \
		pkcs11-tool --module "$(client_module)" -L 2>/dev/null |
		grep -qF "token label        : $(cat "$HSM_DIR/label")"
}

module_up() {
	hsm_need p11-kit pkcs11-tool softhsm2-util
	: "${HSM_LABEL:=signet-p11kit}" "${HSM_PIN:=123456}" "${HSM_SOPIN:=12345678}"
	local module sock=$HSM_DIR/p11kit.sock
	module=$(client_module)
	[ -e "$module" ] || hsm_die "$module not found (apt install p11-kit)"
	hsm_check_sock_path "$sock"
	"$HERE/softhsm2.sh" up "$HSM_DIR/softhsm" --label "$HSM_LABEL" --pin "$HSM_PIN" --so-pin "$HSM_SOPIN" ||
		hsm_die "SoftHSM2 token set-up failed"
	python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["module"])' \
		"$HSM_DIR/softhsm/module.json" >"$HSM_DIR/provider"
	printf 'pkcs11:token=%s\n' "$(hsm_uri_encode "$HSM_LABEL")" >"$HSM_DIR/uri"
	printf '%s\n' "$HSM_LABEL" >"$HSM_DIR/label"
	start_server
	hsm_write_pin
	hsm_write_env "P11_KIT_SERVER_ADDRESS=unix:path=$sock"
	hsm_write_json "$module" "$HSM_LABEL" "" "$HSM_SOPIN" \
		"p11-kit-client -> p11-kit server (DIR/p11kit.sock) -> SoftHSM2 in DIR/softhsm; reconnects only in C_Initialize" \
		ecdsa-p256 ecdsa-p384 rsa-2048 rsa-3072 rsa-4096
}

# kill the server's process group (it and its p11-kit-remote children, which
# inherit it) and any child that left it, by pid.
stop_server() {
	local pid kids=""
	pid=$(hsm_pid p11kit-server)
	[ -z "$pid" ] || kids=$(pgrep -P "$pid" 2>/dev/null || true)
	hsm_stop p11kit-server --group
	local k
	for k in $kids; do
		if hsm_alive "$k"; then kill -TERM "$k" 2>/dev/null || true; hsm_wait_exit "$k" 5 || kill -KILL "$k" 2>/dev/null || true; fi
	done
	rm -f "$HSM_DIR/p11kit.sock"
}

module_down() {
	stop_server
	[ ! -d "$HSM_DIR/softhsm" ] || "$HERE/softhsm2.sh" down "$HSM_DIR/softhsm"
}

module_restart() {
	[ -f "$HSM_DIR/provider" ] || hsm_die "$HSM_DIR was not set up by '$HSM_SCRIPT up'"
	stop_server
	start_server
	hsm_log "p11-kit server restarted (pid $(hsm_pid p11kit-server)) on $HSM_DIR/p11kit.sock"
}

hsm_main "$@"
