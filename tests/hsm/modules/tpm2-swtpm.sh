#!/usr/bin/env bash
# tpm2-pkcs11 (libtpm2-pkcs11-1, tools in libtpm2-pkcs11-tools) talking to a
# software TPM (swtpm, swtpm-tools) directly over TCP with the swtpm TCTI,
# without a resource manager. tpm2-tools is needed for set-up, and
# tpm2-abrmd + libtss2-tcti-tabrmd0 + dbus-daemon during `up` only (see
# below). Keys live in a sqlite store (TPM2_PKCS11_STORE).
#
# Quirks: without a resource manager only ONE process can use the TPM at a
# time (swtpm serves one connection; a second client waits), and a client
# that crashes leaves its objects loaded in the TPM (tpm2_flushcontext -t).
# `tpm2_ptool addtoken` fails on the direct TCTI ("out of memory for object
# contexts": swtpm has 3 transient object slots and nothing swaps them out),
# so `up` creates the token through a temporary dbus-daemon + tpm2-abrmd,
# then stops them and flushes the TPM. Otherwise as tpm2-abrmd.sh:
# C_OpenSession is not thread-safe; no C_CopyObject; dictionary-attack
# lockout disabled here (tpm2_dictionarylockout -s -n 1000 -t 1 -l 1);
# tpm2_shutdown before stopping swtpm; an empty slot follows the token.
#
# signet configuration for a user with tpm2-pkcs11 on a directly attached TPM:
#   hsm-module = /usr/lib/<multiarch>/pkcs11/libtpm2_pkcs11.so
#   environment: TPM2_PKCS11_TCTI=swtpm:host=127.0.0.1,port=<port> (a real
#   TPM: device:/dev/tpmrm0), TPM2_PKCS11_STORE=<store folder>,
#   TPM2_PKCS11_BACKEND=esysdb.
#
# This script: `up DIR` starts swtpm (free loopback ports in DIR/ports,
# state in DIR/tpmstate), disables the lockout, creates the token (store in
# DIR/store; label "signet-tpm2" by default, user PIN 123456, SO PIN
# 12345678). `restart-backend DIR` does tpm2_shutdown (bounded: it cannot
# get through while a client holds the TPM) and restarts swtpm on the same
# ports and state: every client's TPM objects and sessions are gone.
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
	local module tcti
	module=$(tpm2_module_path)
	tpm2_start_swtpm
	tcti=$(tpm2_swtpm_tcti)
	TPM2TOOLS_TCTI=$tcti tpm2_disable_lockout
	# token creation through a temporary resource manager (in a subshell, so
	# the tabrmd settings do not leak into what follows)
	tpm2_start_dbus
	tpm2_start_abrmd
	(
		# shellcheck disable=SC2030
		export DBUS_SESSION_BUS_ADDRESS=$DBUS_BUS TPM2TOOLS_TCTI=tabrmd:bus_type=session
		# shellcheck disable=SC2030
		export TPM2_PKCS11_TCTI=tabrmd:bus_type=session TPM2_PKCS11_BACKEND=esysdb
		tpm2_make_token
	)
	hsm_stop abrmd
	hsm_stop dbus
	rm -f "$HSM_DIR/bus"
	# shellcheck disable=SC2031
	export TPM2TOOLS_TCTI=$tcti TPM2_PKCS11_TCTI=$tcti TPM2_PKCS11_BACKEND=esysdb
	export TPM2_PKCS11_STORE=$HSM_DIR/store
	timeout 10 tpm2_flushcontext -t >>"$HSM_DIR/setup.log" 2>&1 || hsm_die "tpm2_flushcontext -t failed on $tcti"
	timeout 10 tpm2_flushcontext -s >>"$HSM_DIR/setup.log" 2>&1 || true
	tpm2_key_types
	hsm_write_pin
	hsm_write_env "TPM2_PKCS11_TCTI=$tcti" "TPM2TOOLS_TCTI=$tcti" \
		"TPM2_PKCS11_STORE=$HSM_DIR/store" "TPM2_PKCS11_BACKEND=esysdb"
	hsm_write_json "$module" "$HSM_LABEL" "" "$HSM_SOPIN" \
		"tpm2-pkcs11 on swtpm 127.0.0.1:$TPM_PORT, direct TCTI: one process at a time; C_OpenSession not thread-safe; no C_CopyObject; slow" \
		"${TPM2_KEY_TYPES[@]}"
}

module_down() {
	# abrmd/dbus only run during up; stop them too in case up was interrupted
	hsm_stop abrmd
	hsm_stop dbus
	rm -f "$HSM_DIR/bus"
	if tpm2_ports; then tpm2_stop_swtpm "$(tpm2_swtpm_tcti)"; else hsm_stop swtpm; fi
}

module_restart() {
	[ -n "$(hsm_pid swtpm)" ] || hsm_die "swtpm is not running in $HSM_DIR (run up first)"
	tpm2_ports || hsm_die "no $HSM_DIR/ports"
	tpm2_stop_swtpm "$(tpm2_swtpm_tcti)"
	tpm2_start_swtpm
	hsm_log "swtpm restarted (pid $(hsm_pid swtpm)) on 127.0.0.1:$TPM_PORT/$TPM_CTRL"
}

hsm_main "$@"
