#!/usr/bin/env bash
# signet's OCI image, built without a container daemon.
#
#   packaging/image.sh OUTDIR
#
# writes the image as an OCI layout in OUTDIR/oci, tag "latest" (signetd),
# and the same root under the tags signetd, signet-trust, signet-operator and
# signet-agent, each with its program as the entry point (the Kubernetes
# manifests' images signetd:0.1.0, signet-trust:0.1.0, signet-operator:0.1.0,
# signet-agent:0.1.0). To use them:
#   podman pull oci:OUTDIR/oci:latest && podman tag <id> signetd:0.1.0
#   skopeo copy oci:OUTDIR/oci:signet-trust docker-daemon:signet-trust:0.1.0  (Docker)
#   skopeo copy oci:OUTDIR/oci:signetd docker://REGISTRY/signetd:0.1.0        (a registry)
#
# The root file system is Debian 12's packages, extracted by mmdebstrap
# (variant extract: unpacked, no maintainer script run), of exactly the
# shared libraries signet's programs load (found with ldd on the built
# programs and mapped to packages with dpkg -S), SoftHSM2's PKCS#11 module
# (libsofthsm2) and p11-kit's client module (p11-kit-modules), and
# ca-certificates' bundle. From that staging root, image/rootfs.py copies
# only the programs' and modules' library closure: no shell, no apt, no
# dpkg database, no docs but the packages' copyright files. One layer,
# assembled with umoci (no container daemon); signetd in /usr/sbin,
# signetctl, signet-trust, signet-operator and signet-agent in /usr/bin;
# user 65532
# "signet"; /var/lib/signet, owned by it, is the one writable place (a
# volume): the image runs with a read-only root.
#
# Environment:
#   SIGNET_BUILD_DIR    an existing Release build of signet to take the
#                       programs from (default: build one in OUTDIR/build)
#   SIGNET_APT_SOURCES  a sources file (deb822 or one-line) for mmdebstrap
#                       (default: this machine's own Debian 12 sources,
#                       from /etc/apt, see image/apt-sources.py)
#   SIGNET_CACHE        cache folder (default ~/.cache/signet); downloaded
#                       .debs are kept in SIGNET_CACHE/image-debs
#   SOURCE_DATE_EPOCH   the image's creation time (default: now)
#   JOBS                build parallelism (default 2)
# Needs root (mmdebstrap's root mode; umoci records the files' owners, and
# /var/lib/signet belongs to 65532) and: mmdebstrap umoci readelf dpkg-deb
# ldd python3 cmake (packaging/deps.sh test installs them).
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "image.sh: run as root (files owned by 65532 in the image)" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
suite=bookworm
uid=65532
version=$(sed -n 's/^project(signet VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
[ -n "$version" ] || { echo "image.sh: no version in CMakeLists.txt" >&2; exit 1; }
triplet=$(gcc -print-multiarch 2>/dev/null || dpkg-architecture -qDEB_HOST_MULTIARCH)
arch=$(dpkg --print-architecture)
log() { echo "image.sh: $*" >&2; }

# ---- 1. signet's programs, in Release -------------------------------------
build=${SIGNET_BUILD_DIR:-$out/build}
if [ -z "${SIGNET_BUILD_DIR:-}" ]; then
  log "building signet (Release) in $build"
  cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" -j"${JOBS:-2}" --target signetd signetctl signet-trust signet-operator signet-agent >/dev/null
fi
type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build/CMakeCache.txt")
[ "$type" = Release ] || { log "$build is a '$type' build, not Release"; exit 1; }
declare -A prog=([daemon/signetd]=usr/sbin/signetd [ctl/signetctl]=usr/bin/signetctl
                 [trust/signet-trust]=usr/bin/signet-trust [operator/signet-operator]=usr/bin/signet-operator
                 [agent/signet-agent]=usr/bin/signet-agent)
bins=()
for p in "${!prog[@]}"; do
  [ -x "$build/$p" ] || { log "$build/$p is not built"; exit 1; }
  bins+=("$build/$p")
done
modules=(/usr/lib/softhsm/libsofthsm2.so "/usr/lib/$triplet/pkcs11/p11-kit-client.so")

# ---- 2. the Debian packages they need -------------------------------------
# Every library ldd finds for the programs, mapped to its package on this
# machine (dpkg -S knows /usr/lib/... and, before /usr was merged, /lib/...).
pkgs=(libsofthsm2 p11-kit-modules ca-certificates)
for lib in $(ldd "${bins[@]}" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u); do
  real=$(readlink -f "$lib")
  pkg=""
  for cand in "$lib" "$real" "${lib#/usr}" "/usr${lib#/usr}" "${real#/usr}" "/usr${real#/usr}"; do
    pkg=$(dpkg -S "$cand" 2>/dev/null | head -1 | cut -d: -f1) && [ -n "$pkg" ] && break
  done
  [ -n "$pkg" ] || { log "no Debian package holds $lib"; exit 1; }
  pkgs+=("$pkg")
done
mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)
log "packages: ${pkgs[*]}"

cache=${SIGNET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/signet}/image-debs
mkdir -p "$cache"
work=$(mktemp -d "$out/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT
if [ -n "${SIGNET_APT_SOURCES:-}" ]; then
  cp "$SIGNET_APT_SOURCES" "$work/signet.sources"
else
  python3 "$here/image/apt-sources.py" "$suite" > "$work/signet.sources"
fi
# Debs come from and go back to the cache (mmdebstrap's sync-in/sync-out
# hooks); the extract hook also records which debs this root is made of.
mmdebstrap --quiet --variant=extract --include="$(IFS=,; echo "${pkgs[*]}")" \
  --aptopt='Acquire::Languages "none"' \
  --setup-hook='mkdir -p "$1"/var/cache/apt/archives/' \
  --setup-hook="sync-in '$cache' /var/cache/apt/archives/" \
  --extract-hook="sync-out /var/cache/apt/archives '$cache'" \
  --extract-hook="ls \"\$1\"/var/cache/apt/archives/ > '$work/debs.txt'" \
  "$suite" "$work/stage" "$work/signet.sources"
# Keep the cache to the versions just used.
(cd "$cache" && for f in *.deb; do grep -qxF "$f" "$work/debs.txt" || rm -f "$f"; done)

# ---- 3. the root file system ----------------------------------------------
root=$work/rootfs
mkdir -p "$root"
adds=()
for p in "${!prog[@]}"; do adds+=(--add "$build/$p:${prog[$p]}"); done
keeps=()
for m in "${modules[@]}"; do keeps+=(--keep "$m"); done
python3 "$here/image/rootfs.py" --stage "$work/stage" --out "$root" --debs "$cache" \
  --deb-list "$work/debs.txt" --triplet "$triplet" "${adds[@]}" "${keeps[@]}" --keep-package ca-certificates
strip --strip-unneeded "$root/usr/sbin/signetd" "$root"/usr/bin/signet*
# ca-certificates' bundle, as update-ca-certificates writes it from every
# Mozilla certificate (its postinst does not run in an extracted root).
install -d -m 0755 "$root/etc/ssl/certs"
find "$work/stage/usr/share/ca-certificates/mozilla" -name '*.crt' | LC_ALL=C sort | xargs cat \
  > "$root/etc/ssl/certs/ca-certificates.crt"
# OpenSSL's default file (OPENSSLDIR/cert.pem; Debian's openssl package,
# not in the image, would otherwise provide the directory): the same bundle.
install -d -m 0755 "$root/usr/lib/ssl"
ln -s /etc/ssl/certs/ca-certificates.crt "$root/usr/lib/ssl/cert.pem"
printf 'root:x:0:0:root:/root:/sbin/nologin\nsignet:x:%s:%s:signet:/var/lib/signet:/sbin/nologin\n' \
  "$uid" "$uid" > "$root/etc/passwd"
printf 'root:x:0:\nsignet:x:%s:\n' "$uid" > "$root/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' > "$root/etc/nsswitch.conf"
# Mount points: /run for a p11-kit server's socket folder (packaging/README.md).
install -d -m 0755 "$root/proc" "$root/sys" "$root/dev" "$root/run" "$root/etc" "$root/var/lib" "$root/root"
# ld.so's lookup cache of the root's library folders (faster start; the
# image works without it).
ldconfig -r "$root" -f /dev/null 2>/dev/null || rm -f "$root/etc/ld.so.cache"
install -d -m 0700 -o "$uid" -g "$uid" "$root/var/lib/signet"
install -d -m 1777 "$root/tmp"
chmod 0755 "$root"
for bad in bin/sh usr/bin/sh bin/bash usr/bin/dpkg usr/bin/apt var/lib/dpkg; do
  [ ! -e "$root/$bad" ] || { log "$bad is in the root"; exit 1; }
done

# ---- 4. the OCI image (umoci, no daemon) ----------------------------------
created=$(date -u -d "@${SOURCE_DATE_EPOCH:-$(date +%s)}" +%Y-%m-%dT%H:%M:%SZ)
rev=$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)
rm -rf "$out/oci"
umoci init --layout "$out/oci"
umoci new --image "$out/oci:latest"
umoci insert --image "$out/oci:latest" --history.created "$created" \
  --history.created_by "packaging/image.sh (mmdebstrap $suite, signet $version)" "$root" /
cfg=(--created "$created" --author "signet" --architecture "$arch" --os linux
     --config.user "$uid:$uid" --config.workingdir /var/lib/signet
     --config.env PATH=/usr/sbin:/usr/bin --config.env HOME=/var/lib/signet
     --config.entrypoint /usr/sbin/signetd
     --config.cmd --init-dir=/var/lib/signet --config.cmd --serving-address=0.0.0.0:6443
     --config.cmd --http-address=0.0.0.0
     --config.exposedports 6443/tcp --config.exposedports 9402/tcp --config.exposedports 6060/tcp
     --config.volume /var/lib/signet --config.stopsignal SIGTERM)
labels=(
  "org.opencontainers.image.title=signetd"
  "org.opencontainers.image.description=signet: HSM-backed CA/RA for service meshes (signetd, signetctl, signet-trust, signet-operator, signet-agent)"
  "org.opencontainers.image.version=$version"
  "org.opencontainers.image.licenses=Apache-2.0"
  "org.opencontainers.image.revision=$rev"
  "org.opencontainers.image.created=$created"
  "org.opencontainers.image.base.name=debian:$suite (packages extracted by mmdebstrap)"
)
for l in "${labels[@]}"; do cfg+=(--config.label "$l" --manifest.annotation "$l"); done
umoci config --image "$out/oci:latest" --history.created "$created" --history.created_by "image.sh config" "${cfg[@]}"
# The names the Kubernetes manifests use (signetd:0.1.0, signet-trust:0.1.0,
# signet-operator:0.1.0, signet-agent:0.1.0): the same layer under four more
# tags, each with
# its program as the entry point and no default arguments (the manifests
# give them), so a Deployment needs no `command:`.
umoci config --image "$out/oci:latest" --tag signetd --no-history
for p in signet-trust signet-operator signet-agent; do
  umoci config --image "$out/oci:latest" --tag "$p" --no-history --clear config.cmd \
    --config.entrypoint "/usr/bin/$p" --config.label "org.opencontainers.image.title=$p" \
    --manifest.annotation "org.opencontainers.image.title=$p"
done
umoci gc --layout "$out/oci"

# ---- 5. sizes ---------------------------------------------------------------
manifest=$(python3 - "$out/oci" <<'PY'
import json, sys, os
oci = sys.argv[1]
idx = json.load(open(os.path.join(oci, "index.json")))
d = next(m for m in idx["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == "latest")
man = json.load(open(os.path.join(oci, "blobs", *d["digest"].split(":"))))
print(sum(l["size"] for l in man["layers"]))
PY
)
log "image $out/oci:latest: layers $((manifest / 1024)) KiB compressed, root $(du -sk "$root" | cut -f1) KiB unpacked"
