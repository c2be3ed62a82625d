#!/usr/bin/env bash
# End-to-end: signetctl init / issue / csr / import / status on real SoftHSM2
# tokens; every chain verified by `openssl verify` and checked field by field
# by check_cert.py; secrets kept out of logs and argv; errors are one line.
set -euo pipefail
ctl=$1
check=$2
py=/usr/bin/python3
tmp=$(mktemp -d "${SIGNET_TEST_TMP:-/tmp}/ctl.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
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
  ASAN_OPTIONS=detect_leaks=0 strace -f -qq -e trace=execve -s 256 -o "$tmp/$kt.trace" \
    "$ctl" init --dir "$d" --key-type "$kt" --log-level debug >"$tmp/$kt.log" 2>&1 || { fail "init $kt"; cat "$tmp/$kt.log"; continue; }
  pass "init $kt"
  expect "$kt: pin and so-pin are 0600" test "$(stat -c %a "$d/pin")/$(stat -c %a "$d/so-pin")" = 600/600
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
  expect "$kt: status reports a healthy HSM" bash -c "'$ctl' status --config '$d/signet.conf' | grep -q '^hsm *ok'"
done
d=$tmp/ecdsa-p256

# --- refusals and errors --------------------------------------------------
# Names, types, modes, sizes, mtimes and contents of everything under $d, and
# nothing outside it: `ls -la` would also list "..", whose mtime moves when
# this script writes into $tmp.
snapshot() { (cd "$1" && find . -printf '%p %y %m %s %T@\n' | sort && find . -type f -exec sha256sum {} + | sort) | sha256sum; }
before=$(snapshot "$d")
if "$ctl" init --dir "$d" 2>"$tmp/err"; then fail "init refuses an existing folder"; else pass "init refuses an existing folder"; fi
expect "refusal says why" grep -q "not empty" "$tmp/err"
expect "refused init changed nothing" test "$before" = "$(snapshot "$d")"

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
expect "--help documents every setting" bash -c "'$ctl' issue --help | grep -q -- '--verify-issued' && '$ctl' issue --help | grep -q -- '--hsm-copy-key'"

# GNU forms: --name=value, bare booleans, --name=false; flags override the file.
expect "--name=value and bare booleans" "$ctl" issue --config="$d/signet.conf" --csr="$tmp/p256.csr" \
  --signer-threads=2 --verify-issued --hsm-copy-key=false --out "$tmp/forms.pem"
expect "flag overrides config (bad root-cert refused)" one_line_error 1 "nonexistent" -- \
  "$ctl" issue --config "$d/signet.conf" --csr "$tmp/p256.csr" --root-cert "$tmp/nonexistent.pem"

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

echo "$failures failed"
[ "$failures" = 0 ]
