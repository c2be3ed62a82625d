#!/usr/bin/env bash
# Installs the Debian 12 packages signet needs, and only those missing.
#   packaging/deps.sh run    building and running the appliance
#   packaging/deps.sh test   plus compilers, sanitizer runtimes and test tools
set -euo pipefail

run_pkgs=(build-essential cmake pkg-config libssl-dev openssl softhsm2 libsofthsm2
          p11-kit libp11-kit-dev libjemalloc-dev libgrpc-dev protobuf-c-compiler curl
          libprotobuf-c-dev libprotobuf-dev libjansson-dev libmicrohttpd-dev libgnutls28-dev libcurl4-openssl-dev
          libyaml-dev ca-certificates libsystemd-dev p11-kit-modules libre2-dev libabsl-dev)
test_pkgs=(clang libclang-rt-14-dev g++ libbenchmark-dev python3-cryptography python3-yaml strace
           python3-grpcio python3-grpc-tools python3-h2 gdb golang-cfssl dpkg-dev golang-go rsync etcd-server
           golang-github-modern-go-reflect2-dev
           rpm rpmlint systemd mmdebstrap umoci
           libnss3 libnss3-tools opensc swtpm swtpm-tools tpm2-tools tpm2-abrmd libtss2-tcti-tabrmd0
           libtpm2-pkcs11-1 libtpm2-pkcs11-tools opencryptoki dbus-daemon dbus-bin)

want=("${run_pkgs[@]}")
[ "${1:-run}" = test ] && want+=("${test_pkgs[@]}")

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing: ${missing[*]}" >&2
if [ "$(id -u)" -ne 0 ]; then sudo=sudo; else sudo=; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The portability stage starts its own pkcsslotd on a reset soft token
# (tests/hsm/modules/opencryptoki.sh); a test machine that runs systemd has
# just had the package's own started. Only when this run installed it.
case " ${missing[*]} " in
  *" opencryptoki "*)
    if [ -d /run/systemd/system ]; then
      $sudo systemctl disable --now pkcsslotd.service >/dev/null 2>&1 || true
    fi ;;
esac
