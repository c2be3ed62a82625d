#!/usr/bin/env bash
# SoftHSM2 (Debian package softhsm2): a software PKCS#11 token kept in plain
# files. No daemon: the module reads a config file named by SOFTHSM2_CONF,
# whose directories.tokendir holds one sub-folder per token.
#
# Quirks: the object store is re-read from disk (open/read/fcntl lock) on
# every C_SignInit and signing is serialised per token; copying the key into a
# session object (C_CopyObject with CKA_TOKEN=FALSE) removes that cost. Only
# the file backend is built in Debian. Generates P-256/P-384 and RSA keys.
#
# signet configuration for a user with SoftHSM2:
#   hsm-module = /usr/lib/<multiarch>/softhsm/libsofthsm2.so
#   environment: SOFTHSM2_CONF=<path of a softhsm2.conf> (else the system
#   /etc/softhsm/softhsm2.conf and its tokendir are used)
#
# This script: `up DIR` writes DIR/softhsm2.conf, a token in DIR/tokens
# (label "signet-softhsm" by default, user PIN 123456, SO PIN 12345678),
# DIR/pin, DIR/env, DIR/module.json. No backend to restart (exit 3).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$HERE/common.sh"

module_up() {
	hsm_need softhsm2-util
	: "${HSM_LABEL:=signet-softhsm}" "${HSM_PIN:=123456}" "${HSM_SOPIN:=12345678}"
	local ma module conf="$HSM_DIR/softhsm2.conf"
	ma=$(hsm_multiarch)
	module=/usr/lib/$ma/softhsm/libsofthsm2.so
	[ -e "$module" ] || hsm_die "$module not found (apt install softhsm2)"
	mkdir -p "$HSM_DIR/tokens"
	cat >"$conf" <<CONF
# written by $HSM_SCRIPT
directories.tokendir = $HSM_DIR/tokens
objectstore.backend = file
log.level = ERROR
slots.removable = false
CONF
	export SOFTHSM2_CONF=$conf
	softhsm2-util --init-token --free --label "$HSM_LABEL" --so-pin "$HSM_SOPIN" --pin "$HSM_PIN" \
		>"$HSM_DIR/init-token.log" 2>&1 ||
		{ cat "$HSM_DIR/init-token.log" >&2; hsm_die "softhsm2-util --init-token failed"; }
	softhsm2-util --show-slots 2>/dev/null | grep -qF "Label:            $HSM_LABEL" ||
		hsm_die "token '$HSM_LABEL' not visible after init (see softhsm2-util --show-slots)"
	hsm_write_pin
	hsm_write_env "SOFTHSM2_CONF=$conf"
	hsm_write_json "$module" "$HSM_LABEL" "" "$HSM_SOPIN" \
		"SoftHSM2 file token under DIR/tokens; no daemon; needs SOFTHSM2_CONF" \
		ecdsa-p256 ecdsa-p384 rsa-2048 rsa-3072 rsa-4096
}

module_down() { return 0; }

module_restart() {
	hsm_log "no separate backend: SoftHSM2 runs inside the client process"
	exit 3
}

hsm_main "$@"
