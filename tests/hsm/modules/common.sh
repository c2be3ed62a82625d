# common.sh — helpers sourced by the per-module set-up scripts in this folder
# (softhsm2.sh, nss.sh, tpm2-abrmd.sh, tpm2-swtpm.sh, p11-kit.sh,
# opencryptoki.sh). Not meant to be run on its own.
#
# Conventions shared by every script:
#   <script> up DIR [--label LABEL] [--pin PIN] [--so-pin SOPIN]
#   <script> down DIR
#   <script> restart-backend DIR
# Daemons are started detached (own session, stdin/stdout/stderr redirected,
# so a caller that captures our output never waits for them), their pid goes
# to DIR/<name>.pid together with the command name (DIR/<name>.comm) so that
# `down` never signals a recycled pid, and their output to DIR/<name>.log.

HSM_SCRIPT=${HSM_SCRIPT:-$(basename "$0")}
HSM_WAIT_SECS=${HSM_WAIT_SECS:-30}   # bound for every "wait until usable" poll

hsm_log() { printf '%s: %s\n' "$HSM_SCRIPT" "$*" >&2; }
hsm_die() { printf '%s: error: %s\n' "$HSM_SCRIPT" "$*" >&2; exit 1; }

hsm_need() { # hsm_need CMD... — fail clearly if a tool is missing
	local c
	for c in "$@"; do
		command -v "$c" >/dev/null 2>&1 || hsm_die "'$c' not found in PATH (install the package named in the header of $HSM_SCRIPT)"
	done
}

hsm_multiarch() {
	local m
	m=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null) ||
		m=$(gcc -print-multiarch 2>/dev/null) || m=""
	[ -n "$m" ] || hsm_die "cannot find the multiarch triplet (dpkg-architecture and gcc -print-multiarch both failed)"
	printf '%s\n' "$m"
}

# Parse the common command line. Sets HSM_CMD, HSM_DIR (absolute), HSM_LABEL,
# HSM_PIN, HSM_SOPIN (empty when not given: the script applies its default).
hsm_parse_args() {
	HSM_CMD="" HSM_DIR="" HSM_LABEL="" HSM_PIN="" HSM_SOPIN=""
	while [ $# -gt 0 ]; do
		case "$1" in
		-h | --help) hsm_usage; exit 0 ;;
		--label) [ $# -ge 2 ] || hsm_die "--label needs a value"; HSM_LABEL=$2; shift 2 ;;
		--label=*) HSM_LABEL=${1#*=}; shift ;;
		--pin) [ $# -ge 2 ] || hsm_die "--pin needs a value"; HSM_PIN=$2; shift 2 ;;
		--pin=*) HSM_PIN=${1#*=}; shift ;;
		--so-pin) [ $# -ge 2 ] || hsm_die "--so-pin needs a value"; HSM_SOPIN=$2; shift 2 ;;
		--so-pin=*) HSM_SOPIN=${1#*=}; shift ;;
		-*) hsm_usage >&2; hsm_die "unknown option '$1'" ;;
		*)
			if [ -z "$HSM_CMD" ]; then HSM_CMD=$1
			elif [ -z "$HSM_DIR" ]; then HSM_DIR=$1
			else hsm_usage >&2; hsm_die "unexpected argument '$1'"; fi
			shift ;;
		esac
	done
	case "$HSM_CMD" in
	up | down | restart-backend) ;;
	"") hsm_usage >&2; exit 2 ;;
	*) hsm_usage >&2; hsm_die "unknown command '$HSM_CMD'" ;;
	esac
	[ -n "$HSM_DIR" ] || { hsm_usage >&2; hsm_die "missing DIR"; }
	case "$HSM_DIR" in /*) ;; *) HSM_DIR=$PWD/$HSM_DIR ;; esac
	HSM_DIR=${HSM_DIR%/}
	if [ "$HSM_CMD" != up ] && { [ -n "$HSM_LABEL" ] || [ -n "$HSM_PIN" ] || [ -n "$HSM_SOPIN" ]; }; then
		hsm_die "--label/--pin/--so-pin only apply to 'up'"
	fi
	if [ -n "$HSM_LABEL" ] && [ "${#HSM_LABEL}" -gt 32 ]; then
		hsm_die "token label '$HSM_LABEL' is longer than 32 characters (PKCS#11 limit)"
	fi
	return 0
}

hsm_usage() {
	cat <<EOF
usage: $HSM_SCRIPT up DIR [--label LABEL] [--pin PIN] [--so-pin SOPIN]
       $HSM_SCRIPT down DIR
       $HSM_SCRIPT restart-backend DIR
       $HSM_SCRIPT --help

  up               create DIR (empty or missing), one initialised token with a
                   user PIN (no key), start the daemons it needs, and write
                   DIR/pin, DIR/env (export lines) and DIR/module.json
  down             stop every daemon 'up' started (idempotent)
  restart-backend  kill and restart the backend daemon under running clients
                   (exit 3 when the module has no separate backend)

  DIR/env, DIR/module.json and the header of this script say how a client
  (and signet's hsm-module / hsm-init-reserved) uses the token.
  HSM_WAIT_SECS (default 30) bounds each wait for a daemon to be usable.
EOF
}

# up: DIR must be missing or empty; creates it with mode 0700.
hsm_prepare_dir() {
	if [ -e "$HSM_DIR" ]; then
		[ -d "$HSM_DIR" ] || hsm_die "$HSM_DIR exists and is not a directory"
		[ -z "$(ls -A "$HSM_DIR")" ] || hsm_die "$HSM_DIR is not empty (run '$HSM_SCRIPT down $HSM_DIR' and remove it, or pick a new folder)"
	fi
	mkdir -p "$HSM_DIR" || hsm_die "cannot create $HSM_DIR"
	chmod 0700 "$HSM_DIR"
}

# A unix socket path must fit sun_path (108 bytes with the NUL).
hsm_check_sock_path() {
	[ "${#1}" -lt 108 ] || hsm_die "socket path '$1' is ${#1} bytes, over the 107-byte unix socket limit: use a shorter DIR"
}

# Is the process alive and not a zombie?
hsm_alive() {
	local pid=$1 st
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
	st=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
	[ "$st" != Z ] && [ "$st" != X ]
}

# hsm_start NAME CMD ARGS... — start CMD detached, record its pid.
hsm_start() {
	local name=$1 pid
	shift
	# setsid: own session/process group (Ctrl-C on the caller does not hit
	# it, and restart can signal the whole group). In a non-interactive bash
	# the background child is not a group leader, so setsid execs in place
	# and $! is the daemon's pid (checked below).
	setsid "$@" </dev/null >>"$HSM_DIR/$name.log" 2>&1 &
	pid=$!
	printf '%s\n' "$pid" >"$HSM_DIR/$name.pid"
	rm -f "$HSM_DIR/$name.comm" # written by hsm_record_comm once ready
	sleep 0.1
	if ! hsm_alive "$pid"; then
		hsm_log "$name exited at once; last lines of $HSM_DIR/$name.log:"
		tail -n 20 "$HSM_DIR/$name.log" >&2 || true
		hsm_die "could not start $name ($*)"
	fi
}

# Once NAME is up (and has exec'd its final program), remember its
# /proc/PID/comm so that later signals never hit a recycled pid.
hsm_record_comm() {
	local pid
	pid=$(cat "$HSM_DIR/$1.pid" 2>/dev/null) || return 0
	cat "/proc/$pid/comm" >"$HSM_DIR/$1.comm" 2>/dev/null || true
}

# Recorded pid of NAME if that process is still ours and alive, else "".
hsm_pid() {
	local name=$1 pid comm want
	[ -f "$HSM_DIR/$name.pid" ] || return 0
	pid=$(cat "$HSM_DIR/$name.pid" 2>/dev/null) || return 0
	case "$pid" in '' | *[!0-9]*) return 0 ;; esac
	hsm_alive "$pid" || return 0
	if [ -f "$HSM_DIR/$name.comm" ]; then
		want=$(cat "$HSM_DIR/$name.comm")
		comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 0
		[ "$comm" = "$want" ] || return 0
	fi
	printf '%s\n' "$pid"
}

# hsm_wait_exit PID SECS — poll until PID is gone; 0 if gone.
hsm_wait_exit() {
	local pid=$1 n=$(($2 * 10))
	while hsm_alive "$pid" && [ "$n" -gt 0 ]; do sleep 0.1; n=$((n - 1)); done
	! hsm_alive "$pid"
}

# hsm_stop NAME [--group] — SIGTERM the recorded pid (and its process group
# with --group), wait up to HSM_STOP_SECS (10) s, then SIGKILL. Never fails.
hsm_stop() {
	local name=$1 group=${2:-} pid
	pid=$(hsm_pid "$name")
	if [ -n "$pid" ]; then
		if [ "$group" = --group ]; then kill -TERM -- "-$pid" 2>/dev/null || true; fi
		kill -TERM "$pid" 2>/dev/null || true
		if ! hsm_wait_exit "$pid" "${HSM_STOP_SECS:-10}"; then
			hsm_log "$name (pid $pid) ignored SIGTERM; sending SIGKILL"
			if [ "$group" = --group ]; then kill -KILL -- "-$pid" 2>/dev/null || true; fi
			kill -KILL "$pid" 2>/dev/null || true
			hsm_wait_exit "$pid" 5 || hsm_log "warning: $name (pid $pid) is still alive"
		fi
	fi
	rm -f "$HSM_DIR/$name.pid" "$HSM_DIR/$name.comm"
	return 0
}

# hsm_wait_until DESCRIPTION CMD... — run CMD every 0.2 s until it succeeds,
# at most HSM_WAIT_SECS; optional HSM_WAIT_PIDNAME aborts early if that
# daemon dies.
hsm_wait_until() {
	local what=$1 deadline
	shift
	deadline=$((SECONDS + HSM_WAIT_SECS))
	while :; do
		if "$@" >/dev/null 2>&1; then return 0; fi
		if [ -n "${HSM_WAIT_PIDNAME:-}" ] && [ -z "$(hsm_pid "$HSM_WAIT_PIDNAME")" ]; then
			tail -n 20 "$HSM_DIR/$HSM_WAIT_PIDNAME.log" >&2 2>/dev/null || true
			hsm_die "$HSM_WAIT_PIDNAME died while waiting for $what (log: $HSM_DIR/$HSM_WAIT_PIDNAME.log)"
		fi
		[ "$SECONDS" -lt "$deadline" ] || hsm_die "timed out after ${HSM_WAIT_SECS}s waiting for $what"
		sleep 0.2
	done
}

# Two free consecutive loopback TCP ports "P P+1" (swtpm server + ctrl),
# below the kernel's ephemeral range: swtpm binds them later and again on
# every restart, and a port in the range can be taken meanwhile by any
# outgoing connection on the machine (tests/kube/apiserver.sh, free_ports).
hsm_free_port_pair() {
	python3 - <<'EOF' || hsm_die "could not find two free consecutive loopback ports"
import random, socket, sys
with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
    low = int(f.read().split()[0])
first = max(1024, low - 16384)
for _ in range(1000):
    a = socket.socket()
    try:
        a.bind(("127.0.0.1", random.randrange(first, low - 1) if low - first >= 1024 else 0))
    except OSError:
        a.close(); continue
    p = a.getsockname()[1]
    if p >= 65535:
        a.close(); continue
    b = socket.socket()
    try:
        b.bind(("127.0.0.1", p + 1))
    except OSError:
        a.close(); b.close(); continue
    a.close(); b.close(); print(p, p + 1); sys.exit(0)
sys.exit(1)
EOF
}

# Is something listening on 127.0.0.1:PORT?
hsm_port_open() {
	python3 -c 'import socket,sys; s=socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1); s.close()' "$1" 2>/dev/null
}

hsm_write_pin() { # the user PIN, 0600, no newline
	(umask 077 && printf '%s' "$HSM_PIN" >"$HSM_DIR/pin")
	chmod 0600 "$HSM_DIR/pin"
}

# POSIX shell quoting: bare if only safe characters, else '...'.
hsm_shquote() {
	case "$1" in
	'' | *[!A-Za-z0-9_./:=@%+,-]*) printf "'%s'" "${1//\'/\'\\\'\'}" ;;
	*) printf '%s' "$1" ;;
	esac
}

# hsm_write_env NAME=VALUE... — DIR/env as shell-quoted export lines.
hsm_write_env() {
	local kv
	: >"$HSM_DIR/env"
	for kv in "$@"; do
		printf 'export %s=%s\n' "${kv%%=*}" "$(hsm_shquote "${kv#*=}")" >>"$HSM_DIR/env"
	done
	HSM_ENV_KV=("$@")
}

# hsm_write_json MODULE LABEL INIT_RESERVED|"" SO_PIN|"" NOTES KEYTYPE...
# (empty INIT_RESERVED / SO_PIN become null). Env comes from hsm_write_env.
hsm_write_json() {
	local module=$1 label=$2 init=$3 sopin=$4 notes=$5
	shift 5
	python3 - "$HSM_DIR/module.json" "$module" "$label" "$init" "$sopin" "$notes" "$#" "$@" "${HSM_ENV_KV[@]}" <<'EOF' || hsm_die "could not write module.json"
import json, sys
out, module, label, init, sopin, notes, n = sys.argv[1:8]
rest = sys.argv[8:]
keys, envkv = rest[:int(n)], rest[int(n):]
env = dict(kv.split("=", 1) for kv in envkv)
obj = {"module": module, "token_label": label, "init_reserved": init or None,
       "key_types": keys, "so_pin": sopin or None, "env": env, "notes": notes}
with open(out, "w") as f:
    json.dump(obj, f, indent=2)
    f.write("\n")
EOF
}

# Percent-encode a token label for a pkcs11: URI (RFC 7512).
hsm_uri_encode() {
	python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"
}

# Run on a failed `up`: stop what was started so nothing leaks.
hsm_on_up_failure() {
	local rc=$?
	if [ "$rc" -ne 0 ]; then
		hsm_log "up failed (exit $rc); stopping what was started"
		HSM_CMD=down module_down || true
	fi
	exit "$rc"
}

# hsm_main "$@" — parse, then call module_up / module_down / module_restart
# defined by the sourcing script.
hsm_main() {
	hsm_parse_args "$@"
	case "$HSM_CMD" in
	up)
		hsm_prepare_dir
		trap hsm_on_up_failure EXIT
		local t0=$SECONDS
		module_up
		trap - EXIT
		hsm_log "up: token '$HSM_LABEL' ready in $HSM_DIR ($((SECONDS - t0)) s); source $HSM_DIR/env"
		;;
	down)
		if [ ! -d "$HSM_DIR" ]; then
			hsm_log "down: $HSM_DIR does not exist; nothing to stop"
			return 0
		fi
		module_down
		;;
	restart-backend)
		[ -d "$HSM_DIR" ] || hsm_die "$HSM_DIR does not exist (run up first)"
		module_restart
		;;
	esac
}
