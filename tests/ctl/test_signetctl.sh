#!/usr/bin/env bash
# End-to-end: signetctl init / issue / csr / import / status on real SoftHSM2
# tokens; every chain verified by `openssl verify` and checked field by field
# by check_cert.py; secrets kept out of logs and argv; the SO PIN kept out of
# the folder signetd reads; signetctl non-dumpable; errors are one line.
set -euo pipefail
ctl=$1
check=$2
py=/usr/bin/python3
tmp=$(mktemp -d "${SIGNET_TEST_TMP:-/tmp}/ctl.XXXXXX")
# What runs as another user (below) runs from the system's temporary folder:
# the checkout, and so the build folder, may be one only root can enter.
shared=$(mktemp -d)
chmod 755 "$shared"
trap 'rm -rf "$tmp" "$shared"' EXIT
failures=0
pass() { echo "ok   $1"; }
fail() { echo "FAIL $1" >&2; failures=$((failures + 1)); }
expect() { local name=$1; shift; if "$@"; then pass "$name"; else fail "$name"; fi; }

csr() { # csr FILE KEYSPEC SAN
  local file=$1 key=$2 san=$3
  case $key in
    ec-*) openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:"${key#ec-}" -nodes -keyout "$file.key" \
            -subj / -addext "subjectAltName=$san" -out "$file" 2>/dev/null ;;
    rsa-*) openssl req -new -newkey rsa:"${key#rsa-}" -nodes -keyout "$file.key" \
            -subj / -addext "subjectAltName=$san" -out "$file" 2>/dev/null ;;
  esac
}
id=spiffe://cluster.local/ns/default/sa/default
csr "$tmp/p256.csr" ec-P-256 "critical,URI:$id"
csr "$tmp/rsa.csr" rsa-2048 "critical,URI:$id"

# --- init for each CA key type, with PIN hygiene checked on the way -------
for kt in ecdsa-p256 ecdsa-p384 rsa-2048; do
  d=$tmp/$kt
  # LeakSanitizer cannot run under ptrace; the leak check runs elsewhere.
  ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 strace -f -qq -e trace=execve -s 256 -o "$tmp/$kt.trace" \
    "$ctl" init --dir "$d" --key-type "$kt" --log-level debug >"$tmp/$kt.log" 2>&1 || { fail "init $kt"; cat "$tmp/$kt.log"; continue; }
  pass "init $kt"
  expect "$kt: pin is 0600" test "$(stat -c %a "$d/pin")" = 600
  # The SO PIN goes beside the folder, never into it (signetd reads DIR).
  expect "$kt: SO PIN in DIR.so-pin, mode 0400" test "$(stat -c %a "$d.so-pin")/$(stat -c %s "$d.so-pin")" = 400/32
  expect "$kt: no SO PIN file inside DIR" test ! -e "$d/so-pin"
  expect "$kt: SO PIN bytes nowhere in DIR" bash -c "! grep -rqF -- \"\$(cat $d.so-pin)\" $d"
  expect "$kt: signet.conf does not name the SO PIN" bash -c "! grep -qi 'so-pin\|so_pin' $d/signet.conf"
  expect "$kt: init says where the SO PIN is" grep -qF "$d.so-pin (mode 0400)" "$tmp/$kt.log"
  expect "$kt: SO PIN differs from the user PIN" test "$(cat "$d.so-pin")" != "$(cat "$d/pin")"
  expect "$kt: no program is executed (no PIN in any argv)" test "$(grep -c execve "$tmp/$kt.trace")" = 1
  expect "$kt: PIN not in the init trace" bash -c "! grep -qF -- \"\$(cat $d/pin)\" $tmp/$kt.trace"
  expect "$kt: root is a self-signed CA" openssl verify -CAfile "$d/root-cert.pem" "$d/root-cert.pem"
  for c in p256 rsa; do
    out=$tmp/$kt-$c.pem
    if "$ctl" issue --config "$d/signet.conf" --csr "$tmp/$c.csr" --ttl 1h --log-level debug \
         --out "$out" >>"$tmp/$kt.log" 2>&1; then
      expect "$kt/$c: openssl verify" openssl verify -CAfile "$d/root-cert.pem" "$out"
      expect "$kt/$c: istio profile fields" $py "$check" istio "$out" "$d/root-cert.pem" "$id"
    else
      fail "$kt/$c: issue"; cat "$tmp/$kt.log"
    fi
  done
  expect "$kt: PIN in no log line" bash -c "! grep -qF -- \"\$(cat $d/pin)\" $tmp/$kt.log"
  expect "$kt: SO PIN in no log line" bash -c "! grep -qF -- \"\$(cat $d.so-pin)\" $tmp/$kt.log $tmp/$kt.trace"
  expect "$kt: status reports a healthy HSM" bash -c "'$ctl' status --config '$d/signet.conf' | grep -q '^hsm *ok'"
done
d=$tmp/ecdsa-p256

# --- refusals and errors --------------------------------------------------
# Names, types, modes, sizes, mtimes and contents of everything under $d, and
# nothing outside it: `ls -la` would also list "..", whose mtime moves when
# this script writes into $tmp.
snapshot() { (cd "$1" && find . -printf '%p %y %m %s %T@\n' | sort && find . -type f -exec sha256sum {} + | sort) | sha256sum; }
before=$(snapshot "$d")
so_before=$(stat -c '%a %s %Y' "$d.so-pin" && sha256sum <"$d.so-pin")
if "$ctl" init --dir "$d" 2>"$tmp/err"; then fail "init refuses an existing folder"; else pass "init refuses an existing folder"; fi
expect "refusal says why" grep -q "not empty" "$tmp/err"
expect "refused init changed nothing" test "$before" = "$(snapshot "$d")"
expect "refused init left the SO PIN file alone" test "$so_before" = "$(stat -c '%a %s %Y' "$d.so-pin" && sha256sum <"$d.so-pin")"

one_line_error() { # one_line_error WANT_EXIT PATTERN -- command...
  local want=$1 pat=$2; shift 3
  local rc=0
  "$@" >/dev/null 2>"$tmp/err" || rc=$?
  [ "$rc" = "$want" ] && [ "$(wc -l <"$tmp/err")" = 1 ] && grep -q -- "$pat" "$tmp/err"
}
printf 'garbage' >"$tmp/garbage.csr"
expect "garbage CSR: one line, exit 1" one_line_error 1 "signetctl issue:" -- "$ctl" issue --config "$d/signet.conf" --csr "$tmp/garbage.csr"
expect "unknown flag: exit 2" one_line_error 2 "--bogus" -- "$ctl" issue --bogus
expect "missing --csr" one_line_error 1 "--csr is required" -- "$ctl" issue --config "$d/signet.conf"
expect "unknown command: exit 2" bash -c "'$ctl' frobnicate 2>/dev/null; test \$? = 2"
expect "missing config file" one_line_error 2 "nope.conf" -- "$ctl" issue --config "$tmp/nope.conf" --csr "$tmp/p256.csr"
csr "$tmp/weak.csr" rsa-1024 "critical,URI:$id"
expect "weak key refused" one_line_error 1 "1024" -- "$ctl" issue --config "$d/signet.conf" --csr "$tmp/weak.csr"
chmod 644 "$d/pin"
expect "world-readable PIN file refused" one_line_error 1 "chmod 600" -- "$ctl" issue --config "$d/signet.conf" --csr "$tmp/p256.csr"
chmod 600 "$d/pin"
expect "init --help documents the SO PIN file" bash -c "'$ctl' init --help | grep -q -- '--so-pin-file' && '$ctl' init --help | grep -q 'DIR.so-pin'"
expect "--help documents every setting" bash -c "'$ctl' issue --help | grep -q -- '--verify-issued' && '$ctl' issue --help | grep -q -- '--hsm-copy-key'"

# GNU forms: --name=value, bare booleans, --name=false; flags override the file.
expect "--name=value and bare booleans" "$ctl" issue --config="$d/signet.conf" --csr="$tmp/p256.csr" \
  --signer-threads=2 --verify-issued --hsm-copy-key=false --out "$tmp/forms.pem"
expect "flag overrides config (bad root-cert refused)" one_line_error 1 "nonexistent" -- \
  "$ctl" issue --config "$d/signet.conf" --csr "$tmp/p256.csr" --root-cert "$tmp/nonexistent.pem"

# --- the SO PIN file: where it goes, what is refused, nothing left behind ----
# Nothing named after a folder exists in $tmp (the folder, DIR.so-pin, temporaries).
nothing_of() { ! compgen -G "$1*" >/dev/null; }
mkdir "$tmp/offline" "$tmp/empty"
so=$tmp/offline/so.pin
expect "init --so-pin-file" "$ctl" init --dir "$tmp/so" --so-pin-file "$so" --log-level warn >/dev/null
expect "--so-pin-file: written there, mode 0400" test "$(stat -c %a "$so")/$(stat -c %s "$so")" = 400/32
expect "--so-pin-file: not beside DIR, not in DIR" test ! -e "$tmp/so.so-pin" -a ! -e "$tmp/so/so-pin"
expect "--so-pin-file: signet.conf does not name it" bash -c "! grep -qi 'so-pin\|offline' $tmp/so/signet.conf"
expect "--so-pin-file: the CA works" "$ctl" issue --config "$tmp/so/signet.conf" --csr "$tmp/p256.csr" --out "$tmp/so.pem"
# The file holds the token's SO PIN: re-initialising the token (which needs
# it) fails with another and succeeds with it. (softhsm2-util takes PINs
# only in argv; this throwaway token is destroyed by the last step.)
reinit() { SOFTHSM2_CONF=$tmp/so/softhsm2.conf softhsm2-util --init-token --token signet-ca --label signet-ca \
             --so-pin "$1" --pin 123456 </dev/null >/dev/null 2>&1; }
if command -v softhsm2-util >/dev/null; then
  wrong_so_pin_refused() { ! reinit 00000000; }
  expect "SO PIN file: a wrong SO PIN is refused by the token" wrong_so_pin_refused
  expect "SO PIN file: the token accepts the written SO PIN" reinit "$(cat "$so")"
else
  echo "skip SO PIN check against the token: softhsm2-util is not installed"
fi

so_sum=$(sha256sum <"$so")
expect "an existing SO PIN file is refused" one_line_error 1 "already exists" -- \
  "$ctl" init --dir "$tmp/so2" --so-pin-file "$so"
expect "...and nothing is created" nothing_of "$tmp/so2"
expect "...and the SO PIN file is unchanged" test "$so_sum" = "$(sha256sum <"$so")"
touch "$tmp/so3.so-pin"
expect "an existing DIR.so-pin is refused" one_line_error 1 "already exists" -- "$ctl" init --dir "$tmp/so3"
expect "a key label with a control character is refused" one_line_error 2 "control characters" -- \
  "$ctl" init --dir "$tmp/label" --key-label "$(printf 'a\tb')"
expect "a key label ending in a space is refused" one_line_error 2 "end with a space" -- \
  "$ctl" init --dir "$tmp/label" --key-label 'padded '
expect "an empty key label is refused" one_line_error 2 "must not be empty" -- "$ctl" init --dir "$tmp/label" --key-label ''
expect "a refused label left no folder" test ! -e "$tmp/label"
expect "...and DIR is not created" test ! -e "$tmp/so3"
expect "an SO PIN file inside DIR is refused" one_line_error 1 "inside" -- \
  "$ctl" init --dir "$tmp/empty" --so-pin-file "$tmp/empty/so.pin"
ln -s "$tmp/empty" "$tmp/empty-link"
expect "...also through a symlink" one_line_error 1 "inside" -- \
  "$ctl" init --dir "$tmp/empty" --so-pin-file "$tmp/empty-link/so.pin"
expect "...and the empty DIR stays empty" test -z "$(ls -A "$tmp/empty")"
expect "an SO PIN file in a missing folder is refused" one_line_error 1 "cannot resolve" -- \
  "$ctl" init --dir "$tmp/so4" --so-pin-file "$tmp/missing/so.pin"
expect "...and nothing is created" nothing_of "$tmp/so4"
expect "--so-pin-file with --hsm-module: usage error" one_line_error 2 "--so-pin-file" -- \
  "$ctl" init --dir "$tmp/so5" --hsm-module /nonexistent.so --pin-file "$tmp/so/pin" --so-pin-file "$tmp/so5.pin"
# A failure at the very last step (a stale temporary file where the SO PIN is
# written: sg_file_write_new's "<path>.new") comes after the token, key, root
# and config were made: all of it is removed, and no SO PIN is left.
touch "$tmp/offline/late.pin.new"
expect "init failing at the last step exits 1" one_line_error 1 "late.pin" -- \
  "$ctl" init --dir "$tmp/late" --so-pin-file "$tmp/offline/late.pin"
expect "...and leaves no folder" nothing_of "$tmp/late"
expect "...and no SO PIN file" test ! -e "$tmp/offline/late.pin"
expect "...and someone else's file alone" test -e "$tmp/offline/late.pin.new"

# --- signetctl makes itself non-dumpable ----------------------------------
# A non-dumpable process's /proc/PID files (mem among them) are root's
# whoever runs it, and its own user can no longer ptrace it or read its
# memory. Run signetctl as an
# ordinary user (nobody, when this runs as root), blocked reading a CSR from
# a FIFO, and watch /proc/PID/mem change hands once it runs as that user.
runas=()
[ "$(id -u)" = 0 ] && command -v setpriv >/dev/null && runas=(setpriv --reuid=65534 --regid=65534 --clear-groups)
if [ "$(id -u)" = 0 ] && [ ${#runas[@]} = 0 ]; then
  echo "skip non-dumpable check: running as root without setpriv"
else
  uid=$(id -u); [ ${#runas[@]} != 0 ] && uid=65534
  runctl=$shared/signetctl
  cp "$ctl" "$runctl"
  chmod 755 "$runctl"
  if [ ${#runas[@]} != 0 ] && ! "${runas[@]}" test -x "$runctl"; then
    fail "uid 65534 cannot reach $runctl: set TMPDIR to a folder every user can traverse"
  fi
  mkfifo "$shared/csr.fifo"
  ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 "${runas[@]}" "$runctl" issue --csr - <"$shared/csr.fifo" >/dev/null 2>&1 &
  pid=$!
  exec 3>"$shared/csr.fifo"
  # The process must be signetctl itself: setpriv's change of uid alone
  # makes /proc/PID/mem root's before it executes signetctl.
  nondumpable() {
    local i u
    for i in $(seq 1200); do # up to a minute: a sanitized signetctl starts slowly on a loaded machine
      u=$(awk '/^Uid:/{print $2}' "/proc/$pid/status" 2>/dev/null) || return 1
      [ "$(readlink "/proc/$pid/exe")" = "$runctl" ] && [ "$u" = "$uid" ] &&
        [ "$(stat -c %u "/proc/$pid/mem")" = 0 ] && return 0
      sleep 0.05
    done
    return 1
  }
  expect "signetctl is non-dumpable (/proc/PID/mem is root's, process runs as uid $uid)" nondumpable
  kill "$pid" 2>/dev/null || true
  exec 3>&-
  wait "$pid" 2>/dev/null || true
fi

# --- intermediate CA: B's key in its own token, signed by A's root --------
a=$tmp/ecdsa-p256 b=$tmp/sub
"$ctl" init --dir "$b" --key-type rsa-2048 --trust-domain cluster.local --log-level warn >/dev/null
expect "csr for the HSM key" "$ctl" csr --config "$b/signet.conf" --subject "O=example,CN=signet issuing CA" --out "$tmp/b.csr"
expect "CSR self-signature verifies (openssl)" openssl req -in "$tmp/b.csr" -noout -verify
expect "A signs B as an intermediate" "$ctl" issue --config "$a/signet.conf" --profile intermediate \
  --csr "$tmp/b.csr" --path-len 0 --ttl 8760h --out "$tmp/b-chain.pem"
openssl x509 -in "$tmp/b-chain.pem" -out "$tmp/b-cert.pem"
expect "intermediate fields" $py "$check" intermediate "$tmp/b-chain.pem" "$a/root-cert.pem"
expect "import refuses a certificate of another key" one_line_error 1 "not the HSM key" -- \
  "$ctl" import --config "$b/signet.conf" --cert "$a/root-cert.pem" --root "$a/root-cert.pem"
expect "import refuses a cert that does not chain" one_line_error 1 "does not chain" -- \
  "$ctl" import --config "$b/signet.conf" --cert "$tmp/b-cert.pem" --root "$b/root-cert.pem"
expect "import the signed CA certificate" "$ctl" import --config "$b/signet.conf" --cert "$tmp/b-cert.pem" --root "$a/root-cert.pem"
expect "B issues under A" "$ctl" issue --config "$b/signet.conf" --csr "$tmp/p256.csr" --out "$tmp/leaf-b.pem"
expect "chain is [leaf, intermediate, root]" test "$(grep -c BEGIN "$tmp/leaf-b.pem")" = 3
awk '/BEGIN/{n++} n==2' "$tmp/leaf-b.pem" >"$tmp/inter.pem"
expect "openssl verify through the intermediate" openssl verify -CAfile "$a/root-cert.pem" -untrusted "$tmp/inter.pem" "$tmp/leaf-b.pem"
expect "istio fields under the intermediate" $py "$check" istio "$tmp/leaf-b.pem" "$a/root-cert.pem" "$id"

# --- cel: a policy rule tried as the approver runs it ---------------------
cel_is() { # cel_is WANT_EXIT WANT_JSON -- args...: stdout parsed and compared by Python's json
  local want_rc=$1 want=$2; shift 3
  local out rc=0
  out=$("$ctl" cel "$@" 2>"$tmp/cel.err") || rc=$?
  [ "$rc" = "$want_rc" ] || { echo "exit $rc, want $want_rc: $out $(cat "$tmp/cel.err")" >&2; return 1; }
  $py -c 'import json,sys; g=json.loads(sys.argv[1]); w=json.loads(sys.argv[2]); sys.exit(0 if g == w else print(g, "!=", w) or 1)' "$out" "$want"
}
expect "cel: a SPIFFE rule bound to cr.namespace" cel_is 0 '{"type": "bool", "value": true}' -- \
  --expr "self.startsWith('spiffe://cluster.local/ns/' + cr.namespace + '/sa/')" \
  --self spiffe://cluster.local/ns/team-a/sa/web --cr-namespace team-a
expect "cel: the same rule, another namespace" cel_is 0 '{"type": "bool", "value": false}' -- \
  --expr "self.startsWith('spiffe://cluster.local/ns/' + cr.namespace + '/sa/')" \
  --self spiffe://cluster.local/ns/team-a/sa/web --cr-namespace team-b
expect "cel: cr.name, cr.username, cr.groups" cel_is 0 '{"type": "bool", "value": true}' -- \
  --expr "cr.name == 'web' && cr.username == 'alice' && 'devs' in cr.groups && size(cr.groups) == 2" \
  --cr-name web --cr-username alice --cr-groups "system:authenticated, devs"
expect "cel: any type, each value typed" cel_is 0 \
  '{"type": "list", "value": [{"type": "int", "value": 1}, {"type": "uint", "value": 2}, {"type": "double", "value": "NaN"}, {"type": "bytes", "value": "AAE="}, {"type": "null", "value": null}, {"type": "type", "value": "string"}]}' \
  -- --expr "[1, 2u, double('NaN'), b'\\x00\\x01', null, type('')]"
expect "cel: an evaluation error is exit 1 and {error}" cel_is 1 \
  '{"error": "evaluation error: type conversion error from '"'string'"' to '"'int'"'"}' -- --expr "int(self)" --self abc
expect "cel: a syntax error is exit 2, positioned, on stderr" bash -c \
  "'$ctl' cel --expr 'self +' >'$tmp/cel.out' 2>'$tmp/cel.err'; test \$? = 2 && test ! -s '$tmp/cel.out' && grep -q '<input>:1:7: Syntax error' '$tmp/cel.err'"
expect "cel: an undeclared name is exit 2" bash -c "'$ctl' cel --expr 'nope == 1' >/dev/null 2>&1; test \$? = 2"
expect "cel: --expr is required" one_line_error 2 "--expr is required" -- "$ctl" cel
expect "cel: --help documents every flag" bash -c "'$ctl' cel --help | grep -q -- '--cr-groups' && '$ctl' --help | grep -q '  cel '"

echo "$failures failed"
[ "$failures" = 0 ]
