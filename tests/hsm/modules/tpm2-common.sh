# tpm2-common.sh — swtpm / dbus-daemon / tpm2-abrmd / tpm2_ptool helpers for
# tpm2-abrmd.sh and tpm2-swtpm.sh (sourced after common.sh).
#
# Layout under DIR:
#   ports          "P P+1": swtpm data and control TCP ports on 127.0.0.1
#   tpmstate/      swtpm state (NVRAM: the persistent primary key lives here)
#   store/         TPM2_PKCS11_STORE (tpm2_pkcs11.sqlite3: token, wrapped keys)
#   bus            private D-Bus session bus socket (abrmd variant, and a
#                  temporary one during `up` of the swtpm variant)
#   *.pid *.comm *.log  per daemon (swtpm, dbus, abrmd)

tpm2_need_tools() {
	hsm_need swtpm swtpm_ioctl tpm2_getcap tpm2_dictionarylockout tpm2_shutdown \
		tpm2_flushcontext tpm2_testparms tpm2_ptool python3 timeout
}

tpm2_module_path() {
	local ma m
	ma=$(hsm_multiarch)
	# the unversioned name a user writes in the config (a symlink to
	# ../libtpm2_pkcs11.so.1); fall back to the SONAME file.
	for m in "/usr/lib/$ma/pkcs11/libtpm2_pkcs11.so" "/usr/lib/$ma/libtpm2_pkcs11.so" \
		"/usr/lib/$ma/libtpm2_pkcs11.so.1"; do
		if [ -e "$m" ]; then printf '%s\n' "$m"; return 0; fi
	done
	hsm_die "libtpm2_pkcs11.so not found under /usr/lib/$ma (apt install libtpm2-pkcs11-1)"
}

tpm2_ports() { # sets TPM_PORT TPM_CTRL from DIR/ports
	[ -f "$HSM_DIR/ports" ] || return 1
	read -r TPM_PORT TPM_CTRL <"$HSM_DIR/ports"
	[ -n "$TPM_PORT" ] && [ -n "$TPM_CTRL" ]
}

tpm2_swtpm_tcti() { printf 'swtpm:host=127.0.0.1,port=%s' "$TPM_PORT"; }

# Start swtpm on DIR/ports (picking free ports first if there is no file
# yet; retried on a lost port race), then wait until it answers.
tpm2_start_swtpm() {
	local try
	mkdir -p "$HSM_DIR/tpmstate"
	for try in 1 2 3; do
		if ! tpm2_ports; then
			hsm_free_port_pair >"$HSM_DIR/ports"
			tpm2_ports || hsm_die "bad $HSM_DIR/ports"
			local fresh=1
		fi
		setsid swtpm socket --tpm2 \
			--server "type=tcp,port=$TPM_PORT,bindaddr=127.0.0.1" \
			--ctrl "type=tcp,port=$TPM_CTRL,bindaddr=127.0.0.1" \
			--tpmstate "dir=$HSM_DIR/tpmstate" \
			--flags not-need-init,startup-clear \
			</dev/null >>"$HSM_DIR/swtpm.log" 2>&1 &
		printf '%s\n' "$!" >"$HSM_DIR/swtpm.pid"
		# wait for both ports; a dead swtpm means the bind failed
		local deadline=$((SECONDS + HSM_WAIT_SECS))
		while [ -n "$(hsm_pid swtpm)" ] && [ "$SECONDS" -lt "$deadline" ]; do
			if hsm_port_open "$TPM_PORT" && hsm_port_open "$TPM_CTRL"; then break; fi
			sleep 0.1
		done
		if [ -n "$(hsm_pid swtpm)" ] && hsm_port_open "$TPM_PORT"; then
			HSM_WAIT_PIDNAME=swtpm hsm_wait_until "swtpm to answer TPM2_GetCapability on port $TPM_PORT" \
				env TPM2TOOLS_TCTI="$(tpm2_swtpm_tcti)" timeout 5 tpm2_getcap properties-fixed
			hsm_record_comm swtpm
			return 0
		fi
		hsm_stop swtpm
		tail -n 5 "$HSM_DIR/swtpm.log" >&2 || true
		# a port taken since we picked it: pick again (only if we picked)
		[ "${fresh:-}" = 1 ] || hsm_die "swtpm could not start on ports $TPM_PORT/$TPM_CTRL (log: $HSM_DIR/swtpm.log)"
		rm -f "$HSM_DIR/ports"
		hsm_log "swtpm failed to start on $TPM_PORT/$TPM_CTRL (attempt $try); retrying"
	done
	hsm_die "swtpm did not start (log: $HSM_DIR/swtpm.log)"
}

# Orderly TPM2_Shutdown (so the next start is not counted as a non-orderly
# shutdown, which bumps the dictionary-attack counter), then stop swtpm
# through its control channel, then by pid. TCTI: how to reach the TPM now
# (tabrmd while abrmd runs; direct swtpm else). Bounded: a client holding
# the single swtpm connection would make a direct tpm2_shutdown wait.
tpm2_stop_swtpm() {
	local tcti=$1
	if [ -n "$(hsm_pid swtpm)" ] && tpm2_ports; then
		if [ -n "$tcti" ]; then
			TPM2TOOLS_TCTI=$tcti timeout 5 tpm2_shutdown >>"$HSM_DIR/swtpm.log" 2>&1 ||
				hsm_log "warning: tpm2_shutdown failed or timed out (a client may hold the TPM); stopping swtpm anyway"
		fi
		timeout 5 swtpm_ioctl --tcp "127.0.0.1:$TPM_CTRL" -s >>"$HSM_DIR/swtpm.log" 2>&1 || true
		local pid
		pid=$(hsm_pid swtpm)
		[ -z "$pid" ] || hsm_wait_exit "$pid" 5 || true
	fi
	hsm_stop swtpm
}

tpm2_disable_lockout() { # TPM2TOOLS_TCTI must be set
	tpm2_dictionarylockout -s -n 1000 -t 1 -l 1 >>"$HSM_DIR/setup.log" 2>&1 ||
		hsm_die "tpm2_dictionarylockout failed (log: $HSM_DIR/setup.log)"
}

tpm2_start_dbus() {
	local bus=$HSM_DIR/bus
	hsm_check_sock_path "$bus"
	rm -f "$bus"
	hsm_start dbus dbus-daemon --session --nofork --nopidfile --address="unix:path=$bus"
	HSM_WAIT_PIDNAME=dbus hsm_wait_until "dbus-daemon on $bus" \
		dbus-send --bus="unix:path=$bus" --print-reply --dest=org.freedesktop.DBus / org.freedesktop.DBus.ListNames
	hsm_record_comm dbus
	DBUS_BUS="unix:path=$bus"
}

tpm2_start_abrmd() { # needs DBUS_BUS and ports
	local root=()
	[ "$(id -u)" != 0 ] || root=(--allow-root)
	hsm_start abrmd env DBUS_SESSION_BUS_ADDRESS="$DBUS_BUS" \
		tpm2-abrmd --session "${root[@]}" --flush-all --tcti="$(tpm2_swtpm_tcti)"
	HSM_WAIT_PIDNAME=abrmd hsm_wait_until "tpm2-abrmd on the session bus $DBUS_BUS" \
		env DBUS_SESSION_BUS_ADDRESS="$DBUS_BUS" TPM2TOOLS_TCTI=tabrmd:bus_type=session \
		timeout 5 tpm2_getcap properties-fixed
	hsm_record_comm abrmd
}

# tpm2_ptool init + addtoken (TPM2TOOLS_TCTI / TPM2_PKCS11_TCTI set by caller)
tpm2_make_token() {
	local out pid
	mkdir -p "$HSM_DIR/store"
	export TPM2_PKCS11_STORE=$HSM_DIR/store
	out=$(tpm2_ptool init --path "$HSM_DIR/store" 2>>"$HSM_DIR/setup.log") ||
		hsm_die "tpm2_ptool init failed (log: $HSM_DIR/setup.log)"
	printf '%s\n' "$out" >>"$HSM_DIR/setup.log"
	pid=$(printf '%s\n' "$out" | awk '$1 == "id:" {print $2; exit}')
	[ -n "$pid" ] || hsm_die "tpm2_ptool init printed no primary id: $out"
	tpm2_ptool addtoken --path "$HSM_DIR/store" --pid="$pid" --label="$HSM_LABEL" \
		--sopin="$HSM_SOPIN" --userpin="$HSM_PIN" >>"$HSM_DIR/setup.log" 2>&1 ||
		hsm_die "tpm2_ptool addtoken failed (log: $HSM_DIR/setup.log)"
	# (verify prints the unwrapped wrapping key: keep it out of the log)
	out=$(tpm2_ptool verify --path "$HSM_DIR/store" --label="$HSM_LABEL" --userpin="$HSM_PIN" 2>&1) ||
		{ printf '%s\n' "$out" | tail -n 5 >&2; hsm_die "tpm2_ptool verify of the new user PIN failed"; }
}

# Key types this TPM can make (tpm2_testparms), in signet's names.
tpm2_key_types() {
	local t
	TPM2_KEY_TYPES=()
	for t in ecdsa-p256:ecc256 ecdsa-p384:ecc384 rsa-2048:rsa2048 rsa-3072:rsa3072 rsa-4096:rsa4096; do
		if timeout 5 tpm2_testparms "${t#*:}" >/dev/null 2>&1; then TPM2_KEY_TYPES+=("${t%%:*}"); fi
	done
	[ "${#TPM2_KEY_TYPES[@]}" -gt 0 ] || hsm_die "tpm2_testparms accepted no key type"
}
