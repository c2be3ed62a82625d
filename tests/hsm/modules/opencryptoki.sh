#!/usr/bin/env bash
# openCryptoki (Debian package opencryptoki) with its soft token (the
# libpkcs11_sw.so STDLL; slot 3 in Debian's /etc/opencryptoki/opencryptoki.conf).
# Applications load libopencryptoki.so, which needs the slot manager daemon
# pkcsslotd running (as root; clients must be root or in group pkcs11).
#
# Quirks: RSA only (no CKM_EC_KEY_PAIR_GEN, no EC at all) and no
# CKM_SHA256_RSA_PKCS: sign a DER DigestInfo with CKM_RSA_PKCS. PINs are 4-8
# characters. A new token has the factory SO PIN 87654321 and must have both
# PINs changed before use (pkcsconf -I, -P, -u, -p). Keys default to
# extractable: generate with CKA_EXTRACTABLE=FALSE. All paths are fixed
# system-wide: /etc/opencryptoki (config), /var/lib/opencryptoki/swtok
# (token: NVTOK.DAT, MK_SO, MK_USER, TOK_OBJ/), /dev/shm/var.lib.opencryptoki.swtok
# (token cache), /run/pkcsslotd.{pid,socket}, /var/lock/opencryptoki.
#
# signet configuration for a user with openCryptoki:
#   hsm-module = /usr/lib/<multiarch>/pkcs11/libopencryptoki.so
#   --key-type rsa-2048 (or rsa-3072/rsa-4096) for signetctl init
#   environment: none; pkcsslotd must run; signet must run as root or as a
#   member of group pkcs11.
#
# This script (run as root; only one openCryptoki set-up per machine):
# `up DIR` refuses if a pkcsslotd it did not start is running. It resets the
# soft token to factory state (if the token holds state not made by this
# script, that state is first moved to DIR/swtok-saved and `down` puts it
# back), starts `pkcsslotd -f` (pid in DIR), initialises the token (label
# "signet-ock" by default, SO PIN 12345678, user PIN 123456).
# `down DIR` stops that pkcsslotd and restores any saved state; the test
# token's files stay until the next `up` (marked by swtok/.signet-test).
# `restart-backend DIR` restarts pkcsslotd (clients keep working: the soft
# token runs in the client process; pkcsslotd only tracks slots/sessions).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$HERE/common.sh"

OCK_CONF=/etc/opencryptoki/opencryptoki.conf
OCK_TOK=/var/lib/opencryptoki/swtok
OCK_SHM=/dev/shm/var.lib.opencryptoki.swtok
OCK_SOCK=/run/pkcsslotd.socket
OCK_FACTORY_SO=87654321
OCK_MARK=$OCK_TOK/.signet-test

# slot number of the soft token in opencryptoki.conf
ock_slot() {
	local s
	s=$(awk '/^[ \t]*slot[ \t]+[0-9]+/ {slot=$2} /stdll[ \t]*=[ \t]*libpkcs11_sw\.so/ {print slot; exit}' "$OCK_CONF" 2>/dev/null)
	[ -n "$s" ] || hsm_die "no slot with stdll = libpkcs11_sw.so in $OCK_CONF"
	printf '%s\n' "$s"
}

# pids of running pkcsslotd processes (exact name; zombies left out)
ock_running() {
	local p
	for p in $(pgrep -x pkcsslotd 2>/dev/null || true); do
		if hsm_alive "$p"; then printf '%s\n' "$p"; fi
	done
}

ock_pin_ok() { [ "${#1}" -ge 4 ] && [ "${#1}" -le 8 ]; }

ock_start_slotd() {
	hsm_start pkcsslotd pkcsslotd -f -l "$HSM_DIR/pkcsslotd-l.log"
	HSM_WAIT_PIDNAME=pkcsslotd hsm_wait_until "pkcsslotd socket $OCK_SOCK" test -S "$OCK_SOCK"
	HSM_WAIT_PIDNAME=pkcsslotd hsm_wait_until "slot $OCK_SLOT through pkcsslotd" timeout 10 pkcsconf -s -c "$OCK_SLOT"
	hsm_record_comm pkcsslotd
}

module_up() {
	hsm_need pkcsslotd pkcsconf pgrep
	: "${HSM_LABEL:=signet-ock}" "${HSM_PIN:=123456}" "${HSM_SOPIN:=12345678}"
	[ "$(id -u)" = 0 ] || hsm_die "openCryptoki set-up needs root (pkcsslotd runs as root; token files are root:pkcs11 under /var/lib/opencryptoki)"
	ock_pin_ok "$HSM_PIN" || hsm_die "openCryptoki PINs are 4-8 characters (user PIN has ${#HSM_PIN})"
	ock_pin_ok "$HSM_SOPIN" || hsm_die "openCryptoki PINs are 4-8 characters (SO PIN has ${#HSM_SOPIN})"
	[ "$HSM_SOPIN" != "$OCK_FACTORY_SO" ] || hsm_die "the SO PIN must differ from the factory SO PIN $OCK_FACTORY_SO"
	local ma module running
	ma=$(hsm_multiarch)
	module=/usr/lib/$ma/pkcs11/libopencryptoki.so
	[ -e "$module" ] || module=/usr/lib/$ma/libopencryptoki.so.0
	[ -e "$module" ] || hsm_die "libopencryptoki.so not found under /usr/lib/$ma (apt install opencryptoki)"
	[ -d "$OCK_TOK" ] || hsm_die "$OCK_TOK missing (apt install opencryptoki)"
	OCK_SLOT=$(ock_slot)
	running=$(ock_running | tr "\n" " ")
	if [ -n "$running" ]; then
		hsm_die "pkcsslotd is already running (pid ${running% }); up resets the system-wide soft token and must start pkcsslotd itself: stop it first (e.g. '$HSM_SCRIPT down <the DIR of an earlier up>', or systemctl stop pkcsslotd)"
	fi
	# save or wipe the soft token's state
	if [ -e "$OCK_TOK/NVTOK.DAT" ] && [ ! -e "$OCK_MARK" ]; then
		hsm_log "saving the existing openCryptoki soft token state to $HSM_DIR/swtok-saved (down restores it)"
		mkdir -p "$HSM_DIR/swtok-saved"
		cp -a "$OCK_TOK/." "$HSM_DIR/swtok-saved/"
		[ ! -e "$OCK_SHM" ] || cp -a "$OCK_SHM" "$HSM_DIR/swtok-saved.shm"
	fi
	rm -f "$OCK_TOK/NVTOK.DAT" "$OCK_TOK/MK_SO" "$OCK_TOK/MK_USER" "$OCK_SHM"
	find "$OCK_TOK/TOK_OBJ" -mindepth 1 -delete 2>/dev/null || true
	printf 'soft token reset by %s up %s\n' "$HSM_SCRIPT" "$HSM_DIR" >"$OCK_MARK"
	echo "$OCK_SLOT" >"$HSM_DIR/slot"
	ock_start_slotd
	# factory token -> label, SO PIN, user PIN (set, then changed: a fresh
	# user PIN is flagged "to be changed")
	local tmp_pin=00000000 log=$HSM_DIR/setup.log
	[ "$HSM_PIN" != "$tmp_pin" ] || tmp_pin=11111111
	printf '%s\n' "$HSM_LABEL" | pkcsconf -c "$OCK_SLOT" -I -S "$OCK_FACTORY_SO" >>"$log" 2>&1 ||
		hsm_die "pkcsconf -I (init token) failed (log: $log)"
	pkcsconf -c "$OCK_SLOT" -P -S "$OCK_FACTORY_SO" -n "$HSM_SOPIN" >>"$log" 2>&1 ||
		hsm_die "pkcsconf -P (set SO PIN) failed (log: $log)"
	pkcsconf -c "$OCK_SLOT" -u -S "$HSM_SOPIN" -n "$tmp_pin" >>"$log" 2>&1 ||
		hsm_die "pkcsconf -u (init user PIN) failed (log: $log)"
	pkcsconf -c "$OCK_SLOT" -p -U "$tmp_pin" -n "$HSM_PIN" >>"$log" 2>&1 ||
		hsm_die "pkcsconf -p (set user PIN) failed (log: $log)"
	pkcsconf -t -c "$OCK_SLOT" 2>/dev/null | grep -qE "Label: $HSM_LABEL *\$" ||
		hsm_die "token label '$HSM_LABEL' not shown by pkcsconf -t -c $OCK_SLOT"
	hsm_write_pin
	# shellcheck disable=SC2119 # no variables needed
	hsm_write_env
	hsm_write_json "$module" "$HSM_LABEL" "" "$HSM_SOPIN" \
		"openCryptoki soft token, slot $OCK_SLOT, system-wide state in $OCK_TOK; pkcsslotd (root) started by up; RSA only, sign DigestInfo with CKM_RSA_PKCS; PINs 4-8 chars" \
		rsa-2048
}

module_down() {
	hsm_stop pkcsslotd
	if [ -d "$HSM_DIR/swtok-saved" ]; then
		if [ -n "$(ock_running)" ]; then
			hsm_log "warning: a pkcsslotd is running; not restoring $HSM_DIR/swtok-saved"
			return 0
		fi
		hsm_log "restoring the saved openCryptoki soft token state"
		rm -f "$OCK_TOK/NVTOK.DAT" "$OCK_TOK/MK_SO" "$OCK_TOK/MK_USER" "$OCK_SHM" "$OCK_MARK"
		find "$OCK_TOK/TOK_OBJ" -mindepth 1 -delete 2>/dev/null || true
		cp -a "$HSM_DIR/swtok-saved/." "$OCK_TOK/"
		[ ! -e "$HSM_DIR/swtok-saved.shm" ] || cp -a "$HSM_DIR/swtok-saved.shm" "$OCK_SHM"
		rm -rf "$HSM_DIR/swtok-saved" "$HSM_DIR/swtok-saved.shm"
	fi
	return 0
}

module_restart() {
	[ -f "$HSM_DIR/slot" ] || hsm_die "$HSM_DIR was not set up by '$HSM_SCRIPT up'"
	[ -n "$(hsm_pid pkcsslotd)" ] || hsm_die "the pkcsslotd started by up is not running"
	OCK_SLOT=$(cat "$HSM_DIR/slot")
	# pkcsslotd ignores SIGTERM while clients are attached: SIGKILL after 2 s
	# (the next pkcsslotd reclaims the stale SysV shared memory segment)
	HSM_STOP_SECS=2 hsm_stop pkcsslotd
	ock_start_slotd
	hsm_log "pkcsslotd restarted (pid $(hsm_pid pkcsslotd))"
}

hsm_main "$@"
