#!/usr/bin/env bash
# Builds a real kube-apiserver and kube-controller-manager from Debian 12's
# `kubernetes` source package and caches them; prints one binary's path as
# the last line of stdout.
#
#   tests/kube/build-apiserver.sh                       kube-apiserver's path
#   tests/kube/build-apiserver.sh --controller-manager  kube-controller-manager's
#
# Both forms build (or find cached) both binaries: they are one build
# product, so whichever server test runs first (each has a long TIMEOUT and
# RUN_SERIAL) pays for both, and a test asking for the controller manager
# later finds it cached.
#
# Debian 12 packages no Kubernetes server binaries (only kubectl), but the
# source package (1.20.2) builds them with Debian's Go. The steps:
#   1. a deb-src entry for bookworm main (a file of our own,
#      /etc/apt/sources.list.d/signet-src.sources, only if no deb-src entry
#      exists yet; the stock debian.sources is never edited);
#   2. the build dependencies: dpkg-dev (apt-get source), golang-go, rsync
#      (kube's build scripts), golang-github-modern-go-reflect2-dev;
#      etcd-server and curl are installed too, since apiserver.sh needs them;
#   3. `apt-get source kubernetes` into a scratch folder;
#   4. vendor/github.com/modern-go/reflect2 replaced with Debian's 1.0.2: the
#      vendored 1.0.1 panics on Go >= 1.18 when decoding maps (its unsafe
#      map iterator no longer matches the runtime's hiter layout);
#   5. `make WHAT="cmd/kube-apiserver cmd/kube-controller-manager"` with
#      CGO_ENABLED=0, vendored modules only and no module proxy (no network
#      beyond apt). One make shares the generated code and the compiled
#      packages (client-go, apimachinery, most of pkg/) between the two; a
#      binary already cached is not built again (an older cache holding only
#      kube-apiserver gets just the controller manager). Go compiles with
#      -p = the number of cores (its default), so nothing else is needed to
#      keep a 2-core machine to 2 jobs.
#
# The binaries are cached side by side at
#   ${XDG_CACHE_HOME:-$HOME/.cache}/signet/kube-apiserver-<debian version>/
#     kube-apiserver, kube-controller-manager
# so a new Debian upload of the source package builds again. With both
# cached the script reads the source version from apt's local index (a
# read-only `apt-cache showsrc`, no network, no lock, no install) and exits
# in well under a second. SIGNET_KUBE_APISERVER=/path/to/kube-apiserver and
# SIGNET_KUBE_CONTROLLER_MANAGER=/path/to/kube-controller-manager skip all
# of this for their own form and are printed as is.
#
# Build times on 2 cores (plus apt the first time): kube-apiserver alone took
# 7 to 10 minutes; the controller manager alone, added to a cache that held
# kube-apiserver already, took 4 min 37 s (277 s of make; 4 min 43 s with
# `apt-get source`). Both in one run have not been timed: expect about 10 to
# 13 minutes, the second binary reusing most of the first's packages.
# Scratch space under ${TMPDIR:-/var/tmp} (source tree, generated code and
# the Go build cache, deleted afterwards) was about 1.7 GiB for kube-apiserver
# alone. The cached binaries are about 105 MiB (kube-apiserver) and 99 MiB
# (kube-controller-manager). A lock on the cache folder serialises concurrent
# runs.
set -euo pipefail

log() { printf 'build-apiserver: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# want: the binary whose path is printed; override: its SIGNET_KUBE_* value.
case ${1:-} in
  '') want=kube-apiserver override=${SIGNET_KUBE_APISERVER:-} var=SIGNET_KUBE_APISERVER ;;
  --controller-manager)
    want=kube-controller-manager override=${SIGNET_KUBE_CONTROLLER_MANAGER:-}
    var=SIGNET_KUBE_CONTROLLER_MANAGER ;;
  *) echo "usage: $0 [--controller-manager]" >&2; exit 2 ;;
esac
bins=(kube-apiserver kube-controller-manager)

if [ -n "$override" ]; then
  [ -x "$override" ] || die "$var=$override is not executable"
  echo "$override"
  exit 0
fi

cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/signet
src_list=/etc/apt/sources.list.d/signet-src.sources

# The newest `kubernetes` source version in apt's local index, or nothing.
source_version() {
  command -v apt-cache >/dev/null || return 0
  apt-cache showsrc --only-source kubernetes 2>/dev/null |
    sed -n 's/^Version: //p' | sort -V | tail -n 1
}

# True if the folder $1 holds every binary of $bins.
complete() {
  local b
  for b in "${bins[@]}"; do [ -x "$1/$b" ] || return 1; done
}

# Fast path: the cached binaries for the version apt knows about. When the
# index has no sources at all (deb-src removed), the newest complete cached
# build still serves rather than reconfiguring apt.
fast_path() {
  local v d
  v=$(source_version)
  if [ -n "$v" ]; then
    d=$cache_root/kube-apiserver-$v
    complete "$d" && { echo "$d/$want"; return 0; }
    return 1
  fi
  [ ! -e "$src_list" ] || return 1
  while read -r d; do
    complete "$d" && { echo "$d/$want"; return 0; }
  done < <(find "$cache_root" -mindepth 1 -maxdepth 1 -type d -name 'kube-apiserver-*' 2>/dev/null | sort -Vr)
  return 1
}
fast_path && exit 0

mkdir -p "$cache_root"
exec 9>"$cache_root/.build-apiserver.lock"
flock 9
fast_path && exit 0   # another run finished the build while we waited

if [ "$(id -u)" -ne 0 ]; then sudo=sudo; else sudo=; fi
export DEBIAN_FRONTEND=noninteractive

# 1. deb-src for bookworm main, only if no deb-src entry exists at all.
have_deb_src() {
  grep -qsE '^[[:space:]]*deb-src[[:space:]]' /etc/apt/sources.list /etc/apt/sources.list.d/*.list && return 0
  grep -qsiE '^Types:.*deb-src' /etc/apt/sources.list.d/*.sources && return 0
  return 1
}
# The archive this machine already installs bookworm main from: the first
# deb822 stanza (any *.sources file) whose Types list deb and whose Suites
# list bookworm, else the first one-line "deb URI bookworm ... main" entry.
# No archive is ever assumed: a machine without one gets a clear error.
bookworm_uri() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    awk '
      function flush() { if (deb && suite && uri != "") { print uri; found = 1; exit } deb = suite = 0; uri = "" }
      /^[[:space:]]*$/ { flush(); next }
      tolower($1) == "types:"  { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
      tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == "bookworm") suite = 1 }
      tolower($1) == "uris:"   { uri = $2 }
      END { if (!found) flush() }' "$f" | head -n 1
  done | head -n 1
  # Either file may be absent (a deb822-only machine): that is no error.
  { cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true; } |
    awk '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                       if ($(i + 1) == "bookworm") { print $i; exit } }'
}

updated=no
if ! have_deb_src; then
  uri=$(bookworm_uri | head -n 1) || uri=""
  [ -n "$uri" ] || die "no apt source for bookworm found in /etc/apt/sources.list or /etc/apt/sources.list.d/; add the Debian 12 archive this machine should use, then run again"
  log "adding $src_list (deb-src $uri bookworm main)"
  $sudo tee "$src_list" >/dev/null <<EOF
# Added by signet tests/kube/build-apiserver.sh: source packages, to build
# kube-apiserver and kube-controller-manager from Debian's kubernetes source
# package.
Types: deb-src
URIs: $uri
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  $sudo apt-get update -qq
  updated=yes
fi

# 2. Packages, only those missing.
pkgs=(dpkg-dev golang-go rsync etcd-server golang-github-modern-go-reflect2-dev curl openssl)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
version=$(source_version)
if [ ${#missing[@]} -gt 0 ] || [ -z "$version" ]; then
  [ "$updated" = yes ] || $sudo apt-get update -qq
  version=$(source_version)
fi
if [ ${#missing[@]} -gt 0 ]; then
  log "installing: ${missing[*]}"
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[ -n "$version" ] || die "apt knows no 'kubernetes' source package (is deb-src for bookworm main configured?)"

out_dir=$cache_root/kube-apiserver-$version
if complete "$out_dir"; then echo "$out_dir/$want"; exit 0; fi
# Only what is missing: a cache from before the controller manager was
# added keeps its kube-apiserver (a running test may be using it).
todo=()
for b in "${bins[@]}"; do [ -x "$out_dir/$b" ] || todo+=("$b"); done

# 3. The source, in a scratch folder removed on exit.
scratch=$(mktemp -d "${TMPDIR:-/var/tmp}/signet-kube-build.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
log "fetching kubernetes $version source into $scratch"
(cd "$scratch" && apt-get source -qq --only-source "kubernetes=$version" >/dev/null 2>"$scratch/apt-source.log") ||
  { cat "$scratch/apt-source.log" >&2; die "apt-get source kubernetes=$version failed"; }
tree=$(find "$scratch" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*' | head -n 1)
[ -f "$tree/Makefile" ] || die "no kubernetes source tree unpacked in $scratch"

# 4. Debian's reflect2 1.0.2 in place of the vendored 1.0.1.
r2_src=/usr/share/gocode/src/github.com/modern-go/reflect2
r2_dst=$tree/vendor/github.com/modern-go/reflect2
[ -d "$r2_src" ] || die "$r2_src missing (golang-github-modern-go-reflect2-dev)"
[ -d "$r2_dst" ] || die "$r2_dst missing: the source tree has no vendored reflect2"
rm -rf "$r2_dst"
cp -rL "$r2_src" "$r2_dst"
rm -f "$r2_dst/go.mod" "$r2_dst/go.sum"

# 5. Build. KUBE_GIT_VERSION gives /version a real answer without .git.
upstream=${version%%-*}          # 1.20.2+really1.20.2
upstream=${upstream##*really}    # 1.20.2
upstream=${upstream%%+*}
what=${todo[*]/#/cmd/}
log "building ${todo[*]} v$upstream with $(go version | awk '{print $3}') (5 to 13 minutes on 2 cores)"
start=$(date +%s)
(
  cd "$tree"
  export CGO_ENABLED=0 GOFLAGS=-mod=vendor GOPROXY=off GOSUMDB=off GO111MODULE=on
  export GOCACHE=$scratch/gocache GOPATH=$scratch/gopath
  export KUBE_GIT_VERSION=v$upstream KUBE_GIT_TREE_STATE=clean
  make WHAT="$what" >"$scratch/build.log" 2>&1
) || { tail -n 40 "$scratch/build.log" >&2; die "make WHAT=\"$what\" failed"; }
log "built in $(( $(date +%s) - start )) s"

# Each binary in place by rename, so a concurrent reader of the cache never
# sees half a file.
mkdir -p "$out_dir"
for b in "${todo[@]}"; do
  bin=$(find "$tree/_output" -type f -name "$b" -perm -u+x | head -n 1)
  [ -n "$bin" ] || die "the build produced no $b"
  cp "$bin" "$out_dir/$b.tmp"
  mv "$out_dir/$b.tmp" "$out_dir/$b"
done
echo "$out_dir/$want"
