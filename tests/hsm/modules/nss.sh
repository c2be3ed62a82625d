#!/usr/bin/env bash
# NSS softoken (Debian package libnss3; certutil from libnss3-tools): the
# software token inside Firefox/NSS, used here as a plain PKCS#11 module
# (libsoftokn3.so) over an NSS sql: database (cert9.db, key4.db) in a folder.
# No daemon.
#
# Quirks: the module cannot start without a C_Initialize pReserved string
# naming its database, e.g.
#   configdir='sql:/abs/db' certPrefix='' keyPrefix='' secmod='secmod.db' flags='' dbTokenDescription='LABEL'
# dbTokenDescription sets the key-database token's label (this script's
# default "signet nss" has a space, so pkcs11: URIs must percent-encode it:
# token=signet%20nss). Fixed slot ids (1 crypto-only, 2 key database). The
# user PIN is the database password (certutil -N); there is no SO PIN.
# RSA token keys are decrypted from the database on every C_Sign (slow:
# ~30/s), so copy the key to a session object with an explicit
# CKA_TOKEN=FALSE (C_CopyObject with an empty template returns the ORIGINAL
# handle). pkcs11-tool cannot pass the init string (p11-kit-proxy with
# x-init-reserved can). Default is extractable keys: set CKA_EXTRACTABLE=FALSE.
#
# signet configuration for a user with NSS:
#   hsm-module = /usr/lib/<multiarch>/libsoftokn3.so
#   hsm-init-reserved = configdir='sql:/abs/db' certPrefix='' keyPrefix='' secmod='secmod.db' flags='' dbTokenDescription='LABEL'
#   environment: none required.
#
# This script: `up DIR` creates the database in DIR/nssdb with the user PIN
# (default 123456), label "signet nss" by default. DIR/env sets
# NSS_MAX_MP_PBE_ITERATION_COUNT=1 (tests only: keys generated with it set
# are wrapped with 1 PBE iteration, which makes RSA signing from the token
# far faster and key encryption at rest weak). No backend to restart (exit 3).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$HERE/common.sh"

module_up() {
	hsm_need certutil
	: "${HSM_LABEL:=signet nss}" "${HSM_PIN:=123456}"
	[ -z "$HSM_SOPIN" ] || hsm_die "NSS has no SO PIN; drop --so-pin"
	case "$HSM_LABEL$HSM_DIR" in *"'"*) hsm_die "label and DIR must not contain a single quote (the NSS init string quotes them with ')" ;; esac
	local ma module db="$HSM_DIR/nssdb" pwfile init
	ma=$(hsm_multiarch)
	module=/usr/lib/$ma/libsoftokn3.so
	[ -e "$module" ] || hsm_die "$module not found (apt install libnss3)"
	mkdir -p "$db"
	pwfile=$HSM_DIR/.certutil-pw
	(umask 077 && printf '%s\n' "$HSM_PIN" >"$pwfile")
	export NSS_MAX_MP_PBE_ITERATION_COUNT=1
	certutil -N -d "sql:$db" -f "$pwfile" >"$HSM_DIR/certutil.log" 2>&1 ||
		{ rm -f "$pwfile"; cat "$HSM_DIR/certutil.log" >&2; hsm_die "certutil -N failed"; }
	rm -f "$pwfile"
	[ -f "$db/key4.db" ] || hsm_die "certutil -N did not create $db/key4.db"
	init="configdir='sql:$db' certPrefix='' keyPrefix='' secmod='secmod.db' flags='' dbTokenDescription='$HSM_LABEL'"
	printf '%s\n' "$init" >"$HSM_DIR/init-reserved"
	hsm_write_pin
	hsm_write_env "NSS_MAX_MP_PBE_ITERATION_COUNT=1"
	hsm_write_json "$module" "$HSM_LABEL" "$init" "" \
		"NSS softoken on DIR/nssdb; C_Initialize pReserved required (init_reserved, also in DIR/init-reserved); key DB token is slot 2; no SO PIN; no daemon" \
		ecdsa-p256 ecdsa-p384 rsa-2048 rsa-3072 rsa-4096
}

module_down() { return 0; }

module_restart() {
	hsm_log "no separate backend: the NSS softoken runs inside the client process"
	exit 3
}

hsm_main "$@"
