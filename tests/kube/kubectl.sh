#!/usr/bin/env bash
# Prints the path of Debian 12's kubectl (package kubernetes-client,
# Kubernetes 1.20.2 with its built-in kustomize v2.0.3), fetched once and
# cached, never installed.
#
#   tests/kube/kubectl.sh        the kubectl's path, as the last line of stdout
#
# Why not the kubectl on PATH: a machine may have none, or another version
# (a newer kubectl speaks a newer kustomize dialect, so a test would pass
# or fail by machine), and Debian's kubernetes-client conflicts with other
# kubectl packages, so it is not installed either. The version is the one
# build-apiserver.sh builds the API server from: the newest `kubernetes`
# source version in apt's local index (both come from the same source
# package), else, without deb-src entries, the candidate version of the
# binary package kubernetes-client.
#
# The steps, the first time only:
#   1. `apt-get download kubernetes-client=<version>` into a scratch folder
#      (no root needed; `apt-get update` first, with sudo when not root,
#      only if the local index does not know the package);
#   2. `dpkg-deb -x` of that .deb into the same scratch folder;
#   3. its usr/bin/kubectl copied to
#        ${XDG_CACHE_HOME:-$HOME/.cache}/signet/kubectl-<version>/kubectl
#      by rename, so a concurrent reader never sees half a file.
# Later runs read the version from apt's local index (no network, no lock)
# and print the cached path. When apt knows no version at all, the newest
# cached kubectl serves. SIGNET_KUBECTL=/path/to/kubectl skips all of this
# and is printed as is.
set -euo pipefail

log() { printf 'kubectl.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

if [ -n "${SIGNET_KUBECTL:-}" ]; then
  [ -x "$SIGNET_KUBECTL" ] || die "SIGNET_KUBECTL=$SIGNET_KUBECTL is not executable"
  echo "$SIGNET_KUBECTL"
  exit 0
fi

cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/signet

# The version to fetch: the API server's source version, else the
# candidate of kubernetes-client; nothing if apt knows neither.
version() {
  command -v apt-cache >/dev/null || return 0
  local v
  v=$(apt-cache showsrc --only-source kubernetes 2>/dev/null | sed -n 's/^Version: //p' | sort -V | tail -n 1)
  if [ -z "$v" ]; then
    v=$(apt-cache policy kubernetes-client 2>/dev/null | sed -n 's/^ *Candidate: //p')
    [ "$v" != "(none)" ] || v=
  fi
  echo "$v"
}

fast_path() {
  local v d
  v=$(version)
  if [ -n "$v" ]; then
    [ -x "$cache_root/kubectl-$v/kubectl" ] || return 1
    echo "$cache_root/kubectl-$v/kubectl"
    return 0
  fi
  while read -r d; do
    [ -x "$d/kubectl" ] && { echo "$d/kubectl"; return 0; }
  done < <(find "$cache_root" -mindepth 1 -maxdepth 1 -type d -name 'kubectl-*' 2>/dev/null | sort -Vr)
  return 1
}
fast_path && exit 0

mkdir -p "$cache_root"
exec 9>"$cache_root/.kubectl.lock"
flock 9
fast_path && exit 0   # another run fetched it while we waited

if [ "$(id -u)" -ne 0 ]; then sudo=sudo; else sudo=; fi
v=$(version)
if [ -z "$v" ] || ! apt-cache show "kubernetes-client=$v" >/dev/null 2>&1; then
  log "apt-get update (the local index does not know kubernetes-client${v:+=$v})"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get update -qq
  v=$(version)
fi
[ -n "$v" ] || die "apt knows no kubernetes-client package (is Debian 12's main in the apt sources?)"

# 1-2. Download and unpack, in a scratch folder removed on exit.
scratch=$(mktemp -d "${TMPDIR:-/var/tmp}/signet-kubectl.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
log "fetching kubernetes-client $v"
(cd "$scratch" && apt-get download -qq "kubernetes-client=$v" >"$scratch/download.log" 2>&1) ||
  { cat "$scratch/download.log" >&2; die "apt-get download kubernetes-client=$v failed"; }
deb=$(find "$scratch" -maxdepth 1 -name 'kubernetes-client_*.deb' | head -n 1)
[ -n "$deb" ] || die "apt-get download left no kubernetes-client .deb in $scratch"
dpkg-deb -x "$deb" "$scratch/root"
[ -x "$scratch/root/usr/bin/kubectl" ] || die "$deb holds no usr/bin/kubectl"

# 3. Into the cache by rename.
out_dir=$cache_root/kubectl-$v
mkdir -p "$out_dir"
cp "$scratch/root/usr/bin/kubectl" "$out_dir/kubectl.tmp"
mv "$out_dir/kubectl.tmp" "$out_dir/kubectl"
echo "$out_dir/kubectl"
