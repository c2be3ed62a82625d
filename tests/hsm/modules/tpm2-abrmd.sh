#!/usr/bin/env bash
# tpm2-pkcs11 (libtpm2-pkcs11-1, tools in libtpm2-pkcs11-tools) on a software
# TPM (swtpm, swtpm-tools), reached through the TPM2 access broker and
# resource manager tpm2-abrmd (tpm2-abrmd plus libtss2-tcti-tabrmd0, which
# tpm2-abrmd does not pull in) on a private D-Bus session bus (dbus-daemon).
# tpm2-tools is needed for set-up. Keys live in a sqlite store
# (TPM2_PKCS11_STORE), wrapped by a primary key persisted in the TPM.
#
# Quirks: C_OpenSession is not thread-safe (open sessions one at a time);
# no C_CopyObject (CKR_FUNCTION_NOT_SUPPORTED); the TPM's dictionary-attack
# protection locks the PIN after a few failures (disabled here with
# tpm2_dictionarylockout -s -n 1000 -t 1 -l 1); always tpm2_shutdown before
# stopping swtpm; an empty slot follows the token; slow (a few hundred
# signatures per second). With abrmd several processes can share the TPM,
# and objects of a crashed client are flushed.
#
# signet configuration for a user with tpm2-pkcs11 through tpm2-abrmd:
#   hsm-module = /usr/lib/<multiarch>/pkcs11/libtpm2_pkcs11.so
#   environment: TPM2_PKCS11_TCTI=tabrmd:bus_type=session (or bus_type=system
#   with a system abrmd), TPM2_PKCS11_STORE=<store folder>,
#   DBUS_SESSION_BUS_ADDRESS=<bus> for a session-bus abrmd,
#   TPM2_PKCS11_BACKEND=esysdb (skip the FAPI backend and its error noise).
#
# This script: `up DIR` starts swtpm (free loopback ports in DIR/ports, state
# in DIR/tpmstate), dbus-daemon (DIR/bus) and tpm2-abrmd, disables the
# lockout, runs tpm2_ptool init + addtoken (store in DIR/store; label
# "signet-tpm2" by default, user PIN 123456, SO PIN 12345678).
# `restart-backend DIR` restarts tpm2-abrmd on the same bus and swtpm.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$HERE/common.sh"
# shellcheck source=tpm2-common.sh
. "$HERE/tpm2-common.sh"

module_up() {
	tpm2_need_tools
	hsm_need tpm2-abrmd dbus-daemon dbus-send
	: "${HSM_LABEL:=signet-tpm2}" "${HSM_PIN:=123456}" "${HSM_SOPIN:=12345678}"
	local module
	module=$(tpm2_module_path)
	tpm2_start_swtpm
	TPM2TOOLS_TCTI=$(tpm2_swtpm_tcti) tpm2_disable_lockout
	tpm2_start_dbus
	tpm2_start_abrmd
	export DBUS_SESSION_BUS_ADDRESS=$DBUS_BUS TPM2TOOLS_TCTI=tabrmd:bus_type=session
	export TPM2_PKCS11_TCTI=tabrmd:bus_type=session TPM2_PKCS11_BACKEND=esysdb
	tpm2_make_token
	tpm2_key_types
	hsm_write_pin
	hsm_write_env "TPM2_PKCS11_TCTI=tabrmd:bus_type=session" "TPM2TOOLS_TCTI=tabrmd:bus_type=session" \
		"TPM2_PKCS11_STORE=$HSM_DIR/store" "TPM2_PKCS11_BACKEND=esysdb" \
		"DBUS_SESSION_BUS_ADDRESS=$DBUS_BUS"
	hsm_write_json "$module" "$HSM_LABEL" "" "$HSM_SOPIN" \
		"tpm2-pkcs11 on swtpm 127.0.0.1:$TPM_PORT via tpm2-abrmd on a private session bus; C_OpenSession not thread-safe; no C_CopyObject; slow" \
		"${TPM2_KEY_TYPES[@]}"
}

module_down() {
	local tcti=""
	tpm2_ports || true
	if [ -n "$(hsm_pid abrmd)" ] && [ -n "$(hsm_pid dbus)" ]; then
		tcti=tabrmd:bus_type=session
		export DBUS_SESSION_BUS_ADDRESS=unix:path=$HSM_DIR/bus
		# orderly TPM2_Shutdown through abrmd, before abrmd and swtpm go
		TPM2TOOLS_TCTI=$tcti timeout 5 tpm2_shutdown >>"$HSM_DIR/swtpm.log" 2>&1 ||
			hsm_log "warning: tpm2_shutdown through tpm2-abrmd failed"
	elif [ -n "$(hsm_pid swtpm)" ] && tpm2_ports; then
		tcti=$(tpm2_swtpm_tcti)
		TPM2TOOLS_TCTI=$tcti timeout 5 tpm2_shutdown >>"$HSM_DIR/swtpm.log" 2>&1 || true
	fi
	hsm_stop abrmd
	tpm2_stop_swtpm "" # shutdown already sent above
	hsm_stop dbus
	rm -f "$HSM_DIR/bus"
}

module_restart() {
	[ -n "$(hsm_pid swtpm)" ] || hsm_die "swtpm is not running in $HSM_DIR (run up first)"
	[ -n "$(hsm_pid dbus)" ] || hsm_die "dbus-daemon is not running in $HSM_DIR (run up first)"
	tpm2_ports || hsm_die "no $HSM_DIR/ports"
	DBUS_BUS=unix:path=$HSM_DIR/bus
	hsm_stop abrmd
	tpm2_start_abrmd
	hsm_log "tpm2-abrmd restarted (pid $(hsm_pid abrmd)) on $DBUS_BUS"
}

hsm_main "$@"
