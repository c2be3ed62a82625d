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

# --- policy check: a CertificateRequestPolicy's verdict, offline -----------
# Policies are approver-policy's documented examples (docs/examples in
# cert-manager/approver-policy; example.com's is shared with the approver's
# own test through tests/policy/cases/), requests are made from openssl
# CSRs as cert-manager would post them.
cases=$(cd "$(dirname "$0")/../policy/cases" && pwd)
pd=$tmp/policy
mkdir -p "$pd"
pcsr() { # pcsr FILE SUBJECT [SAN]: an RSA 2048 CSR
  local ext=()
  [ -z "${3:-}" ] || ext=(-addext "subjectAltName=$3")
  openssl req -new -newkey rsa:2048 -nodes -keyout "$1.key" -subj "$2" "${ext[@]}" -out "$1" 2>/dev/null
}
pcr() { # pcr NAME CSR ISSUER [USAGE]: a CertificateRequest in namespace team-a, YAML
  printf 'apiVersion: cert-manager.io/v1\nkind: CertificateRequest\nmetadata:\n  name: %s\n  namespace: team-a\n' "$1"
  printf 'spec:\n  issuerRef:\n    name: %s\n    kind: Issuer\n    group: cert-manager.io\n' "$3"
  [ -z "${4:-}" ] || printf '  usages:\n    - %s\n' "$4"
  printf '  request: %s\n' "$(base64 -w0 "$2")"
}
pcsr "$pd/www.csr" /CN=example.com DNS:www.example.com
pcsr "$pd/wild.csr" /CN=example.com 'DNS:*.example.com'
pcsr "$pd/cn.csr" /CN=example.com
pcr le-1 "$pd/www.csr" letsencrypt-prod "server auth" >"$pd/www.yaml"
pcr le-2 "$pd/wild.csr" letsencrypt-prod "server auth" >"$pd/wild.yaml"
pcr other "$pd/www.csr" another-issuer "server auth" >"$pd/other.yaml"
pcr plug "$pd/cn.csr" my-ca >"$pd/cn.yaml"
pcr plug-www "$pd/www.csr" my-ca >"$pd/plug-www.yaml"
pc() { # pc WANT_EXIT -- policy check args...: stdout in $pd/out, stderr in $pd/err
  local want=$1; shift 2
  local rc=0
  timeout 60 "$ctl" policy check "$@" >"$pd/out" 2>"$pd/err" || rc=$?
  [ "$rc" = "$want" ] || { echo "exit $rc, want $want: $(cat "$pd/out" "$pd/err")" >&2; return 1; }
}
pc_is() { # pc_is WANT_EXIT LINE1 LINE2 -- args...: stdout is exactly these two lines
  local want=$1 l1=$2 l2=$3; shift 4
  pc "$want" -- "$@" && [ "$(cat "$pd/out")" = "$l1"$'\n'"$l2" ] ||
    { echo "got: $(cat "$pd/out" "$pd/err")" >&2; return 1; }
}
pc_err() { # pc_err PATTERN -- args...: exit 2, one line on stderr matching, nothing on stdout
  local pat=$1; shift 2
  pc 2 -- "$@" && [ ! -s "$pd/out" ] && [ "$(wc -l <"$pd/err")" = 1 ] && grep -q -- "$pat" "$pd/err" ||
    { echo "got: $(cat "$pd/out" "$pd/err")" >&2; return 1; }
}
ex=$cases/example-com.yaml
denied=$(cat "$cases/example-com.denied")
expect "policy: example.com approves www.example.com" pc_is 0 Approved \
  'Approved by CertificateRequestPolicy: "example-com"' -- --policy "$ex" --request "$pd/www.yaml"
expect "policy: example.com denies *.example.com with the approver's message (shared case)" pc_is 1 Denied \
  "$denied" -- --policy "$ex" --request "$pd/wild.yaml"
# The same objects as JSON (as the API server returns them).
$py -c 'import json, sys, yaml
for a, b in zip(sys.argv[1::2], sys.argv[2::2]):
    json.dump(yaml.safe_load(open(a)), open(b, "w"), indent=2)' "$ex" "$pd/ex.json" "$pd/wild.yaml" "$pd/wild.json"
expect "policy: JSON policy and request, the same message" pc_is 1 Denied "$denied" \
  -- --policy "$pd/ex.json" --request "$pd/wild.json"
pc_json() { # the verdict as one JSON object
  pc 1 -- --policy "$ex" --request "$pd/wild.yaml" --output json &&
    $py -c 'import json, sys
want = {"verdict": "Denied", "reason": "policy.cert-manager.io", "message": sys.argv[2]}
sys.exit(0 if json.load(open(sys.argv[1])) == want else 1)' "$pd/out" "$denied"
}
expect "policy: --output json" pc_json
expect "policy: another issuer is not selected (exit 3)" pc_is 3 "NotApplicable (NotSelected)" \
  "spec.selector.issuerRef does not select the request's issuerRef (name \"another-issuer\", kind \"Issuer\", group \"cert-manager.io\")" \
  -- --policy "$ex" --request "$pd/other.yaml"
# As published, the example's rule is a YAML tag: refused, with the fix.
sed "s/rule: \"!self.contains('\*')\"/rule: !self.contains('*')/" "$ex" >"$pd/ex-tag.yaml"
expect "policy: the published example's unquoted rule is a tag: say to quote it" pc_err \
  "line 19: the tag !self.contains('\*') is not supported .*quote it" -- --policy "$pd/ex-tag.yaml" --request "$pd/www.yaml"
printf '%s\n' 'apiVersion: policy.cert-manager.io/v1alpha1' 'kind: CertificateRequestPolicy' 'metadata: {name: with-cel}' \
  'spec:' '  allowed:' '    dnsNames:' '      values: ["*"]' '      validations:' \
  "        - rule: \"self.endsWith('.cel'\"" '  selector: {issuerRef: {}}' >"$pd/notready.yaml"
pc_not_ready() {
  pc 3 -- --policy "$pd/notready.yaml" --request "$pd/www.yaml" && [ "$(sed -n 1p "$pd/out")" = "NotApplicable (NotReady)" ] &&
    sed -n 2p "$pd/out" | grep -qF "CertificateRequestPolicy is not ready for approval evaluation: spec.allowed.dnsNames.validations[0]: Invalid value: \"self.endsWith('.cel'\""
}
expect "policy: NotReady is not applicable (exit 3), with the Ready condition's message" pc_not_ready
printf '%s\n' 'apiVersion: policy.cert-manager.io/v1alpha1' 'kind: CertificateRequestPolicy' 'metadata: {name: team-a-only}' \
  'spec:' '  allowed:' '    commonName: {value: "*"}' '    dnsNames: {values: ["*.example.com"]}' \
  '    usages: ["server auth"]' '  selector:' '    issuerRef: {}' '    namespace:' '      matchLabels: {team: a}' \
  >"$pd/labels.yaml"
expect "policy: matchLabels without --namespace-labels says what to give" pc_err \
  "selects namespaces by label .*--namespace-labels" -- --policy "$pd/labels.yaml" --request "$pd/www.yaml"
expect "policy: matchLabels, the namespace's labels match" pc_is 0 Approved \
  'Approved by CertificateRequestPolicy: "team-a-only"' -- --policy "$pd/labels.yaml" --request "$pd/www.yaml" \
  --namespace-labels team=a,env=prod
expect "policy: matchLabels, a namespace without labels" pc_is 3 "NotApplicable (NotSelected)" \
  "spec.selector.namespace does not select namespace team-a" -- --policy "$pd/labels.yaml" \
  --request "$pd/www.yaml" --namespace-labels ''
expect "policy: a label that is not k=v" pc_err "\"team\" is not key=value" -- --policy "$pd/labels.yaml" \
  --request "$pd/www.yaml" --namespace-labels team
# approver-policy's plugin example (docs/examples/plugin.yaml).
printf '%s\n' 'apiVersion: policy.cert-manager.io/v1alpha1' 'kind: CertificateRequestPolicy' 'metadata:' \
  '  name: plugin-some-example' 'spec:' '  allowed:' '    commonName:' '      value: "example.com"' '  plugins:' \
  '    rego:' '      values:' '       my-ref: "hello-world"' '  selector:' '    issuerRef:' '      name: my-ca' \
  '      kind: Issuer' '      group: cert-manager.io' >"$pd/plugin.yaml"
expect "policy: its rules pass, its plugins decide: no verdict offline (exit 4), never Approved" pc_is 4 \
  "Undecided (Plugins)" "the policy's rules pass; its plugins (spec.plugins: rego) decide, and signetctl cannot run them" \
  -- --policy "$pd/plugin.yaml" --request "$pd/cn.yaml"
expect "policy: plugins, but the rules deny: Denied" pc 1 -- --policy "$pd/plugin.yaml" --request "$pd/plug-www.yaml"
# The design's ExternalPolicyServers: named, never called offline.
printf '%s\n' 'apiVersion: policy.cert-manager.io/v1alpha1' 'kind: CertificateRequestPolicy' 'metadata:' \
  '  name: with-servers' 'spec:' '  allowed:' '    commonName:' '      value: "example.com"' \
  '  externalPolicyServers: [istio-csr, spiffe]' '  selector:' '    issuerRef:' '      name: my-ca' >"$pd/eps.yaml"
expect "policy: its rules pass, its ExternalPolicyServers decide: exit 4, never Approved" pc_is 4 \
  "Undecided (ExternalPolicyServers)" \
  "the policy's rules pass; its ExternalPolicyServers (spec.externalPolicyServers: istio-csr, ...) decide, and signetctl cannot call them" \
  -- --policy "$pd/eps.yaml" --request "$pd/cn.yaml"
expect "policy: ExternalPolicyServers, but the rules deny: Denied" pc 1 -- --policy "$pd/eps.yaml" --request "$pd/plug-www.yaml"
# Hostile and wrong inputs: exit 2, one line, at once.
head -c 2000000 /dev/zero | tr '\0' ' ' >"$pd/huge.yaml"
expect "policy: a file over 1.5 MiB" pc_err "larger than 1572864 bytes" -- --policy "$pd/huge.yaml" --request "$pd/www.yaml"
$py -c 'print("a: " + "[" * 300000 + "]" * 300000)' >"$pd/deep.yaml"
expect "policy: 300,000 nested flow sequences (YAML)" pc_err "nested deeper than 64" -- --policy "$pd/deep.yaml" --request "$pd/www.yaml"
$py -c 'print("a:\n" + "".join("  " * i + "b:\n" for i in range(1, 100)))' >"$pd/deep-block.yaml"
expect "policy: 100 nested mappings (YAML)" pc_err "nested deeper than 64" -- --policy "$pd/deep-block.yaml" --request "$pd/www.yaml"
$py -c 'print("{\"a\": " + "[" * 100 + "]" * 100 + "}")' >"$pd/deep.json"
expect "policy: 100 nested arrays (JSON)" pc_err "nested deeper than 64" -- --policy "$pd/deep.json" --request "$pd/www.yaml"
$py -c 'print("{\"a\": " + "[" * 300000 + "]" * 300000 + "}")' >"$pd/deeper.json"
expect "policy: 300,000 nested arrays (JSON)" pc_err "not JSON" -- --policy "$pd/deeper.json" --request "$pd/www.yaml"
$py -c 'print("a: &a [x, x, x, x, x, x, x, x, x, x]")
for i, n in enumerate("bcdef"):
    print("%s: &%s [%s]" % (n, n, ", ".join(["*" + "abcdef"[i]] * 10)))' >"$pd/laughs.yaml"
expect "policy: a billion laughs" pc_err "too large or too deep" -- --policy "$pd/laughs.yaml" --request "$pd/www.yaml"
printf -- '- a\n- b\n' >"$pd/list.yaml"
expect "policy: not an object" pc_err "not a mapping" -- --policy "$pd/list.yaml" --request "$pd/www.yaml"
expect "policy: the request where the policy belongs" pc_err "want kind CertificateRequestPolicy" -- --policy "$pd/www.yaml" --request "$pd/www.yaml"
expect "policy: the policy where the request belongs" pc_err "want kind CertificateRequest," -- --policy "$ex" --request "$ex"
printf 'apiVersion: v1\nkind: List\nitems: []\n' >"$pd/klist.yaml"
expect "policy: a List" pc_err "a List; give one CertificateRequestPolicy per file" -- --policy "$pd/klist.yaml" --request "$pd/www.yaml"
{ cat "$pd/www.yaml"; echo ---; cat "$pd/wild.yaml"; } >"$pd/two.yaml"
expect "policy: two documents" pc_err "a second document at line" -- --policy "$ex" --request "$pd/two.yaml"
sed 's/^  request: .*/  request: "not base64!"/' "$pd/www.yaml" >"$pd/bad64.yaml"
expect "policy: spec.request is not base64" pc_err "spec.request: request is not base64" -- --policy "$ex" --request "$pd/bad64.yaml"
sed "s/^  request: .*/  request: $(printf 'not a CSR' | base64 -w0)/" "$pd/www.yaml" >"$pd/badcsr.yaml"
expect "policy: spec.request is not a CSR" pc_err "spec.request: .*CSR" -- --policy "$ex" --request "$pd/badcsr.yaml"
sed '/^  namespace:/d' "$pd/www.yaml" >"$pd/nons.yaml"
expect "policy: a request without its namespace" pc_err "metadata.namespace is missing" -- --policy "$ex" --request "$pd/nons.yaml"
expect "policy: --policy and --request are required" pc_err "are required" -- --policy "$ex"
expect "policy: --help documents the exit codes; signetctl --help lists the command" bash -c \
  "'$ctl' policy check --help | grep -q '  4  no verdict offline' && '$ctl' --help | grep -q '  policy check '"

# --- token --count: a load test's pool from one process --------------------
tc=$tmp/ecdsa-p256/signet.conf
(umask 077 && "$ctl" token --config "$tc" --namespace bench --service-account pod --ttl 1h --count 5 >"$tmp/pool")
expect "token --count 5: five lines" test "$(wc -l <"$tmp/pool")" = 5
expect "token --count 5: five distinct tokens" test "$(sort -u "$tmp/pool" | wc -l)" = 5
# The n-th lives 1h plus n seconds; all name the same account.
expect "token --count 5: token n lives 1h + n s, each for bench/pod" $py - "$tmp/pool" <<'EOF'
import base64, json, sys
lives, subs = [], set()
for line in open(sys.argv[1]):
    part = line.strip().split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    lives.append(claims["exp"] - claims["iat"])
    subs.add(claims["sub"])
sys.exit(0 if lives == [3600 + n for n in range(5)] and subs == {"system:serviceaccount:bench:pod"} else 1)
EOF
expect "token --count 0: exit 2" one_line_error 2 "--count: 0 is out of range" -- "$ctl" token --config "$tc" --namespace a --service-account b --count 0
expect "token --count past 48 h of life: exit 1" one_line_error 1 "goes past the 48h" -- "$ctl" token --config "$tc" --namespace a --service-account b --ttl 47h --count 3602

# --- rotate: a rotation record signetctl did not write is refused whole ----
# The record (rotation.state beside signet.conf) is written atomically by
# signetctl rotate; one edited, damaged or from a newer version must stop
# every step with the reason, not be acted on in part. A copy of a CA's
# folder, so the CA the other cases use is untouched.
rd=$tmp/rotate-hostile
cp -a "$tmp/ecdsa-p256" "$rd"
good='phase = begun
generation = 2
old-key = pkcs11:token=signet;object=ca
new-key = pkcs11:token=signet;object=ca-g2
old-cert = /nonexistent/root-cert.pem
old-root-cert = /nonexistent/root-cert.pem
key-type = 0
ca-name = signet
ca-ttl = 315360000
since = 1764000000
activated-at = 0
wait = 0
keep-old-key = 0
intermediate = 0
has-chain = 0
new-root = 0
subject = '
rotate_refused() { # rotate_refused NAME PATTERN RECORD
  printf '%s\n' "$3" >"$rd/rotation.state"
  expect "rotate: $1" one_line_error 1 "not a rotation record signetctl rotate wrote.*$2" -- \
    "$ctl" rotate status --config "$rd/signet.conf"
}
rotate_refused "a number with trailing text" "generation is not an integer" "${good/generation = 2/generation = 2x}"
rotate_refused "a number past 64 bits" "generation is not an integer" \
  "${good/generation = 2/generation = 99999999999999999999999}"
rotate_refused "generation 1 (init's own)" "generation is not an integer from 2" "${good/generation = 2/generation = 1}"
rotate_refused "a key type signet does not have" "key-type is not an integer from 0 to" "${good/key-type = 0/key-type = 99}"
rotate_refused "a flag that is neither 0 nor 1" "keep-old-key is not an integer from 0 to 1" \
  "${good/keep-old-key = 0/keep-old-key = 2}"
rotate_refused "a negative time" "wait is not an integer from 0" "${good/wait = 0/wait = -5}"
rotate_refused "an unknown phase" "its phase is not one of" "${good/phase = begun/phase = exploded}"
rotate_refused "a name given twice" "phase given twice" "$good
phase = finished"
rotate_refused "an unknown name" "unknown name \"frobnicate\"" "$good
frobnicate = 1"
rotate_refused "a line without ' = '" "line 3 is not" "${good/old-key = /old-key:}"
rotate_refused "a value longer than its field" "new-key is longer than 1023 bytes" \
  "${good/new-key = pkcs11:/new-key = pkcs11:$(printf 'x%.0s' $(seq 1100))}"
rotate_refused "a control byte" "line 17 holds a control byte" "$good$(printf 'CN=a\033[2J')"
rotate_refused "no keys" "lacks the phase, generation, keys" "$(printf '%s\n' "$good" | grep -v '^new-key')"
printf 'phase = begun\ngeneration = 2\0\nold-key = x\n' >"$rd/rotation.state"
expect "rotate: a NUL byte" one_line_error 1 "holds a NUL byte" -- "$ctl" rotate status --config "$rd/signet.conf"
rm -f "$rd/rotation.state"
expect "rotate: no record is no rotation yet" "$ctl" rotate status --config "$rd/signet.conf"

echo "$failures failed"
[ "$failures" = 0 ]
