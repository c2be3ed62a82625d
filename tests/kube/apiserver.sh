#!/usr/bin/env bash
# A real, single-node Kubernetes API server for tests: etcd plus the
# kube-apiserver that build-apiserver.sh builds from Debian's source package,
# both on 127.0.0.1 only, with every file under one folder DIR.
#
#   tests/kube/apiserver.sh start DIR             etcd + kube-apiserver, wait for /readyz
#                                                 and the system namespaces
#   KUBE_CONTROLLER_MANAGER=1 tests/kube/apiserver.sh start DIR
#                                                 the same plus kube-controller-manager's
#                                                 deployment and replicaset controllers,
#                                                 waited for until their caches are synced
#   tests/kube/apiserver.sh stop DIR              stop all (TERM, KILL after KUBE_STOP_GRACE=3 s)
#   tests/kube/apiserver.sh restart-apiserver DIR kube-apiserver only; same port, same data
#                                                 (a running controller manager stays and
#                                                 reconnects; one that has exited is started)
#   tests/kube/apiserver.sh env DIR               print DIR/env as `export` lines
#   tests/kube/apiserver.sh status DIR            exit 0 if all that was started is running
#
# After `start`, DIR holds:
#   env            KEY=VALUE lines, shell-sourceable (no quoting needed: DIR
#                  may not contain whitespace or quotes):
#                    KUBE_APISERVER=https://127.0.0.1:PORT
#                    KUBE_TOKEN_FILE=DIR/admin-token       (group system:masters)
#                    KUBE_USER_TOKEN_FILE=DIR/user-token   (authenticated, no RBAC rights)
#                    KUBE_CA_FILE=DIR/apiserver.crt        (self-signed serving cert)
#                    KUBECONFIG=DIR/kubeconfig             (admin token)
#                    KUBE_SA_ISSUER, KUBE_SA_PUBLIC_KEY, KUBE_API_AUDIENCES,
#                    KUBE_ETCD, KUBE_APISERVER_LOG, KUBE_ETCD_LOG
#                    KUBE_CONTROLLER_MANAGER_LOG=DIR/controller-manager.log
#                                          (only with KUBE_CONTROLLER_MANAGER=1)
#   pids           ETCD_PID=..., APISERVER_PID=..., CONTROLLER_MANAGER_PID=...
#                  (shell-sourceable; the last one empty without the
#                  controller manager)
#   ports          the ports chosen at the first start, reused on every later
#                  start and restart so that clients and data stay valid
#   etcd/          etcd's data; apiserver.log, etcd.log, controller-manager.log
#
# The ports are chosen free at the first start, below the kernel's
# ephemeral range (free_ports). Each daemon runs in its own session under
# `timeout KUBE_LIFETIME` (default 7200 s), so a test that dies without
# calling stop leaves nothing running for long.
#
# kube-apiserver flags, and why (Kubernetes 1.20.2):
#   --bind-address/--advertise-address 127.0.0.1, --secure-port PORT
#                            loopback only (1.20 opens no plain-HTTP port by
#                            default; --insecure-port=0 only adds a warning)
#   --tls-cert-file/--tls-private-key-file  our self-signed cert (CA:TRUE, SANs
#                            127.0.0.1, localhost, kubernetes.default.svc...),
#                            so KUBE_CA_FILE is the serving cert itself;
#                            --cert-dir only catches anything else it writes
#   --etcd-servers           our etcd
#   --token-auth-file        static tokens: admin (system:masters) and an
#                            unprivileged user
#   --authorization-mode=RBAC  real RBAC with the bootstrap roles; anonymous
#                            auth stays on (1.20 default), which RBAC limits to
#                            /healthz, /livez, /readyz, /version
#   --service-account-issuer=https://kubernetes.default.svc.cluster.local,
#   --service-account-signing-key-file, --service-account-key-file
#                            an RSA-2048 pair made here (KUBE_SA_KEY_TYPE=ec
#                            makes a P-256 pair, tokens then use ES256):
#                            TokenRequest, TokenReview and the OIDC discovery
#                            endpoints (ServiceAccountIssuerDiscovery, beta and
#                            on by default in 1.20)
#   --service-account-jwks-uri=https://127.0.0.1:PORT/openid/v1/jwks
#                            so the discovery document names a URL that works
#                            here. /.well-known/openid-configuration and
#                            /openid/v1/jwks answer the admin token and every
#                            service-account token (the bootstrap binding
#                            system:service-account-issuer-discovery), not
#                            anonymous callers (403), as in 1.20 clusters
#   --api-audiences=https://kubernetes.default.svc.cluster.local,istio-ca
#                            tokens for istio-ca are accepted by TokenReview
#   --service-cluster-ip-range=10.96.0.0/12  required to allocate the
#                            `kubernetes` Service's address (bookkeeping only;
#                            nothing listens on it)
#   --disable-admission-plugins=ServiceAccount  its pod checks need the
#                            service-account and token controllers of
#                            kube-controller-manager, which do not run here
#                            (every Pod would be refused). Kept with the
#                            controller manager too: Pods are then admitted
#                            without a ServiceAccount or token volume, which
#                            is fine as no kubelet runs them. All other
#                            default plugins stay on.
#   --endpoint-reconciler-type=none  the `kubernetes` Service's Endpoints may
#                            not hold a loopback address, so the default lease
#                            reconciler would only log an error every 10 s
#   --profiling=false        no /debug/pprof
#   everything else at 1.20's defaults (priority and fairness, watch cache,
#   anonymous auth), as in a real control plane.
#
# kube-controller-manager (only with KUBE_CONTROLLER_MANAGER=1; built beside
# kube-apiserver by build-apiserver.sh --controller-manager), flags and why:
#   --kubeconfig=DIR/kubeconfig  the admin token (system:masters), so no RBAC
#                            for a controller identity to set up
#   --use-service-account-credentials=false  every controller uses that one
#                            identity, not a ServiceAccount token of its own
#                            (no token controller runs to mint them)
#   --controllers=deployment,replicaset  Deployments make ReplicaSets, and
#                            ReplicaSets make Pods, which a test then marks
#                            Running/Ready or failed itself (kube_rest.py's
#                            simulated kubelet: there is no kubelet and no
#                            scheduler, so Pods stay without a node; the
#                            controllers count such a Pod as available all
#                            the same, they look only at its Ready
#                            condition). Deliberately left out: namespace
#                            (tests rely on a deleted namespace staying
#                            Terminating), garbagecollector (ownerReferences
#                            are not followed: deleting a Deployment leaves
#                            its ReplicaSets and Pods), serviceaccount and
#                            serviceaccount-token (not needed with the
#                            ServiceAccount admission plugin off), podgc and
#                            nodelifecycle (no nodes), and everything else.
#   --leader-elect=false     one instance; no Lease in kube-system that
#                            tests listing Leases would see
#   --port=0 --secure-port=0  no listener at all (1.20 allows both: the
#                            insecure port is deprecated, and 0 disables the
#                            secure one); readiness is read from its log
#                            instead: "Caches are synced for deployment" and
#                            "... ReplicaSet", after which a Deployment
#                            created is acted on at once
#   --profiling=false        as for kube-apiserver
# Without the controller manager (the default): no Deployment or ReplicaSet
# is acted on. In both cases: no namespace finalisation (a deleted
# namespace stays Terminating), no garbage collection, no default
# ServiceAccount per namespace and no legacy token Secrets.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
ready_timeout=${KUBE_READY_TIMEOUT:-60}
lifetime=${KUBE_LIFETIME:-7200}
stop_grace=${KUBE_STOP_GRACE:-3}
issuer=https://kubernetes.default.svc.cluster.local
audiences=$issuer,istio-ca

log() { printf 'apiserver.sh: %s\n' "$*" >&2; }
# on_die: what to stop when a start fails, so a failed start leaves nothing
# running ("all" or empty; set by the commands below).
on_die=''
die() {
  log "error: $*"
  case $on_die in
    all)
      stop_pid "${CONTROLLER_MANAGER_PID:-}" kube-controller-manager
      stop_pid "${APISERVER_PID:-}" kube-apiserver
      stop_pid "${ETCD_PID:-}" etcd ;;
  esac
  [ -z "$on_die" ] || rm -f "$dir/pids"
  exit 1
}

usage() {
  echo "usage: $0 start|stop|restart-apiserver|env|status DIR" >&2
  exit 2
}

[ $# -eq 2 ] || usage
cmd=$1
case $2 in
  /*) dir=$2 ;;
  *) dir=$(pwd)/$2 ;;
esac
case $dir in
  *[[:space:]\'\"\\\$]*) die "DIR must not contain whitespace, quotes, backslashes or \$: $dir" ;;
esac

# --- processes ---------------------------------------------------------------

# True if PID is alive and still runs our program (guards against reuse).
alive() {
  local pid=$1
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -q "$2"
}

# Whether a daemon this run just spawned is still running. alive() would
# do for a pid read from a file, but not here: between spawn's fork and its
# exec the child's command line is still this script's, with no daemon name
# in it, and a loaded machine stretches that window past the first health
# poll ("etcd exited during start" with an empty log). The spawned pid is
# our own child, so it is alive while it exists and is no zombie.
spawned_alive() {
  local pid=$1
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] && ! grep -qE '^[0-9]+ \(.*\) Z ' "/proc/$pid/stat" 2>/dev/null
}

read_pids() {
  ETCD_PID='' APISERVER_PID='' CONTROLLER_MANAGER_PID=''
  # shellcheck disable=SC1091
  [ -f "$dir/pids" ] && . "$dir/pids"
  return 0
}

write_pids() {
  printf 'ETCD_PID=%s\nAPISERVER_PID=%s\nCONTROLLER_MANAGER_PID=%s\n' \
    "$ETCD_PID" "$APISERVER_PID" "$CONTROLLER_MANAGER_PID" >"$dir/pids.tmp"
  mv "$dir/pids.tmp" "$dir/pids"
}

# Stops the daemon whose `timeout` wrapper is PID (a session leader): TERM to
# the wrapper, which passes it on once (a second TERM would make
# kube-apiserver exit at once), then KILL to the whole process group after
# $stop_grace seconds. kube-apiserver 1.20 answers TERM by closing its
# listener at once but then waits up to 60 s for open watches to end; a
# kubelet kills it at the end of the pod's grace period, and so do we.
stop_pid() {
  local pid=$1 what=$2 i
  alive "$pid" "$what" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < stop_grace * 10; i++)); do
    alive "$pid" "$what" || return 0
    sleep 0.1
  done
  log "$what ($pid) still running ${stop_grace}s after TERM; killing it"
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    alive "$pid" "$what" || return 0
    sleep 0.1
  done
  log "error: $what ($pid) survived KILL"
  return 1
}

# Starts "$@" in its own session, bounded by $lifetime; sets $started_pid.
spawn() {
  local logfile=$1; shift
  setsid timeout -k 10 "$lifetime" "$@" </dev/null >>"$logfile" 2>&1 &
  started_pid=$!
}

# --- files -------------------------------------------------------------------

# N free ports below the kernel's ephemeral range. A port in that range
# that is free when chosen can be taken by any outgoing connection on the
# machine before the daemon binds it (the API server binds seconds later,
# after etcd is up); one was, once, in a stress run ("bind: address already
# in use"). Below the range only another deliberate choice can take it.
# Each candidate is bound to prove it free, and all are held until all are
# chosen.
free_ports() {
  /usr/bin/python3 - "$1" <<'EOF'
import random, socket, sys
with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
    low = int(f.read().split()[0])
first = max(1024, low - 16384)
socks = []
while len(socks) < int(sys.argv[1]):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", random.randrange(first, low) if low - first >= 1024 else 0))
        socks.append(s)
    except OSError:
        s.close()
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

make_files() {
  mkdir -p "$dir/etcd" "$dir/certs"
  chmod 700 "$dir/etcd"
  if [ ! -f "$dir/ports" ]; then
    local ports
    read -r -a ports <<<"$(free_ports 3)"
    [ ${#ports[@]} -eq 3 ] || die "could not pick free ports (python3)"
    printf 'ETCD_CLIENT_PORT=%s\nETCD_PEER_PORT=%s\nAPISERVER_PORT=%s\n' "${ports[@]}" >"$dir/ports"
  fi
  # shellcheck disable=SC1091
  . "$dir/ports"

  if [ ! -f "$dir/apiserver.crt" ]; then
    cat >"$dir/apiserver-cert.cnf" <<'EOF'
[req]
distinguished_name = dn
x509_extensions = ext
prompt = no
[dn]
CN = signet-test-kube-apiserver
[ext]
basicConstraints = critical,CA:TRUE
keyUsage = critical,digitalSignature,keyCertSign
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
subjectAltName = IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
EOF
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
      -config "$dir/apiserver-cert.cnf" -keyout "$dir/apiserver.key" -out "$dir/apiserver.crt" 2>/dev/null ||
      die "openssl could not make the serving certificate"
    chmod 600 "$dir/apiserver.key"
  fi

  if [ ! -f "$dir/sa.key" ]; then
    case ${KUBE_SA_KEY_TYPE:-rsa} in
      rsa) openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$dir/sa.key" 2>/dev/null ;;
      ec) openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$dir/sa.key" 2>/dev/null ;;
      *) die "KUBE_SA_KEY_TYPE must be rsa or ec" ;;
    esac
    chmod 600 "$dir/sa.key"
    openssl pkey -in "$dir/sa.key" -pubout -out "$dir/sa.pub" 2>/dev/null
  fi

  if [ ! -f "$dir/tokens.csv" ]; then
    (umask 077
     openssl rand -hex 32 >"$dir/admin-token"
     openssl rand -hex 32 >"$dir/user-token"
     printf '%s,signet-admin,signet-admin-uid,"system:masters"\n' "$(cat "$dir/admin-token")" >"$dir/tokens.csv"
     printf '%s,signet-user,signet-user-uid,"signet:unprivileged"\n' "$(cat "$dir/user-token")" >>"$dir/tokens.csv")
  fi

  local url=https://127.0.0.1:$APISERVER_PORT
  (umask 077
   cat >"$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: signet-test
  cluster:
    server: $url
    certificate-authority: $dir/apiserver.crt
users:
- name: signet-admin
  user:
    token: $(cat "$dir/admin-token")
contexts:
- name: signet-test
  context:
    cluster: signet-test
    user: signet-admin
    namespace: default
current-context: signet-test
EOF
  )
  cat >"$dir/env" <<EOF
KUBE_APISERVER=$url
KUBE_TOKEN_FILE=$dir/admin-token
KUBE_USER_TOKEN_FILE=$dir/user-token
KUBE_CA_FILE=$dir/apiserver.crt
KUBECONFIG=$dir/kubeconfig
KUBE_SA_ISSUER=$issuer
KUBE_SA_PUBLIC_KEY=$dir/sa.pub
KUBE_API_AUDIENCES=$audiences
KUBE_ETCD=http://127.0.0.1:$ETCD_CLIENT_PORT
KUBE_APISERVER_LOG=$dir/apiserver.log
KUBE_ETCD_LOG=$dir/etcd.log
EOF
  if [ "$with_cm" = 1 ]; then
    echo "KUBE_CONTROLLER_MANAGER_LOG=$dir/controller-manager.log" >>"$dir/env"
  fi
}

# --- daemons -----------------------------------------------------------------

show_log() {
  log "last lines of $1:"
  tail -n "${2:-30}" "$1" >&2 || true
}

start_etcd() {
  command -v etcd >/dev/null || die "etcd not installed (apt-get install etcd-server)"
  local client=http://127.0.0.1:$ETCD_CLIENT_PORT peer=http://127.0.0.1:$ETCD_PEER_PORT
  spawn "$dir/etcd.log" etcd --name signet-test --data-dir "$dir/etcd" \
    --listen-client-urls "$client" --advertise-client-urls "$client" \
    --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
    --initial-cluster "signet-test=$peer" --initial-cluster-state new \
    --logger zap --log-level warn
  ETCD_PID=$started_pid
  write_pids
  local deadline=$((SECONDS + ready_timeout))
  until curl -sf --max-time 2 "$client/health" 2>/dev/null | grep -q '"health":"true"'; do
    spawned_alive "$ETCD_PID" || { show_log "$dir/etcd.log"; die "etcd exited during start"; }
    [ $SECONDS -lt $deadline ] || { show_log "$dir/etcd.log"; die "etcd not healthy after ${ready_timeout}s"; }
    sleep 0.2
  done
}

start_apiserver() {
  local bin
  bin=$("$here/build-apiserver.sh" | tail -n 1) || die "no kube-apiserver (build-apiserver.sh failed)"
  local url=https://127.0.0.1:$APISERVER_PORT
  echo "--- start $(date -u +%FT%TZ)" >>"$dir/apiserver.log"
  spawn "$dir/apiserver.log" "$bin" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 \
    --secure-port="$APISERVER_PORT" \
    --cert-dir="$dir/certs" \
    --tls-cert-file="$dir/apiserver.crt" --tls-private-key-file="$dir/apiserver.key" \
    --etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --token-auth-file="$dir/tokens.csv" \
    --authorization-mode=RBAC \
    --service-account-issuer="$issuer" \
    --service-account-key-file="$dir/sa.pub" \
    --service-account-signing-key-file="$dir/sa.key" \
    --service-account-jwks-uri="$url/openid/v1/jwks" \
    --api-audiences="$audiences" \
    --service-cluster-ip-range=10.96.0.0/12 \
    --disable-admission-plugins=ServiceAccount \
    --endpoint-reconciler-type=none \
    --profiling=false
  APISERVER_PID=$started_pid
  write_pids
  local deadline=$((SECONDS + ready_timeout)) body=''
  while :; do
    body=$(curl -s --max-time 2 --cacert "$dir/apiserver.crt" "$url/readyz" 2>/dev/null || true)
    [ "$body" = ok ] && break
    spawned_alive "$APISERVER_PID" || { show_log "$dir/apiserver.log"; die "kube-apiserver exited during start"; }
    if [ $SECONDS -ge $deadline ]; then
      show_log "$dir/apiserver.log"
      curl -s --max-time 2 --cacert "$dir/apiserver.crt" "$url/readyz?verbose" >&2 || true
      die "kube-apiserver not ready after ${ready_timeout}s"
    fi
    sleep 0.3
  done
  # /readyz says the server serves, not that its system-namespaces controller
  # has run: that controller creates default, kube-system, kube-public and
  # kube-node-lease a moment later, on its own goroutine. Tests create objects
  # in them at once, so wait until all four can be read.
  local ns code hdr=$dir/admin-auth.hdr
  # The token goes to curl in a header file, not on its command line.
  (umask 077 && printf 'Authorization: Bearer %s\n' "$(cat "$dir/admin-token")" >"$hdr")
  for ns in default kube-system kube-public kube-node-lease; do
    while :; do
      code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 --cacert "$dir/apiserver.crt" \
        -H @"$hdr" "$url/api/v1/namespaces/$ns" 2>/dev/null || true)
      [ "$code" = 200 ] && break
      spawned_alive "$APISERVER_PID" || { show_log "$dir/apiserver.log"; die "kube-apiserver exited during start"; }
      [ $SECONDS -lt $deadline ] || { show_log "$dir/apiserver.log"; die "namespace $ns not created after ${ready_timeout}s (last answer $code)"; }
      sleep 0.2
    done
  done
}

# The controller manager, once kube-apiserver is ready. Its readiness is in
# its log only (it opens no port): the lines WaitForNamedCacheSync writes
# once the deployment and replicaset controllers have their informers'
# first lists, read from the part of the log this start appended.
start_controller_manager() {
  local bin logf=$dir/controller-manager.log
  bin=$("$here/build-apiserver.sh" --controller-manager | tail -n 1) ||
    die "no kube-controller-manager (build-apiserver.sh --controller-manager failed)"
  echo "--- start $(date -u +%FT%TZ)" >>"$logf"
  local from
  from=$(($(stat -c %s "$logf") + 1))
  spawn "$logf" "$bin" \
    --kubeconfig="$dir/kubeconfig" \
    --use-service-account-credentials=false \
    --controllers=deployment,replicaset \
    --leader-elect=false \
    --port=0 --secure-port=0 \
    --profiling=false
  CONTROLLER_MANAGER_PID=$started_pid
  write_pids
  local deadline=$((SECONDS + ready_timeout)) synced
  while :; do
    synced=$(tail -c +"$from" "$logf" | grep -cE 'Caches are synced for (deployment|ReplicaSet) ' || true)
    [ "$synced" -ge 2 ] && break
    spawned_alive "$CONTROLLER_MANAGER_PID" ||
      { show_log "$logf"; die "kube-controller-manager exited during start"; }
    [ $SECONDS -lt $deadline ] ||
      { show_log "$logf"; die "kube-controller-manager's controllers not synced after ${ready_timeout}s"; }
    sleep 0.2
  done
}

# --- commands ----------------------------------------------------------------

# with_cm: 1 to run kube-controller-manager (start only; later commands
# read the choice back from the pids file).
case ${KUBE_CONTROLLER_MANAGER:-0} in
  0 | '') with_cm=0 ;;
  1) with_cm=1 ;;
  *) die "KUBE_CONTROLLER_MANAGER must be 0 or 1" ;;
esac

case $cmd in
  start)
    mkdir -p "$dir"
    read_pids
    if alive "$ETCD_PID" etcd || alive "$APISERVER_PID" kube-apiserver ||
      alive "$CONTROLLER_MANAGER_PID" kube-controller-manager; then
      die "already running in $dir (stop it first)"
    fi
    CONTROLLER_MANAGER_PID=''
    make_files
    on_die=all
    start_etcd
    start_apiserver
    [ "$with_cm" = 0 ] || start_controller_manager
    on_die=''
    log "ready: $(sed -n 's/^KUBE_APISERVER=//p' "$dir/env") (env in $dir/env)"
    ;;
  restart-apiserver)
    [ -f "$dir/ports" ] || die "nothing started in $dir"
    read_pids
    alive "$ETCD_PID" etcd || die "etcd is not running in $dir"
    # shellcheck disable=SC1091
    . "$dir/ports"
    stop_pid "$APISERVER_PID" kube-apiserver
    APISERVER_PID=''
    write_pids
    on_die=all
    start_apiserver
    # A controller manager that was started stays through the restart (its
    # informers list and watch again, as against a real control plane); one
    # that has exited meanwhile is started again.
    if [ -n "$CONTROLLER_MANAGER_PID" ] && ! alive "$CONTROLLER_MANAGER_PID" kube-controller-manager; then
      start_controller_manager
    fi
    on_die=''
    log "kube-apiserver restarted"
    ;;
  stop)
    read_pids
    stop_pid "$CONTROLLER_MANAGER_PID" kube-controller-manager
    stop_pid "$APISERVER_PID" kube-apiserver
    stop_pid "$ETCD_PID" etcd
    rm -f "$dir/pids"
    ;;
  env)
    [ -f "$dir/env" ] || die "no $dir/env (start first)"
    sed 's/^/export /' "$dir/env"
    ;;
  status)
    read_pids
    alive "$ETCD_PID" etcd && alive "$APISERVER_PID" kube-apiserver &&
      { [ -z "$CONTROLLER_MANAGER_PID" ] || alive "$CONTROLLER_MANAGER_PID" kube-controller-manager; }
    ;;
  *) usage ;;
esac
